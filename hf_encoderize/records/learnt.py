"""What a model learnt, named once: each contrastive method, each masking target and each phase, with the words the
card, the run record and the metrics use for it.

Design choices:
- One row (`Learnt`) per thing a run can learn, in one table (`LEARNT`): its name (the word of the flag, the record and
  the metrics line: `simcse`, `mntp`, `clm`), its card label and phrase, the name of the metric that measures it and
  whether its attention is bidirectional. The card, `run_record.json` and `metrics.jsonl` read these; none of them
  spells a label of its own, so a distilled model can no longer read as "supervised pairs" on its card.
- A pretraining run is a sequence of phases (`clm` then the masked phase), recorded as what each learnt
  (`clm+mntp`, never `clm+mlm` for MNTP): the record's `phases`, read back by `recorded_sequence`.
- Rows are small frozen dataclasses; the behaviour lives in the components that carry them (a masking target:
  `objectives.targets`). This module sits in `records`, below every stage, so the engine, the recipes and the card
  can all read it; a target defined outside the package adds its row (`declare`) when it registers.
- A name no row declares (a record of a later version) reads as a row that only repeats the name: a card never fails
  on a word it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["method", "masking_target", "phase"]


@dataclass(frozen=True, kw_only=True)
class Learnt:
    """One thing a run can learn: a contrastive method, a masking target or a causal phase."""

    name: str
    """The one word for it in flags, records and metrics (`--method distill`, `"phases": "clm+mntp"`)."""
    kind: Kind
    """method (the contrastive stage), masking_target (what masked positions predict) or phase (causal CLM)."""
    card_label: str
    """How tables name it (the card's "Objective" row, the loss curve's legend)."""
    phrase: str
    """How the card's prose says it, after "trained with" / "then"."""
    metric: str
    """The name of the metric that measures it: the held-out accuracy key (`metrics.jsonl`, the run record) for a
    masking target or phase, the training loss for a contrastive method."""
    bidirectional: bool = True
    """Whether attention sees the whole text while it is learnt (False only for CLM)."""
    trained_on: str = ""
    """A contrastive method: what the model learnt from, for the card's limitations ("unlabelled text (SimCSE)")."""


LEARNT: dict[str, Learnt] = {row.name: row for row in (
    Learnt(name="clm", kind="phase", card_label="CLM", phrase="causal language modelling (next token, causal "
           "attention)", metric="eval_next_token_accuracy", bidirectional=False),
    Learnt(name="mlm", kind="masking_target", card_label="MLM", phrase="masked language modelling",
           metric="eval_masked_accuracy"),
    # LLM2Vec (BehnamGhader et al., 2024), section 2: the token at i is predicted from position i-1.
    Learnt(name="mntp", kind="masking_target", card_label="MNTP (masked next-token prediction, LLM2Vec)",
           phrase="masked next-token prediction (MNTP, LLM2Vec: each masked token predicted from the position "
           "before it)", metric="eval_masked_accuracy"),
    Learnt(name="simcse", kind="method", card_label="SimCSE", phrase="SimCSE (unsupervised: each text is its own "
           "positive, in-batch negatives; dropout makes the two views)", metric="mnrl",
           trained_on="unlabelled text (SimCSE)"),
    Learnt(name="supervised", kind="method", card_label="supervised pairs", phrase="supervised pairs, in-batch and "
           "given hard negatives", metric="mnrl", trained_on="the pairs named above"),
    Learnt(name="distill", kind="method", card_label="distillation", phrase="distillation: the mean squared error "
           "to a teacher's embedding of each text", metric="mse",
           trained_on="a teacher's embeddings of the texts named above"),
)}


def learnt(name: str | None) -> Learnt:
    """The row of `name`; a name no row declares (a later version's) gets a row that repeats it.

    >>> learnt("distill").card_label, learnt("mntp").metric, learnt("a-later-target").card_label
    ('distillation', 'eval_masked_accuracy', 'a-later-target')
    """
    found = LEARNT.get(name or "")
    if found is not None:
        return found
    word = name or "unknown"
    return Learnt(name=word, kind="phase", card_label=word, phrase=word, metric="eval_masked_accuracy",
                  trained_on=word)


def of_kind(kind: Kind) -> tuple[str, ...]:
    """The names of one kind, in the table's order: `of_kind("masking_target")` is ("mlm", "mntp")."""
    return tuple(name for name, row in LEARNT.items() if row.kind == kind)


def declare(row: Learnt) -> None:
    """Add `row` to the table (a target registered from outside the package: `objectives.targets.register_target`).
    Declaring a name again with the same row is a no-op; with another row it is refused: one word, one thing."""
    known = LEARNT.setdefault(row.name, row)
    if known != row:
        raise ValueError(f"{row.name!r} is already declared as another thing ({known.kind}); pick another name")


@dataclass(frozen=True, kw_only=True)
class PhaseSequence:
    """The phases of a run in order, each named for what it learnt: `clm` then `mntp` is `clm+mntp`."""

    phases: tuple[Learnt, ...]

    @property
    def record_name(self) -> str:
        """The run record's `phases`: what each phase learnt, joined by "+" (`mlm`, `clm+mlm`, `clm+mntp`)."""
        return "+".join(p.name for p in self.phases)

    @property
    def card_label(self) -> str:
        """The card's label: `CLM, then MNTP (...)`."""
        return ", then ".join(p.card_label for p in self.phases)

    @property
    def masking_target(self) -> Learnt | None:
        """The masked phase's target, None for a CLM-only run."""
        return next((p for p in self.phases if p.kind == "masking_target"), None)


def recorded_sequence(phases: str | None) -> PhaseSequence:
    """The sequence a run record's `phases` names (`clm+mntp`, `mlm`); empty when it names none.

    >>> recorded_sequence("clm+mntp").card_label
    'CLM, then MNTP (masked next-token prediction, LLM2Vec)'
    """
    return PhaseSequence(phases=tuple(learnt(p) for p in (phases or "").split("+") if p))
