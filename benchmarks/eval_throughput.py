"""SC fine-tuning throughput: hf_encoderize.evaluation against Trainer + AutoModelForSequenceClassification.

Same model weights, same variable-length data, same batch size, optimizer (fused AdamW), schedule and clipping; only
the batching and the model wrapper differ. Baselines, side by side:
- `trainer_max_length`: what the transformers text-classification examples do by default (`pad_to_max_length`):
  every example padded to `--max-length`;
- `trainer_dynamic`: `DataCollatorWithPadding` (pads each random batch to its longest member);
- `trainer_grouped`: dynamic padding plus `train_sampling_strategy="group_by_length"`.
Each variant runs in its own process, so peak memory (RSS on CPU, `max_memory_allocated` on GPU) is its own.

    python benchmarks/eval_throughput.py                      # tiny Llama-shaped model (4 layers, hidden 256)
    python benchmarks/eval_throughput.py --model minilm       # the packaged all-MiniLM-L6-v2
    python benchmarks/eval_throughput.py --model PATH --steps 50 --threads 1

Prints one JSON object: examples/s per variant, ratios ours/baseline, real-token fraction of the batches, peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

VARIANTS = ("ours", "trainer_max_length", "trainer_dynamic", "trainer_grouped")
_CLAUSES = ["the plot was {a}", "the acting felt {a} from start to finish", "and the soundtrack seemed {a}",
            "although my friends thought the ending was {a}", "we watched it twice on a rainy sunday afternoon",
            "the director clearly had something to say about family and memory", "which was {a} in its own way"]
_ADJECTIVES = {1: ["great", "wonderful", "moving", "sharp"], 0: ["dull", "clumsy", "tedious", "flat"]}


def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2, found as the quickstart finds its teacher; its error line when not installed."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.pipeline.teachers import minilm

    try:
        return minilm()
    except EncoderizeError as err:
        sys.exit(f"error: {err}")


def build_model(kind: str, folder: Path) -> Path:
    """`llama`: a 4-layer Llama-shaped decoder with random weights (is_causal false, like a `cpt` encoder) and MiniLM's
    tokenizer; `minilm`: the packaged encoder; anything else: a model folder used as is."""
    if kind == "minilm":
        return minilm_dir()
    if kind != "llama":
        return Path(kind)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688,
                                  num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                                  max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id)
    config.is_causal = False
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_rows(n: int, seed: int = 0) -> list[dict]:
    """Review-like sentences of 1 to 12 clauses (geometric): most are short, a few are long, as in SST-2/MNLI."""
    rng = random.Random(seed)
    rows = []
    for index in range(n):
        label = index % 2
        clauses = 1
        while clauses < 12 and rng.random() < 0.6:
            clauses += 1
        text = ", ".join(rng.choice(_CLAUSES).format(a=rng.choice(_ADJECTIVES[label])) for _ in range(clauses))
        rows.append({"id": str(index), "text": text, "text_pair": None, "label": label})
    return rows


class _Clock(TrainerCallback):
    """Times the Trainer's steps after the first `warm_steps`, as `run_ours` times its run after two warm-up steps."""

    def __init__(self, warm_steps: int):
        self.warm_steps, self.started, self.seconds = warm_steps, None, None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.warm_steps:
            self.started = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.perf_counter() - self.started


def peak_memory_mib() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_ours(model_dir: Path, rows: list[dict], args) -> dict:
    from hf_encoderize.evaluation.backbone import load_backbone
    from hf_encoderize.evaluation.base import finetune, length_grouped_batches
    from hf_encoderize.evaluation.loaders import DatasetSpec
    from hf_encoderize.evaluation.sc import SequenceClassification
    from hf_encoderize.model.loading import LoadConfig

    backbone = load_backbone(LoadConfig(str(model_dir)))
    spec = DatasetSpec("bench", "sc", "accuracy", label_names=("neg", "pos"))
    task = SequenceClassification(spec, backbone.tokenizer, args.max_length)
    features = task.featurize(rows)
    head = task.make_head(backbone.hidden_size)
    # `eval --batching length`: the padding measured below; the default, random batches, pads as the Trainer's
    # dynamic-padding baseline does
    kwargs = dict(lr=5e-5, seed=0, batch_size=args.batch_size, warmup_ratio=0.1, batching="length")
    finetune(task, backbone, head, features, max_steps=2, **kwargs)  # warm-up: kernels, allocator
    started = time.perf_counter()
    facts = finetune(task, backbone, head, features, max_steps=args.steps, **kwargs)
    seconds = time.perf_counter() - started
    lengths = [len(f["input_ids"]) for f in features]
    batches = length_grouped_batches(lengths, args.batch_size, seed=0)[:args.steps]
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return {"examples": facts["train_examples"], "seconds": seconds, "real_token_fraction": real / padded}


def run_trainer(model_dir: Path, rows: list[dict], args, padding: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2, dtype=torch.float32,
                                                               attn_implementation="sdpa")
    model.config.pad_token_id = tokenizer.pad_token_id
    pad_to_max = padding == "max_length"
    data = Dataset.from_list([{"text": r["text"], "label": r["label"]} for r in rows]).map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=args.max_length,
                                padding="max_length" if pad_to_max else False),
        batched=True, remove_columns=["text"])
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=args.batch_size, learning_rate=5e-5,
        warmup_steps=0.1, max_steps=args.steps, logging_steps=10**6, save_strategy="no", eval_strategy="no",
        report_to=[], disable_tqdm=True, bf16=torch.cuda.is_available(), seed=0,
        train_sampling_strategy="group_by_length" if padding == "grouped" else "random")
    collator = default_data_collator if pad_to_max else DataCollatorWithPadding(tokenizer)
    clock = _Clock(warm_steps=2)  # like ours, time the steps after two warm-up steps
    trainer = Trainer(model=model, args=training, train_dataset=data, data_collator=collator, callbacks=[clock])
    trainer.train()
    real = sum(sum(mask) for mask in data["attention_mask"])
    fraction = real / (len(rows) * args.max_length) if pad_to_max else _batch_fraction(
        [len(ids) for ids in data["input_ids"]], args, grouped=padding == "grouped")
    return {"examples": (args.steps - 2) * args.batch_size, "seconds": clock.seconds, "real_token_fraction": fraction}


def _batch_fraction(lengths: list[int], args, grouped: bool) -> float:
    """Real-token fraction of the batches, each padded to its longest member: random batches for dynamic padding,
    length-grouped ones (transformers' LengthGroupedSampler sorts mega-batches of 50 batches, as ours does)."""
    from hf_encoderize.evaluation.base import length_grouped_batches

    if grouped:
        batches = length_grouped_batches(lengths, args.batch_size, seed=0)
    else:
        order = random.Random(0).sample(range(len(lengths)), len(lengths))
        batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    batches = batches[:args.steps]
    return sum(lengths[i] for b in batches for i in b) / sum(len(b) * max(lengths[i] for i in b) for b in batches)


def child(args) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = make_rows(args.steps * args.batch_size + args.batch_size * 2)
    model_dir = Path(args.model_dir)
    result = (run_ours(model_dir, rows, args) if args.variant == "ours" else
        run_trainer(model_dir, rows, args, args.variant.removeprefix("trainer_")))
    result.update(examples_per_s=result["examples"] / result["seconds"], peak_memory_mib=peak_memory_mib())
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama", help="llama (tiny, random), minilm, or a model folder")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch threads per variant (default: torch's)")
    parser.add_argument("--variant", choices=VARIANTS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        return child(args)
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(args.model, Path(tmp) / "model")
        results = {}
        for variant in VARIANTS:
            command = [sys.executable, __file__, "--variant", variant, "--model-dir", str(model_dir),
                       "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                       "--max-length", str(args.max_length)]
            command += ["--threads", str(args.threads)] if args.threads else []
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            line = next((out for out in done.stdout.splitlines() if out.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
            results[variant] = json.loads(line[len("RESULT "):])
    ours = results["ours"]["examples_per_s"]
    print(json.dumps({
        "model": args.model, "device": "cuda" if torch.cuda.is_available() else "cpu",
        "threads": args.threads or torch.get_num_threads(), "steps": args.steps, "batch_size": args.batch_size,
        "max_length": args.max_length,
        "variants": {k: {key: round(v, 3) for key, v in r.items()} for k, r in results.items()},
        "ratio_ours_over": {k: round(ours / r["examples_per_s"], 2) for k, r in results.items() if k != "ours"},
    }, indent=1))


if __name__ == "__main__":
    main()
