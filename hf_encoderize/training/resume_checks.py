"""A run's settings, kept next to its checkpoints (`run_settings.json`): what a resume or a branch must share.

Design choices:
- The settings are the run record's facts (derived values such as the resolved grad_accum) plus `identity`: every
  config field that counts for "same run?", as declared on the field (`common.identity`). A resume or a branch
  compares them with the run's and names each that differs, in one line.
- The one change allowed is the length (`steps`, `decay_steps`): a resume of an extendable run (cpt) may train longer,
  a branch may end elsewhere, as long as the checkpoint lies before every decay involved: up to it, the runs took the
  same updates on the same data.
- An older run's settings are read in today's terms (`_as_now`: a decay fraction, an identity before data names,
  the keys before issue 70's rename).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, LENGTH, names_of, settings_diff
from hf_encoderize.common.run_folder import read_json
from hf_encoderize.data.corpus_files import identity_as_today
from hf_encoderize.records.run_settings import lift_old_keys
from hf_encoderize.training.checkpoints import check_checkpoint_files
from hf_encoderize.training.train_config import TrainConfig

SETTINGS_FILE = "run_settings.json"  # the settings a resume must keep (next to checkpoints/)
# Settings that cannot change the updates (speed, memory, logging, paths), as declared on TrainConfig's fields.
HARMLESS_CHANGES = names_of(TrainConfig, HARMLESS)
IDENTITY = "identity"  # the settings' key holding `identity_of(configs)`: every config field that counts


def recorded_decay_steps(settings: dict) -> int:
    """The decay length a recorded run used; runs recorded before `decay_steps` existed kept a fraction."""
    if settings.get("decay_steps") is not None:
        return int(settings["decay_steps"])
    return max(1, round(int(settings["steps"]) * float(settings.get("decay_fraction") or 0.0)))


def _as_now(before: dict) -> dict:
    """An older run's settings in today's terms, so a resume compares like with like (kept for old runs)."""
    before = lift_old_keys(before)
    if isinstance(before.get(IDENTITY), dict):
        before = {**before, IDENTITY: identity_as_today(before[IDENTITY], (before.get("data") or {}).get("data_files"))}
    if "decay_steps" in before or "decay_fraction" not in before:
        return before
    return {**{k: v for k, v in before.items() if k != "decay_fraction"}, "decay_steps": recorded_decay_steps(before)}


def check_resume_settings(output_dir: Path, settings: dict, step: int | None, *, extendable: bool,
                          main_process: bool = True, written: dict | None = None) -> None:
    """Refuse a resume whose settings differ from the run's (one line naming each field), then record the settings
    (`written`, when given: all of them, those a resume does not compare included, such as the options given).

    The one safe change is a larger `steps` (`extendable` runs only, before the run's decay began), with its own decay
    length: the WSD schedule is rebuilt over the new length, so the stable phase continues and the decay moves to the
    new end."""
    path = Path(output_dir) / SETTINGS_FILE
    if step is not None and not path.is_file():  # a checkpoint of unknown settings: any --seed would "continue" it
        raise EncoderizeError(f"--resume: {str(output_dir)!r} holds a checkpoint (step {step}) but no {SETTINGS_FILE}, "
                              "so nothing says which settings it was made with; start a new --output-dir")
    if step is not None:
        before = _as_now(json.loads(path.read_text()))
        now = json.loads(json.dumps(settings, default=str))
        # a longer run may decay over another length: its decay starts after the checkpoint (`_check_new_length`)
        lengths = ("steps", "decay_steps") if before.get("steps") != now.get("steps") else ("steps",)
        changed = _changed(before, now, lengths)
        if changed:
            raise EncoderizeError(f"--resume with other settings than the run's ({'; '.join(changed)}); resume with "
                                  "the same ones, or start a new --output-dir")
        _check_new_length(before, now, step, extendable)
    if main_process:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings if written is None else written, indent=2, default=str) + "\n")


def keep_recorded_warmup(output_dir: Path, train: TrainConfig) -> TrainConfig:
    """`train` for a resume: without --warmup-steps, the warmup the run record holds. The default follows
    --max-steps (a fifth of a short run), so extending a run would otherwise change its warmup, and be refused for it;
    a --warmup-steps given is kept, and compared with the record as any setting is."""
    path = Path(output_dir) / SETTINGS_FILE
    if train.warmup_steps is not None or train.warmup_ratio is not None or not path.is_file():
        return train
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return train  # an unreadable record is refused by `check_resume_settings`, with its own message
    warmup = (before.get(IDENTITY) or {}).get("train.warmup_steps", before.get("warmup_steps"))
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup > train.steps:
        return train  # nothing usable recorded, or a shorter run's: the comparison says what differs
    return dataclasses.replace(train, warmup_steps=warmup)


def _changed(before: dict, now: dict, lengths: tuple[str, ...]) -> list[str]:
    """The settings that differ, named: the recorded facts (derived values such as the resolved grad_accum), then
    every config field that counts (`identity`, recorded since 0.2; older runs hold only the facts)."""
    length_fields = tuple(f"train.{name}" for name in names_of(TrainConfig, LENGTH))
    changed = settings_diff(before.get(IDENTITY) or {}, now.get(IDENTITY) or {}, ignore=length_fields)
    # Facts the identity compares already (a field, or the `data` block of fields) are named once, as fields.
    named = {part for key in before.get(IDENTITY) or {} for part in (key.split(".")[0], key.split(".")[-1])}
    facts = {k: v for k, v in now.items() if k != IDENTITY and k not in named}
    return changed + settings_diff({k: before.get(k) for k in facts}, facts, ignore=HARMLESS_CHANGES + lengths)


def _check_new_length(before: dict, now: dict, step: int, extendable: bool) -> None:
    old, new = before.get("steps"), now.get("steps")
    if old == new:
        return
    if not extendable or new < old:
        allowed = "a larger --max-steps" if extendable else "no other --max-steps"
        raise EncoderizeError(f"--resume: the run has --max-steps {old}, this asks for {new}; a resume allows "
                              f"{allowed}")
    decay_start = old - recorded_decay_steps(before)
    if step > decay_start:
        raise EncoderizeError(f"--resume --max-steps {new}: the checkpoint (step {step}) is past the start of the "
                              f"run's learning-rate decay (step {decay_start}); extending would raise the LR again. "
                              f"Resume with --max-steps {old}, or branch a new run")
    new_start = new - recorded_decay_steps(now)
    if step > new_start:  # the longer run's own decay: it would begin behind the checkpoint, and the LR drop at once
        raise EncoderizeError(f"--resume: the longer run's learning-rate decay ({new - new_start} steps) would start "
                              f"at step {new_start}, before the checkpoint (step {step}), so the LR would drop at "
                              f"once; pass --decay-steps {new - step} or less")


def check_branch_settings(checkpoint: Path, settings: dict, model=None) -> int:
    """Refuse a branch point the unbroken run would not pass through; return its step.

    The source run's recorded settings must equal this run's but for the length (`steps`, `decay_steps`), and the
    checkpoint must lie before both runs' decays: up to it, the two runs took the same updates on the same data. Its
    files must be readable (`check_checkpoint_files`, against `model`'s shapes)."""
    checkpoint = Path(checkpoint)
    record = checkpoint.parent.parent / SETTINGS_FILE
    if not record.is_file():
        raise EncoderizeError(f"--from-checkpoint {str(checkpoint)!r} has no {SETTINGS_FILE} beside its checkpoints/ "
                              "folder; branch only from checkpoints of an hf-encoderize run")
    step = check_checkpoint_files(checkpoint, model)
    before = _as_now(read_json(record))
    now = json.loads(json.dumps(settings, default=str))
    changed = _changed(before, now, ("steps", "decay_steps"))
    if changed:
        raise EncoderizeError(f"--from-checkpoint: the source run differs ({'; '.join(changed)}); branch with the "
                              "same settings")
    if step >= now["steps"]:
        raise EncoderizeError(f"--from-checkpoint is at step {step}, not before --max-steps {now['steps']}; nothing "
                              "to do")
    earliest = min(before["steps"] - recorded_decay_steps(before), now["steps"] - now["decay_steps"])
    if step > earliest:
        raise EncoderizeError(f"--from-checkpoint step {step} is past the start of a learning-rate decay (step "
                              f"{earliest}); branch from an undecayed checkpoint, as the paper does")
    return step
