"""The end of a run: the facts it records, the weights gathered, the encoder, loss curve and run record saved.

Design choices:
- `gather_weights` and `stream_position` are collectives (every process calls them); `save_run` runs on the main
  process only and writes the encoder, `loss_curve.png` and `run_record.json`.
- A run whose weights or held-out loss are not finite is refused before anything is written
  (`nonfinite.check_finite_result`).
"""

from __future__ import annotations

import time
from pathlib import Path

from hf_encoderize.data.packing import data_position
from hf_encoderize.data.sources import DataConfig, data_facts
from hf_encoderize.objectives.masking import MaskingConfig
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


def save_run(model, tokenizer, output_dir: Path, record: dict, state_dict: dict | None = None) -> dict:
    """Save the final model to `OUT/encoder`, draw the loss curve, and write `OUT/run_record.json` (main process).

    `record` holds the run's facts (`training_facts`, the recipe's, `encoderize`, `hardware`, ...); the metrics' (tokens
    seen, final loss, skipped steps) and the finish time are added. `state_dict`: gathered weights of a sharded run."""
    from hf_encoderize.common.run_folder import RunFolder
    from hf_encoderize.common.version import __version__
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.records.encoder_facts import EncoderFacts
    from hf_encoderize.records.run_record import RunRecord
    from hf_encoderize.training.monitor import plot_loss_curve, read_metrics, utc_now

    folder = RunFolder(output_dir)
    check_finite_result(model, state_dict, {"eval_loss": record.get("eval_loss")})
    report = record["encoderize"]
    patch = {k: report[k] for k in ("config_switch", "modules_patched", "causal_buffers_replaced")}
    metadata = EncoderFacts(command=record["command"], base_model=record["base_model"], revision=record.get("revision"),
                            gguf_file=record.get("gguf_file"), objective=record["objective"],
                            mask_ratio=record["mask_ratio"], steps=record["steps"],
                            lora_r=(record.get("lora") or {}).get("r", 0), phases=record.get("phases"),
                            packing=report.get("packing", "packed"), model_type=report["model_type"],
                            attn_implementation=report["attn_implementation"], tokens=report["tokens"], facts=patch)
    save_encoder(model, tokenizer, folder.encoder, overwrite=True, metadata=metadata, state_dict=state_dict)
    title = "MLM continued pretraining" if record["command"] == "cpt" else f"pretraining, {record.get('phases')}"
    plot_loss_curve(folder.metrics, folder.loss_curve, title=title)
    train_records = [r for r in read_metrics(folder.metrics) if r["kind"] == "train"]
    record = {"hf_encoderize_version": __version__, **record,
              "tokens_seen": sum(r["tokens"] for r in train_records),
              "skipped_nonfinite_steps": sum(1 for r in train_records if r.get("skipped_nonfinite")),
              "final_train_loss": train_records[-1]["loss"] if train_records else None, "finished_at": utc_now()}
    RunRecord.from_dict(record).to_json(folder.run_record)
    return record


def run_summary(run: Run, monitor, step: int, started: float, final_eval: dict) -> dict:
    """What `cpt`/`pretrain` return: the run folder, steps, per-step losses, the final held-out scores, wall time."""
    return {"output_dir": str(run.output_dir), "steps": step, "losses": list(monitor.losses), **final_eval,
            "wall_time_s": time.time() - started}
