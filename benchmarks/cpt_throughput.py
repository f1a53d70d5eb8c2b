"""Training throughput of `hf-encoderize cpt` against what a user would otherwise write, on the same model and data.

Arms (each in its own subprocess, so peak memory is its own; arms alternate over `--repeats`):
- `ours`: `hf_encoderize.cpt.cpt` — packed rows with document isolation, sparse chunked MLM loss.
- `trainer`: transformers `Trainer` + `DataCollatorForLanguageModeling` on the same bidirectional model loaded with
  `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)`: one document per row, padded to the longest
  in the batch (truncated at `seq_len`), dense logits over every position. This is the baseline the issue names.
- `trainer_grouped`: the same Trainer, but texts concatenated and cut into `seq_len` blocks as transformers'
  `run_mlm.py` does by default (no padding, no document isolation, dense logits): isolates the sparse-loss gain.

Both sides mask 40% of tokens, all replaced by the mask token (paper, section 2), with AdamW (0.9, 0.95), weight decay
0.1, clipping 1.0 and the same peak LR, rows per step and sequence length. Throughput counts real (non-pad) tokens per
second over the steps after `--warmup` steps. On a GPU it also prints MFU: 6 * N * tokens/s over the device's dense
bf16 peak, with N the parameters that do matrix work per token (input embeddings excluded).

    python benchmarks/cpt_throughput.py                      # CPU: tiny Llama-shaped model, 32k vocabulary
    python benchmarks/cpt_throughput.py --preset gpu-0.5b    # GPU: Qwen2.5-0.5B-shaped, 152k vocabulary, seq 2048
    python benchmarks/cpt_throughput.py --arms ours --attn-implementation flex_attention --inputs runs/bench \
        --json runs/bench/flex.json                         # one backend; inputs built once and reused

`--inputs DIR` keeps the model, documents and runs (each `ours` run's encoder stays in DIR/ours-<backend>-*/run/);
`scripts/gpu_check.py` reads the `--json` report and reloads that encoder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRESETS = {
    # Llama-shaped, vocabulary >= 32k so the LM head matters as it does in real models.
    "cpu-tiny": dict(model=dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=32768, max_position_embeddings=2048),
                     seq_len=512, rows=8, steps=8, warmup=2, documents=1200),
    # Qwen2.5-0.5B shape (random weights): 24 layers, hidden 896, GQA 14/2, vocabulary 151,936.
    "gpu-0.5b": dict(model=dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                                tie_word_embeddings=True, rope_theta=1e6),
                     seq_len=2048, rows=8, steps=30, warmup=5, documents=6000),
    # Seconds on a CPU: for checking the plumbing (scripts/gpu_check.py --smoke), not for timing anything.
    "smoke": dict(model=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=512),
                  seq_len=128, rows=4, steps=3, warmup=1, documents=120),
}
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1, "MI300X": 1307.4, "MI250X": 191.5}


def build_inputs(preset: dict, folder: Path, seed: int = 0, decoder: bool = False) -> None:
    """A word-level tokenizer over the whole vocabulary, a random Llama encoder saved by hf-encoderize, and documents
    with a long-tailed length distribution (log-normal, median ~250 tokens) like web text, in `folder`/model and
    `folder`/docs.jsonl. `decoder=True` saves the plain causal decoder instead, as a user's `cpt MODEL` would get."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from hf_encoderize.bidirectional import encoderize
    from hf_encoderize.saving import save_encoder

    vocab_size = preset["model"]["vocab_size"] - 4  # room for <unk>, </s>, <pad>, <mask>
    vocab = {f"w{i}": i for i in range(vocab_size)} | {"<unk>": vocab_size, "</s>": vocab_size + 1}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**preset["model"], "vocab_size": vocab_size + 2}))
    if decoder:
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
    else:
        encoderize(model, tokenizer)
        save_encoder(model, tokenizer, folder / "model", overwrite=True)
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab_size + 1)
    zipf = (1.0 / ranks) / (1.0 / ranks).sum()  # word frequencies as in natural text
    with (folder / "docs.jsonl").open("w") as handle:
        for _ in range(preset["documents"]):
            length = int(np.clip(rng.lognormal(np.log(250), 0.9), 16, 4 * preset["seq_len"]))
            words = rng.choice(vocab_size, size=length, p=zipf)
            handle.write(json.dumps({"text": " ".join(f"w{w}" for w in words)}) + "\n")


def ensure_inputs(preset_name: str, folder: Path) -> None:
    """Build the inputs into `folder` unless it already holds them for this preset (`--inputs` reuse)."""
    marker = folder / "preset.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"preset": preset_name}:
        return
    folder.mkdir(parents=True, exist_ok=True)
    build_inputs(PRESETS[preset_name], folder)
    marker.write_text(json.dumps({"preset": preset_name}))


def run_ours(preset: dict, folder: Path, attn_implementation: str = "sdpa") -> dict:
    from hf_encoderize.cpt import cpt
    from hf_encoderize.data import DataConfig
    from hf_encoderize.loading import LoadConfig
    from hf_encoderize.masking import MaskingConfig
    from hf_encoderize.train import TrainConfig

    out = Path(tempfile.mkdtemp(prefix=f"ours-{attn_implementation}-", dir=folder))
    total = preset["warmup"] + preset["steps"]
    cpt(LoadConfig(str(folder / "model"), attn_implementation=attn_implementation),
        DataConfig(data_files=str(folder / "docs.jsonl"), seq_len=preset["seq_len"], eval_documents=0),
        MaskingConfig(mask_ratio=0.4),
        TrainConfig(output_dir=str(out / "run"), steps=total, batch_size=preset["rows"], lr=1e-4, warmup_steps=1,
                    save_every=10**9, eval_every=0, progress=False, log_every=10**9))
    records = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["kind"] == "train"][preset["warmup"]:]
    return {"tokens": sum(r["tokens"] for r in timed), "seconds": sum(r["step_time_s"] for r in timed),
            "losses": [r["loss"] for r in timed], "final_loss": timed[-1]["loss"],
            "encoder": str(out / "run" / "encoder")}


class _CountingCollator:
    """Wraps the MLM collator to record the real tokens of each batch (the Trainer calls it once per step)."""

    def __init__(self, collator):
        self.collator, self.tokens = collator, []

    def __call__(self, examples):
        batch = self.collator(examples)
        mask = batch.get("attention_mask")
        self.tokens.append(int(mask.sum()) if mask is not None else batch["input_ids"].numel())
        return batch


def run_trainer(preset: dict, folder: Path, grouped: bool, attn_implementation: str = "sdpa") -> dict:
    import datasets
    import torch
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
        tokenizer, mlm_probability=0.4, mask_replace_prob=1.0, random_replace_prob=0.0))
    times = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter())

    total = preset["warmup"] + preset["steps"]
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    args = TrainingArguments(
        output_dir=str(folder / "trainer-out"), max_steps=total, per_device_train_batch_size=preset["rows"],
        learning_rate=1e-4, warmup_steps=1, lr_scheduler_type="constant_with_warmup", adam_beta1=0.9, adam_beta2=0.95,
        weight_decay=0.1, max_grad_norm=1.0, bf16=bf16, logging_steps=10**9, save_strategy="no", report_to=[],
        dataloader_num_workers=0, disable_tqdm=True, seed=0)
    started = time.perf_counter()
    Trainer(model=model, args=args, train_dataset=train, data_collator=collator, callbacks=[StepClock()]).train()
    ends = [started, *times]
    warm = preset["warmup"]
    return {"tokens": sum(collator.tokens[warm:total]), "seconds": ends[total] - ends[warm],
            "padding_fraction": 1 - sum(collator.tokens[:total]) / (total * preset["rows"] * seq_len)}


def arm_main(arm: str, preset_name: str, folder: Path, attn_implementation: str) -> None:
    import torch

    preset = PRESETS[preset_name]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    if arm == "ours":
        result = run_ours(preset, folder, attn_implementation)
    else:
        result = run_trainer(preset, folder, grouped=arm.endswith("grouped"), attn_implementation=attn_implementation)
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print("RESULT " + json.dumps(result), flush=True)


def model_flops_utilisation(preset: dict, tokens_per_s: float) -> dict | None:
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    m = preset["model"]
    hidden, layers, inter = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"]
    kv = hidden * m["num_key_value_heads"] // m["num_attention_heads"]
    per_layer = hidden * hidden * 2 + hidden * kv * 2 + 3 * hidden * inter  # q, o, k, v, gate/up/down
    n = layers * per_layer + hidden * m["vocab_size"]  # + LM head (tied or not, it does matrix work)
    achieved = 6 * n * tokens_per_s / 1e12
    return {"device": name, "params_matmul": n, "achieved_tflops": achieved, "peak_bf16_tflops": peak,
            "mfu": achieved / peak if peak else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpu-0.5b" if _has_cuda() else "cpu-tiny", choices=sorted(PRESETS))
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each arm; the median counts")
    parser.add_argument("--arms", default="ours,trainer,trainer_grouped")
    parser.add_argument("--attn-implementation", default="sdpa", help="attention backend of every arm (LoadConfig)")
    parser.add_argument("--inputs", help="folder for the model, documents and runs, built once and kept "
                                         "(default: a temporary folder, deleted)")
    parser.add_argument("--json", help="also write the report to this file")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        return arm_main(args.arm, args.preset, Path(args.folder), args.attn_implementation)
    preset = PRESETS[args.preset]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.inputs or tmp)
        ensure_inputs(args.preset, folder)
        runs = {arm: [] for arm in args.arms.split(",")}
        for _ in range(args.repeats):
            for arm in runs:
                runs[arm].append(_spawn(arm, args.preset, folder, args.attn_implementation))
    report = {"preset": args.preset, "attn_implementation": args.attn_implementation, "seq_len": preset["seq_len"],
              "rows_per_step": preset["rows"], "timed_steps": preset["steps"], "repeats": args.repeats,
              "model": preset["model"]}
    for arm, results in runs.items():
        report[arm] = {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in results),
                       "tokens_per_s_runs": [round(r["tokens_per_s"], 1) for r in results],
                       **{k: v for k, v in results[-1].items() if k not in ("tokens_per_s", "losses", "tokens")}}
    ours = report["ours"]["tokens_per_s"]
    report["ratios"] = {f"ours_vs_{arm}": ours / report[arm]["tokens_per_s"] for arm in runs if arm != "ours"}
    report["mfu_ours"] = model_flops_utilisation(preset, ours)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _spawn(arm: str, preset: str, folder: Path, attn_implementation: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, __file__, "--arm", arm, "--preset", preset, "--folder", str(folder),
                           "--attn-implementation", attn_implementation], capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"arm {arm} failed:\n{done.stderr[-4000:]}")
    print(f"{arm}: {json.loads(lines[-1][7:])['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
    return json.loads(lines[-1][7:])


if __name__ == "__main__":
    main()
