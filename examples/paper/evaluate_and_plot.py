"""Evaluate every encoder the paper recipes produced, then draw the paper-style comparisons from the summaries.

    python examples/paper/evaluate_and_plot.py runs/paper/610M [--profile paper|quick|smoke] [--plots-only]

For each `RUN/encoder` under the folder it runs `hf-encoderize eval` (the library call, into `RUN/eval`; finished
fine-tuning runs are skipped, so a killed evaluation resumes), then reads every `RUN/eval/summary.json` and draws, one
panel per task family (SC, TC, QA, IR), from the family means:
- `pfs.png`    score against the CLM share of the budget, one line per budget (paper, Figure 6);
- `cpt.png`    score against CPT steps, MLM CPT of the CLM base vs of the MLM base (paper, Figure 8);
- `masking.png` score against the masking ratio, MLM-only vs CLM+MLM 25-75 (paper, Figures 3 and 7);
- `efficiency.png` score against the pretraining step, CLM vs MLM base runs, from their `--export-steps` encoders
  (`RUN/exports/step-N`, evaluated into `RUN/exports/step-N/eval`) and final ones (paper, Figure 4);
and writes `comparison.json` with every run's family means. Run names follow examples/paper/common.sh.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

TASKS = ("sc", "tc", "qa", "ir")
PFS = re.compile(r"^(?:(clm)|(mlm)|clm(?P<clm>[\d.]+)-mlm[\d.]+)-(?P<steps>\d+)$")
CPT = re.compile(r"^cpt-(?P<base>clm|mlm)-42000-(?P<steps>\d+)$")
MASKING = re.compile(r"^(?P<kind>mlm|clm0\.25-mlm0\.75)-42000(?:-mask(?P<mask>[\d.]+))?$")


def evaluate_runs(root: Path, profile: str) -> None:
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    for encoder in sorted(root.glob("*/encoder")):
        print(f"== {encoder.parent.name}", flush=True)
        evaluate(LoadConfig(str(encoder)), EvalConfig(profile=profile, output_dir=str(encoder.parent / "eval")))
    for export in sorted(root.glob("*/exports/step-*")):  # intermediate encoders (Figure 4)
        if (export / "config.json").is_file():
            print(f"== {export.parent.parent.name} {export.name}", flush=True)
            evaluate(LoadConfig(str(export)), EvalConfig(profile=profile, output_dir=str(export / "eval")))


def family_means(root: Path) -> dict[str, dict[str, float]]:
    means = {}
    for summary in sorted(root.glob("*/eval/summary.json")):
        means[summary.parent.parent.name] = json.loads(summary.read_text()).get("family_means", {})
    return means


def efficiency_points(root: Path, means: dict) -> dict[str, list[tuple[float, dict]]]:
    """`clm-42000`/`mlm-42000` -> [(step, family means)] over their exports and their final encoder."""
    lines: dict[str, list] = {}
    for base in ("clm-42000", "mlm-42000"):
        points = [(int(s.parent.parent.name.removeprefix("step-")), json.loads(s.read_text()).get("family_means", {}))
                  for s in sorted((root / base / "exports").glob("step-*/eval/summary.json"))]
        if base in means:
            points.append((42000, means[base]))
        if points:
            lines[base.split("-")[0].upper()] = sorted(points, key=lambda p: p[0])
    return lines


def pfs_points(means: dict) -> dict[int, list[tuple[float, dict]]]:
    """budget -> [(CLM share in %, family means)], sorted by share."""
    lines: dict[int, list] = {}
    for name, scores in means.items():
        match = PFS.match(name)
        if match:
            share = 100.0 if match.group(1) else 0.0 if match.group(2) else 100 * float(match.group("clm"))
            lines.setdefault(int(match.group("steps")), []).append((share, scores))
    return {steps: sorted(points, key=lambda p: p[0]) for steps, points in sorted(lines.items())}


def cpt_points(means: dict) -> dict[str, list[tuple[float, dict]]]:
    lines: dict[str, list] = {}
    for name, scores in means.items():
        match = CPT.match(name)
        if match:
            lines.setdefault(f"MLM CPT of the {match.group('base').upper()} model", []).append(
                (int(match.group("steps")), scores))
    return {label: sorted(points, key=lambda p: p[0]) for label, points in lines.items()}


def masking_points(means: dict) -> dict[str, list[tuple[float, dict]]]:
    lines: dict[str, list] = {}
    for name, scores in means.items():
        match = MASKING.match(name)
        if match:
            label = "MLM only" if match.group("kind") == "mlm" else "CLM 25% + MLM 75%"
            lines.setdefault(label, []).append((100 * float(match.group("mask") or 0.4), scores))
    return {label: sorted(points, key=lambda p: p[0]) for label, points in lines.items()}


def plot(lines: dict, xlabel: str, title: str, path: Path) -> Path | None:
    """One panel per task family; one line per entry of `lines` ({label: [(x, family means)]})."""
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(TASKS), figsize=(4 * len(TASKS), 3.4), dpi=120)
    for axis, task in zip(axes, TASKS, strict=True):
        for label, points in lines.items():
            shown = [(x, scores[task]) for x, scores in points if task in scores]
            if shown:
                axis.plot(*zip(*shown, strict=True), "o-", label=str(label))
        axis.set(title=task.upper(), xlabel=xlabel, ylabel="score (family mean)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the folder holding the runs, e.g. runs/paper/610M")
    parser.add_argument("--profile", default="paper", help="evaluation profile: paper, quick or smoke")
    parser.add_argument("--plots-only", action="store_true", help="only read existing summaries and plot")
    args = parser.parse_args()
    root = Path(args.root)
    if not args.plots_only:
        evaluate_runs(root, args.profile)
    means = family_means(root)
    (root / "comparison.json").write_text(json.dumps(means, indent=1) + "\n")
    drawn = [
        plot({f"{k // 1000}k steps": v for k, v in pfs_points(means).items()}, "CLM share of the budget (%)",
             "Pretraining from scratch: CLM then MLM (paper, Figure 6)", root / "pfs.png"),
        plot(cpt_points(means), "CPT steps", "Continued pretraining (paper, Figure 8)", root / "cpt.png"),
        plot(masking_points(means), "masking ratio (%)", "Masking ratio (paper, Figures 3 and 7)",
             root / "masking.png"),
        plot(efficiency_points(root, means), "pretraining step", "Data efficiency (paper, Figure 4)",
             root / "efficiency.png"),
    ]
    print(json.dumps({"runs": len(means), "plots": [str(p) for p in drawn if p]}))


if __name__ == "__main__":
    main()
