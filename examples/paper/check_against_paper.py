"""Put a results folder next to the paper's Appendix C tables: dataset by dataset, are our scores above, below or
within a margin of the paper's, and does our CLM+MLM minus MLM+MLM CPT difference (section 5) differ from the paper's?
No verdict says "reproduced": a test can show a difference, or agreement within a margin, never a reproduction.

    python examples/paper/check_against_paper.py runs/paper/610M [--size 610M] [--json]

Design choices:
- The paper's numbers live in `paper_tables.json`, transcribed once from Appendix C (Tables 2-5: 210M, 610M and 1B
  models, MLM at 20/30/40/50% masking and CLM; Tables 6-17: 610M models, MLM at 40% masking) with each row's table
  number, model size and printed labels; this script only reads it.
- One model size per call: the recipes write `RUNS/SIZE/NAME` (common.sh), so the size is the folder's name
  (`runs/paper/1B`) unless `--size` says it; a folder named otherwise needs `--size`.
- Runs are found by the names the recipes write (common.sh, pfs.sh, cpt.sh, masking.sh): the base runs `clm-42000`,
  `mlm-42000` (40% masking) and `mlm-42000-mask0.2` (Tables 2-5), PFS `mlm-12000`, `clm0.25-mlm0.75-42000`, CPT
  `cpt-clm-42000-2000` (its '-' row is the base, `clm-42000`), and the data-efficiency checkpoints
  `clm-42000/exports/step-0005000`. Each is read from its `eval/summary.json` (hf_encoderize/evaluation/summary.py).
- A run that several tables share (610M `mlm-42000` is C.1's 40% row, the 0K+42K PFS cell and the MLM CPT base) gets
  one line per dataset when the tables print the same numbers.
- Verdict: a test, not an overlap of intervals. Welch's t-test at 5% of our per-seed scores (their SD recovered from
  summary.json's 95% Student t interval and seed count) against the paper's mean and 95% CI over its 5 seeds
  (`hf_encoderize.evaluation.stats.welch_verdict`): `above` or `below` when it rejects. Not rejecting is not
  agreement: `equivalent` only when TOST (two one-sided Welch tests at 5%) puts the difference within ±`--margin`
  points (1.0 by default, our choice: about the smallest gap the paper reads as a finding, e.g. Table 14's SC averages
  after 22K CPT, 88.40 against 87.47), else `inconclusive`. One seed (the quick profile) or zero spread is `not
  testable`. Overlapping intervals flagged 0.6% of runs with no true difference at 5 seeds a side, and a 1-seed point
  32%; the test flags 5% (tests/test_verdict.py simulates it). The assumptions (the paper's "(x)" read as a Student t
  half-width; pretraining variance outside the test) are printed with every report (`stats.ASSUMPTIONS`).
- The 1-point margin is as large as section 5's effects themselves (CLM+MLM minus MLM+MLM after 22K CPT steps: 0.25
  to 1.04 points on the family averages), so each CPT arm `equivalent` to its row says nothing about their
  difference: a reversed difference can hide inside two 1-point margins. Section 5's claim is tested on the
  difference itself: for each CPT length where both arms are evaluated, our CLM+MLM minus MLM+MLM against 0 (Welch)
  and against the paper's difference (`stats.difference_against`, four independent means): `differs` or
  `not distinguished`, never agreement.
- Only like with like: the paper fine-tunes the whole model and scores IR with binary NDCG@10 gains (EncodEval). A
  frozen-probe summary (`eval --frozen`), or an IR score with graded gains, is `not comparable`, never tested.
- Task averages are tested too: the paper prints each family's average over its three datasets; ours is the mean of
  our three dataset means, its spread taken as if the datasets' seed scores were independent (summary.json keeps no
  per-seed averages). Counts are kept per evaluation profile, never mixed.
- Whatever we have not run or evaluated is listed as missing, never an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hf_encoderize.evaluation.compare import metric_label, protocol_of
from hf_encoderize.evaluation.stats import ASSUMPTIONS, difference_against, sd_from_ci95, welch_verdict
from hf_encoderize.records.eval_summary import EvalSummary

VERDICTS = ("above", "below", "equivalent", "inconclusive", "not testable", "not comparable", "missing")
MARGIN = 1.0  # score points; see the module docstring
TABLES = Path(__file__).with_name("paper_tables.json")
# The paper's column names -> our dataset names (hf_encoderize/evaluation/loaders.py)
OUR_NAMES = {
    "SST-2": "sst2",
    "QQP": "qqp",
    "MNLI": "mnli",
    "OntoNotes": "ontonotes5",
    "CoNLL": "conll2003",
    "UNER": "uner",
    "SQuAD": "squad",
    "SQuAD-v2": "squad_v2",
    "ReCoRD": "record",
    "NQ": "nq",
    "MS MARCO": "msmarco",
    "MLDR": "mldr",
}
SIZES = ("210M", "610M", "1B")  # masking.sh's sizes (examples/configs/); Tables 6-17 are 610M only
# masking.sh's CLM+MLM runs at other ratios (section 4, Figure 7): the paper prints no table for them
FIGURE_ONLY = "clm0.25-mlm0.75-42000-mask"


class CheckError(Exception):
    """Bad input; the message says what to do."""


def run_name(row: dict) -> str:
    """The recipes' folder (relative to the runs root) for one row of the paper's tables."""
    setting = row["setting"]
    if row["kind"] == "masking":  # masking.sh: the 40% MLM run is pfs.sh's mlm-42000, shared
        if setting["objective"] == "clm":
            return "clm-42000"
        return "mlm-42000" if setting["mask"] == 0.4 else f"mlm-42000-mask{setting['mask']:g}"
    if row["kind"] == "efficiency":
        return f"{setting['objective']}-42000/exports/step-{setting['step']:07d}"
    if row["kind"] == "cpt":
        base = f"{setting['base']}-42000"
        return base if setting["cpt_steps"] == 0 else f"cpt-{base}-{setting['cpt_steps']}"
    total, clm = setting["budget"], setting["clm_steps"]
    if clm in (0, total):
        return f"{'mlm' if clm == 0 else 'clm'}-{total}"
    share = round(4 * clm / total) / 4  # pfs.sh names a split by its nominal share (22K: 5K+17K is clm0.25-mlm0.75)
    return f"clm{share:g}-mlm{1 - share:g}-{total}"


def paper_runs(tables: dict, size: str = "610M") -> dict[str, dict]:
    """Run name -> {"sources": where the paper prints it, "rows": its scores in table order, one per dataset unless
    two tables print different numbers}, for the models of one size."""
    runs: dict[str, dict] = {}
    for row in (r for r in tables["rows"] if r["size"] == size):
        run = runs.setdefault(run_name(row), {"sources": [], "rows": []})
        source = next(
            (s for s in run["sources"] if s["printed"] == row["printed"] and s["section"] == row["section"]), None
        )
        if source is None:
            run["sources"].append({"section": row["section"], "printed": row["printed"], "tables": [row["table"]]})
        else:
            source["tables"].append(row["table"])
        if row.get("average") and not any(
            a["family"] == row["family"] and a["paper"] == row["average"] for a in run.setdefault("averages", [])
        ):
            run["averages"].append({"dataset": f"{row['family']} average", "family": row["family"],
                                    "datasets": list(row["scores"]), "tables": [row["table"]],
                                    "paper": row["average"]})
        for dataset, score in row["scores"].items():
            same = next((e for e in run["rows"] if e["dataset"] == dataset and e["paper"] == score), None)
            if same:
                same["tables"].append(row["table"])
            else:
                run["rows"].append(
                    {"dataset": dataset, "family": row["family"], "tables": [row["table"]], "paper": score}
                )
    return runs


def find_summaries(root: Path) -> dict[str, Path]:
    """Run name -> its summary.json: final encoders (`RUN/eval`) and intermediate ones (`RUN/exports/step-N/eval`)."""
    found = {path.parent.parent.name: path for path in root.glob("*/eval/summary.json")}
    for path in root.glob("*/exports/step-*/eval/summary.json"):
        step = path.parent.parent.name.removeprefix("step-")
        if step.isdigit():
            found[f"{path.parents[3].name}/exports/step-{int(step):07d}"] = path
    return found


def read_summary(path: Path) -> dict:
    """{"profile", "protocol", "scores": our dataset -> {"mean", "ci95", "n_seeds", "comparable"}} from one
    summary.json; `comparable` is False for an IR score with graded gains (the paper's are binary)."""
    try:
        summary = EvalSummary.from_dict(json.loads(path.read_text()))
        scores = {
            r.dataset: {"mean": r.test_mean, "ci95": r.test_ci95, "n_seeds": r.n_seeds,
                        "comparable": "graded" not in metric_label(r)}
            for r in summary.results
        }
        protocol = protocol_of(summary)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckError(
            f"cannot read {path} ({type(error).__name__}: {error}); re-run "
            "examples/paper/evaluate_and_plot.py to rewrite it"
        ) from None
    return {"profile": summary.profile, "protocol": protocol, "scores": scores}


def verdict(paper: dict, ours: dict, margin: float = MARGIN) -> str:
    """Welch's t-test at 5% (paper: 5 seeds), then TOST within ±`margin`: `above`, `below`, `equivalent`,
    `inconclusive`, or `not testable` (one seed, zero spread); `not comparable` for a score of another protocol."""
    if not ours.get("comparable", True):
        return "not comparable"
    return welch_verdict(ours, paper, margin=margin)["verdict"]


def family_average(scores: list[dict]) -> dict:
    """Our family average (mean of the dataset means) with a 95% interval over its seeds, the datasets' per-seed
    spreads combined as independent; no interval when a dataset has a single seed."""
    n = min(s.get("n_seeds") or 1 for s in scores)
    mean = sum(s["mean"] for s in scores) / len(scores)
    if n < 2 or any(s["ci95"] is None for s in scores):
        return {"mean": mean, "ci95": None, "n_seeds": n}
    from scipy.stats import t

    sd = sum(sd_from_ci95(s["ci95"], s["n_seeds"]) ** 2 for s in scores) ** 0.5 / len(scores)
    return {"mean": mean, "ci95": float(t.ppf(0.975, n - 1)) * sd / n ** 0.5, "n_seeds": n,
            "comparable": all(s.get("comparable", True) for s in scores)}


def _row(entry: dict, ours: dict | None, margin: float) -> dict:
    row = {**entry, "ours": ours, "difference": None, "verdict": "missing"}
    if ours is not None:
        row.update(difference=round(ours["mean"] - entry["paper"]["mean"], 2),
                   verdict=verdict(entry["paper"], ours, margin))
    return row


def compare_run(name: str, paper: dict, summary: dict, margin: float = MARGIN) -> dict:
    scores = summary["scores"]
    if summary["protocol"] != "fine-tuned":  # a frozen probe measures something the paper never did
        scores = {dataset: {**score, "comparable": False} for dataset, score in scores.items()}
    rows = [_row(entry, scores.get(OUR_NAMES[entry["dataset"]]), margin) for entry in paper["rows"]]
    averages = []
    for entry in paper.get("averages", []):
        ours = [scores.get(OUR_NAMES[d]) for d in entry["datasets"]]
        averages.append(_row(entry, family_average(ours) if all(ours) else None, margin))
    return {"run": name, "sources": paper["sources"], "profile": summary["profile"],
            "protocol": summary["protocol"], "rows": rows, "averages": averages}


def compare(root: Path, size: str = "610M", margin: float = MARGIN) -> dict:
    """Every row of the paper's Tables 2-17 for `size` models against the evaluated runs under `root`."""
    tables = json.loads(TABLES.read_text())
    summaries = find_summaries(root)
    runs, missing_runs = [], []
    for name, paper in paper_runs(tables, size).items():
        if name in summaries:
            runs.append(compare_run(name, paper, read_summary(summaries[name]), margin))
        else:
            missing_runs.append({"run": name, "sources": paper["sources"]})
    counts: dict[str, dict] = {}
    for run in runs:  # per evaluation profile: a 1-seed quick run and a 5-seed paper run answer different questions
        for kind in ("rows", "averages"):
            tally = counts.setdefault(str(run["profile"]), {}).setdefault(kind, dict.fromkeys(VERDICTS, 0))
            for row in run[kind]:
                tally[row["verdict"]] += 1
    return {
        "source": tables["source"],
        "size": size,
        "margin": margin,
        "cpt_differences": cpt_differences(runs),
        "parentheses": tables["parentheses"],
        "counts": counts,
        "runs": runs,
        "missing_runs": missing_runs,
        "not_in_tables": sorted(set(summaries) - {r["run"] for r in runs}),
    }


CPT_STEPS = (2000, 12000, 22000)  # Tables 14-17's CPT lengths


def cpt_differences(runs: list[dict]) -> list[dict]:
    """Section 5's comparison, per CPT length with both arms evaluated and per dataset and family average: our
    CLM+MLM minus MLM+MLM against 0 and against the paper's difference."""
    by_name, out = {run["run"]: run for run in runs}, []
    for steps in CPT_STEPS:
        clm, mlm = by_name.get(f"cpt-clm-42000-{steps}"), by_name.get(f"cpt-mlm-42000-{steps}")
        if clm is None or mlm is None:
            continue
        others = {row["dataset"]: row for row in mlm["rows"] + mlm.get("averages", [])}
        for a in clm["rows"] + clm.get("averages", []):
            b = others.get(a["dataset"])
            if a["ours"] is None or b is None or b["ours"] is None:
                continue
            row = {"cpt_steps": steps, "dataset": a["dataset"], "tables": a["tables"]}
            if not (a["ours"].get("comparable", True) and b["ours"].get("comparable", True)):
                out.append({**row, "verdict": "not comparable", "against_zero": "not comparable",
                            "ours": None, "paper": a["paper"]["mean"] - b["paper"]["mean"]})
                continue
            test = difference_against(a["ours"], b["ours"], a["paper"], b["paper"])
            zero = welch_verdict(a["ours"], b["ours"], paper_n=b["ours"].get("n_seeds") or 1)["verdict"]
            out.append({**row, **test, "against_zero": zero})
    return out


def render_cpt_differences(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["## Section 5: CLM+MLM minus MLM+MLM CPT (Tables 14-17)", "",
             "Ours against 0: Welch at 5% of the two arms' seed scores (above, below, inconclusive). Ours against the "
             "paper's: Welch at 5% of the difference of the two differences (differs, or not distinguished: no "
             "difference shown, no agreement either).", "",
             "| CPT steps | Table | Dataset | Paper's difference | Ours | Ours against 0 | Ours against the paper's |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ours = "-" if row["ours"] is None else f"{row['ours']:+.2f}"
        lines.append(f"| {row['cpt_steps'] // 1000}K | {'/'.join(map(str, row['tables']))} | {row['dataset']} | "
                     f"{row['paper']:+.2f} | {ours} | {row['against_zero']} | {row['verdict']} |")
    return [*lines, ""]


def _score(score: dict | None) -> str:
    if score is None:
        return "-"
    return (
        f"{score['mean']:.2f} ± {score['ci95']:.2f}" if score["ci95"] is not None else f"{score['mean']:.2f} (1 seed)"
    )


def _sources(sources: list[dict]) -> str:
    """`C.3 "42K | 0K+42K" (Tables 10-13)`: where the paper prints a run."""
    return "; ".join(
        f'{s["section"]} "{s["printed"]}" (Tables {s["tables"][0]}-{s["tables"][-1]})'
        if len(s["tables"]) > 1
        else f'{s["section"]} "{s["printed"]}" (Table {s["tables"][0]})'
        for s in sources
    )


def render_run(run: dict) -> list[str]:
    lines = [
        f"## {run['run']}: {_sources(run['sources'])}; our evaluation profile {run['profile']}, "
        f"{run.get('protocol', 'fine-tuned')}",
        "",
        "| Table | Dataset | Paper | Ours | Difference | Verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in run["rows"] + run.get("averages", []):
        difference = "-" if row["difference"] is None else f"{row['difference']:+.2f}"
        lines.append(
            f"| {'/'.join(map(str, row['tables']))} | {row['dataset']} | {_score(row['paper'])} | "
            f"{_score(row['ours'])} | {difference} | {row['verdict']} |"
        )
    return [*lines, ""]


def render(report: dict) -> str:
    lines = [
        f"{report['size']} runs compared with {report['source']}.",
        "Paper and ours: mean ± 95% CI half-width over fine-tuning seeds (the paper's 5; see paper_tables.json). "
        "Verdict: Welch's t-test at 5% against the paper's 5 seeds: above or below when it rejects; else TOST at 5% "
        f"within ±{report.get('margin', MARGIN):g} points: equivalent when it rejects a larger difference, else "
        "inconclusive (no difference shown, no agreement either); not testable with one seed or zero spread; not "
        "comparable for a frozen probe or graded NDCG (the paper fine-tunes, with binary gains). Family averages are "
        "tested too.",
        f"Assumptions: {ASSUMPTIONS}",
        "",
    ]
    for run in report["runs"]:
        lines += render_run(run)
    lines += render_cpt_differences(report.get("cpt_differences", []))
    if report["missing_runs"]:
        lines += ["Missing here (not run or not evaluated):"]
        lines += [f"- {m['run']}: {_sources(m['sources'])}" for m in report["missing_runs"]] + [""]
    if report["not_in_tables"]:
        lines += [f"Evaluated here but in none of the paper's {report['size']} rows (Tables 2-17): "
                  + ", ".join(report["not_in_tables"]), ""]
        if any(name.startswith(FIGURE_ONLY) for name in report["not_in_tables"]):
            lines += [f"({FIGURE_ONLY}* runs are section 4's Figure 7: the paper prints no table for them.)", ""]
    for profile, kinds in sorted(report["counts"].items()):
        for kind, tally in kinds.items():
            what = "dataset scores" if kind == "rows" else "family averages"
            lines.append(f"Profile {profile}, {sum(tally.values())} {what}: "
                         + ", ".join(f"{n} {verdict}" for verdict, n in tally.items()) + ".")
    lines.append(
        f"{len(report['missing_runs'])} of the paper's {len(report['runs']) + len(report['missing_runs'])} "
        f"{report['size']} runs missing."
    )
    return "\n".join(lines)


def model_size(root: Path, size: str | None) -> str:
    """The size `root`'s runs have: `--size`, else the folder's name (the recipes write RUNS/SIZE/NAME)."""
    if size is not None and size not in SIZES:
        raise CheckError(f"the paper's tables hold no {size} models; pass --size {', '.join(SIZES)}")
    named = root.name if root.name in SIZES else None
    if size is not None and named is not None and size != named:
        raise CheckError(f"--size {size} but {str(root)!r} is named for {named} runs; drop --size or pass the "
                         f"{size} runs folder, e.g. runs/paper/{size}")
    if size is None and named is None:
        raise CheckError(f"cannot tell the model size of the runs in {str(root)!r} from its name; pass --size "
                         f"({', '.join(SIZES)})")
    return size or named


def check(root: Path, size: str | None = None, margin: float = MARGIN) -> dict:
    """The comparison for the runs folder `root`; CheckError when there is nothing to compare."""
    if not root.is_dir():
        raise CheckError(
            f"{str(root)!r} is not a folder; pass the runs folder of the paper recipes, e.g. runs/paper/610M"
        )
    size = model_size(root, size)
    if not find_summaries(root):
        raise CheckError(
            f"no RUN/eval/summary.json under {str(root)!r}; evaluate the runs first with "
            f"python examples/paper/evaluate_and_plot.py {root}"
        )
    if not margin > 0:
        raise CheckError(f"--margin must be a positive number of score points, got {margin}")
    return compare(root, size, margin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the folder holding the runs of one model size, e.g. runs/paper/610M")
    parser.add_argument("--size", choices=SIZES, help="their model size (default: the folder's name)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--margin", type=float, default=MARGIN,
                        help=f"equivalence margin in score points for the TOST verdict (default {MARGIN})")
    args = parser.parse_args(argv)
    try:
        report = check(Path(args.root), args.size, args.margin)
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
