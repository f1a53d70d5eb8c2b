"""A masking target defined outside hf_encoderize (issue 70): span masking, contiguous runs of tokens masked together
(as SpanBERT masks spans, here of one fixed length). Importing this module registers it; nothing in the package names
it. `--masking-target span` then trains it, and the run record, the metrics and the model card say so."""

import torch

from hf_encoderize.objectives.loss import IGNORE
from hf_encoderize.objectives.targets import MaskedTarget, register_target
from hf_encoderize.records.learnt import Learnt

SPAN = 3  # tokens per span


@register_target
class SpanTarget(MaskedTarget):
    """Each maskable token starts a span with probability mask_ratio / SPAN; the span's maskable tokens become the
    mask token and are predicted at their own positions."""

    learnt = Learnt(name="span", kind="masking_target", card_label=f"span masking ({SPAN}-token spans)",
                    phrase=f"span masking (contiguous runs of {SPAN} tokens masked together)",
                    metric="eval_masked_accuracy")

    def mask_row(self, input_ids, maskable, tokens, generator):
        starts = torch.rand(input_ids.shape, generator=generator) < self.masking.mask_ratio / SPAN  # (1, T)
        chosen = torch.zeros_like(starts)
        for offset in range(SPAN):  # a start at i masks i .. i + SPAN - 1
            chosen[:, offset:] |= starts[:, : starts.shape[1] - offset]
        chosen &= maskable
        masked = torch.where(chosen, torch.full_like(input_ids, tokens.mask_token_id), input_ids)
        return masked, torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
