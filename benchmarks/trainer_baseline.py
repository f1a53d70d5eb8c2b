"""The Trainer baseline of benchmarks/cpt_throughput.py (and scripts/gpu_session.py): transformers' `Trainer` with
`DataCollatorForLanguageModeling` on the same bidirectional model, as a user would otherwise write it.

Its result names what ran, as `ours`'s does: `attention_backend` is the model's `config._attn_implementation` as
loaded (what transformers dispatches to), so a comparison is between named paths (issue 65).
"""

from __future__ import annotations

import time
from pathlib import Path


class _CountingCollator:
    """Wraps the MLM collator to record, per batch (the Trainer calls it once per step), the real tokens, the masked
    ones, the positions the dense head runs on, and each row's real length (its attention span)."""

    def __init__(self, collator):
        self.collator, self.batches = collator, []

    def __call__(self, examples):
        batch = self.collator(examples)
        mask = batch.get("attention_mask")
        if mask is None:
            mask = batch["input_ids"].new_ones(batch["input_ids"].shape)
        self.batches.append({"tokens": int(mask.sum()), "masked": int((batch["labels"] != -100).sum()),
                             "positions": batch["input_ids"].numel(), "spans": mask.sum(-1).tolist()})
        return batch


def run_trainer(preset: dict, folder: Path, grouped: bool, attn_implementation: str = "sdpa",
                tokens_per_step: int | None = None) -> dict:
    """The Trainer baseline; `tokens_per_step`: gradient accumulation to that many tokens per optimizer step, as
    `ours` gets with `--tokens-per-step`."""
    import datasets
    import torch
    from cpt_throughput import MASK_RATIO  # one owner: the paper's ratio, as `ours` masks
    from transformers import (
        AutoModelForMaskedLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    model = AutoModelForMaskedLM.from_pretrained(folder / "model", trust_remote_code=True,
                                                 attn_implementation=attn_implementation)
    raw = datasets.load_dataset("json", data_files=str(folder / "docs.jsonl"), split="train")
    seq_len = preset["seq_len"]
    if grouped:  # transformers' run_mlm.py default: concatenate, then cut into blocks of seq_len
        ids = raw.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
        flat = [t for row in ids["input_ids"] for t in row]
        blocks = [flat[i:i + seq_len] for i in range(0, len(flat) - seq_len + 1, seq_len)]
        train = datasets.Dataset.from_dict({"input_ids": blocks, "attention_mask": [[1] * seq_len] * len(blocks)})
    else:  # one document per row, truncated, padded per batch by the collator
        train = raw.map(lambda b: tokenizer(b["text"], truncation=True, max_length=seq_len), batched=True,
                        remove_columns=["text"])
    collator = _CountingCollator(DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=MASK_RATIO, mask_replace_prob=1.0, random_replace_prob=0.0))
    times = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter())

    total = preset["warmup"] + preset["steps"]
    accum = max(1, -(-tokens_per_step // (preset["rows"] * seq_len))) if tokens_per_step else 1
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    args = TrainingArguments(
        output_dir=str(folder / "trainer-out"), max_steps=total, per_device_train_batch_size=preset["rows"],
        gradient_accumulation_steps=accum,
        learning_rate=1e-4, warmup_steps=1, lr_scheduler_type="constant_with_warmup", adam_beta1=0.9, adam_beta2=0.95,
        weight_decay=0.1, max_grad_norm=1.0, bf16=bf16, logging_steps=10**9, save_strategy="no", report_to=[],
        dataloader_num_workers=0, disable_tqdm=True, seed=0)
    started = time.perf_counter()
    Trainer(model=model, args=args, train_dataset=train, data_collator=collator, callbacks=[StepClock()]).train()
    ends, warm = [started, *times], preset["warmup"]
    timed = collator.batches[warm * accum:total * accum]  # the collator runs once per micro-batch
    return {"tokens": sum(b["tokens"] for b in timed), "seconds": ends[total] - ends[warm], "grad_accum": accum,
            # what ran: the backend transformers dispatched to (the model as loaded), and no compile (the Trainer's
            # default, `torch_compile=False`)
            "attention_backend": model.config._attn_implementation, "compiled": {"on": bool(args.torch_compile)},
            "masked_tokens": sum(b["masked"] for b in timed), "masked_tokens_source": "collator labels",
            "head_tokens": sum(b["positions"] for b in timed),  # dense logits: every position, padding included
            "spans": [span for b in timed for span in b["spans"]],
            "padding_fraction": 1 - sum(b["tokens"] for b in collator.batches[:total * accum])
            / (total * accum * preset["rows"] * seq_len)}
