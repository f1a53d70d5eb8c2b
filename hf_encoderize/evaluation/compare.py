"""`compare`: several models' summaries side by side, as one Markdown table and one plot.

Rows are datasets (then the family means), columns are models; each cell is the test mean ± 95% CI at the model's
own selected learning rate. The best score of a row is in bold only when it is significantly above every other cell
of the row: Welch's t-test at 5% (`welch_verdict`) on the seeds behind each cell. One-seed cells and family means
(an average over datasets, with no spread of its own) are never bold: there is nothing to test. Models evaluated on
different datasets are allowed: missing cells read "-".

`welch_verdict` is the test that says whether one mean over seeds differs from another reported as mean ± 95% CI
half-width (the paper's tables): each side's standard deviation is recovered from its interval (half-width x sqrt(n)
/ t(0.975, n - 1), so Student t intervals, as `summary.ci95` computes them), then Welch's unequal-variance t-test at
5%. One seed has no spread to test with: "not testable".
"""

from __future__ import annotations

import json
import math
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation.loaders import TASKS


def read_summary(folder: str | Path) -> dict:
    """The summary.json in `folder` (a results folder written by `eval`), or a one-line error."""
    path = Path(folder)
    path = path if path.name == "summary.json" else path / "summary.json"
    if not path.is_file():
        raise EncoderizeError(f"{path.parent} holds no summary.json; pass results folders written by `eval`")
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise EncoderizeError(f"{path} is not valid JSON; re-run `eval` to rewrite it") from None
    if not isinstance(summary, dict) or "results" not in summary or "model_name" not in summary:
        raise EncoderizeError(f"{path} is not an eval summary (no results/model_name); pass eval results folders")
    return summary


def sd_from_ci95(ci95: float, n: int) -> float:
    """The per-seed standard deviation behind a 95% Student t interval of half-width `ci95` over `n` seeds."""
    from scipy.stats import t

    return ci95 * math.sqrt(n) / float(t.ppf(0.975, n - 1))


def welch_verdict(ours: dict, paper: dict, *, paper_n: int = 5, alpha: float = 0.05) -> dict:
    """Welch's t-test of our mean against the paper's. `ours`: {"mean", "ci95", "n_seeds"}; `paper`: {"mean", "ci95"}
    over `paper_n` seeds (5: section 2). Returns {"verdict": "above" | "below" | "no difference" | "not testable",
    "p_value"}: above/below when the two-sided p-value is under `alpha`."""
    from scipy.stats import t

    n = ours.get("n_seeds") or 1
    if n < 2 or ours.get("ci95") is None:
        return {"verdict": "not testable", "p_value": None}
    var_ours, var_paper = sd_from_ci95(ours["ci95"], n) ** 2 / n, sd_from_ci95(paper["ci95"], paper_n) ** 2 / paper_n
    difference, se = ours["mean"] - paper["mean"], math.sqrt(var_ours + var_paper)
    if se == 0:  # both sides without spread: any difference is certain
        p_value = 1.0 if difference == 0 else 0.0
    else:
        df = (var_ours + var_paper) ** 2 / (var_ours ** 2 / (n - 1) + var_paper ** 2 / (paper_n - 1))
        p_value = float(2 * t.sf(abs(difference) / se, df)) if df > 0 else 1.0
    verdict = "no difference" if p_value >= alpha else "above" if difference > 0 else "below"
    return {"verdict": verdict, "p_value": p_value}


def _labels(summaries: list[dict]) -> list[str]:
    """Column names: model names, made unique with their mode or position when two coincide."""
    labels = [s["model_name"] for s in summaries]
    return [label if labels.count(label) == 1 else f"{label} ({s['mode']}, #{k + 1})"
            for k, (label, s) in enumerate(zip(labels, summaries, strict=True))]


def comparison_table(summaries: list[dict], labels: list[str]) -> str:
    rows = []  # (task, dataset, metric) in task order
    for summary in summaries:
        for r in summary["results"]:
            if (r["task"], r["dataset"], r["metric"]) not in rows:
                rows.append((r["task"], r["dataset"], r["metric"]))
    rows.sort(key=lambda row: TASKS.index(row[0]))
    lines = ["| Task | Dataset | Metric | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
    for task, dataset, metric in rows:
        cells = []
        for summary in summaries:
            found = next((r for r in summary["results"] if r["dataset"] == dataset), None)
            cells.append((found["test_mean"], found["test_ci95"], found.get("n_seeds") or 1) if found else None)
        lines.append(f"| {task} | {dataset} | {metric} | " + " | ".join(_cells(cells)) + " |")
    for task in TASKS:
        means = [(s["family_means"][task], None, 1) if task in s.get("family_means", {}) else None for s in summaries]
        if any(means):
            lines.append(f"| {task} | **family mean** | | " + " | ".join(_cells(means)) + " |")
    return "\n".join(lines) + "\n"


def significantly_best(values: list[tuple[float, float | None, int] | None], alpha: float = 0.05) -> int | None:
    """Index of the (mean, ci95, n_seeds) cell that Welch's t-test puts above every other cell at `alpha`, else None
    (a single cell, a tie, a one-seed cell, or any difference the test cannot tell from noise)."""
    present = [(k, v) for k, v in enumerate(values) if v is not None]
    if len(present) < 2:
        return None
    best, top = max(present, key=lambda item: item[1][0])
    for k, other in present:
        if k == best:
            continue
        if min(top[2], other[2]) < 2 or top[1] is None or other[1] is None:
            return None
        verdict = welch_verdict({"mean": top[0], "ci95": top[1], "n_seeds": top[2]},
                                {"mean": other[0], "ci95": other[1]}, paper_n=other[2], alpha=alpha)
        if verdict["verdict"] != "above":
            return None
    return best


def _cells(values: list[tuple[float, float | None, int] | None]) -> list[str]:
    bold = significantly_best(values)
    cells = []
    for k, value in enumerate(values):
        if value is None:
            cells.append("-")
            continue
        text = f"{value[0]:.2f}" + (f" ± {value[1]:.2f}" if value[1] is not None else "")
        cells.append(f"**{text}**" if k == bold else text)
    return cells


def compare(folders: list[str], output_dir: str = "comparison") -> dict:
    """Write OUTPUT_DIR/comparison.md and comparison.png for the given eval results folders. Returns paths and table."""
    from hf_encoderize.evaluation.plots import plot_scores

    if len(folders) < 1:
        raise EncoderizeError("compare needs at least one eval results folder (two or more to compare)")
    summaries = [read_summary(folder) for folder in folders]
    labels = _labels(summaries)
    table = comparison_table(summaries, labels)
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise EncoderizeError(f"output path {str(out)!r} is a file; pick a folder path")
    out.mkdir(parents=True, exist_ok=True)
    header = "# Comparison\n\nTest mean ± 95% CI over seeds at each model's selected learning rate (0-100).\n\n"
    (out / "comparison.md").write_text(header + table)
    plot_scores(dict(zip(labels, summaries, strict=True)), out / "comparison.png")
    return {"table": table, "markdown": str(out / "comparison.md"), "plot": str(out / "comparison.png")}


@dataclass
class CompareConfig:
    """Which eval results `hf-encoderize compare` puts side by side, and where the table and plot go."""

    results_dirs: list[str]
    """Eval results folders (each holding summary.json)."""
    _: KW_ONLY
    output_dir: str = "comparison"
    """Where comparison.md and comparison.png go."""


def compare_results(config: CompareConfig) -> dict:
    """`hf-encoderize compare`: `compare(config.results_dirs, config.output_dir)`."""
    return compare(config.results_dirs, config.output_dir)
