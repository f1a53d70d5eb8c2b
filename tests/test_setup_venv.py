"""Set-up never installs into a system Python: scripts/venv_python.sh picks (or makes) a virtual environment.

On Debian 12+/Ubuntu 24.04 `python3 -m pip install` into the system Python fails (PEP 668, "externally managed");
this machine's /usr/bin/python3 is such an interpreter, so the decision is run against it. The whole set-up is not
rerun here (minutes); only the decision, and the venv it makes in a temporary folder.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECIDE = ROOT / "scripts" / "venv_python.sh"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def decide(python: str, venv: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python, "HF_ENCODERIZE_VENV": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(DECIDE)], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no /usr/bin/python3 here to stand for a stock Python")
def test_system_python_gets_the_project_venv(tmp_path):
    venv = tmp_path / ".venv"
    first = decide(str(SYSTEM_PYTHON), venv)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(venv / "bin" / "python")
    assert (venv / "pyvenv.cfg").exists()
    made = subprocess.run([first.stdout.strip(), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                          capture_output=True, text=True, check=True)
    assert made.stdout.strip() == "True"  # pip run by this interpreter installs into the venv, not the system
    assert "not a virtual environment" in first.stderr and str(venv) in first.stderr
    again = decide(str(SYSTEM_PYTHON), venv)  # made once, then reused
    assert again.stdout == first.stdout and "making" not in again.stderr


def test_an_active_venv_is_kept(tmp_path):
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests are not running inside a virtual environment")
    result = decide(sys.executable, tmp_path / ".venv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sys.executable
    assert not (tmp_path / ".venv").exists()
    assert "active virtual environment" in result.stderr


def test_a_missing_interpreter_is_one_error_line(tmp_path):
    result = decide("no-such-python3", tmp_path / ".venv")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_setup_installs_only_through_the_decided_interpreter():
    """Every pip call in the set-up scripts goes through venv_python.sh's choice, never a bare python3/pip."""
    for script in ("scripts/setup.sh", "scripts/test.sh", "examples/quickstart.sh"):
        text = (ROOT / script).read_text()
        assert "venv_python.sh" in text, script
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code if "python3 -m pip" in line or line.lstrip().startswith("pip ")], script
