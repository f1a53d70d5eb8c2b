"""Where a training step's time goes: `cpt --torch-profile` (and `benchmarks/cpt_throughput.py --profile`).

Design choices:
- The engine marks its parts with `section(name)`: data_wait, forward (the backbone), loss, backward, optimizer.
  Outside a profiled step a section is a no-op. Inside one, it synchronises the device before and after and adds the
  wall time to its total, so the parts add up to the step (the timed steps run slower than unprofiled ones).
- Attention cannot be timed that way (it runs inside every layer), so it is read off `torch.profiler`: the device
  time (CPU time on CPU) of the kernels and ops whose names say attention (flash, fmha, sdpa, flex, efficient
  attention), split into forward and backward by name (`bwd`/`backward`), and subtracted from forward and backward.
- `OUT/profile/summary.json` holds seconds per step for attention, loss, optimizer, data_wait, forward_other,
  backward_other and total, plus the device; `OUT/profile/trace.json` is the Chrome trace.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path

import torch

ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa|flex", re.IGNORECASE)
BACKWARD = re.compile(r"bwd|backward", re.IGNORECASE)
_TIMES: dict[str, float] | None = None  # section totals while a profiled step runs; None otherwise


@contextlib.contextmanager
def section(name: str):
    """Time this part of a step when the step is profiled; a no-op otherwise."""
    if _TIMES is None:
        yield
        return
    _synchronize()
    started = time.perf_counter()
    try:
        yield
    finally:
        _synchronize()
        _TIMES[name] = _TIMES.get(name, 0.0) + time.perf_counter() - started


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepProfiler:
    """Profile steps `[first, first + count)` of a run (`around(step)` wraps each step); writes the summary on close."""

    def __init__(self, folder: Path, first: int, count: int):
        self.folder, self.first, self.count = Path(folder), first, count
        self.profiler, self.steps, self.wall = None, 0, 0.0

    @contextlib.contextmanager
    def around(self, step: int):
        global _TIMES
        if not self.first <= step < self.first + self.count:
            yield
            return
        if self.profiler is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.__enter__()
            _TIMES = {}
        _synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            _synchronize()
            self.wall += time.perf_counter() - started
            self.steps += 1
            if self.steps == self.count:
                self.close()

    def close(self) -> None:
        """Stop profiling and write `summary.json` and `trace.json` (main process; idempotent)."""
        global _TIMES
        if self.profiler is None:
            return
        self.profiler.__exit__(None, None, None)
        times, _TIMES = _TIMES or {}, None
        from accelerate.state import PartialState

        if PartialState().is_main_process:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.profiler.export_chrome_trace(str(self.folder / "trace.json"))
            summary = summarize(times, attention_seconds(self.profiler), self.wall, max(self.steps, 1))
            (self.folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.profiler = None


def attention_seconds(profiler) -> dict:
    """Forward and backward attention time from the profiler: device kernels on a GPU, outermost ops on CPU."""
    forward = backward = 0.0
    on_gpu = torch.cuda.is_available()
    for event in profiler.events():
        if not ATTENTION.search(event.name):
            continue
        if on_gpu:
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            seconds = event.device_time / 1e6  # a kernel: its own time
        else:
            if _has_attention_ancestor(event):
                continue  # counted in the outermost attention op
            seconds = event.cpu_time_total / 1e6
        if BACKWARD.search(event.name):
            backward += seconds
        else:
            forward += seconds
    return {"forward": forward, "backward": backward}


def _has_attention_ancestor(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if ATTENTION.search(parent.name):
            return True
        parent = parent.cpu_parent
    return False


def summarize(times: dict, attention: dict, wall: float, steps: int) -> dict:
    """Seconds per step by component; the parts not timed separately land in `forward_other`/`backward_other`.

    >>> summarize({"forward": 2.0, "loss": 1.0, "backward": 4.0, "optimizer": 1.0, "data_wait": 0.5},
    ...           {"forward": 1.0, "backward": 2.0}, wall=9.0, steps=1)["backward_other"]
    2.0
    """
    per = {name: value / steps for name, value in times.items()}
    forward_attention, backward_attention = attention["forward"] / steps, attention["backward"] / steps
    return {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "steps": steps,
            "attention": forward_attention + backward_attention, "attention_forward": forward_attention,
            "attention_backward": backward_attention, "loss": per.get("loss", 0.0),
            "optimizer": per.get("optimizer", 0.0), "data_wait": per.get("data_wait", 0.0),
            "forward_other": max(0.0, per.get("forward", 0.0) - forward_attention),
            "backward_other": max(0.0, per.get("backward", 0.0) - backward_attention), "total": wall / steps}
