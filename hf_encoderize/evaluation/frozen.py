"""Frozen-encoder evaluation (`eval --frozen`): train only the task head on the model's last hidden states.

The paper fine-tunes the whole model (section 2, "Fine-tuning protocol"), and so does every profile by default. A
frozen run answers a narrower question, how much of each task the representation already holds (a linear probe),
for a fraction of the cost: the backbone never trains, so each input's hidden states are computed once, cached, and
shared by every seed and learning rate of the grid. That is what lets the quickstart afford several seeds per task
family on a 2-core CPU.

Design choices:
- `FrozenBackbone` stands in for `backbone.Backbone`: `fresh()` returns a `CachedEncoder` (no parameters to train,
  eval mode, so no dropout) and the task code is unchanged: its `hidden()` gets the cached `last_hidden_state`.
- The cache key is a row's token ids up to its attention mask (right padding, as every task collates). A row's
  hidden states do not depend on the padding of the batch it came in (bidirectional attention with padded keys
  masked out; the pad-invariance check of `model.bidirectional` holds it to 1e-5), so a row is encoded once.
- Retrieval has no head when the model fine-tunes; frozen, it gets a linear map of the pooled embedding, started at
  the identity (so step 0 scores the raw embeddings) and trained with the same in-batch-negatives loss.
- The heads train for `max_steps` steps over as many epochs as that takes (one epoch of 640 rows is 40 steps, too
  few for a head that starts from nothing), each epoch in a new seeded order.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch


class CachedEncoder(torch.nn.Module):
    """`model(input_ids=..., attention_mask=...)` with the last hidden states of each row computed once."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        super().__init__()
        self.device = device
        self._model = [model]  # in a list, not a submodule: nothing of it trains, moves or changes mode
        self.cache: dict[tuple[int, ...], torch.Tensor] = {}
        self.encoded_rows = 0  # rows that went through the model (the rest came from the cache)

    def parameters(self, recurse: bool = True):  # the backbone is frozen: an optimizer gets nothing from here
        return iter(())

    def named_parameters(self, *args, **kwargs):
        return iter(())

    @torch.no_grad()
    def _encode(self, rows: list[tuple[int, ...]], extra: dict) -> None:
        model = self._model[0]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        inputs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device), **extra}
        hidden = model(**inputs).last_hidden_state.float()
        for i, row in enumerate(rows):
            self.cache[row] = hidden[i, :len(row)].detach().clone()
        self.encoded_rows += len(rows)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra) -> SimpleNamespace:
        lengths = attention_mask.sum(dim=1).tolist()
        rows = [tuple(input_ids[i, :n].tolist()) for i, n in enumerate(lengths)]
        missing = list(dict.fromkeys(r for r in rows if r not in self.cache))
        if missing:
            self._encode(missing, {})  # token types: none of the decoders this mode is for uses them
        out = torch.zeros(input_ids.shape[0], input_ids.shape[1], self.cache[rows[0]].shape[-1], device=self.device)
        for i, row in enumerate(rows):
            out[i, :len(row)] = self.cache[row]
        return SimpleNamespace(last_hidden_state=out)


class FrozenBackbone:
    """A `Backbone` whose model never trains: `fresh()` gives the shared `CachedEncoder`."""

    def __init__(self, backbone):
        self.inner = backbone
        backbone.model.eval().requires_grad_(False)
        self.model = CachedEncoder(backbone.model, backbone.device)
        self.tokenizer, self.mode, self.device = backbone.tokenizer, backbone.mode, backbone.device

    @property
    def hidden_size(self) -> int:
        return self.inner.hidden_size

    @property
    def max_positions(self) -> int:
        return self.inner.max_positions

    def fresh(self) -> CachedEncoder:
        return self.model

    def autocast(self):
        return self.inner.autocast() if self.device.type == "cuda" else contextlib.nullcontext()


class IdentityProjection(torch.nn.Linear):
    """Retrieval's head in a frozen run: a square linear map of the pooled embedding, started at the identity."""

    def __init__(self, size: int):
        super().__init__(size, size, bias=False)
        with torch.no_grad():
            self.weight.copy_(torch.eye(size))
