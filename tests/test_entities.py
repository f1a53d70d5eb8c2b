"""Entity-level F1 (`evaluation.entities`) equals seqeval's default mode to the last bit: on seqeval's own examples, on
random IOB2/IOB1/IOE/IOBES sequences drawn as seqeval's statistical test draws them, on the quickstart's synthetic
entity set, and through `TokenClassification.score`. seqeval is a test dependency only (the `dev` extra)."""

from __future__ import annotations

import random

import pytest
import torch

from hf_encoderize.evaluation.entities import EntityCounts, entities, entity_scores

seqeval = pytest.importorskip("seqeval.metrics")
from seqeval.metrics.sequence_labeling import get_entities  # noqa: E402

TYPES = ["PER", "MISC", "ORG", "LOC"]


def _seqeval(gold, predicted) -> tuple[float, float, float]:
    return tuple(float(metric(gold, predicted, zero_division=0))
                 for metric in (seqeval.precision_score, seqeval.recall_score, seqeval.f1_score))


def _ours(gold, predicted) -> tuple[float, float, float]:
    counts = entity_scores(gold, predicted)
    return counts.precision, counts.recall, counts.f1


# seqeval's examples: its docstrings and tests/test_metrics.py (gold, predicted)
SEQEVAL_CASES = [
    ([["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]],
     [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]),
    ([["O", "O", "B-MISC", "I-MISC", "B-MISC", "O", "O"], ["B-PER", "I-PER", "O"]],
     [["O", "O", "B-MISC", "I-MISC", "B-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]),
    ([["O", "O", "O", "B-MISC", "I-MISC", "O", "B-ORG"], ["B-PER", "I-PER", "O"]],
     [["O", "O", "B-MISC", "I-MISC", "I-MISC", "O", "O"], ["B-PER", "I-PER", "O"]]),
    ([["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O", "B-PER", "I-PER"]],
     [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O", "B-PER", "I-PER"]]),
    ([["B-PER", "I-PER", "O"]], [["O", "O", "O"]]),  # nothing predicted: precision 0, not a division by zero
    ([["O", "O"]], [["O", "O"]]),  # nothing at all
]


@pytest.mark.parametrize("gold,predicted", SEQEVAL_CASES)
def test_seqeval_examples_score_the_same(gold, predicted):
    assert _ours(gold, predicted) == _seqeval(gold, predicted)
    for sentence in gold + predicted:
        assert entities(sentence) == get_entities(sentence)


def _draw(rng: random.Random, prefixes: str, tokens: int = 1000) -> tuple[list[list[str]], list[list[str]]]:
    """seqeval's statistical test: per token a random prefix and type for gold and prediction, a sentence ends after a
    token with probability 0.05."""
    gold, predicted, sentence_gold, sentence_predicted = [], [], [], []
    for _ in range(tokens):
        for sentence in (sentence_gold, sentence_predicted):
            prefix = rng.choice(prefixes)
            sentence.append("O" if prefix == "O" else f"{prefix}-{rng.choice(TYPES)}")
        if rng.random() > 0.95:
            gold.append(sentence_gold)
            predicted.append(sentence_predicted)
            sentence_gold, sentence_predicted = [], []
    if sentence_gold:
        gold.append(sentence_gold)
        predicted.append(sentence_predicted)
    return gold, predicted


@pytest.mark.parametrize("prefixes", ["BIO", "EIO", "IO", "BIOES"])  # IOB2, IOE, IOB1 (I- opens), IOBES
def test_random_sequences_score_the_same(prefixes):
    rng = random.Random(prefixes)
    for _ in range(40):
        gold, predicted = _draw(rng, prefixes)
        assert _ours(gold, predicted) == _seqeval(gold, predicted)
        for sentence in predicted:
            assert entities(sentence) == get_entities(sentence)


def _quickstart_entities() -> tuple[list[list[str]], list[str]]:
    """The quickstart's syn-entities validation and test sentences (`eval --profile smoke`), as tag names."""
    from hf_encoderize.evaluation.config import SMOKE_SIZES
    from hf_encoderize.evaluation.loaders import DATASETS, load_splits

    spec = DATASETS["syn-entities"]
    splits = load_splits(spec, sizes=SMOKE_SIZES)
    return [[spec.label_names[t] for t in row["tags"]] for row in splits["validation"] + splits["test"]], list(
        spec.label_names)


def test_the_quickstart_entity_set_scores_the_same_for_taggers_of_every_quality():
    """A tagger right on a word with probability `right`, otherwise any tag (so I- after O, type switches, E-less
    runs): from near chance, where the quickstart's encoders sit (about 20 F1), to near perfect."""
    gold, names = _quickstart_entities()
    rng = random.Random(0)
    for right in (0.0, 0.3, 0.6, 0.75, 0.9, 0.99, 1.0):
        for _ in range(5):
            predicted = [[t if rng.random() < right else rng.choice(names) for t in sentence] for sentence in gold]
            assert _ours(gold, predicted) == _seqeval(gold, predicted)
    all_o = [["O"] * len(sentence) for sentence in gold]
    assert _ours(gold, all_o) == _seqeval(gold, all_o) == (0.0, 0.0, 0.0)


def test_per_sentence_counts_rebuild_the_micro_f1():
    gold, names = _quickstart_entities()
    rng = random.Random(1)
    predicted = [[t if rng.random() < 0.7 else rng.choice(names) for t in sentence] for sentence in gold]
    per_sentence = [EntityCounts.of(g, p) for g, p in zip(gold, predicted, strict=True)]
    total = EntityCounts(correct=sum(c.correct for c in per_sentence), predicted=sum(c.predicted for c in per_sentence),
                         gold=sum(c.gold for c in per_sentence))
    assert total == entity_scores(gold, predicted)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        entity_scores([["O", "B-PER"]], [["O"]])


def test_token_classification_scores_what_seqeval_scores():
    """`TokenClassification.score` with a random head over a stand-in backbone: its F1, precision and recall are
    seqeval's on the same predictions."""
    from hf_encoderize.evaluation.tc import TokenClassification

    gold, names = _quickstart_entities()
    gold = gold[:60]
    features = [{"input_ids": list(range(1, len(s) + 2)), "labels": [-100] + [0] * len(s),
                 "_words": [-1] + list(range(len(s))), "_id": str(i), "_tags": [names.index(t) for t in s]}
                for i, s in enumerate(gold)]

    class Backbone:
        device = torch.device("cpu")

        def autocast(self):
            return torch.autocast("cpu", enabled=False)

    task = TokenClassification.__new__(TokenClassification)
    task.spec = type("Spec", (), {"label_names": tuple(names)})()
    task.collate = lambda batch: {"input_ids": torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(f["input_ids"]) for f in batch], batch_first=True)}
    torch.manual_seed(0)
    table = torch.randn(64, len(names))
    task.logits = lambda model, head, batch: table[batch["input_ids"] % 64]  # (B, T, tags)
    scores = task.score(Backbone(), None, None, features)
    predicted = [row["prediction"] for row in scores.per_example]
    precision, recall, f1 = _seqeval(gold, predicted)
    assert scores.score == 100.0 * f1 and scores.extra == {"precision": 100.0 * precision, "recall": 100.0 * recall}
    assert 0 < f1 < 1

