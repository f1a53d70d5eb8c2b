"""Aggregate finished runs into `summary.json` (read by the model card), `summary.md` and PNG plots.

Per dataset: for each learning rate, the validation and test means over seeds and the test 95% confidence interval
(Student t, `null` with a single seed); the learning rate with the best validation mean is selected (section 2).

Stability: section 3 says, citing Figure 5, that CLM-pretrained models show "lower sensitivity to learning rate
choices", but the text defines no measure. `lr_spread` is ours: the population standard deviation (`statistics.pstdev`)
of the per-learning-rate test means over the learning rates run (0 with one), in score points; lower is steadier. It
depends on the grid run, so compare it only between models evaluated on the same learning rates.
Family means average the datasets of each task family. Scores are 0-100.

IR: NDCG@10 is scored with EncodEval's binary gains by default (the paper profile; `--ndcg-gains graded` for linear
gains); for sets with graded judgments (MS MARCO's test split, TREC DL 2019, grades 0-3) the other NDCG is reported
beside it in `extra_metrics` (`ndcg@10_graded`, or `ndcg@10_binary`) and in the table's "Other" column.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from hf_encoderize.evaluation import bootstrap
from hf_encoderize.evaluation.loaders import DATASETS, TASKS
from hf_encoderize.records.eval_summary import DatasetResult, EvalProtocol, EvalSummary

TASK_TITLES = {"sc": "Sequence classification (SC)", "tc": "Token classification (TC)",
               "qa": "Question answering (QA)", "ir": "Information retrieval (IR)"}


def ci95(values: list[float]) -> float | None:
    """Half-width of the 95% confidence interval of the mean (Student t); None for fewer than two values."""
    if len(values) < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)))


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values))


def collect_runs(results_dir: Path, expected: dict, runs: set[Path] | None = None) -> dict[tuple[str, str], list[dict]]:
    """Finished runs of this protocol, grouped by (task, dataset), without their per-example scores. `runs`: the run
    folders of the grid asked for (None: every one there), so that runs kept from an earlier grid (other learning
    rates or seeds) are reused where asked for and never reported where not."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(results_dir.glob("*/*/lr*_sd*/results.json")):
        if runs is not None and path.parent not in runs:
            continue
        record = json.loads(path.read_text())
        if record.get("fingerprint") != expected:
            continue
        record.pop("per_example", None)
        record["_path"] = str(path)  # the selected learning rate's per-example scores are re-read for the bootstrap
        groups.setdefault((record["task"], record["dataset"]), []).append(record)
    return groups


def dataset_result(runs: list[dict]) -> DatasetResult:
    """The contract's per-dataset entry (see module docstring)."""
    by_lr: dict[str, list[dict]] = {}
    for run in sorted(runs, key=lambda r: (float(r["lr"]), r["seed"])):
        by_lr.setdefault(run["lr"], []).append(run)
    per_lr = {}
    for lr, lr_runs in by_lr.items():
        tests = [r["test"]["score"] for r in lr_runs]
        per_lr[lr] = {"val_mean": _mean([r["validation"]["score"] for r in lr_runs]), "test_mean": _mean(tests),
                      "test_ci95": ci95(tests), "n_seeds": len(tests)}
    best = max(per_lr, key=lambda lr: per_lr[lr]["val_mean"])  # ties keep the smaller learning rate
    best_runs = by_lr[best]
    extra_keys = [k for k in best_runs[0]["test"] if k != "score"]
    first = runs[0]
    return DatasetResult(
        task=first["task"], dataset=first["dataset"], metric=first["metric"], best_lr=best,
        test_mean=per_lr[best]["test_mean"], test_ci95=per_lr[best]["test_ci95"],
        n_seeds=per_lr[best]["n_seeds"], val_mean=per_lr[best]["val_mean"],
        lr_spread=statistics.pstdev([v["test_mean"] for v in per_lr.values()]) if len(per_lr) > 1 else 0.0,
        per_lr=per_lr,
        test_bootstrap=bootstrap.interval(first["task"], [json.loads(Path(r["_path"]).read_text())
                                                          for r in best_runs if "_path" in r]),
        extra_metrics={k: _mean([r["test"][k] for r in best_runs]) for k in extra_keys},
        note=first.get("note"),
    )


def build_summary(results_dir: Path, *, model: str, model_name: str, profile: str, expected: dict,
                  runs: set[Path] | None = None) -> EvalSummary:
    groups = collect_runs(results_dir, expected, runs)
    order = list(DATASETS)
    keys = sorted(groups, key=lambda k: (TASKS.index(k[0]), order.index(k[1]) if k[1] in order else len(order)))
    results = [dataset_result(groups[key]) for key in keys]
    runs = [run for key in keys for run in groups[key]]
    protocol = EvalProtocol.from_dict({**(runs[0]["protocol"] if runs else {}),  # the grid as run, not as asked
                                       "lrs": sorted({r["lr"] for r in runs}, key=float),
                                       "seeds": sorted({r["seed"] for r in runs})})
    family_means = {}
    for task in TASKS:
        scores = [r.test_mean for r in results if r.task == task]
        if scores:
            family_means[task] = _mean(scores)
    return EvalSummary(model=model, model_name=model_name, mode=expected["mode"], profile=profile, protocol=protocol,
                       results=results, family_means=family_means)


def _score(mean: float, ci: float | None) -> str:
    return f"{mean:.2f} ± {ci:.2f}" if ci is not None else f"{mean:.2f} (1 seed)"


def _interval(found: dict | None) -> str:
    """The bootstrap interval over test examples and seeds (`bootstrap.interval`), or "-" without one."""
    return f"[{found['low']:.2f}, {found['high']:.2f}]" if found else "-"


def render_markdown(summary: dict) -> str:
    """One table per task family: test mean ± 95% CI at the selected learning rate, and the stability measure."""
    protocol = summary["protocol"]
    lines = [f"# Evaluation of {summary['model_name']}", "",
             f"Model `{summary['model']}`, {summary['mode']} attention, profile `{summary['profile']}`. "
             f"Learning rates {', '.join(protocol.get('lrs', []))}; seeds {protocol.get('seeds')}; batch size "
             f"{protocol.get('batch_size')}; "
             + (f"frozen hidden states (only the task head trains; retrieval: a linear map from the identity), "
                f"{protocol.get('max_steps')} steps over as many epochs as that takes; " if protocol.get("frozen")
                else f"at most {protocol.get('max_steps')} steps or one epoch; ") +
             f"{100 * protocol.get('warmup_ratio', 0):.0f}% warmup then linear decay. The learning rate is chosen on "
             "validation; test scores are means ± 95% CI over seeds (0-100), then the 95% bootstrap interval of the "
             "same mean with the test examples and the seeds redrawn (2,000 replicates), which includes the test "
             "set's own sampling. LR spread: standard deviation of the "
             "test mean across learning rates (population SD over the learning rates run; our measure of the "
             "learning-rate sensitivity of section 3, which the paper does not define; lower is steadier).", ""]
    for task in TASKS:
        rows = [r for r in summary["results"] if r["task"] == task]
        if not rows:
            continue
        lines += [f"## {TASK_TITLES[task]}", "",
                  "| Dataset | Metric | Test | Test, examples redrawn | Best lr | Val | Seeds | LR spread | Other |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            other = ", ".join(f"{k} {v:.2f}" for k, v in r["extra_metrics"].items())
            metric = r["metric"] + (f" ({protocol.get('ndcg_gains', 'binary')} gains)" if task == "ir" else "")
            lines.append(f"| {r['dataset']} | {metric} | {_score(r['test_mean'], r['test_ci95'])} | "
                         f"{_interval(r.get('test_bootstrap'))} | {r['best_lr']} | {r['val_mean']:.2f} | "
                         f"{r['n_seeds']} | {r['lr_spread']:.2f} | {other} |")
        lines += ["", f"Family mean: {summary['family_means'][task]:.2f}", ""]
    notes = [f"- {r['dataset']}: {r['note']}" for r in summary["results"] if r.get("note")]
    if notes:
        lines += ["Notes:", "", *notes, ""]
    return "\n".join(lines)


def write_summary(results_dir: Path, *, model: str, model_name: str, profile: str, expected: dict,
                  runs: set[Path] | None = None) -> dict:
    """Write summary.json, summary.md, scores.png and lr_sensitivity.png into `results_dir` from the finished `runs`
    (`collect_runs`). Returns the summary."""
    from hf_encoderize.evaluation.plots import plot_lr_sensitivity, plot_scores

    typed = build_summary(results_dir, model=model, model_name=model_name, profile=profile, expected=expected,
                          runs=runs)
    typed.to_json(results_dir / "summary.json")  # the one writer of summary.json, the card's and `run`'s source
    summary = typed.to_dict()
    (results_dir / "summary.md").write_text(render_markdown(summary))
    if typed.results:
        plot_scores({typed.model_name: summary}, results_dir / "scores.png")
        plot_lr_sensitivity(summary, results_dir / "lr_sensitivity.png")
    return summary
