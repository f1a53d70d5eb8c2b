"""`compare`: several models' summaries side by side, as one Markdown table and one plot.

Rows are datasets (then the family means), columns are models; each cell is the test mean ± 95% CI over seeds at the
model's own selected learning rate, then, in brackets, the 95% bootstrap interval of the same mean with the test
examples and the seeds redrawn (`bootstrap`; "-" when the summary has none). Models evaluated on different datasets
are allowed: missing cells read "-".

Design choices:
- The best score of a row is bold only when it is significantly above every other cell of the row: Welch's t-test
  at 5% over the seeds behind each cell (`stats.welch_verdict`; one seed, or zero spread, is never significant) and,
  where both folders still hold the per-example scores, the paired bootstrap over the same test examples (the 95%
  interval of the difference above 0). Family means (an average over datasets, with no spread of its own) are never
  bold: there is nothing to test.
- One protocol per table. A frozen probe (`eval --frozen`: only the task head trains) and a fine-tuned model answer
  different questions, and binary and graded NDCG@10 are different metrics: a mix is refused unless `mixed` is set;
  then each column says its protocol, IR rows say their gains, and no cell is bold against a column of the other
  protocol. Every table opens with the protocol it holds.
"""

from __future__ import annotations

import json
import math
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation import bootstrap
from hf_encoderize.evaluation.loaders import TASKS
from hf_encoderize.evaluation.stats import sd_from_ci95, welch_verdict  # noqa: F401  (the paper check imports them)
from hf_encoderize.records.eval_summary import DatasetResult, EvalSummary

PROTOCOLS = {"frozen probe": "frozen probe (only the task head trains, on the model's frozen hidden states)",
             "fine-tuned": "fine-tuned (the whole model trains with its task head, the paper's protocol, section 2)"}
RESULT_KEYS = ("task", "dataset", "metric", "test_mean", "test_ci95")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_results(path: Path, summary: dict) -> None:
    """Every row `compare` reads is there and has the right type, or a one-line error naming the first that is not."""
    if not isinstance(summary["results"], list):
        raise EncoderizeError(f"{path}: results is not a list; re-run `eval` to rewrite the summary")
    for row in summary["results"]:
        missing = [key for key in RESULT_KEYS if not isinstance(row, dict) or key not in row]
        name = row.get("dataset", "?") if isinstance(row, dict) else "?"
        if missing:
            raise EncoderizeError(f"{path}: the {name} row has no {', '.join(missing)}; it was not written by this "
                                  "version's `eval`; re-run `eval` on that folder to rewrite summary.json")
        if row["task"] not in TASKS or not _number(row["test_mean"]) or not (
                row["test_ci95"] is None or _number(row["test_ci95"])):
            raise EncoderizeError(f"{path}: the {name} row has a task, test_mean or test_ci95 `eval` never writes; "
                                  "re-run `eval` on that folder to rewrite summary.json")


def read_summary(folder: str | Path) -> EvalSummary:
    """The summary.json in `folder` (a results folder written by `eval`), or a one-line error."""
    path = Path(folder)
    path = path if path.name == "summary.json" else path / "summary.json"
    if not path.is_file():
        raise EncoderizeError(f"{path.parent} holds no summary.json; pass results folders written by `eval`")
    try:
        summary = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise EncoderizeError(f"{path} is not valid JSON; re-run `eval` to rewrite it") from None
    if not isinstance(summary, dict) or "results" not in summary or "model_name" not in summary:
        raise EncoderizeError(f"{path} is not an eval summary (no results/model_name); pass eval results folders")
    _check_results(path, summary)
    return EvalSummary.from_dict(summary)


def protocol_of(summary: EvalSummary) -> str:
    """"frozen probe" or "fine-tuned": what trained when this summary's scores were made."""
    return "frozen probe" if summary.protocol.frozen else "fine-tuned"


def metric_label(row: DatasetResult) -> str:
    """The metric as the row prints it; IR says which NDCG@10 gains scored it (graded when the binary one is the
    extra metric, `summary`), so binary and graded never share a row."""
    if row.task != "ir":
        return row.metric
    graded = "ndcg@10_binary" in (row.extra_metrics or {})
    return f"{row.metric} ({'graded' if graded else 'binary'} gains)"


def check_protocols(summaries: list[EvalSummary], mixed: bool) -> None:
    """Refuse a frozen probe beside a fine-tuned model, or one dataset scored with binary and graded NDCG, unless
    `mixed`: the two are different measurements, and a bold cell between them would mean nothing."""
    if mixed:
        return
    protocols = {protocol_of(s) for s in summaries}
    if len(protocols) > 1:
        raise EncoderizeError("these summaries mix frozen-probe and fine-tuned evaluations (the summaries' "
                              "protocol.frozen), which measure different things; compare like with like, or pass "
                              "--mixed to put them side by side with each column labelled and nothing bold across")
    for dataset in sorted({r.dataset for s in summaries for r in s.results if r.task == "ir"}):
        labels = {metric_label(r) for s in summaries for r in s.results if r.dataset == dataset}
        if len(labels) > 1:
            raise EncoderizeError(f"{dataset} is scored with binary NDCG@10 in one summary and graded in another "
                                  "(eval --ndcg-gains); re-evaluate with the same gains, or pass --mixed to list them "
                                  "as separate rows")


def _labels(summaries: list[EvalSummary]) -> list[str]:
    """Column names: model names, made unique with their mode or position when two coincide, and with their protocol
    when the table mixes protocols."""
    labels = [s.model_name for s in summaries]
    labels = [label if labels.count(label) == 1 else f"{label} ({s.mode}, #{k + 1})"
              for k, (label, s) in enumerate(zip(labels, summaries, strict=True))]
    if len({protocol_of(s) for s in summaries}) > 1:
        labels = [f"{label} [{protocol_of(s)}]" for label, s in zip(labels, summaries, strict=True)]
    return labels


@dataclass
class Cell:
    """One model's score on one row: mean ± `ci95` over `n_seeds` seeds, its bootstrap `interval`, and where its
    per-example scores are (`folder`, `row`), read only when the paired bootstrap needs them."""

    mean: float
    ci95: float | None
    n_seeds: int
    interval: dict | None = None
    protocol: str = "fine-tuned"
    folder: str | None = None
    row: DatasetResult | None = None

    def records(self) -> list[dict]:
        if self.folder is None or self.row is None:
            return []
        if not hasattr(self, "_records"):
            self._records = bootstrap.best_lr_records(self.folder, self.row)
        return self._records


def _as_cell(value) -> Cell | None:
    return value if value is None or isinstance(value, Cell) else Cell(*value)  # (mean, ci95, n_seeds) tuples too


def caption(summaries: list[EvalSummary], labels: list[str]) -> str:
    """What the table holds: its protocol (or each column's), what a cell is, what bold means, what no test covers."""
    protocols = [protocol_of(s) for s in summaries]
    if len(set(protocols)) == 1:
        protocol = f"Protocol: {PROTOCOLS[protocols[0]]}."
    else:
        protocol = ("Protocols differ (--mixed): " + "; ".join(f"{label}: {p}" for label, p in
                                                               zip(labels, protocols, strict=True))
                    + ". No cell is bold against a column of another protocol.")
    return (f"{protocol} Cells: test mean ± 95% CI over head seeds at each model's selected learning rate, then "
            "[the 95% bootstrap interval of that mean with the test examples and seeds redrawn]; 0-100. Bold: "
            "significantly above every other cell of its row (Welch's t-test at 5% over seeds and, where the "
            "per-example scores are kept, the paired bootstrap over the same test examples). Pretraining variance "
            "is outside both tests: each column is one pretrained model.")


def comparison_table(summaries: list[EvalSummary], labels: list[str], folders: list[str] | None = None) -> str:
    """The caption, a blank line, then the Markdown table."""
    rows = []  # (task, dataset, metric label) in task order
    for summary in summaries:
        for r in summary.results:
            if (r.task, r.dataset, metric_label(r)) not in rows:
                rows.append((r.task, r.dataset, metric_label(r)))
    rows.sort(key=lambda row: TASKS.index(row[0]))
    folders = folders or [None] * len(summaries)
    lines = ["| Task | Dataset | Metric | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
    for task, dataset, metric in rows:
        cells = []
        for summary, folder in zip(summaries, folders, strict=True):
            found = next((r for r in summary.results if r.dataset == dataset and metric_label(r) == metric), None)
            cells.append(Cell(found.test_mean, found.test_ci95, found.n_seeds or 1, found.test_bootstrap,
                              protocol_of(summary), folder, found) if found else None)
        lines.append(f"| {task} | {dataset} | {metric} | " + " | ".join(_cells(cells, task)) + " |")
        zero = [Cell(c.row.extra_metrics["zero_shot"], None, 1) if c and "zero_shot" in (
            c.row.extra_metrics or {}) else None for c in cells]
        if any(zero):  # frozen IR: the map before training (the identity), so the trained map's gain is visible
            lines.append(f"| {task} | {dataset}, zero-shot (untrained map) | {metric} | " + " | ".join(_cells(zero))
                         + " |")
    for task in TASKS:
        means = [Cell(s.family_means[task], None, 1) if task in (s.family_means or {}) else None
                 for s in summaries]
        if any(means):
            lines.append(f"| {task} | **family mean** | | " + " | ".join(_cells(means)) + " |")
    return caption(summaries, labels) + "\n\n" + "\n".join(lines) + "\n"


def significantly_best(values: list, alpha: float = 0.05, task: str | None = None) -> int | None:
    """Index of the cell (a `Cell` or a (mean, ci95, n_seeds) tuple) that is significantly above every other cell at
    `alpha`, else None (a single cell, a tie, a one-seed or zero-spread cell, cells of different protocols, or any
    difference the tests cannot tell from noise). Welch's t-test over seeds decides; with `task` and the per-example
    scores of both cells, the paired bootstrap's 95% interval of the difference must lie above 0 too."""
    present = [(k, cell) for k, cell in enumerate(map(_as_cell, values)) if cell is not None]
    if len(present) < 2 or len({cell.protocol for _, cell in present}) > 1:
        return None
    best, top = max(present, key=lambda item: item[1].mean)
    for k, other in present:
        if k == best:
            continue
        verdict = welch_verdict({"mean": top.mean, "ci95": top.ci95, "n_seeds": top.n_seeds},
                                {"mean": other.mean, "ci95": other.ci95}, paper_n=other.n_seeds, alpha=alpha)
        if verdict["verdict"] != "above":
            return None
        if task is not None and top.records() and other.records():
            pair = bootstrap.paired(task, top.records(), other.records())
            if pair is not None and not pair["low"] > 0:
                return None
    return best


def _cells(values: list, task: str | None = None) -> list[str]:
    bold = significantly_best(values, task=task)
    texts = []
    for k, cell in enumerate(map(_as_cell, values)):
        if cell is None:
            texts.append("-")
            continue
        text = f"{cell.mean:.2f}" + (f" ± {cell.ci95:.2f}" if cell.ci95 is not None else "")
        if cell.interval:
            text += f" [{cell.interval['low']:.2f}, {cell.interval['high']:.2f}]"
        texts.append(f"**{text}**" if k == bold else text)
    return texts


def compare(folders: list[str], output_dir: str = "comparison", *, mixed: bool = False) -> dict:
    """Write OUTPUT_DIR/comparison.md and comparison.png for the given eval results folders. Returns paths and table.
    Refuses frozen-probe beside fine-tuned summaries, or binary beside graded NDCG@10, unless `mixed`."""
    from hf_encoderize.evaluation.plots import plot_scores

    if len(folders) < 1:
        raise EncoderizeError("compare needs at least one eval results folder (two or more to compare)")
    summaries = [read_summary(folder) for folder in folders]
    check_protocols(summaries, mixed)
    labels = _labels(summaries)
    roots = [str(Path(f).parent if Path(f).name == "summary.json" else Path(f)) for f in folders]
    table = comparison_table(summaries, labels, roots)
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise EncoderizeError(f"output path {str(out)!r} is a file; pick a folder path")
    out.mkdir(parents=True, exist_ok=True)
    header = f"# Comparison\n\n{len(summaries)} eval summaries side by side.\n\n"
    (out / "comparison.md").write_text(header + table)
    plot_scores(dict(zip(labels, [s.to_dict() for s in summaries], strict=True)), out / "comparison.png")
    return {"table": table, "markdown": str(out / "comparison.md"), "plot": str(out / "comparison.png")}


@dataclass
class CompareConfig:
    """Which eval results `hf-encoderize compare` puts side by side, and where the table and plot go."""

    results_dirs: list[str]
    """Eval results folders (each holding summary.json)."""
    _: KW_ONLY
    output_dir: str = "comparison"
    """Where comparison.md and comparison.png go."""
    mixed: bool = False
    """Allow frozen-probe (`eval --frozen`) beside fine-tuned summaries, and binary beside graded NDCG@10: each
    column then says its protocol, IR rows their gains, and no cell is bold across protocols."""


def compare_results(config: CompareConfig) -> dict:
    """`hf-encoderize compare`: `compare(config.results_dirs, config.output_dir, mixed=config.mixed)`."""
    return compare(config.results_dirs, config.output_dir, mixed=config.mixed)
