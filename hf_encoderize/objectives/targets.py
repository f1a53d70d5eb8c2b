"""What a phase learns to predict, as a component: next tokens (CLM), masked tokens (MLM), masked next tokens (MNTP).

Design choices (torchtitan builds its loss components from config; issue 70):
- A target is a small class with its behaviour: it turns a batch of rows into `(inputs, labels)` (`labels`), says
  whether attention sees the whole text while it is learnt (`bidirectional`), and carries its row of
  `records.learnt` (its card label, prose phrase and metric name). The engine calls it and never tests its name.
- Targets are registered by name (`register_target`): `--masking-target NAME` builds the registered class from the
  `MaskingConfig` (`build_target`), and a recipe hands the built target to the engine inside its phases. A target
  defined outside the package registers itself the same way (one decorator), and its `Learnt` row joins the table
  the card, the run record and the metrics line read, so it is named everywhere without a package file naming it.
- Masked targets mask every row with its own generator, seeded by `row_seed(seed, lane, row)`: masking holds no state,
  so a resumed run needs no RNG state and 1 x 8 rows = 2 x 4 = 8 accumulation steps x 1 mask alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.objectives.loss import IGNORE
from hf_encoderize.objectives.masking import MaskingConfig, mask_tokens
from hf_encoderize.records.learnt import Learnt, declare, learnt


@dataclass(frozen=True, kw_only=True)
class MaskTokens:
    """What masking needs from the tokenizer and the run: the mask token, the vocabulary (BERT's random
    replacement), the ids never masked (padding, EOS, ...) and the run's seed."""

    mask_token_id: int
    vocab_size: int
    special_ids: torch.Tensor
    """(S,) long, on the host: masking runs there."""
    seed: int

    @classmethod
    def of(cls, *, mask_token_id: int, vocab_size: int, special_ids, seed: int) -> MaskTokens:
        return cls(mask_token_id=mask_token_id, vocab_size=vocab_size, seed=seed,
                   special_ids=torch.tensor(sorted(set(special_ids)), dtype=torch.long, device="cpu"))


def row_seed(seed: int, lane: int, row: int) -> int:
    """The masking seed of one row: a hash of (run seed, lane, row number in that lane), so a row's mask depends on
    nothing but which row it is. That makes masking stateless (a resumed run needs no RNG state), the same whatever
    process or micro-batch a lane lands on (1 x 8 rows = 2 x 4 = 8 accumulation steps x 1), and the same after a CLM
    phase of any length (a branch point holds no masking state).

    >>> row_seed(0, 3, 7) == row_seed(0, 3, 7), row_seed(0, 3, 7) == row_seed(0, 7, 3)
    (True, False)
    """
    digest = hashlib.blake2b(f"{seed}:{lane}:{row}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class Target:
    """What a phase learns: subclasses set `learnt` (their row: name, card label, metric, bidirectional) and
    implement `labels`."""

    learnt: ClassVar[Learnt]

    def __init__(self, masking: MaskingConfig):
        self.masking = masking

    @property
    def name(self) -> str:
        """The one word for it in flags, records and metrics lines (`mntp`)."""
        return self.learnt.name

    @property
    def bidirectional(self) -> bool:
        """Whether attention sees the whole text while it is learnt (False only for CLM)."""
        return self.learnt.bidirectional

    @property
    def card_label(self) -> str:
        return self.learnt.card_label

    @property
    def metric(self) -> str:
        """The held-out accuracy's name (`eval_masked_accuracy`, `eval_next_token_accuracy`)."""
        return self.learnt.metric

    def labels(self, input_ids: torch.Tensor, document_ids: torch.Tensor, keys: list[tuple[int, int]],
               tokens: MaskTokens) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows (B, T) -> `(inputs, labels)` (B, T): `keys[i]` = (lane, row number) of row i names its seed;
        `document_ids` is -1 on padding. Labels are -100 where nothing is predicted."""
        raise NotImplementedError


class MaskedTarget(Target):
    """A target that masks tokens: padding and special tokens are never masked, every row is masked by `mask_row`
    with its own generator (`row_seed`)."""

    def labels(self, input_ids, document_ids, keys, tokens):
        maskable = (document_ids >= 0) & ~torch.isin(input_ids, tokens.special_ids)
        masked, labels = [], []
        for row, (lane, number) in enumerate(keys):
            generator = torch.Generator().manual_seed(row_seed(tokens.seed, lane, number))
            pair = self.mask_row(input_ids[row : row + 1], maskable[row : row + 1], tokens, generator)
            masked.append(pair[0])
            labels.append(pair[1])
        return torch.cat(masked), torch.cat(labels)

    def mask_row(self, input_ids: torch.Tensor, maskable: torch.Tensor, tokens: MaskTokens,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One row (1, T) -> `(masked inputs, labels)`; `maskable` (1, T) bool."""
        raise NotImplementedError


TARGETS: dict[str, type[Target]] = {}


def register_target(cls: type[Target]) -> type[Target]:
    """Class decorator: make `cls` the target of `--masking-target cls.learnt.name`, and its row part of the table
    the card, the record and the metrics read (`records.learnt.declare`)."""
    declare(cls.learnt)
    TARGETS[cls.learnt.name] = cls
    return cls


def build_target(masking: MaskingConfig) -> Target:
    """The target `masking.masking_target` names, built from its config; a one-line error for a name none declares."""
    cls = TARGETS.get(masking.masking_target)
    if cls is None or cls.learnt.kind != "masking_target":
        names = ", ".join(n for n, c in TARGETS.items() if c.learnt.kind == "masking_target")
        raise EncoderizeError(f"--masking-target must be one of {names}, not {masking.masking_target!r}")
    return cls(masking)


def next_token_labels(input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels (B, T): position i predicts token i+1 of the same document; -100 elsewhere.

    >>> next_token_labels(torch.tensor([[5, 6, 7, 8, 0]]), torch.tensor([[0, 0, 1, 1, -1]])).tolist()
    [[6, -100, 8, -100, -100]]
    """
    labels = torch.full_like(input_ids, IGNORE)
    same_document = (document_ids[:, 1:] == document_ids[:, :-1]) & (document_ids[:, :-1] >= 0)
    labels[:, :-1] = torch.where(same_document, input_ids[:, 1:], labels[:, :-1])
    return labels


@register_target
class NextToken(Target):
    """CLM: every position predicts the next token of its document, nothing masked, causal attention."""

    learnt = learnt("clm")

    def labels(self, input_ids, document_ids, keys, tokens):
        return input_ids, next_token_labels(input_ids, document_ids)


@register_target
class MaskedTokens(MaskedTarget):
    """MLM: each maskable token masked with probability `mask_ratio`, predicted at its own position."""

    learnt = learnt("mlm")
    shift: ClassVar[int] = 0
    """Positions the labels move left: 0 predicts a token at its own position, 1 from the one before (MNTP)."""

    def mask_row(self, input_ids, maskable, tokens, generator):
        return mask_tokens(input_ids, maskable, mask_token_id=tokens.mask_token_id, vocab_size=tokens.vocab_size,
                           config=self.masking, generator=generator, shift=self.shift)


@register_target
class MaskedNextToken(MaskedTokens):
    """MNTP (LLM2Vec, section 2): MLM's masks, each masked token predicted from the position before it."""

    learnt = learnt("mntp")
    shift = 1


def next_token(masking: MaskingConfig) -> Target:
    """The CLM target (a pretrain schedule's `clm` phase)."""
    return NextToken(masking)
