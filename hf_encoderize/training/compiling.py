"""`--compile`: torch.compile each decoder layer of the model being trained.

Design choices:
- Per layer, not the whole model: every decoder layer has the same code and, with packing, the same static shapes
  (fixed batch x seq len), so one compiled graph serves all of them and compiles in seconds; a whole-model graph
  would take minutes and break at the first data-dependent op. One graph needs `use_cache=False` in the forward (the
  engine passes it; tested: two layers, one graph): a KV cache makes each layer guard on its own `layer_idx` and
  compile a graph of its own.
- The masks (sdpa's block-diagonal bool mask, flex's `BlockMask`), the position ids and flash's `cu_seqlens` are built
  in the base model's forward and by the engine on the host, outside the compiled regions, and passed in as inputs.
- `dynamic=False`: shapes never change during a packed run; evaluation batches of another size recompile once.
  Except under flash attention, whose packed inputs reach every layer through its kwargs and change every batch:
  `cu_seq_lens_q/k` hold one entry per document and `max_length_q/k` is the longest document (a Python int).
  Static compilation would recompile for each new count or length and, past dynamo's recompile limit (8), run the
  layers eagerly without a word; `dynamic=None` lets dynamo make exactly those inputs dynamic at their first change
  (two compilations in all, `tests/test_compile.py`).
- Compiled before `accelerator.prepare`, in place (`nn.Module.compile`), so DDP/FSDP wrap the compiled layers (the
  order torchtitan uses for FSDP2: compile each block, then shard) and the state dict keeps its names (no `_orig_mod.`
  prefix in checkpoints or the saved encoder). Under DDP, compiling before or after `prepare` gave the same losses and
  the same weights on every rank as no compile (2 gloo processes, 3 steps); before is what the engine does.
- Off by default: compilation costs time up front and its speed-up depends on the GPU; measure with
  `benchmarks/cpt_throughput.py` before turning it on for a long run.
"""

from __future__ import annotations

import torch


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers: modules whose class is one the model never splits (`_no_split_modules`), else the
    largest `ModuleList` of the model."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def compile_decoder_layers(model: torch.nn.Module, **options) -> int:
    """`torch.compile` every decoder layer of `model` in place (static shapes but for flash's varlen inputs); returns
    how many were compiled.
    `options` go to `torch.compile` (the tests pass `backend="aot_eager"`)."""
    layers = decoder_layers(model)
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    options.setdefault("dynamic", None if backend.startswith("flash_attention") else False)
    for layer in layers:
        layer.compile(**options)
    return len(layers)
