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
- Each part has its own time limit (SIGALRM, at most what is left of `--budget-s`) and writes its result as soon as it
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
import signal
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

SHAPES = ("gpu-0.5b", "gpu-1b")
SMOKE_SHAPES = ("smoke",)
DOCS_SEED = 0


@dataclass(frozen=True)
class Arm:
    """One timed `ours` run: a name, TrainConfig overrides, and a row multiplier (more rows per step)."""

    name: str
    overrides: dict
    rows_factor: int = 1
    profile: bool = False
    needs: str | None = None  # a module that must import (liger_kernel), else the arm is skipped
    cuda_only: bool = False


ARMS = (
    Arm("profile", {}, profile=True),
    Arm("sdpa", {}),
    Arm("compiled", {"compile": True}),
    Arm("compiled_rows2x", {"compile": True}, rows_factor=2),
    Arm("liger_fused", {"compile": False}, needs="liger_kernel", cuda_only=True),
)


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


class PartTimeout(Exception):
    """A part ran past its own limit."""


def _alarm(signum, frame):
    raise PartTimeout("ran past its time limit")


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
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        figure, details = body()
        status = "pass"
    except gpu_check.Skip as skip:
        figure, details, status = str(skip), {}, "skipped"
    except BaseException as err:  # noqa: BLE001 - a part's failure is a row, never the end of the session
        if isinstance(err, KeyboardInterrupt):
            raise
        figure, details, status = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}", {}, "fail"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    session.record(part, status, time.perf_counter() - started, figure, details)
    free_memory(torch)


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
    """One arm at one shape, in this process: tokens/s, MFU and peak memory, as cpt_throughput.arm_main reports."""
    import torch

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
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    result = bench.run_ours(preset, folder, "sdpa", profile=arm.profile, overrides=arm.overrides)
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = session.device_name
    result.update(bench.utilisation(folder, result))
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    result.pop("losses", None)
    shutil.rmtree(Path(result["encoder"]).parent.parent, ignore_errors=True)  # keep the disk for the next arm
    result.pop("encoder")
    kernel = result.get("loss_implementation", {})
    kernel = kernel.get("chosen", kernel) if isinstance(kernel, dict) else kernel
    figure = f"rows {preset['rows']}, loss {result['final_loss']:.3f}, loss kernel {kernel}"
    if arm.profile:
        figure = "per step (s): " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                              for k, v in result.get("profile", {}).items()
                                              if not isinstance(v, dict | list))
    return figure, result


def time_trainer(session: Session, shape: str, folder: Path) -> tuple[str, dict]:
    """The grouped Trainer (transformers' run_mlm.py default) at the same shape: the baseline the ratio is against."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    result = bench.run_trainer(bench.PRESETS[shape], folder, grouped=True)
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["device"] = session.device_name
    result.update(bench.utilisation(folder, result))
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    shutil.rmtree(folder / "trainer-out", ignore_errors=True)
    return f"padding {result.get('padding_fraction', 0):.1%}", result


def gpu_check_row(session: Session, check: Callable, *args) -> tuple[str, dict]:
    """A scripts/gpu_check.py row (its own subprocess and log) inside this session."""
    ctx = gpu_check.Context(session.out, session.smoke, session.seconds_left(), session.deadline, "", session.cuda)
    ctx.logs.mkdir(parents=True, exist_ok=True)
    ctx.work.mkdir(parents=True, exist_ok=True)
    return check(ctx, *args)


def plan(session: Session, shapes: tuple[str, ...], limits: dict) -> list[tuple[str, float, Callable]]:
    """The parts in the GPU issue's order: profile first at every shape, then each arm across the shapes."""
    folders: dict[str, Path] = {}

    def staged(shape: str) -> Path:
        if shape not in folders:
            folders[shape] = stage_shape(session, shape)
        return folders[shape]

    parts = [(f"{shape} stage", limits["stage"], lambda s=shape: ("built", {"folder": str(staged(s))}))
             for shape in shapes]
    by_arm = {arm.name: arm for arm in ARMS}
    for name in ("profile", "sdpa", "trainer_grouped", "compiled", "compiled_rows2x", "liger_fused"):
        for shape in shapes:
            body = (partial(lambda s: time_trainer(session, s, staged(s)), shape) if name == "trainer_grouped"
                    else partial(lambda s, a: time_arm(session, s, staged(s), a), shape, by_arm[name]))
            parts.append((f"{shape} {name}", limits["arm"], body))
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
    go.add_argument("--budget-s", type=float, default=480.0, help="the whole session (default 480 s: 8 minutes)")
    go.add_argument("--stage-limit-s", type=float, default=90.0, help="building one shape's model on the device")
    go.add_argument("--arm-limit-s", type=float, default=75.0, help="one timed arm at one shape")
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
