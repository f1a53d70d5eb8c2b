"""Set-up never installs into a system Python: scripts/venv_python.sh picks (or makes) a virtual environment.

On Debian 12+/Ubuntu 24.04 `python3 -m pip install` into the system Python fails (PEP 668, "externally managed");
this machine's /usr/bin/python3 is such an interpreter, so the decision is run against it. The whole set-up is not
rerun here (minutes); only the decision, the venv it makes in a temporary folder, and set-up's first step in that venv
(`setup.sh --venv-only`, which brings pip and setuptools to current), checked by installing a tiny setup.py-only
package that needs a modern setuptools, as seqeval's sdist does.
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


def is_system_python(python: Path) -> bool:
    """An interpreter outside any venv (Debian's /usr/bin/python3 is one, and is "externally managed" besides)."""
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def write_package_needing_modern_setuptools(folder: Path) -> Path:
    """A setup.py-only package (no pyproject.toml), built the way pip builds seqeval's sdist, that refuses setuptools
    older than 70: on Debian's bundled setuptools 66 it fails as seqeval did."""
    folder.mkdir()
    (folder / "tinypkg.py").write_text("x = 1\n")
    (folder / "setup.py").write_text(
        "import setuptools\n"
        "if int(setuptools.__version__.split('.')[0]) < 70:\n"
        "    raise SystemExit(f'needs setuptools >= 70, this build has {setuptools.__version__}')\n"
        "setuptools.setup(name='tinypkg', version='0.1', py_modules=['tinypkg'])\n")
    return folder


@pytest.mark.skipif(not is_system_python(SYSTEM_PYTHON), reason="no system /usr/bin/python3 here")
def test_setup_brings_a_fresh_system_venv_to_a_pip_that_builds_sdists(tmp_path):
    venv = tmp_path / ".venv"
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/bin:/bin", "PYTHON": str(SYSTEM_PYTHON),
           "HF_ENCODERIZE_VENV": str(venv)}  # as on a fresh Debian machine: nothing of this venv on PATH
    first = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--venv-only"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    python = first.stdout.strip()
    assert python == str(venv / "bin" / "python")
    package = write_package_needing_modern_setuptools(tmp_path / "tinypkg")
    installed = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", str(package)],
                               env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    assert subprocess.run([python, "-c", "import tinypkg"], capture_output=True).returncode == 0


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
