"""Issue 51 (hostile input, fourth round): set-up, push, replay, resume identity, text units, negatives, the lock,
the headline recipe and the top-level CLI, each refused in one line or made right.

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import os
import subprocess
from pathlib import Path

import pytest
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
