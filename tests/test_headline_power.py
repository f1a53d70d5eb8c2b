"""The headline's power figures (issue 71, point 2): `headline_stats.t_power` and `tost_power` agree with a simulation
of the package's own test (`evaluation.stats.paired_t`) on normal per-order differences, `detectable` inverts the
power at 80%, and a simulated false-alarm rate carries its Monte Carlo interval."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import headline_stats as hs  # noqa: E402

from hf_encoderize.evaluation.stats import paired_t  # noqa: E402


def _designs(effect: float, sd: float, n: int, count: int = 3000) -> np.ndarray:
    return np.random.default_rng(1).normal(effect, sd, size=(count, n))


@pytest.mark.parametrize(("effect", "sd", "n"), [(0.0, 4.0, 4), (6.0, 4.0, 4), (2.0, 1.0, 3)])
def test_t_power_is_the_rejection_rate_of_the_packages_paired_t(effect, sd, n):
    designs = _designs(effect, sd, n)
    rejected = np.mean([paired_t(list(d))["p_value"] < 0.05 for d in designs])
    expected = hs.t_power(effect, sd, n)
    assert abs(rejected - expected) < 4 * (expected * (1 - expected) / len(designs)) ** 0.5 + 1e-3, (rejected, expected)
    assert expected == pytest.approx(0.05, abs=1e-9) if effect == 0 else expected > 0.05


def test_detectable_is_where_the_power_reaches_eighty_percent():
    for sd, n in ((4.4, 4), (0.66, 4), (3.0, 2)):
        smallest = hs.detectable(sd, n)
        assert hs.t_power(smallest, sd, n) == pytest.approx(0.8, abs=1e-6)
        assert hs.t_power(0.9 * smallest, sd, n) < 0.8
    assert hs.detectable(4.0, 2) > 5 * hs.detectable(4.0, 4)  # one degree of freedom: t crit 12.7


def test_tost_power_is_how_often_the_packages_90_percent_interval_lies_inside_the_margin():
    for effect, sd in ((0.23, 4.4), (0.3, 1.0)):
        designs = _designs(effect, sd, 4)
        inside = np.mean([(lambda t: -2 < t["low"] and t["high"] < 2)(paired_t(list(d), alpha=0.10))
                          for d in designs])
        expected = hs.tost_power(effect, sd, 4, margin=2.0)
        assert abs(inside - expected) < 4 * (max(expected, 0.01) * (1 - expected) / len(designs)) ** 0.5, (inside,
                                                                                                          expected)


def test_a_simulated_rate_has_its_clopper_pearson_interval():
    low, high = hs.rate_interval(46, 1000)  # the worst null: 4.6% at 1,000 trials
    assert (round(low, 3), round(high, 3)) == (0.034, 0.061) and low < 0.05 < high
    assert hs.rate_interval(0, 1000)[0] == 0.0
