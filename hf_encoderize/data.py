"""Text sources for pretraining: where the documents come from (rows are packed by `packing`).

Design choices:
- Hub datasets are streamed by default; local `.txt/.jsonl/.json/.parquet` files (globs or a folder) go through the
  same `datasets.load_dataset` call with the matching builder.
- A bad source, an empty one or a wrong text column is a one-line error before any model weight is loaded.
- The first `eval_documents` documents are held out and never trained on; a source with nothing after them is refused.
- `Documents` is re-iterable: each pass (and a resumed run) starts again from the first document, so the packer's
  small state (documents consumed, tokens carried over) is enough to continue from exactly the same token.
"""

from __future__ import annotations

import glob
import itertools
import os
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass

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


class Documents:
    """The text column of a source, re-iterable (a streamed dataset restarts from its first document)."""

    def __init__(self, source, column: str):
        self.source, self.column = source, column

    def __iter__(self) -> Iterator[str]:
        return (row[self.column] for row in self.source)


def open_documents(cfg: DataConfig) -> Documents:
    """The configured source's documents, checked to hold some after the `eval_documents` held out."""
    documents = Documents(*load_documents(cfg))
    if next(itertools.islice(iter(documents), cfg.eval_documents, None), None) is None:
        raise EncoderizeError(f"the dataset has no training documents after the {cfg.eval_documents} held out for "
                              "evaluation; add data or lower --eval-documents")
    return documents
