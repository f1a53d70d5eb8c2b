"""Our QA F1 / EM equal the official SQuAD v1.1, SQuAD v2.0 and ReCoRD scripts on thousands of generated cases.

The `_v1_*`, `_v2_*` and `_record_*` functions below are transcriptions of the official scripts (reformatted only):
- SQuAD v1.1: `evaluate-v1.1.py` (rajpurkar.github.io/SQuAD-explorer), as vendored in huggingface/evaluate
  `metrics/squad/compute_score.py`: `normalize_answer`, `f1_score`, `exact_match_score`,
  `metric_max_over_ground_truths`.
- SQuAD v2.0: `evaluate-v2.0.py` (same site), as vendored in huggingface/datasets `metrics/squad_v2/evaluate.py`:
  `normalize_answer`, `get_tokens`, `compute_exact`, `compute_f1` and the gold filtering of `get_raw_scores`.
- ReCoRD v1.0: `evaluate.py` (sheng-z.github.io/ReCoRD-explorer), as vendored in huggingface/evaluate
  `metrics/super_glue/record_evaluation.py`: its `f1_score` / `exact_match_score` / `metric_max_over_ground_truths`.
"""

from __future__ import annotations

import collections
import random
import re
import string
from collections import Counter

import pytest

from hf_encoderize.evaluation.qa import f1_and_em

# ------------------------------------------------------------------------- SQuAD v1.1 evaluate-v1.1.py (transcribed)


def _v1_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _v1_f1_score(prediction, ground_truth):
    prediction_tokens = _v1_normalize_answer(prediction).split()
    ground_truth_tokens = _v1_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def _v1_exact_match_score(prediction, ground_truth):
    return _v1_normalize_answer(prediction) == _v1_normalize_answer(ground_truth)


def _v1_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def official_v1(prediction, ground_truths):
    return (_v1_metric_max_over_ground_truths(_v1_f1_score, prediction, ground_truths),
            _v1_metric_max_over_ground_truths(_v1_exact_match_score, prediction, ground_truths))


# ------------------------------------------------------------------------- SQuAD v2.0 evaluate-v2.0.py (transcribed)


def _v2_normalize_answer(s):
    def remove_articles(text):
        regex = re.compile(r"\b(a|an|the)\b", re.UNICODE)
        return re.sub(regex, " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _v2_get_tokens(s):
    if not s:
        return []
    return _v2_normalize_answer(s).split()


def _v2_compute_exact(a_gold, a_pred):
    return int(_v2_normalize_answer(a_gold) == _v2_normalize_answer(a_pred))


def _v2_compute_f1(a_gold, a_pred):
    gold_toks = _v2_get_tokens(a_gold)
    pred_toks = _v2_get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def official_v2(a_pred, answer_texts):
    # get_raw_scores, for one question
    gold_answers = [a for a in answer_texts if _v2_normalize_answer(a)]
    if not gold_answers:
        # For unanswerable questions, only correct answer is empty string
        gold_answers = [""]
    return (max(_v2_compute_f1(a, a_pred) for a in gold_answers),
            max(_v2_compute_exact(a, a_pred) for a in gold_answers))


# ---------------------------------------------------------------------------- ReCoRD v1.0 evaluate.py (transcribed)


def _record_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _record_f1_score(prediction, ground_truth):
    prediction_tokens = _record_normalize_answer(prediction).split()
    ground_truth_tokens = _record_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def _record_exact_match_score(prediction, ground_truth):
    return _record_normalize_answer(prediction) == _record_normalize_answer(ground_truth)


def _record_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def official_record(prediction, ground_truths):
    return (_record_metric_max_over_ground_truths(_record_f1_score, prediction, ground_truths),
            _record_metric_max_over_ground_truths(_record_exact_match_score, prediction, ground_truths))


OFFICIAL = {"squad": official_v1, "squad_v2": official_v2, "record": official_record}

# ------------------------------------------------------------------------------------------------ generated cases

# Words that survive normalisation, words and marks that normalise away ("the", "An", "!"), unicode and case.
WORDS = ["denver", "Broncos", "broncos", "1976", "Beyoncé", "bruno", "mars", "climate", "change", "New", "york", "a1"]
VANISHING = ["the", "The", "an", "A", "a", "!", "?", ".", "--", "'", '"', "(", ")", ",", ""]
SEPARATORS = [" ", "  ", "\t", "\n", "", "-", ","]


def _text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4, 6])):
        pieces.append(rng.choice(WORDS if rng.random() < 0.55 else VANISHING))
        pieces.append(rng.choice(SEPARATORS))
    return "".join(pieces)


def _cases(n: int, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    return [(_text(rng), [_text(rng) for _ in range(rng.choice([0, 1, 1, 2, 3, 5]))]) for _ in range(n)]


@pytest.mark.parametrize("metric", ["squad", "squad_v2", "record"])
def test_every_generated_case_scores_as_the_official_script(metric):
    official = OFFICIAL[metric]
    cases = [(p, golds) for p, golds in _cases(4000, seed=31) if golds or metric == "squad_v2"]
    empty_golds = sum(any(not _v1_normalize_answer(g) for g in golds) for _, golds in cases)
    empty_preds = sum(not _v1_normalize_answer(p) for p, _ in cases)
    assert len(cases) > 3000 and empty_golds > 500 and empty_preds > 500  # the edge cases are well represented
    mismatches = [(p, golds, f1_and_em(p, golds, metric), official(p, golds)) for p, golds in cases
                  if f1_and_em(p, golds, metric) != pytest.approx(tuple(float(x) for x in official(p, golds)))]
    assert mismatches == []


@pytest.mark.parametrize(("metric", "prediction", "golds", "expected"), [
    # v2.0 drops golds that normalise to "": "the" is not a gold, so an empty prediction scores against "1976" only.
    ("squad_v2", "", ["the", "1976"], (0.0, 0.0)),
    ("squad_v2", "The", ["!", "an"], (1.0, 1.0)),  # every gold vanished: [""] is the gold
    ("squad_v2", "", [], (1.0, 1.0)),
    ("squad_v2", "1976", [], (0.0, 0.0)),
    # v1.1 and ReCoRD keep such golds; both sides empty is EM 1 with F1 0.
    ("squad", "", ["the", "1976"], (0.0, 1.0)),
    ("record", "!", ["An"], (0.0, 1.0)),
    ("squad", "the Denver Broncos!", ["Denver Broncos"], (1.0, 1.0)),
])
def test_the_empty_normalising_cases_the_scripts_disagree_on(metric, prediction, golds, expected):
    assert f1_and_em(prediction, golds, metric) == expected
    if golds or metric == "squad_v2":
        assert tuple(float(x) for x in OFFICIAL[metric](prediction, golds)) == expected


def _corpus_scores(metric: str, predictions: list[str], references: list[list[str]]) -> dict:
    scored = [f1_and_em(p, golds, metric) for p, golds in zip(predictions, references, strict=True)]
    return {"f1": 100 * sum(f for f, _ in scored) / len(scored), "exact": 100 * sum(e for _, e in scored) / len(scored)}


def test_the_official_metric_cards_examples():
    # huggingface/evaluate metrics/squad_v2/README.md: perfect, no match, and "2 out of 3 answers correct".
    assert _corpus_scores("squad_v2", ["1976"], [["1976"]]) == {"f1": 100.0, "exact": 100.0}
    assert _corpus_scores("squad_v2", ["1999"], [["1976"]]) == {"f1": 0.0, "exact": 0.0}
    partial = _corpus_scores("squad_v2", ["1976", "Beyonce", "climate change"],
                             [["1976"], ["Beyoncé and Bruno Mars"], ["climate change"]])
    assert partial == {"f1": pytest.approx(66.66666666666667), "exact": pytest.approx(66.66666666666667)}
    # huggingface/evaluate metrics/squad (compute_score.py docstring): '1976' against '1976' is 100 / 100.
    assert _corpus_scores("squad", ["1976"], [["1976"]]) == {"f1": 100.0, "exact": 100.0}
    # metrics/super_glue record example: 'answer' against ['answer', 'another_answer'] is EM 1, F1 1.
    assert f1_and_em("answer", ["answer", "another_answer"], "record") == (1.0, 1.0)


def test_a_question_without_gold_is_a_miss_for_v1_and_record():
    # The official v1.1 / ReCoRD scripts cannot score it (max over no golds); it counts like an unanswered question.
    with pytest.raises(ValueError):
        official_v1("", [])
    assert f1_and_em("", [], "squad") == (0.0, 0.0)
    assert f1_and_em("", [], "record") == (0.0, 0.0)
