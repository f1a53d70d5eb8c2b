"""`hf-encoderize cpt MODEL`: load, encoderize, then MLM continued pretraining; the encoder lands in OUT/encoder.

The loop (`cpt`) reads top to bottom: set up, then `while step < steps: train_step(); log; evaluate; checkpoint`,
then save the encoder, the loss curve and the run record. Everything that shows or records progress lives in
`monitor`; checkpoints, the objective and evaluation in `train`.

Output folder: `checkpoints/` (full training state, never pushed), `encoder/` (the model), `metrics.jsonl`,
`loss_curve.png` and `run_record.json` (the facts the model card reads).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from pathlib import Path

import torch

from hf_encoderize.data import DataConfig, Packer, collate
from hf_encoderize.errors import EncoderizeError
from hf_encoderize.loading import LoadConfig
from hf_encoderize.lora import AdapterConfig, apply_lora, check_qlora_available, merged_model, quantization_config
from hf_encoderize.masking import MaskingConfig
from hf_encoderize.objectives import make_inputs
from hf_encoderize.train import (
    MLMObjective,
    TrainConfig,
    _batches,
    _maskable,
    evaluate,
    load_checkpoint,
    prepare_output_dir,
    save_checkpoint,
)

MAX_NONFINITE_IN_A_ROW = 10  # with --on-nonfinite skip: a run that only produces NaN is broken, not unlucky


def _accelerator(train: TrainConfig, trackers: list[str]):
    from accelerate import Accelerator

    precision = train.mixed_precision
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    # Launched on several processes without a GPU (torchrun / accelerate launch on CPU): use gloo, not one-per-process.
    multi_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    return Accelerator(gradient_accumulation_steps=train.grad_accum, mixed_precision=precision, cpu=multi_cpu,
                       log_with=trackers or None, project_dir=train.output_dir)


def check_seq_len(load: LoadConfig, seq_len: int) -> None:
    """Refuse a row length above the model's position limit before any weight is downloaded."""
    from hf_encoderize.loading import load_config

    try:
        config = load_config(load)
    except EncoderizeError as err:
        if "already an encoder" not in str(err):
            raise
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(load.source, revision=load.revision)
    config = getattr(config, "text_config", None) or config
    limit = next((getattr(config, name) for name in ("max_position_embeddings", "n_positions", "max_seq_len")
                  if isinstance(getattr(config, name, None), int)), None)
    if limit is not None and seq_len > limit:
        raise EncoderizeError(f"--seq-len {seq_len} is above the model's limit of {limit} positions; "
                              f"use --seq-len {limit} or less")


def _setup(load: LoadConfig, data: DataConfig, train: TrainConfig, adapter: AdapterConfig):
    """Model (encoderized and verified), tokenizer, documents and the held-out evaluation rows."""
    from hf_encoderize.bidirectional import EncoderizeReport, encoderize, verify_bidirectional
    from hf_encoderize.data import load_documents
    from hf_encoderize.loading import is_native_encoder, load_decoder, load_encoder
    from hf_encoderize.packing import install_document_isolation

    source, column = load_documents(data)  # a bad source fails before any weight is loaded
    documents = _Replayable(source, column)
    if next(itertools.islice(iter(documents), data.eval_documents, None), None) is None:
        raise EncoderizeError(f"the dataset has no training documents after the {data.eval_documents} held out for "
                              "evaluation; add data or lower --eval-documents")
    check_seq_len(load, data.seq_len)
    torch.manual_seed(train.seed)
    extra = {}
    if adapter.load_in_4bit:
        check_qlora_available()
        extra["quantization_config"] = quantization_config()
    if is_native_encoder(load):
        # MLM->MLM continued pretraining of an encoder (the paper's baseline, section 5): nothing to patch.
        model, tokenizer = load_encoder(load, model_kwargs=extra)
        report = EncoderizeReport(model.config.model_type, model.config._attn_implementation, False, 0, 0,
                                  {"mask_token": tokenizer.mask_token, "mask_token_path": "existing"})
    else:
        model, tokenizer = load_decoder(load, model_kwargs=extra)
        report = encoderize(model, tokenizer)
    install_document_isolation()
    verify_bidirectional(model, pad_token_id=tokenizer.pad_token_id)
    return model, tokenizer, report, documents, held_out_batches(documents, tokenizer, data, train.batch_size)


def held_out_batches(documents, tokenizer, data: DataConfig, batch_size: int) -> list:
    """The first `eval_documents` documents, packed and collated: the held-out set, never trained on."""
    eval_packer = Packer(tokenizer, data.seq_len, data.pack)
    rows = eval_packer.rows(itertools.islice(iter(documents), data.eval_documents), flush=True)
    eval_rows = list(itertools.islice(rows, data.eval_max_rows))
    return [collate(eval_rows[i : i + batch_size]) for i in range(0, len(eval_rows), batch_size)]


class _Replayable:
    """Re-iterable view of the text column (a streamed dataset restarts from its first document)."""

    def __init__(self, source, column):
        self.source, self.column = source, column

    def __iter__(self):
        return (row[self.column] for row in self.source)


@dataclasses.dataclass
class _Run:
    """What the training steps need, built once (`build_run`)."""

    accelerator: object
    objective: torch.nn.Module
    optimizer: object
    scheduler: object
    batches: object
    tokenizer: object
    masking: MaskingConfig
    train: TrainConfig
    vocab_size: int
    generator: torch.Generator
    packer: Packer | None = None
    eval_batches: list = dataclasses.field(default_factory=list)
    output_dir: Path | None = None
    task: str = "mlm"
    """`mlm`, or `clm` during a pretraining CLM phase (`objectives.make_inputs`)."""


def cpt(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
        adapter: AdapterConfig | None = None) -> dict:
    """Run MLM continued pretraining and save the encoder. Returns a summary (losses, steps, wall time, eval)."""
    from hf_encoderize.monitor import TrainingMonitor, parse_report_to, utc_now

    if train.output_dir is None:
        train.output_dir = str(Path("runs") / f"{Path(load.gguf_file or load.source).stem.split('/')[-1]}-mlm")
    trackers = parse_report_to(train.report_to)
    accelerator = _accelerator(train, trackers)
    resume_from = prepare_output_dir(train, accelerator.is_main_process)
    accelerator.wait_for_everyone()
    output_dir, adapter, started_at = Path(train.output_dir), adapter or AdapterConfig(), utc_now()
    model, tokenizer, report, documents, eval_batches = _setup(load, data, train, adapter)
    if train.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    peft_model = apply_lora(model, adapter, tokenizer.mask_token_id) if adapter.lora_r else None
    model.train()
    run, step = build_run(accelerator, model, tokenizer, documents, data, masking, train, resume_from)
    run.eval_batches, objective = eval_batches, run.objective
    config_facts = _config_facts(load, data, masking, train, adapter)
    if trackers:
        accelerator.init_trackers(output_dir.name, config=_flat(config_facts))
    monitor = TrainingMonitor(accelerator, output_dir, train.steps, start_step=step, show=train.progress)
    history, started = [], time.time()
    step = run_steps(run, monitor, step, train.steps, history)
    final_eval = _evaluate(run) if eval_batches else {}
    if final_eval:
        monitor.evaluation(step, final_eval)
    monitor.close()
    accelerator.wait_for_everyone()
    summary = {"steps": step, "losses": history, **final_eval, "wall_time_s": time.time() - started}
    if accelerator.is_main_process:
        _finish(accelerator, objective, peft_model, adapter, tokenizer, output_dir, report, config_facts, summary,
                started_at)
    accelerator.end_training()
    return summary


def build_run(accelerator, model, tokenizer, documents, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
              resume_from: Path | None) -> tuple[_Run, int]:
    """Objective, AdamW, one WSD schedule over `train.steps`, the packed data stream and the masking RNG, all
    prepared by Accelerate; restored from `resume_from` when given. Returns the run and the step it starts at.

    With LoRA, `model` already holds the injected adapters (peft patches in place), so only they train."""
    from hf_encoderize.schedule import default_warmup, wsd_scheduler

    objective = MLMObjective(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    # AdamW as in the paper (Appendix A): betas (0.9, 0.95), weight decay 0.1.
    optimizer = torch.optim.AdamW(trainable, lr=train.lr, betas=(0.9, 0.95), weight_decay=train.weight_decay)
    warmup = train.warmup_steps if train.warmup_steps is not None else default_warmup(train.steps)
    scheduler = wsd_scheduler(optimizer, train.steps, warmup, train.decay_fraction)
    objective, optimizer = accelerator.prepare(objective, optimizer)
    accelerator.register_for_checkpointing(scheduler)  # stepped once per optimizer step, by us
    packer = Packer(tokenizer, data.seq_len, data.pack)
    generator = torch.Generator().manual_seed(train.seed)  # same on every process: masks the global batch
    step = load_checkpoint(accelerator, resume_from, packer, generator) if resume_from else 0
    batches = _batches(packer, documents, data.eval_documents, train.batch_size * accelerator.num_processes)
    vocab_size = model.get_input_embeddings().weight.shape[0]
    run = _Run(accelerator, objective, optimizer, scheduler, batches, tokenizer, masking, train, vocab_size, generator,
               packer=packer, output_dir=Path(train.output_dir))
    return run, step


def run_steps(run: _Run, monitor, step: int, until: int, history: list) -> int:
    """Train from `step` up to `until` (the whole cpt run, or one pretraining phase): log every step, evaluate and
    checkpoint on schedule. Appends each step's loss to `history`; returns the step reached."""
    train, accelerator = run.train, run.accelerator
    nonfinite_in_a_row = 0
    while step < until:
        stats = train_step(run)
        step += 1
        history.append(stats["loss"])
        nonfinite_in_a_row = _check_finite(stats, step, train, nonfinite_in_a_row, run.output_dir)
        record = monitor.step(step, lr=run.scheduler.get_last_lr()[0], **stats)
        if accelerator.is_main_process and not train.progress and step % train.log_every == 0:
            print(f"step {step}/{train.steps} loss {record['loss']:.4f} lr {record['lr']:.2e}", flush=True)
        if train.eval_every and step % train.eval_every == 0 and run.eval_batches and step < train.steps:
            monitor.evaluation(step, _evaluate(run))
        if step % train.save_every == 0 or step == train.steps:
            save_checkpoint(accelerator, run.output_dir, step, run.packer, run.generator, train.keep_last)
    return step


def _evaluate(run: _Run, task: str | None = None) -> dict:
    return evaluate(run.objective, run.eval_batches, run.masking, run.tokenizer, run.vocab_size, run.train.seed,
                    task=task or run.task)


def train_step(run: _Run) -> dict:
    """One optimizer step over `grad_accum` micro-batches.

    Returns the mean loss, masked-token accuracy, gradient norm and the real (non-pad) tokens of the global batch.
    One host sync per step, for the non-finite check and the numbers on the progress bar.
    """
    accelerator, train = run.accelerator, run.train
    device = accelerator.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    labelled = tokens = 0
    grad_norm = torch.zeros((), device=device)
    for _ in range(train.grad_accum):
        input_ids, document_ids = next(run.batches)
        # Mask the global batch with one generator, then take this process's slice: N processes see exactly the
        # tokens and masks one process would. A CLM phase labels the next token instead (nothing masked).
        masked, labels = make_inputs(run.task, input_ids, _maskable(input_ids, document_ids, run.tokenizer),
                                     mask_token_id=run.tokenizer.mask_token_id, vocab_size=run.vocab_size,
                                     masking=run.masking, generator=run.generator, document_ids=document_ids)
        tokens += int((document_ids >= 0).sum())
        rows = input_ids.shape[0] // accelerator.num_processes
        mine = slice(accelerator.process_index * rows, (accelerator.process_index + 1) * rows)
        masked, document_ids, labels = masked[mine], document_ids[mine], labels[mine]
        labelled += int((labels != -100).sum())
        with accelerator.accumulate(run.objective):
            loss, right = run.objective(masked.to(device), document_ids.to(device), labels.to(device))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                grad_norm = accelerator.clip_grad_norm_(run.objective.parameters(), train.max_grad_norm)
                grad_norm = _finite_or_skip(grad_norm, run)
            run.optimizer.step()
            run.optimizer.zero_grad()
        loss_sum, correct = loss_sum + loss.detach().float(), correct + right
    run.scheduler.step()
    totals = torch.stack([loss_sum / train.grad_accum, correct.float(), torch.tensor(float(labelled), device=device),
                          torch.as_tensor(grad_norm, device=device).float()])
    loss, right, count, norm = accelerator.reduce(totals, reduction="sum").tolist()
    n = accelerator.num_processes
    return {"loss": loss / n, "accuracy": right / max(1.0, count), "grad_norm": norm / n, "tokens": tokens,
            "skipped": not (math.isfinite(loss) and math.isfinite(norm))}


def _finite_or_skip(grad_norm, run: _Run):
    """With `--on-nonfinite skip`, drop a non-finite gradient so `optimizer.step()` leaves weights and moments as
    they were: gradients set to None make torch's AdamW pass over the parameters (a zero gradient would still
    apply weight decay and decay the moments). Under fp16 the GradScaler already skips overflowing steps."""
    if run.train.on_nonfinite != "skip" or str(run.accelerator.mixed_precision) == "fp16":
        return grad_norm
    if not bool(torch.isfinite(torch.as_tensor(grad_norm))):
        run.optimizer.zero_grad(set_to_none=True)
    return grad_norm


def _check_finite(stats: dict, step: int, train: TrainConfig, in_a_row: int, output_dir: Path) -> int:
    """Stop with a one-line error on a non-finite loss (default), or count skipped updates."""
    if not stats["skipped"]:
        return 0
    from hf_encoderize.train import _checkpoints

    last = _checkpoints(output_dir)
    where = f"the last good checkpoint is {str(last[-1])!r} (resume with --resume)" if last else "no checkpoint yet"
    if train.on_nonfinite == "stop":
        raise EncoderizeError(f"non-finite loss or gradient at step {step}; {where}; lower --lr, use --mixed-precision"
                              " bf16 rather than fp16, or pass --on-nonfinite skip")
    if in_a_row + 1 >= MAX_NONFINITE_IN_A_ROW:
        raise EncoderizeError(f"{MAX_NONFINITE_IN_A_ROW} non-finite steps in a row up to step {step}; {where}; "
                              "lower --lr or check the data")
    return in_a_row + 1


def _config_facts(load, data, masking, train, adapter) -> dict:
    """The run's settings, as stored in the run record and sent to trackers (no secrets: configs hold none)."""
    from hf_encoderize.schedule import default_warmup

    return {
        "base_model": load.source, "revision": load.revision, "gguf_file": load.gguf_file,
        "objective": masking.objective, "mask_ratio": masking.mask_ratio, "replacement": masking.replacement,
        "data": {k: getattr(data, k) for k in ("dataset", "dataset_config", "split", "data_files", "text_column",
                                               "seq_len", "pack", "eval_documents")},
        "steps": train.steps, "lr": train.lr, "schedule": "wsd",
        "warmup_steps": train.warmup_steps if train.warmup_steps is not None else default_warmup(train.steps),
        "decay_fraction": train.decay_fraction, "weight_decay": train.weight_decay, "betas": [0.9, 0.95],
        "max_grad_norm": train.max_grad_norm, "batch_size": train.batch_size, "grad_accum": train.grad_accum,
        "seed": train.seed, "gradient_checkpointing": train.gradient_checkpointing,
        "lora": {"r": adapter.lora_r, "alpha": adapter.lora_alpha, "targets": adapter.lora_targets}
        if adapter.lora_r else None,
        "load_in_4bit": adapter.load_in_4bit,
    }


def _flat(facts: dict) -> dict:
    """Trackers take scalars only."""
    flat = {}
    for key, value in facts.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items() if v is not None})
        elif value is not None:
            flat[key] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat


def _finish(accelerator, objective, peft_model, adapter, tokenizer, output_dir, report, facts, summary,
            started_at, command: str = "cpt", title: str = "MLM continued pretraining") -> None:
    """Save the encoder, draw the loss curve, write the run record (main process only)."""
    from hf_encoderize import __version__
    from hf_encoderize.files import write_json_atomic
    from hf_encoderize.monitor import hardware_facts, plot_loss_curve, read_metrics, utc_now
    from hf_encoderize.saving import save_encoder

    metadata = {**report.to_dict(), "base_model": facts["base_model"], "objective": facts["objective"],
                "mask_ratio": facts["mask_ratio"], "steps": facts["steps"], "lora_r": (facts["lora"] or {}).get("r", 0)}
    final = accelerator.unwrap_model(objective).model
    if peft_model is not None:
        if adapter.save_adapter:
            peft_model.save_pretrained(output_dir / "adapter")
        final = merged_model(peft_model)
    save_encoder(final, tokenizer, output_dir / "encoder", overwrite=True, metadata=metadata)
    plot_loss_curve(output_dir / "metrics.jsonl", output_dir / "loss_curve.png", title=title)
    train_records = [r for r in read_metrics(output_dir / "metrics.jsonl") if r["kind"] == "train"]
    record = {
        "command": command, "hf_encoderize_version": __version__, **facts,
        "encoderize": {**report.to_dict(), **report.tokens},
        "num_processes": accelerator.num_processes, "hardware": hardware_facts(accelerator),
        "tokens_seen": sum(r["tokens"] for r in train_records),
        "skipped_nonfinite_steps": sum(1 for r in train_records if r.get("skipped_nonfinite")),
        "wall_time_s": round(summary["wall_time_s"], 2),
        "final_train_loss": train_records[-1]["loss"] if train_records else None,
        "eval_loss": summary.get("eval_loss"), "eval_masked_accuracy": summary.get("eval_masked_accuracy"),
        "started_at": started_at, "finished_at": utc_now(),
    }
    write_json_atomic(output_dir / "run_record.json", record)
