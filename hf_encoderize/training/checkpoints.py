"""Run folders and training checkpoints: refuse to clobber, save atomically, keep the last K, resume the newest.
Whether a checkpoint's settings may be resumed or branched from is `resume_checks`'.

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
import json
import re
import shutil
import weakref
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.outputs import check_output_dir, clear_for_run
from hf_encoderize.common.run_folder import RunFolder

STATE_FILE = "trainer_state.json"


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
                     resume: bool = False, known: tuple[str, ...] = ()) -> None:
    """After everything was validated: with `overwrite`, empty the earlier run of ours; then mark the folder as
    `command`'s (with the names it writes, `known`) and take its lock (main process; `wait_for_everyone()`
    afterwards). `outputs.finish_run` gives the lock back when the save is done."""
    if main_process:
        clear_for_run(output_dir, command, overwrite=overwrite, resume=resume, known=known)


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
