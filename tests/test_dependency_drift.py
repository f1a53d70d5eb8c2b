"""scripts/dependency_drift.py: a new release of a dependency is named before it can turn CI red (issue 72)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "dependency_drift.py"


def _module():
    spec = importlib.util.spec_from_file_location("dependency_drift", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_drift_names_moved_new_and_gone_packages_and_marks_direct_ones():
    drift = _module().drift
    result = drift({"transformers": "5.24.0", "tqdm": "4.67.1", "hf-encoderize": "0.2.0", "numpy": "2.3.0"},
                   {"transformers": "5.25.0", "kernels": "0.19.1", "hf-encoderize": "0.3.0", "numpy": "2.3.0"},
                   {"transformers", "numpy"})
    assert result == {"moved": {"transformers": ["5.24.0", "5.25.0"]}, "added": {"kernels": "0.19.1"},
                      "gone": ["tqdm"], "direct_moved": ["transformers"]}


def test_direct_dependencies_come_from_pyproject_in_canonical_names():
    direct = _module().direct_dependencies()
    assert {"transformers", "torch", "huggingface-hub", "sentence-transformers", "gradio"} <= direct
    assert "kernels" not in direct  # transformers brings it: transitive, named in the record, not declared by us


def test_the_committed_record_pins_the_stack_the_suite_last_passed_on():
    record = _module().read_record()
    assert {"transformers", "torch", "huggingface-hub", "accelerate", "peft"} <= set(record)
    assert all(version and version[0].isdigit() for version in record.values())


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_command_prints_one_json_object_and_strict_fails_on_a_moved_direct_dependency(tmp_path):
    import transformers

    record = tmp_path / "last-green.txt"
    record.write_text(f"transformers==0.0.1\ntorch=={__import__('torch').__version__}\n")
    done = _run("--installed", sys.executable, "--against", str(record))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # stdout is the result alone
    assert result["moved"]["transformers"] == ["0.0.1", transformers.__version__]
    assert "transformers" in result["direct_moved"] and "torch" not in result["moved"]
    assert "transformers 0.0.1 -> " in done.stderr and "(a direct dependency)" in done.stderr
    assert _run("--installed", sys.executable, "--against", str(record), "--strict").returncode == 1
    record.write_text(f"transformers=={transformers.__version__}\n")
    assert _run("--installed", sys.executable, "--against", str(record), "--strict").returncode == 0


def test_record_writes_what_was_read_as_the_new_green_run(tmp_path):
    record = tmp_path / "last-green.txt"
    assert _run("--installed", sys.executable, "--against", str(record), "--record").returncode == 0
    pins = _module().read_record(record)
    assert pins["transformers"] == __import__("transformers").__version__
    again = json.loads(_run("--installed", sys.executable, "--against", str(record)).stdout)
    assert again["moved"] == {} and again["added"] == {} and again["gone"] == []
