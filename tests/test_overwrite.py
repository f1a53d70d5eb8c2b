"""`--overwrite` never costs the user a folder: everything is validated before anything is deleted, and a folder
hf-encoderize did not write is never deleted at all. Each case: exit 2, one `error:` line, no traceback, and every file
that was in the folder before is there after, byte for byte."""

from pathlib import Path

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 120, lambda i: 4 + i % 9)


@pytest.fixture(scope="module")
def finished_run(decoder_dir, corpus, tmp_path_factory):
    """A run folder an earlier `cpt` wrote: checkpoints, metrics, record, encoder."""
    out = tmp_path_factory.mktemp("runs") / "earlier"
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--seq-len", "32", "--batch-size", "4",
                 "--steps", "2", "--save-every", "2", "--eval-every", "0", "--no-progress", "--output-dir",
                 str(out)]) == 0
    return out


def _cpt_args(decoder_dir, corpus, out) -> list[str]:
    return ["cpt", str(decoder_dir), "--data-files", str(corpus), "--seq-len", "32", "--batch-size", "4", "--steps",
            "2", "--save-every", "2", "--eval-every", "0", "--no-progress", "--output-dir", str(out), "--overwrite"]


CASES = {
    "missing model folder": (lambda a, tmp: [a[0], str(tmp / "no-such-model"), *a[2:]], "does not exist"),
    "missing data path": (lambda a, tmp: [*a[:3], str(tmp / "none*.jsonl"), *a[4:]], "no .txt/.jsonl"),
    "wrong text column": (lambda a, tmp: [*a, "--text-column", "body"], "text column 'body' not found"),
    "seq-len above the model's limit": (lambda a, tmp: [*a, "--seq-len", "4096"], "above the model's limit"),
    "impossible mask ratio": (lambda a, tmp: [*a, "--mask-ratio", "1.5"], "mask-ratio"),
    "unknown report-to tracker": (lambda a, tmp: [*a, "--report-to", "nosuchtracker"], "unknown tracker"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_overwrite_with_bad_input_keeps_the_earlier_run(case, decoder_dir, corpus, finished_run, tmp_path, capsys):
    before = _snapshot(finished_run)
    make_args, message = CASES[case]
    code = main(make_args(_cpt_args(decoder_dir, corpus, finished_run), tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert _snapshot(finished_run) == before


def test_overwrite_refuses_a_folder_hf_encoderize_did_not_write(decoder_dir, corpus, tmp_path, capsys):
    mine = tmp_path / "thesis"
    (mine / "chapters").mkdir(parents=True)
    (mine / "chapters" / "one.tex").write_text("irreplaceable")
    (mine / "notes.md").write_text("also mine")
    before = _snapshot(mine)
    code = main(_cpt_args(decoder_dir, corpus, mine))
    err = capsys.readouterr().err
    assert code == 2 and "did not write" in err and "rm -r" in err and err.count("\n") == 1, err
    assert _snapshot(mine) == before


def test_an_output_path_that_is_a_file_is_refused(decoder_dir, corpus, tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    code = main(_cpt_args(decoder_dir, corpus, target))
    err = capsys.readouterr().err
    assert code == 2 and "is a file" in err and err.count("\n") == 1, err
    assert target.read_text() == "keep me"


def test_overwrite_replaces_an_earlier_run_when_everything_is_valid(decoder_dir, corpus, finished_run, tmp_path):
    out = tmp_path / "again"
    assert main(_cpt_args(decoder_dir, corpus, out)[:-1]) == 0
    (out / "stale.txt").write_text("left by the earlier run")
    assert main(_cpt_args(decoder_dir, corpus, out)) == 0
    assert not (out / "stale.txt").exists() and (out / "encoder" / "model.safetensors").is_file()
