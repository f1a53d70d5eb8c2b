"""Issue 51 (hostile input, fourth round): set-up, push, replay, resume identity, text units, negatives, the lock,
the headline recipe and the top-level CLI, each refused in one line or made right.

The audit table of every case and the test that covers it is docs/hostile_input.md."""

import os
import subprocess
from pathlib import Path

import pytest

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
