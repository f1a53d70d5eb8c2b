"""Training objectives per phase: CLM (next token, causal attention) and MLM (masked tokens, bidirectional).

Design choices (paper, section 2 "Pretraining paradigms" and section 4):
- A run is a list of `Phase`s in order, each a share of one step budget: `clm:0.25,mlm:0.75`. Phases only go from
  CLM to MLM (causal -> bidirectional), the paper's CLM+MLM setup; the reverse would need a causal re-patch.
- Both objectives share one loss: CLM labels are the next token at every position (shifted left by one), so the
  same sparse LM-head loss (`loss.mlm_loss`) serves both. Labels never cross a document boundary, and
  padding predicts nothing, so packed rows train exactly like separate documents.
- MLM inputs come from `masking.mask_tokens`; CLM inputs are the tokens themselves. `Masker` picks between them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import check_number
from hf_encoderize.objectives.masking import IGNORE, MaskingConfig, mask_tokens

OBJECTIVES = ("clm", "mlm")  # in the only order a run may take them


@dataclass(frozen=True)
class Phase:
    """One objective over optimizer steps `[start, end)` of the run."""

    objective: str
    start: int
    end: int

    @property
    def bidirectional(self) -> bool:
        return self.objective == "mlm"

    def to_dict(self) -> dict:
        return {"objective": self.objective, "start": self.start, "end": self.end}


def parse_schedule(spec: str, steps: int) -> list[Phase]:
    """`"clm:0.25,mlm:0.75"` over `steps` -> phases with step ranges (boundaries rounded from cumulative shares).

    >>> [p.to_dict() for p in parse_schedule("clm:0.25,mlm:0.75", 12000)]
    [{'objective': 'clm', 'start': 0, 'end': 3000}, {'objective': 'mlm', 'start': 3000, 'end': 12000}]
    """
    shares = []
    for part in [p.strip() for p in str(spec).split(",") if p.strip()]:
        name, _, share = part.partition(":")
        name = name.strip().lower()
        if name not in OBJECTIVES:
            raise EncoderizeError(f"--schedule: unknown phase {name!r}; use clm and/or mlm, e.g. clm:0.25,mlm:0.75")
        try:
            shares.append((name, float(share)))
        except ValueError:
            raise EncoderizeError(f"--schedule: phase {part!r} needs a share, e.g. {name}:0.5") from None
    _check_shares(shares)
    phases, start, cumulative = [], 0, 0.0
    for name, share in shares:
        cumulative += share
        end = steps if name == shares[-1][0] else round(cumulative * steps)
        if end <= start:
            raise EncoderizeError(f"--schedule: phase {name} gets 0 of {steps} steps; raise --max-steps or its share")
        phases.append(Phase(name, start, end))
        start = end
    return phases


def _check_shares(shares: list[tuple[str, float]]) -> None:
    names = [name for name, _ in shares]
    if not shares:
        raise EncoderizeError("--schedule is empty; give phases with shares, e.g. clm:0.25,mlm:0.75")
    if len(set(names)) != len(names) or names != sorted(names, key=OBJECTIVES.index):
        raise EncoderizeError("--schedule: each phase at most once, clm before mlm (e.g. clm:0.25,mlm:0.75)")
    for name, share in shares:
        check_number(f"--schedule: the {name} share", share)  # NaN slips past `<= 0` and the sum check
    if any(share <= 0 for _, share in shares):
        raise EncoderizeError("--schedule: every share must be positive; drop a phase instead of giving it 0")
    if abs(sum(share for _, share in shares) - 1.0) > 1e-6:
        total = sum(share for _, share in shares)
        raise EncoderizeError(f"--schedule: shares sum to {total:g}, not 1; e.g. clm:0.25,mlm:0.75")


def phase_at(phases: list[Phase], step: int) -> Phase:
    """The phase that optimizer step `step` (0-based) belongs to; the last phase past the end."""
    return next((p for p in phases if p.start <= step < p.end), phases[-1])


def clm_labels(input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels (B, T): position i predicts token i+1 of the same document; -100 elsewhere.

    >>> clm_labels(torch.tensor([[5, 6, 7, 8, 0]]), torch.tensor([[0, 0, 1, 1, -1]])).tolist()
    [[6, -100, 8, -100, -100]]
    """
    labels = torch.full_like(input_ids, IGNORE)
    same_document = (document_ids[:, 1:] == document_ids[:, :-1]) & (document_ids[:, :-1] >= 0)
    labels[:, :-1] = torch.where(same_document, input_ids[:, 1:], labels[:, :-1])
    return labels


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


class Masker:
    """Rows -> `(inputs, labels)` under the current objective: the one place where tokens get masked.

    `objective` is `clm` (next-token labels, nothing masked), `mlm` or `mntp` (`masking.mask_tokens`). Padding and the
    tokenizer's special tokens (EOS, mask, pad, ...) are never masked. Every row is masked with its own generator,
    seeded by `row_seed(seed, lane, row)` from the row's key `(lane, row)`: the masker holds no state.

    >>> masker = Masker(MaskingConfig(mask_ratio=0.5), mask_token_id=1, vocab_size=10, special_ids=[2], seed=0)
    >>> inputs, labels = masker(torch.tensor([[5, 6, 7, 8, 2, 0]]), torch.tensor([[0, 0, 0, 0, 0, -1]]), [(0, 0)])
    >>> inputs.tolist(), labels.tolist()
    ([[5, 1, 7, 8, 2, 0]], [[-100, 6, -100, -100, -100, -100]])
    """

    def __init__(self, masking: MaskingConfig, *, mask_token_id: int, vocab_size: int, special_ids, seed: int):
        self.masking, self.mask_token_id, self.vocab_size = masking, mask_token_id, vocab_size
        self.special_ids = torch.tensor(sorted(set(special_ids)), dtype=torch.long, device="cpu")  # host masking
        self.seed = seed
        self.objective = masking.objective

    @classmethod
    def for_tokenizer(cls, tokenizer, masking: MaskingConfig, vocab_size: int, seed: int) -> Masker:
        return cls(masking, mask_token_id=tokenizer.mask_token_id, vocab_size=vocab_size,
                   special_ids=tokenizer.all_special_ids, seed=seed)

    def __call__(self, input_ids: torch.Tensor, document_ids: torch.Tensor,
                 keys: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask rows (B, T); `keys[i]` = (lane, row number) of row i names its masking seed."""
        if self.objective == "clm":
            return input_ids, clm_labels(input_ids, document_ids)
        maskable = (document_ids >= 0) & ~torch.isin(input_ids, self.special_ids)
        masked, labels = [], []
        for row, (lane, number) in enumerate(keys):
            generator = torch.Generator().manual_seed(row_seed(self.seed, lane, number))
            pair = mask_tokens(input_ids[row : row + 1], maskable[row : row + 1], mask_token_id=self.mask_token_id,
                               vocab_size=self.vocab_size, config=self.masking, generator=generator)
            masked.append(pair[0])
            labels.append(pair[1])
        return torch.cat(masked), torch.cat(labels)
