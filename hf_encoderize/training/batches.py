"""One optimizer step's rows, made ready on the host before the device needs them.

Design choices:
- `my_lanes`: the row slots (lanes, `packing.LaneStream`) of the global batch that one process trains on, so each
  process tokenizes, packs and masks only its own rows.
- `prepare_step` runs in the prefetching thread (`prefetch.Prefetcher`): masking, the labelled positions
  (`loss.labelled_positions`) and the packed-attention inputs (`isolation.packed_inputs`) are all computed on the host,
  and pinned on a GPU, so `to_device` copies them without blocking and no device op waits for the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_encoderize.model.isolation import packed_inputs
from hf_encoderize.objectives.loss import labelled_positions
from hf_encoderize.objectives.masking import IGNORE
from hf_encoderize.objectives.phases import Masker


def my_lanes(batch_size: int, grad_accum: int, processes: int, process: int) -> list[int]:
    """The lanes (row slots of the global batch) this process trains on, micro-batch by micro-batch: micro-batch m
    of process p holds slots (m x processes + p) x batch_size ... + batch_size - 1.

    >>> my_lanes(batch_size=2, grad_accum=2, processes=2, process=1)
    [2, 3, 6, 7]
    """
    return [(m * processes + process) * batch_size + r for m in range(grad_accum) for r in range(batch_size)]


@dataclass
class StepBatch:
    """One optimizer step's rows for this process, ready on the host (pinned on a GPU): made by `prepare_step`."""

    raw: tuple
    """(input_ids, document_ids, keys) before masking: re-masked if the target changed since (pretrain)."""
    target: str
    """The name of the target it was labelled for (`objectives.targets`)."""
    micro: list[dict]
    """Per micro-batch: `input_ids` (masked), `document_ids`, `labels`, `index`/`targets` of the labelled positions
    and `packed` (positions, varlen boundaries: `isolation.packed_inputs`)."""
    counts: torch.Tensor
    """(2,) float: labelled and real tokens of these rows; all-reduced on the device for the global batch."""


def prepare_step(input_ids, document_ids, keys, masker: Masker, micro: int, backend: str,
                 pin: bool) -> StepBatch:
    """Mask this process's rows and cut them into `micro` micro-batches with everything the forward needs computed
    on the host: no device op has to wait for the host (or the host for the device) during the step."""
    inputs, labels = masker(input_ids, document_ids, keys)
    rows = len(keys) // micro
    parts = []
    for m in range(micro):
        mine = slice(m * rows, (m + 1) * rows)
        index, targets = labelled_positions(labels[mine])
        part = {"input_ids": inputs[mine], "document_ids": document_ids[mine], "labels": labels[mine],
                "index": index, "targets": targets, "packed": packed_inputs(document_ids[mine], backend)}
        parts.append(_pinned(part) if pin else part)
    counts = torch.tensor([float((labels != IGNORE).sum()), float((document_ids >= 0).sum())], device="cpu")
    return StepBatch((input_ids, document_ids, keys), masker.target.name, parts, _pinned(counts) if pin else counts)


def _pinned(value):
    if torch.is_tensor(value):
        return value.pin_memory()
    if isinstance(value, dict):
        return {key: _pinned(item) for key, item in value.items()}
    return value


def to_device(value, device):
    """Copy a (nested dict of) host tensors to `device` without blocking the host (pinned sources copy async)."""
    if torch.is_tensor(value):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    return value
