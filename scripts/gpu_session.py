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
- The carried wheels (`--wheels`) and the imports are the first two rows, under no limit, so a folder that breaks
  the image, or a failed import, is a row with its reason and not a lost session (scripts/session_parts.py). Every
  row carries dynamo's graph count over its part (unique graphs, recompile-limit hits, graph breaks).
- `--smoke` runs the same plan on the `smoke` preset, a CPU allowed (rows that need CUDA say so): the rehearsal, and
  what tests/test_gpu_session.py runs; scripts/gpu_rehearse.sh runs it on the GPU image's own stack (torch 2.11,
  transformers 5.17, huggingface_hub 1.33, Python 3.12) with the carried wheels, as the session installs them.
- The modules: this file (the plan, prepare, run), scripts/session_parts.py (the record, one part under its limit,
  the wheels and imports parts), scripts/session_arms.py (the timed parts).
"""

from __future__ import annotations

import argparse
import faulthandler
import gzip
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
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
parts = _load("session_parts", REPO / "scripts" / "session_parts.py")  # the record, run_part, wheels, imports
arms = _load("session_arms", REPO / "scripts" / "session_arms.py")  # the timed parts
Session, run_part, render = parts.Session, parts.run_part, parts.render
ARMS, documents_file = arms.ARMS, arms.documents_file

SHAPES = ("gpu-0.5b", "gpu-1b")
SMOKE_SHAPES = ("smoke",)
DOCS_SEED = 0


# The GPU issue's order, most important first (a session cut short keeps what ran): the default path at 1B twice,
# more rows, the realistic batch and the Trainer given the same, the Trainer baseline, 0.5B, the loss probe with its
# new candidate, one profile, sdpa as the control; FSDP2 last, if time is left. "small"/"large": the two shapes.
ORDER = (("default", "large"), ("default_rows2x", "large"), ("tokens_per_step", "large"),
         ("trainer_grouped_tokens_per_step", "large"), ("trainer_grouped", "large"), ("default", "small"),
         ("trainer_grouped", "small"), ("probe", "large"), ("probe", "small"), ("profile", "large"),
         ("sdpa", "large"), ("sdpa", "small"), ("liger_fused", "large"))


# ------------------------------------------------------------------------------------------------ prepare (CPU)


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


def plan(session: Session, shapes: tuple[str, ...], limits: dict) -> list[tuple[str, float, Callable]]:
    """The parts in `ORDER` (the GPU issue's order), each shape staged when first needed; on the smoke rehearsal both
    of ORDER's shapes are the one smoke shape."""
    folders: dict[str, Path] = {}
    size = {"large": shapes[-1], "small": shapes[0]}

    def staged(shape: str) -> Path:
        if shape not in folders:
            folders[shape] = arms.stage_shape(session, shape)
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
            body = partial(lambda s, r: arms.time_trainer(session, s, staged(s), realistic=r), shape,
                           name.endswith("tokens_per_step"))
            limit = limits["arm"]
        elif name == "probe":
            body, limit = partial(arms.time_probe, session, shape), limits["arm"]
        else:
            arm = ARMS[name]
            body = partial(lambda s, a: arms.time_arm(session, s, staged(s), a), shape, arm)
            limit = limits["arm"] * arm.repeats
        parts.append((f"{shape} {name}", limit, body))
    parts.append(("accelerate fsdp", limits["launcher"],
                  lambda: arms.gpu_check_row(session, gpu_check.check_accelerate, "fsdp")))
    return parts


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.time()
    session = Session(out, Path(args.inputs).resolve(), started + args.budget_s, args.smoke, False, "(not read yet)",
                      [])
    if args.wheels:  # first, so the carried packages win over the image's for everything below; a row, like any part
        run_part(session, "install wheels", None, partial(parts.install_wheels, session, args.wheels))
    run_part(session, "imports", None, parts.preload)  # under no alarm: see session_parts.PRELOAD
    parts.record_environment(session)
    shapes = SMOKE_SHAPES if args.smoke else tuple(args.shapes.split(","))
    limits = {"stage": args.stage_limit_s, "arm": args.arm_limit_s, "launcher": args.launcher_limit_s}
    for part, limit, body in plan(session, shapes, limits):
        run_part(session, part, limit, body)
    encoder = session.out / "work" / "accelerate-fsdp" / "encoder"
    if encoder.is_dir():
        run_part(session, "reload accelerate fsdp", limits["launcher"],
                 lambda: arms.gpu_check_row(session, gpu_check.check_reload, "accelerate fsdp", str(encoder)))
    summary = {"device": session.device_name, "torch": sys.modules["torch"].__version__,
               "wall_s": round(time.time() - started, 1), "budget_s": args.budget_s, "rows": session.rows}
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
