"""`--report-to` reaches a tracker from `contrastive` and `eval` too, not only from the training recipes (issue 67
point 4): what each logs is read back from tensorboard's own event files and checked against what the command
wrote to its records. A tracker the command cannot log to is one line, before anything is written; `run`'s one
`--report-to` is every stage's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import contrastive_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD
from hf_encoderize.evaluation import EvalConfig, evaluate
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.pipeline.run import RunConfig, with_trackers
from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the tensorboard event files under `folder`: tag -> [(step, value)], in step order."""
    found: dict[str, list] = {}
    events = sorted(folder.rglob("events.out.tfevents.*"))
    assert events, f"no event file under {folder}"
    for path in events:
        reader = EventAccumulator(str(path))
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            found.setdefault(tag, []).extend((event.step, event.value) for event in reader.Scalars(tag))
    return {tag: sorted(points) for tag, points in found.items()}


def test_eval_logs_each_fine_tuning_runs_scores(encoder, tmp_path):
    cfg = EvalConfig(profile="smoke", datasets="syn-sentiment", seeds="0,1", lrs="1e-3", max_steps=2, batch_size=4,
                     max_length=32, output_dir=str(tmp_path), name="m", report_to="tensorboard")
    evaluate(LoadConfig(str(encoder)), cfg, progress=lambda line: None)
    runs = sorted((tmp_path / "m").glob("sc/syn-sentiment/lr*_sd*/results.json"))
    records = [json.loads(path.read_text()) for path in runs]
    assert len(records) == 2
    logged = scalars(tmp_path / "m" / "trackers")
    assert [step for step, _ in logged["sc/syn-sentiment/test"]] == [1, 2]  # the runs' positions in the grid
    assert [v for _, v in logged["sc/syn-sentiment/test"]] == pytest.approx([r["test"]["score"] for r in records])
    assert [v for _, v in logged["sc/syn-sentiment/validation"]] == pytest.approx(
        [r["validation"]["score"] for r in records])
    assert [v for _, v in logged["sc/syn-sentiment/seed"]] == [0, 1]


def test_eval_refuses_a_tracker_that_is_not_installed_before_writing(encoder, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    out = tmp_path / "results"
    with pytest.raises(EncoderizeError, match="pip install wandb"):
        evaluate(LoadConfig(str(encoder)), EvalConfig(profile="smoke", output_dir=str(out), report_to="wandb"))
    with pytest.raises(EncoderizeError, match="--mteb scores without fine-tuning"):
        evaluate(LoadConfig(str(encoder)), EvalConfig(output_dir=str(out), mteb="STS12", report_to="tensorboard"))
    assert not out.exists()


def test_contrastive_logs_the_trainers_loss_into_its_output_folder(encoder, text, tmp_path):
    out = tmp_path / "st"
    contrastive(contrastive_config(encoder, text, out, report_to="tensorboard"))
    record = json.loads((out / CONTRASTIVE_RECORD).read_text())
    logged = scalars(out / "trackers")  # moved out of the work folder with the model
    assert [v for _, v in logged["train/loss"]] == pytest.approx(record["losses"], rel=1e-6)
    assert [step for step, _ in logged["train/loss"]] == list(range(1, len(record["losses"]) + 1))
    assert not (tmp_path / ".st.work").exists()


def test_contrastive_refuses_a_tracker_its_trainer_has_not(encoder, text, tmp_path):
    """aim is Accelerate's, not transformers': one line that names the ones it has, exit 2, no output folder."""
    out = tmp_path / "st"
    argv = [sys.executable, "-m", "hf_encoderize.cli", "contrastive", str(encoder), "--data-files", str(text),
            "--max-steps", "2", "--output-dir", str(out), "--report-to", "aim"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("error: --report-to aim:") and "tensorboard" in line and "Traceback" not in done.stderr
    assert not out.exists()


def test_runs_report_to_is_every_stages(encoder, text, tmp_path):
    """`run` has one --report-to (cpt's); its contrastive stage and its evaluations log to the same trackers, and
    the stages' own report_to is not an option of `run`."""
    stage = ContrastiveConfig(str(encoder), data_files=str(text), output_dir=str(tmp_path / "c"))
    given = RunConfig(contrastive=stage)
    tracked = with_trackers(given, "tensorboard")
    assert tracked.eval.report_to == tracked.contrastive.report_to == "tensorboard"
    assert given.contrastive.report_to == given.eval.report_to == "none"  # the caller's config is left as it was
    with pytest.raises(EncoderizeError, match="--report-to aim: the contrastive stage"):
        with_trackers(RunConfig(contrastive=stage), "aim")
    assert with_trackers(RunConfig(), "aim").eval.report_to == "aim"  # no contrastive stage: Accelerate's aim is fine
    help_text = _help("run")
    assert "--report-to" in help_text
    assert "--eval-report-to" not in help_text and "--contrastive-report-to" not in help_text


def _help(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.cli", command, "--help"], capture_output=True,
                          text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout
