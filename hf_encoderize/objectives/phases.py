"""Training phases: CLM (next token, causal attention) then a masked target (bidirectional), under one step budget.

Design choices (paper, section 2 "Pretraining paradigms" and section 4):
- A run is a list of `Phase`s in order, each a share of one step budget: `clm:0.25,mlm:0.75`. Phases only go from
  CLM to the masked phase (causal -> bidirectional), the paper's CLM+MLM setup; the reverse would need a causal
  re-patch. The schedule's `mlm` names the masked phase; what it learns is the run's masking target (`mlm`, `mntp`,
  or a registered one), built once and carried by the phase (`Phase.target`).
- Every target shares one loss: CLM labels are the next token at every position (shifted left by one), so the
  same sparse LM-head loss (`loss.mlm_loss`) serves all. Labels never cross a document boundary, and
  padding predicts nothing, so packed rows train exactly like separate documents.
- `Masker` holds the run's mask tokens and the current phase's target, and asks the target for a batch's labels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import check_number
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.targets import MaskTokens, Target, build_target, next_token

# The schedule's words, in the only order a run may take them, and the target each phase learns.
PHASE_TARGETS: dict[str, Callable[[MaskingConfig], Target]] = {"clm": next_token, "mlm": build_target}
PHASE_NAMES = tuple(PHASE_TARGETS)


@dataclass(frozen=True)
class Phase:
    """One phase over optimizer steps `[start, end)` of the run, and what it learns."""

    name: str
    """The schedule's word for it: `clm` or `mlm` (the masked phase, whatever its target)."""
    start: int
    end: int
    target: Target = field(compare=False, repr=False)
    """What it learns (`objectives.targets`): the engine asks it for labels and whether attention is bidirectional."""

    @property
    def bidirectional(self) -> bool:
        return self.target.bidirectional

    def to_dict(self) -> dict:
        return {"name": self.name, "start": self.start, "end": self.end}


def parse_schedule(spec: str, steps: int, masking: MaskingConfig | None = None) -> list[Phase]:
    """`"clm:0.25,mlm:0.75"` over `steps` -> phases with step ranges (boundaries rounded from cumulative shares); the
    masked phase learns `masking`'s target (default: MLM).

    >>> [p.to_dict() for p in parse_schedule("clm:0.25,mlm:0.75", 12000)]
    [{'name': 'clm', 'start': 0, 'end': 3000}, {'name': 'mlm', 'start': 3000, 'end': 12000}]
    >>> [p.target.name for p in parse_schedule("clm:0.5,mlm:0.5", 10, MaskingConfig(masking_target="mntp"))]
    ['clm', 'mntp']
    """
    masking = masking or MaskingConfig()
    shares = []
    for part in [p.strip() for p in str(spec).split(",") if p.strip()]:
        name, _, share = part.partition(":")
        name = name.strip().lower()
        if name not in PHASE_NAMES:
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
        phases.append(Phase(name, start, end, PHASE_TARGETS[name](masking)))
        start = end
    return phases


def masked_phase(target: Target, steps: int) -> list[Phase]:
    """One masked phase over every step (cpt and recipes like it), learning `target`."""
    return [Phase("mlm", 0, steps, target)]

def _check_shares(shares: list[tuple[str, float]]) -> None:
    names = [name for name, _ in shares]
    if not shares:
        raise EncoderizeError("--schedule is empty; give phases with shares, e.g. clm:0.25,mlm:0.75")
    if len(set(names)) != len(names) or names != sorted(names, key=PHASE_NAMES.index):
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


class Masker:
    """Rows -> `(inputs, labels)` under the current phase's target: the one place where a batch's labels are made.

    Padding and the tokenizer's special tokens (EOS, mask, pad, ...) are never masked. Every row is masked with its
    own generator, seeded by `targets.row_seed(seed, lane, row)` from the row's key `(lane, row)`: the masker holds
    no state but which target the run is learning now (`target`, set by the engine as a phase begins).

    >>> from hf_encoderize.objectives.targets import MaskedTokens
    >>> masker = Masker(MaskedTokens(MaskingConfig(mask_ratio=0.5)), mask_token_id=1, vocab_size=10, special_ids=[2],
    ...                 seed=0)
    >>> inputs, labels = masker(torch.tensor([[5, 6, 7, 8, 2, 0]]), torch.tensor([[0, 0, 0, 0, 0, -1]]), [(0, 0)])
    >>> inputs.tolist(), labels.tolist()
    ([[5, 1, 7, 8, 2, 0]], [[-100, 6, -100, -100, -100, -100]])
    """

    def __init__(self, target: Target, *, mask_token_id: int, vocab_size: int, special_ids, seed: int):
        self.target = target
        self.tokens = MaskTokens.of(mask_token_id=mask_token_id, vocab_size=vocab_size, special_ids=special_ids,
                                    seed=seed)

    @classmethod
    def for_tokenizer(cls, tokenizer, target: Target, vocab_size: int, seed: int) -> Masker:
        return cls(target, mask_token_id=tokenizer.mask_token_id, vocab_size=vocab_size,
                   special_ids=tokenizer.all_special_ids, seed=seed)

    def __call__(self, input_ids: torch.Tensor, document_ids: torch.Tensor,
                 keys: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Label rows (B, T); `keys[i]` = (lane, row number) of row i names its masking seed."""
        return self.target.labels(input_ids, document_ids, keys, self.tokens)
