"""Which attention backend a model loads with: `--attn-implementation auto` tries them fastest first and says why each
one it leaves out is left out.

Design choices:
- A backend is skipped, with its reason, when this machine cannot run it (`machine_skips`), when the model class does
  not declare it (`_supports_flash_attn`, `_supports_flex_attn`, `_supports_sdpa`, checked before any weight is read),
  or for flash attention on a hybrid (its varlen path flattens the batch into one row, along which state-space layers
  would carry state). `loading.load_decoder_trying` then skips one whose load fails with a backend error.
- An explicit backend is taken as asked; one the architecture lacks is a one-line error naming what `auto` picks.
"""

from __future__ import annotations

import re
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model.kinds import HYBRID, classify_config

# What `--attn-implementation` takes: auto, or one of transformers' backends that can be made bidirectional.
AttentionBackend = Literal["auto", "eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3"]

# Fastest first. flash-attn's varlen kernel runs packed documents as segments (`cu_seqlens`, no mask at all);
# flex_attention's document BlockMask skips the cross-document tiles of packed rows and keeps GQA unexpanded; sdpa with
# a packed row gets a dense block-diagonal mask (no flash kernel, K/V expanded); eager materialises the scores.
#
# CPU: sdpa, then eager. flex_attention cannot train on CPU (torch 2.13: "FlexAttention does not support backward on
# CPU"; `tests/test_attention_auto.py` notices when that changes) and its forward is 1.4x slower than sdpa. Measured
# with `python tests/test_attention_auto.py` (torch 2.13, 2-core CPU, otherwise idle; tiny Llama hidden 256, 4 layers,
# 8 rows x 512 tokens each packed with documents of 250 + 262 tokens, `packed_forward` with `packed_inputs`, mean of
# 10 steps after 3 warm-up, two runs):
#   forward+backward: sdpa 0.59-0.60 s, eager 1.08-1.10 s, flex_attention unsupported;
#   forward: sdpa 0.21 s, eager 0.28-0.34 s, flex_attention 0.28 s.
_BACKEND_ORDER = ("flash_attention_2", "flex_attention", "sdpa", "eager")
_SUPPORT_FLAGS = {"flash_attention_2": "_supports_flash_attn", "flash_attention_3": "_supports_flash_attn",
                  "flex_attention": "_supports_flex_attn", "sdpa": "_supports_sdpa"}
# What transformers raises when a model class lacks a backend or the backend cannot run here, e.g. "GPTJForCausalLM
# does not support an attention implementation through torch.nn.functional.scaled_dot_product_attention yet".
_BACKEND_ERROR = re.compile(r"attention implementation|attn_implementation|flash.?attention|flash_attn|flex.?attention|"
                            r"scaled_dot_product_attention", re.IGNORECASE)


def machine_skips(dtype=None) -> dict[str, str]:
    """Why `auto` leaves a backend out on this machine, by backend (those absent can run here). `dtype`: the dtype
    attention computes in, when known."""
    import torch

    if not torch.cuda.is_available():
        return {"flash_attention_2": "needs a CUDA or ROCm GPU",
                "flex_attention": "on CPU: no backward pass, and a slower forward than sdpa"}
    problem = _flash_attention_2_problem(dtype)
    return {"flash_attention_2": problem} if problem else {}


def _flash_attention_2_problem(dtype) -> str | None:
    import torch

    try:
        import flash_attn  # noqa: F401  (imported, not just found: a build for another torch fails here)
    except Exception as err:  # ImportError, or OSError for an undefined symbol
        return f"flash_attn does not import ({type(err).__name__}; pip install flash-attn)"
    if torch.version.hip is None and torch.cuda.get_device_capability() < (8, 0):
        return f"needs an Ampere or newer GPU (this one is sm{''.join(map(str, torch.cuda.get_device_capability()))})"
    if dtype is not None and dtype not in (torch.bfloat16, torch.float16):
        return f"runs in bf16/fp16 only, and attention would run in {str(dtype).removeprefix('torch.')}"
    return None


def backend_candidates(dtype=None) -> list[str]:
    """The backends `auto` tries on this machine, fastest first."""
    skips = machine_skips(dtype)
    return [backend for backend in _BACKEND_ORDER if backend not in skips]


def backend_plan(config, requested: str, trust_remote_code: bool = False, dtype=None) -> list[tuple[str, str | None]]:
    """The backends to try in order, each with why it is skipped (None: try it). An explicit backend is the only one;
    one the architecture's class does not support raises a one-line `EncoderizeError`. Checked on the class, before
    any weight is read."""
    unsupported = {**_class_skips(config, trust_remote_code), **_hybrid_skips(config)}
    if requested != "auto":
        if requested in _hybrid_skips(config):
            picks = next(b for b, why in backend_plan(config, "auto", trust_remote_code, dtype) if why is None)
            raise EncoderizeError(f"--attn-implementation {requested} cannot train {config.model_type}: "
                                  f"{_hybrid_skips(config)[requested]}; use --attn-implementation auto (picks {picks})")
        if requested in unsupported:
            picks = next(b for b, why in backend_plan(config, "auto", trust_remote_code, dtype) if why is None)
            model_class = _causal_lm_class(config, trust_remote_code).__name__
            raise EncoderizeError(f"{config.model_type} ({model_class}) does not support "
                                  f"--attn-implementation {requested}; use --attn-implementation auto (picks {picks}) "
                                  "or eager")
        return [(requested, None)]
    skips = {**machine_skips(dtype), **unsupported}  # the class's reason first: it holds on every machine
    return [(backend, skips.get(backend)) for backend in _BACKEND_ORDER]


def choose_backend(config, requested: str, trust_remote_code: bool = False, dtype=None) -> str | None:
    """`requested`, checked against what the architecture supports; for `auto`, the fastest candidate it supports
    (None for remote code: transformers then takes sdpa if the class supports it, else eager). `dtype`: the dtype
    attention computes in, when known (flash attention takes bf16/fp16 only)."""
    if requested == "auto" and _causal_lm_class(config, trust_remote_code) is None:
        return None
    return next(backend for backend, why in backend_plan(config, requested, trust_remote_code, dtype) if why is None)


def _class_skips(config, trust_remote_code: bool) -> dict[str, str]:
    """Backends the model class does not declare support for (none known for remote code or an unmapped config)."""
    model_class = _causal_lm_class(config, trust_remote_code)
    if model_class is None:
        return {}
    return {backend: f"{model_class.__name__} does not support it" for backend, flag in _SUPPORT_FLAGS.items()
            if not getattr(model_class, flag, False)}


def _hybrid_skips(config) -> dict[str, str]:
    """Flash attention for a hybrid: its varlen kernel gets the batch flattened into one row
    (`isolation.packed_forward`), and state-space layers would carry state along it, from one row's document into the
    next row's, packed or padded."""
    if classify_config(config) != HYBRID:
        return {}
    why = "the batch is flattened into one row for it, and the state-space layers would carry state along it"
    return {backend: why for backend in ("flash_attention_2", "flash_attention_3")}


def _causal_lm_class(config, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM

    if trust_remote_code and getattr(config, "auto_map", None):
        return None
    return (AutoModelForCausalLM._model_mapping.get(type(config), None) if type(config) in
        AutoModelForCausalLM._model_mapping else None)


def backend_error(err: Exception) -> str | None:
    """The first sentence of a load error that is about the attention backend, else None."""
    text = " ".join(str(err).split())
    return text.split(". ")[0].rstrip(".") if _BACKEND_ERROR.search(text) else None


def check_backend_available(attn_implementation: str) -> None:
    """Refuse flash attention up front when there is no GPU or no flash-attn package, before any download."""
    if not attn_implementation.startswith("flash_attention"):
        return
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        raise EncoderizeError(f"{attn_implementation} needs a CUDA or ROCm GPU; use --attn-implementation sdpa on CPU")
    package = "flash_attn_interface" if attn_implementation == "flash_attention_3" else "flash_attn"
    if importlib.util.find_spec(package) is None:
        raise EncoderizeError(
            f"{attn_implementation} needs the {package} package: pip install flash-attn, or use sdpa"
        )
