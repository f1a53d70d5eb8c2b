"""examples/paper/check_against_paper.py: the paper's Appendix C tables, transcribed once, next to a results folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "paper" / "check_against_paper.py"
sys.path.insert(0, str(SCRIPT.parent))

import check_against_paper as check  # noqa: E402

TABLES = json.loads(check.TABLES.read_text())


def test_transcription_averages_match_the_printed_average_column():
    """Each row's three datasets average to the paper's "Average" column: a typo in a transcribed score shows here."""
    for row in TABLES["rows"]:
        means = [s["mean"] for s in row["scores"].values()]
        assert sum(means) / 3 == pytest.approx(row["average"]["mean"], abs=0.02), (row["table"], row["printed"])


def test_transcription_is_complete_and_named_after_the_paper():
    rows = TABLES["rows"]
    per_table = {t: sum(r["table"] == t for r in rows) for t in range(6, 18)}
    assert per_table == {
        **dict.fromkeys(range(6, 10), 12),
        **dict.fromkeys(range(10, 14), 15),
        **dict.fromkeys(range(14, 18), 8),
    }
    for row in rows:
        meta = TABLES["tables"][str(row["table"])]
        assert list(row["scores"]) == meta["datasets"] and row["family"] == meta["family"]
        assert row["section"] == meta["section"] and set(row["scores"]) <= set(check.OUR_NAMES)
    assert "Table 13, Table 11" in TABLES["caption_typo"] and "95% confidence" in TABLES["parentheses"]
    cpt = next(r for r in rows if r["table"] == 14 and r["setting"] == {"base": "clm", "cpt_steps": 22000})
    assert cpt["scores"]["SST-2"] == {"mean": 93.62, "ci95": 0.33}  # Table 14, "CLM | 22K", as printed


def test_a_run_in_several_tables_has_the_same_numbers_in_each():
    """The 42K bases are the PFS 0K+42K / 42K+0K cells (Tables 10-13) and the CPT '-' rows (Tables 14-17)."""
    runs = check.paper_runs(TABLES)
    for base in ("clm-42000", "mlm-42000"):
        assert len(runs[base]["rows"]) == 12 and all(
            e["tables"] in ([10, 14], [11, 15], [12, 16], [13, 17]) for e in runs[base]["rows"]
        )
    assert len(runs) == 12 + 15 + 6  # efficiency checkpoints, PFS cells, CPT budgets (bases shared)


def test_run_names_follow_the_recipes():
    names = set(check.paper_runs(TABLES))
    assert {
        "mlm-12000",
        "clm-22000",
        "clm0.25-mlm0.75-12000",
        "clm0.25-mlm0.75-22000",
        "clm0.5-mlm0.5-22000",
        "clm0.75-mlm0.25-42000",
        "cpt-clm-42000-2000",
        "cpt-mlm-42000-12000",
        "mlm-42000",
        "clm-42000/exports/step-0005000",
        "mlm-42000/exports/step-0040000",
    } <= names


def _summary(folder: Path, scores: dict, profile: str = "paper") -> None:
    """A summary.json with the schema of hf_encoderize/evaluation/summary.py (the fields this script reads and more)."""
    results = [
        {
            "task": "sc",
            "dataset": d,
            "metric": "accuracy",
            "best_lr": "1e-05",
            "test_mean": m,
            "test_ci95": c,
            "n_seeds": 5 if c is not None else 1,
            "val_mean": m,
            "lr_spread": 0.0,
            "per_lr": {},
            "extra_metrics": {},
            "note": None,
        }
        for d, (m, c) in scores.items()
    ]
    summary = {
        "model": str(folder.parent),
        "model_name": folder.parent.name,
        "mode": "bidirectional",
        "profile": profile,
        "protocol": {},
        "results": results,
        "family_means": {},
    }
    (folder / "eval").mkdir(parents=True)
    (folder / "eval" / "summary.json").write_text(json.dumps(summary))


def test_verdicts_and_missing(tmp_path):
    # Table 14, CPT of the CLM base for 22K steps: SST-2 93.62 (0.33), QQP 87.56 (0.08), MNLI 84.02 (0.10)
    _summary(tmp_path / "cpt-clm-42000-22000", {"sst2": (93.70, 0.20), "qqp": (88.50, 0.10), "mnli": (80.00, None)})
    # Table 6, MLM at 5K steps: SST-2 82.11 (0.62); an intermediate export, evaluated next to it
    _summary(tmp_path / "mlm-42000" / "exports" / "step-0005000", {"sst2": (82.11, None)}, profile="quick")
    _summary(tmp_path / "mlm-42000-mask0.2", {"sst2": (90.0, 0.5)})  # masking.sh: in none of Tables 6-17
    report = check.compare(tmp_path)
    runs = {r["run"]: r for r in report["runs"]}
    assert set(runs) == {"cpt-clm-42000-22000", "mlm-42000/exports/step-0005000"}
    verdicts = {r["dataset"]: r["verdict"] for r in runs["cpt-clm-42000-22000"]["rows"]}
    assert verdicts == {
        "SST-2": "no difference",  # +0.08, Welch p = 0.58
        "QQP": "above",
        "MNLI": "not testable",  # one seed
        "OntoNotes": "missing",
        "CoNLL": "missing",
        "UNER": "missing",
        "SQuAD": "missing",
        "SQuAD-v2": "missing",
        "ReCoRD": "missing",
        "NQ": "missing",
        "MS MARCO": "missing",
        "MLDR": "missing",
    }
    assert report["counts"] == {  # per profile, dataset scores and family averages apart
        "paper": {"rows": {"above": 1, "below": 0, "no difference": 1, "not testable": 1, "missing": 9},
                  "averages": {"above": 0, "below": 0, "no difference": 0, "not testable": 1, "missing": 3}},
        "quick": {"rows": {"above": 0, "below": 0, "no difference": 0, "not testable": 1, "missing": 11},
                  "averages": {"above": 0, "below": 0, "no difference": 0, "not testable": 0, "missing": 4}},
    }
    assert len(report["missing_runs"]) == 33 - 2 and report["not_in_tables"] == ["mlm-42000-mask0.2"]
    text = check.render(report)
    assert "| 14 | QQP | 87.56 ± 0.08 | 88.50 ± 0.10 | +0.94 | above |" in text
    assert "| 14 | MNLI | 84.02 ± 0.10 | 80.00 (1 seed) | -4.02 | not testable |" in text
    assert "| 14 | SC average | 88.40 ± 0.11 | 87.40 (1 seed) | -1.00 | not testable |" in text
    assert "Profile paper, 12 dataset scores: 1 above, 0 below, 1 no difference, 1 not testable, 9 missing." in text
    assert "| 16 | ReCoRD | 52.06 ± 0.72 | - | - | missing |" in text
    assert '## mlm-42000/exports/step-0005000: C.2 "MLM | 5K" (Tables 6-9); our evaluation profile quick' in text
    assert '- mlm-42000: C.3 "42K | 0K+42K" (Tables 10-13); C.4 "MLM | -" (Tables 14-17)' in text


def test_json_output(tmp_path, capsys):
    _summary(tmp_path / "clm0.5-mlm0.5-22000", {"sst2": (91.90, 0.5)})  # Table 10, "22K | 11K+11K": 91.90 (0.71)
    assert check.main([str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = [r for r in report["runs"][0]["rows"] if r["verdict"] != "missing"]
    assert row["dataset"] == "SST-2" and row["paper"] == {"mean": 91.9, "ci95": 0.71} and row["difference"] == 0.0


def test_bad_input_is_one_error_line(tmp_path):
    (tmp_path / "210M" / "clm-42000" / "eval").mkdir(parents=True)
    (tmp_path / "broken" / "mlm-12000" / "eval").mkdir(parents=True)
    (tmp_path / "broken" / "mlm-12000" / "eval" / "summary.json").write_text("{not json")
    for target, message in (
        (tmp_path / "nope", "is not a folder"),
        (tmp_path, "no RUN/eval/summary.json"),
        (tmp_path / "210M", "are for 610M models"),
        (tmp_path / "broken", "cannot read"),
    ):
        result = subprocess.run([sys.executable, str(SCRIPT), str(target)], capture_output=True, text=True)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1
