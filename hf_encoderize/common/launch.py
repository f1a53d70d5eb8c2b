"""Launch facts: how many processes this launch runs and which one this is, read from the launcher's environment.

Why the environment and not the Accelerator: torchrun and `accelerate launch` set `WORLD_SIZE` and `RANK` for every
process before Python starts, and several decisions come before any Accelerator or process group exists (the memory
check, tokens per step, the multi-CPU backend, which process pushes). A plain `hf-encoderize` run sets neither: one
process, rank 0. One owner, because the seven readers these replace each spelled the default and the parse themselves.

How to launch: the accelerate configs (single GPU, DDP, FSDP2, DeepSpeed ZeRO-2/3, multi-node) ship as package data
(`hf_encoderize/configs/accelerate/*.yaml`), so a pip install has them; `hf-encoderize accelerate-config NAME` prints
the installed file's path for `accelerate launch --config_file` (or copies it to edit), and every hint names that.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal, get_args

from hf_encoderize.common.errors import EncoderizeError


def _whole(environ: Mapping[str, str] | None, name: str, default: int, minimum: int) -> int:
    text = (os.environ if environ is None else environ).get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise EncoderizeError(f"the launcher set {name}={text!r}, which is not a whole number of at least {minimum}; "
                              "launch with torchrun or `accelerate launch`, or unset it for one process")
    return value


def world_size(environ: Mapping[str, str] | None = None) -> int:
    """Processes in this launch (`WORLD_SIZE`; 1 without a launcher). `environ`: default `os.environ`.

    >>> world_size({}), world_size({"WORLD_SIZE": "8", "RANK": "3"})
    (1, 8)
    """
    return _whole(environ, "WORLD_SIZE", 1, 1)


def rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's place in the launch (`RANK`, across nodes; 0 without a launcher).

    >>> rank({}), rank({"WORLD_SIZE": "8", "RANK": "3"})
    (0, 3)
    >>> rank({"RANK": "-1"})  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: the launcher set RANK='-1', which is not a whole number of at least
    0; launch with torchrun or `accelerate launch`, or unset it for one process
    """
    return _whole(environ, "RANK", 0, 0)


def is_main_process(environ: Mapping[str, str] | None = None) -> bool:
    """True for the one process that writes, prints and pushes: rank 0, and the only process without a launcher.

    >>> is_main_process({}), is_main_process({"WORLD_SIZE": "2", "RANK": "1"})
    (True, False)
    """
    return rank(environ) == 0


def end_launched_process(code: int) -> None:
    """End a process that a launcher (torchrun, `accelerate launch`) started beside others, once its work is saved and
    its process group left: flush stdout and stderr, then `os._exit(code)`, skipping the interpreter's finalization.
    A plain run (one process) returns, and its caller exits as usual.

    Why: `destroy_process_group` does not stop gloo's worker threads while DistributedDataParallel still references
    the group (measured with torch 2.13: a DDP wrapper, even deleted, leaves `pt_gloo_runloop` and `gloo_tcp_loop`
    running after the destroy). A worker releasing its last tensor while Python finalizes takes the GIL of an
    interpreter being torn down, and the process aborts after the work is done ("terminate called without an active
    exception", SIGABRT; pytorch/pytorch#179291), which torchrun reports as a failed launch and answers by killing
    the other processes. Seen twice in the project's CI, in the 2-process gloo tests on a loaded 2-core machine.
    Everything the run writes is closed by then (files, logs, trackers: `end_training`), so skipping finalization
    loses nothing. A script of your own that calls `cpt()` under torchrun can end with this too."""
    if world_size() <= 1:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


AccelerateConfigName = Literal["single_gpu", "multi_gpu_ddp", "fsdp", "deepspeed_zero2", "deepspeed_zero3",
                               "multi_node"]
ACCELERATE_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "accelerate"  # package data (pyproject.toml)


@dataclass
class AccelerateConfig:
    """Which shipped accelerate config `hf-encoderize accelerate-config` gives."""

    name: AccelerateConfigName
    """single_gpu, multi_gpu_ddp (one machine, several GPUs), fsdp (FSDP2, full fine-tuning of a model one GPU cannot
    hold), deepspeed_zero2, deepspeed_zero3 (the deepspeed extra) or multi_node (edit its machine rank and address)."""
    _: KW_ONLY
    copy_to: str | None = None
    """Copy the file into this folder (to edit it) and give the copy's path; an existing file there is not replaced."""

    def __post_init__(self):
        if self.name not in get_args(AccelerateConfigName):
            raise EncoderizeError(f"accelerate-config {self.name!r}: no such config; pick one of "
                                  f"{', '.join(get_args(AccelerateConfigName))}")


def accelerate_config(config: AccelerateConfig) -> dict:
    """The shipped config's path (or its copy's), for `accelerate launch --config_file PATH -m hf_encoderize.cli ...`.

    >>> Path(accelerate_config(AccelerateConfig("fsdp"))["path"]).name
    'fsdp.yaml'
    """
    path = ACCELERATE_CONFIGS / f"{config.name}.yaml"
    if not path.is_file():
        raise EncoderizeError(f"{path} is missing from this install; reinstall hf-encoderize")
    if config.copy_to is None:
        return {"name": config.name, "path": str(path)}
    target = Path(config.copy_to).expanduser() / path.name
    if target.exists():
        raise EncoderizeError(f"{target} exists; pick another --copy-to folder or delete it")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return {"name": config.name, "path": str(target)}

