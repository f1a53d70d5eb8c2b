"""scripts/gpu_session.py, rehearsed on the CPU with the smoke preset: inputs prepared beforehand, every arm in one
process, each part under its own limit, and results written as each part ends (a session cut short keeps them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_session.py"


def _session(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    prepared = subprocess.run([sys.executable, str(SCRIPT), "prepare", "--inputs", str(inputs), "--shapes", "smoke"],
                              capture_output=True, text=True, env=env, timeout=300)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert (inputs / "docs-smoke.jsonl.gz").is_file()
    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--inputs", str(inputs), "--out", str(out), "--smoke",
                           *extra], capture_output=True, text=True, env=env, timeout=900)
    rows = [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]
    return done, rows


def test_a_part_past_its_limit_is_a_row_and_the_session_goes_on(tmp_path):
    done, rows = _session(tmp_path, "--arm-limit-s", "0.5")
    by_part = {row["part"]: row for row in rows}
    assert by_part["smoke stage"]["status"] == "pass"
    assert by_part["smoke profile"]["status"] == "fail"
    assert "time limit" in by_part["smoke profile"]["figure"]
    # every later part still ran (and was cut, or skipped for want of CUDA), and the table was written
    assert {"smoke sdpa", "smoke trainer_grouped", "smoke compiled", "accelerate fsdp"} <= set(by_part)
    assert done.returncode == 1
    assert "smoke sdpa" in (tmp_path / "out" / "session.md").read_text()


@pytest.mark.slow
def test_the_smoke_session_times_every_arm_in_one_process(tmp_path):
    done, rows = _session(tmp_path, "--budget-s", "600")
    assert done.returncode == 0, done.stderr[-3000:]
    by_part = {row["part"]: row for row in rows}
    for part in ("smoke sdpa", "smoke compiled", "smoke compiled_rows2x", "smoke trainer_grouped"):
        assert by_part[part]["status"] == "pass", by_part[part]
        assert by_part[part]["tokens_per_s"] > 0
    assert by_part["smoke compiled_rows2x"]["figure"].startswith("rows 8")
    assert by_part["smoke profile"]["profile"]["total"] > 0
    assert by_part["accelerate fsdp"]["status"] == "skipped"  # needs CUDA: said, not failed
    summary = json.loads((tmp_path / "out" / "session.json").read_text())
    assert summary["device"] == "cpu" and len(summary["rows"]) == len(rows)
