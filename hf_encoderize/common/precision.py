"""Precision: the one place that says which dtype a run computes in.

Accelerate's `mixed_precision` ("no", "bf16", "fp16") decides autocast; a linear layer under autocast computes in
autocast's dtype, not its weights'. The probe's tolerance, the loss kernels and the attention backend choice all ask
these two functions rather than reading the accelerator or the autocast state themselves.
"""

from __future__ import annotations

import torch

from hf_encoderize.common.errors import EncoderizeError


def resolve_mixed_precision(choice: str) -> str:
    """A `--mixed-precision` choice as it runs: `auto` is bf16 on a GPU that has it, else no; others as given."""
    if choice != "auto":
        return choice
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def check_bf16(choice: str, flag: str = "--mixed-precision") -> None:
    """Refuse bf16 on a GPU without it (a T4, a V100) in one line, before transformers or Accelerate refuses it with a
    traceback. A CPU runs bf16 autocast anywhere (slowly without bf16 instructions)."""
    if choice == "bf16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise EncoderizeError(f"{flag} bf16: this GPU ({torch.cuda.get_device_name()}) has no bf16; pass {flag} "
                              "auto (fp32 here) or fp16 where the command offers it")


def fp16_device() -> bool:
    """Whether this machine has a device Accelerate runs fp16 autocast on (CUDA, MPS, XPU). On a CPU it does not:
    `Accelerator(mixed_precision="fp16")` keeps its `mixed_precision` "fp16" but turns no autocast on (fp32 compute)."""
    xpu = getattr(torch, "xpu", None)
    return (torch.cuda.is_available() or torch.backends.mps.is_available()
            or bool(xpu is not None and xpu.is_available()))


def check_fp16(choice: str, flag: str = "--mixed-precision") -> None:
    """Refuse fp16 where it would not run: on a CPU, Accelerate trains in plain fp32 while the record and the card would
    say fp16 (issue 68 saw losses bit-identical to --mixed-precision no). One line, as `contrastive` refuses it."""
    if choice == "fp16" and not fp16_device():
        raise EncoderizeError(f"{flag} fp16 runs on a GPU only (on a CPU nothing would autocast: it would train in "
                              f"fp32 and record fp16); pass {flag} bf16 or no here")


def autocast_dtype(accelerator) -> torch.dtype | None:
    """The dtype an Accelerate run autocasts to (bf16, fp16), None without mixed precision (or without accelerator)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(getattr(accelerator, "mixed_precision", "no")))


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype a linear layer on `tensor` would compute in: autocast's when it is on for the device."""
    device_type = tensor.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return tensor.dtype


def attention_dtype(accelerator, master_weights: str, frozen_base: bool = False) -> torch.dtype | None:
    """The dtype attention will compute in, for `auto`'s choice of backend (flash attention takes bf16/fp16 only): the
    autocast dtype under mixed precision; without autocast, fp32 when the trainable weights are kept in fp32
    (`--master-weights fp32`, `build_run` upcasts them), unless what runs is a frozen base (LoRA); else None, the
    loaded weights' dtype. `master_weights`: `TrainConfig.master_weights`."""
    autocast = autocast_dtype(accelerator)
    if autocast is not None:
        return autocast
    return torch.float32 if master_weights == "fp32" and not frozen_base else None
