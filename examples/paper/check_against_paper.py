"""Put a results folder next to the paper's own numbers (Appendix C, Tables 6-17) and say, dataset by dataset, whether
we reproduced them.

    python examples/paper/check_against_paper.py runs/paper/610M [--json]

It reads every `RUN/eval/summary.json` (and `RUN/exports/step-N/eval/summary.json`, the intermediate encoders of the
data-efficiency tables) that the recipes and `evaluate_and_plot.py` write, maps each run to its row of the paper's
tables (`paper_tables.json`, transcribed once from the paper, with the table number kept), and prints per row: the
paper's mean and 95% CI, ours, the difference, and a verdict: `within` when the two intervals overlap, else `above` or
`below`. Rows we have not run are counted as missing, not errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TABLES = Path(__file__).with_name("paper_tables.json")


def run_name(row: dict) -> str:
    """The recipes' folder name (examples/paper/common.sh) for a row of the paper's tables."""
    setting = row["setting"]
    if row["kind"] == "efficiency":
        return f"{setting['objective']}-42000/exports/step-{setting['step']:07d}"
    if row["kind"] == "cpt":
        base = f"{setting['base']}-42000"
        return base if setting["cpt_steps"] == 0 else f"cpt-{base}-{setting['cpt_steps']}"
    total, clm = setting["budget"], setting["clm_steps"]
    if clm == 0 or clm == total:
        return f"{'mlm' if clm == 0 else 'clm'}-{total}"
    share = round(4 * clm / total) / 4  # pfs.sh names the splits by their nominal share: 0.25, 0.5, 0.75
    return f"clm{share:g}-mlm{1 - share:g}-{total}"


def our_scores(root: Path, name: str) -> dict[str, dict]:
    """dataset -> {"mean", "ci95"} from `root/name/eval/summary.json` ({} when that run was not evaluated)."""
    summary = root / name / "eval" / "summary.json"
    if not summary.is_file():
        return {}
    results = json.loads(summary.read_text()).get("results", [])
    return {r["dataset"]: {"mean": r["test_mean"], "ci95": r.get("test_ci95")} for r in results}


def verdict(paper: dict, ours: dict) -> str:
    """`within` when the 95% intervals overlap (an interval we cannot compute counts as a point), else above/below."""
    ours_ci = ours["ci95"] or 0.0
    if ours["mean"] - ours_ci > paper["mean"] + paper["ci95"]:
        return "above"
    if ours["mean"] + ours_ci < paper["mean"] - paper["ci95"]:
        return "below"
    return "within"


def compare(root: Path) -> dict:
    """Every row of the paper's tables against the results under `root`."""
    tables = json.loads(TABLES.read_text())
    rows, missing = [], []
    for row in tables["rows"]:
        name = run_name(row)
        ours = our_scores(root, name)
        for dataset, paper in row["scores"].items():
            if dataset not in ours:
                missing.append({"table": row["table"], "run": name, "dataset": dataset})
                continue
            mine = ours[dataset]
            rows.append({"table": row["table"], "run": name, "dataset": dataset, "paper": paper, "ours": mine,
                         "difference": round(mine["mean"] - paper["mean"], 2), "verdict": verdict(paper, mine)})
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("within", "above", "below")}
    return {"source": tables["source"], "compared": len(rows), **counts, "missing": len(missing), "rows": rows,
            "missing_rows": missing}


def render(report: dict) -> str:
    lines = [f"Compared with {report['source']}", "",
             "| Table | Run | Dataset | Paper | Ours | Difference | Verdict |", "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        ours = f"{r['ours']['mean']:.2f}" + (f" ± {r['ours']['ci95']:.2f}" if r["ours"]["ci95"] is not None else "")
        lines.append(f"| {r['table']} | {r['run']} | {r['dataset']} | {r['paper']['mean']:.2f} ± "
                     f"{r['paper']['ci95']:.2f} | {ours} | {r['difference']:+.2f} | {r['verdict']} |")
    lines += ["", f"{report['compared']} scores compared: {report['within']} within the paper's 95% CI, "
                  f"{report['above']} above, {report['below']} below; {report['missing']} of the paper's scores have "
                  "no result here yet."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the folder holding the runs, e.g. runs/paper/610M")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not root.is_dir():
        print(f"error: {str(root)!r} is not a folder; pass the runs folder of the paper recipes, e.g. "
              "runs/paper/610M", file=sys.stderr)
        return 2
    if not any(root.glob("*/eval/summary.json")) and not any(root.glob("*/exports/*/eval/summary.json")):
        print(f"error: no */eval/summary.json under {str(root)!r}; evaluate the runs first with "
              "examples/paper/evaluate_and_plot.py", file=sys.stderr)
        return 2
    report = compare(root)
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
