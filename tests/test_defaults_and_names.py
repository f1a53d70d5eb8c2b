"""Defaults and messages that agree (issue 49, point 7): eval's profile is run's, an offline refusal names the offline
way out, --logging-steps says what it does while the bar is on, extending a run whose warmup was never set keeps
it, and card and push-space name the encoder's Hub repo alike."""

import os

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.pipeline.run import RunConfig

offline = pytest.mark.skipif(os.environ.get("HF_HUB_OFFLINE") in (None, "", "0"), reason="needs HF_HUB_OFFLINE=1")


def test_eval_and_run_default_to_the_same_profile():
    assert EvalConfig().profile == RunConfig().eval.profile == "quick"


@offline
def test_an_offline_eval_names_the_smoke_profile(encoder, tmp_path, capsys):
    assert main(["eval", str(encoder), "--datasets", "sst2", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--profile smoke" in err and "--data-dir" in err, err


@offline
def test_an_offline_cpt_without_data_names_data_files(decoder_dir, tmp_path, capsys):
    assert main(["cpt", str(decoder_dir), "--steps", "2", "--seq-len", "32", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load dataset") and "--data-files" in err, err


def test_logging_steps_says_what_it_does_while_the_bar_is_on(capsys):
    with pytest.raises(SystemExit):
        main(["cpt", "--help"])
    text = capsys.readouterr().out.split("--logging-steps N")[1].split("\n  --")[0]
    assert "progress bar" in " ".join(text.split()), text


def test_extending_a_run_keeps_its_warmup(decoder_dir, tmp_path, monkeypatch, capsys):
    """--resume with a larger --max-steps and no --warmup-steps keeps the warmup the record holds (the default would
    follow --max-steps and be refused); a --warmup-steps given that differs is refused, naming it."""
    import json

    import hf_encoderize.training.engine.loop as loop

    corpus = write_corpus(tmp_path / "docs.jsonl", 200, lambda i: 8)
    real, calls = loop.train_step, []

    def dies_at_step_five(run, **options):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(run, **options)
    out = tmp_path / "run"
    args = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--seq-len", "32", "--batch-size", "2",
            "--save-steps", "4", "--eval-steps", "0", "--no-progress", "--output-dir", str(out)]
    with monkeypatch.context() as patched:
        patched.setattr(loop, "train_step", dies_at_step_five)
        assert main([*args, "--steps", "12"]) == 130  # stopped after the step-4 checkpoint; warmup 12 // 5 = 2
    capsys.readouterr()
    assert main([*args, "--steps", "20", "--resume", "--warmup-steps", "3"]) == 2  # given, and not the run's
    err = capsys.readouterr().err
    (said,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "train.warmup_steps was 2, now 3" in said, err
    assert main([*args, "--steps", "20", "--resume"]) == 0, capsys.readouterr().err  # the default 20 // 5 would be 4
    record = json.loads((out / "run_record.json").read_text())
    assert record["steps"] == 20 and record["warmup_steps"] == 2, record

def test_card_and_push_space_name_the_encoders_hub_repo_alike(encoder, tmp_path, capsys):
    """One name for the encoder's Hub repo: card's --model-id, as push-space's (beside --base-model-id and
    --embedding-model-id); card's old --repo-id still works, hidden, with one line saying the new name."""
    import re
    import shutil

    from hf_encoderize.publish.card import CardConfig

    helps = {}
    for command in ("card", "push-space"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        helps[command] = capsys.readouterr().out
    assert all(re.search(r"^  --model-id\b", text, re.M) for text in helps.values()), helps
    assert "--repo-id" not in helps["card"]
    folder = shutil.copytree(encoder, tmp_path / "encoder")
    assert main(["card", str(folder), "--repo-id", "someone/tiny"]) == 0
    err = capsys.readouterr().err
    assert err.count("--repo-id is now --model-id") == 1, err
    assert "someone/tiny" in (folder / "README.md").read_text()
    assert CardConfig(str(folder), repo_id="someone/tiny").repo_id == "someone/tiny"  # the Python field keeps its name
