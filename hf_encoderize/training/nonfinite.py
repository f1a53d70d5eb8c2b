"""Non-finite losses and weights: stop (or skip and count) NaN/inf steps, and never save a broken model.

Design choices:
- `--on-nonfinite stop` (default) ends the run in one line naming the last good checkpoint; `skip` drops the update
  and stops after 10 in a row or when more than 5% of the steps were skipped: a run that keeps producing NaN is broken.
- The engine reads its metrics once per `--logging-steps` steps and always before an evaluation or a checkpoint, so the
  guard sees every step before any checkpoint is written after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.training.checkpoints import list_checkpoints

MAX_NONFINITE_IN_A_ROW = 10  # with --on-nonfinite skip: a run that only produces NaN is broken, not unlucky
MAX_SKIPPED_SHARE = 0.05  # ... and so is one that skips more than 5% of its steps (checked from step 20 on)


@dataclass
class NonFiniteGuard:
    """Stop with a one-line error on a non-finite loss (`--on-nonfinite stop`), or count skipped updates and stop when
    10 come in a row or they exceed 5% of the steps taken (`skip`): a run that keeps producing NaN is broken."""

    on_nonfinite: str
    """`stop` or `skip` (`TrainConfig.on_nonfinite`)."""
    output_dir: Path
    in_a_row: int = 0
    skipped: int = 0
    steps: int = 0

    def check_all(self, records: list[dict]) -> None:
        for record in records:
            self.check(record, record["step"])

    def check(self, record: dict, step: int) -> None:
        self.steps += 1
        if not record.get("skipped_nonfinite"):
            self.in_a_row = 0
            return
        self.in_a_row, self.skipped = self.in_a_row + 1, self.skipped + 1
        last = list_checkpoints(self.output_dir)
        where = f"the last good checkpoint is {str(last[-1])!r} (resume with --resume)" if last else "no checkpoint yet"
        if self.on_nonfinite == "stop":
            raise EncoderizeError(f"non-finite loss or gradient at step {step}; {where}; lower --learning-rate, use "
                                  "--mixed-precision bf16 rather than fp16, or pass --on-nonfinite skip")
        if self.in_a_row >= MAX_NONFINITE_IN_A_ROW:
            raise EncoderizeError(f"{MAX_NONFINITE_IN_A_ROW} non-finite steps in a row up to step {step}; {where}; "
                                  "lower --learning-rate or check the data")
        if self.steps >= 20 and self.skipped > MAX_SKIPPED_SHARE * self.steps:
            raise EncoderizeError(f"{self.skipped} of {self.steps} steps were non-finite and skipped (more than "
                                  f"{MAX_SKIPPED_SHARE:.0%}) up to step {step}; {where}; lower --learning-rate or "
                                  f"check the data")


def plain_norm(grad_norm):
    """The gradient norm as `clip_grad_norm_` gave it, except a DTensor: under FSDP2 it returns a replicated DTensor,
    and the step's `accelerator.reduce` of it fails ("c10d.allreduce_.default does not have a sharding strategy",
    seen on an H200 with torch 2.11); its full value is the same global norm on every process. Anything else is left
    where it is (no copy: a default-device context must not move it)."""
    full = getattr(grad_norm, "full_tensor", None)
    return full() if callable(full) else grad_norm


def check_finite_result(model, state_dict: dict | None, final_eval: dict) -> None:
    """Never save or report success for a model whose weights or final held-out loss are not finite."""
    tensors = state_dict.values() if state_dict is not None else (p.detach() for p in model.parameters())
    bad = sum(1 for t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all()))
    loss = final_eval.get("eval_loss")
    if bad or (loss is not None and not math.isfinite(loss)):
        what = f"{bad} weight tensors hold NaN/inf" if bad else f"the final held-out loss is {loss}"
        raise EncoderizeError(f"training ended with a broken model ({what}); nothing was saved as the encoder; "
                              "resume from an earlier checkpoint with a lower --learning-rate, or use --on-nonfinite "
                              "stop to find "
                              "the step")
