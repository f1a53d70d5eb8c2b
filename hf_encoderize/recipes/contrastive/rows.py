"""The training rows: read (local files or a streamed Hub dataset), columns checked and renamed to anchor,
positive[, negative], prefixes applied, and refused when no batch of distinct texts can be formed."""

from __future__ import annotations

from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.log import get_logger
from hf_encoderize.data.corpus_files import blank_file, dataset_patterns, diagnose_files, local_files
from hf_encoderize.recipes.contrastive.config import BUILDERS, ContrastiveConfig

log = get_logger(__name__)


def _columns(config: ContrastiveConfig) -> list[str]:
    if config.method in ("simcse", "distill"):  # one text column (distill: the teacher labels it)
        return [config.text_column] + ([config.negative_column] if config.negative_column else [])
    return [config.anchor_column, config.positive_column] + ([config.negative_column] if config.negative_column else [])

def load_rows(config: ContrastiveConfig):
    """The training rows as a `datasets.Dataset` with columns anchor, positive[, negative], prefixes applied."""
    import datasets

    datasets.disable_progress_bars()  # a bad-input run prints one error line, not a progress bar before it
    try:
        if config.data_files is not None:
            # cpt's reader finds the files (a folder, `~`, a glob, a name with brackets); contrastive also reads CSV
            files = local_files(config.data_files, BUILDERS)
            builder = {BUILDERS[Path(f).suffix] for f in files}
            if len(builder) > 1:
                raise EncoderizeError("--data-files mixes file types; pass one kind (JSON/JSONL, CSV, Parquet or .txt)")
            if all(blank_file(f) for f in files):  # datasets' JSON builder raises a bare StopIteration for these
                raise EncoderizeError(f"--data-files {config.data_files!r} holds no rows (empty or blank file"
                                      f"{'s' if len(files) > 1 else ''}); point it at your training data")
            try:
                rows = datasets.load_dataset(builder.pop(), data_files=dataset_patterns(files), split="train")
            except Exception as err:  # a bad line: name its file and line, as cpt does
                raise EncoderizeError(diagnose_files(files, err)) from None
        else:  # streamed, as cpt reads it: only the rows the stage uses are read (run's default corpus is 10B tokens)
            stream = datasets.load_dataset(config.dataset, config.dataset_config, split=config.split, streaming=True)
            rows = datasets.Dataset.from_list(list(stream.take(rows_used(config))), features=stream.features)
    except EncoderizeError:
        raise
    except Exception as err:  # unreadable file, unknown Hub dataset, offline Hub
        raise EncoderizeError(f"cannot read the training data: {type(err).__name__}: {' '.join(str(err).split())[:200]}"
                              ) from None
    wanted = _columns(config)
    missing = [c for c in wanted if c not in rows.column_names]
    if missing:
        hint = (" (supervised needs an anchor and a positive column: pairs or triplets)"
            if config.method == "supervised" else "")
        raise EncoderizeError(f"column(s) {', '.join(map(repr, missing))} not in the data (it has "
                              f"{', '.join(map(repr, rows.column_names))}); pass the column options{hint}")
    rows = rows.select_columns(wanted).filter(lambda row: all(isinstance(row[c], str) and row[c].strip()
                                                              for c in wanted))
    if config.max_rows:
        rows = rows.select(range(min(config.max_rows, len(rows))))
    check_negatives(rows, config)
    if len(rows) < 2:
        raise EncoderizeError(f"the training data has {len(rows)} usable row(s) with non-empty {', '.join(wanted)}; "
                              "in-batch negatives need at least 2")
    # With a lead, the prefixes are part of the prompts the trainer adds (left out of the pooling), not of the rows.
    query, document = ("", "") if config.lead_token else (config.query_prefix, config.document_prefix)
    if config.method in ("simcse", "distill"):  # the same text twice (simcse: dropout makes the views)
        text, negative = config.text_column, config.negative_column
        rows = rows.map(lambda row: {"anchor": query + row[text], "positive": document + row[text],
                                     **({"negative": document + row[negative]} if negative else {})},
                        remove_columns=[c for c in (text, negative) if c])  # datasets keeps what the map returns
        # The loss reads columns by position (anchor, positive, negative), not by name: a file whose negative column
        # came first would have trained the negative as the anchor.
        return rows.select_columns(["anchor", "positive"] + (["negative"] if negative else []))
    renamed = {config.anchor_column: "anchor", config.positive_column: "positive"}
    if config.negative_column:
        renamed[config.negative_column] = "negative"
    rows = rows.rename_columns({k: v for k, v in renamed.items() if k != v})
    return rows.map(lambda row: {key: (query if key == "anchor" else document) + value for key, value in row.items()})

def check_negatives(rows, config: ContrastiveConfig) -> None:
    """A negative equal to its row's anchor or positive asks the loss to push a text away from itself: refused when
    every row's is, a warning with the count when some are."""
    if not config.negative_column:
        return
    own = [config.text_column] if config.method in ("simcse", "distill") else [config.anchor_column,
                                                                                   config.positive_column]
    same = sum(1 for row in rows if row[config.negative_column] in {row[column] for column in own})
    where = f"--negative-column {config.negative_column!r}"
    if same == len(rows):
        raise EncoderizeError(f"{where}: every row's negative is the same text as its {' or '.join(own)}, so the "
                              "loss would push each text away from itself; point it at a column of other texts, or "
                              "drop it (the batch's other rows are negatives already)")
    if same:
        log.warning(f"{where}: {same} of {len(rows)} rows have a negative equal to their {' or '.join(own)}; those "
                    "rows push a text away from itself")


def rows_used(config: ContrastiveConfig) -> int:
    """How many rows a Hub dataset gives the stage: `--max-train-samples`, else one epoch of the run's steps (every
    process's batch), what the trainer would draw before repeating."""
    return config.max_rows or config.steps * config.batch_size * world_size()

def check_distinct(rows, config, after: str = "") -> None:
    """Refuse rows that cannot fill one batch without a repeated text: the sampler would yield no batch, and the run
    would train 0 steps. One greedy pass, stopped as soon as a batch fills. `after`: what made the rows (the line's
    opening words)."""
    needed = config.batch_size if len(rows) >= config.batch_size else 2  # fewer rows: one short batch (no drop_last)
    seen, fitting = set(), 0
    for row in rows:
        texts = set(row.values())
        if texts & seen:
            continue
        seen |= texts
        fitting += 1
        if fitting >= needed:
            return
    what = "distinct text(s)" if config.method in ("simcse", "distill") else "row(s) that share no text"
    advice = f"pass --batch-size {fitting} or less, or add texts" if fitting >= 2 else "add distinct texts"
    raise EncoderizeError(f"{after}the training data has {fitting} {what} for a batch of {config.batch_size} (a batch "
                          f"holds no text twice: a repeat would be a false negative), so no step would train; {advice}")
