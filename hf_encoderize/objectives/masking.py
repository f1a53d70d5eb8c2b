"""MLM and MNTP masking, and the sparse, chunked MLM loss.

Design choices (paper: "Should We Still Pretrain Encoders with MLM?", section 2):
- every maskable token is masked independently with probability `mask_ratio`, default 0.4 (the paper's choice for
  its CLM->MLM experiments, section 3);
- masked tokens are replaced by the mask placeholder (`replacement="mask"`, as the paper's equation 2 describes);
  BERT's 80/10/10 (`replacement="bert"`) is opt-in;
- padding and special tokens are never masked; labels are -100 everywhere else;
- MNTP (LLM2Vec): the token at i is predicted from position i-1, so labels shift left by one.

`sparse_mlm_loss` is kept for callers that hold device labels; it is a thin wrapper over `loss.mlm_loss`, which runs
the LM head only on labelled positions, in chunks, so a 128k vocabulary never materialises logits for the whole batch.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Literal

import torch

from hf_encoderize.common.arguments import formerly
from hf_encoderize.common.validation import check_choice, check_number
from hf_encoderize.objectives.loss import IGNORE, mlm_loss


@dataclass
class MaskingConfig:
    """How tokens are masked for MLM continued pretraining."""

    _: KW_ONLY
    mask_ratio: float = 0.4
    """Probability of masking each maskable token.

    0.4 follows the paper (section 3)."""
    replacement: Literal["mask", "bert"] = "mask"
    """`mask`: every masked token becomes the mask token; `bert`: 80% mask, 10% random, 10% kept.

    `mask` is the paper's (section 2)."""
    masking_target: str = field(default="mlm", metadata=formerly("objective"))  # earlier versions' word
    """What masked positions learn to predict: `mlm` (the token at its own position), `mntp` (from the position
    before it, LLM2Vec), or any target registered with `objectives.targets.register_target`."""

    def __post_init__(self):
        check_number("--mlm-probability", self.mask_ratio, above=0, below=1)
        check_choice("--replacement", self.replacement, MaskingConfig, "replacement")  # the Literal's values
        # The target's name is checked where it is built (`targets.build_target`): targets register themselves.


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    config: MaskingConfig,
    generator: torch.Generator | None = None,
    shift: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return `(masked_input_ids, labels)` for a batch (B, T).

    `maskable` (B, T) bool is False for padding and special tokens; they are never masked. `shift`: positions the
    labels move left (0: a masked token is predicted at its own position, MLM; 1: from the one before, MNTP).

    >>> ids = torch.tensor([[5, 6, 7, 8]])
    >>> masked, labels = mask_tokens(ids, torch.tensor([[False, True, True, True]]), mask_token_id=1,
    ...                              vocab_size=10, config=MaskingConfig(mask_ratio=0.5),
    ...                              generator=torch.Generator().manual_seed(0))
    >>> masked.tolist(), labels.tolist()
    ([[5, 6, 1, 1]], [[-100, -100, 7, 8]])
    """
    chosen = torch.rand(input_ids.shape, generator=generator, device="cpu").to(input_ids.device) < config.mask_ratio
    chosen &= maskable
    masked = input_ids.clone()
    if config.replacement == "mask":
        masked[chosen] = mask_token_id
    else:
        draw = torch.rand(input_ids.shape, generator=generator, device="cpu").to(input_ids.device)
        random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device="cpu").to(input_ids.device)
        masked[chosen & (draw < 0.8)] = mask_token_id
        swap = chosen & (draw >= 0.8) & (draw < 0.9)
        masked[swap] = random_ids[swap]
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    if shift:
        # MNTP: position i-1 predicts the token at i: shift labels left; the last position predicts nothing.
        labels = torch.cat([labels[:, shift:], torch.full_like(labels[:, :shift], IGNORE)], dim=1)
    return masked, labels


def sparse_mlm_loss(
    hidden: torch.Tensor, lm_head: torch.nn.Module, labels: torch.Tensor, chunk_size: int | None = None,
    return_correct: bool = False, reduction: str = "mean",
):
    """Cross-entropy over the positions of `labels` (B, T) that are not -100, from `hidden` (B, T, H) through
    `lm_head`: `loss.mlm_loss` with the positions found from `labels` wherever they are.

    `reduction="mean"` averages over this batch's labelled positions; `"sum"` returns the sum. With `return_correct`,
    also returns how many labelled positions the arg-max predicts right (a 0-d tensor). `chunk_size` rows per chunk;
    None picks `loss.mlm_loss`'s default. Labels on an accelerator cost a host sync here (counting the selected
    positions): the training engine calls `loss.labelled_positions` on host labels instead.
    """
    flat = labels.reshape(-1)
    index = (flat != IGNORE).nonzero().squeeze(1)  # (N,)
    loss, correct = mlm_loss(hidden, lm_head, index, flat.index_select(0, index), with_accuracy=return_correct,
                             chunk_rows=chunk_size)
    if reduction == "mean":
        loss = loss / max(1, index.numel())
    return (loss, correct) if return_correct else loss
