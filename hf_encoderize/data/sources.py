"""Text sources for pretraining: where the documents come from (rows are packed by `packing`).

Design choices:
- Hub datasets are streamed by default; local `.txt/.jsonl/.json/.parquet` files (globs or a folder) go through the
  same `datasets.load_dataset` call with the matching builder.
- A `.txt` document is a paragraph by default (`--text-unit`, the text builder's `sample_by`): every document is
  attention-isolated in a packed row, so the builder's default of one line per document trained wrapped prose as
  ~25-token fragments. transformers' run_mlm.py also joins lines unless asked for `--line_by_line`.
- A bad source, an empty one or a wrong text column is a one-line error before any model weight is loaded.
- The first `eval_documents` documents are held out and never trained on; a source with nothing after them is refused.
  Unset, it is 64, or 5% (at least one) of a small local corpus, counted when the config is made: run_mlm.py holds
  out a share (`validation_split_percentage`, 5), and 64 of a 100-document corpus would leave little to train on.
- Bad contents are one-line errors too: reading goes through `corpus_files.guarded`, which names the file and line
  ("docs.jsonl line 3: not valid JSON"). A null or non-string text value is refused with its file and row; empty (or
  blank) documents are skipped. Local sources up to `PRECHECK_BYTES` are read through once by `open_documents`, so
  such errors come before any weight is loaded; larger ones are checked as they stream (still one line, mid-training).
- Which files `--data-files` names, how they are read and what they hold for "same data?" is `corpus_files`': this
  module comes to it once per source (`open_local`), and it calls nothing here.
- `Documents` is re-iterable: each pass (and a resumed run) starts again from the first document, so the packer's
  small state (documents consumed, tokens carried over) is enough to continue from exactly the same token.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.validation import check_choice, check_data_name, check_number
from hf_encoderize.data.corpus_files import (
    LocalFiles,
    content_identity,
    guarded,
    local_files,
    open_local,
    reads_text_files,
)
from hf_encoderize.records.run_settings import DataFacts

HELD_OUT_DOCUMENTS = 64  # held out by default ...
HELD_OUT_SHARE = 0.05  # ... unless that is more than run_mlm.py's validation_split_percentage (5) of the corpus
PRECHECK_BYTES = 64 << 20  # local sources up to this size are read through (not tokenized) before training
TextUnit = Literal["line", "paragraph", "file"]


@dataclass
class DataConfig:
    """Where the pretraining text comes from and how it is packed."""

    INPUTS = ("data_files",)  # what an output folder stays apart from (`common.outputs.inputs_of`)

    _: KW_ONLY
    dataset: str | None = "HuggingFaceFW/fineweb-edu"
    """Hub dataset id (streamed). Ignored when `data_files` is set.

    The default is the paper's corpus (section 2)."""
    dataset_config: str | None = "sample-10BT"
    """Hub dataset configuration name."""
    split: str = "train"
    """Split to read."""
    data_files: str | None = None
    """Local .txt/.jsonl/.parquet files: a path, a glob or a folder. Overrides `dataset`."""
    data_name: str | None = field(default=None, metadata=identity(HARMLESS))
    """How the model card names the --data-files corpus (recorded in the run record), e.g. "Python 3.11 docs". Default:
    the card describes it ("a local JSONL file") and never prints its path or file name."""
    text_column: str = "text"
    """Column holding the document text (`.txt` files always use `text`)."""
    text_unit: TextUnit = "paragraph"
    """What one document of a .txt file is: paragraph (the text between empty lines), line, or file (the whole
    file). Documents are isolated from each other in a packed row, so `line` makes wrapped prose into fragments of a
    few dozen tokens; use it for one-sentence-per-line corpora. (datasets' text builder calls this `sample_by`.)"""
    seq_len: int = 512
    """Tokens per packed row."""
    pack: bool | None = None
    """Pack several documents per row (isolated from each other); False pads one document per row (truncated to
    --max-seq-length). Default: pack, unless the probe finds that packed documents leak while every other check passes
    (a
    hybrid whose state-space layers carry state along a row), then pad, with a warning; --pack on such a model is
    refused. The run record says which."""
    eval_documents: int | None = None
    """The first N documents are held out for evaluation and never trained on (default: 64, or 5% of a local corpus
    of fewer than 1,280 documents, at least one, as run_mlm.py holds out 5%)."""
    skip_documents: int = 0
    """Training starts this many documents after the held-out ones: continue a stream that an earlier run already
    read (CPT of a base model pretrained here: its run record's `data_position.next_document`), so no token is seen
    twice.

    The paper trains on "unique tokens" (section 2)."""
    shuffle_buffer: int = 0
    """Shuffle the training documents within a buffer of N, seeded by --seed (each pass its own order; resume and
    N processes stay exact). 0 keeps the source's order.

    0 reads FineWeb-Edu in order, as the paper does (section 2)."""
    eval_max_rows: int = field(default=64, metadata=identity(HARMLESS))
    """At most this many packed rows of the held-out documents are evaluated (long documents would otherwise make
    every evaluation cost more than the training between two of them)."""
    streaming: bool = True
    """Stream Hub datasets instead of downloading them first."""

    def __post_init__(self):
        check_choice("--text-unit", self.text_unit, DataConfig, "text_unit")  # the Literal's values
        check_data_name(self.data_name, self.data_files)
        check_number("--max-seq-length", self.seq_len, minimum=8, integer=True)
        check_number("--eval-documents", self.eval_documents, minimum=0, integer=True)
        if self.eval_documents is None:
            self.eval_documents = held_out_documents(counted_documents(self))
        check_number("--skip-documents", self.skip_documents, minimum=0, integer=True)
        check_number("--shuffle-buffer", self.shuffle_buffer, minimum=0, integer=True)
        check_number("--max-eval-samples", self.eval_max_rows, minimum=1, integer=True)

    def reads_text_files(self) -> bool:
        """Whether the source is local .txt files, the one kind `text_unit` cuts into documents."""
        return reads_text_files(self.data_files)

    def identity_value(self, name: str):
        """The value a setting runs with, for "same run?" (`common.identity`): `text_unit` only for .txt files, and
        `data_files` by content (`content_identity`), not by the path text."""
        if name == "text_unit" and not self.reads_text_files():
            return None
        if name == "data_files":
            return content_identity(self.data_files)
        return getattr(self, name)


def data_facts(data: DataConfig) -> DataFacts:
    """Where the text came from, as the run record and the card say it: a --data-files run names its files only (the
    Hub default `dataset` it did not read is not recorded), a .txt one its --text-unit."""
    local = bool(data.data_files)
    return DataFacts(dataset=None if local else data.dataset, dataset_config=None if local else data.dataset_config,
                     split=data.split, data_files=data.data_files, data_name=data.data_name,
                     text_column=data.text_column, text_unit=data.identity_value("text_unit"), seq_len=data.seq_len,
                     pack=data.pack, eval_documents=data.eval_documents, skip_documents=data.skip_documents,
                     shuffle_buffer=data.shuffle_buffer)


def load_documents(cfg: DataConfig):
    """An iterable of rows (dicts) from the configured source; raises a one-line error for a bad source/column."""
    import datasets

    try:
        if cfg.data_files:
            source = open_local(cfg.data_files, cfg.text_unit)
        else:
            source = datasets.load_dataset(cfg.dataset, cfg.dataset_config, split=cfg.split, streaming=cfg.streaming)
    except EncoderizeError:
        raise
    except StopIteration:  # the streaming builders read a first row to infer the columns
        source = None
    except Exception as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        local = "" if cfg.data_files else "; or train on local text with --data-files (.txt/.jsonl/.json/.parquet)"
        raise EncoderizeError(f"cannot load dataset {cfg.data_files or cfg.dataset!r}: {reason}{local}") from None
    first = next(iter(guarded(source, cfg.data_files or cfg.dataset)), None) if source is not None else None
    if first is None:
        raise EncoderizeError(f"the dataset {cfg.data_files or cfg.dataset!r} has no rows; point --data-files or "
                              "--dataset at a source with documents")
    columns = getattr(source, "column_names", None) or list(first.keys())
    column = "text" if cfg.data_files and source.builder == "text" else None  # the text builder's one column
    column = column or cfg.text_column
    if column not in columns:
        raise EncoderizeError(f"text column {column!r} not found (columns: {', '.join(columns)}); set --text-column")
    return source, column


class Documents:
    """The text column of a source, re-iterable (a streamed dataset restarts from its first document).

    Empty and blank documents are skipped (they hold no token to learn from); a null or non-string value is refused
    with its file and row."""

    def __init__(self, source, column: str):
        self.source, self.column = source, column

    @property
    def local(self) -> bool:
        """Whether the documents come from local files (`--data-files`), not from a Hub dataset's rows."""
        return isinstance(self.source, LocalFiles)

    def __iter__(self) -> Iterator[str]:
        if self.local:
            located = self.source.located()
        else:
            located = (("the dataset", number, row) for number, row in enumerate(guarded(self.source, "dataset"), 1))
        for where, number, row in located:
            text = row.get(self.column)
            if not isinstance(text, str):
                kind = "null" if text is None else type(text).__name__
                raise EncoderizeError(f"{where} row {number}: column {self.column!r} holds {kind}, not text; fix or "
                                      "remove the row")
            if text.strip():
                yield text


def counted_documents(cfg: DataConfig) -> int | None:
    """How many documents a local source of at most `PRECHECK_BYTES` holds (read, not tokenized); None for a larger
    or Hub source, or one that cannot be read (`open_documents` then says why, before any weight loads)."""
    try:
        if not cfg.data_files or local_bytes(cfg) > PRECHECK_BYTES:
            return None
        return sum(1 for _ in Documents(*load_documents(cfg)))
    except (EncoderizeError, OSError):
        return None


def local_bytes(cfg: DataConfig) -> int:
    """The size of the `--data-files` source's files: up to `PRECHECK_BYTES`, it is read through before any weight
    loads (`counted_documents`, `open_documents`) and counted exactly (`budget.estimate_budget`)."""
    return sum(os.path.getsize(path) for path in local_files(cfg.data_files))


def held_out_documents(count: int | None) -> int:
    """The default held-out count: 64, or 5% (at least one) of a corpus of `count` documents when that is fewer.

    >>> held_out_documents(None), held_out_documents(100_000), held_out_documents(200), held_out_documents(10)
    (64, 64, 10, 1)
    """
    if count is None:
        return HELD_OUT_DOCUMENTS
    return min(HELD_OUT_DOCUMENTS, max(1, round(count * HELD_OUT_SHARE)))


def open_documents(cfg: DataConfig, rows_per_step: int = 1) -> Documents:
    """The configured source's documents, checked to hold some after the `eval_documents` held out and, where a
    small local source is read through, at least `rows_per_step` of them: each row of a step is packed from its own
    documents (`packing.LaneStream`, which checks a larger source as it streams)."""
    documents = Documents(*load_documents(cfg))
    count = None
    if cfg.data_files and local_bytes(cfg) <= PRECHECK_BYTES:
        count = sum(1 for _ in documents)  # read through once: a bad row anywhere fails now, before any weight loads
    first = cfg.eval_documents + cfg.skip_documents
    if next(itertools.islice(iter(documents), first, None), None) is None:
        skipped = f" and the {cfg.skip_documents} skipped" if cfg.skip_documents else ""
        raise EncoderizeError(f"the dataset has no training documents after the {cfg.eval_documents} held out for "
                              f"evaluation{skipped}; {text_unit_hint(cfg, count)}add data or lower "
                              "--eval-documents/--skip-documents")
    if count is not None and count - first < rows_per_step:
        raise EncoderizeError(too_few_documents(count - first, rows_per_step, text_unit_hint(cfg, count)))
    return documents


def text_unit_hint(cfg: DataConfig, count: int | None) -> str:
    """For .txt files cut at blank lines (or whole): how many documents that made, and the option that makes each line
    one, the one change that helps a text without blank lines; "" for other sources."""
    made, cut = "few" if count is None else count, "one per file" if cfg.text_unit == "file" else "split at blank lines"
    return "" if cfg.text_unit == "line" or not cfg.reads_text_files() else (
        f"the .txt files made {made} document(s) under --text-unit {cfg.text_unit} ({cut}): pass --text-unit line "
        "to read each line as a document, or ")


def too_few_documents(count: int, rows_per_step: int, hint: str = "") -> str:
    """The refusal of a source with fewer training documents than a step has rows (said before or while streaming).
    `hint`: `text_unit_hint`'s words for .txt files."""
    return (f"the dataset has {count} training documents after the held-out ones; a step takes {rows_per_step} rows "
            f"(batch size x processes x accumulation), each packed from its own documents: {hint}add data, or lower "
            "--batch-size or --gradient-accumulation-steps")
