"""The prepared GPU session: a lent GPU's minutes go to measurement, not to building inputs.

Two steps. On the CPU machine, beforehand:

    python scripts/gpu_session.py prepare --inputs gpu_inputs     # documents, gzipped (~5 MB), seconds to minutes
    bash scripts/gpu_wheels.sh gpu_wheels                          # what the GPU image lacks (no PyPI there)

Then on the GPU, one command (the device tool: carry ["gpu_inputs", "gpu_wheels"], timeout_s ~560):

    python scripts/gpu_session.py run --inputs gpu_inputs --wheels gpu_wheels --budget-s 480 --out "$OUT/session"

Design choices:
- Inputs are made on the CPU and carried: the documents (Zipf words, log-normal lengths, as benchmarks/cpt_throughput.py
  makes them) are the slow part of each benchmark invocation there (60-100 s a call). The random models are not
  carried (2-5 GB): each shape is initialised directly on the GPU (about a second) and saved once to local disk.
- Every arm runs in this one process, one after another (`benchmarks/cpt_throughput.run_ours`, the Trainer baseline
  `run_trainer`), with the CUDA cache emptied and dynamo reset between arms, so no arm pays a Python start, an import
  of torch and transformers, or an input build. Peak memory is reset per arm.
- Parts run in the order the GPU issue asks (profile first at both shapes, then the baseline, the grouped Trainer,
  compile, more rows per step, Liger's fused RMSNorm/SwiGLU/RoPE last because it patches transformers' Llama classes
  for the rest of the process), then FSDP2 and the clean-environment reload through scripts/gpu_check.py's own rows
  (subprocesses: the launcher needs its own process).
- Each part has its own time limit (SIGALRM, at most what is left of `--budget-s`; raised only once the main thread
  is out of torch's own code, scripts/part_limits.py, so a part can overrun by the compilation it was in, and the
  imports every part needs come first, in an `imports` row, under no limit) and writes its result as soon as it
  ends: OUT/session.jsonl (one line a part) and OUT/session.md (the table so far). A part cut by its limit, or one that
  fails, is a row with its reason, never the end of the session, so a session cut short still brings back every part
  that finished.
- `--smoke` runs the same plan on the `smoke` preset, a CPU allowed (rows that need CUDA say so): the rehearsal, and
  what tests/test_gpu_session.py runs.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import gzip
import importlib.util
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _load(name: str, path: Path):
    """A script of this repository as a module (benchmarks/ and scripts/ are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("cpt_throughput", REPO / "benchmarks" / "cpt_throughput.py")
synthetic = _load("synthetic_inputs", REPO / "benchmarks" / "synthetic_inputs.py")
gpu_check = _load("gpu_check", REPO / "scripts" / "gpu_check.py")
part_limits = _load("part_limits", REPO / "scripts" / "part_limits.py")

SHAPES = ("gpu-0.5b", "gpu-1b")
SMOKE_SHAPES = ("smoke",)
DOCS_SEED = 0


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
# The GPU issue's order, most important first (a session cut short keeps what ran): the default path at 1B twice,
# more rows, the realistic batch and the Trainer given the same, the Trainer baseline, 0.5B, the loss probe with its
# new candidate, one profile, sdpa as the control; FSDP2 last, if time is left. "small"/"large": the two shapes.
ORDER = (("default", "large"), ("default_rows2x", "large"), ("tokens_per_step", "large"),
         ("trainer_grouped_tokens_per_step", "large"), ("trainer_grouped", "large"), ("default", "small"),
         ("trainer_grouped", "small"), ("probe", "large"), ("probe", "small"), ("profile", "large"),
         ("sdpa", "large"), ("sdpa", "small"), ("liger_fused", "large"))


# ------------------------------------------------------------------------------------------------ prepare (CPU)


def documents_file(inputs: Path, shape: str) -> Path:
    """The carried documents of a shape: the GPU shapes share one file (words below the smaller vocabulary)."""
    return inputs / ("docs-gpu.jsonl.gz" if shape.startswith("gpu-") else f"docs-{shape}.jsonl.gz")


def prepare(inputs: Path, shapes: tuple[str, ...]) -> dict:
    """Write the documents every shape needs, gzipped, and a manifest; returns the manifest."""
    inputs.mkdir(parents=True, exist_ok=True)
    manifest = {"docs_seed": DOCS_SEED, "files": {}}
    for shape in shapes:
        target = documents_file(inputs, shape)
        if target.name in manifest["files"]:
            continue
        group = [s for s in shapes if documents_file(inputs, s) == target]
        words = min(bench.PRESETS[s]["model"]["vocab_size"] for s in group) - 4
        preset = bench.PRESETS[shape]
        plain = target.with_suffix("")
        synthetic.write_documents(plain, max(bench.PRESETS[s]["documents"] for s in group), words, preset["seq_len"],
                              DOCS_SEED)
        with plain.open("rb") as source, gzip.open(target, "wb", compresslevel=6) as sink:
            shutil.copyfileobj(source, sink)
        plain.unlink()
        manifest["files"][target.name] = {"shapes": group, "words": words, "bytes": target.stat().st_size}
    (inputs / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ------------------------------------------------------------------------------------------------ run (GPU)


@dataclass
class Session:
    out: Path
    inputs: Path
    deadline: float
    smoke: bool
    cuda: bool
    device_name: str
    rows: list

    def seconds_left(self) -> float:
        return self.deadline - time.time()

    def record(self, part: str, status: str, wall_s: float, figure: str = "", details: dict | None = None) -> None:
        row = {"part": part, "status": status, "wall_s": round(wall_s, 1), "figure": figure, **(details or {})}
        self.rows.append(row)
        with (self.out / "session.jsonl").open("a") as handle:
            handle.write(json.dumps(row, default=str) + "\n")
        (self.out / "session.md").write_text(render(self))
        print(f"[gpu_session] {part}: {status} ({row['wall_s']} s) {figure}", file=sys.stderr, flush=True)


def render(session: Session) -> str:
    lines = [f"# GPU session on {session.device_name}", "",
             "| part | status | wall s | tokens/s | MFU | peak GiB | figure |", "|---|---|---|---|---|---|---|"]
    for row in session.rows:
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else ""
        rate = f"{row['tokens_per_s']:,.0f}" if row.get("tokens_per_s") is not None else ""
        peak = f"{row['peak_gpu_mib'] / 1024:.1f}" if row.get("peak_gpu_mib") is not None else ""
        figure = str(row["figure"]).replace("|", "\\|")
        lines.append(f"| {row['part']} | {row['status']} | {row['wall_s']} | {rate} | {mfu} | {peak} | {figure} |")
    return "\n".join(lines) + "\n"


def run_part(session: Session, part: str, limit_s: float, body: Callable[[], tuple[str, dict]]) -> None:
    """Run one part under its own limit (and what is left of the budget); record what it gave or why not."""
    import torch

    budget = min(limit_s, session.seconds_left())
    if session.seconds_left() < 1:
        session.record(part, "skipped", 0.0, "no budget left")
        return
    started = time.perf_counter()
    limit = part_limits.Limit(budget)  # raises only outside torch's own code: see scripts/part_limits.py
    try:
        try:
            limit.arm()  # armed inside both trys: no instant is outside them
            figure, details = body()
            status = "pass"
        finally:  # disarmed inside the outer try: an alarm that lands here is still this part's row, never the
            limit.disarm()  # session's end (a loaded machine made that window real)
    except gpu_check.Skip as skip:
        figure, details, status = str(skip), {}, "skipped"
    except BaseException as err:  # noqa: BLE001 - a part's failure is a row, never the end of the session
        if isinstance(err, KeyboardInterrupt):
            raise
        figure, details, status = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}", {}, "fail"
    finally:
        limit.restore()
    session.record(part, status, time.perf_counter() - started, figure, details)
    free_memory(torch)


# What the parts import on first use, imported before the first alarm is armed: a limit that lands inside an import
# leaves half-initialised modules behind (every later part then failed on `datasets`), or a C extension half set up.
PRELOAD = (
    "torch", "torch._dynamo", "torch._inductor.compile_fx", "torch.profiler", "datasets", "accelerate", "transformers",
    "transformers.trainer", "transformers.models.llama.modeling_llama", "hf_encoderize.recipes.cpt",
    "hf_encoderize.training.profiling", "hf_encoderize.training.flops", "hf_encoderize.objectives.loss_kernels",
)


def preload() -> tuple[str, dict]:
    for name in PRELOAD:
        importlib.import_module(name)
    return f"{len(PRELOAD)} modules", {}


def free_memory(torch) -> None:
    gc.collect()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


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
        free_memory(_torch())  # dynamo reset: the next run's new layers compile afresh, never past its limit
    if arm.profile:
        return profile_row(session, shape, runs[-1])
    return summary_row(preset, runs)


def _torch():
    import torch

    return torch


def tokens_per_step(session: Session) -> int:
    return TOKENS_PER_STEP["smoke" if session.smoke else "gpu"]


def one_run(session: Session, folder: Path, preset: dict, arm: Arm, overrides: dict) -> dict:
    """One `ours` run (`cpt_throughput.run_ours`) with its figures and device counters; its run folder is deleted
    (the disk is needed for the next), its profile kept in OUT first. The CPU rehearsal compiles the `default` arm,
    as the default does on a GPU, so the compiled path and its counters are rehearsed too."""
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    compile = True if arm.compile is None and session.smoke and arm.name == "default" else arm.compile
    before = bench.device_state()
    result = bench.run_ours(preset, folder, arm.backend or "auto", profile=arm.profile, compile=compile,
                            overrides=overrides)
    result["device_state"] = {"before": before, "after": bench.device_state()}
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = session.device_name
    result.update(bench.utilisation(folder, result))
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
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
              f"breaks {compiled.get('graph_breaks', '-')}), loss kernel {kernel}, runs "
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
    torch = _torch()
    preset = dict(bench.PRESETS[shape])
    if realistic:
        preset.update(SHORT)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    before = bench.device_state()
    result = bench.run_trainer(preset, folder, grouped=True,
                               tokens_per_step=tokens_per_step(session) if realistic else None)
    result["device_state"] = {"before": before, "after": bench.device_state()}
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = session.device_name
    result.update(bench.utilisation(folder, result))
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    shutil.rmtree(folder / "trainer-out", ignore_errors=True)
    return f"accum {result['grad_accum']}, padding {result.get('padding_fraction', 0):.1%}", result


def gpu_check_row(session: Session, check: Callable, *args) -> tuple[str, dict]:
    """A scripts/gpu_check.py row (its own subprocess and log) inside this session."""
    ctx = gpu_check.Context(session.out, session.smoke, session.seconds_left(), session.deadline, "", session.cuda)
    ctx.logs.mkdir(parents=True, exist_ok=True)
    ctx.work.mkdir(parents=True, exist_ok=True)
    return check(ctx, *args)


def plan(session: Session, shapes: tuple[str, ...], limits: dict) -> list[tuple[str, float, Callable]]:
    """The parts in `ORDER` (the GPU issue's order), each shape staged when first needed; on the smoke rehearsal both
    of ORDER's shapes are the one smoke shape."""
    folders: dict[str, Path] = {}
    size = {"large": shapes[-1], "small": shapes[0]}

    def staged(shape: str) -> Path:
        if shape not in folders:
            folders[shape] = stage_shape(session, shape)
        return folders[shape]

    parts = [(f"{shape} stage", limits["stage"], lambda s=shape: ("built", {"folder": str(staged(s))}))
             for shape in dict.fromkeys((size["large"], size["small"]))]
    seen = set()
    for name, which in ORDER:
        shape = size[which]
        if (name, shape) in seen:  # the smoke rehearsal: one shape stands for both
            continue
        seen.add((name, shape))
        if name.startswith("trainer_grouped"):
            body = partial(lambda s, r: time_trainer(session, s, staged(s), realistic=r), shape,
                           name.endswith("tokens_per_step"))
            limit = limits["arm"]
        elif name == "probe":
            body, limit = partial(time_probe, session, shape), limits["arm"]
        else:
            arm = ARMS[name]
            body = partial(lambda s, a: time_arm(session, s, staged(s), a), shape, arm)
            limit = limits["arm"] * arm.repeats
        parts.append((f"{shape} {name}", limit, body))
    parts.append(("accelerate fsdp", limits["launcher"],
                  lambda: gpu_check_row(session, gpu_check.check_accelerate, "fsdp")))
    return parts


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.time()
    if args.wheels:  # first, so the carried packages win over the image's for everything below
        ctx = gpu_check.Context(out, args.smoke, args.budget_s, started + args.budget_s, "")
        ctx.logs.mkdir(parents=True, exist_ok=True)
        gpu_check.check_wheels(ctx, args.wheels)
        sys.path.insert(0, str(REPO))  # this checkout's hf_encoderize before the carried wheel's
    import torch

    cuda = torch.cuda.is_available()
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    session = Session(out, Path(args.inputs).resolve(), started + args.budget_s, args.smoke, cuda, device_name, [])
    shapes = SMOKE_SHAPES if args.smoke else tuple(args.shapes.split(","))
    limits = {"stage": args.stage_limit_s, "arm": args.arm_limit_s, "launcher": args.launcher_limit_s}
    began = time.perf_counter()
    figure, details = preload()  # under no alarm: see PRELOAD
    session.record("imports", "pass", time.perf_counter() - began, figure, details)
    for part, limit, body in plan(session, shapes, limits):
        run_part(session, part, limit, body)
    encoder = session.out / "work" / "accelerate-fsdp" / "encoder"
    if encoder.is_dir():
        run_part(session, "reload accelerate fsdp", limits["launcher"],
                 lambda: gpu_check_row(session, gpu_check.check_reload, "accelerate fsdp", str(encoder)))
    summary = {"device": device_name, "torch": torch.__version__, "wall_s": round(time.time() - started, 1),
               "budget_s": args.budget_s, "rows": session.rows}
    (out / "session.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if not args.keep_work:
        shutil.rmtree(out / "work", ignore_errors=True)
    print(render(session))
    return 1 if any(row["status"] == "fail" for row in session.rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="on the CPU machine: the documents every shape needs, gzipped")
    prep.add_argument("--inputs", default="gpu_inputs")
    prep.add_argument("--shapes", default=",".join(SHAPES + SMOKE_SHAPES))
    go = sub.add_parser("run", help="on the GPU: every part, each under its own limit, results as they end")
    go.add_argument("--inputs", default="gpu_inputs")
    go.add_argument("--out", default="gpu_session_out")
    go.add_argument("--wheels", help="install this folder (scripts/gpu_wheels.sh) into OUT/site first")
    go.add_argument("--shapes", default=",".join(SHAPES))
    go.add_argument("--smoke", action="store_true", help="the `smoke` preset, a CPU allowed: the rehearsal")
    go.add_argument("--budget-s", type=float, default=520.0,
                    help="the whole session (default 520 s: under 9 minutes of one process, in a 15-minute window)")
    go.add_argument("--stage-limit-s", type=float, default=90.0, help="building one shape's model on the device")
    go.add_argument("--arm-limit-s", type=float, default=75.0,
                    help="one run of a timed arm at one shape (an arm run twice gets twice this)")
    go.add_argument("--launcher-limit-s", type=float, default=120.0, help="the FSDP2 launch, and its reload")
    go.add_argument("--keep-work", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        manifest = prepare(Path(args.inputs), tuple(args.shapes.split(",")))
        print(json.dumps(manifest, indent=2))
        return 0
    return run(args)


if __name__ == "__main__":
    faulthandler.enable()  # a native crash prints every thread's stack, so a session log says where it died
    code = main()
    # A part cut by its SIGALRM limit can leave native threads behind (the profiler's, inductor's compile workers).
    # Their teardown at interpreter exit crashed once with SIGSEGV on a loaded CI machine, after every row was on disk
    # (stop 46). Everything is written and flushed by now, so the process leaves without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
