"""The parts of scripts/gpu_session.py: the session's record, running one part under its limit, and the parts that
come before any timed arm (installing the carried wheels, importing what every part needs).

Design choices:
- Every part is a row, the first two included: a carried folder that would break an import there (issue 65:
  huggingface_hub 2.x beside the image's transformers 5.17) fails the `install wheels` row and the `imports` row,
  each with its reason, and the session goes on to write what it can; before, the preload raised outside any part
  and the session ended with a traceback and no rows.
- Those two run under no alarm (`limit_s=None`): a limit that lands inside an import leaves half-initialised
  modules behind, and pip's install has its own timeout. Nothing here imports torch before the wheels are in place,
  so a carried package is the one every later import finds.
- Each row carries what dynamo did during its part (`dynamo`: unique graphs, graph breaks, recompile-limit hits),
  read from dynamo's process-wide counters before and after, so a recompile that shows only on one stack (say with
  `kernels` installed, issue 72) is in the table, whatever ran in the part.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "scripts") not in sys.path:
    sys.path.append(str(REPO / "scripts"))  # appended: a script's name never shadows an installed package
import gpu_check  # noqa: E402
import part_limits  # noqa: E402


@dataclass
class Session:
    out: Path
    """The session's output folder: session.jsonl, session.md, session.json."""
    inputs: Path
    """The carried inputs (`gpu_session.py prepare`)."""
    deadline: float
    """time.time() at which the budget is spent."""
    smoke: bool
    """The CPU rehearsal: the smoke preset; rows that need CUDA skip."""
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
             "| part | status | wall s | tokens/s | MFU | peak GiB | dynamo graphs | figure |",
             "|---|---|---|---|---|---|---|---|"]
    for row in session.rows:
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else ""
        rate = f"{row['tokens_per_s']:,.0f}" if row.get("tokens_per_s") is not None else ""
        peak = f"{row['peak_gpu_mib'] / 1024:.1f}" if row.get("peak_gpu_mib") is not None else ""
        figure = str(row["figure"]).replace("|", "\\|")
        lines.append(f"| {row['part']} | {row['status']} | {row['wall_s']} | {rate} | {mfu} | {peak} | "
                     f"{graphs_cell(row.get('dynamo'))} | {figure} |")
    return "\n".join(lines) + "\n"


def graphs_cell(dynamo: dict | None) -> str:
    """`3 (limit hits 0, breaks 0)`: what dynamo compiled during the part; blank where it never ran.

    >>> graphs_cell({"unique_graphs": 3, "recompile_limit_hits": 1, "graph_breaks": 0})
    '3 (limit hits 1, breaks 0)'
    >>> graphs_cell(None)
    ''
    """
    if not dynamo:
        return ""
    return f"{dynamo['unique_graphs']} (limit hits {dynamo['recompile_limit_hits']}, breaks {dynamo['graph_breaks']})"


def dynamo_totals() -> dict | None:
    """dynamo's process-wide counters (cumulative; `torch._dynamo.reset` leaves them): graphs compiled, graph breaks,
    recompile-limit hits. None before torch is imported, so reading them never imports it."""
    if "torch" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    # torch 2.11 and 2.13 count a hit recompile limit under "unimplemented" ("Dynamo recompile limit exceeded");
    # older releases under "frames" (a reason naming the limit)
    hits = [count for group in ("frames", "unimplemented") for reason, count in counters[group].items()
            if "limit" in reason.lower() and (group == "frames" or "recompile" in reason.lower())]
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(counters["graph_break"].values()), "recompile_limit_hits": sum(hits)}


def dynamo_since(before: dict | None) -> dict | None:
    now = dynamo_totals()
    if now is None:
        return None
    before = before or dict.fromkeys(now, 0)
    return {key: now[key] - before[key] for key in now}


def run_part(session: Session, part: str, limit_s: float | None, body: Callable[[], tuple[str, dict]]) -> None:
    """Run one part under its own limit (and what is left of the budget; None: no alarm at all, for the wheels and
    the imports) and record what it gave or why not, with what dynamo did meanwhile."""
    if session.seconds_left() < 1:
        session.record(part, "skipped", 0.0, "no budget left")
        return
    started, before = time.perf_counter(), dynamo_totals()
    limit = part_limits.Limit(min(limit_s, session.seconds_left())) if limit_s is not None else None
    try:
        try:
            if limit:  # armed inside both trys: no instant is outside them; raises only outside torch's own code
                limit.arm()
            figure, details = body()
            status = "pass"
        finally:  # disarmed inside the outer try: an alarm that lands here is still this part's row, never the
            if limit:  # session's end (a loaded machine made that window real)
                limit.disarm()
    except gpu_check.Skip as skip:
        figure, details, status = str(skip), {}, "skipped"
    except BaseException as err:  # noqa: BLE001 - a part's failure is a row, never the end of the session
        if isinstance(err, KeyboardInterrupt):
            raise
        figure, details, status = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}", {}, "fail"
    finally:
        if limit:
            limit.restore()
    dynamo = dynamo_since(before)
    session.record(part, status, time.perf_counter() - started, figure, {**details, "dynamo": dynamo})
    free_memory()


# What the parts import on first use, imported before the first alarm is armed: a limit that lands inside an import
# leaves half-initialised modules behind (every later part then failed on `datasets`), or a C extension half set up.
PRELOAD = (
    "torch", "torch._dynamo", "torch._inductor.compile_fx", "torch.profiler", "datasets", "accelerate", "transformers",
    "transformers.trainer", "transformers.models.llama.modeling_llama", "hf_encoderize.recipes.cpt",
    "hf_encoderize.training.profiling", "hf_encoderize.training.flops", "hf_encoderize.objectives.loss_kernels",
)


def preload() -> tuple[str, dict]:
    """Import every PRELOAD module, and name the versions that were found (what the session ran on)."""
    from importlib.metadata import version

    for name in PRELOAD:
        importlib.import_module(name)
    found = {name: version(name) for name in ("torch", "transformers", "huggingface_hub", "accelerate", "datasets")}
    return f"{len(PRELOAD)} modules; " + ", ".join(f"{k} {v}" for k, v in found.items()), {"versions": found}


def free_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def install_wheels(session: Session, folder: str) -> tuple[str, dict]:
    """The carried folder into OUT/site, first on the path (scripts/gpu_check.py's `check_wheels`: our requirements
    must be met), then every package the image keeps must still have its requirements met: a carried package that
    breaks one fails this row, naming both, before anything imports it."""
    ctx = gpu_check.Context(session.out, session.smoke, session.seconds_left(), session.deadline, "")
    ctx.logs.mkdir(parents=True, exist_ok=True)
    figure, details = gpu_check.check_wheels(ctx, folder)
    sys.path.insert(0, str(REPO))  # this checkout's hf_encoderize before the carried wheel's
    broken = broken_by(ctx.out / "site", [p for p in sys.path if p != str(ctx.out / "site")])
    if broken:
        raise gpu_check.CheckFailed(f"the carried wheels break what the image keeps: {'; '.join(broken)}")
    return figure, details


def broken_by(site: Path, image_path: list[str]) -> list[str]:
    """Each requirement of a package on `image_path` (the image) on a package installed into `site` that the
    site's version refuses: what would fail at import once `site` comes first."""
    from importlib.metadata import distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    carried = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions(path=[str(site)])
               if d.metadata["Name"]}
    broken, seen = [], set(carried)
    for dist in distributions(path=image_path):
        name = dist.metadata["Name"]
        if not name or canonicalize_name(name) in seen:
            continue  # the carried one shadows it, or an earlier copy on the path does
        seen.add(canonicalize_name(name))
        for text in dist.requires or []:
            requirement = Requirement(text)
            have = carried.get(canonicalize_name(requirement.name))
            if have is None or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
                continue
            if not requirement.specifier.contains(have, prereleases=True):
                broken.append(f"{name} {dist.version} requires {requirement}, the wheels carry {have}")
    return broken


def record_environment(session: Session) -> None:
    """After the imports: the device this session runs on, for the table's title and session.json."""
    import torch

    session.cuda = torch.cuda.is_available()
    session.device_name = torch.cuda.get_device_name(0) if session.cuda else "cpu"
