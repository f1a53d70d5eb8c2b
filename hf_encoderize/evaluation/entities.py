"""Entity-level precision, recall and F1 of tagged sentences: seqeval's default behaviour, owned here.

Design choices:
- The rules are seqeval's default mode (no `scheme`, no `mode="strict"`), which follows CoNLL's `conlleval`: a chunk
  starts at `B-`, at `S-`, at `I-`/`E-` after `O` or after a chunk that ended, and wherever the type changes; it ends
  before `B-`/`S-`/`O`, after `E-`/`S-`, and wherever the type changes. So IOB2, IOB1 (`I-` opening an entity) and
  IOE tags are all read the way seqeval reads them. Micro averaging: one precision and one recall over all entities.
- Why not depend on seqeval: its last release (2020) is an sdist with a `setup.py` only, so every install of ours
  built it from source (issue 69). tests/test_entities.py pins this module to seqeval's outputs (seqeval stays a test
  dependency, the `dev` extra): on seqeval's own examples, on random IOB2/IOB1/IOE/IOBES sequences as its statistical
  test draws them, and on the quickstart's synthetic entity set, equal to the last bit.
- The arithmetic is seqeval's, step for step (`2 * p * r / (p + r)` with p and r first, 0 where a count is 0), so a
  score recorded before this module existed is reproduced digit for digit.

>>> entities(["B-PER", "I-PER", "O", "B-LOC"])
[('PER', 0, 1), ('LOC', 3, 3)]
>>> entity_scores([["O", "B-MISC", "I-MISC", "B-MISC", "O"], ["B-PER", "I-PER"]],
...               [["O", "B-MISC", "I-MISC", "B-MISC", "I-MISC"], ["B-PER", "I-PER"]]).f1
0.6666666666666666
"""

from __future__ import annotations

from dataclasses import dataclass

Entity = tuple[str, int, int]  # (type, first word, last word), both ends inclusive


def _split(tag: str) -> tuple[str, str]:
    """(prefix letter, type) of a tag as seqeval reads it: `B-PER` -> ("B", "PER"); a bare tag's type is "_"."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Whether a chunk ended between the previous word and this one."""
    return (prev_tag in ("E", "S") or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
            or (prev_tag not in ("O", ".") and prev_type != type_))


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Whether a chunk started between the previous word and this one."""
    return (tag in ("B", "S") or (prev_tag in ("E", "S", "O") and tag in ("E", "I"))
            or (tag not in ("O", ".") and prev_type != type_))


def entities(tags: list[str]) -> list[Entity]:
    """The entities of one tag sequence, in order."""
    prev_tag, prev_type, begin, found = "O", "", 0, []
    for index, tag in enumerate([*tags, "O"]):
        letter, type_ = _split(tag)
        if _ends(prev_tag, letter, prev_type, type_):
            found.append((prev_type, begin, index - 1))
        if _starts(prev_tag, letter, prev_type, type_):
            begin = index
        prev_tag, prev_type = letter, type_
    return found


def _flat(sentences: list[list[str]]) -> list[str]:
    """The sentences end to end, each followed by `O` (seqeval's reading of a list of sentences)."""
    return [tag for sentence in sentences for tag in [*sentence, "O"]]


@dataclass(frozen=True, kw_only=True)
class EntityCounts:
    """Entities found in a prediction against the gold ones: what precision, recall and F1 are made of."""

    correct: int
    """Predicted entities that are gold entities (same type, same first and last word)."""
    predicted: int
    """Entities in the prediction."""
    gold: int
    """Entities in the gold tags."""

    @classmethod
    def of(cls, gold: list[str], predicted: list[str]) -> EntityCounts:
        """The counts of one tag sequence (a sentence, or sentences joined by `_flat`)."""
        if len(gold) != len(predicted):
            raise ValueError(f"gold and predicted tags differ in length ({len(gold)} vs {len(predicted)})")
        found, truth = set(entities(predicted)), set(entities(gold))
        return cls(correct=len(found & truth), predicted=len(found), gold=len(truth))

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        precision, recall = self.precision, self.recall
        return 2 * precision * recall / ((precision + recall) or 1)


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> EntityCounts:
    """Micro-averaged entity counts over sentences (`.precision`, `.recall`, `.f1`), as seqeval's default mode."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted, strict=True)):
        raise ValueError("gold and predicted tags differ in length: one predicted tag per gold tag, sentence by "
                         "sentence")
    return EntityCounts.of(_flat(gold), _flat(predicted))
