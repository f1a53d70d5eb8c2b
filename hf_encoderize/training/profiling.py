"""Where a training step's time goes: `cpt --profile` (and `benchmarks/cpt_throughput.py --profile`).

Design choices:
- The engine marks its parts with `section(name)`: data_wait, forward (the backbone), loss (the MLM head's forward),
  backward, optimizer. Outside a profiled step a section is a no-op. Inside one, it synchronises the device before
  and after, adds the wall time to its total (so the parts add up to the step; profiled steps run slower than
  unprofiled ones) and opens a `record_function("hf_encoderize::<name>")` region in the profiler's trace.
- The profiled steps are steady ones (`steady_window`): 3 steps after the first 10 of the run, or the last 3 of a
  shorter one, never the first steps, which pay compilation, the allocator's growth and the first kernel launches.
- Attention and the head run inside other parts, so their device time is read off `torch.profiler` and classified
  by **who launched each kernel**, not by the kernel's name: a kernel belongs to attention when its launching op or
  one of that op's ancestors is an attention op (aten's scaled_dot_product / flash / efficient / cuDNN attention,
  flash-attn's functions, flex attention), and to the backward pass when it ran inside the autograd engine
  (`autograd::engine::evaluate_function: ...`). A backward node is also tied to its forward op by autograd's sequence
  number, so the head's backward (and a backward kernel whose op names nothing) is found from the forward op that
  made it. Names alone misfiled the masked-SDPA backward (`fmha_cutlassB_*` says neither `bwd` nor `backward`) as
  forward. A kernel no op claims but whose name says attention (compiled flex templates) is counted as attention and
  reported apart (`attention_by_kernel_name`), so the reader sees how much rests on names.
- On CPU the "kernels" are the ops' own (self) CPU times, classified the same way.
- `OUT/profile/summary.json` holds seconds per step by part (attention forward/backward, head forward/backward,
  optimizer, data wait, the rest of forward and backward, total, and what the parts leave unaccounted), the 20
  kernels with the most device time, and the device; `OUT/profile/trace.json` is the Chrome trace.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

PROFILE_AFTER = 10  # steps before the profiled window: compilation and warm-up are over by then
PROFILE_STEPS = 3
ATTENTION_OPS = re.compile(r"scaled_dot_product|ScaledDotProduct|_flash_attention|_efficient_attention|"
                           r"_cudnn_attention|flash_attn|FlashAttn|flex_attention|FlexAttention|"
                           r"hf_encoderize::attention")
# The fallback for a kernel no op claims. Inductor's template kernels (`triton_tem_*`) are flex attention's under the
# default compile mode (matmul templates come only with max-autotune).
ATTENTION_KERNEL_NAMES = re.compile(r"flash|fmha|attention|attn|sdpa|flex|^triton_tem_", re.IGNORECASE)
BACKWARD_REGION = re.compile(r"^autograd::engine::evaluate_function|CompiledFunctionBackward|"
                             r"hf_encoderize::(attention|loss)_backward$")
HEAD = "hf_encoderize::loss"
HEAD_BACKWARD = "hf_encoderize::loss_backward"
ATTENTION_BACKWARD = "hf_encoderize::attention_backward"
_TIMES: dict[str, float] | None = None  # section totals while a profiled step runs; None otherwise


@contextlib.contextmanager
def section(name: str):
    """Time this part of a step when the step is profiled (and mark it in the trace); a no-op otherwise."""
    if _TIMES is None:
        yield
        return
    _synchronize()
    started = time.perf_counter()
    try:
        with torch.profiler.record_function(f"hf_encoderize::{name}"):
            yield
    finally:
        _synchronize()
        _TIMES[name] = _TIMES.get(name, 0.0) + time.perf_counter() - started


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def steady_window(start: int, until: int) -> int:
    """The first profiled step of a run going from `start` to `until`: `PROFILE_AFTER` steps in, or as late as leaves
    `PROFILE_STEPS` steps in a shorter run.

    >>> steady_window(0, 35), steady_window(0, 5), steady_window(0, 2)
    (10, 2, 0)
    """
    return start + max(0, min(PROFILE_AFTER, until - start - PROFILE_STEPS))


class StepProfiler:
    """Profile steps `[first, first + count)` of a run (`around(step)` wraps each step); writes the summary on close."""

    def __init__(self, folder: Path, first: int, count: int = PROFILE_STEPS):
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
            profiler = torch.profiler.profile(activities=activities)
            try:
                profiler.__enter__()
            except BaseException:  # cut while starting (Ctrl-C, a time limit): stop what may have started, and keep
                _stop_quietly(profiler)  # no handle on it, since its results cannot be read (see `abandon`)
                raise
            self.profiler, _TIMES = profiler, {}
        _synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            _synchronize()
            self.wall += time.perf_counter() - started
            self.steps += 1
        if self.steps == self.count:  # only after a step that ended normally: a cut step leaves `abandon` to the run
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
            launched = launched_kernels(self.profiler.events(), on_device=torch.cuda.is_available())
            summary = summarize(times, classify(launched), self.wall, max(self.steps, 1))
            summary["profiled_steps"] = [self.first, self.first + self.steps - 1]
            (self.folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.profiler = None

    def abandon(self) -> None:
        """Stop profiling a run that did not end normally, and write nothing: the window was cut, and reading kineto's
        results after a start that was itself cut short crashes the process (a SIGSEGV in `export_chrome_trace`, seen
        when a time limit landed in the profiler's warm-up on a loaded CPU). Idempotent."""
        global _TIMES
        if self.profiler is None:
            return
        profiler, self.profiler, _TIMES = self.profiler, None, None
        _stop_quietly(profiler)


def _stop_quietly(profiler) -> None:
    with contextlib.suppress(Exception):
        profiler.__exit__(None, None, None)


@dataclass(frozen=True)
class Launched:
    """One kernel's device time (on CPU: one op's own CPU time) and who launched it: the launching op's name first,
    then its ancestors outward, with `hf_encoderize::*_backward` marks where a backward node was tied to its forward
    op by autograd's sequence number."""

    name: str
    seconds: float
    chain: tuple[str, ...]


def launched_kernels(events, on_device: bool) -> list[Launched]:
    """The profiler's `events()` as `Launched` records: each device kernel with its launching CPU op (on a GPU), or
    each CPU op with its self time (on CPU)."""
    events = list(events)
    marks = _backward_marks(events)
    launched = []
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CPU:
            continue
        chain = _chain(event, marks)
        if on_device:
            launched += [Launched(kernel.name, kernel.duration / 1e6, chain) for kernel in event.kernels]
        elif event.self_cpu_time_total > 0:
            launched.append(Launched(event.name, event.self_cpu_time_total / 1e6, chain))
    return launched


def _chain(event, marks: dict) -> tuple[str, ...]:
    names = []
    while event is not None:
        names.append(event.name)
        if id(event) in marks:
            names.append(marks[id(event)])
        event = event.cpu_parent
    return tuple(names)


def _backward_marks(events) -> dict[int, str]:
    """Backward nodes (`autograd::engine::evaluate_function: X`) whose autograd sequence number is that of a forward
    op run inside the head's region or inside an attention op: id(node) -> the mark added to their kernels' chains."""
    head, attention = set(), set()
    for event in events:
        if event.sequence_nr < 0 or event.name.startswith("autograd::engine"):
            continue
        names = [event.name]
        parent = event.cpu_parent
        while parent is not None:
            names.append(parent.name)
            parent = parent.cpu_parent
        if HEAD in names:
            head.add(event.sequence_nr)
        if any(ATTENTION_OPS.search(name) for name in names):
            attention.add(event.sequence_nr)
    marks = {}
    for event in events:
        if event.name.startswith("autograd::engine::evaluate_function") and event.sequence_nr >= 0:
            if event.sequence_nr in head:
                marks[id(event)] = HEAD_BACKWARD
            elif event.sequence_nr in attention:
                marks[id(event)] = ATTENTION_BACKWARD
    return marks


def kernel_class(item: Launched) -> tuple[str, str]:
    """(part, basis) of one launched kernel: part is attention_forward, attention_backward, head_forward,
    head_backward or other; basis says what decided it (launching op, sequence number, kernel name)."""
    backward = any(BACKWARD_REGION.search(name) for name in item.chain)
    direction = "backward" if backward else "forward"
    if HEAD_BACKWARD in item.chain:
        return "head_backward", "sequence number"
    if HEAD in item.chain and not backward:
        return "head_forward", "launching op"
    if ATTENTION_BACKWARD in item.chain:
        return "attention_backward", "sequence number"
    if any(ATTENTION_OPS.search(name) for name in item.chain):
        return f"attention_{direction}", "launching op"
    if ATTENTION_KERNEL_NAMES.search(item.name):
        return f"attention_{direction}", "kernel name"
    return "other", "launching op"


def classify(launched: list[Launched]) -> dict:
    """Seconds by part (`kernel_class`), seconds classified as attention by kernel name alone, all kernels' seconds,
    and the 20 kernels with the most time, each with its part."""
    parts, by_name, classes = defaultdict(float), defaultdict(float), {}
    by_kernel_name = 0.0
    for item in launched:
        part, basis = kernel_class(item)
        parts[part] += item.seconds
        by_name[item.name] += item.seconds
        classes.setdefault(item.name, part)
        if basis == "kernel name":
            by_kernel_name += item.seconds
    top = sorted(by_name.items(), key=lambda pair: -pair[1])[:20]
    return {"parts": dict(parts), "attention_by_kernel_name": by_kernel_name, "kernel_total": sum(by_name.values()),
            "top": [{"name": name, "seconds": seconds, "part": classes[name]} for name, seconds in top]}


def summarize(times: dict, classified: dict, wall: float, steps: int) -> dict:
    """Seconds per step by component. The sections' wall times are the frame (they add up to the step); attention
    and the head's backward are taken out of forward and backward by the kernels' time, and what the parts leave of
    the step's wall time is `unaccounted`.

    >>> parts = {"attention_forward": 1.0, "attention_backward": 2.0, "head_backward": 0.5}
    >>> s = summarize({"forward": 2.0, "loss": 1.0, "backward": 4.0, "optimizer": 1.0, "data_wait": 0.5},
    ...               {"parts": parts, "attention_by_kernel_name": 0.0, "kernel_total": 7.0, "top": []},
    ...               wall=9.0, steps=1)
    >>> s["backward_other"], s["unaccounted"]
    (1.5, 0.5)
    """
    per = {name: value / steps for name, value in times.items()}
    part = {name: value / steps for name, value in classified["parts"].items()}
    attention_forward, attention_backward = part.get("attention_forward", 0.0), part.get("attention_backward", 0.0)
    head_backward = part.get("head_backward", 0.0)
    summary = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "steps": steps,
        "attention": attention_forward + attention_backward, "attention_forward": attention_forward,
        "attention_backward": attention_backward, "loss": per.get("loss", 0.0),
        "head_forward_kernels": part.get("head_forward", 0.0), "head_backward": head_backward,
        "optimizer": per.get("optimizer", 0.0), "data_wait": per.get("data_wait", 0.0),
        "forward_other": max(0.0, per.get("forward", 0.0) - attention_forward),
        "backward_other": max(0.0, per.get("backward", 0.0) - attention_backward - head_backward),
        "total": wall / steps,
    }
    sections = sum(per.get(name, 0.0) for name in ("data_wait", "forward", "loss", "backward", "optimizer"))
    summary["unaccounted"] = summary["total"] - sections
    summary["attention_by_kernel_name"] = classified["attention_by_kernel_name"] / steps
    summary["kernel_time"] = classified["kernel_total"] / steps
    summary["top_kernels"] = [{"name": item["name"], "seconds_per_step": item["seconds"] / steps,
                               "part": item["part"]} for item in classified["top"]]
    return summary
