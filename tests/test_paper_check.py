"""examples/paper/check_against_paper.py: the paper's Appendix C tables, transcribed once, next to a results folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "paper"))

import check_against_paper as check  # noqa: E402


def test_transcription_is_consistent():
    """Each row's three datasets average to the paper's "Average" column, and every table is there."""
    tables = json.loads(check.TABLES.read_text())
    assert sorted({r["table"] for r in tables["rows"]}) == list(range(6, 18)) and len(tables["rows"]) == 140
    for row in tables["rows"]:
        means = [s["mean"] for s in row["scores"].values()]
        assert sum(means) / 3 == pytest.approx(row["average"]["mean"], abs=0.02), row
    cpt_clm_22k = next(r for r in tables["rows"] if r["table"] == 14 and r["setting"] == {"base": "clm",
                                                                                          "cpt_steps": 22000})
    assert cpt_clm_22k["scores"]["sst2"] == {"mean": 93.62, "ci95": 0.33}  # Table 14, as printed


def test_run_names_follow_the_recipes():
    rows = json.loads(check.TABLES.read_text())["rows"]
    names = {check.run_name(r) for r in rows}
    assert {"clm0.25-mlm0.75-12000", "clm0.5-mlm0.5-22000", "clm0.75-mlm0.25-42000", "mlm-12000", "clm-22000",
            "cpt-clm-42000-12000", "mlm-42000", "clm-42000/exports/step-0005000"} <= names


def _summary(folder: Path, scores: dict):
    folder.mkdir(parents=True)
    results = [{"task": "sc", "dataset": d, "metric": "accuracy", "test_mean": m, "test_ci95": c}
               for d, (m, c) in scores.items()]
    (folder / "summary.json").write_text(json.dumps({"results": results, "family_means": {}}))


def test_verdicts_and_missing_rows(tmp_path):
    # Table 14, CPT of the CLM base for 22K steps: SST-2 93.62 (0.33), QQP 87.56 (0.08), MNLI 84.02 (0.10)
    _summary(tmp_path / "cpt-clm-42000-22000" / "eval", {"sst2": (93.70, 0.20), "qqp": (88.50, 0.10),
                                                         "mnli": (80.00, None)})
    report = check.compare(tmp_path)
    verdicts = {r["dataset"]: r["verdict"] for r in report["rows"]}
    assert verdicts == {"sst2": "within", "qqp": "above", "mnli": "below"}
    assert report["compared"] == 3 and report["missing"] == 140 * 3 - 3
    assert "| 14 | cpt-clm-42000-22000 | qqp | 87.56 ± 0.08 | 88.50 ± 0.10 | +0.94 | above |" in check.render(report)


def test_bad_input_is_one_line(tmp_path):
    script = ROOT / "examples" / "paper" / "check_against_paper.py"
    for target, message in ((tmp_path / "nope", "is not a folder"), (tmp_path, "no */eval/summary.json")):
        result = subprocess.run([sys.executable, str(script), str(target)], capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.startswith("error:") and message in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
