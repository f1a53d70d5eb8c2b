"""The last defects of two audits: round 3's two `run` leftovers (issue 51) and round 2's last five (issue 54).

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import json
import shutil

import pytest

from hf_encoderize.cli import main

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--no-progress", "--logging-steps",
        "100"]


def one_error(err: str, *needles: str) -> str:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert all(needle in errors[0] for needle in needles), errors[0]
    return errors[0]


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
    try:
        logging.getLogger("transformers.something").error("a library's own complaint")
        logging.getLogger("datasets.packaged_modules.json.json").error("Failed to load JSON from file 'd.jsonl' ...")
    finally:
        teardown_logging()
    assert capsys.readouterr().err.splitlines() == ["[transformers.something] error: a library's own complaint"]
