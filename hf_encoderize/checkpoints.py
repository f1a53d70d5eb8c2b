"""Run folders and training checkpoints: refuse to clobber, save atomically, keep the last K, resume the newest.

Design choices:
- A checkpoint is `accelerator.save_state` of everything the engine registered (model, optimizer, the WSD scheduler,
  the packer's position, the masking RNG; every process's RNG) plus `trainer_state.json` with the step. It is written
  under `step-N.partial` and renamed into place once every process has written its part, so a crash never leaves a
  half-written checkpoint that `--resume` would pick.
- `checkpoints/` keeps the last `keep_last`; other folders (pretrain's `switch/`) are kept whole, never resumed from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hf_encoderize.errors import EncoderizeError

STATE_FILE = "trainer_state.json"


def checkpoint_dir(output_dir: Path, step: int, folder: str = "checkpoints") -> Path:
    """`OUT/checkpoints/step-0000042` (zero-padded, so names sort by step)."""
    return Path(output_dir) / folder / f"step-{step:07d}"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Finished checkpoints under `OUT/checkpoints`, oldest first."""
    found = (Path(output_dir) / "checkpoints").glob("step-*[0-9]")
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def prepare_output_dir(output_dir: Path, *, resume: bool, overwrite: bool, main_process: bool = True) -> Path | None:
    """Return the checkpoint to resume from (or None), refusing to clobber an existing run.

    Only the main process deletes anything (with `overwrite`); call `wait_for_everyone()` afterwards.
    """
    out = Path(output_dir)
    if resume:
        found = list_checkpoints(out)
        if not found:
            raise EncoderizeError(f"--resume: no checkpoint under {str(out / 'checkpoints')!r}")
        return found[-1]
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise EncoderizeError(f"output folder {str(out)!r} is not empty; use --resume, --overwrite or a new folder")
        if main_process:
            shutil.rmtree(out)
    return None


def save_checkpoint(accelerator, folder: Path, step: int) -> Path:
    """Write the full training state to `folder` under a temporary name, then rename it into place."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".partial")
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()  # every rank has written its shard/RNG file before the rename
    if accelerator.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps({"step": step}))
        tmp.rename(folder)
    accelerator.wait_for_everyone()
    return folder


def prune_checkpoints(output_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints under `OUT/checkpoints` (main process only)."""
    for old in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def checkpoint_step(path: Path) -> int:
    return int(json.loads((Path(path) / STATE_FILE).read_text())["step"])


def load_checkpoint(accelerator, path: Path) -> int:
    """Restore everything registered with `accelerator` from `path`; return the step it was taken at."""
    path = Path(path)
    if "packer" in json.loads((path / STATE_FILE).read_text()):  # hf-encoderize 0.1.0 kept it there, unregistered
        raise EncoderizeError(f"{str(path)!r} was written by an earlier hf-encoderize (data position in "
                              f"{STATE_FILE}); finish it with that version, or start over with --overwrite")
    accelerator.load_state(str(path))
    return checkpoint_step(path)
