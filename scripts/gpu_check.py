"""Every check that needs a GPU, in one command, ending in one table: `bash scripts/gpu_check.sh [--out DIR]`.

Rows, in order (each catches its own failure, so one broken row never hides the others; exit code 1 if any failed):
1. `gpu tests`: `pytest -m gpu tests/`; the figure is the pass count.
2. `cpt <backend>`: `benchmarks/cpt_throughput.py`'s `ours` arm, a bf16 cpt of a random Qwen2.5-0.5B-shaped Llama
   (seq 2048, 8 rows, 30 timed steps after 5 warm-up) under sdpa, flex_attention and flash_attention_2 (when
   flash_attn imports); the sdpa row also runs the Trainer baselines. Figures: tokens/s, MFU (useful model FLOPs,
   `hf_encoderize.training.flops`), peak GPU memory, loss, and ours over the Trainer arms (throughput; peak memory).
3. `accelerate <config>`: `accelerate launch --config_file hf_encoderize/configs/accelerate/<config>.yaml
   --num_processes 1 -m hf_encoderize.cli cpt` of a tiny random decoder for 6 steps, checkpointing at step 3:
   single_gpu, multi_gpu_ddp, fsdp (FSDP2), deepspeed_zero2 and deepspeed_zero3 (skipped when deepspeed does not
   import). multi_node.yaml needs a second machine and is not run.
4. `qlora`: `cpt --lora-r 8 --load-in-4bit` of the tiny decoder (skipped when bitsandbytes does not import).
5. `reload <row>`: each encoder that rows 2-4 saved, loaded by `tests/clean_env_check.py` in a fresh process where
   hf_encoderize cannot be imported (AutoModel, fill-mask, SentenceTransformer); passes when it loads bidirectional.

`--smoke` runs the same plumbing on a tiny model for a few steps, a CPU allowed: rows that need CUDA say so and skip.
`--wheels DIR` (or GPU_CHECK_WHEELS=DIR), for GPU machines without a package index, first installs a folder made by
`scripts/gpu_wheels.sh` into OUT/site (`pip install --no-index --no-deps --target`, the image left as it is) and puts
OUT/site first on the path of every command, then checks that every runtime requirement is met.

Output folder (`--out`, default gpu_check_out/, git-ignored): gpu_check.md (the table), gpu_check.json (the same
rows), cpt_<backend>.json (the benchmark's full report), logs/<row>.log (each command and its output), site/ (what
--wheels installed), work/ (models and runs; deleted at the end unless --keep-work).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is run or imported
from gpu_check_report import exit_code, render_table, summary_line, write_outputs  # noqa: E402, F401
from wheel_requirements import runnable_wheels, runtime_requirements, unmet_requirements  # noqa: E402, F401

REPO = Path(__file__).resolve().parent.parent
SHIPPED_CONFIGS = REPO / "hf_encoderize" / "configs" / "accelerate"  # package data: `hf-encoderize accelerate-config`
BACKENDS = ("sdpa", "flex_attention", "flash_attention_2")
# Config -> the distributed type its run must record: accelerate falls back to NO quietly (on a CPU, say), and a row
# that passed that way would prove nothing about the config.
ACCELERATE_CONFIGS = {"single_gpu": "NO", "multi_gpu_ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero2": "DEEPSPEED",
                      "deepspeed_zero3": "DEEPSPEED"}
TINY_STEPS = 6
PAD_DIFF_LIMIT = 1e-2  # padding must not move real tokens' states; looser than fp32 noise, tight enough for a leak


class Skip(Exception):
    """A check that cannot run here; the message is the reason the table shows."""


class CheckFailed(Exception):
    """A check that ran and failed; the message is one line (the error, and where the log is)."""


@dataclass
class Row:
    name: str
    status: str  # pass, fail or skipped
    wall_s: float
    figure: str = ""
    reason: str = ""
    details: dict = field(default_factory=dict)


@dataclass
class Context:
    out: Path
    smoke: bool
    timeout_s: float
    deadline: float
    baselines: str
    cuda: bool = False
    encoders: dict[str, str] = field(default_factory=dict)
    """Row name -> the encoder folder it saved, for the reload rows."""

    @property
    def work(self) -> Path:
        return self.out / "work"

    @property
    def logs(self) -> Path:
        return self.out / "logs"


# ------------------------------------------------------------------------------------------------ running a row


def run_row(name: str, check: Callable[[Context], tuple[str, dict]], ctx: Context) -> Row:
    """Run one check; whatever it raises becomes the row's status and reason, never the end of the script."""
    started = time.perf_counter()
    try:
        figure, details = check(ctx)
        row = Row(name, "pass", 0.0, figure, "", details)
    except Skip as skip:
        row = Row(name, "skipped", 0.0, reason=str(skip))
    except Exception as err:  # a row's failure is data for the table, never the end of the script
        reason = str(err) if isinstance(err, CheckFailed) else f"{type(err).__name__}: {err}"
        row = Row(name, "fail", 0.0, reason=" ".join(reason.split())[:400])
    row.wall_s = round(time.perf_counter() - started, 1)
    print(f"[gpu_check] {name}: {row.status} ({row.wall_s} s) {row.figure or row.reason}", file=sys.stderr, flush=True)
    return row


def child_env(checkout_on_path: bool = True) -> dict:
    """Offline, unbuffered, and able to import hf_encoderize from this checkout even when it is not installed (pip
    gets the plain path: the checkout's egg-info would make it think hf-encoderize is installed)."""
    path = os.pathsep.join(p for p in (str(REPO) if checkout_on_path else "", os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": path}


def run_logged(ctx: Context, name: str, cmd: list[str], ok_codes: tuple[int, ...] = (0,),
               checkout_on_path: bool = True) -> tuple[int, str]:
    """Run `cmd` in the repository root, its output into logs/<name>.log. Returns (exit code, output); raises
    CheckFailed on another exit code or on the timeout, killing the whole process group (accelerate's workers too)."""
    remaining = ctx.deadline - time.time()
    if remaining < 10:
        raise Skip("time budget spent (--budget-s)")
    log = ctx.logs / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.log"
    with subprocess.Popen(cmd, cwd=REPO, env=child_env(checkout_on_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=min(ctx.timeout_s, remaining))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            log.write_text(f"$ {shlex.join(cmd)}\n\n{output}\n[timed out]\n")
            raise CheckFailed(f"timed out after {min(ctx.timeout_s, remaining):.0f} s (log: {log})") from None
    log.write_text(f"$ {shlex.join(cmd)}\n\n{output}\n[exit {proc.returncode}]\n")
    if proc.returncode not in ok_codes:
        raise CheckFailed(f"exit {proc.returncode}: {error_line(output)} (log: {log})")
    return proc.returncode, output


def error_line(output: str) -> str:
    """The line that says what went wrong: our (or pip's) one-line `error:`, else the last exception line, else the
    last line. torchrun's `[rank0]:` prefixes go, and so do the launchers' own exceptions, which only say that the
    worker failed."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if line and not re.search(r"CalledProcessError|ChildFailedError", line)]
    for pattern in (r"(?i)^error: ", r"^(\w+\.)*\w*(Error|Exception)\b.*"):
        if found := [line for line in lines if re.match(pattern, line)]:
            return found[-1][:300]
    return lines[-1][:300] if lines else "no output"


def need_cuda(ctx: Context, cpu_ok_in_smoke: bool = False) -> None:
    if not ctx.cuda and not (cpu_ok_in_smoke and ctx.smoke):
        raise Skip("needs CUDA" + ("" if ctx.smoke else " (no GPU visible; --smoke checks the plumbing on a CPU)"))


def need_module(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise Skip(f"{module} is not importable (pip install {pip_name}, or add its wheel to --wheels)")


# ------------------------------------------------------------------------------------------------ the checks


def check_wheels(ctx: Context, folder: str) -> tuple[str, dict]:
    """Install the folder's wheels that this interpreter can run (the newest version of each) into OUT/site with
    `pip install --no-index --no-deps --target`, as the lent GPU machines want (their image is not ours to change), and
    put OUT/site first on this process's path and every command's PYTHONPATH, so a carried package wins over an older
    one of the image (say, a newer peft over its 0.21.0). Then every runtime requirement must be met: a miss fails this
    row and names it (make the folder again with scripts/gpu_wheels.sh, from this machine's `pip freeze`)."""
    wheels = runnable_wheels(Path(folder))
    if not wheels:
        raise CheckFailed(f"no .whl files for this Python in {folder!r}; make them on a machine with PyPI: "
                          f"bash scripts/gpu_wheels.sh {folder}")
    site = ctx.out / "site"
    shutil.rmtree(site, ignore_errors=True)
    run_logged(ctx, "wheels", [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                               "--disable-pip-version-check", "--target", str(site), *map(str, wheels)],
               checkout_on_path=False)
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    importlib.invalidate_caches()
    unmet = unmet_requirements(runtime_requirements(), sys.path)
    if unmet:
        raise CheckFailed(f"installed {len(wheels)} wheels into {site}, but still unmet: {', '.join(unmet)}")
    names = [w.name.split("-")[0] for w in wheels]
    return f"installed {len(names)} into {site.name}/: {', '.join(names)}", {"installed": [w.name for w in wheels]}


def check_gpu_tests(ctx: Context) -> tuple[str, dict]:
    code, output = run_logged(ctx, "gpu tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs", "-p",
                                                 "no:cacheprovider", "tests/"], ok_codes=(0, 1, 5))
    outcome = r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)"
    summary = next((line for line in reversed(output.splitlines()) if re.search(outcome + r".* in [\d.]+s", line)), "")
    counts = {kind.rstrip("s"): int(n) for n, kind in re.findall(outcome, summary)}
    if code == 5:
        raise Skip("no test is marked gpu")
    if code == 1 or counts.get("failed") or counts.get("error"):
        first = next((line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
        raise CheckFailed(f"{counts.get('failed', 0)} failed, {counts.get('error', 0)} errors: {first}")
    if not counts.get("passed"):
        reasons = sorted({line.split(": ", 1)[-1] for line in output.splitlines() if line.startswith("SKIPPED")})
        raise Skip(f"all {counts.get('skipped', 0)} skipped: {'; '.join(reasons)}")
    return f"{counts['passed']} passed, {counts.get('skipped', 0)} skipped", counts


def check_cpt(ctx: Context, backend: str) -> tuple[str, dict]:
    """The throughput benchmark's `ours` arm under one attention backend; inputs are built once and shared."""
    if backend == "flash_attention_2":
        need_module("flash_attn", "flash-attn")
    need_cuda(ctx, cpu_ok_in_smoke=backend == "sdpa")
    arms = "ours" + (f",{ctx.baselines}" if backend == "sdpa" and ctx.baselines and not ctx.smoke else "")
    report_path = ctx.out / f"cpt_{backend}.json"  # the benchmark's whole report, kept next to the table
    run_logged(ctx, f"cpt {backend}", [
        sys.executable, "benchmarks/cpt_throughput.py", "--preset", "smoke" if ctx.smoke else "gpu-0.5b",
        "--repeats", "1", "--arms", arms, "--attn-implementation", backend, "--inputs", str(ctx.work / "bench"),
        "--json", str(report_path)])
    report = json.loads(report_path.read_text())
    ours, mfu = report["ours"], (report.get("mfu_ours") or {}).get("mfu")
    _, run = finished_run(ctx, f"cpt {backend}", Path(ours["encoder"]).parent)
    peak = (f"peak {ours['peak_gpu_mib'] / 1024:.1f} GiB" if "peak_gpu_mib" in ours else
        f"peak RSS {ours['peak_rss_mib'] / 1024:.1f} GiB")
    figure = [f"{ours['tokens_per_s']:,.0f} tok/s", f"MFU {mfu:.1%}" if mfu else "MFU n/a", peak,
              f"loss {ours['final_loss']:.3f}", f"loss kernel {run.get('loss_implementation')}"]
    ratios = report["ratios"]
    figure += [f"{ratio:.2f}x {name.removeprefix('ours_vs_')}" for name, ratio in ratios.items()
               if name.startswith("ours_vs_")]
    if "peak_memory_ours_vs_trainer_grouped" in ratios:
        figure.append(f"peak memory {ratios['peak_memory_ours_vs_trainer_grouped']:.2f}x trainer_grouped")
    details = {"tokens_per_s": ours["tokens_per_s"], "mfu": mfu, "peak_gpu_mib": ours.get("peak_gpu_mib"),
               "final_loss": ours["final_loss"], "ratios": ratios, "targets": report.get("targets"),
               "report": str(report_path),
               "mixed_precision": run["mixed_precision"], "gpu_name": run["gpu_name"],
               "loss_implementation": run.get("loss_implementation")}
    return ", ".join(figure), details


def tiny_decoder(ctx: Context) -> Path:
    """A tiny random Llama decoder and its documents (the benchmark's builder), made once per run."""
    folder = ctx.work / "tiny"
    if not (folder / "docs.jsonl").is_file():
        sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]  # the builder imports hf_encoderize, maybe not installed
        from cpt_throughput import PRESETS, build_inputs

        build_inputs(PRESETS["smoke" if ctx.smoke else "cpu-tiny"], folder, decoder=True)
    return folder


def tiny_cpt_args(ctx: Context, run_dir: Path) -> list[str]:
    folder = tiny_decoder(ctx)
    return ["cpt", str(folder / "model"), "--data-files", str(folder / "docs.jsonl"), "--max-steps", str(TINY_STEPS),
            "--save-steps", "3", "--warmup-steps", "1", "--max-seq-length", "128" if ctx.smoke else "512",
            "--batch-size", "4",
            "--eval-documents", "8", "--output-dir", str(run_dir), "--overwrite", "--no-progress", "--logging-steps",
            "1"]


def finished_run(ctx: Context, name: str, run_dir: Path, distributed_type: str = "NO") -> tuple[str, dict]:
    """Read a cpt run folder's record, drop its checkpoints, register its encoder for reloading, and check that the
    run was what the row claims: the distributed type, bf16 on a GPU, a finite loss."""
    record_path = run_dir / "run_record.json"
    if not record_path.is_file():
        raise CheckFailed(f"the command exited 0 but wrote no {record_path}")
    record = json.loads(record_path.read_text())
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # GBs for the 0.5B model, and never reloaded
    ctx.encoders[name] = str(run_dir / "encoder")
    hardware, loss = record.get("hardware") or {}, record.get("final_train_loss")
    details = {k: record.get(k) for k in ("steps", "final_train_loss", "eval_loss", "tokens_seen", "wall_time_s")}
    details.update({k: hardware.get(k) for k in ("distributed_type", "mixed_precision", "num_processes", "gpu_name")})
    details["loss_implementation"] = (record.get("loss_implementation") or {}).get("chosen")
    if hardware.get("distributed_type") != distributed_type:
        raise CheckFailed(f"ran as distributed type {hardware.get('distributed_type')}, not {distributed_type}")
    if ctx.cuda and hardware.get("mixed_precision") != "bf16":
        raise CheckFailed(f"ran in {hardware.get('mixed_precision')} precision, not bf16")
    if loss is None or not math.isfinite(loss):
        raise CheckFailed(f"final training loss is {loss}")
    kind = "single process" if distributed_type == "NO" else distributed_type
    precision = {"no": "fp32"}.get(hardware.get("mixed_precision"), hardware.get("mixed_precision"))
    return f"{kind}, {precision}, {record['steps']} steps, loss {loss:.3f}", details


def check_accelerate(ctx: Context, config: str) -> tuple[str, dict]:
    if config.startswith("deepspeed"):
        need_module("deepspeed", "deepspeed")
    need_cuda(ctx, cpu_ok_in_smoke=config == "single_gpu")
    run_dir = ctx.work / f"accelerate-{config}"
    run_logged(ctx, f"accelerate {config}", [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(SHIPPED_CONFIGS / f"{config}.yaml"),
        "--num_processes", "1", "--main_process_port", str(free_port()), "-m", "hf_encoderize.cli",
        *tiny_cpt_args(ctx, run_dir)])
    return finished_run(ctx, f"accelerate {config}", run_dir, ACCELERATE_CONFIGS[config])


def check_qlora(ctx: Context) -> tuple[str, dict]:
    need_module("bitsandbytes", "bitsandbytes")
    need_cuda(ctx)
    run_dir = ctx.work / "qlora"
    run_logged(ctx, "qlora", [sys.executable, "-m", "hf_encoderize.cli", *tiny_cpt_args(ctx, run_dir), "--lora-r", "8",
                              "--load-in-4bit"])
    return finished_run(ctx, "qlora", run_dir)


def check_reload(ctx: Context, source: str, encoder: str) -> tuple[str, dict]:
    """tests/clean_env_check.py: a fresh process without hf_encoderize loads the encoder and probes it."""
    _, output = run_logged(ctx, f"reload {source}", [sys.executable, "tests/clean_env_check.py", encoder])
    report = json.loads(output.strip().splitlines()[-1])
    if report["is_causal"] is not False or not report["later_token_changes_first"]:
        raise CheckFailed(f"not bidirectional after reload: is_causal={report['is_causal']}, a later token changes "
                          f"the first state: {report['later_token_changes_first']}")
    if report["right_padding_max_diff"] > PAD_DIFF_LIMIT:
        raise CheckFailed(f"right padding moves real tokens' states by {report['right_padding_max_diff']:.2e}")
    return (f"bidirectional, {report['automodel_class']} + {report['mlm_class']}, fill-mask "
            f"{report['fill_mask'][0]!r}, ST {report['st_shape']}, pad diff {report['right_padding_max_diff']:.1e}",
            report)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------ the run


def planned_rows() -> list[tuple[str, Callable[[Context], tuple[str, dict]]]]:
    rows = [("gpu tests", check_gpu_tests)]
    rows += [(f"cpt {backend}", partial(check_cpt, backend=backend)) for backend in BACKENDS]
    rows += [(f"accelerate {config}", partial(check_accelerate, config=config)) for config in ACCELERATE_CONFIGS]
    return rows + [("qlora", check_qlora)]


def environment() -> dict:
    """Device, torch and CUDA facts, read in a child process so this one never holds a CUDA context."""
    code = ("import json, platform, torch; from importlib.metadata import version; c = torch.cuda.is_available(); "
            "print(json.dumps({'cuda': c, 'device': torch.cuda.get_device_name(0) if c else 'cpu', "
            "'torch': torch.__version__, 'transformers': version('transformers'), "
            "'python': platform.python_version()}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    return json.loads(done.stdout) if done.returncode == 0 else {"cuda": False, "device": "unknown (torch failed)"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", default="gpu_check_out", help="output folder (default: gpu_check_out/)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps, CPU allowed: checks the plumbing")
    parser.add_argument("--wheels", default=os.environ.get("GPU_CHECK_WHEELS"),
                        help="install this wheel folder into OUT/site first (default: $GPU_CHECK_WHEELS)")
    parser.add_argument("--only", default="", help="comma-separated substrings: run only the rows whose name has one")
    parser.add_argument("--baselines", default="trainer,trainer_grouped",
                        help="Trainer arms run next to the sdpa cpt row ('' for none)")
    parser.add_argument("--timeout-s", type=float, default=600, help="limit for each command")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole run: later commands are cut short or skipped, and say so")
    parser.add_argument("--keep-work", action="store_true", help="keep OUT/work (models, runs, encoders)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    out = Path(args.out).resolve()
    shutil.rmtree(out / "work", ignore_errors=True)
    shutil.rmtree(out / "logs", ignore_errors=True)
    ctx = Context(out, args.smoke, args.timeout_s, started + (args.budget_s or math.inf), args.baselines)
    ctx.logs.mkdir(parents=True)
    ctx.work.mkdir(parents=True)
    rows = [run_row("install wheels", partial(check_wheels, folder=args.wheels), ctx)] if args.wheels else []
    facts = environment()
    ctx.cuda = bool(facts.get("cuda"))
    wanted = [part for part in args.only.split(",") if part]
    for name, check in planned_rows():
        if not wanted or any(part in name for part in wanted):
            rows.append(run_row(name, check, ctx))
    for source, encoder in list(ctx.encoders.items()):
        rows.append(run_row(f"reload {source}", partial(check_reload, source=source, encoder=encoder), ctx))
    print(write_outputs(ctx, rows, facts, time.time() - started))
    if not args.keep_work:
        shutil.rmtree(ctx.work, ignore_errors=True)
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
