"""Intervals that include the test set (`evaluation.bootstrap`), and `compare`'s refusals: mixed protocols, zero
spread, a summary `eval` never wrote. Each test failed before: there was no bootstrap, and compare bolded any Welch
difference, mixed frozen with fine-tuned silently and raised KeyError on a row without test_ci95."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation import bootstrap
from hf_encoderize.evaluation.compare import compare
from hf_encoderize.evaluation.summary import write_summary

EXPECTED = {"mode": "bidirectional", "model": "m"}


def _record(correct: list[int], *, seed: int, lr: str = "0.001", protocol: dict | None = None) -> dict:
    score = 100.0 * sum(correct) / len(correct)
    return {"task": "sc", "dataset": "syn-sentiment", "metric": "accuracy", "lr": lr, "seed": seed, "note": None,
            "protocol": protocol or {"lrs": [lr], "seeds": [seed]}, "fingerprint": EXPECTED,
            "validation": {"score": score}, "test": {"score": score},
            "per_example": {"validation": [], "test": [{"id": f"e{i}", "correct": c} for i, c in enumerate(correct)]}}


def _model(root: Path, seeds: list[list[int]], name: str, protocol: dict | None = None) -> Path:
    for seed, correct in enumerate(seeds):
        path = root / "sc" / "syn-sentiment" / f"lr0.001_sd{seed}" / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_record(correct, seed=seed, protocol=protocol)))
    write_summary(root, model=name, model_name=name, profile="smoke", expected=EXPECTED)
    return root


def test_the_interval_covers_the_test_sets_own_sampling():
    """One model, 5 identical seeds, 140 of 200 right: the seed CI is 0 wide, the binomial one about ±6.35 points."""
    correct = [1] * 140 + [0] * 60
    found = bootstrap.interval("sc", [_record(correct, seed=s) for s in range(5)])
    half = (found["high"] - found["low"]) / 2
    assert found["examples"] == 200 and found["seeds"] == 5
    assert half == pytest.approx(1.96 * 100 * (0.7 * 0.3 / 200) ** 0.5, rel=0.1)
    assert found["low"] < 70.0 < found["high"]
    assert bootstrap.interval("sc", [_record(correct, seed=0)]) == bootstrap.interval("sc", [_record(correct, seed=0)])


def test_pairing_cancels_what_both_models_find_hard():
    """A is B plus 10 examples right (5 points): their own intervals overlap, the paired difference excludes 0."""
    rng = random.Random(0)
    b = [int(rng.random() < 0.6) for _ in range(200)]
    wrong = [i for i, c in enumerate(b) if not c][:10]
    a = [1 if i in wrong else c for i, c in enumerate(b)]
    ra, rb = [_record(a, seed=0)], [_record(b, seed=0)]
    ia, ib = bootstrap.interval("sc", ra), bootstrap.interval("sc", rb)
    assert ia["low"] < ib["high"]  # unpaired, the two intervals overlap
    pair = bootstrap.paired("sc", ra, rb)
    assert pair["difference"] == pytest.approx(5.0) and pair["low"] > 0 and pair["p_value"] < 0.05
    assert bootstrap.paired("sc", ra, [_record(b[:100], seed=0)]) is None  # other test examples: no pairing


def test_token_classification_f1_is_rebuilt_from_per_sentence_entity_counts():
    """seqeval's micro F1 equals 2 x correct / (predicted + gold) over per-sentence counts, what `tc` records."""
    from seqeval.metrics import f1_score
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(1)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(60)]
    predicted = [[t if rng.random() < 0.7 else rng.choice(tags) for t in sentence] for sentence in gold]
    counts = np.array([[len(set(get_entities(p)) & set(get_entities(g))), len(set(get_entities(p))),
                        len(set(get_entities(g)))] for p, g in zip(predicted, gold, strict=True)], dtype=float)
    rebuilt = float(bootstrap.statistic("tc", counts.sum(0), len(gold)))
    assert rebuilt == pytest.approx(100 * f1_score(gold, predicted, zero_division=0))


def test_summary_and_compare_show_the_bootstrap_and_bold_only_what_it_confirms(tmp_path):
    """Seeds agree closely, so Welch over seeds calls A (70.6) above B (69.9); but A and B differ on 2 of 200 test
    examples, and the paired bootstrap over those examples cannot tell them apart: no bold."""
    base = [1] * 140 + [0] * 60
    a_seeds = [[*base[:140], 1, *base[141:]]] * 4 + [[*base[:140], 1, 1, *base[142:]]]  # 70.5 x 4, 71.0
    b_seeds = [base] * 4 + [[*base[:139], 0, *base[140:]]]  # 70.0 x 4, 69.5
    a, b = _model(tmp_path / "a", a_seeds, "a"), _model(tmp_path / "b", b_seeds, "b")
    row = json.loads((a / "summary.json").read_text())["results"][0]
    assert row["test_bootstrap"]["examples"] == 200 and row["test_bootstrap"]["low"] < 70.6 < row["test_bootstrap"][
        "high"]
    assert "| syn-sentiment | accuracy | 70.60 ± 0.28 | [" in (a / "summary.md").read_text()
    from hf_encoderize.evaluation.compare import significantly_best

    assert significantly_best([(70.6, row["test_ci95"], 5), (69.9, row["test_ci95"], 5)]) == 0  # Welch alone: bold
    table = compare([str(a), str(b)], str(tmp_path / "cmp"))["table"]
    assert table.startswith("Protocol: fine-tuned (the whole model trains")
    line = next(line for line in table.splitlines() if "syn-sentiment" in line)
    assert "**" not in line and "70.60 ± 0.28 [" in line


def test_compare_refuses_frozen_beside_fine_tuned_unless_mixed(tmp_path):
    good = [[1] * 190 + [0] * 10, [1] * 191 + [0] * 9, [1] * 189 + [0] * 11]
    bad = [[1] * 20 + [0] * 180, [1] * 22 + [0] * 178, [1] * 18 + [0] * 182]
    fine = _model(tmp_path / "fine", good, "fine")
    frozen = _model(tmp_path / "frozen", bad, "frozen", protocol={"frozen": True})
    with pytest.raises(EncoderizeError, match="mix frozen-probe and fine-tuned"):
        compare([str(fine), str(frozen)], str(tmp_path / "cmp"))
    table = compare([str(fine), str(frozen)], str(tmp_path / "cmp"), mixed=True)["table"]
    assert "fine [fine-tuned]" in table and "frozen [frozen probe]" in table and "Protocols differ" in table
    line = next(line for line in table.splitlines() if "syn-sentiment" in line)
    assert "**" not in line  # 95 against 10, yet never bold across protocols
    same = _model(tmp_path / "same", bad, "same")  # the same scores, fine-tuned: then the difference is bold
    assert "| **95.00 ± " in compare([str(fine), str(same)], str(tmp_path / "cmp2"))["table"]
    alone = compare([str(frozen)], str(tmp_path / "one"))["table"]
    assert alone.startswith("Protocol: frozen probe") and "frozen probe" in (tmp_path / "one" / "comparison.md"
                                                                               ).read_text()


def test_compare_refuses_binary_beside_graded_ndcg(tmp_path):
    def summary(folder: Path, extra: dict) -> Path:
        folder.mkdir()
        row = {"task": "ir", "dataset": "msmarco", "metric": "ndcg@10", "best_lr": "1e-05", "test_mean": 40.0,
               "test_ci95": 1.0, "n_seeds": 5, "extra_metrics": extra}
        (folder / "summary.json").write_text(json.dumps({"model": "m", "model_name": folder.name, "mode": "x",
                                                         "protocol": {}, "results": [row], "family_means": {}}))
        return folder

    binary, graded = summary(tmp_path / "b", {}), summary(tmp_path / "g", {"ndcg@10_binary": 38.0})
    with pytest.raises(EncoderizeError, match="binary NDCG@10 in one summary and graded"):
        compare([str(binary), str(graded)], str(tmp_path / "cmp"))
    table = compare([str(binary), str(graded)], str(tmp_path / "cmp"), mixed=True)["table"]
    assert "| ir | msmarco | ndcg@10 (binary gains) | 40.00 ± 1.00 | - |" in table
    assert "| ir | msmarco | ndcg@10 (graded gains) | - | 40.00 ± 1.00 |" in table


def test_zero_spread_is_never_significant():
    from hf_encoderize.evaluation.compare import _cells, significantly_best
    from hf_encoderize.evaluation.stats import welch_verdict

    assert (welch_verdict({"mean": 50.01, "ci95": 0.0, "n_seeds": 5}, {"mean": 50.0, "ci95": 0.0})["reason"]
        == "zero spread")
    cells = [(50.01, 0.0, 5), (50.00, 0.0, 5)]
    assert significantly_best(cells) is None and _cells(cells) == ["50.01 ± 0.00", "50.00 ± 0.00"]
    assert significantly_best([(60.0, 0.0, 5), (50.0, 1.0, 5)]) is None  # one side without spread: no test either


def test_a_summary_without_test_ci95_is_one_error_line(tmp_path, capsys):
    from hf_encoderize.cli import main

    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"model": "m", "model_name": "m", "results": [
        {"task": "sc", "dataset": "sst2", "metric": "accuracy", "test_mean": 90.0}]}))
    assert main(["compare", str(folder), "--output-dir", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "has no test_ci95" in err and err.count("\n") == 1
