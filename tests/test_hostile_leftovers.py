"""The last defects of two audits: round 3's two `run` leftovers (issue 51) and round 2's last five (issue 54).

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import json
import shutil

import pytest
from conftest import one_error

from hf_encoderize.cli import main

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--no-progress", "--logging-steps",
        "100"]


def _docs(path):
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(200)))
    return path


# ------------------------------------------------------------------------------------------------ run (issue 51)


def _run_argv(decoder_dir, tmp_path):
    return ["run", str(decoder_dir), "--data-files", str(_docs(tmp_path / "docs.jsonl")), "--output-dir",
            str(tmp_path / "run"), "--max-steps", "2", *TINY, "--eval-profile", "smoke", "--eval-datasets",
            "syn-sentiment", "--eval-max-steps", "2", "--eval-seeds", "0", "--eval-base", "none"]


def test_run_advises_only_what_run_has(decoder_dir, tmp_path, capsys):
    """Round 3's leftover: `run --eval-frozen`, then `run` without it, advised `--name`, which `run` does not have."""
    out, argv = tmp_path / "run", _run_argv(decoder_dir, tmp_path)
    assert main([*argv, "--eval-frozen"]) == 0
    frozen = (out / "eval" / "encoder" / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(argv) == 2
    said = one_error(capsys.readouterr().err, "frozen differ", "`run` keeps one evaluation of encoder",
                     "--eval-* options it was made with", f"delete {out / 'eval' / 'encoder'}")
    assert "--name" not in said
    assert (out / "eval" / "encoder" / "summary.json").read_bytes() == frozen  # refused, nothing replaced
    shutil.rmtree(out / "eval" / "encoder")  # what the line advises
    assert main(argv) == 0
    assert not json.loads((out / "eval" / "encoder" / "summary.json").read_text())["protocol"].get("frozen")


def test_run_reports_only_the_grid_asked(decoder_dir, tmp_path, capsys):
    """Round 3's leftover: `run` re-run with other --eval-learning-rates reused the earlier rate's runs and reported a
    grid of both (its best rate chosen over both), where the user asked for one."""
    out, argv = tmp_path / "run", _run_argv(decoder_dir, tmp_path)
    assert main([*argv, "--eval-learning-rates", "1e-4"]) == 0
    assert main([*argv, "--eval-learning-rates", "2e-4"]) == 0
    summary = json.loads((out / "eval" / "encoder" / "summary.json").read_text())
    assert summary["protocol"]["lrs"] == ["0.0002"] and list(summary["results"][0]["per_lr"]) == ["0.0002"]
    capsys.readouterr()
    assert main([*argv, "--eval-learning-rates", "1e-4,2e-4"]) == 0  # both asked: both reused, both shown
    assert "lr=0.0001 seed=0: finished earlier, skipped" in capsys.readouterr().err
    summary = json.loads((out / "eval" / "encoder" / "summary.json").read_text())
    assert summary["protocol"]["lrs"] == ["0.0001", "0.0002"]


# ------------------------------------------------------------------------------------------------ issue 54


@pytest.mark.parametrize("command", ["contrastive", "cpt"])
def test_one_broken_jsonl_is_one_error_line(command, encoder, tmp_path, capsys):
    """A cut line 6 printed datasets' own log record re-labelled as ours (`error: [datasets.packaged_modules.json.json]
    Failed to load JSON ...`), then our line: two `error:` lines for one broken file."""
    rows = [json.dumps({"text": f"w{i} w{i + 1} w{i + 2} w{i + 3}"}) for i in range(40)]
    rows[5] = rows[5][:12]  # line 6 cut short
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(rows) + "\n")
    argv = ["--data-files", str(data), "--output-dir", str(tmp_path / "out"), "--max-steps", "2", "--batch-size", "4",
            "--no-progress"]
    argv += ["--max-seq-length", "16"] if command == "contrastive" else ["--max-seq-length", "16", "--eval-documents",
                                                                        "4"]
    capsys.readouterr()
    assert main([command, str(encoder), *argv]) == 2
    err = capsys.readouterr().err
    one_error(err, "d.jsonl", "line 6")
    assert "[datasets" not in err  # our line says it, with the line number a person counts from
    assert not (tmp_path / "out").exists()


def test_a_library_error_record_is_never_an_error_line(capsys):
    """Only a command's own refusal starts with `error:`: a library's error record keeps its name and level after it."""
    import logging

    from hf_encoderize.common.log import setup_logging, teardown_logging

    setup_logging(0)
    try:  # a library that logs through the root logger (transformers, once imported, prints through its own handler)
        logging.getLogger("somelibrary.something").error("a library's own complaint")
        logging.getLogger("datasets.packaged_modules.json.json").error("Failed to load JSON from file 'd.jsonl' ...")
    finally:
        teardown_logging()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[somelibrary.something] error: a library's own complaint"]
    assert not any(line.startswith("error:") for line in lines)


# A contrastive run held open at one point (the flag file says it got there) until the release file appears.
HELD_RUN = """
import pathlib, sys, time
from sentence_transformers import SentenceTransformerTrainer
from hf_encoderize.common import outputs
there, release, where = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
def hold():
    there.touch()
    while not release.exists():
        time.sleep(0.05)
if where == "training":
    real_train = SentenceTransformerTrainer.train
    SentenceTransformerTrainer.train = lambda self, *a, **k: (hold(), real_train(self, *a, **k))[1]
else:  # its output written and marked, its work folder (which holds the lock) not yet removed
    real_mark = outputs.write_marker
    outputs.write_marker = lambda *a, **k: (real_mark(*a, **k), hold())[0]
from hf_encoderize.cli import main
sys.exit(main(sys.argv[4:]))
"""


@pytest.mark.parametrize("where", ["training", "its output written and marked"])
def test_an_overwrite_while_a_contrastive_run_is_live_is_refused(where, encoder, text, tmp_path, capsys):
    """Two `contrastive` runs into one folder, the second with --overwrite while the first was training: both exited 0.
    The lock covers the stage from its first write to its last: the second is refused, the first finishes whole."""
    import subprocess
    import sys
    import time

    out = tmp_path / "simcse"
    argv = ["contrastive", str(encoder), "--data-files", str(text), "--output-dir", str(out), "--max-steps", "4",
            "--batch-size", "8", "--save-steps", "2", "--max-seq-length", "16", "--no-progress", "--overwrite"]
    assert main(argv) == 0  # a finished output: what an --overwrite replaces, but not while a run is live
    there, release = tmp_path / "there", tmp_path / "release"
    first = subprocess.Popen([sys.executable, "-c", HELD_RUN, str(there), str(release),
                              "training" if where == "training" else "written", *argv],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while not there.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert there.exists(), first.communicate(timeout=60)
        before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        capsys.readouterr()
        assert main(argv) == 2
        one_error(capsys.readouterr().err, "in use by a running contrastive")
        assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    finally:
        release.touch()
        stdout, stderr = first.communicate(timeout=240)
    assert first.returncode == 0, stderr[-3000:]
    assert (out / "model.safetensors").is_file() and (out / "contrastive_run.json").is_file()


def test_the_card_describes_a_local_data_file_and_names_a_hub_dataset():
    """`contrastive --data-files home/alice/secret-project/customer-emails.jsonl`, then `push`: the card said "on 200
    rows of `customer-emails.jsonl`". A local file is described; a Hub dataset is named."""
    from hf_encoderize.publish.card_rows import _training_rows, contrastive_text
    from hf_encoderize.records.contrastive_record import ContrastiveRecord
    from hf_encoderize.records.run_record import RunRecord

    secret = "home/alice/secret-project/customer-emails.jsonl"
    stage = {"objective": "simcse", "loss": "mnrl", "rows": 200, "steps": 6, "batch_size": 8}
    said = contrastive_text(ContrastiveRecord.from_dict({"config": {"data_files": secret}, "stage": stage}))
    assert "on 200 rows of a local JSONL file;" in said and "customer-emails" not in said and "alice" not in said
    hub = contrastive_text(ContrastiveRecord.from_dict({"config": {"dataset": "sentence-transformers/all-nli"},
                                                        "stage": stage}))
    assert "on 200 rows of `sentence-transformers/all-nli`;" in hub
    data_row = dict(_training_rows(RunRecord.from_dict({"data": {"data_files": secret, "seq_len": 32}})))["Data"]
    assert data_row.startswith("a local JSONL file, rows of 32 tokens") and "customer-emails" not in data_row


def test_data_name_is_recorded_and_names_the_local_corpus_on_the_pushed_card(decoder_dir, tmp_path, capsys):
    """Round 2's leftover: a user who wants the card to name a local corpus says how (`--data-name`); the name is
    recorded in the run record and the pushed card shows it beside the description, never the path."""
    from hf_encoderize.publish.hub import encoder_upload

    secret = tmp_path / "alice" / "customer-emails.jsonl"
    secret.parent.mkdir()
    out = tmp_path / "run"
    assert main(["cpt", str(decoder_dir), "--data-files", str(_docs(secret)), "--data-name", "Support tickets 2025",
                 "--max-steps", "2", "--output-dir", str(out), *TINY]) == 0
    assert json.loads((out / "run_record.json").read_text())["data"]["data_name"] == "Support tickets 2025"
    pushed = encoder_upload(out / "encoder", "someone/run")[1]["README.md"].decode()
    data_row = next(line for line in pushed.splitlines() if line.startswith("| Data |"))
    assert "`Support tickets 2025` (a local JSONL file), rows of 32 tokens" in data_row
    assert "customer-emails" not in pushed and "alice" not in pushed


@pytest.mark.parametrize("extra, needle", [
    (["--data-name", "two\nlines"], "--data-name must be one line"),
    (["--data-name", "a | b"], "--data-name must be one line"),
    (["--dataset", "org/corpus", "--data-name", "x"], "a Hub dataset is named by its id"),
])
def test_a_bad_data_name_is_one_error_line_before_anything_is_written(decoder_dir, tmp_path, capsys, extra, needle):
    out = tmp_path / "run"
    source = [] if "--dataset" in extra else ["--data-files", str(_docs(tmp_path / "docs.jsonl"))]
    assert main(["cpt", str(decoder_dir), *source, *extra, "--max-steps", "2", "--output-dir", str(out), *TINY]) == 2
    assert not out.exists()
    one_error(capsys.readouterr().err, needle)


def test_contrastive_data_name_reaches_the_card_row():
    from hf_encoderize.publish.card_rows import contrastive_text
    from hf_encoderize.records.contrastive_record import ContrastiveRecord

    stage = {"objective": "simcse", "loss": "mnrl", "rows": 200, "steps": 6, "batch_size": 8}
    said = contrastive_text(ContrastiveRecord.from_dict(
        {"config": {"data_files": "/home/alice/emails.jsonl", "data_name": "Support tickets"}, "stage": stage}))
    assert "on 200 rows of `Support tickets` (a local JSONL file);" in said and "alice" not in said
