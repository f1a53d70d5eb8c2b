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


def _empty(tmp, text=""):
    path = tmp / "empty.jsonl"
    path.write_text(text)
    return path


ROWS = {  # case: (argv from (decoder folder, encoder folder, tmp), what the one error line says)
    "cpt on an empty JSONL (was StopIteration)": (
        lambda dec, enc, tmp: ["cpt", str(dec), "--data-files", str(_empty(tmp)), "--max-steps", "1",
                               "--max-seq-length", "16", "--no-progress", "--output-dir", str(tmp / "out")],
        "empty.jsonl"),
    "cpt on a blank JSONL": (
        lambda dec, enc, tmp: ["cpt", str(dec), "--data-files", str(_empty(tmp, "\n\n")), "--max-steps", "1",
                               "--max-seq-length", "16", "--no-progress", "--output-dir", str(tmp / "out")],
        "empty.jsonl"),
    "contrastive on an empty JSONL (was StopIteration)": (
        lambda dec, enc, tmp: ["contrastive", str(enc), "--data-files", str(_empty(tmp)), "--max-steps", "1",
                               "--no-progress", "--output-dir", str(tmp / "out")], "holds no rows"),
}


@pytest.mark.parametrize("case", list(ROWS))
def test_refused_in_one_line_with_nothing_written(case, decoder_dir, encoder, tmp_path, capsys):
    argv = ROWS[case][0](decoder_dir, encoder, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and ROWS[case][1] in errors[0] and "Traceback" not in err, err[-3000:]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before and not (tmp_path / "out").exists()


def test_the_token_budget_line_of_a_data_files_run_advises_its_own_options(tmp_path):
    """It advised --dataset-config (a Hub option) for a --data-files run."""
    from conftest import make_tokenizer, write_corpus

    from hf_encoderize.data.budget import check_token_budget
    from hf_encoderize.data.sources import DataConfig, open_documents

    corpus = write_corpus(tmp_path / "docs.jsonl", 100, lambda i: 10)
    cfg = DataConfig(data_files=str(corpus), seq_len=10, eval_documents=0)
    lines = []
    check_token_budget(cfg, open_documents(cfg), make_tokenizer(), rows_per_step=10, steps=30, say=lines.append)
    assert len(lines) == 1 and "--dataset-config" not in lines[0] and "--data-files" in lines[0], lines


def test_a_gguf_file_with_nan_embeddings_is_not_verified():
    """A NaN cosine is not `< threshold`: the GGUF check called NaN embeddings "verified" too."""
    from hf_encoderize.publish import export_guard, gguf_export

    assert gguf_export.verdict is export_guard.verdict  # one rule for both formats
    for cosine in (float("nan"), None, float("inf") * 0):
        said = gguf_export.verdict({"min_cosine": cosine}, 0.99, "llama.cpp")
        assert said.startswith("not kept") and "not finite" in said, said
    assert gguf_export.verdict({"min_cosine": 0.995}, 0.99, "llama.cpp") == "verified"
