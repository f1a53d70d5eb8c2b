"""`hf-encoderize cpt MODEL`: load, encoderize, then MLM continued pretraining; the encoder lands in OUT/encoder.

A recipe on the training engine (`train`): check everything that can be checked before any weight is loaded, load and
encoderize the model (and verify it behaves bidirectionally), add LoRA if asked, `build_run`, `train_until` the last
step, then work out the final model (LoRA merged, or unwrapped) and `save_run` it with the run record.

Output folder: `checkpoints/` (full training state, never pushed), `encoder/` (the model), `metrics.jsonl`,
`loss_curve.png` and `run_record.json` (the facts the model card reads).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from hf_encoderize.checkpoints import load_checkpoint, prepare_output_dir
from hf_encoderize.data import DataConfig, open_documents
from hf_encoderize.errors import EncoderizeError
from hf_encoderize.loading import LoadConfig
from hf_encoderize.lora import AdapterConfig, apply_lora, check_qlora_available, merged_model, quantization_config
from hf_encoderize.masking import MaskingConfig
from hf_encoderize.monitor import TrainingMonitor, hardware_facts, parse_report_to, utc_now
from hf_encoderize.train import (
    TrainConfig,
    build_run,
    evaluate_held_out,
    make_accelerator,
    run_summary,
    save_run,
    train_until,
    training_facts,
)


def default_output_dir(load: LoadConfig) -> Path:
    """`runs/<model name>-mlm` when no --output-dir is given."""
    return Path("runs") / f"{Path(load.gguf_file or load.source).stem.split('/')[-1]}-mlm"


def cpt(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
        adapter: AdapterConfig | None = None) -> dict:
    """Run MLM continued pretraining and save the encoder. Returns a summary: the run folder (`output_dir`), steps,
    per-step losses, the final held-out loss and masked accuracy, wall time."""
    adapter = adapter or AdapterConfig()
    output_dir = Path(train.output_dir) if train.output_dir else default_output_dir(load)
    trackers = parse_report_to(train.report_to)
    accelerator = make_accelerator(train, output_dir, trackers)
    resume_from = prepare_output_dir(output_dir, resume=train.resume, overwrite=train.overwrite,
                                     main_process=accelerator.is_main_process)
    accelerator.wait_for_everyone()
    started_at = utc_now()
    documents = open_documents(data)  # a bad source fails before any weight is loaded
    model, tokenizer, report = load_encoderized(load, data, train, adapter)
    if train.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    peft_model = apply_lora(model, adapter, tokenizer.mask_token_id) if adapter.lora_r else None
    model.train()
    run = build_run(accelerator, model, tokenizer, documents, data, masking, train, output_dir)
    step = load_checkpoint(accelerator, resume_from) if resume_from else 0
    facts = cpt_facts(load, data, masking, train, adapter)
    monitor = TrainingMonitor(accelerator, output_dir, train.steps, start_step=step, show=train.progress,
                              log_every=train.log_every, trackers=trackers, facts=facts)
    started = time.time()
    step = train_until(run, monitor, step, train.steps)
    final_eval = evaluate_held_out(run)
    if final_eval:
        monitor.evaluation(step, final_eval)
    monitor.close()
    accelerator.wait_for_everyone()
    summary = run_summary(run, monitor, step, started, final_eval)
    if accelerator.is_main_process:
        final = accelerator.unwrap_model(run.model).model
        if peft_model is not None:
            if adapter.save_adapter:
                peft_model.save_pretrained(output_dir / "adapter")
            final = merged_model(peft_model)
        record = {"command": "cpt", **facts, "encoderize": {**report.to_dict(), **report.tokens},
                  "num_processes": accelerator.num_processes, "hardware": hardware_facts(accelerator),
                  "wall_time_s": round(summary["wall_time_s"], 2), "eval_loss": summary.get("eval_loss"),
                  "eval_masked_accuracy": summary.get("eval_masked_accuracy"), "started_at": started_at}
        save_run(final, tokenizer, output_dir, record)
    accelerator.end_training()
    return summary


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


def load_encoderized(load: LoadConfig, data: DataConfig, train: TrainConfig, adapter: AdapterConfig):
    """Model (encoderized, with packed documents isolated, and verified by the probe), tokenizer, and the report."""
    from hf_encoderize.bidirectional import EncoderizeReport, encoderize, verify_bidirectional
    from hf_encoderize.isolation import install_document_isolation
    from hf_encoderize.loading import is_native_encoder, load_decoder, load_encoder

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
    return model, tokenizer, report


def cpt_facts(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
              adapter: AdapterConfig) -> dict:
    """The run's settings, as stored in the run record and sent to trackers (no secrets: configs hold none)."""
    return {
        "base_model": load.source, "revision": load.revision, "gguf_file": load.gguf_file,
        **training_facts(data, masking, train),
        "lora": {"r": adapter.lora_r, "alpha": adapter.lora_alpha, "targets": adapter.lora_targets}
        if adapter.lora_r else None,
        "load_in_4bit": adapter.load_in_4bit,
    }
