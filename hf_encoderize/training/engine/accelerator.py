"""The Accelerate side of a run: the `Accelerator`, the accumulation a token budget implies, DeepSpeed's batch values,
the full weights gathered from a sharded run, and the end every process reaches together.

Design choices:
- Accelerate only, so `accelerate launch` with DDP/FSDP/DeepSpeed configs runs the engine unchanged.
- `--mixed-precision auto` is bf16 on a GPU that has it, else none; several CPU processes talk over gloo.
- The process group waits hours, not NCCL's 10 minutes: the main process saves (merging LoRA, gathering shards)
  while the others wait at a barrier.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.precision import resolve_mixed_precision
from hf_encoderize.training.train_config import TrainConfig


def resolve_grad_accum(train: TrainConfig, seq_len: int) -> TrainConfig:
    """`train` with `grad_accum` worked out from `tokens_per_step` (a copy; unchanged when it is not set). The
    processes are those of the launch (`WORLD_SIZE`), known before the Accelerator exists.

    An accumulation given beside the target (other than the default 1, which cannot be told from unset) that the
    target does not give is a conflict, refused naming both: it was silently replaced. One the target gives too (a
    replayed run_settings.json holds both, the accumulation as resolved) is the same run and passes."""
    import dataclasses

    if train.tokens_per_step is None:
        return train
    processes = world_size()
    per_micro = train.batch_size * processes * seq_len
    derived = max(1, math.ceil(train.tokens_per_step / per_micro))
    if train.grad_accum not in (1, derived):
        raise EncoderizeError(f"--tokens-per-step {train.tokens_per_step} sets the accumulation itself (here "
                              f"{derived}: {train.batch_size} rows x {processes} process(es) x {seq_len} tokens per "
                              f"micro-batch), but --gradient-accumulation-steps {train.grad_accum} is given too; "
                              "drop one of them")
    return dataclasses.replace(train, grad_accum=derived)


def make_accelerator(train: TrainConfig, output_dir: Path, trackers: list[str]):
    """An `Accelerator` for this run: bf16 on a GPU that has it (`auto`), gloo when launched on several CPUs."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    precision = resolve_mixed_precision(train.mixed_precision)
    if AcceleratorState._shared_state and AcceleratorState().mixed_precision != precision:
        # A second run in one Python process (library use) with another precision: accelerate keeps its state in a
        # process-wide singleton and refuses the change; clear it (not the process group, which stays valid).
        AcceleratorState._reset_state(reset_partial_state=False)
    # Launched on several processes without a GPU (torchrun / accelerate launch on CPU): use gloo, not one-per-process.
    multi_cpu = not torch.cuda.is_available() and world_size() > 1
    # The other processes wait at a barrier while the main one saves the encoder (after merging LoRA adapters into a
    # reloaded base, or gathering FSDP shards): minutes for a large model, which NCCL's default 10-minute timeout
    # would turn into an abort of every process mid-save.
    group = InitProcessGroupKwargs(timeout=datetime.timedelta(hours=2))
    return Accelerator(gradient_accumulation_steps=train.grad_accum, mixed_precision=precision, cpu=multi_cpu,
                       log_with=trackers or None, project_dir=str(output_dir), kwargs_handlers=[group])


def configure_deepspeed(accelerator, train: TrainConfig) -> None:
    """Fill the `auto` batch values of a DeepSpeed config: accelerate derives them from a prepared DataLoader, and this
    loop has none (it packs its own rows), so `prepare` would raise on `train_micro_batch_size_per_gpu: auto`."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    config = plugin.deepspeed_config
    values = {"train_micro_batch_size_per_gpu": train.batch_size, "gradient_accumulation_steps": train.grad_accum,
              "train_batch_size": train.batch_size * train.grad_accum * accelerator.num_processes,
              "gradient_clipping": train.max_grad_norm}
    for key, value in values.items():
        if config.get(key, "auto") == "auto":
            config[key] = value


def finish_processes(accelerator) -> None:
    """End a run on every process together, once the main process has saved: a recipe returns only when the encoder
    is on disk (a next stage on another process may read it), and no process tears its process group down while the
    others still use theirs (a gloo rank leaving early has aborted at exit with "terminate called without an active
    exception")."""
    accelerator.wait_for_everyone()
    accelerator.end_training()


def gather_weights(accelerator, model) -> dict | None:
    """The full weights of a sharded run (FSDP2, DeepSpeed ZeRO-3), gathered for saving; None when the unwrapped
    model already holds them (one process, DDP). Call on every process: gathering is collective."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return None
    state = accelerator.get_state_dict(model)  # full tensors on the main process
    return {name.removeprefix("model."): tensor for name, tensor in state.items()} if state else None
