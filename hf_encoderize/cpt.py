"""`hf-encoderize cpt MODEL`: load, encoderize, then MLM continued pretraining; the encoder lands in OUT/encoder."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import torch

from hf_encoderize.data import DataConfig, Packer, collate
from hf_encoderize.loading import LoadConfig
from hf_encoderize.lora import AdapterConfig, apply_lora, check_qlora_available, merged_model, quantization_config
from hf_encoderize.masking import MaskingConfig, mask_tokens
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


def _accelerator(train: TrainConfig):
    from accelerate import Accelerator

    precision = train.mixed_precision
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    # Launched on several processes without a GPU (torchrun / accelerate launch on CPU): use gloo, not one-per-process.
    multi_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    return Accelerator(gradient_accumulation_steps=train.grad_accum, mixed_precision=precision, cpu=multi_cpu)


def _setup(load: LoadConfig, data: DataConfig, train: TrainConfig, adapter: AdapterConfig):
    """Model (encoderized and verified), tokenizer, documents and the held-out evaluation rows."""
    from hf_encoderize.bidirectional import EncoderizeReport, encoderize, verify_bidirectional
    from hf_encoderize.data import load_documents
    from hf_encoderize.loading import is_native_encoder, load_decoder, load_encoder
    from hf_encoderize.packing import install_document_isolation

    source, column = load_documents(data)  # a bad source fails before any weight is loaded
    documents = _Replayable(source, column)
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
    eval_packer = Packer(tokenizer, data.seq_len, data.pack)
    eval_rows = list(eval_packer.rows(itertools.islice(iter(documents), data.eval_documents), flush=True))
    eval_batches = [collate(eval_rows[i : i + train.batch_size]) for i in range(0, len(eval_rows), train.batch_size)]
    return model, tokenizer, report, documents, eval_batches


class _Replayable:
    """Re-iterable view of the text column (a streamed dataset restarts from its first document)."""

    def __init__(self, source, column):
        self.source, self.column = source, column

    def __iter__(self):
        return (row[self.column] for row in self.source)


def cpt(load: LoadConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig,
        adapter: AdapterConfig | None = None) -> dict:
    """Run MLM continued pretraining and save the encoder. Returns a summary (losses, steps, wall time)."""
    from hf_encoderize.saving import save_encoder
    from hf_encoderize.schedule import default_warmup, wsd_scheduler

    if train.output_dir is None:
        train.output_dir = str(Path("runs") / f"{Path(load.gguf_file or load.source).stem.split('/')[-1]}-mlm")
    accelerator = _accelerator(train)
    resume_from = prepare_output_dir(train, accelerator.is_main_process)
    accelerator.wait_for_everyone()
    output_dir = Path(train.output_dir)
    adapter = adapter or AdapterConfig()
    model, tokenizer, report, documents, eval_batches = _setup(load, data, train, adapter)
    if train.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    peft_model = apply_lora(model, adapter, tokenizer.mask_token_id) if adapter.lora_r else None
    model.train()
    objective = MLMObjective(model)  # with LoRA, `model` holds the injected adapters (peft patches in place)
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
    history, started = [], time.time()
    while step < train.steps:
        loss = train_step(accelerator, objective, optimizer, scheduler, batches, train, tokenizer, masking,
                          vocab_size, generator)
        step += 1
        history.append(loss)
        if accelerator.is_main_process and step % train.log_every == 0:
            print(f"step {step}/{train.steps} loss {loss:.4f} lr {scheduler.get_last_lr()[0]:.2e}", flush=True)
        if train.eval_every and step % train.eval_every == 0 and accelerator.is_main_process:
            print(f"step {step} {evaluate(objective, eval_batches, masking, tokenizer, vocab_size, train.seed)}")
        if step % train.save_every == 0 or step == train.steps:
            save_checkpoint(accelerator, output_dir, step, packer, generator, train.keep_last)
    final_eval = evaluate(objective, eval_batches, masking, tokenizer, vocab_size, train.seed) if eval_batches else {}
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        metadata = {**report.to_dict(), "base_model": load.source, "objective": masking.objective,
                    "mask_ratio": masking.mask_ratio, "steps": train.steps, "lora_r": adapter.lora_r}
        final = accelerator.unwrap_model(objective).model
        if peft_model is not None:
            if adapter.save_adapter:
                peft_model.save_pretrained(output_dir / "adapter")
            final = merged_model(peft_model)
        save_encoder(final, tokenizer, output_dir / "encoder", overwrite=True, metadata=metadata)
    return {"steps": step, "losses": history, **final_eval, "wall_time_s": time.time() - started}


def train_step(accelerator, objective, optimizer, scheduler, batches, train, tokenizer, masking, vocab_size,
               generator) -> float:
    """One optimizer step over `grad_accum` micro-batches. Returns the mean micro-batch loss."""
    losses = []
    for _ in range(train.grad_accum):
        input_ids, document_ids = next(batches)
        # Mask the global batch with one generator, then take this process's slice: N processes see exactly the
        # tokens and masks one process would.
        masked, labels = mask_tokens(input_ids, _maskable(input_ids, document_ids, tokenizer),
                                     mask_token_id=tokenizer.mask_token_id, vocab_size=vocab_size,
                                     config=masking, generator=generator)
        rows = input_ids.shape[0] // accelerator.num_processes
        mine = slice(accelerator.process_index * rows, (accelerator.process_index + 1) * rows)
        masked, document_ids, labels = masked[mine], document_ids[mine], labels[mine]
        with accelerator.accumulate(objective):
            device = accelerator.device
            loss = objective(masked.to(device), document_ids.to(device), labels.to(device))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(objective.parameters(), train.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    scheduler.step()
    return sum(losses) / len(losses)
