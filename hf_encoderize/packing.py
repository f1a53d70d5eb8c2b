"""Row packing: documents -> fixed-length rows of token ids with a document id per token.

Design choices:
- Every document gets EOS appended and is packed into rows of `seq_len` tokens with per-document ids (-1 on padding),
  so the attention can keep documents apart (that part is `isolation`). A document longer than what is left in a row
  continues in the next row as a new segment. `pack=False` pads one document per row instead (truncated).
- The packer's state (documents consumed, tokens carried over) is a small dict. `Packer` exposes it through
  `state_dict`/`load_state_dict`, so the training engine registers it with Accelerate's checkpointing next to the
  scheduler, and a resumed run continues from exactly the same token.
- `RowStream` is the endless training stream: it skips the held-out documents and starts a new pass over the source
  when it runs out. `held_out_batches` packs the held-out documents once, for evaluation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch

from hf_encoderize.errors import EncoderizeError

Row = tuple[list[int], list[int]]  # (input_ids, document_ids), both seq_len long


def _fresh_state() -> dict:
    return {"documents": 0, "carry": [], "carry_doc": []}


@dataclass
class Packer:
    """Turns documents into packed rows of `seq_len` tokens, resumably.

    `state` = documents consumed so far and the tokens (with their document ids) carried into the next row.

    >>> from transformers import PreTrainedTokenizerFast
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> backend = Tokenizer(models.WordLevel({"a": 0, "b": 1, "c": 2, "</s>": 3, "<pad>": 4}, unk_token="a"))
    >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", pad_token="<pad>")
    >>> packer = Packer(tokenizer, seq_len=4)
    >>> list(packer.rows(iter(["a b", "c", "b b c"]), flush=True))
    [([0, 1, 3, 2], [0, 0, 0, 1]), ([3, 1, 1, 2], [0, 1, 1, 1]), ([3, 4, 4, 4], [0, -1, -1, -1])]
    >>> packer.state_dict()
    {'documents': 3, 'carry': [], 'carry_doc': []}
    """

    tokenizer: object
    seq_len: int
    pack: bool = True
    state: dict = field(default_factory=_fresh_state)

    def state_dict(self) -> dict:
        return {"documents": self.state["documents"], "carry": list(self.state["carry"]),
                "carry_doc": list(self.state["carry_doc"])}

    def load_state_dict(self, state: dict) -> None:
        self.state = {"documents": int(state["documents"]), "carry": list(state["carry"]),
                      "carry_doc": list(state["carry_doc"])}

    def reset(self) -> None:
        self.state = _fresh_state()

    def _tokens(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids + [self.tokenizer.eos_token_id]

    def rows(self, documents: Iterator[str], skip: int = 0, flush: bool = False) -> Iterator[Row]:
        """Yield `(input_ids, document_ids)` rows; document ids are -1 on padding.

        `skip` documents are passed over (the held-out slice); `flush` also yields the last, partly filled row.
        """
        ids, docs = list(self.state["carry"]), list(self.state["carry_doc"])
        start = skip + self.state["documents"]
        for index, text in enumerate(documents):
            if index < start:
                continue
            self.state["documents"] += 1
            tokens = self._tokens(text)[: self.seq_len] if not self.pack else self._tokens(text)
            doc_id = (docs[-1] + 1) if docs else 0
            ids = ids + tokens  # new lists: the saved state must never alias the working buffer
            docs = docs + [doc_id] * len(tokens)
            while len(ids) >= self.seq_len or (not self.pack and ids):
                row, row_docs = ids[: self.seq_len], docs[: self.seq_len]
                ids, docs = ids[self.seq_len :], docs[self.seq_len :]
                self.state["carry"], self.state["carry_doc"] = ids, docs
                yield _pad(row, row_docs, self.seq_len, self.tokenizer.pad_token_id)
        if flush and ids:
            self.state["carry"], self.state["carry_doc"] = [], []
            yield _pad(ids, docs, self.seq_len, self.tokenizer.pad_token_id)


def _pad(row: list[int], docs: list[int], seq_len: int, pad_id: int) -> Row:
    missing = seq_len - len(row)
    first = docs[0] if docs else 0
    return row + [pad_id] * missing, [d - first for d in docs] + [-1] * missing


def collate(rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack rows into `(input_ids, document_ids)`, both (B, T) long tensors.

    >>> input_ids, document_ids = collate([([5, 6, 2, 0], [0, 0, 0, -1]), ([7, 2, 8, 2], [0, 0, 1, 1])])
    >>> input_ids.tolist(), document_ids.tolist(), input_ids.dtype
    ([[5, 6, 2, 0], [7, 2, 8, 2]], [[0, 0, 0, -1], [0, 0, 1, 1]], torch.int64)
    """
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


class RowStream:
    """Endless packed rows from `documents` after the first `skip` (held out); a new pass starts at the end.

    The position lives in `packer` (registered for checkpointing), so the stream resumes token for token.
    """

    def __init__(self, packer: Packer, documents: Iterable[str], skip: int):
        self.packer, self.documents, self.skip = packer, documents, skip
        self._rows: Iterator[Row] | None = None  # opened lazily, after a checkpoint may have restored the packer

    def take(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next `count` rows, collated: `(input_ids, document_ids)`, (count, seq_len) each."""
        return collate([self._next_row() for _ in range(count)])

    def _next_row(self) -> Row:
        for _ in range(2):  # the rest of this pass, else one fresh pass
            if self._rows is None:
                self._rows = self.packer.rows(iter(self.documents), skip=self.skip)
            row = next(self._rows, None)
            if row is not None:
                return row
            if self.packer.state["documents"] == 0:
                raise EncoderizeError("the dataset has no training documents after the held-out evaluation slice")
            self.packer.reset()  # the source ran out: a new pass (the partial row left over is dropped)
            self._rows = None
        raise EncoderizeError(f"the training documents do not fill one row of {self.packer.seq_len} tokens; add data "
                              "or lower --seq-len")


def held_out_batches(documents: Iterable[str], packer: Packer, count: int, max_rows: int, batch_size: int) -> list:
    """The first `count` documents, packed (`max_rows` rows at most) and collated in batches: the held-out set."""
    rows = packer.rows(itertools.islice(iter(documents), count), flush=True)
    held_out = list(itertools.islice(rows, max_rows))
    return [collate(held_out[i : i + batch_size]) for i in range(0, len(held_out), batch_size)]
