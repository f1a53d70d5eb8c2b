"""Is a stage of `run` already done? Each check reads what the stage left in OUT and says whether it was made with
this invocation's settings.

Design choices:
- The folder is the state: a stage is skipped when its output is there and made the same way (cpt: the run record's
  `identity`, or the key subset a pre-0.2 record holds; contrastive: the stage's recorded config; eval: the summary's
  protocol and grid; push: a fingerprint of the pushed files). A finished stage made otherwise is a one-line error
  rather than two runs mixed in one folder; eval instead re-runs and reuses only its matching fine-tuning runs.
- Records are read through their types (`RunRecord`, `ContrastiveRecord`, `EvalSummary`, `PushRecord`), by attribute.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD, RunFolder
from hf_encoderize.records.contrastive_record import ContrastiveRecord
from hf_encoderize.records.eval_summary import EvalSummary
from hf_encoderize.records.push_record import PushRecord
from hf_encoderize.records.run_record import RunRecord
from hf_encoderize.records.run_settings import DataFacts

# What a finished cpt recorded before 0.2 (no `identity` in its run record) must share with this invocation.
LEGACY_CPT_IDENTITY = ("base_model", "gguf_file", "revision", "phases", "mask_ratio", "steps", "lr", "batch_size")
LEGACY_DATA_IDENTITY = ("dataset", "dataset_config", "split", "data_files", "text_column", "seq_len")


def cpt_done(out: Path, load, data, masking, train, adapter) -> bool:
    """True when OUT holds a finished cpt made with these settings; a one-line error when it was made otherwise (other
    model, data, sequence length, seed, masking, schedule, precision, ...: every field that counts for a resume)."""
    folder = RunFolder(out)
    record = RunRecord.from_json(folder.run_record)
    if record is None or not (folder.encoder / "config.json").is_file():
        return False
    differs = cpt_differences(record, load, data, masking, train, adapter)
    if differs:
        raise EncoderizeError(f"{str(out)!r} holds a finished cpt with other settings ({'; '.join(differs)}); "
                              "pass --overwrite to start over or pick a new --output-dir")
    return True


def cpt_differences(record: RunRecord, load, data, masking, train, adapter) -> list[str]:
    """How this invocation differs from the finished cpt `record` (`common.identity`; the key subset an older record
    holds). What cpt resolves itself is not compared against an unset option: packing (`--pack` unset: the probe
    decides) and gradient accumulation (`--tokens-per-step`: derived from the launch's processes)."""
    from hf_encoderize.common.identity import identity_of, settings_diff
    from hf_encoderize.data.corpus_files import identity_as_today

    if record.identity:
        ignore = ((("data.pack",) if data.pack is None else ()) +
            (("train.grad_accum",) if train.tokens_per_step else ()))
        before = identity_as_today(record.identity, record.data.data_files if record.data else None)
        return settings_diff(before, identity_of(load, data, masking, train, adapter),
                             ignore=ignore)
    wanted = {"base_model": load.source, "gguf_file": load.gguf_file, "revision": load.revision,
              "phases": masking.masking_target, "mask_ratio": masking.mask_ratio, "steps": train.steps, "lr": train.lr,
              "batch_size": train.batch_size}
    recorded = {key: getattr(record, key) for key in LEGACY_CPT_IDENTITY}  # typed fields, read in today's words
    data_facts = record.data or DataFacts()
    recorded.update({f"data.{key}": getattr(data_facts, key) for key in LEGACY_DATA_IDENTITY})
    wanted.update({f"data.{key}": getattr(data, key) for key in LEGACY_DATA_IDENTITY})
    return settings_diff(recorded, wanted)


def contrastive_done(config, out: Path) -> str | None:
    """"finished earlier" when OUT/contrastive was made with `config` (the stage's `ContrastiveConfig`); None when
    there is none (or it was cut short); a one-line error when it was made otherwise (another method, data, ...)."""
    from hf_encoderize.common.identity import identity_of, settings_diff

    folder = RunFolder(out)
    record = ContrastiveRecord.from_json(folder.contrastive / CONTRASTIVE_RECORD)
    if record is None or not (folder.contrastive / "config.json").is_file():
        return None
    from hf_encoderize.recipes.contrastive import recorded_settings

    # data_files by content, as trained (the stage's data_identity): an edit in place is other data
    differs = settings_diff(recorded_settings(record.config, record.stage_facts().to_dict()),
                            identity_of(config, prefixed=False))
    if differs:
        raise EncoderizeError(f"{str(folder.contrastive)!r} holds an embedding model made with other settings "
                              f"({'; '.join(differs)}); pass --overwrite to start over or pick a new --output-dir")
    return "finished earlier"


def eval_done(results: Path, load, config) -> bool:
    """True when `results` holds a summary of this very evaluation: same model, profile, attention mode, protocol and
    grid (datasets, learning rates, seeds).
    Otherwise the stage runs: `evaluate` reuses only the fine-tuning runs whose fingerprint matches and rewrites the
    summary, so an old summary is never shown under new labels."""
    from hf_encoderize.evaluation.config import lr_key
    from hf_encoderize.evaluation.grid import FINGERPRINT_KEYS, fingerprint, protocol_differences

    summary = EvalSummary.from_json(results / "summary.json")
    if summary is None:
        return False
    wanted = fingerprint(load, config)
    protocol = summary.protocol
    expected = {key: wanted[key] for key in (*FINGERPRINT_KEYS, "model", "mode", "frozen") if key in wanted}
    same_protocol = not protocol_differences({**protocol.to_dict(), "model": summary.model, "mode": summary.mode},
                                             expected)
    grid = config.grid()  # the grid counts too: a summary of other seeds or learning rates is another evaluation
    same_grid = ({lr_key(lr) for lr in protocol.lrs or []} == {lr_key(lr) for lr in grid.lrs} and
        set(protocol.seeds or []) == set(grid.seeds) and
        {entry.dataset for entry in summary.results} == set(grid.datasets))
    return summary.profile == config.profile and same_protocol and same_grid


def card_kept(out: Path) -> str | None:
    from hf_encoderize.model.saving import encoder_dir
    from hf_encoderize.publish.card import is_generated_card

    readme = encoder_dir(out) / "README.md"
    return None if is_generated_card(readme) else f"{readme} was written by hand, kept"


def files_fingerprint(files: list[Path]) -> str:
    """Changes when a pushed file changes: content for small files (a regenerated but identical card counts as
    unchanged), size and modification time for weights."""
    digest = hashlib.sha256()
    for path in sorted(files):
        stat = path.stat()
        if stat.st_size < 10_000_000:
            digest.update(f"{path}:".encode() + hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def pushed_files(out: Path) -> list[Path]:
    from hf_encoderize.model.saving import encoder_dir
    from hf_encoderize.publish.card import plot_files

    return [p for p in encoder_dir(out).rglob("*") if p.is_file()] + [out / p for p in plot_files(out)]


def push_done(out: Path, hub) -> str | None:
    """Why the push can be skipped: the same files already went to the same repo and revision."""
    record = PushRecord.from_json(RunFolder(out).push_record)
    if record is None:
        return None
    same_target = (record.repo_id, record.revision) == (hub.push_to_hub, hub.hub_revision or "main")
    unchanged = record.fingerprint == files_fingerprint(pushed_files(out))
    return f"{hub.push_to_hub} already has these files" if same_target and unchanged else None
