"""The tests behind every verdict and every bold cell: Welch's t-test, its equivalence twin (TOST), and their limits.

Design choices:
- Inputs are what the tables print: a mean and a 95% confidence half-width over `n` seeds. The per-seed standard
  deviation is recovered by reading that half-width as a Student t interval (half-width x sqrt(n) / t(0.975, n - 1)),
  as `summary.ci95` computes ours. The paper says "95% confidence intervals" over 5 seeds and names no formula
  (section 2): reading its intervals as Student t is an assumption, printed with every verdict (`ASSUMPTIONS`).
- A difference is `above` or `below` when Welch's two-sided test rejects at `alpha`. Not rejecting is not agreement:
  agreement (`equivalent`) is claimed only when TOST (two one-sided Welch tests, Schuirmann 1987) rejects a difference
  of `margin` score points or more at `alpha`; otherwise the verdict is `inconclusive`. Welch is asked first, so a
  difference that is both significant and under the margin reads `above`/`below`, never `equivalent`.
- No spread, no test: one seed, a missing interval, or a zero interval (every seed scored the same; 50.01 ± 0.00
  against 50.00 ± 0.00 would otherwise give p = 0) is `not testable`.
- Samples in, the same rules: `welch_samples` turns two lists of seed scores into the sides `welch_verdict` takes, so
  the headline benchmark's Welch and the paper check's cannot disagree on zero spread; `paired_t` is the one-sample
  t-test of per-pretraining-run differences (the unit when there are two or more data orders), with the same
  "not testable" for one run or zero spread.
- Outside `welch_verdict`: pretraining variance. Each side is one pretrained checkpoint; another pretraining seed or
  data order moves its mean by an amount neither table measures, so a verdict is about these checkpoints, not the
  recipe that made them. `paired_t` over data orders is the test that includes it.
"""

from __future__ import annotations

import math

ZERO_SPREAD = 1e-9  # a half-width under this (in score points) is no spread at all: float noise of identical seeds
ASSUMPTIONS = ("each '± x' (the paper's '(x)') is a 95% Student t half-width over its seeds (5 for the paper, "
               "section 2; the paper names no formula); seed scores roughly normal; both sides fine-tuned with the "
               "same protocol. Pretraining variance is outside the test: each side is one pretrained checkpoint, "
               "and another pretraining seed or data order would move it by an amount no table here measures.")


def sd_from_ci95(ci95: float, n: int) -> float:
    """The per-seed standard deviation behind a 95% Student t interval of half-width `ci95` over `n` seeds."""
    from scipy.stats import t

    return ci95 * math.sqrt(n) / float(t.ppf(0.975, n - 1))


def untestable(side: dict) -> str | None:
    """Why `side` ({"mean", "ci95", "n_seeds"}) cannot enter a t-test, or None."""
    if (side.get("n_seeds") or 1) < 2 or side.get("ci95") is None:
        return "one seed"
    if not math.isfinite(side["ci95"]) or side["ci95"] <= ZERO_SPREAD:
        return "zero spread"
    return None


def welch_verdict(ours: dict, paper: dict, *, paper_n: int = 5, alpha: float = 0.05,
                  margin: float | None = None) -> dict:
    """Welch's t-test of our mean against the other's, then TOST within `margin` when it does not reject. `ours`:
    {"mean", "ci95", "n_seeds"}; `paper`: {"mean", "ci95"} over `paper_n` seeds (5: section 2). Returns
    {"verdict": "above" | "below" | "equivalent" | "inconclusive" | "not testable", "p_value", "p_equivalence",
    "margin", "reason"}; `equivalent` needs a margin."""
    from scipy.stats import t

    result = {"verdict": "not testable", "p_value": None, "p_equivalence": None, "margin": margin, "reason": None}
    reason = untestable(ours) or untestable({**paper, "n_seeds": paper_n})
    if reason:
        return {**result, "reason": reason}
    n = ours["n_seeds"]
    var_ours, var_paper = sd_from_ci95(ours["ci95"], n) ** 2 / n, sd_from_ci95(paper["ci95"], paper_n) ** 2 / paper_n
    difference, se = ours["mean"] - paper["mean"], math.sqrt(var_ours + var_paper)
    df = (var_ours + var_paper) ** 2 / (var_ours ** 2 / (n - 1) + var_paper ** 2 / (paper_n - 1))
    p_value = float(2 * t.sf(abs(difference) / se, df))
    if p_value < alpha:
        return {**result, "verdict": "above" if difference > 0 else "below", "p_value": p_value}
    if margin is None:
        return {**result, "verdict": "inconclusive", "p_value": p_value, "reason": "no margin to test agreement"}
    # TOST: reject "difference <= -margin" and "difference >= +margin", each one-sided at alpha
    p_equivalence = float(max(t.sf((difference + margin) / se, df), t.cdf((difference - margin) / se, df)))
    verdict = "equivalent" if p_equivalence < alpha else "inconclusive"
    return {**result, "verdict": verdict, "p_value": p_value, "p_equivalence": p_equivalence}


def side(values: list[float]) -> dict:
    """{"mean", "ci95", "n_seeds"} of seed scores: the Student t half-width `welch_verdict` reads back."""
    from scipy.stats import t

    n, mean = len(values), math.fsum(values) / len(values)
    if n < 2:
        return {"mean": mean, "ci95": None, "n_seeds": n}
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return {"mean": mean, "ci95": float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n), "n_seeds": n}


def welch_samples(a: list[float], b: list[float], *, alpha: float = 0.05) -> dict:
    """`welch_verdict` of mean(a) against mean(b) from the seed scores themselves (no margin: never "equivalent")."""
    return welch_verdict(side(a), side(b), paper_n=len(b), alpha=alpha)


def paired_t(differences: list[float], *, alpha: float = 0.05) -> dict:
    """One-sample t-test of paired differences (one per data order) against 0, n - 1 degrees of freedom. Returns
    {"verdict": "above" | "below" | "inconclusive" | "not testable", "p_value", "low", "high" (the 95% interval of
    the mean difference), "reason"}."""
    from scipy.stats import t

    result = {"verdict": "not testable", "p_value": None, "low": None, "high": None, "reason": None}
    summary = side(differences)
    reason = untestable(summary)
    if reason:
        return {**result, "reason": "one data order" if reason == "one seed" else reason}
    n, mean = summary["n_seeds"], summary["mean"]
    se = summary["ci95"] / float(t.ppf(0.975, n - 1))
    p_value = float(2 * t.sf(abs(mean) / se, n - 1))
    half = float(t.ppf(1 - alpha / 2, n - 1)) * se
    verdict = "inconclusive" if p_value >= alpha else "above" if mean > 0 else "below"
    return {**result, "verdict": verdict, "p_value": p_value, "low": mean - half, "high": mean + half}


def difference_against(ours_a: dict, ours_b: dict, paper_a: dict, paper_b: dict, *, paper_n: int = 5,
                       alpha: float = 0.05) -> dict:
    """Our A - B against the paper's A - B (sides as in `welch_verdict`; four independent means, Welch-Satterthwaite
    degrees of freedom). {"ours", "paper", "p_value", "verdict": "differs" | "not distinguished" | "not testable",
    "reason"}. "not distinguished" is no agreement: it says the difference of differences could be zero."""
    from scipy.stats import t

    sides = [(ours_a, ours_a.get("n_seeds")), (ours_b, ours_b.get("n_seeds")), (paper_a, paper_n), (paper_b, paper_n)]
    result = {"ours": ours_a["mean"] - ours_b["mean"], "paper": paper_a["mean"] - paper_b["mean"], "p_value": None,
              "verdict": "not testable", "reason": None}
    reason = next((why for s, n in sides if (why := untestable({**s, "n_seeds": n}))), None)
    if reason:
        return {**result, "reason": reason}
    variances = [(sd_from_ci95(s["ci95"], n) ** 2 / n, n) for s, n in sides]
    total = sum(v for v, _ in variances)
    df = total ** 2 / sum(v ** 2 / (n - 1) for v, n in variances)
    p_value = float(2 * t.sf(abs(result["ours"] - result["paper"]) / math.sqrt(total), df))
    return {**result, "p_value": p_value, "verdict": "differs" if p_value < alpha else "not distinguished"}
