"""The end of a run: the facts it records, the weights gathered, the encoder, loss curve and run record saved.

Design choices:
- `gather_weights` and `stream_position` are collectives (every process calls them); `save_run` runs on the main
  process only and writes the encoder, `loss_curve.png` and `run_record.json`.
- A run whose weights or held-out loss are not finite is refused before anything is written
  (`nonfinite.check_finite_result`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from hf_encoderize.data.packing import data_position
from hf_encoderize.data.sources import DataConfig, data_facts
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.training.checkpoints import state_of
from hf_encoderize.training.engine.build import Run
from hf_encoderize.training.nonfinite import check_finite_result
from hf_encoderize.training.train_config import ADAMW_BETAS, TrainConfig


def training_facts(data: DataConfig, masking: MaskingConfig, train: TrainConfig) -> dict:
    """The settings every run records (run record, trackers); recipes add theirs. No secrets: configs hold none."""
    return {
        "objective": masking.objective, "mask_ratio": masking.mask_ratio, "replacement": masking.replacement,
        "data": data_facts(data),
        "steps": train.steps, "lr": train.lr, "schedule": "wsd", "warmup_steps": train.warmup,
        "decay_steps": train.decay, "weight_decay": train.weight_decay, "betas": list(ADAMW_BETAS),
        "adam_eps": train.adam_eps,
        "max_grad_norm": train.max_grad_norm, "batch_size": train.batch_size, "grad_accum": train.grad_accum,
        "tokens_per_step": train.tokens_per_step, "seed": train.seed,
        "gradient_checkpointing": train.gradient_checkpointing, "master_weights": train.master_weights,
        "compile": train.compile, "prefetch": train.prefetch,
    }


def gather_weights(run: Run) -> dict | None:
    """The full weights of a sharded run (FSDP2, DeepSpeed ZeRO-3), gathered for saving; None when the unwrapped
    model already holds them (one process, DDP). Call on every process: gathering is collective."""
    from accelerate.utils import DistributedType

    if run.accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return None
    state = run.accelerator.get_state_dict(run.model)  # full tensors on the main process
    return {name.removeprefix("model."): tensor for name, tensor in state.items()} if state else None


def stream_position(run: Run, data: DataConfig) -> dict:
    """`packing.data_position` over every process's lanes (a collective: call on every process)."""
    lanes = state_of(run.accelerator, run.rows)
    total = run.train.batch_size * run.accelerator.num_processes * run.train.grad_accum
    return data_position(lanes, total, data.skip_documents)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a run was and did, beyond what the engine knows itself: the parts of its record, typed."""

    command: str
    """`cpt` or `pretrain`."""
    facts: dict
    """The settings (`training_facts` and the recipe's: base model, LoRA, phases, identity, ...)."""
    from_checkpoint: str | None
    encoderize: dict
    """What the attention patch and the token set-up did."""
    saved_dtype: str | None
    data_position: dict
    """Where the data stream stopped (`stream_position`)."""
    started_at: str
    wall_time_s: float
    final_eval: dict
    """The trained model's held-out scores (`evaluate_held_out`)."""
    initial_eval_loss: float | None
    """The starting model's held-out loss on the same rows (None: not scored)."""
    curve_title: str
    """The loss curve's title."""


def save_run(run: Run, model, outcome: Outcome, state_dict: dict | None = None) -> dict:
    """Save the final model to `OUT/encoder`, draw the loss curve, and write `OUT/run_record.json` (main process):
    the one writer of a training run's record, from `outcome` and what the run and its metrics say (loss kernel,
    processes, hardware, tokens seen, final loss, skipped steps, finish time). `state_dict`: gathered weights of a
    sharded run. Returns the record as written."""
    from hf_encoderize.common.run_folder import RunFolder
    from hf_encoderize.common.version import __version__
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.records.run_record import build_run_record
    from hf_encoderize.training.compiling import compile_report
    from hf_encoderize.training.monitor import hardware_facts, plot_loss_curve, read_metrics, utc_now

    folder = RunFolder(run.output_dir)
    check_finite_result(model, state_dict, {"eval_loss": outcome.final_eval.get("eval_loss")})
    train_records = [r for r in read_metrics(folder.metrics) if r["kind"] == "train"]
    record = build_run_record(
        version=__version__, command=outcome.command, settings=outcome.facts, encoderize=outcome.encoderize,
        train_metrics=train_records, final_eval=outcome.final_eval, initial_eval_loss=outcome.initial_eval_loss,
        started_at=outcome.started_at, finished_at=utc_now(), wall_time_s=outcome.wall_time_s,
        num_processes=run.accelerator.num_processes, hardware=hardware_facts(run.accelerator),
        loss_implementation=run.loss_implementation, from_checkpoint=outcome.from_checkpoint,
        saved_dtype=outcome.saved_dtype, data_position=outcome.data_position, compiled=compile_report(run.compiled))
    # The encoder's config block comes from the record it is saved with (`EncoderFacts.of_run`), so the two agree.
    save_encoder(model, run.tokenizer, folder.encoder, overwrite=True, metadata=EncoderFacts.of_run(record),
                 state_dict=state_dict)
    plot_loss_curve(folder.metrics, folder.loss_curve, title=outcome.curve_title)
    record = replace(record, finished_at=utc_now())  # the run finishes once its encoder is on disk
    record.to_json(folder.run_record)
    return record.to_dict()


def run_summary(run: Run, monitor, step: int, started: float, final_eval: dict) -> dict:
    """What `cpt`/`pretrain` return: the run folder, steps, per-step losses, the final held-out scores, wall time."""
    return {"output_dir": str(run.output_dir), "steps": step, "losses": list(monitor.losses), **final_eval,
            "wall_time_s": time.time() - started}
