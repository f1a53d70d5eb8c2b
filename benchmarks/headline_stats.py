"""Statistics for the headline benchmark: per-arm mean ± 95% CI over seeds, Welch's t-test between the arms, and a
paired bootstrap over test examples.

Why a bootstrap beside Welch: Welch sees only the fine-tuning seeds' spread, which on a fixed test set says nothing
about how the 200 test examples were drawn. The paired bootstrap resamples the test examples (the same resample for
both arms, since both are scored on the same examples) and recomputes each family's own metric on the resample, so
token classification's entity F1 is recomputed from entity counts, not averaged per sentence.

Each example carries additive counts (`counts_*`), pooled over the seeds at the chosen learning rate; `score` turns
summed counts into the family's metric (0-100). Implemented here (not in `evaluation.compare`, which had no paired
bootstrap when this benchmark was written).
"""

from __future__ import annotations

import math
import random
import statistics
import warnings


def mean_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t interval (0 for a single value)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, float(half)


def welch(a: list[float], b: list[float]) -> dict:
    """Welch's unequal-variance t-test of mean(a) - mean(b); p is nan when either side has no spread."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2 or (statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0):
        return {"t": float("nan"), "p": float("nan")}
    with warnings.catch_warnings():  # near-identical seeds make scipy warn about precision; p is still reported
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(a, b, equal_var=False)
    return {"t": float(result.statistic), "p": float(result.pvalue)}


# ------------------------------------------------------------------------------------------------ per-example counts


def counts_sc(example: dict) -> tuple[float, ...]:
    return (float(bool(example["correct"])), 1.0)


def counts_qa(example: dict) -> tuple[float, ...]:
    return (float(example["f1"]), 1.0)


def counts_ir(example: dict) -> tuple[float, ...]:
    return (float(example["ndcg@10"]), 1.0)


def counts_tc(prediction: list[str], gold: list[str]) -> tuple[float, ...]:
    """(true positives, predicted entities, gold entities): seqeval's entity matching, per sentence."""
    from seqeval.metrics.sequence_labeling import get_entities

    predicted, wanted = set(get_entities(list(prediction))), set(get_entities(list(gold)))
    return (float(len(predicted & wanted)), float(len(predicted)), float(len(wanted)))


def score(task: str, total: tuple[float, ...]) -> float:
    """The family's metric (0-100) from summed counts: micro entity F1 for tc, a mean for the others."""
    if task == "tc":
        tp, predicted, gold = total
        return 100.0 * 2 * tp / (predicted + gold) if predicted + gold else 0.0
    value = total[0] / total[1] if total[1] else 0.0
    return 100.0 * value if task == "sc" else value  # qa F1 and ir NDCG@10 are 0-100 per example already


def pooled(task: str, rows: list[list[tuple[float, ...]]]) -> list[tuple[float, ...]]:
    """rows[seed][example] counts -> per-example counts summed over seeds."""
    return [tuple(map(sum, zip(*per_seed, strict=True))) for per_seed in zip(*rows, strict=True)]


def paired_bootstrap(task: str, a: list[tuple], b: list[tuple], *, resamples: int = 2000, seed: int = 0) -> dict:
    """Resample test examples with replacement (the same indices for both arms): the difference score(a) - score(b),
    its 95% percentile interval and a two-sided p (twice the smaller tail's share on either side of zero)."""
    if len(a) != len(b) or not a:
        raise ValueError("the arms must be scored on the same, non-empty list of test examples")
    rng, n, diffs = random.Random(seed), len(a), []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        total_a = tuple(map(sum, zip(*(a[i] for i in picks), strict=True)))
        total_b = tuple(map(sum, zip(*(b[i] for i in picks), strict=True)))
        diffs.append(score(task, total_a) - score(task, total_b))
    diffs.sort()
    observed = score(task, tuple(map(sum, zip(*a, strict=True)))) - score(task, tuple(map(sum, zip(*b, strict=True))))
    below = sum(d <= 0 for d in diffs) / resamples
    above = sum(d >= 0 for d in diffs) / resamples
    return {"diff": observed, "low": diffs[int(0.025 * resamples)], "high": diffs[int(0.975 * resamples) - 1],
            "p": min(1.0, 2 * min(below, above)), "examples": n, "resamples": resamples}
