"""Mask and pad tokens for a decoder that never had them.

Mask token, in order of preference (the path taken is recorded for the model card):
1. `existing`: the tokenizer already defines one;
2. `reserved`: an unused reserved special token (Llama 3 ships 250 `<|reserved_special_token_N|>`), so the vocabulary
   and the embedding matrix keep their size;
3. `added`: a new `<mask>` token; the embeddings (and an untied LM head) grow by one row initialised at the mean of the
   existing rows (transformers' `mean_resizing`), which keeps the first MLM logits in the model's usual range.

Pad token: the tokenizer's own, else an unused reserved token, else EOS. Pads are always excluded by the attention
mask and by pooling, so sharing EOS's id is harmless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RESERVED = re.compile(r"reserved|unused", re.IGNORECASE)


@dataclass(frozen=True)
class TokenReport:
    """Which special tokens the encoder uses and how they were obtained."""

    mask_token: str
    mask_token_id: int
    mask_token_path: str
    """`existing`, `reserved` or `added` (see module docstring)."""
    pad_token: str
    pad_token_id: int
    pad_token_path: str
    """`existing`, `reserved` or `eos`."""


def unused_reserved_tokens(tokenizer) -> list[str]:
    """Special tokens whose name says they are reserved/unused and that no role (bos, eos, pad...) has taken."""
    roles = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
    taken = {str(getattr(tokenizer, role)) for role in roles if getattr(tokenizer, role, None) is not None}
    found = []
    for token in tokenizer.added_tokens_decoder.values():
        if token.special and _RESERVED.search(token.content) and token.content not in taken:
            found.append(token.content)
    return found


def ensure_pad_token(tokenizer) -> tuple[str, str]:
    """Give the tokenizer a pad token if it lacks one. Returns `(pad_token, path)`."""
    if tokenizer.pad_token is not None:
        return tokenizer.pad_token, "existing"
    reserved = unused_reserved_tokens(tokenizer)
    if reserved:
        tokenizer.pad_token = reserved[-1]  # take from the end: the mask token takes from the front
        return tokenizer.pad_token, "reserved"
    if tokenizer.eos_token is None:
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
        return tokenizer.pad_token, "added"
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer.pad_token, "eos"


def ensure_mask_token(model, tokenizer) -> tuple[str, str]:
    """Give the tokenizer a mask token, growing the embeddings only if no existing token can serve.

    Returns `(mask_token, path)`. Works for tied and untied LM heads.
    """
    if tokenizer.mask_token is not None:
        return tokenizer.mask_token, "existing"
    reserved = unused_reserved_tokens(tokenizer)
    if reserved:
        tokenizer.mask_token = reserved[0]
        return tokenizer.mask_token, "reserved"
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    grow_embeddings(model, len(tokenizer))
    return tokenizer.mask_token, "added"


def grow_embeddings(model, vocab_size: int) -> None:
    """Resize input (and, when untied, output) embeddings so every tokenizer id has a row.

    New rows start at the mean of the existing rows (the output head likewise), see `resize_token_embeddings`.
    """
    current = model.get_input_embeddings().weight.shape[0]
    if vocab_size <= current:
        # Many checkpoints pad their vocab to a multiple of 64: the row exists but was never trained.
        _set_row_to_mean(model, vocab_size - 1, vocab_size - 1)
        return
    model.resize_token_embeddings(vocab_size, mean_resizing=True)


def _set_row_to_mean(model, row: int, n_trained: int) -> None:
    import torch

    with torch.no_grad():
        for layer in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m}.values():
            weight = layer.weight
            weight[row] = weight[:n_trained].float().mean(dim=0).to(weight.dtype)


def ensure_special_tokens(model, tokenizer) -> TokenReport:
    """Make sure pad and mask tokens exist; return what was done."""
    pad, pad_path = ensure_pad_token(tokenizer)
    if pad_path == "added":
        grow_embeddings(model, len(tokenizer))
    mask, mask_path = ensure_mask_token(model, tokenizer)
    model.config.pad_token_id = tokenizer.pad_token_id
    return TokenReport(
        mask_token=mask,
        mask_token_id=tokenizer.mask_token_id,
        mask_token_path=mask_path,
        pad_token=pad,
        pad_token_id=tokenizer.pad_token_id,
        pad_token_path=pad_path,
    )
