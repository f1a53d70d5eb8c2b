"""Issue 51 (hostile input, fourth round): set-up, push, replay, resume identity, text units, negatives, the lock,
the headline recipe and the top-level CLI, each refused in one line or made right.

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import contrastive_config, one_error
from hub_server import fake_hub, make_run_folder  # noqa: F401 (fake_hub is a fixture)

from hf_encoderize.cli import main

ROOT = Path(__file__).resolve().parents[1]

# A stock Python without python3-venv (Debian's case): not a virtual environment, and `-m venv` fails after it has
# made part of the folder, as ensurepip's failure does.
NO_VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then case "$2" in *base_prefix*) echo False ;; *) echo /usr/bin/python3 ;; esac; exit 0; fi
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && touch "$3/pyvenv.cfg"; exit 1; fi
exit 1
"""


def _venv_python(tmp_path, venv):
    fake = tmp_path / "python3"
    fake.write_text(NO_VENV_PYTHON)
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "HF_ENCODERIZE_VENV": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(ROOT / "scripts" / "venv_python.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("before", ["the user's folder with files", "a half-made venv", "an empty folder", "none"])
def test_a_failed_venv_removes_only_what_the_script_made(before, tmp_path):
    """`rm -rf "$venv"` after a failed `-m venv` deleted a folder (and its files) that existed before."""
    venv = tmp_path / "env"
    if before != "none":
        venv.mkdir()
    if before == "the user's folder with files":
        (venv / "NOTES.md").write_text("mine\n")
    if before == "a half-made venv":
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    kept = _files(venv) if venv.exists() else None
    result = _venv_python(tmp_path, venv)
    assert result.returncode == 2 and result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    if before == "none":
        assert not venv.exists()  # the script made it, so it may go
    elif before == "an empty folder":
        assert venv.is_dir() and _files(venv) == {}  # the folder stays, what `-m venv` put in it goes
    else:
        assert _files(venv) == kept
    if before == "the user's folder with files":
        assert "is not a virtual environment" in errors[0] and "HF_ENCODERIZE_VENV" in errors[0]


# ------------------------------------------------------------------------------------------------ push


def test_push_uploads_only_what_the_run_recorded_writing(fake_hub, tmp_path, capsys):  # noqa: F811
    """A file the user put in RUN/encoder/ (no command wrote it) was uploaded; the top-level one was left out."""
    out = make_run_folder(tmp_path)
    assert main(["card", str(out)]) == 0
    (out / "NOTES.md").write_text("private top-level notes\n")
    (out / "encoder" / "NOTES.md").write_text("private notes inside the encoder\n")
    (out / "encoder" / "drafts").mkdir()
    (out / "encoder" / "drafts" / "todo.txt").write_text("private\n")
    before = _files(out)
    capsys.readouterr()
    assert main(["push", str(out), "someone/enc", "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert "NOTES.md" not in dry.out and "todo.txt" not in dry.out and "model.safetensors" in dry.out
    assert main(["push", str(out), "someone/enc"]) == 0
    pushed = capsys.readouterr()
    uploaded = fake_hub.files("someone/enc")
    assert "model.safetensors" in uploaded and "README.md" in uploaded and "config.json" in uploaded
    assert not [name for name in uploaded if "NOTES" in name or "drafts" in name], sorted(uploaded)
    for said in (dry.err, pushed.err):  # what is left out is named, once
        notes = [line for line in said.splitlines() if "left out of the upload, as no hf-encoderize" in line]
        assert len(notes) == 1 and "NOTES.md" in notes[0] and "drafts/todo.txt" in notes[0], said
    assert _files(out) == before


# ------------------------------------------------------------------------------------------------ replay

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--save-steps", "100", "--no-progress",
        "--logging-steps", "100", "--eval-steps", "0"]


def _docs(path: Path, shift: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i + shift) % 120}" for i in range(6 + d % 20))})
                            + "\n" for d in range(120)))
    return path


@pytest.fixture(scope="module")
def replayable(decoder_dir, tmp_path_factory):
    """A finished 2-step cpt run on the relative path `docs.jsonl`, started in its own folder."""
    home = tmp_path_factory.mktemp("replay")
    _docs(home / "docs.jsonl")
    cwd = os.getcwd()
    os.chdir(home)
    try:
        assert main(["cpt", str(decoder_dir), "--data-files", "docs.jsonl", "--max-steps", "2", "--output-dir",
                     "first", *TINY]) == 0
    finally:
        os.chdir(cwd)
    return home


@pytest.mark.parametrize("where", ["another folder, other docs.jsonl", "the same folder, docs.jsonl edited"])
def test_a_replay_on_other_data_is_refused(where, replayable, decoder_dir, tmp_path, monkeypatch, capsys):
    """`--config RUN/run_settings.json` replayed the relative data path and ignored the recorded content: from another
    folder it trained on another docs.jsonl, exit 0, no word."""
    settings = replayable / "first" / "run_settings.json"
    if where.startswith("another"):
        _docs(tmp_path / "docs.jsonl", shift=3)
        monkeypatch.chdir(tmp_path)
    else:
        shutil.copytree(replayable, tmp_path / "home")
        settings = tmp_path / "home" / "first" / "run_settings.json"
        _docs(tmp_path / "home" / "docs.jsonl", shift=3)
        monkeypatch.chdir(tmp_path / "home")
    capsys.readouterr()
    assert main(["cpt", str(decoder_dir), "--config", str(settings), "--output-dir", "again", "--no-progress"]) == 2
    one_error(capsys.readouterr().err, "--data-files 'docs.jsonl'", "other data", "give --data-files")
    assert not Path("again").exists()


def test_a_replay_on_the_same_data_from_elsewhere_runs(replayable, decoder_dir, tmp_path, monkeypatch, capsys):
    shutil.copyfile(replayable / "docs.jsonl", tmp_path / "docs.jsonl")
    monkeypatch.chdir(tmp_path)
    settings = replayable / "first" / "run_settings.json"
    assert main(["cpt", str(decoder_dir), "--config", str(settings), "--output-dir", "again", "--no-progress"]) == 0
    # and other data on purpose: the flag says so
    _docs(tmp_path / "other.jsonl", shift=5)
    assert main(["cpt", str(decoder_dir), "--config", str(settings), "--data-files", "other.jsonl", "--output-dir",
                 "other", "--no-progress"]) == 0, capsys.readouterr().err


def test_an_unknown_key_in_a_replay_is_refused(replayable, decoder_dir, tmp_path, capsys):
    """A YAML config's unknown key is refused; a replay file's was dropped silently."""
    settings = json.loads((replayable / "first" / "run_settings.json").read_text())
    settings["identity"]["train.learnin_rate"] = 0.5
    edited = tmp_path / "run_settings.json"
    edited.write_text(json.dumps(settings))
    capsys.readouterr()
    assert main(["cpt", str(decoder_dir), "--config", str(edited), "--data-files", str(replayable / "docs.jsonl"),
                 "--output-dir", str(tmp_path / "again")]) == 2
    one_error(capsys.readouterr().err, "'train.learnin_rate'", "no option")
    assert not (tmp_path / "again").exists()


# ------------------------------------------------------------------------------------------------ resume identity


def _big_corpus(path: Path) -> Path:
    """A 1.5 MB JSONL: its last third lies beyond the first MiB, which the identity once hashed alone."""
    line = lambda d: json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(30))}) + "\n"  # noqa: E731
    path.write_text("".join(line(d) for d in range(12000)))
    assert path.stat().st_size > 1.4e6
    return path


def _cut_run(decoder_dir, corpus: Path, out: Path, resume: bool = False) -> dict:
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    return cpt(LoadConfig(str(decoder_dir)), DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8),
               MaskingConfig(), TrainConfig(output_dir=str(out), steps=4, batch_size=4, lr=1e-3, save_every=2,
                                            eval_every=0, log_every=100, progress=False, resume=resume))


@pytest.mark.parametrize("record", ["today's", "first-MiB hashes (an older record)"])
def test_a_resume_on_a_corpus_edited_after_its_first_mib_is_refused(record, decoder_dir, tmp_path):
    """The identity read the size and the first MiB: a same-size edit after it resumed, exit 0."""
    from hf_encoderize.common.errors import EncoderizeError

    corpus, out = _big_corpus(tmp_path / "docs.jsonl"), tmp_path / "cut"
    _cut_run(decoder_dir, corpus, out)
    shutil.rmtree(out / "checkpoints" / "step-0000004")
    settings = json.loads((out / "run_settings.json").read_text())
    raw, size = corpus.read_bytes(), corpus.stat().st_size
    if record != "today's":  # what runs wrote before whole-file hashing; where it still matches, it stands for it
        assert settings["identity"]["data.data_files"] == [f"{size}:{hashlib.sha256(raw).hexdigest()}"]
        settings["identity"]["data.data_files"] = [f"{size}:{hashlib.sha256(raw[:1 << 20]).hexdigest()}"]
        (out / "run_settings.json").write_text(json.dumps(settings, indent=2))
        copy = tmp_path / "copy"
        shutil.copytree(out, copy)
        assert _cut_run(decoder_dir, corpus, copy, resume=True)["steps"] == 4
    if record == "today's":
        at = raw.index(b"w1 ", (1 << 20) + 1000)
        corpus.write_bytes(raw[:at] + b"w2 " + raw[at + 3:])  # same size, same first MiB, other text
        before = _files(out)
        with pytest.raises(EncoderizeError, match=r"data.data_files was"):
            _cut_run(decoder_dir, corpus, out, resume=True)
        assert _files(out) == before


# ------------------------------------------------------------------------------------------------ text units


@pytest.mark.parametrize("unit", [None, "file"])
def test_a_txt_document_too_long_to_hold_is_refused_naming_the_line_unit(unit, decoder_dir, tmp_path, capsys):
    """A .txt with no blank line under the default paragraph unit was one document read whole: 10 MB peaked at
    3.5 GB, 200 MB was killed (exit 137); the refusal that came named --eval-documents, not the unit."""
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(" ".join(f"w{(d + i) % 120}" for i in range(12)) + "\n" for d in range(40000)))
    assert lines.stat().st_size > 1.2 * (1 << 20)
    argv = ["cpt", str(decoder_dir), "--data-files", str(lines), "--max-steps", "1", "--output-dir",
            str(tmp_path / "out"), *TINY, *(["--text-unit", unit] if unit else [])]
    capsys.readouterr()
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "lines.txt", "--text-unit line", "1 MiB")
    assert not (tmp_path / "out").exists()
    argv[argv.index(str(tmp_path / "out"))] = str(tmp_path / "by-line")
    assert main([*argv, "--text-unit", "line"]) == 0, capsys.readouterr().err  # the unit the file holds


def test_paragraphs_split_by_windows_blank_lines_are_not_one_document(tmp_path):
    from hf_encoderize.data.corpus_files import check_document_size

    text = tmp_path / "crlf.txt"
    text.write_bytes(b"".join(b"w1 w2 w3 " * 200 + b"\r\n\r\n" for _ in range(1000)))  # 1.8 MB of 1.8 kB paragraphs
    check_document_size([str(text)], "paragraph")
    text.write_bytes(text.read_bytes().replace(b"\r\n\r\n", b"\r\n"))
    with pytest.raises(Exception, match="--text-unit line"):
        check_document_size([str(text)], "paragraph")


# ------------------------------------------------------------------------------------------------ the lock


@pytest.mark.parametrize("command", ["cpt", "convert"])
def test_a_lock_that_is_a_folder_is_one_line(command, decoder_dir, tmp_path, capsys):
    """A `.hf-encoderize.lock` that is a directory: IsADirectoryError (the files were intact)."""
    out = tmp_path / "out"
    (out / ".hf-encoderize.lock").mkdir(parents=True)
    (out / ".hf-encoderize.lock" / "mine.txt").write_text("the user's\n")
    before = _files(out)
    argv = ([command, str(decoder_dir), "--output-dir", str(out)] if command == "cpt" else
        [command, str(decoder_dir), str(out)])
    if command == "cpt":
        argv += ["--data-files", str(_docs(tmp_path / "docs.jsonl")), "--max-steps", "1", *TINY]
    capsys.readouterr()
    assert main(argv) == 2
    one_error(capsys.readouterr().err, ".hf-encoderize.lock", "is a folder")
    assert _files(out) == before


# ------------------------------------------------------------------------------------------------ negatives


def _triplets(path: Path, same: str, rows: int = 24) -> Path:
    """anchor/positive/negative rows whose negative is `same` ("anchor", "positive", "some": every third row's)."""
    def row(i):
        anchor, positive, other = f"w{i} w{i + 1} w{i + 2}", f"w{i + 1} w{i + 2} w{i + 3}", f"w{i + 60} w{i + 61}"
        negative = {"anchor": anchor, "positive": positive}.get(same, anchor if i % 3 == 0 else other)
        return json.dumps({"anchor": anchor, "positive": positive, "negative": negative}) + "\n"
    path.write_text("".join(row(i) for i in range(rows)))
    return path


@pytest.mark.parametrize("same", ["anchor", "positive"])
def test_negatives_equal_to_their_own_row_are_refused(same, encoder, tmp_path, capsys):
    """`contrastive --negative-column` trained silently when every negative was its anchor (or positive)."""
    data = _triplets(tmp_path / "triplets.jsonl", same)
    capsys.readouterr()
    assert main(["contrastive", str(encoder), "--data-files", str(data), "--method", "supervised",
                 "--negative-column", "negative", "--output-dir", str(tmp_path / "out"), "--max-steps", "2",
                 "--batch-size", "4", "--max-seq-length", "16", "--no-progress"]) == 2
    one_error(capsys.readouterr().err, "--negative-column 'negative'", "every row", "itself")
    assert not (tmp_path / "out").exists()


def test_some_negatives_equal_to_their_row_are_counted(encoder, tmp_path, caplog):
    from hf_encoderize.recipes.contrastive.rows import load_rows

    data = _triplets(tmp_path / "triplets.jsonl", "some")
    config = contrastive_config(encoder, data, tmp_path / "out", method="supervised", negative_column="negative")
    with caplog.at_level("WARNING", logger="hf_encoderize"):
        assert len(load_rows(config)) == 24
    warned = [r.getMessage() for r in caplog.records if "--negative-column" in r.getMessage()]
    assert len(warned) == 1 and "8 of 24 rows" in warned[0], warned


# ------------------------------------------------------------------------------------------------ misleading


def test_the_headline_recipe_says_why_it_has_no_python(tmp_path):
    """`examples/headline/run.sh` with a missing PYTHON exited 2 with no output at all (the finder's message went to
    /dev/null)."""
    env = {**os.environ, "PYTHON": "no-such-python3", "HF_ENCODERIZE_VENV": str(tmp_path / "venv")}
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(["bash", str(ROOT / "examples" / "headline" / "run.sh"), "tiny", str(tmp_path / "out")],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no-such-python3" in result.stderr and "PYTHON=" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, said", [
    (["--versoin"], "unrecognized arguments: --versoin; did you mean --version?"),
    (["-q", "--versoin=1"], "unrecognized arguments: --versoin=1; did you mean --version?"),
    ([], "the following arguments are required: COMMAND"),
    (["cpx"], "invalid choice: 'cpx'"),
], ids=["--versoin", "-q --versoin=1", "no command", "cpx"])
def test_the_top_level_refusal_is_one_line(argv, said, capsys):
    """`hf-encoderize --versoin` got argparse's two lines (usage, then "arguments are required: COMMAND"), not the one
    line with a did-you-mean that a sub-command's mistyped flag gets."""
    with pytest.raises(SystemExit) as refused:
        main(argv)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert one_error(err, said, "see `hf-encoderize --help`")


# ------------------------------------------------------------------------------------------------ headline presets


def _tiny_made(out: Path, recorded: bool) -> Path:
    """OUT as the `tiny` preset leaves it after its arms (32-wide models), with or without today's preset record."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("headline", ROOT / "benchmarks" / "headline.py")
    headline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(headline)
    (out / "order0").mkdir(parents=True)
    headline.write_model_config(out / "order0" / "config.json", headline.PRESETS["tiny"], 384)
    for arm in ("clm", "mlm"):
        summary = {"base": {"eval_loss": 5.0}, "cpt": {"eval_loss": 5.0}, "encoder": str(out / f"order0/{arm}-cpt")}
        (out / "order0" / f"{arm}-arm.json").write_text(json.dumps(summary))
    if recorded:
        headline.headline_folder.record(out, "tiny", headline.PRESETS["tiny"])
    return headline


@pytest.mark.parametrize("recorded", [False, True], ids=["a folder from before the record", "recorded"])
@pytest.mark.parametrize("extra", [[], ["--analyse-only"]], ids=["run", "--analyse-only"])
def test_the_headline_recipe_refuses_a_folder_another_preset_made(recorded, extra, tmp_path):
    """`run.sh reduced OUT` on a `tiny` OUT took tiny's finished 32-wide models as reduced's (a traceback, or with
    eval/ cleared a "Budget `reduced`" table from them)."""
    out = tmp_path / "out"
    _tiny_made(out, recorded)
    before = _files(out)
    env = {**os.environ, "PYTHON": sys.executable}  # this venv, wherever it is
    result = subprocess.run(["bash", str(ROOT / "examples" / "headline" / "run.sh"), "reduced", str(out), *extra],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == "", result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "made by the `tiny` preset" in errors[0] and "give `reduced` another OUT" in errors[0]
    assert _files(out) == before


def test_a_preset_of_the_same_work_may_share_the_folder(tmp_path):
    """`cpu2` on a `cpu` folder reuses order 0 (the same settings but the orders); `tiny` on its own folder goes on."""
    headline = _tiny_made(tmp_path / "tiny", recorded=True)
    check, presets = headline.headline_folder.check, headline.PRESETS
    assert check(tmp_path / "tiny", "tiny", presets) is None
    assert check(tmp_path / "new", "reduced", presets) is None
    (tmp_path / "cpu").mkdir()
    headline.headline_folder.record(tmp_path / "cpu", "cpu", presets["cpu"])
    assert check(tmp_path / "cpu", "cpu2", presets) is None
    assert "made by the `cpu` preset" in check(tmp_path / "cpu", "gpu", presets)
