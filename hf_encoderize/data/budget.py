"""How many tokens a run needs against how many its source holds, said before training starts.

The paper trains on unique tokens (section 2: "unique English tokens"), and `examples/paper/` continues CPT on the
documents after the base run's. A run that will start a second pass over its data used to say so only when the pass
began, hours in; `check_token_budget` says it in one `warning:` line before the first step.

Design choices:
- Need: steps x global rows per step (batch x accumulation x processes) x --max-seq-length. Packed rows are full, so
  this is the tokens the run reads; padded rows (`--no-pack`) read at least as many documents, so the warning errs on
  the quiet side there.
- Holding, after the held-out and skipped documents:
  - FineWeb-Edu's published subsets by their size on the dataset card (sample-10BT, sample-100BT, sample-350BT, the
    whole set about 1.3T), counted in GPT-2 tokens there; converted into the run's own tokens by the sampled rows:
    each FineWeb-Edu row carries its GPT-2 `token_count`, so the run's tokenizer on the same texts gives run tokens
    per GPT-2 token. A source without that column keeps the card's count, and the line says it is GPT-2 tokens.
    The skipped documents
    (`--skip-documents`, CPT after a base run) count at the sampled tokens per document.
  - A local source by its text: counted through when its files are at most `PRECHECK_BYTES` (what `open_documents`
    reads through anyway), else its files' size in bytes; either times the tokens per text byte of its first
    `SAMPLE_DOCUMENTS` documents after the held-out ones, under the run's tokenizer.
  - Another Hub dataset is streamed and its size is not known here: no estimate, no line.
- A warning, not a refusal: repeating a small corpus is often what a smoke run or a fine-tune wants. The line says
  what to change for unique tokens.
- Short documents get their own line (`check_document_length`): packed documents are isolated from each other, so a
  median document under an eighth of --max-seq-length gives each token little context (a .txt read one line per document
  trained ~25-token fragments); measured on the same `SAMPLE_DOCUMENTS`.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from hf_encoderize.data.sources import PRECHECK_BYTES, DataConfig, Documents, local_bytes

SAMPLE_DOCUMENTS = 256  # documents tokenized to measure tokens per byte / per document
# Dataset card sizes (GPT-2 tokens) of the paper's corpus, section 2. None is the whole set ("default").
KNOWN_SOURCES = {
    ("HuggingFaceFW/fineweb-edu", "sample-10BT"): 10e9,
    ("HuggingFaceFW/fineweb-edu", "sample-100BT"): 100e9,
    ("HuggingFaceFW/fineweb-edu", "sample-350BT"): 350e9,
    ("HuggingFaceFW/fineweb-edu", "default"): 1.3e12,
    ("HuggingFaceFW/fineweb-edu", None): 1.3e12,
}


@dataclass
class TokenBudget:
    """A run's token need against its source's training tokens (both estimates)."""

    need: int
    holds: int
    source: str
    unit: str = ""
    """What `holds` counts when it is not the run's own tokens (a dataset card's GPT-2 count)."""

    @property
    def passes(self) -> float:
        return self.need / max(self.holds, 1)


def estimate_budget(cfg: DataConfig, documents: Documents, tokenizer, rows_per_step: int,
                    steps: int) -> TokenBudget | None:
    """The estimate (module docstring), or None for a source whose size is not known here."""
    need = int(steps) * int(rows_per_step) * int(cfg.seq_len)
    first = cfg.eval_documents + cfg.skip_documents
    # Sampled right after the held-out documents, not after the skipped ones: a stream is never read 95M documents
    # deep just to measure tokens per byte.
    sample = list(itertools.islice(iter(documents), cfg.eval_documents, cfg.eval_documents + SAMPLE_DOCUMENTS))
    if not sample:
        return None
    tokens = sum(len(ids) for ids in tokenizer(sample, add_special_tokens=False)["input_ids"])
    text_bytes = sum(len(text.encode("utf-8")) for text in sample)
    if cfg.data_files:
        size = local_bytes(cfg)
        if size <= PRECHECK_BYTES:  # small: count the training documents' text exactly
            size = sum(len(text.encode("utf-8")) for text in itertools.islice(iter(documents), first, None))
        holds = int(size * tokens / max(text_bytes, 1))
        return TokenBudget(need, holds, cfg.data_files)
    total = KNOWN_SOURCES.get((cfg.dataset, cfg.dataset_config))
    if total is None:
        return None
    ratio = run_tokens_per_card_token(cfg, documents, tokenizer)
    per_document = tokens / len(sample)
    holds = int(max(total * (ratio or 1.0) - (cfg.eval_documents + cfg.skip_documents) * per_document, 0))
    return TokenBudget(need, holds, f"{cfg.dataset} ({cfg.dataset_config or 'default'})",
                       "" if ratio else " GPT-2 tokens (the dataset card's count; no token_count column to convert)")


def run_tokens_per_card_token(cfg: DataConfig, documents, tokenizer) -> float | None:
    """The run's tokens per GPT-2 token on the sampled rows of a Hub source whose rows carry `token_count` (GPT-2
    counts, as FineWeb-Edu's), or None."""
    source = getattr(documents, "source", None)
    if source is None or documents.local:
        return None
    rows = (row for row in source if isinstance(row, dict) and isinstance(row.get(cfg.text_column), str)
            and row[cfg.text_column].strip())
    sample = list(itertools.islice(rows, cfg.eval_documents, cfg.eval_documents + SAMPLE_DOCUMENTS))
    counts = [row.get("token_count") for row in sample]
    if not sample or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in counts):
        return None
    ours = sum(len(ids) for ids in tokenizer([row[cfg.text_column] for row in sample],
                                             add_special_tokens=False)["input_ids"])
    return ours / sum(counts)


def check_token_budget(cfg: DataConfig, documents: Documents, tokenizer, rows_per_step: int, steps: int,
                       say: Callable[[str], None]) -> TokenBudget | None:
    """Estimate, and say in one `warning:` line when the run needs more tokens than its source holds."""
    budget = estimate_budget(cfg, documents, tokenizer, rows_per_step, steps)
    if budget is not None and budget.need > budget.holds:
        say(f"warning: this run reads about {_count(budget.need)} tokens ({steps} steps x {rows_per_step} rows x "
            f"{cfg.seq_len}) but {budget.source} holds about {_count(budget.holds)}{budget.unit} after the held-out "
            f"and skipped documents, so it makes about {budget.passes:.1f} passes and repeats tokens (the paper "
            f"trains on unique ones); for unique tokens {_larger_source(cfg)} or fewer --max-steps")
    return budget


def _larger_source(cfg: DataConfig) -> str:
    if cfg.data_files:
        return "add text to --data-files"
    return "use a larger source (e.g. --dataset-config sample-350BT)"


SHORT_DOCUMENT_FRACTION = 1 / 8  # below this share of --max-seq-length, the median document is a fragment of a row


def check_document_length(cfg: DataConfig, documents: Documents, tokenizer,
                          say: Callable[[str], None]) -> float | None:
    """Say in one `warning:` line when the median training document (of the first `SAMPLE_DOCUMENTS` after the
    held-out ones) is under an eighth of --max-seq-length; return that median in tokens (None: no document to
    measure)."""
    sample = list(itertools.islice(iter(documents), cfg.eval_documents, cfg.eval_documents + SAMPLE_DOCUMENTS))
    if not sample:
        return None
    median = statistics.median(len(ids) for ids in tokenizer(sample, add_special_tokens=False)["input_ids"])
    if median < cfg.seq_len * SHORT_DOCUMENT_FRACTION:
        text = cfg.reads_text_files()
        longer = {"line": "--text-unit paragraph (or file) keeps text that runs on across lines whole",
                  "paragraph": "--text-unit file makes each file one document"}.get(cfg.text_unit)
        hint = (f"the .txt files are read one {cfg.text_unit} per document; {longer}" if text and longer else
            "if one text was split into several rows or files, join them into whole documents")
        say(f"warning: the median training document is {median:g} tokens, under an eighth of --max-seq-length "
            f"{cfg.seq_len}: each is attention-isolated in its packed row, so tokens see little context; {hint}")
    return median


def _count(tokens: float) -> str:
    """1234 -> '1.2K', 99.1e9 -> '99.1B'."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= size:
            return f"{tokens / size:.1f}{unit}"
    return str(int(tokens))
