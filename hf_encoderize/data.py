"""Text sources for MLM continued pretraining: load, tokenize on the fly, pack with document boundaries.

Design choices:
- Hub datasets are streamed by default; local `.txt/.jsonl/.json/.parquet` files (globs or a folder) go through the
  same `datasets.load_dataset` call with the matching builder.
- Every document gets EOS appended and is packed into rows of `seq_len` tokens with per-document ids, so the
  attention can isolate documents (see `packing`). A document longer than what is left in a row continues in the next
  row as a new segment.
- The first `eval_documents` documents are held out and never trained on.
- The packer's state (documents consumed, tokens carried over) is a small dict saved in every checkpoint, so a
  resumed run continues from exactly the same token.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass, field

import torch

from hf_encoderize.errors import EncoderizeError

_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass
class DataConfig:
    """Where the pretraining text comes from and how it is packed."""

    _: KW_ONLY
    dataset: str | None = "HuggingFaceFW/fineweb-edu"
    """Hub dataset id (streamed). The default is the paper's corpus (section 2). Ignored when `data_files` is set."""
    dataset_config: str | None = "sample-10BT"
    """Hub dataset configuration name."""
    split: str = "train"
    """Split to read."""
    data_files: str | None = None
    """Local .txt/.jsonl/.parquet files: a path, a glob or a folder. Overrides `dataset`."""
    text_column: str = "text"
    """Column holding the document text (`.txt` files always use `text`)."""
    seq_len: int = 512
    """Tokens per packed row."""
    pack: bool = True
    """Pack several documents per row (isolated from each other); False pads one document per row."""
    eval_documents: int = 64
    """The first N documents are held out for evaluation and never trained on."""
    eval_max_rows: int = 64
    """At most this many packed rows of the held-out documents are evaluated (long documents would otherwise make
    every evaluation cost more than the training between two of them)."""
    streaming: bool = True
    """Stream Hub datasets instead of downloading them first."""

    def __post_init__(self):
        if int(self.seq_len) < 8:
            raise EncoderizeError(f"--seq-len must be at least 8, got {self.seq_len}")
        if int(self.eval_documents) < 0:
            raise EncoderizeError("--eval-documents must be 0 or more")
        if int(self.eval_max_rows) < 1:
            raise EncoderizeError("--eval-max-rows must be at least 1")


def _local_files(spec: str) -> list[str]:
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True) if os.path.isfile(f))
    else:
        files = sorted(glob.glob(path))
    files = [f for f in files if os.path.splitext(f)[1] in _BUILDERS]
    if not files:
        raise EncoderizeError(f"no .txt/.jsonl/.json/.parquet files found at {spec!r}; check --data-files")
    return files


def load_documents(cfg: DataConfig):
    """An iterable of rows (dicts) from the configured source; raises a one-line error for a bad source/column."""
    import datasets

    try:
        if cfg.data_files:
            files = _local_files(cfg.data_files)
            builders = {_BUILDERS[os.path.splitext(f)[1]] for f in files}
            if len(builders) > 1:
                raise EncoderizeError("--data-files mixes file types; pass one kind (.txt, .jsonl or .parquet)")
            source = datasets.load_dataset(builders.pop(), data_files=files, split="train", streaming=True)
        else:
            source = datasets.load_dataset(cfg.dataset, cfg.dataset_config, split=cfg.split, streaming=cfg.streaming)
    except EncoderizeError:
        raise
    except StopIteration:  # the streaming builders read a first row to infer the columns
        source = None
    except Exception as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise EncoderizeError(f"cannot load dataset {cfg.data_files or cfg.dataset!r}: {reason}") from None
    first = next(iter(source), None) if source is not None else None
    if first is None:
        raise EncoderizeError(f"the dataset {cfg.data_files or cfg.dataset!r} has no rows; point --data-files or "
                              "--dataset at a source with documents")
    columns = source.column_names or list(first.keys())
    column = "text" if cfg.data_files and all(f.endswith(".txt") for f in _local_files(cfg.data_files)) else None
    column = column or cfg.text_column
    if column not in columns:
        raise EncoderizeError(f"text column {column!r} not found (columns: {', '.join(columns)}); set --text-column")
    return source, column


@dataclass
class Packer:
    """Turns documents into packed rows of `seq_len` tokens, resumably.

    `state` = documents consumed so far and the tokens (with their document ids) carried into the next row.
    """

    tokenizer: object
    seq_len: int
    pack: bool = True
    state: dict = field(default_factory=lambda: {"documents": 0, "carry": [], "carry_doc": []})

    def _tokens(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids + [self.tokenizer.eos_token_id]

    def rows(
        self, documents: Iterator[str], skip: int = 0, flush: bool = False
    ) -> Iterator[tuple[list[int], list[int]]]:
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


def _pad(row: list[int], docs: list[int], seq_len: int, pad_id: int) -> tuple[list[int], list[int]]:
    missing = seq_len - len(row)
    first = docs[0] if docs else 0
    return row + [pad_id] * missing, [d - first for d in docs] + [-1] * missing


def collate(rows: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack rows into `(input_ids, document_ids)`, both (B, T) long tensors."""
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])
