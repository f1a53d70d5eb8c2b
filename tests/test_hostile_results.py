"""Issue 30, "wrong results" and "tracebacks" in the training and evaluation paths: every row is a case a careless or
hostile user ran. A result row asserts the right number (never a fake one); a refusal row asserts exit 2, one
`error:` line and no traceback."""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.training.monitor import read_metrics
from hf_encoderize.training.schedule import default_decay, default_warmup, wsd_factor

LR = 1e-3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 120, lambda i: 4 + i % 9)


def _cpt(decoder_dir, corpus, out, *extra) -> list[str]:
    return ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--learning-rate", str(LR), "--eval-steps", "0", "--no-progress", "--output-dir", str(out), *extra]


@pytest.fixture(scope="module")
def run6(decoder_dir, corpus, tmp_path_factory):
    """Six steps, warmup 2, decay 2, a checkpoint every 2 steps (all kept)."""
    out = tmp_path_factory.mktemp("runs") / "six"
    assert main(_cpt(decoder_dir, corpus, out, "--max-steps", "6", "--warmup-steps", "2", "--decay-steps", "2",
                     "--save-steps", "2", "--save-total-limit", "5")) == 0
    return out


def _train_lrs(out: Path) -> list[float]:
    return [r["lr"] for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]


# ------------------------------------------------------------------------------------------------ wrong results
def test_every_step_of_any_run_length_gets_a_nonzero_lr():
    """A run of N steps applies N updates: the decay reaches zero after the last one, not on it."""
    for steps in (1, 2, 3, 5, 10, 100, 12000):
        warmup, decay = default_warmup(steps), default_decay(steps)
        assert all(wsd_factor(s, steps, warmup, decay) > 0 for s in range(steps)), steps
        assert wsd_factor(steps, steps, warmup, decay) == 0.0  # the step after the last would be at zero


def test_cpt_steps_1_trains(decoder_dir, corpus, tmp_path):
    out = tmp_path / "one"
    assert main(_cpt(decoder_dir, corpus, out, "--max-steps", "1")) == 0
    assert _train_lrs(out) == [pytest.approx(LR)]  # warmup 1 and decay 1 of a 1-step run: the peak, once


def test_metrics_lr_is_the_lr_the_step_used(run6):
    # warmup 2: steps 1, 2 at 1/2 and 1 x peak; decay 2: the last two at 1 and 1/2 x peak, zero after the run
    assert _train_lrs(run6) == pytest.approx([LR / 2, LR, LR, LR, LR, LR / 2])


def test_no_masked_token_in_the_held_out_rows_is_no_score(decoder_dir, corpus, tmp_path):
    out = tmp_path / "tiny-ratio"
    assert main(_cpt(decoder_dir, corpus, out, "--max-steps", "2", "--mlm-probability", "1e-6")) == 0
    evals = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals and all(r["eval_loss"] is None for r in evals), evals
    assert json.loads((out / "run_record.json").read_text())["eval_loss"] is None


def test_saved_encoder_folder_follows_the_umask(run6):
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((run6 / "encoder").stat().st_mode) == 0o777 & ~umask


def test_truncated_last_metrics_line_still_resumes(run6, decoder_dir, corpus, tmp_path):
    """kill -9 mid-write leaves half a line at the end of metrics.jsonl; --resume drops it and goes on."""
    out = tmp_path / "cut"
    shutil.copytree(run6, out)
    shutil.rmtree(out / "checkpoints" / "step-0000006")
    shutil.rmtree(out / "encoder")
    (out / "run_record.json").unlink(missing_ok=True)
    text = (out / "metrics.jsonl").read_text()
    (out / "metrics.jsonl").write_text(text[: len(text) - 20])
    assert main(_cpt(decoder_dir, corpus, out, "--max-steps", "6", "--warmup-steps", "2", "--decay-steps", "2",
                     "--save-steps", "2", "--save-total-limit", "5", "--resume")) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------------------ refusals
def _eval(decoder_dir, tmp, *extra) -> list[str]:
    return ["eval", str(decoder_dir), "--profile", "smoke", "--datasets", "syn-sentiment", "--max-steps", "2",
            "--batch-size", "4", "--max-seq-length", "32", "--output-dir", str(tmp / "evals"), *extra]


def _a_file(tmp: Path) -> str:
    (tmp / "a-file").write_text("mine")
    return str(tmp / "a-file")


def _rejected_config(decoder_dir, tmp: Path) -> str:
    """A copy of the tiny decoder whose config transformers' validators reject: 5 heads for hidden 64."""
    folder = tmp / "five-heads"
    shutil.copytree(decoder_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=64, num_attention_heads=5, num_key_value_heads=5)
    config.pop("head_dim", None)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _custom_code(decoder_dir, tmp: Path) -> str:
    """A copy of the tiny decoder whose config.json names a module of its own (auto_map)."""
    folder = tmp / "custom"
    shutil.copytree(decoder_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="mything", auto_map={"AutoConfig": "configuration_x.MyConfig",
                                                  "AutoModelForCausalLM": "modeling_x.MyModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_x.py").write_text("from transformers import LlamaConfig\n\n\nclass MyConfig(LlamaConfig):"
                                               "\n    model_type = 'mything'\n")
    (folder / "modeling_x.py").write_text("raise SystemExit('folder code ran')\n")
    return str(folder)


def _beir(tmp: Path) -> str:
    """A one-query local BEIR folder: `eval --mteb` reads it offline."""
    beir = tmp / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "w1 w2"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "w1"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return str(beir)


def _empty(tmp: Path, content: str = "") -> str:
    (tmp / "empty.jsonl").write_text(content)
    return str(tmp / "empty.jsonl")


def _contrastive(source, data, tmp, *extra) -> list[str]:
    return ["contrastive", str(source), "--data-files", str(data), "--output-dir", str(tmp / "con"), "--max-steps", "2",
            "--batch-size", "4", *extra]


REJECTED = "is rejected by transformers: The hidden size (64) is not a multiple of the number of attention heads (5)"
CUSTOM = "ships its own model code (configuration_x.MyConfig, modeling_x.MyModel)"

REFUSALS = {
    # issue 41, round 2's leftovers and round 3's tracebacks
    "run eval list with nothing to evaluate": (
        lambda d, c, run, tmp: ["run", str(d), "--data-files", str(c), "--output-dir", str(tmp / "cpt"),
                                "--eval-profile", "none", "--eval-seeds", "0,x"],
        "--eval-seeds set with --eval-profile none"),
    "eval seed overflowing": (lambda d, c, run, tmp: _eval(d, tmp, "--seeds", "99999999999999999999999"),
                              "--seeds must be at least 0 and at most 4294967295"),
    "eval output dir that is a file": (lambda d, c, run, tmp: _eval(d, tmp, "--output-dir", _a_file(tmp)),
                                       "is a file; pass a folder"),
    "eval output dir under a file": (lambda d, c, run, tmp: _eval(d, tmp, "--output-dir", f"{_a_file(tmp)}/x"),
                                     "is a file; pass a folder"),
    "eval mteb on a GPU this machine lacks": (
        lambda d, c, run, tmp: ["eval", str(run / "encoder"), "--mteb", _beir(tmp), "--device", "cuda:7",
                                "--output-dir", str(tmp / "evals")], "--device cuda:7"),
    "convert of a config transformers rejects": (
        lambda d, c, run, tmp: ["convert", _rejected_config(d, tmp), str(tmp / "conv")], REJECTED),
    "cpt of a config transformers rejects": (
        lambda d, c, run, tmp: _cpt(_rejected_config(d, tmp), c, tmp / "cpt", "--max-steps", "1"), REJECTED),
    "eval of a config transformers rejects": (lambda d, c, run, tmp: _eval(_rejected_config(d, tmp), tmp), REJECTED),
    "convert of folder code without the flag": (
        lambda d, c, run, tmp: ["convert", _custom_code(d, tmp), str(tmp / "conv")], f"{CUSTOM}, which runs only "
        "with --trust-remote-code"),
    "contrastive of folder code": (lambda d, c, run, tmp: _contrastive(_custom_code(d, tmp), c, tmp), CUSTOM),
    "contrastive on an empty JSONL": (lambda d, c, run, tmp: _contrastive(run / "encoder", _empty(tmp), tmp),
                                      "holds no rows (empty or blank file)"),
    "contrastive on a blank JSONL": (lambda d, c, run, tmp: _contrastive(run / "encoder", _empty(tmp, "\n\n"), tmp),
                                     "holds no rows (empty or blank file)"),
    "export at the branch point": (
        lambda d, c, run, tmp: _cpt(d, c, tmp / "branch", "--max-steps", "6", "--warmup-steps", "2", "--decay-steps",
                                    "2",
                                    "--from-checkpoint", str(run / "checkpoints" / "step-0000002"),
                                    "--export-steps", "2,5"),
        "--export-steps 2"),
    "eval name with path parts": (lambda d, c, run, tmp: _eval(d, tmp, "--name", "../../x"), "--name"),
    "eval name that is a path": (lambda d, c, run, tmp: _eval(d, tmp, "--name", "/tmp/x"), "--name"),
    "unknown eval device": (lambda d, c, run, tmp: _eval(d, tmp, "--device", "tpu9"), "--device"),
    "qa stride at a short max length": (
        lambda d, c, run, tmp: [*_eval(d, tmp, "--datasets", "syn-qa"), "--max-seq-length", "8"], "--max-seq-length"),
    "lora target typo": (lambda d, c, run, tmp: _cpt(d, c, tmp / "lora", "--max-steps", "2", "--lora-r", "4",
                                                     "--lora-targets", "q_prjo,v_proj"), "q_prjo"),
    "flex attention on cpu": (
        lambda d, c, run, tmp: _cpt(d, c, tmp / "flex", "--max-steps", "2", "--attn-implementation", "flex_attention"),
        "flex_attention"),
    "contrastive seq length above the positions": (
        lambda d, c, run, tmp: ["contrastive", str(run / "encoder"), "--data-files", str(c), "--output-dir",
                                str(tmp / "con"), "--max-steps", "2", "--batch-size", "4", "--max-seq-length",
                                "100000"],
        "--max-seq-length"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_in_one_line(case, decoder_dir, corpus, run6, tmp_path, capsys):
    make_args, wording = REFUSALS[case]
    capsys.readouterr()
    code = main(make_args(decoder_dir, corpus, run6, tmp_path))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith("error:") and wording in lines[-1], err[-3000:]
    assert sum(line.startswith("error:") for line in lines) == 1, err[-3000:]
    assert not (tmp_path / "evals").exists() and not (tmp_path / "branch").exists()
    assert not any((tmp_path / name).exists() for name in ("conv", "cpt", "con"))


def test_doctor_says_a_rejected_config_does_not_convert(decoder_dir, tmp_path, capsys):
    """doctor reports a verdict (exit 0), not a traceback."""
    code = main(["doctor", "--model", _rejected_config(decoder_dir, tmp_path)])
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err, captured.err[-3000:]
    assert f"does not convert: config.json of {str(tmp_path / 'five-heads')!r} {REJECTED}" in captured.out


def test_a_finished_eval_of_another_protocol_advises_what_each_command_has(tmp_path):
    """`run` has no --name, yet the line advised it (issue 41): `eval`'s line names its own options, and `run` gives
    its own advice (tests/test_hostile_leftovers.py::test_run_advises_only_what_run_has runs it)."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.evaluation.grid import is_finished

    (tmp_path / "results.json").write_text(json.dumps({"fingerprint": {"lr": 1e-4, "seed": 0}}))
    with pytest.raises(EncoderizeError) as refused:
        is_finished(tmp_path, {"lr": 2e-4, "seed": 0})
    assert "a new --output-dir or --name" in str(refused.value)
    with pytest.raises(EncoderizeError) as refused:
        is_finished(tmp_path, {"lr": 2e-4, "seed": 0}, advice="delete it to redo it")
    assert str(refused.value).endswith("(lr differ); delete it to redo it")
