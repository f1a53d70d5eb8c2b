"""The timed parts of scripts/gpu_session.py: one `ours` arm (the command's defaults unless the arm says otherwise),
the grouped Trainer baseline, the loss-kernel probe, each in this process, each row naming what ran.

Design choices:
- A row names the path it timed: the attention backend `auto` chose (the Trainer's: its model's
  `attn_implementation`, as loaded), compiled or not with dynamo's graph, graph-break and recompile-limit counts,
  the loss kernel, the allocator's retries, the GPU's clocks; so any two rows compare named paths.
- Run folders are deleted after each run (the disk is needed for the next); a profile is kept in OUT first.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "scripts") not in sys.path:
    sys.path.append(str(REPO / "scripts"))  # appended: a script's name never shadows an installed package
sys.path.insert(0, str(REPO / "benchmarks"))
import cpt_throughput as bench  # noqa: E402
import gpu_check  # noqa: E402
import synthetic_inputs as synthetic  # noqa: E402
from session_parts import Session, free_memory  # noqa: E402


@dataclass(frozen=True)
class Arm:
    """One timed `ours` part: the command's defaults unless a field says otherwise, run `repeats` times."""

    name: str
    backend: str | None = None
    """`--attn-implementation`; None: the command's default, auto (flash-attn varlen, then flex, then sdpa)."""
    compile: bool | None = None
    """`--compile` / `--no-compile`; None: the command's default (on for a CUDA/ROCm GPU)."""
    rows_factor: int = 1
    tokens_per_step: bool = False
    """Accumulate to `TOKENS_PER_STEP` tokens per optimizer step (over `SHORT` steps: each step is many rows)."""
    profile: bool = False
    repeats: int = 2
    needs: str | None = None  # a module that must import (liger_kernel), else the arm is skipped
    cuda_only: bool = False


ARMS = {arm.name: arm for arm in (
    Arm("default"),
    Arm("default_rows2x", rows_factor=2, repeats=1),
    Arm("tokens_per_step", tokens_per_step=True, repeats=1),
    Arm("profile", profile=True, repeats=1),
    Arm("sdpa", backend="sdpa", repeats=1),  # the control: a dense block-diagonal mask, as every figure before
    Arm("liger_fused", compile=False, repeats=1, needs="liger_kernel", cuda_only=True),
)}
TOKENS_PER_STEP = {"gpu": 65536, "smoke": 2048}  # ~65k tokens a step, as real CPT runs; smoke: 4 micro-batches
SHORT = {"steps": 10, "warmup": 2}  # the tokens-per-step arms: each optimizer step is 8-16 micro-batches


def documents_file(inputs: Path, shape: str) -> Path:
    """The carried documents of a shape: the GPU shapes share one file (words below the smaller vocabulary)."""
    return inputs / ("docs-gpu.jsonl.gz" if shape.startswith("gpu-") else f"docs-{shape}.jsonl.gz")


def stage_shape(session: Session, shape: str) -> Path:
    """The shape's documents (unpacked) and its random model, built on the GPU when there is one."""
    folder = session.out / "work" / shape
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(documents_file(session.inputs, shape), "rb") as source, (folder / "docs.jsonl").open("wb") as sink:
        shutil.copyfileobj(source, sink)
    synthetic.build_model(bench.PRESETS[shape], folder / "model", device="cuda" if session.cuda else "cpu")
    (folder / "preset.json").write_text(json.dumps({"preset": shape}))
    return folder


def time_arm(session: Session, shape: str, folder: Path, arm: Arm) -> tuple[str, dict]:
    """One arm at one shape, in this process, `arm.repeats` times: tokens/s (each run and the median), MFU, peak
    memory, and what ran (attention backend, compiled or not with dynamo's counts, loss kernel, allocator retries,
    GPU clocks and throttle reasons before and after). A profiled arm reports its profile only: its steps are
    synchronised, so its speed is not the run's."""
    if arm.cuda_only and not session.cuda:
        raise gpu_check.Skip("needs CUDA")
    if arm.needs and importlib.util.find_spec(arm.needs) is None:
        raise gpu_check.Skip(f"{arm.needs} does not import (carry its wheel)")
    if arm.needs == "liger_kernel":  # fused RMSNorm, SwiGLU and RoPE for every Llama built from here on
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)
    preset = dict(bench.PRESETS[shape])
    preset["rows"] *= arm.rows_factor
    overrides = {}
    if arm.tokens_per_step:
        preset.update(SHORT)
        overrides["tokens_per_step"] = tokens_per_step(session)
    runs = []
    for _ in range(arm.repeats):
        runs.append(one_run(session, folder, preset, arm, overrides))
        free_memory()  # dynamo reset: the next run's new layers compile afresh, never past its limit
    if arm.profile:
        return profile_row(session, shape, runs[-1])
    return summary_row(preset, runs)


def _torch():
    import torch

    return torch


def tokens_per_step(session: Session) -> int:
    return TOKENS_PER_STEP["smoke" if session.smoke else "gpu"]


def timed(session: Session, folder: Path, run: Callable[[], dict]) -> dict:
    """`run()`'s result (ours or the Trainer's) with the figures every timed row carries: tokens/s, the device and its
    counters before and after, utilisation, and peak GPU memory counted from this run's start."""
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    before = bench.device_state()
    result = run()
    result["device_state"] = {"before": before, "after": bench.device_state()}
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = session.device_name
    result.update(bench.utilisation(folder, result))
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def one_run(session: Session, folder: Path, preset: dict, arm: Arm, overrides: dict) -> dict:
    """One `ours` run (`cpt_throughput.run_ours`) with its figures and device counters; its run folder is deleted
    (the disk is needed for the next), its profile kept in OUT first. The CPU rehearsal compiles the `default` arm,
    as the default does on a GPU, so the compiled path and its counters are rehearsed too."""
    compile = True if arm.compile is None and session.smoke and arm.name == "default" else arm.compile
    result = timed(session, folder, lambda: bench.run_ours(preset, folder, arm.backend or "auto", profile=arm.profile,
                                                           compile=compile, overrides=overrides))
    result.pop("losses", None)
    run_dir = Path(result.pop("encoder")).parent
    if arm.profile and (run_dir / "profile").is_dir():
        kept = session.out / f"profile-{Path(folder).name}"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(run_dir / "profile", kept)
        result["profile_folder"] = str(kept)
    shutil.rmtree(run_dir.parent, ignore_errors=True)
    return result


def summary_row(preset: dict, runs: list[dict]) -> tuple[str, dict]:
    """The row of a timed arm: medians over its runs, each run's tokens/s, and what ran."""
    last = runs[-1]
    rates = [r["tokens_per_s"] for r in runs]
    mfus = [r["mfu"] for r in runs if r.get("mfu") is not None]
    peaks = [r["peak_gpu_mib"] for r in runs if r.get("peak_gpu_mib") is not None]
    kernel = last.get("loss_implementation", {})
    kernel = kernel.get("chosen", kernel) if isinstance(kernel, dict) else kernel
    compiled = last.get("compiled") or {}
    retries = [_retries(r) for r in runs]
    details = {**{k: v for k, v in last.items() if k not in ("tokens_per_s", "mfu", "peak_gpu_mib")},
               "tokens_per_s": statistics.median(rates), "tokens_per_s_runs": [round(r, 1) for r in rates],
               "mfu": statistics.median(mfus) if mfus else None, "peak_gpu_mib": max(peaks) if peaks else None,
               "alloc_retries": retries}
    figure = (f"rows {preset['rows']} x accum {last.get('grad_accum') or 1}, attention {last['attention_backend']}, "
              f"compiled {'yes' if compiled.get('on') else 'no'} (graphs {compiled.get('unique_graphs', '-')}, "
              f"breaks {compiled.get('graph_breaks', '-')}, limit hits {compiled.get('recompile_limit_hits', '-')}), "
              f"loss kernel {kernel}, runs "
              f"{'/'.join(f'{r:,.0f}' for r in rates)} tok/s, loss {last['final_loss']:.3f}")
    throttled = sorted({reason for r in runs for moment in (r.get("device_state") or {}).values() if moment
                        for reason in moment.get("throttle_reasons", []) if reason != "gpu_idle"})
    if throttled or any(retries):
        figure += f", throttle {','.join(throttled) or 'none'}, allocator retries {retries}"
    return figure, details


def _retries(run: dict) -> int | None:
    state = run.get("device_state") or {}
    before, after = state.get("before"), state.get("after")
    return after["alloc_retries"] - before["alloc_retries"] if before and after else None


def profile_row(session: Session, shape: str, run: dict) -> tuple[str, dict]:
    """The profiled arm's row: seconds per step by part and the top kernels, with no tokens/s or MFU (its steps are
    synchronised)."""
    profile = run.get("profile", {})
    parts = ("total", "attention_forward", "attention_backward", "loss", "head_backward", "optimizer", "data_wait",
             "forward_other", "backward_other", "unaccounted")
    figure = "per step (s): " + ", ".join(f"{k} {profile[k]:.4f}" for k in parts if isinstance(profile.get(k), float))
    return figure, {"profile": profile, "profile_folder": run.get("profile_folder"),
                    "attention_backend": run.get("attention_backend"), "compiled": run.get("compiled")}


def time_probe(session: Session, shape: str) -> tuple[str, dict]:
    """The MLM loss kernels `auto` chooses among, timed and checked against ours on the shape one micro-batch of this
    preset gives (the masked rows x hidden x vocabulary, bf16 on a GPU). On the CPU (the rehearsal) `dense` is named,
    since `auto` times nothing there."""
    torch = _torch()
    from hf_encoderize.objectives.loss_kernels import choose_loss_implementation

    preset = bench.PRESETS[shape]
    rows = round(bench.MASK_RATIO * preset["rows"] * preset["seq_len"])
    device = torch.device("cuda" if session.cuda else "cpu")
    dtype = torch.bfloat16 if session.cuda else torch.float32
    model = preset["model"]
    name, report = choose_loss_implementation("auto" if session.cuda else "dense", device, model["hidden_size"],
                                              model["vocab_size"], rows, dtype)
    seconds = report.get("seconds", {})
    figure = f"chosen {name}; " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in sorted(seconds.items(),
                                                                                       key=lambda kv: kv[1]))
    if report.get("failed"):
        figure += "; left out: " + "; ".join(f"{k} ({v})" for k, v in report["failed"].items())
    return figure, {"loss_probe": report}


def time_trainer(session: Session, shape: str, folder: Path, realistic: bool = False) -> tuple[str, dict]:
    """The grouped Trainer (transformers' run_mlm.py default) at the same shape: the baseline the ratio is against;
    `realistic`: given the tokens-per-step arm's gradient accumulation."""
    preset = dict(bench.PRESETS[shape])
    if realistic:
        preset.update(SHORT)
    result = timed(session, folder, lambda: bench.run_trainer(
        preset, folder, grouped=True, tokens_per_step=tokens_per_step(session) if realistic else None))
    shutil.rmtree(folder / "trainer-out", ignore_errors=True)
    return (f"attention {result['attention_backend']}, accum {result['grad_accum']}, padding "
            f"{result.get('padding_fraction', 0):.1%}"), result


def gpu_check_row(session: Session, check: Callable, *args) -> tuple[str, dict]:
    """A scripts/gpu_check.py row (its own subprocess and log) inside this session."""
    ctx = gpu_check.Context(session.out, session.smoke, session.seconds_left(), session.deadline, "", session.cuda)
    ctx.logs.mkdir(parents=True, exist_ok=True)
    ctx.work.mkdir(parents=True, exist_ok=True)
    return check(ctx, *args)

