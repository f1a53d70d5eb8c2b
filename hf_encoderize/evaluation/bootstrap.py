"""Intervals that include the test set: a bootstrap over test examples (and head seeds) from each run's per-example
scores, for one model (`interval`) and paired between two models scored on the same examples (`paired`).

Design choices:
- The seed interval of the summary (Student t over head seeds) leaves out the test set's own sampling: 200 synthetic
  test examples, or 2,000 capped ones, are one draw of many. Each `results.json` keeps a score per test example, so
  every bootstrap replicate redraws the test examples (with replacement, the same draw for every seed of the model
  and, when paired, for both models) and the seeds (with replacement), and recomputes the seed-averaged score.
  The 2.5th and 97.5th percentiles of the replicates are the interval; with one seed it covers the examples only.
- Each metric is recomputed from per-example parts, so a replicate is the metric the table prints: accuracy from
  `correct`, QA F1 and EM and IR NDCG@10 as means over examples, TC's entity F1 (seqeval, micro) from per-sentence
  counts of correct, predicted and gold entities (2 x correct / (predicted + gold)); TC runs recorded before those
  counts were kept have no bootstrap (None).
- Paired: the difference of the two models' replicates on the same drawn examples, so what both models find hard
  cancels. It is significant when its 95% interval excludes 0; `p_value` is the two-sided bootstrap tail.
- Replicates (2,000) and the generator's seed (0) are fixed, so a summary is reproducible bit for bit.
- Pretraining variance stays outside: each model is one pretrained checkpoint (`stats`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

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


def _replicates(task: str, parts: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Seed-averaged score of each replicate: parts (S, N, k), weights (B, N) -> (B,)."""
    sums = np.einsum("bn,snk->sbk", weights, parts)  # (S, B, k)
    per_seed = statistic(task, sums, parts.shape[1])  # (S, B)
    drawn = rng.integers(0, parts.shape[0], size=(weights.shape[0], parts.shape[0]))  # (B, S) seeds per replicate
    return np.take_along_axis(per_seed.T, drawn, axis=1).mean(axis=1)


def _weights(n: int, rng: np.random.Generator, replicates: int) -> np.ndarray:
    """How often each example is drawn in each replicate, (B, N)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=replicates).astype(np.float64)


def _scores(task: str, models: list[np.ndarray], replicates: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Replicate scores of each model's parts (S, N, k), all on the same examples: each replicate's examples are drawn
    once for every model (what pairs them), CHUNK replicates at a time."""
    out: list[list[np.ndarray]] = [[] for _ in models]
    for start in range(0, replicates, CHUNK):
        weights = _weights(models[0].shape[1], rng, min(CHUNK, replicates - start))
        for k, parts in enumerate(models):
            out[k].append(_replicates(task, parts, weights, rng))
    return [np.concatenate(scores) for scores in out]


def interval(task: str, records: list[dict], *, replicates: int = REPLICATES, seed: int = 0) -> dict | None:
    """{"low", "high", "examples", "seeds", "replicates"}: the 95% percentile interval of one model's seed-averaged
    test score, test examples and seeds redrawn; None without per-example scores."""
    found = seed_parts(task, records)
    if found is None:
        return None
    parts = found[1]
    rng = np.random.default_rng(seed)
    (scores,) = _scores(task, [parts], replicates, rng)
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
    rng = np.random.default_rng(seed)
    scores_a, scores_b = _scores(task, [a[1], parts_b], replicates, rng)
    difference = scores_a - scores_b
    n = a[1].shape[1]
    observed = float(statistic(task, a[1].sum(1), n).mean() - statistic(task, parts_b.sum(1), n).mean())
    low, high = np.percentile(difference, [2.5, 97.5])
    tail = min(float(np.mean(difference <= 0)), float(np.mean(difference >= 0)))
    return {"difference": observed, "low": float(low), "high": float(high), "p_value": min(1.0, 2 * tail)}


def best_lr_records(folder: str | Path, result: dict) -> list[dict]:
    """The results.json records behind one summary row: its task/dataset folder at the selected learning rate, one
    per seed; [] when they are not all there (a copied summary, or runs deleted since)."""
    runs = Path(folder) / result["task"] / result["dataset"]
    records = []
    for path in sorted(runs.glob(f"lr{result['best_lr']}_sd*/results.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            return []
    return records if len(records) == (result.get("n_seeds") or 1) else []
