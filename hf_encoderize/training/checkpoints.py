"""Run folders and training checkpoints: refuse to clobber, save atomically, keep the last K, resume the newest.

Design choices:
- A checkpoint is `accelerator.save_state` (model as safetensors, optimizer, every process's RNG; all read back with
  torch's `weights_only` loader) plus `trainer_state.json`: the step and the state of every object registered here with
  `register_state` (the WSD scheduler, the row stream's position in every lane), as plain JSON. Nothing is registered
  with Accelerate's own custom-state mechanism, because it unpickles those files with `weights_only=False`: a replaced
  checkpoint file would run code on `--resume` or `pretrain --from-checkpoint`. It is written
  under `step-N.partial` and renamed into place once every process has written its part, so a crash never leaves a
  half-written checkpoint that `--resume` would pick.
- `checkpoints/` keeps the last `keep_last`; other folders (pretrain's `switch/`) are kept whole, never resumed from.
- Several machines must share the run folder (a network filesystem): the model and optimizer files are written by
  the main process (DDP) or as shards by every process (FSDP/ZeRO-3), and `--resume` needs all of them on every
  node. `check_shared_output_dir` proves the sharing at start-up and refuses a run that could not resume.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
import weakref
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, LENGTH, names_of, settings_diff
from hf_encoderize.common.outputs import check_output_dir, clear_for_run
from hf_encoderize.common.run_folder import RunFolder, read_json
from hf_encoderize.data.sources import identity_as_today
from hf_encoderize.training.train_config import TrainConfig

STATE_FILE = "trainer_state.json"
SETTINGS_FILE = "run_settings.json"  # the settings a resume must keep (next to checkpoints/)
# Settings that cannot change the updates (speed, memory, logging, paths), as declared on TrainConfig's fields.
HARMLESS_CHANGES = names_of(TrainConfig, HARMLESS)
IDENTITY = "identity"  # the settings' key holding `identity_of(configs)`: every config field that counts


def checkpoint_dir(output_dir: Path, step: int, folder: str = "checkpoints") -> Path:
    """`OUT/checkpoints/step-0000042` (zero-padded, so names sort by step)."""
    return Path(output_dir) / folder / f"step-{step:07d}"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Finished checkpoints under `OUT/checkpoints`, oldest first."""
    found = [p for p in RunFolder(output_dir).checkpoints.glob("step-*") if re.fullmatch(r"step-\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))  # not step-N.partial, not step-N.corrupt


def prepare_output_dir(output_dir: Path, *, resume: bool, overwrite: bool, inputs=(),
                       main_process: bool = True) -> Path | None:
    """Return the checkpoint to resume from (or None), refusing what the output-folder policy refuses
    (`common.outputs`: a folder we did not write, an input, the working folder, a live run's folder). Deletes nothing:
    call `clear_output_dir` once the model, data and options have been validated, so a typo never costs a folder.
    `inputs`: the command's local inputs (`outputs.input_paths`); `main_process`: the one that looks at the lock."""
    out = Path(output_dir)
    found = list_checkpoints(out) if out.is_dir() else []
    # --resume is advised only where it works: a run stopped before its first checkpoint (a run record, metrics, no
    # checkpoint) is started over, and the --resume refusal says so, so the two messages never send the user in a loop.
    check_output_dir(out, overwrite=overwrite, resume=resume, inputs=inputs, check_lock=main_process,
                     resumable=bool(found))
    if resume:
        if not found:
            raise EncoderizeError(f"--resume: no checkpoint under {str(out / 'checkpoints')!r} (the run stopped before "
                                  "its first one); start over with --overwrite, or pick a new --output-dir")
        return found[-1]
    return None


def clear_output_dir(output_dir: Path, *, overwrite: bool, main_process: bool = True, command: str = "cpt",
                     resume: bool = False) -> None:
    """After everything was validated: with `overwrite`, empty the earlier run of ours; then mark the folder as
    `command`'s and take its lock (main process; `wait_for_everyone()` afterwards). `outputs.finish_run` gives the
    lock back when the save is done."""
    if main_process:
        clear_for_run(output_dir, command, overwrite=overwrite, resume=resume)


def check_shared_output_dir(accelerator, output_dir: Path) -> None:
    """With several processes, refuse (on every rank, in one line) an output folder that they do not all see: the
    main process writes a file with a fresh token and every process reads it back."""
    import secrets

    import torch
    from accelerate.utils import broadcast_object_list

    if accelerator.num_processes == 1:
        return
    token = [secrets.token_hex(8) if accelerator.is_main_process else None]
    broadcast_object_list(token)
    probe = Path(output_dir) / f".shared-{token[0]}"
    created = not probe.parent.exists()
    if accelerator.is_main_process:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(token[0])
    accelerator.wait_for_everyone()
    seen = probe.is_file() and probe.read_text() == token[0]
    missing = int(accelerator.reduce(torch.tensor([0 if seen else 1], device=accelerator.device), "sum").item())
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        probe.unlink(missing_ok=True)
        if created and not any(probe.parent.iterdir()):
            probe.parent.rmdir()  # the folder is made by the run itself, after its inputs are validated
    if missing:
        raise EncoderizeError(f"{missing} of {accelerator.num_processes} processes cannot see {str(output_dir)!r}: on "
                              "several machines --output-dir must be on a filesystem they all share (NFS, Lustre, ...)"
                              ", or checkpoints could not be resumed")


_REGISTERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # accelerator -> {name: stateful object}


def register_state(accelerator, name: str, stateful) -> None:
    """Checkpoint `stateful` (`state_dict`/`load_state_dict` of JSON values or tensors) with `accelerator`'s state."""
    _REGISTERED.setdefault(accelerator, {})[name] = stateful


def _to_json(value):
    if torch.is_tensor(value):
        return {"__tensor__": base64.b64encode(value.cpu().contiguous().numpy().tobytes()).decode(),
                "dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape)}
    if isinstance(value, dict):
        return {key: _to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    return value


def _from_json(value):
    if isinstance(value, dict) and "__tensor__" in value:
        data = bytearray(base64.b64decode(value["__tensor__"]))
        return torch.frombuffer(data, dtype=getattr(torch, value["dtype"])).reshape(value["shape"]).clone()
    if isinstance(value, dict):
        return {key: _from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    return value


def save_checkpoint(accelerator, folder: Path, step: int) -> Path:
    """Write the full training state to `folder` under a temporary name, then rename it into place."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".partial")
    accelerator.save_state(str(tmp))
    states = {name: _to_json(state_of(accelerator, obj)) for name, obj in _REGISTERED.get(accelerator, {}).items()}
    accelerator.wait_for_everyone()  # every rank has written its shard/RNG file before the rename
    if accelerator.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps({"step": step, "states": states}))
        tmp.rename(folder)
    accelerator.wait_for_everyone()
    return folder


def state_of(accelerator, stateful) -> dict:
    """`stateful`'s state; for one whose state is split over processes (`sharded_state`, e.g. the row stream, where
    each process holds its own lanes), every process's part, merged (a collective: call on every process)."""
    state = stateful.state_dict()
    if getattr(stateful, "sharded_state", False) and accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        merged = {}
        for part in gather_object([state]):
            merged.update(part)
        state = merged
    return state


def prune_checkpoints(output_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints under `OUT/checkpoints` (main process only)."""
    for old in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def checkpoint_step(path: Path) -> int:
    return int(json.loads((Path(path) / STATE_FILE).read_text())["step"])


def claimed_step(path: Path) -> int:
    """The step a checkpoint says it holds, for checks made before loading it (0 when its state file cannot be read:
    `resume_newest` then falls back to an older one)."""
    try:
        return checkpoint_step(path)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def load_checkpoint(accelerator, path: Path) -> int:
    """Restore everything registered with `accelerator` from the branch point `path`; return the step it was taken
    at. A file that cannot be read (cut short, tampered with: another model's shapes) is one line naming it."""
    try:
        return _load_checkpoint(accelerator, path)
    except EncoderizeError:
        raise
    except Exception as err:  # noqa: BLE001 - safetensors, torch and accelerate raise many types; all mean "unreadable"
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise EncoderizeError(f"--from-checkpoint {str(path)!r} could not be loaded ({reason}); pass a checkpoint that "
                              "was written whole, such as the one before it") from None


def _load_checkpoint(accelerator, path: Path) -> int:
    path = Path(path)
    saved = json.loads((path / STATE_FILE).read_text())
    registered = _REGISTERED.get(accelerator, {})
    if set(saved.get("states", {})) != set(registered):
        raise EncoderizeError(f"{str(path)!r} was written by another version of hf-encoderize (training state "
                              f"{sorted(saved.get('states', {})) or 'missing'}); finish it with that version, or start "
                              "over with --overwrite")
    accelerator.load_state(str(path))
    for name, obj in registered.items():
        obj.load_state_dict(_from_json(saved["states"][name]))
    return int(saved["step"])


def check_checkpoint_files(path: Path, model=None) -> int:
    """Read a branch point's files before anything is written, without loading them into the model: its step from
    trainer_state.json, every safetensors header (a file cut short does not cover its tensors) and its shapes against
    `model`'s, every torch file's archive. One line names the first file that cannot be read; returns the step."""
    from safetensors import safe_open

    path = Path(path)

    def refuse(file: Path, reason: str):
        return EncoderizeError(f"--from-checkpoint: {str(file)!r} {reason}; the checkpoint was cut short or "
                               "edited: pass another checkpoint (such as the one before it)")

    try:
        saved = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
        step = int(saved["step"])
        if not isinstance(saved.get("states", {}), dict):
            raise TypeError("states is not an object")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise refuse(path / STATE_FILE, f"cannot be read ({type(err).__name__}: {str(err)[:120]})") from None
    shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()} if model is not None else {}
    for file in sorted(path.rglob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as weights:
                found = {key: tuple(weights.get_slice(key).get_shape()) for key in weights.keys()}
        except Exception as err:  # noqa: BLE001 - SafetensorError and OSError: the file is not whole
            raise refuse(file, f"cannot be read ({str(err).splitlines()[0][:120] if str(err) else type(err).__name__})"
                         ) from None
        # The file holds the training wrapper's keys (`model.` + the model's own); a key neither way is not compared.
        wanted = {key: shapes.get(key, shapes.get(key.removeprefix("model."))) for key in found}
        wrong = [key for key, shape in found.items() if wanted[key] is not None and shape != wanted[key]]
        if wrong:
            raise refuse(file, f"holds {wrong[0]} of shape {list(found[wrong[0]])}, not this model's "
                               f"{list(wanted[wrong[0]])}")
    for file in sorted(path.rglob("*.bin")):
        try:
            torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except Exception as err:  # noqa: BLE001 - a cut archive or a pickle that weights_only refuses
            raise refuse(file, f"cannot be read ({str(err).splitlines()[0][:120] if str(err) else type(err).__name__})"
                         ) from None
    return step


def resume_newest(accelerator, output_dir: Path) -> int:
    """Load the newest checkpoint under `OUT/checkpoints` that loads; return its step.

    A checkpoint that fails to load (truncated file, missing shard) is kept, renamed `step-N.corrupt` so the resumed
    run can write a new `step-N`, and one line on stderr says which was skipped and why."""
    import sys

    for path in reversed(list_checkpoints(output_dir)):
        try:
            return _load_checkpoint(accelerator, path)
        except EncoderizeError:
            raise
        except Exception as err:  # any failure to read it means: try the one before
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                kept = next(path.with_name(f"{path.name}.corrupt{suffix}") for suffix in ["", *range(2, 10**6)]
                            if not path.with_name(f"{path.name}.corrupt{suffix}").exists())
                path.rename(kept)
                print(f"warning: checkpoint {str(path)!r} could not be loaded ({reason}); kept as {kept.name}, "
                      "resuming from the one before", file=sys.stderr, flush=True)
            accelerator.wait_for_everyone()
    raise EncoderizeError(f"--resume: no checkpoint under {str(Path(output_dir) / 'checkpoints')!r} could be loaded; "
                          "start over with --overwrite")


def recorded_decay_steps(settings: dict) -> int:
    """The decay length a recorded run used; runs recorded before `decay_steps` existed kept a fraction."""
    if settings.get("decay_steps") is not None:
        return int(settings["decay_steps"])
    return max(1, round(int(settings["steps"]) * float(settings.get("decay_fraction") or 0.0)))


def _as_now(before: dict) -> dict:
    """An older run's settings in today's terms, so a resume compares like with like (kept for old runs)."""
    if isinstance(before.get(IDENTITY), dict):
        before = {**before, IDENTITY: identity_as_today(before[IDENTITY], (before.get("data") or {}).get("data_files"))}
    if "decay_steps" in before or "decay_fraction" not in before:
        return before
    return {**{k: v for k, v in before.items() if k != "decay_fraction"}, "decay_steps": recorded_decay_steps(before)}


def check_resume_settings(output_dir: Path, settings: dict, step: int | None, *, extendable: bool,
                          main_process: bool = True) -> None:
    """Refuse a resume whose settings differ from the run's (one line naming each field), then record the settings.

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
        path.write_text(json.dumps(settings, indent=2, default=str) + "\n")


def keep_recorded_warmup(output_dir: Path, train: TrainConfig) -> TrainConfig:
    """`train` for a resume: without --warmup-steps, the warmup the run record holds. The default follows
    --max-steps (a fifth of a short run), so extending a run would otherwise change its warmup, and be refused for it;
    a --warmup-steps given is kept, and compared with the record as any setting is."""
    path = Path(output_dir) / SETTINGS_FILE
    if train.warmup_steps is not None or not path.is_file():
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


def inherit_metrics(checkpoint: Path, output_dir: Path) -> None:
    """A branch starts its metrics.jsonl with the source run's lines up to the branch point, so its loss curve and
    tokens seen read like the unbroken run's."""
    step = claimed_step(checkpoint)
    source = RunFolder(Path(checkpoint).parent.parent).metrics
    if source.is_file():
        from hf_encoderize.training.monitor import json_line, read_metrics  # read_metrics drops a cut last line

        kept = [r for r in read_metrics(source) if (r.get("step") or 0) <= step]
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        RunFolder(output_dir).metrics.write_text("".join(json_line(r) for r in kept))
