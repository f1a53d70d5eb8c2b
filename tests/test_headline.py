"""benchmarks/headline.py (the paper's section-5 headline at small scale) and its statistics (headline_stats.py).

The chain test runs every stage (corpus, BPE, CLM and MLM bases, the same MLM CPT, full fine-tuning on the four
synthetic families, the analysis) on the `tiny` preset and checks the table it writes, not the scores: tiny scores say
nothing about the claim."""

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCH))  # headline.py imports its siblings (headline_stats, biphasic_small)
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_paired_bootstrap_sees_a_clear_difference_and_holds_zero_for_equal_arms():
    hs = _load("headline_stats")
    rng = random.Random(0)
    good = [hs.counts_sc({"correct": rng.random() < 0.85}) for _ in range(200)]
    coin = [hs.counts_sc({"correct": rng.random() < 0.5}) for _ in range(200)]
    clear = hs.paired_bootstrap("sc", good, coin, resamples=500)
    assert clear["low"] > 0 and clear["p"] < 0.01 and 25 < clear["diff"] < 45
    same = hs.paired_bootstrap("sc", good, good, resamples=500)
    assert same["diff"] == 0 and same["low"] <= 0 <= same["high"] and same["p"] == 1.0
    with pytest.raises(ValueError):
        hs.paired_bootstrap("sc", good, coin[:-1])


def test_entity_f1_from_pooled_counts_is_seqevals_micro_f1():
    from seqeval.metrics import f1_score

    hs = _load("headline_stats")
    tags = ["O", "B-PER", "I-PER", "B-LOC", "B-ORG"]
    rng = random.Random(1)
    gold = [[rng.choice(tags) for _ in range(rng.randint(3, 8))] for _ in range(60)]
    seeds = [[[t if rng.random() < 0.7 else rng.choice(tags) for t in sentence] for sentence in gold] for _ in range(2)]
    rows = [[hs.counts_tc(p, g) for p, g in zip(predicted, gold, strict=True)] for predicted in seeds]
    pooled = hs.pooled("tc", rows)
    total = tuple(map(sum, zip(*pooled, strict=True)))
    expected = 100 * f1_score(gold + gold, seeds[0] + seeds[1])
    assert hs.score("tc", total) == pytest.approx(expected)


def test_mean_ci_and_welch():
    hs = _load("headline_stats")
    mean, half = hs.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(2.4841, abs=1e-3)  # t(0.975, 2) x 1 / sqrt(3)
    assert hs.welch([1.0, 2.0, 3.0], [11.0, 12.0, 13.0])["p"] < 0.01


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    headline = _load("headline")
    out = tmp_path_factory.mktemp("headline")
    return headline, out, headline.run("tiny", out, threads=1)


@pytest.mark.slow
def test_the_tiny_chain_writes_a_whole_table_and_says_it_proves_nothing(tiny_run):
    headline, out, result = tiny_run
    assert result["seeds_analysed"] == [0, 1] and set(result["arms"]) == {"clm-order0", "mlm-order0"}
    for arm in result["arms"].values():
        assert Path(arm["encoder"]).is_dir() and arm["base"]["eval_loss"] > 0 and arm["cpt"]["eval_loss"] > 0
    assert result["tokens_per_arm"] == (6 + 4) * 4 * 32
    assert list(result["table"]) == ["sc", "tc", "qa", "ir"]
    for family, row in result["table"].items():
        assert row["predicted"] == headline.PREDICTED[family]
        assert row["bootstrap"]["examples"] == 200  # the synthetic test set, the same examples for both arms
        assert row["bootstrap"]["low"] <= row["bootstrap"]["diff"] <= row["bootstrap"]["high"]
        for arm in ("clm", "mlm"):
            assert len(row[arm]["scores"]) == 2 and 0 <= row[arm]["mean"] <= 100
    text = (out / "headline.md").read_text()
    assert "say nothing about the paper's claim" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| family")]
    assert [line.split(" | ")[0] for line in rows] == ["| SC", "| TC", "| QA", "| IR"]
    assert all(line.count(" | ") == 8 for line in rows)
    assert json.loads((out / "headline.json").read_text())["table"].keys() == result["table"].keys()


@pytest.mark.slow
def test_the_table_keeps_only_seeds_both_arms_finished(tiny_run):
    headline, out, _ = tiny_run
    missing = next((out / "eval" / "mlm-order0" / "qa").rglob("lr*_sd1/results.json"))
    missing.unlink()  # the MLM arm's seed 1 cut short: the CLM arm's seed 1 must not be compared with nothing
    result = headline.report(out, "tiny", {"budget": "tiny"})
    assert result["seeds_analysed"] == [0]
    assert all(len(row[arm]["scores"]) == 1 for row in result["table"].values() for arm in ("clm", "mlm"))
