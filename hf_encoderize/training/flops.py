"""Model FLOPs of MLM training and model FLOPs utilisation (MFU), counted the same way for every trainer.

Design choices:
- MFU counts *useful model work* (PaLM, Chowdhery et al. 2022, appendix B): the FLOPs the target needs, whatever the
  implementation executes, over the device's dense peak. Recomputation (gradient checkpointing), padding and work the
  target throws away earn no credit, so one definition ranks every trainer fairly.
- Per trained (real, non-pad) token, the decoder layers cost 6 x their matmul parameters (2 forward, 4 backward).
  Embedding lookups are not matmuls and are left out; norms, activations, rotary and biases are too (under 1%).
- The LM head is `hidden x vocab` (tied to the embeddings or not, it is a matmul) and counts 6 x that per *masked*
  token only: the MLM loss needs logits at the masked positions and nowhere else. A trainer that computes dense logits
  over every position does that extra work for nothing; it gets no credit for it in `total` (the executed figure is
  reported apart as `head_executed`, from `head_tokens`).
- Attention scores (QK^T) and the weighted sum (AV) cost 2 x 2 x heads x head_dim x L^2 per layer forward for a span
  of L tokens that see each other (bidirectional, so all L^2 pairs), x3 with the backward. The spans are what the
  trainer's attention covers: each document piece with document isolation, the whole row for grouped blocks without
  it (`run_mlm.py`), each real (unpadded) document for one-document-per-row padding. Sliding-window layers are counted
  as full attention (the benchmarks' spans are shorter than the windows).
- Mixture-of-experts and hybrid attention/SSM configs are out of scope: `matmul_params` returns None for them rather
  than a wrong number, and so does everything built on it.
- Peaks are dense (no 2:4 sparsity) bf16/fp16 tensor-core figures from the vendors' datasheets, matched on the exact
  name torch reports (`torch.cuda.get_device_name`). A name that is not in the table, or a MIG slice, gets None: MFU
  is then unknown, never guessed from a similar name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import SimpleNamespace

# Config fields that mark a mixture-of-experts model: its active parameters per token are not the dense count.
_MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention", "chunked_attention"}
# Families whose MLP is up -> activation -> down (two matrices) rather than gated (gate, up, down).
_UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "phi", "falcon", "opt", "bloom", "starcoder2", "codegen"}

# Dense bf16 (= fp16) tensor TFLOPS per device as torch sees it. Patterns match the whole lower-cased name.
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    # H100: SXM5 989.4 (132 SMs x 1.83 GHz x 4096 flop/clk; datasheet 1,979 with sparsity); PCIe 1,513 and NVL 1,671
    # with sparsity, halved. SXM5 boards report their memory ("NVIDIA H100 80GB HBM3"); a bare "NVIDIA H100" says
    # no form factor, so it gets None.
    (r"nvidia h100 pcie", 756.5),
    (r"nvidia h100 nvl", 835.5),
    (r"nvidia h100( sxm5?)? \d+gb( hbm3e?)?", 989.4),
    # H200 SXM has the H100 SXM5's compute (datasheet 1,979 sparse); H200 NVL 1,671 sparse, halved.
    (r"nvidia h200 nvl", 835.5),
    (r"nvidia h200( sxm)?( \d+gb)?( hbm3e)?", 989.4),
    (r"nvidia gh200( \d+gb?)?( hbm3e?)?", 989.4),  # Grace Hopper: the H100 SXM5 compute, 1,979 sparse
    (r"nvidia a100[- ].*|nvidia a100", 312.0),  # SXM4 and PCIe, 40 and 80 GB: 624 sparse, halved
    (r"nvidia l40s", 362.05),  # datasheet: 362.05 dense, 733 sparse
    (r"nvidia l40", 181.05),  # datasheet: 181.05 dense, 362.1 sparse
    (r"nvidia l4", 121.0),  # datasheet: 242 sparse, halved
    (r"nvidia a10", 125.0),  # datasheet: 125 dense, 250 sparse
    # A10G (AWS): no vendor datasheet; ~70 is 80 SMs x 1.71 GHz x 512 flop/clk (fp32 accumulate at half rate, GA102).
    (r"nvidia a10g", 70.0),
    (r"amd instinct mi300x( vf)?", 1307.4),  # datasheet: 1,307.4 dense
    # MI250X: the OAM module's 383 TFLOPS spans two GCDs, and torch (ROCm) shows each GCD as its own device, so the
    # peak of one torch device is half of it. The shared "MI250X / MI250" name cannot tell 191.5 from 181.0: None.
    (r"amd instinct mi250x", 191.5),
    (r"amd instinct mi250", 181.0),  # 362.1 per module, two GCDs
    (r"amd instinct mi210", 181.0),  # one GCD
]
_HALF_PRECISION = {"bf16", "bfloat16", "fp16", "float16"}


def _as_config(config):
    """A transformers config, or a plain dict of its fields (config.json), with the text sub-config unwrapped."""
    if isinstance(config, dict):
        config = SimpleNamespace(**config)
    return getattr(config, "text_config", None) or config


def matmul_params(config) -> dict | None:
    """Matmul parameters of a dense Llama/Qwen2/Mistral-shaped decoder: all decoder layers (`layers`) and the LM head
    (`head`), plus the attention shape the attention FLOPs need. None for MoE or hybrid configs (out of scope) or when
    a required size is missing.

    >>> p = matmul_params({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    ...                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000})
    >>> p["layers"], p["head"], p["query_width"]
    (73728, 64000, 64)
    >>> matmul_params({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
    ...                "num_local_experts": 8}) is None
    True
    """
    config = _as_config(config)
    hidden, layers = getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None)
    heads, vocab = getattr(config, "num_attention_heads", None), getattr(config, "vocab_size", None)
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads, vocab)) or _out_of_scope(config):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    inter = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    query, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * query + 2 * hidden * kv + query * hidden  # q, k, v, o projections
    mlp = (2 if getattr(config, "model_type", None) in _UNGATED_MLP else 3) * hidden * inter  # (gate,) up, down
    return {"layers": layers * (attention + mlp), "head": hidden * vocab, "num_layers": layers,
            "query_width": query}


def _out_of_scope(config) -> bool:
    if any(getattr(config, name, None) for name in _MOE_FIELDS):
        return True
    layer_types = getattr(config, "layer_types", None) or []
    return any(str(kind) not in _ATTENTION_LAYER_TYPES for kind in layer_types)


def training_flops(config, *, tokens: int, masked_tokens: int, document_lengths: Iterable[int],
                   head_tokens: int | None = None) -> dict | None:
    """Model FLOPs of training (forward + backward) on `tokens` real tokens, of which `masked_tokens` carry the MLM
    loss, with attention over spans of `document_lengths` tokens (see the module docstring for what a span is).

    `total` = layers + head + attention, where
        layers    = 6 x layer matmul params x tokens
        head      = 6 x hidden x vocab x masked_tokens
        attention = 3 x num_layers x 2 x 2 x heads x head_dim x sum(L^2 for L in document_lengths)
    `head_executed` counts the head on `head_tokens` rows instead (what a dense-logits trainer runs: every position);
    it is reported, not credited. None for configs `matmul_params` does not cover.

    >>> config = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...           "num_key_value_heads": 2, "vocab_size": 1000}
    >>> f = training_flops(config, tokens=8, masked_tokens=3, document_lengths=[3, 5])
    >>> f["layers"], f["head"], f["attention"], f["total"]
    (3538944, 1152000, 52224, 4743168)
    """
    params = matmul_params(config)
    if params is None:
        return None
    squares = sum(int(length) ** 2 for length in document_lengths)
    layers = 6 * params["layers"] * tokens
    head = 6 * params["head"] * masked_tokens
    attention = 3 * params["num_layers"] * 2 * 2 * params["query_width"] * squares
    executed = 6 * params["head"] * (masked_tokens if head_tokens is None else head_tokens)
    return {"layers": layers, "head": head, "attention": attention, "total": layers + head + attention,
            "head_executed": executed, "tokens": tokens, "masked_tokens": masked_tokens,
            "attention_sum_sq": squares}


def peak_tflops(device_name: str, dtype: str = "bf16") -> float | None:
    """Dense peak tensor TFLOPS of the device torch names `device_name`, for bf16/fp16; None when unknown.

    >>> peak_tflops("NVIDIA H100 80GB HBM3"), peak_tflops("NVIDIA H100 PCIe"), peak_tflops("NVIDIA H200 NVL")
    (989.4, 756.5, 835.5)
    >>> peak_tflops("NVIDIA A100-SXM4-80GB"), peak_tflops("NVIDIA L4"), peak_tflops("AMD Instinct MI300X")
    (312.0, 121.0, 1307.4)
    >>> peak_tflops("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), peak_tflops("cpu"), peak_tflops("NVIDIA H100", "fp32")
    (None, None, None)
    """
    name = " ".join(str(device_name).lower().split())
    if dtype.lower() not in _HALF_PRECISION or "mig" in name.split():
        return None  # no table for other dtypes; a MIG slice has a fraction of the SMs
    return next((peak for pattern, peak in PEAK_BF16_TFLOPS if re.fullmatch(pattern, name)), None)


def mfu(flops_per_s: float, device_name: str, dtype: str = "bf16") -> float | None:
    """Model FLOPs per second over the device's dense peak; None when the peak is unknown.

    >>> round(mfu(494.7e12, "NVIDIA H100 80GB HBM3"), 3), mfu(1e12, "cpu")
    (0.5, None)
    """
    peak = peak_tflops(device_name, dtype)
    return flops_per_s / (peak * 1e12) if peak else None
