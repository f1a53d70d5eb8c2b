"""Training throughput and MFU of `hf-encoderize cpt` against what a user would otherwise write (same model, data).

Arms (each in its own subprocess, so peak memory is its own; arms alternate over `--repeats`):
- `ours`: `hf_encoderize.recipes.cpt.cpt` as the command runs it: `--attn-implementation auto` (flash-attn's varlen
  kernel where it imports, then flex attention, then sdpa), `--compile` at its default (on for a CUDA/ROCm GPU), the
  loss kernel `auto` picks; packed rows with document isolation. Each row names the backend, compile decision and
  loss kernel that ran, with dynamo's graph and graph-break counts and, on CUDA, the allocator's retries and the
  GPU's clocks and throttle reasons before and after (`device_state`).
- `ours_sdpa` (named in `--arms`): the control, `ours` with attention pinned to sdpa (a dense block-diagonal mask).
- `trainer`: transformers `Trainer` + `DataCollatorForLanguageModeling` on the same bidirectional model loaded with
  `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)`: one document per row, padded to the longest
  in the batch (truncated at `seq_len`), dense logits over every position. This is the baseline the issue names.
- `trainer_grouped`: the same Trainer, but texts concatenated and cut into `seq_len` blocks as transformers'
  `run_mlm.py` does by default (no padding, no document isolation, dense logits): isolates the sparse-loss gain.
- `ours_compiled` / `ours_eager` (named in `--arms`): `ours` with `--compile` / `--no-compile` forced (compilation
  falls in the warm-up steps).

`--tokens-per-step N` gives every arm the same tokens per optimizer step by gradient accumulation (ours through
`--tokens-per-step`, the Trainer arms through `gradient_accumulation_steps`): MFU at a realistic batch (~65k tokens)
rather than at the rows one micro-batch holds.

Both sides mask 40% of tokens, all replaced by the mask token (paper, section 2), with AdamW (0.9, 0.95), weight decay
0.1, clipping 1.0 and the same peak LR, rows per step and sequence length. Throughput counts real (non-pad) tokens per
second over the steps after `--warmup` steps.

MFU (`training.flops`) is the same definition for every arm: model FLOPs of useful work per second over the
device's dense bf16 peak, where useful work = 6 x decoder-layer matmul params x real tokens + 6 x hidden x vocab x
masked tokens (the head on the rows the MLM loss needs; the Trainer arms' dense logits elsewhere earn no credit, and
are reported apart as `head_executed`) + 12 x layers x heads x head_dim x sum(L^2) over the spans attention covers:
`ours` the document pieces of each packed row (documents of `i % rows` lanes, split at row boundaries, as
`packing.LaneStream` packs them), `trainer_grouped` whole rows, `trainer` each truncated document (padding is not
work). Masked tokens: `ours` from metrics.jsonl's `labelled_tokens` (0.4 x tokens if missing; the report says which),
the Trainer arms from the collator's labels. A device name not in the peak table gives MFU null, never a guess.

Also reported: peak memory per arm (GPU max_memory_allocated on CUDA, else peak RSS) and its ratio to the Trainer
arms, `ours`'s share of step time spent waiting for data (metrics.jsonl `data_wait_s`), and `targets` (MFU >= 0.45,
>= 2x the grouped Trainer, less peak memory than it). `--attn-implementation all` runs `ours` under every backend this
machine runs (eager, sdpa, flex_attention and flash_attention_2 on CUDA, `auto` when LoadConfig accepts it) and the
Trainer arms under sdpa (and flash_attention_2), in `table[arm][backend]`; the top-level arm entries, ratios and
targets compare at sdpa (MFU's target takes ours's best backend). `--profile` adds one `ours` run with
`TrainConfig(profile=True)` and reports its OUT/profile/summary.json (seconds per step by component).

    python benchmarks/cpt_throughput.py                      # CPU: tiny Llama-shaped model, 32k vocabulary
    python benchmarks/cpt_throughput.py --preset gpu-0.5b    # GPU: Qwen2.5-0.5B-shaped, 152k vocabulary, seq 2048
    python benchmarks/cpt_throughput.py --preset gpu-1b --attn-implementation all --profile --json runs/1b.json
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
from pathlib import Path

PRESETS = {
    # Llama-shaped, vocabulary >= 32k so the LM head matters as it does in real models.
    "cpu-tiny": dict(model=dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=32768, max_position_embeddings=2048),
                     seq_len=512, rows=8, steps=8, warmup=2, documents=1200),
    # Qwen2.5-0.5B shape (random weights): 24 layers, hidden 896, GQA 14/2, vocabulary 151,936. 8 rows fit 80 GB in
    # every arm: a fake-tensor trace of the dense-logits Trainer step (bf16 autocast, fp32 weights and AdamW) peaks
    # at ~59 GiB, 2.5e9 logits (bf16, then fp32 for the loss and its gradient) included.
    "gpu-0.5b": dict(model=dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                                tie_word_embeddings=True, rope_theta=1e6),
                     seq_len=2048, rows=8, steps=30, warmup=5, documents=6000),
    # Llama-3.2-1B shape (random weights): 16 layers, hidden 2048, GQA 32/8, vocabulary 128,256, tied embeddings.
    # 4 rows for every arm: at 8 the same trace of the dense Trainer step peaks at ~71 GiB, too close to an H100's
    # ~78 usable with allocator fragmentation on top; at 4, ~44 GiB.
    "gpu-1b": dict(model=dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                              num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                              tie_word_embeddings=True, rope_theta=500000.0),
                   seq_len=2048, rows=4, steps=30, warmup=5, documents=6000),
    # Seconds on a CPU: for checking the plumbing (scripts/gpu_check.py --smoke), not for timing anything.
    "smoke": dict(model=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=512),
                  seq_len=128, rows=4, steps=3, warmup=1, documents=120),
}
BACKENDS = ("eager", "sdpa", "flex_attention", "flash_attention_2", "auto")  # `all`: ours under each one available
TRAINER_BACKENDS = ("sdpa", "flash_attention_2")
PRIMARY = "auto"  # with `all`, the backend the top-level entries, ratios and targets compare at: the command's default
# Each `ours` arm: (attention backend, or None for the one asked; TrainConfig.compile, None for the default)
OURS_ARMS = {"ours": (None, None), "ours_sdpa": ("sdpa", None), "ours_compiled": (None, True),
             "ours_eager": (None, False)}
MASK_RATIO = 0.4  # paper, section 2

# The synthetic inputs (random Llama, word tokenizer, Zipf documents) live beside this file; scripts/gpu_check.py and
# scripts/gpu_session.py load this module by path, so its folder is put on the path here, not by the caller.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_inputs import build_inputs  # noqa: E402, I001
from bench_measures import THROTTLE_REASONS, device_state, lane_rows, ours_spans, utilisation  # noqa: E402, F401
from trainer_baseline import run_trainer  # noqa: E402



def ensure_inputs(preset_name: str, folder: Path) -> None:
    """Build the inputs into `folder` unless it already holds them for this preset (`--inputs` reuse)."""
    marker = folder / "preset.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"preset": preset_name}:
        return
    folder.mkdir(parents=True, exist_ok=True)
    build_inputs(PRESETS[preset_name], folder)
    marker.write_text(json.dumps({"preset": preset_name}))


def run_ours(preset: dict, folder: Path, attn_implementation: str = "auto", profile: bool = False,
             compile: bool | None = None, overrides: dict | None = None) -> dict:
    """One `ours` run, the command's defaults unless told (`attn_implementation`, `compile`: None is the default);
    `overrides` are further TrainConfig fields (scripts/gpu_session.py's arms, `tokens_per_step`)."""
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    kind = "profile-" if profile else {True: "compiled-", False: "eager-"}.get(compile, "")
    out = Path(tempfile.mkdtemp(prefix=f"ours-{kind}{attn_implementation}-", dir=folder))
    total = preset["warmup"] + preset["steps"]
    extra = {"profile": True} if profile else {}  # older TrainConfigs lack the field: profile_ours checks first
    extra.update({} if compile is None else {"compile": compile})
    extra.update(overrides or {})
    # Figures are read once, at the end (accuracy, an extra arg-max pass, only on that step): the read waits for the
    # device and that wait is counted in the last step's time (`monitor.flush`), so the window ends when the device
    # does. It starts when the host queues the first timed step, at most the host's lead (under one step) early.
    cpt(LoadConfig(str(folder / "model"), attn_implementation=attn_implementation),
        DataConfig(data_files=str(folder / "docs.jsonl"), seq_len=preset["seq_len"], eval_documents=0),
        MaskingConfig(mask_ratio=MASK_RATIO),
        TrainConfig(output_dir=str(out / "run"), steps=total, batch_size=preset["rows"], lr=1e-4, warmup_steps=1,
                    save_every=10**9, eval_every=0, progress=False, log_every=10**9, **extra))
    records = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["kind"] == "train"][preset["warmup"]:]  # optimizer steps
    tokens, seconds = sum(r["tokens"] for r in timed), sum(r["step_time_s"] for r in timed)
    labelled, waits = [r.get("labelled_tokens") for r in timed], [r.get("data_wait_s") for r in timed]
    measured = None not in labelled
    masked = sum(labelled) if measured else round(MASK_RATIO * tokens)
    source = "metrics.jsonl labelled_tokens" if measured else f"estimate: {MASK_RATIO} x tokens"
    result = {"tokens": tokens, "seconds": seconds, "losses": [r["loss"] for r in timed],
              "final_loss": timed[-1]["loss"], "encoder": str(out / "run" / "encoder"),
              "masked_tokens": masked, "head_tokens": masked,  # the sparse head runs on the masked rows only
              "masked_tokens_source": source,
              "spans": ours_spans(preset, folder),
              "data_wait_share": sum(waits) / seconds if None not in waits else None}
    record = json.loads((out / "run" / "run_record.json").read_text())
    if "loss_implementation" in record:  # the MLM loss kernel `auto` picked, with the probe's timings
        result["loss_implementation"] = record["loss_implementation"]
    # What ran, as the run recorded it: the attention backend `auto` chose, compiled or not (and dynamo's counts)
    result["attention_backend"] = (record.get("encoderize") or {}).get("attn_implementation")
    result["compiled"] = record.get("compiled")
    result["grad_accum"] = record.get("grad_accum")
    if profile:
        summary = out / "run" / "profile" / "summary.json"
        result["profile"] = json.loads(summary.read_text()) if summary.is_file() else {"missing": str(summary)}
    return result


def arm_main(arm: str, preset_name: str, folder: Path, attn_implementation: str, profile: bool = False,
             tokens_per_step: int | None = None) -> None:
    import torch

    preset = PRESETS[preset_name]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    before = device_state()
    if arm in OURS_ARMS:
        backend, compile = OURS_ARMS[arm]
        result = run_ours(preset, folder, backend or attn_implementation, profile, compile=compile,
                          overrides={"tokens_per_step": tokens_per_step} if tokens_per_step else None)
    else:
        result = run_trainer(preset, folder, grouped=arm.endswith("grouped"), attn_implementation=attn_implementation,
                             tokens_per_step=tokens_per_step)
    result["device_state"] = {"before": before, "after": device_state()}
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    result.update(utilisation(folder, result))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print("RESULT " + json.dumps(result), flush=True)


def available_backends(folder: Path) -> tuple[list[str], dict[str, str]]:
    """The attention backends `ours` can train with here, and why each other one is left out."""
    import torch

    from hf_encoderize.model.loading import LoadConfig

    cuda, skipped = torch.cuda.is_available(), {}
    if not cuda:
        skipped["flex_attention"] = "needs CUDA (FlexAttention has no backward on CPU)"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        skipped["flash_attention_2"] = "flash_attn does not import (pip install flash-attn)"
    else:
        if not cuda:
            skipped["flash_attention_2"] = "needs CUDA"
    try:
        LoadConfig(str(folder / "model"), attn_implementation="auto")
    except Exception as err:  # the loader's own validation error, whatever its class
        skipped["auto"] = f"LoadConfig does not accept it: {err}"
    return [b for b in BACKENDS if b not in skipped], skipped


def plan_runs(arms: list[str], attn_implementation: str, folder: Path) -> tuple[list[tuple[str, str]], dict]:
    """(arm, backend) pairs to run, and the backends left out with their reasons (`all` only). The Trainer arms take
    sdpa where `ours` takes `auto` (transformers' own default; they have no `auto` to pick among backends)."""
    if attn_implementation != "all":
        trainer_backend = "sdpa" if attn_implementation == "auto" else attn_implementation
        return [(arm, (OURS_ARMS[arm][0] or attn_implementation) if arm in OURS_ARMS else trainer_backend)
                for arm in arms], {}
    backends, skipped = available_backends(folder)
    plan = [(arm, backend) for arm in arms if arm in OURS_ARMS for backend in backends]
    plan += [(arm, backend) for arm in arms if arm not in OURS_ARMS for backend in TRAINER_BACKENDS
             if backend in backends]
    return plan, skipped


def profile_ours(preset_name: str, folder: Path, backend: str) -> dict:
    """One extra `ours` run with TrainConfig(profile=True): its OUT/profile/summary.json (seconds per step by
    component: attention, loss, optimizer, data_wait, forward_other, backward_other, total)."""
    from hf_encoderize.training.train_config import TrainConfig

    if "profile" not in TrainConfig.__dataclass_fields__:
        return {"skipped": "this hf_encoderize's TrainConfig has no `profile` field yet"}
    return {"backend": backend, **_spawn("ours", preset_name, folder, backend, profile=True)["profile"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpu-0.5b" if _has_cuda() else "cpu-tiny", choices=sorted(PRESETS))
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each arm; the median counts")
    parser.add_argument("--arms", default="ours,trainer,trainer_grouped")
    parser.add_argument("--attn-implementation", default="auto",
                        help="attention backend of the `ours` arms (default auto, as the command; the Trainer arms "
                             "then take sdpa), or `all`: ours under every backend this machine runs, the Trainer arms "
                             "under sdpa (and flash_attention_2)")
    parser.add_argument("--tokens-per-step", type=int,
                        help="every arm accumulates gradients to this many tokens per optimizer step (e.g. 65536)")
    parser.add_argument("--profile", action="store_true",
                        help="one extra `ours` run with TrainConfig(profile=True); its per-component seconds go in "
                             "the report")
    parser.add_argument("--inputs", help="folder for the model, documents and runs, built once and kept "
                                         "(default: a temporary folder, deleted)")
    parser.add_argument("--json", help="also write the report to this file")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--profile-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        return arm_main(args.arm, args.preset, Path(args.folder), args.attn_implementation, args.profile_run,
                        args.tokens_per_step)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.inputs or tmp)
        ensure_inputs(args.preset, folder)
        plan, skipped = plan_runs(args.arms.split(","), args.attn_implementation, folder)
        runs = {key: [] for key in plan}
        for _ in range(args.repeats):
            for arm, backend in plan:
                runs[(arm, backend)].append(_spawn(arm, args.preset, folder, backend,
                                                   tokens_per_step=args.tokens_per_step))
        primary = PRIMARY if args.attn_implementation == "all" else args.attn_implementation
        profile = profile_ours(args.preset, folder, primary) if args.profile else None
    report = build_report(args, runs, skipped, primary, profile)
    print(render_table(report["table"]), file=sys.stderr)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


def summarise(results: list[dict]) -> dict:
    """One arm under one backend: medians over the repeats, the last run's other fields."""
    rates = [r["mfu"] for r in results if r.get("mfu") is not None]
    tflops = [r["model_tflops_per_s"] for r in results if r.get("model_tflops_per_s") is not None]
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in results),
            "tokens_per_s_runs": [round(r["tokens_per_s"], 1) for r in results],
            "mfu": statistics.median(rates) if rates else None,
            "model_tflops_per_s": statistics.median(tflops) if tflops else None,
            **{k: v for k, v in results[-1].items()
               if k not in ("tokens_per_s", "mfu", "model_tflops_per_s", "losses", "tokens")}}


def build_report(args, runs: dict, skipped: dict, primary: str, profile: dict | None) -> dict:
    from hf_encoderize.training.flops import peak_tflops

    preset = PRESETS[args.preset]
    table: dict[str, dict[str, dict]] = {}
    for (arm, backend), results in runs.items():
        table.setdefault(arm, {})[backend] = summarise(results)
    report = {"preset": args.preset, "attn_implementation": args.attn_implementation, "seq_len": preset["seq_len"],
              "tokens_per_step": args.tokens_per_step,
              "rows_per_step": preset["rows"], "timed_steps": preset["steps"], "repeats": args.repeats,
              "model": preset["model"], "backends_skipped": skipped, "table": table}
    for arm, by_backend in table.items():  # each arm at the primary backend, as before `all` existed
        report[arm] = by_backend.get(primary) or next(iter(by_backend.values()))
    on_gpu = all("peak_gpu_mib" in r for by_backend in table.values() for r in by_backend.values())
    report["peak_memory_measure"] = "gpu" if on_gpu else "rss"  # torch.cuda.max_memory_allocated, else peak RSS
    report["ratios"] = ratios(report, [arm for arm in table if arm != "ours"])
    if "ours" in table:
        ours = report["ours"]
        report["mfu_ours"] = {"device": ours["device"], "peak_bf16_tflops": peak_tflops(ours["device"]),
                              "model_tflops_per_s": ours["model_tflops_per_s"], "mfu": ours["mfu"],
                              "params_matmul": ours["params_matmul"], "flops_timed_steps": ours["flops"]}
        report["data_wait_share_ours"] = ours.get("data_wait_share")
    report["profile_ours"] = profile
    report["targets"], report["targets_basis"] = targets(report, table.get("ours", {}))
    return report


def ratios(report: dict, others: list[str]) -> dict:
    """`ours` over each other arm: throughput, and peak memory (`peak_memory_measure` says which memory)."""
    if "ours" not in report:
        return {}
    ours = report["ours"]
    found = {f"ours_vs_{arm}": ours["tokens_per_s"] / report[arm]["tokens_per_s"] for arm in others}
    key = "peak_gpu_mib" if report["peak_memory_measure"] == "gpu" else "peak_rss_mib"
    found.update({f"peak_memory_ours_vs_{arm}": ours[key] / report[arm][key] for arm in others})
    return found


def targets(report: dict, ours_by_backend: dict) -> tuple[dict, str]:
    """The goals, true/false, or null where this run cannot tell (no MFU on this device, no grouped arm, no GPU)."""
    rates = {backend: r["mfu"] for backend, r in ours_by_backend.items() if r["mfu"] is not None}
    best = max(rates, key=rates.get) if rates else None
    ratio = report["ratios"].get("ours_vs_trainer_grouped")
    memory = report["ratios"].get("peak_memory_ours_vs_trainer_grouped")
    on_gpu = report.get("peak_memory_measure") == "gpu"
    found = {"mfu_ours_ge_0.45": rates[best] >= 0.45 if best else None,
             "ours_vs_trainer_grouped_ge_2": ratio >= 2 if ratio is not None else None,
             "peak_memory_below_grouped": memory < 1 if memory is not None and on_gpu else None}
    backend = PRIMARY if report["attn_implementation"] == "all" else report["attn_implementation"]
    return found, (f"MFU: ours's best backend ({best or 'no MFU on this device'}); throughput and GPU memory: ours "
                   f"vs trainer_grouped under {backend}")


def render_table(table: dict) -> str:
    """The table for people, on stderr: each arm under the backend asked, the one that ran and whether it compiled."""
    lines = ["| arm | backend asked | ran | compiled | tokens/s | MFU | model TFLOP/s | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, by_backend in table.items():
        for backend, r in by_backend.items():
            peak = r.get("peak_gpu_mib", r["peak_rss_mib"])
            mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "null"
            tflops = f"{r['model_tflops_per_s']:.3f}" if r["model_tflops_per_s"] is not None else "null"
            ran = r.get("attention_backend") or backend
            compiled = {True: "yes", False: "no"}.get((r.get("compiled") or {}).get("on"), "")
            lines.append(f"| {arm} | {backend} | {ran} | {compiled} | {r['tokens_per_s']:,.0f} | {mfu} | {tflops} | "
                         f"{peak:,.0f} |")
    return "\n".join(lines)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _spawn(arm: str, preset: str, folder: Path, attn_implementation: str, profile: bool = False,
           tokens_per_step: int | None = None) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, __file__, "--arm", arm, "--preset", preset, "--folder", str(folder),
                           "--attn-implementation", attn_implementation, *(["--profile-run"] if profile else []),
                           *(["--tokens-per-step", str(tokens_per_step)] if tokens_per_step else [])],
                          capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"arm {arm} ({attn_implementation}) failed:\n{done.stderr[-4000:]}")
    result = json.loads(lines[-1][7:])
    mfu = f"{result['mfu']:.1%}" if result.get("mfu") is not None else f"null ({result['device']})"
    print(f"{arm}/{attn_implementation}{' (profiled)' if profile else ''}: {result['tokens_per_s']:.0f} tokens/s, "
          f"MFU {mfu}", file=sys.stderr, flush=True)
    return result


if __name__ == "__main__":
    main()
