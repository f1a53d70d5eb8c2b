"""NDCG@10: EncodEval's binary gains by default, graded (linear) gains as pytrec_eval computes them, both reported."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from conftest import make_tokenizer

from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.evaluation.converters import judged_rows
from hf_encoderize.evaluation.ir import Retrieval, ndcg_at_10, rank_metrics
from hf_encoderize.evaluation.loaders import DATASETS


def test_ndcg_by_hand():
    # Ranked: d2 (grade 3), d9 (unjudged), d1 (grade 1). Ideal: 3, 2, 1.
    dcg = 3 / math.log2(2) + 0 + 1 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_10(["d2", "d9", "d1"], {"d1": 1, "d2": 3, "d3": 2}) == pytest.approx(100 * dcg / idcg)
    # Binarised, every judged document with score >= 1 counts 1: ideal 1, 1, 1.
    binary = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3) + 1 / math.log2(4))
    assert ndcg_at_10(["d2", "d9", "d1"], {"d1": 1, "d2": 1, "d3": 1}) == pytest.approx(100 * binary)


def _random_query(rng: random.Random):
    docs = [f"d{i}" for i in range(30)]
    judged = {doc: rng.choice([0, 0, 1, 2, 3]) for doc in rng.sample(docs, 12)}
    judged[rng.choice(list(judged))] = 3  # at least one relevant
    ranking = rng.sample(docs, 30)
    return docs, judged, ranking


def test_graded_ndcg_equals_pytrec_eval_and_sklearn_on_random_queries():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from sklearn.metrics import ndcg_score

    rng = random.Random(0)
    for q in range(200):
        docs, judged, ranking = _random_query(rng)
        ours = ndcg_at_10(ranking, judged)
        run = {str(q): {doc: float(30 - rank) for rank, doc in enumerate(ranking)}}  # distinct scores: no ties
        evaluator = pytrec_eval.RelevanceEvaluator({str(q): judged}, {"ndcg_cut.10"})
        assert ours == pytest.approx(100 * evaluator.evaluate(run)[str(q)]["ndcg_cut_10"], abs=1e-9)
        truth = np.array([[judged.get(doc, 0) for doc in docs]])
        scores = np.array([[run[str(q)][doc] for doc in docs]])
        assert ours == pytest.approx(100 * ndcg_score(truth, scores, k=10), abs=1e-9)


def test_rank_metrics_report_both_and_binary_is_the_headline():
    ranking = ["d3", "d1", "d2"]
    judged = {"d1": 3, "d2": 1, "d3": 0}
    grades = {doc: int(score >= 1) for doc, score in judged.items()}
    metrics = rank_metrics(ranking, grades, judged)
    assert metrics["ndcg@10"] == pytest.approx(ndcg_at_10(ranking, grades))
    assert metrics["ndcg@10_graded"] == pytest.approx(ndcg_at_10(ranking, judged))
    assert metrics["ndcg@10"] != pytest.approx(metrics["ndcg@10_graded"])
    assert "ndcg@10_graded" not in rank_metrics(ranking, grades)


def test_judged_rows_keep_encodeval_binarisation_and_the_judged_grade():
    qrels = [("q", "a", 3), ("q", "b", 1), ("q", "c", 0)]
    rows = judged_rows({"q": "Query: x"}, {"a": "A", "b": "B", "c": "C"}, qrels)
    assert [(d["grade"], d["judged"]) for d in rows[0]["docs"]] == [(1, 3), (1, 1), (0, 0)]


def test_eval_set_carries_graded_judgments_only_when_there_are_any():
    task = Retrieval(DATASETS["msmarco"], make_tokenizer(), 32)
    graded = judged_rows({"q": "x"}, {"a": "A", "b": "B"}, [("q", "a", 2), ("q", "b", 1)])
    binary = judged_rows({"q": "x"}, {"a": "A", "b": "B"}, [("q", "a", 1), ("q", "b", 0)])
    assert task.eval_set(graded)["judged"] == [{"a": 2, "b": 1}]
    assert task.eval_set(binary)["judged"] is None


def test_ndcg_gains_is_an_option_in_the_protocol_and_checked():
    from hf_encoderize.common.errors import EncoderizeError

    assert EvalConfig(profile="smoke").protocol()["ndcg_gains"] == "binary"
    assert EvalConfig(profile="smoke", ndcg_gains="graded").protocol()["ndcg_gains"] == "graded"
    with pytest.raises(EncoderizeError, match="--ndcg-gains"):
        EvalConfig(profile="smoke", ndcg_gains="exponential")
