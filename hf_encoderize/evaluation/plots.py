"""PNG plots of a summary: per-family bars with 95% CI whiskers (one bar per model, so `compare` reuses it) and the
learning-rate sensitivity curves (test score per learning rate, the view behind section 3's stability claim and its
Figure 5; the paper defines no stability number). matplotlib runs headless (Agg)."""

from __future__ import annotations

from pathlib import Path

from hf_encoderize.evaluation.loaders import TASKS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _families(summaries: dict[str, dict]) -> list[str]:
    present = {r["task"] for s in summaries.values() for r in s["results"]}
    return [t for t in TASKS if t in present]


def plot_scores(summaries: dict[str, dict], path: Path) -> None:
    """One panel per task family; per dataset, one bar per model (test mean at the best lr) with CI whiskers."""
    plt = _pyplot()
    families = _families(summaries)
    figure, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.6), squeeze=False)
    width = 0.8 / len(summaries)
    for axis, task in zip(axes[0], families, strict=True):
        datasets = list(dict.fromkeys(r["dataset"] for s in summaries.values() for r in s["results"]
                                      if r["task"] == task))
        for k, (name, summary) in enumerate(summaries.items()):
            by_name = {r["dataset"]: r for r in summary["results"]}
            means = [by_name[d]["test_mean"] if d in by_name else 0.0 for d in datasets]
            errors = [(by_name[d]["test_ci95"] or 0.0) if d in by_name else 0.0 for d in datasets]
            positions = [i + (k - (len(summaries) - 1) / 2) * width for i in range(len(datasets))]
            axis.bar(positions, means, width, yerr=errors, capsize=3, label=name)
        metric = next(r["metric"] for s in summaries.values() for r in s["results"] if r["task"] == task)
        axis.set_xticks(range(len(datasets)), datasets, rotation=20, fontsize=8)
        axis.set_title(f"{task.upper()} ({metric})")
        axis.set_ylim(0, 100)
    axes[0][0].set_ylabel("test score (mean ± 95% CI)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_lr_sensitivity(summary: dict, path: Path) -> None:
    """Test mean (± CI) against learning rate, one panel per family, one line per dataset (cf. Figure 5)."""
    plt = _pyplot()
    families = _families({"": summary})
    figure, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.4), squeeze=False)
    for axis, task in zip(axes[0], families, strict=True):
        for result in (r for r in summary["results"] if r["task"] == task):
            lrs = sorted(result["per_lr"], key=float)
            means = [result["per_lr"][lr]["test_mean"] for lr in lrs]
            errors = [result["per_lr"][lr]["test_ci95"] or 0.0 for lr in lrs]
            axis.errorbar([float(lr) for lr in lrs], means, yerr=errors, marker="o", capsize=3,
                          label=result["dataset"])
        axis.set_xscale("log")
        axis.set_xlabel("learning rate")
        axis.set_title(task.upper())
        axis.legend(fontsize=7)
    axes[0][0].set_ylabel("test score")
    figure.suptitle(f"{summary['model_name']}: learning-rate sensitivity", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
