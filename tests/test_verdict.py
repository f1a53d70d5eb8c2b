"""The paper check's verdict is a 5% test: Welch's t-test from per-seed spreads against the paper's mean and CI (n=5).

Simulated on normal seed scores (SD 1), each side summarised as the tables are (mean and 95% Student t half-width).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t, ttest_ind

from hf_encoderize.evaluation.compare import sd_from_ci95, welch_verdict


def _summarise(scores: np.ndarray) -> dict:
    n = len(scores)
    ci = float(t.ppf(0.975, n - 1) * scores.std(ddof=1) / np.sqrt(n)) if n > 1 else None
    return {"mean": float(scores.mean()), "ci95": ci, "n_seeds": n}


def _flag_rate(shift: float, ours_n: int, trials: int = 4000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    flagged = 0
    for _ in range(trials):
        paper, ours = _summarise(rng.normal(0, 1, 5)), _summarise(rng.normal(shift, 1, ours_n))
        flagged += welch_verdict(ours, paper)["verdict"] in ("above", "below")
    return flagged / trials


def test_false_alarm_rate_at_no_difference_is_near_5_percent():
    rate = _flag_rate(0.0, ours_n=5)
    assert 0.04 <= rate <= 0.06, rate  # binomial SD at 4,000 trials: 0.34 points


def test_a_true_difference_of_2_sd_is_found_most_of_the_time():
    assert _flag_rate(2.0, ours_n=5, trials=1000) > 0.7  # Welch's power here is about 76%; overlap found 36%


def _verdict_rate(verdict: str, shift: float, sd: float, margin: float, trials: int = 2000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        paper, ours = _summarise(rng.normal(0, sd, 5)), _summarise(rng.normal(shift, sd, 5))
        hits += welch_verdict(ours, paper, margin=margin)["verdict"] == verdict
    return hits / trials


def test_agreement_is_claimed_only_by_tost_within_the_margin():
    """TOST's size: at a true difference equal to the margin, "equivalent" comes out at most 5% of the time; at no
    difference with seeds tight enough for the margin, it comes out most of the time."""
    assert _verdict_rate("equivalent", shift=1.0, sd=1.0, margin=1.0) <= 0.06
    assert _verdict_rate("equivalent", shift=0.0, sd=0.3, margin=1.0, trials=500) > 0.9
    # Wide seeds: Welch finds no difference, and TOST no agreement either: inconclusive, never "no difference"
    wide = welch_verdict({"mean": 50.0, "ci95": 3.0, "n_seeds": 5}, {"mean": 50.2, "ci95": 3.0}, margin=1.0)
    assert wide["verdict"] == "inconclusive" and wide["p_value"] > 0.05 and wide["p_equivalence"] > 0.05
    assert (welch_verdict({"mean": 50.0, "ci95": 0.2, "n_seeds": 5}, {"mean": 50.1, "ci95": 0.2})["verdict"]
        == "inconclusive")  # without a margin, agreement is never claimed


def test_tost_is_two_one_sided_welch_tests():
    ours, paper = {"mean": 50.3, "ci95": 0.5, "n_seeds": 5}, {"mean": 50.0, "ci95": 0.6}
    se = np.sqrt(sd_from_ci95(0.5, 5) ** 2 / 5 + sd_from_ci95(0.6, 5) ** 2 / 5)
    df = se ** 4 / ((sd_from_ci95(0.5, 5) ** 2 / 5) ** 2 / 4 + (sd_from_ci95(0.6, 5) ** 2 / 5) ** 2 / 4)
    expected = max(t.sf((0.3 + 1.0) / se, df), t.cdf((0.3 - 1.0) / se, df))
    assert welch_verdict(ours, paper, margin=1.0)["p_equivalence"] == pytest.approx(expected, rel=1e-9)


def test_one_seed_is_not_testable():
    verdict = welch_verdict({"mean": 80.0, "ci95": None, "n_seeds": 1}, {"mean": 90.0, "ci95": 0.1})
    assert (verdict["verdict"], verdict["p_value"], verdict["reason"]) == ("not testable", None, "one seed")


def test_it_is_scipys_welch_test_on_the_seed_scores():
    rng = np.random.default_rng(1)
    for _ in range(50):
        paper, ours = rng.normal(50, 2, 5), rng.normal(51, 1, rng.integers(2, 8))
        expected = ttest_ind(ours, paper, equal_var=False).pvalue
        assert welch_verdict(_summarise(ours), _summarise(paper))["p_value"] == pytest.approx(expected, rel=1e-9)


def test_sd_from_ci95_inverts_the_student_t_interval():
    scores = np.array([1.0, 2.0, 4.0, 8.0, 3.0])
    assert sd_from_ci95(_summarise(scores)["ci95"], 5) == pytest.approx(scores.std(ddof=1))


# ------------------------------------------------------------------------------ bold only what the test calls a win


def _cell(scores):
    from hf_encoderize.evaluation.summary import ci95

    return (sum(scores) / len(scores), ci95(scores), len(scores))


def test_the_comparison_bolds_only_a_significant_best():
    from hf_encoderize.evaluation.compare import _cells, significantly_best

    apart = [_cell([70, 71, 72, 70.5, 71.5]), _cell([60, 61, 62, 60.5, 61.5])]
    assert significantly_best(apart) == 0 and _cells(apart)[0].startswith("**71.00 ±")
    overlapping = [_cell([70, 75, 65, 72, 68]), _cell([69, 74, 66, 70, 67])]  # means 70 and 69.2, SD about 4
    assert significantly_best(overlapping) is None and not any(c.startswith("**") for c in _cells(overlapping))
    one_seed = [(90.0, None, 1), _cell([10, 11, 12])]
    assert significantly_best(one_seed) is None
    three = [_cell([80, 81, 82]), _cell([60, 61, 62]), _cell([79, 80, 81.5])]  # best, but not above the third
    assert significantly_best(three) is None
    assert significantly_best([_cell([1, 2, 3]), None]) is None  # one cell has nothing to beat


def test_bolding_at_no_true_difference_is_rare():
    """Simulated: two columns of 5 seeds drawn from one distribution. A bold cell is a false alarm; Welch at 5% makes
    about 5% of them (both directions together), where "the larger mean" alone would bold every row."""
    import random

    from hf_encoderize.evaluation.compare import significantly_best

    rng = random.Random(0)
    trials = 2000
    bold = sum(significantly_best([_cell([rng.gauss(50, 1) for _ in range(5)]) for _ in range(2)]) is not None
               for _ in range(trials))
    assert 0.03 < bold / trials < 0.07
