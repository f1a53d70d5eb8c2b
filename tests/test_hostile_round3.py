"""Issue 41 (hostile input, third round) leftovers of the contrastive stage: step 1 trains and logs the LR it trained
with; the saved files share the modes the umask gives; a resume and `run`'s reuse of the stage count --data-files by
content (an edit in place is other data, `./text.jsonl` for `text.jsonl` the same data).

The audit table of every case of issue 41 and the test that covers it is docs/hostile_input.md."""

import json
import os
import shutil
import stat

import pytest
from conftest import contrastive_config
from test_hostile_contrastive import _argv, _interrupted, _one_error_line

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.recipes.contrastive import contrastive


@pytest.fixture(scope="module")
def finished(encoder, text, tmp_path_factory):
    """A finished 6-step SimCSE stage in RUN/contrastive (as `run` lays it out), trained under umask 027."""
    run = tmp_path_factory.mktemp("round3") / "run"
    data = shutil.copyfile(text, run.parent / "text.jsonl")
    config = contrastive_config(encoder, data, run / "contrastive")
    mask = os.umask(0o027)
    try:
        contrastive(config)
    finally:
        os.umask(mask)
    return run, config


def test_step_one_trains_and_logs_the_lr_it_trained_with(finished):
    """transformers' linear warmup starts at 0: step 1 changed nothing and the record logged learning_rate 0.0."""
    run, config = finished
    metrics = json.loads((run / "contrastive" / "contrastive_run.json").read_text())["metrics"]
    lrs = [entry["learning_rate"] for entry in metrics if "loss" in entry]
    assert lrs[0] > 0 and max(lrs) == pytest.approx(config.learning_rate), lrs  # 1 warmup step of 6: the peak
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] > 0, lrs  # then down, the last step still trains


def test_every_saved_file_has_the_modes_the_umask_gives(finished):
    """model.safetensors was written 0600 (a private temporary file renamed) beside files the umask made 0640."""
    run, _ = finished
    modes = {str(p.relative_to(run)): stat.S_IMODE(p.stat().st_mode) for p in (run / "contrastive").rglob("*")}
    assert {mode for path, mode in modes.items() if not (run / path).is_dir()} == {0o640}, modes
    assert {mode for path, mode in modes.items() if (run / path).is_dir()} <= {0o750}, modes


def test_run_reuses_the_stage_only_on_the_same_data_content(finished, monkeypatch):
    """`run` compared --data-files as path text: an edit in place reused the stage trained on other data, and
    `./text.jsonl` for `text.jsonl` was refused as other data."""
    reuse = pytest.importorskip("hf_encoderize.pipeline.reuse")
    run, config = finished
    assert reuse.contrastive_done(config, run) == "finished earlier"
    monkeypatch.chdir(run.parent)
    assert reuse.contrastive_done(contrastive_config(config.encoder, "./text.jsonl", "x"), run) == "finished earlier"
    data = run.parent / "text.jsonl"
    before = data.read_bytes()
    data.write_bytes(before.replace(b"w1", b"w2", 1))  # same path, same size, other text
    try:
        with pytest.raises(EncoderizeError, match="data_files was"):
            reuse.contrastive_done(config, run)
    finally:
        data.write_bytes(before)


@pytest.mark.parametrize("edit", ["in place", "none, ./ path"])
def test_a_resume_counts_the_data_by_content(edit, encoder, text, tmp_path, monkeypatch, capsys):
    """A resume compared the path text: it continued on a corpus edited in place."""
    data = shutil.copyfile(text, tmp_path / "text.jsonl")
    out = tmp_path / "out"
    _interrupted(encoder, data, out, monkeypatch)
    monkeypatch.chdir(tmp_path)
    if edit == "in place":
        data.write_bytes(data.read_bytes().replace(b"w1", b"w2", 1))
        assert main(_argv(encoder, data, out, "--resume")) == 2
        _one_error_line(capsys, "data_files was", "resume with the same ones")
    else:
        assert main(_argv(encoder, "./text.jsonl", out, "--resume")) == 0
        assert (out / "model.safetensors").is_file()
