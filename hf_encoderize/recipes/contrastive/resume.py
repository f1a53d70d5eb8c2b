"""Resuming the contrastive stage: its work folder, the settings a resume must keep, the newest whole checkpoint.

Design choices:
- The work folder `.NAME.work/` beside the output holds the trainer's checkpoints (`trainer/checkpoint-STEP`) and the
  run's `settings.json`; it goes once the embedding model is written, and stays when the run is interrupted.
- A resume keeps every setting that counts (`common.identity`: both the stage's and the adapter's fields), compared by
  the one `settings_diff`, so a changed `--lora-alpha` is refused in one line as cpt refuses its own.
- transformers' Trainer writes a checkpoint in place (no temporary name), `trainer_state.json` last, and resumes from
  the highest step it finds. A checkpoint cut short (kill -9 mid-save, a full disk) lacks that file or holds a
  truncated weight or optimizer file, and would fail deep inside the Trainer's load. So before a resume the checkpoints
  are checked newest first, as cpt's `resume_newest` does: broken ones above the newest whole one are set aside as
  `checkpoint-STEP.corrupt` in the work folder (out of the Trainer's sight), with one warning line each.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import identity_of, settings_diff

STATE_FILE = "trainer_state.json"  # transformers' Trainer writes it last: a checkpoint without it was cut short
NEEDED = ("optimizer.pt", "scheduler.pt")  # without them the Trainer resumes with a fresh optimizer, not the same run


def work_dir(output_dir: str | os.PathLike) -> Path:
    """`.NAME.work/` beside the output: the trainer's checkpoints while the stage runs (kept if it is interrupted)."""
    out = Path(output_dir)
    return out.parent / f".{out.name}.work"


def checkpoints(work: Path) -> list[Path]:
    """The Trainer's `checkpoint-STEP` folders under `work/trainer`, oldest first."""
    found = [p for p in (work / "trainer").glob("checkpoint-*") if p.is_dir() and p.name.rpartition("-")[2].isdigit()]
    return sorted(found, key=lambda path: int(path.name.rpartition("-")[2]))


def settings_of(config, adapter) -> dict:
    """What a resume must keep: every field of both configs that counts (`common.identity`), unprefixed as the
    settings.json of runs before 0.2 recorded them (those hold no adapter fields: not compared then)."""
    return identity_of(config, adapter, prefixed=False)


def recorded_settings(settings: dict, stage: dict | None = None) -> dict:
    """A recorded `settings_of` (settings.json) or a finished stage's config (its record's `config`, with the
    `data_identity` and `teacher_identity` its `stage` holds) in today's terms: `data_files` and a local `teacher` by
    content, the method under its name (`objective` before). A record from before holds the path text: the files as
    they are now stand for it (such a record cannot tell an edit in place)."""
    from hf_encoderize.data.corpus_files import content_identity, whole_file_identity
    from hf_encoderize.recipes.contrastive.config import teacher_identity

    if "objective" in settings and "method" not in settings:  # recorded before the field was named `method`
        settings = {("method" if key == "objective" else key): value for key, value in settings.items()}
    settings = _teacher_as_today(settings, stage, teacher_identity)
    recorded = (stage or {}).get("data_identity", settings.get("data_files"))
    if isinstance(recorded, list) and isinstance(settings.get("data_files"), str):  # first-MiB hashes, as once recorded
        recorded = whole_file_identity(recorded, settings["data_files"])
    return ({**settings, "data_files": content_identity(recorded) if isinstance(recorded, str) else recorded}
            if "data_files" in settings else settings)


def _teacher_as_today(settings: dict, stage: dict | None, teacher_identity) -> dict:
    """The recorded teacher as content (`teacher_identity`): the finished stage's `teacher_identity`, a settings.json
    of today's (already content: `sha256:...`), or a path recorded before content counted, read as it is now."""
    recorded = (stage or {}).get("teacher_identity", settings.get("teacher"))
    if not isinstance(recorded, str) or recorded.startswith("sha256:"):
        return settings if "teacher" not in settings else {**settings, "teacher": recorded}
    return {**settings, "teacher": teacher_identity(recorded)}

def check_resume(config, adapter, work: Path) -> list[Path]:
    """Refuse --resume without a whole checkpoint or with other settings; refuse a fresh start over an interrupted
    run. Returns the broken checkpoints above the newest whole one (`set_aside` moves them before training)."""
    saved, recorded = checkpoints(work), work / "settings.json"
    # The advice never loops: --resume is offered only where a checkpoint is, and without one both messages send
    # the user to --overwrite, which starts over (and works).
    if not config.resume:
        if work.exists() and not config.overwrite:
            if saved and recorded.is_file():
                raise EncoderizeError(f"{str(work)!r} holds an interrupted contrastive run; pass --resume to continue "
                                      "it or --overwrite to start over")
            raise EncoderizeError(f"{str(work)!r} holds a contrastive run stopped before its first checkpoint; pass "
                                  "--overwrite to start over")
        return []
    if not saved or not recorded.is_file():
        start = "without --resume and with --overwrite to start over" if work.exists() else "without --resume to start"
        raise EncoderizeError(f"--resume: no checkpoint of an interrupted run in {str(work)!r}; run {start}")
    try:
        before = json.loads(recorded.read_text())
    except (OSError, ValueError):
        raise EncoderizeError(f"--resume: {str(recorded)!r} cannot be read; start over with --overwrite") from None
    changed = settings_diff(recorded_settings(before), settings_of(config, adapter))
    if changed:
        raise EncoderizeError(f"--resume with other settings than the run's ({'; '.join(changed)}); resume with the "
                              "same ones")
    broken = []
    for path in reversed(saved):
        problem = checkpoint_problem(path)
        if problem is None:
            return broken
        broken.append((path, problem))
    raise EncoderizeError(f"--resume: no checkpoint in {str(work / 'trainer')!r} is whole (newest: "
                          f"{broken[0][0].name}, {broken[0][1]}); start over with --overwrite")


def checkpoint_problem(path: Path) -> str | None:
    """Why the Trainer cannot resume from the checkpoint at `path`, in a few words; None when it is whole."""
    from safetensors import safe_open

    try:
        json.loads((path / STATE_FILE).read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no readable {STATE_FILE}: cut short while saving"
    missing = [name for name in NEEDED if not (path / name).is_file()]
    weights = sorted(path.rglob("*.safetensors"))
    if missing or not weights:
        return f"{', '.join(missing) or 'its weights'} missing"
    for file in weights:
        try:
            with safe_open(str(file), framework="pt"):
                pass  # the header covers the whole file: a truncated one fails here
        except Exception:
            return f"{file.name} is truncated or unreadable"
    for file in sorted([*path.glob("*.pt"), *path.glob("*.pth"), *path.glob("*.bin")]):
        if not zipfile.is_zipfile(file):  # torch.save's zip: a cut file has no central directory
            return f"{file.name} is truncated or unreadable"
    return None


def set_aside(broken: list, work: Path) -> None:
    """Move broken checkpoints out of the Trainer's sight, as `checkpoint-STEP.corrupt` in the work folder (main
    process), saying so in one line each."""
    for path, problem in broken:
        kept = next(work / f"{path.name}.corrupt{suffix}" for suffix in ["", *range(2, 10**6)]
                    if not (work / f"{path.name}.corrupt{suffix}").exists())
        path.rename(kept)
        print(f"warning: checkpoint {str(path)!r} cannot be resumed from ({problem}); kept as {kept.name}, resuming "
              "from the one before", file=sys.stderr, flush=True)
