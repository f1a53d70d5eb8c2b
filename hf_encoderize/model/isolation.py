"""Attention isolation of packed documents: every document packed into one row sees only itself.

With bidirectional attention, transformers' sdpa/eager/flex mask builders do not isolate documents packed into one
row (the `config.is_causal=False` path ignores `position_ids`), so this module does it, in one place:

- `document_ids` (B, T) names the document of every token; -1 marks padding. Positions restart at 0 in every
  document (`position_ids_from_document_ids`).
- eager / sdpa / flex: the model still builds its own masks (full, symmetric sliding window, chunked) through
  `transformers.masking_utils`, which dispatches to `ALL_MASK_ATTENTION_FUNCTIONS[backend]`. We wrap those entries once;
  inside `isolate_documents(...)` the wrapper ANDs the model's own mask function (re-indexed to document-local
  positions) with a block-diagonal document mask. The result is a 4-D block-diagonal mask for sdpa (bool) and eager
  (additive float), and a `BlockMask` for flex. Outside the context the wrapper is a pass-through.
  Reusing the model's own mask function keeps its exact window convention (`<` for Gemma 3, `<=` elsewhere).
  flex's `BlockMask` is block-sparse: a 128 x 128 tile whose queries and keys lie in different documents is never
  computed (two 128-token documents in a 256-token row: 2 of 4 tiles, tested).
- flash_attention_2/3: no mask at all; `packed_forward_kwargs` returns `cu_seq_lens_q/k` and `max_length_q/k` for
  the varlen kernel, computed over the flattened batch.
- The training engine computes positions and varlen boundaries on the host (`packed_inputs`, from CPU
  `document_ids`), pins them and copies them with `non_blocking=True`, then passes them as `packed_forward(...,
  packed=...)`: the forward then holds no device->host sync (no `nonzero()`, no `int(tensor)`; tested with a dispatch
  mode that records such ops). The sdpa/eager masks and flex's `BlockMask` are built from device tensors by
  transformers inside the model's forward, again without a sync.
- Padding tokens form one extra "document" per row, so a padded query row is never fully masked (no NaNs in sdpa).
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

# Active (document_ids, position_ids) for the forward in flight; None means "no packing".
_ACTIVE: contextvars.ContextVar[tuple[torch.Tensor, torch.Tensor] | None] = contextvars.ContextVar(
    "hf_encoderize_packed_documents", default=None
)
_MASK_BACKENDS = ("eager", "sdpa", "flex_attention")


def document_ids_from_lengths(lengths: list[list[int]], seq_len: int) -> torch.Tensor:
    """Document ids (B, seq_len) for rows holding documents of the given lengths, -1 after the last one.

    >>> document_ids_from_lengths([[2, 3], [4]], 6).tolist()
    [[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, -1, -1]]
    """
    ids = torch.full((len(lengths), seq_len), -1, dtype=torch.long, device="cpu")  # a host helper, whatever the default
    for row, row_lengths in enumerate(lengths):
        if sum(row_lengths) > seq_len:
            raise ValueError(f"row {row} holds {sum(row_lengths)} tokens, more than seq_len={seq_len}")
        start = 0
        for doc, length in enumerate(row_lengths):
            ids[row, start : start + length] = doc
            start += length
    return ids


def _segment_starts(document_ids: torch.Tensor) -> torch.Tensor:
    """Bool (B, T): True where a new segment (document or padding run) starts."""
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    return starts


def position_ids_from_document_ids(document_ids: torch.Tensor) -> torch.Tensor:
    """Positions restarting at 0 at every document (and at the padding run).

    >>> position_ids_from_document_ids(torch.tensor([[0, 0, 1, 1, 1, -1]])).tolist()
    [[0, 1, 0, 1, 2, 0]]
    """
    batch, length = document_ids.shape
    index = torch.arange(length, device=document_ids.device).expand(batch, length)
    start_index = torch.where(_segment_starts(document_ids), index, torch.zeros_like(index))
    return index - start_index.cummax(dim=1).values


def _isolating_ids(document_ids: torch.Tensor) -> torch.Tensor:
    # Padding (-1) becomes its own block so padded query rows still attend to something.
    return torch.where(document_ids < 0, document_ids.max() + 1, document_ids)


def cu_seqlens_from_document_ids(document_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cumulative segment lengths over the flattened batch (int32, starts with 0) and the longest segment.

    >>> cu, longest = cu_seqlens_from_document_ids(torch.tensor([[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, -1, -1]]))
    >>> cu.tolist(), longest
    ([0, 2, 5, 6, 10, 12], 4)
    """
    starts = _segment_starts(document_ids).flatten().nonzero().flatten()
    total = torch.tensor([document_ids.numel()], device=document_ids.device)
    bounds = torch.cat([starts, total])
    return bounds.to(torch.int32), int((bounds[1:] - bounds[:-1]).max())


def _remap_positions(mask_function, position_ids: torch.Tensor):
    """`mask_function` at document-local positions: (q_idx, kv_idx) -> (position_ids[b, q], position_ids[b, kv]).

    transformers' own `remap_positions_for_packed_sequence` (5.23+) does the same; this copy serves 5.17 to 5.22.

    >>> window = lambda b, h, q, kv: abs(q - kv) <= 1
    >>> remapped = _remap_positions(window, torch.tensor([[0, 1, 2, 0, 1]]))
    >>> bool(remapped(0, 0, 3, 1)), bool(remapped(0, 0, 0, 2))  # indices 2 apart, positions 1 apart; then 2
    (True, False)
    """

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return mask_function(batch_idx, head_idx, position_ids[batch_idx, q_idx], position_ids[batch_idx, kv_idx])

    return inner_mask


def _remap_positions_function():
    """transformers' `remap_positions_for_packed_sequence` where it has one (5.23+), else `_remap_positions`."""
    from transformers import masking_utils

    return getattr(masking_utils, "remap_positions_for_packed_sequence", _remap_positions)


def _wrap_mask_interface(original):
    """Wrap one `ALL_MASK_ATTENTION_FUNCTIONS` entry so that it isolates documents while packing is active."""
    from transformers.masking_utils import and_masks, packed_sequence_mask_function

    remap_positions_for_packed_sequence = _remap_positions_function()

    def isolating_mask(*args, mask_function=None, **kwargs):
        active = _ACTIVE.get()
        if active is None or mask_function is None:
            return original(*args, mask_function=mask_function, **kwargs)
        document_ids, position_ids = active
        # The model's own pattern (full / symmetric window / chunk) in document-local positions, restricted to the
        # query's document. Never let sdpa skip the mask: a skipped mask would mean "attend everywhere".
        isolated = and_masks(
            packed_sequence_mask_function(document_ids),
            remap_positions_for_packed_sequence(mask_function, position_ids),
        )
        kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
        return original(*args, mask_function=isolated, **kwargs)

    isolating_mask._hf_encoderize_original = original
    return isolating_mask


def install_document_isolation() -> None:
    """Wrap the eager/sdpa/flex mask builders once per process (idempotent; a pass-through outside packing), and
    flex attention itself so that it computes in the autocast dtype (`_flex_under_autocast`)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    for backend in _MASK_BACKENDS:
        current = ALL_MASK_ATTENTION_FUNCTIONS[backend]
        if not hasattr(current, "_hf_encoderize_original"):
            AttentionMaskInterface._global_mapping[backend] = _wrap_mask_interface(current)
    current = ALL_ATTENTION_FUNCTIONS["flex_attention"]
    if not hasattr(current, "_hf_encoderize_original"):
        AttentionInterface._global_mapping["flex_attention"] = _flex_under_autocast(current)


def _flex_under_autocast(original):
    """transformers' flex attention with fp32 queries, keys and values cast to the autocast dtype while autocast is on
    for their device, as autocast casts them for sdpa. With fp32 master weights (the default) RoPE's fp32 cos/sin
    (and q/k norms) promote the bf16 projections to fp32; autocast does not cover flex_attention in torch 2.11, so it
    would run fp32 kernels, about 12x slower per layer on an H100 at head_dim 128 (k2-fsa/OmniVoice#212). A pass-through
    outside autocast."""

    def flex_attention_forward(module, query, key, value, *args, **kwargs):
        device = query.device.type
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            query, key, value = (t.to(dtype) if t.dtype == torch.float32 else t for t in (query, key, value))
        return original(module, query, key, value, *args, **kwargs)

    flex_attention_forward._hf_encoderize_original = original
    return flex_attention_forward


@contextlib.contextmanager
def isolate_documents(document_ids: torch.Tensor, position_ids: torch.Tensor | None = None):
    """Inside this context, eager/sdpa/flex masks built by the model keep packed documents apart."""
    install_document_isolation()
    if position_ids is None:
        position_ids = position_ids_from_document_ids(document_ids)
    token = _ACTIVE.set((_isolating_ids(document_ids), position_ids))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def packed_forward_kwargs(document_ids: torch.Tensor, attn_implementation: str) -> dict:
    """Extra forward kwargs for a packed batch: restarting `position_ids`, and varlen boundaries for flash.

    For eager/sdpa/flex, run the forward inside `isolate_documents(document_ids)` as well (see `packed_forward`).
    """
    kwargs = {"position_ids": position_ids_from_document_ids(document_ids)}
    if attn_implementation.startswith("flash_attention"):
        cu_seqlens, longest = cu_seqlens_from_document_ids(document_ids)
        kwargs.update(cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens, max_length_q=longest, max_length_k=longest)
    return kwargs


def packed_inputs(document_ids: torch.Tensor, attn_implementation: str) -> dict:
    """Everything `packed_forward` needs besides the tokens, computed on the host from CPU `document_ids` (B, T):
    `position_ids`, and for flash_attention_* `cu_seq_lens_q/k` (int32, over the flattened batch) and `max_length_q/k`
    (Python ints). The engine pins the tensors and copies them with `non_blocking=True`; on a device, `nonzero()` and
    `int(max)` would each be a device->host sync. Flash kernels get the flattened batch's positions (1, B x T).

    >>> docs = torch.tensor([[0, 0, 1, -1], [0, 0, 0, 0]])
    >>> packed = packed_inputs(docs, "flash_attention_2")
    >>> packed["position_ids"].tolist(), packed["cu_seq_lens_q"].tolist(), packed["max_length_q"]
    ([[0, 1, 0, 0, 0, 1, 2, 3]], [0, 2, 3, 4, 8], 4)
    >>> packed_inputs(docs, "sdpa")["position_ids"].tolist()
    [[0, 1, 0, 0], [0, 1, 2, 3]]
    """
    if document_ids.device.type != "cpu":
        raise ValueError(f"packed_inputs takes host document_ids (got {document_ids.device}): computing them on the "
                         "device would sync; call it before the copy, or use packed_forward_kwargs")
    kwargs = packed_forward_kwargs(document_ids, attn_implementation)
    if attn_implementation.startswith("flash_attention"):
        kwargs["position_ids"] = kwargs["position_ids"].reshape(1, -1)
    return kwargs


def packed_forward(model, input_ids: torch.Tensor, document_ids: torch.Tensor, packed: dict | None = None, **kwargs):
    """Run `model` on packed rows with every document isolated. Works for every attention backend.

    `input_ids`, `document_ids`: (B, T) on the model's device. `packed`: `packed_inputs(...)` already on the device,
    the engine's path, which computes nothing here and never syncs; without it, they are computed from a host copy of
    `document_ids` (one sync). `kwargs` go to the model (e.g. `use_cache=False`). Flash kernels take the batch
    flattened to one row of `cu_seq_lens` segments; the outputs come back as (B, T, ...).
    """
    backend = model.config._attn_implementation
    if packed is None:
        packed = packed_inputs(document_ids.cpu(), backend)
        packed = {k: v.to(input_ids.device) if torch.is_tensor(v) else v for k, v in packed.items()}
    if backend.startswith("flash_attention"):
        batch, length = input_ids.shape
        output = model(input_ids=input_ids.reshape(1, -1), **packed, **kwargs)
        return _unflatten(output, batch, length)
    with isolate_documents(document_ids.to(input_ids.device), packed["position_ids"]):
        return model(input_ids=input_ids, **packed, **kwargs)


def _unflatten(output, batch: int, length: int):
    for key, value in output.items():
        if torch.is_tensor(value) and value.dim() >= 2 and value.shape[:2] == (1, batch * length):
            output[key] = value.reshape(batch, length, *value.shape[2:])
    return output
