"""Intervals that include the test set: a bootstrap over test examples (and head seeds) from each run's per-example
scores, for one model (`interval`) and paired between two models scored on the same examples (`paired`).

Design choices:
- The seed interval of the summary (Student t over head seeds) leaves out the test set's own sampling: 200 synthetic
  test examples, or 2,000 capped ones, are one draw of many. Each `results.json` keeps a score per test example, so
  every bootstrap replicate redraws the test examples (with replacement, the same draw for every seed of the model
  and, when paired, for both models) and the seeds (with replacement), and recomputes the seed-averaged score.
  The 2.5th and 97.5th percentiles of the replicates are the interval; with one seed it covers the examples only.
- Each metric is recomputed from per-example parts, so a replicate is the metric the table prints: accuracy from
  `correct`, QA F1 and EM and IR NDCG@10 as means over examples, TC's entity F1 (`entities`, micro) from per-sentence
  counts of correct, predicted and gold entities (2 x correct / (predicted + gold)); TC runs recorded before those
  counts were kept have no bootstrap (None).
- Paired: the difference of the two models' replicates on the same drawn examples, so what both models find hard
  cancels. It is significant when its 95% interval excludes 0; `p_value` is the two-sided bootstrap tail.
- Replicates (2,000) and the generator's seed (0) are fixed, so a summary is reproducible bit for bit.
- Pretraining variance stays outside `interval` and `paired`: each model is one pretrained checkpoint (`stats`).
- Pretraining runs (data orders) as the top level: `difference_test` takes parts (O, S, N, k), O pretraining runs of
  S fine-tuning seeds, and redraws the orders (the same draw for both arms: order o of each arm shares its data order
  and initialisation), then the seeds within each drawn order, then the examples (one draw for everything). With 2-3
  orders that bootstrap alone is far too narrow (2 orders give 3 distinct draws), so a difference also needs a t-test
  over the top-level unit: Welch over seeds for one order, a paired t over the per-order differences for two or more
  (n - 1 degrees of freedom, exact for any n under normal noise). Zero spread is not testable (`stats.untestable`).
  Its false-alarm rate under three nulls is simulated in `benchmarks/headline_stats.py` and held at 5% by a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hf_encoderize.evaluation import stats

REPLICATES = 2000
CHUNK = 250  # replicates drawn at a time: a (CHUNK, N) weight matrix, 20 MB at N = 10,000 test examples


def example_parts(task: str, record: dict) -> tuple[list, np.ndarray] | None:
    """(example ids, (N, k) parts) of one run's test set, from which `statistic` rebuilds the score; None when the
    record has no per-example scores the metric can be rebuilt from."""
    rows = (record.get("per_example") or {}).get("test") or []
    if not rows:
        return None
    if task == "sc" and "correct" in rows[0]:
        parts = [[100.0 * r["correct"]] for r in rows]
    elif task == "qa" and "f1" in rows[0]:
        parts = [[r["f1"]] for r in rows]
    elif task == "ir":
        key = "ndcg@10_graded" if "ndcg@10_binary" in record.get("test", {}) else "ndcg@10"
        if key not in rows[0]:
            return None
        parts = [[r[key]] for r in rows]
    elif task == "tc" and "entities" in rows[0]:
        parts = [list(r["entities"]) for r in rows]  # correct, predicted, gold
    else:
        return None
    return [r["id"] for r in rows], np.asarray(parts, dtype=np.float64)


def statistic(task: str, sums: np.ndarray, n: int) -> np.ndarray:
    """The metric from summed parts (..., k) over `n` drawn examples."""
    if task == "tc":
        denominator = sums[..., 1] + sums[..., 2]
        return np.where(denominator > 0, 200.0 * sums[..., 0] / np.maximum(denominator, 1e-12), 0.0)
    return sums[..., 0] / n


def seed_parts(task: str, records: list[dict]) -> tuple[list, np.ndarray] | None:
    """(ids, (S, N, k)) for the seeds of one model, examples aligned by id; None when a seed lacks them or the seeds
    were scored on different examples."""
    found = [example_parts(task, record) for record in records]
    if not found or any(f is None for f in found):
        return None
    ids = found[0][0]
    stacked = []
    for seed_ids, parts in found:
        if sorted(map(str, seed_ids)) != sorted(map(str, ids)):
            return None
        position = {str(i): k for k, i in enumerate(seed_ids)}
        stacked.append(parts[[position[str(i)] for i in ids]])
    return ids, np.stack(stacked)


def order_parts(task: str, orders: list[list[dict]]) -> np.ndarray | None:
    """(O, S, N, k) parts of one arm: `orders` holds each pretraining run's (data order's) seed records; examples
    aligned by id across all of them. None when a run lacks per-example scores or the test sets differ."""
    found = [seed_parts(task, records) for records in orders]
    if not found or any(f is None for f in found) or len({f[1].shape[0] for f in found}) > 1:
        return None
    ids = found[0][0]
    stacked = []
    for order_ids, parts in found:
        if sorted(map(str, order_ids)) != sorted(map(str, ids)):
            return None
        position = {str(i): k for k, i in enumerate(order_ids)}
        stacked.append(parts[:, [position[str(i)] for i in ids]])
    return np.stack(stacked)


def _replicates(task: str, parts: np.ndarray, weights: np.ndarray, orders: np.ndarray,
                rng: np.random.Generator) -> np.ndarray:
    """Score of each replicate, averaged over the drawn orders and the seeds drawn within them: parts (O, S, N, k),
    weights (B, N), orders (B, O) drawn orders -> (B,)."""
    sums = np.einsum("bn,osnk->bosk", weights, parts)  # (B, O, S, k)
    per_run = statistic(task, sums, parts.shape[2])  # (B, O, S)
    replicates, n_orders, n_seeds = per_run.shape
    drawn = rng.integers(0, n_seeds, size=(replicates, n_orders, n_seeds))  # seeds redrawn within each drawn order
    rows = np.arange(replicates)[:, None, None]
    return per_run[rows, orders[:, :, None], drawn].mean(axis=(1, 2))


def _weights(n: int, rng: np.random.Generator, replicates: int) -> np.ndarray:
    """How often each example is drawn in each replicate, (B, N): n draws with replacement per replicate, counted
    (the multinomial counts; ~18x faster than `rng.multinomial`, which made the null simulation crawl)."""
    drawn = rng.integers(0, n, size=(replicates, n)) + n * np.arange(replicates)[:, None]  # (B, N), row-offset
    return np.bincount(drawn.ravel(), minlength=replicates * n).reshape(replicates, n).astype(np.float64)


def _scores(task: str, models: list[np.ndarray], replicates: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Replicate scores of each model's parts (O, S, N, k), all on the same examples and orders: each replicate's
    examples (and, with two or more orders, its orders) are drawn once for every model (what pairs them), CHUNK
    replicates at a time. One order draws nothing for it, so one-order replicates stay what they always were."""
    out: list[list[np.ndarray]] = [[] for _ in models]
    n_orders = models[0].shape[0]
    for start in range(0, replicates, CHUNK):
        size = min(CHUNK, replicates - start)
        weights = _weights(models[0].shape[2], rng, size)
        orders = rng.integers(0, n_orders, size=(size, n_orders)) if n_orders > 1 else np.zeros((size, 1), int)
        for k, parts in enumerate(models):
            out[k].append(_replicates(task, parts, weights, orders, rng))
    return [np.concatenate(scores) for scores in out]


def interval(task: str, records: list[dict], *, replicates: int = REPLICATES, seed: int = 0) -> dict | None:
    """{"low", "high", "examples", "seeds", "replicates"}: the 95% percentile interval of one model's seed-averaged
    test score, test examples and seeds redrawn; None without per-example scores."""
    found = seed_parts(task, records)
    if found is None:
        return None
    parts = found[1]
    rng = np.random.default_rng(seed)
    (scores,) = _scores(task, [parts[None]], replicates, rng)
    low, high = np.percentile(scores, [2.5, 97.5])
    return {"low": float(low), "high": float(high), "examples": int(parts.shape[1]), "seeds": int(parts.shape[0]),
            "replicates": replicates}


def paired(task: str, records_a: list[dict], records_b: list[dict], *, replicates: int = REPLICATES,
           seed: int = 0) -> dict | None:
    """{"difference", "low", "high", "p_value"}: model A minus model B on the same redrawn test examples (each
    model's seeds redrawn on their own); None without per-example scores or when the test sets differ."""
    a, b = seed_parts(task, records_a), seed_parts(task, records_b)
    if a is None or b is None or sorted(map(str, a[0])) != sorted(map(str, b[0])):
        return None
    position = {str(i): k for k, i in enumerate(b[0])}
    parts_b = b[1][:, [position[str(i)] for i in a[0]]]  # B's examples in A's order
    return paired_parts(task, a[1][None], parts_b[None], replicates=replicates, seed=seed)


def run_scores(task: str, parts: np.ndarray) -> np.ndarray:
    """Each run's test score, what its results.json says: parts (O, S, N, k) -> (O, S)."""
    return statistic(task, parts.sum(axis=2), parts.shape[2])


def paired_parts(task: str, parts_a: np.ndarray, parts_b: np.ndarray, *, replicates: int = REPLICATES,
                 seed: int = 0) -> dict:
    """`paired` on arrays: parts (O, S, N, k) of two arms on the same examples, order o of A paired with order o
    of B. {"difference", "low", "high", "p_value"}: the mean over orders and seeds of A minus B's, and its
    bootstrap interval and two-sided tail with orders (when O > 1), seeds and examples redrawn."""
    if parts_a.shape[0] != parts_b.shape[0] or parts_a.shape[2:] != parts_b.shape[2:]:
        raise ValueError(f"the arms must share their orders and test examples: {parts_a.shape} vs {parts_b.shape}")
    rng = np.random.default_rng(seed)
    scores_a, scores_b = _scores(task, [parts_a, parts_b], replicates, rng)
    difference = scores_a - scores_b
    observed = float(run_scores(task, parts_a).mean() - run_scores(task, parts_b).mean())
    low, high = np.percentile(difference, [2.5, 97.5])
    tail = min(float(np.mean(difference <= 0)), float(np.mean(difference >= 0)))
    return {"difference": observed, "low": float(low), "high": float(high), "p_value": min(1.0, 2 * tail)}


def difference_test(task: str, parts_a: np.ndarray, parts_b: np.ndarray, *, alpha: float = 0.05,
                    replicates: int = REPLICATES, seed: int = 0) -> dict:
    """Is arm A above or below arm B? parts (O, S, N, k) as in `paired_parts`. Both must reject at `alpha`: the
    t-test over the top-level unit (Welch over the seeds' scores for one order; a paired t over the per-order
    differences of the seed means for two or more) and the bootstrap (`paired_parts`). Returns {"direction": ">" |
    "<" | "~" | "not testable", "unit": "seeds" | "data orders", "difference", "bootstrap": paired_parts' dict,
    "t": {"p_value", "low", "high", "reason"} ("low"/"high" only for orders)}. "~" is no evidence of equivalence."""
    runs_a, runs_b = run_scores(task, parts_a), run_scores(task, parts_b)  # (O, S)
    if parts_a.shape[0] == 1:
        unit, t_test = "seeds", stats.welch_samples(list(runs_a[0]), list(runs_b[0]), alpha=alpha)
    else:
        unit, t_test = "data orders", stats.paired_t(list(runs_a.mean(1) - runs_b.mean(1)), alpha=alpha)
    boot = paired_parts(task, parts_a, parts_b, replicates=replicates, seed=seed)
    if t_test["verdict"] == "not testable":
        direction = "not testable"
    elif t_test["verdict"] == "above" and boot["low"] > 0:
        direction = ">"
    elif t_test["verdict"] == "below" and boot["high"] < 0:
        direction = "<"
    else:
        direction = "~"
    t_cells = {k: t_test.get(k) for k in ("p_value", "low", "high", "reason")}
    return {"direction": direction, "unit": unit, "difference": boot["difference"], "bootstrap": boot, "t": t_cells}


def best_lr_records(folder: str | Path, result) -> list[dict]:
    """The results.json records behind one summary row: its task/dataset folder at the selected learning rate, one
    per seed; [] when they are not all there (a copied summary, or runs deleted since)."""
    runs = Path(folder) / result.task / result.dataset
    records = []
    for path in sorted(runs.glob(f"lr{result.best_lr}_sd*/results.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            return []
    return records if len(records) == (result.n_seeds or 1) else []
