"""A time limit for one part of scripts/gpu_session.py: SIGALRM raises `PartTimeout` in the main thread, but never
while torch's own code is running.

Why not: a Python exception raised inside a callback that torch's C++ made (a `__torch_dispatch__` handler while
dynamo traces with fake tensors, a decomposition, the profiler starting) crosses C++ frames that cannot carry it, and
the process dies: `terminate called after throwing an instance of 'python_error'` (SIGABRT), or a SIGSEGV when the
profiler's half-started session is read afterwards. Both were reproduced on a loaded CPU with 0.5 s limits, and they
are what lost the last rows of the rehearsal in CI (stop 63): a dead process writes no more rows. So the alarm looks
at where it landed. Inside torch's compiler, tracing, dispatch or profiler machinery (anywhere on the stack), or with
a torch file innermost, it re-arms itself `RETRY_S` later; it raises once the main thread is back in other code
(ours, transformers', the standard library's). A part can therefore overrun its limit by the compilation it was in;
after `MAX_DEFER_S` of that the alarm raises wherever it is, since a session that never ends loses more.
"""

from __future__ import annotations

import os
import signal
import time

RETRY_S = 0.02
MAX_DEFER_S = 120.0
# torch's packages that run as callbacks from C++ (or drive code that does): tracing, compiling, dispatch, profiling
MACHINERY = (
    "_dynamo", "_inductor", "_subclasses", "_functorch", "fx", "_decomp", "_refs", "_prims", "_higher_order_ops",
    "_export", "_library", "_ops.py", "_meta_registrations.py", "utils/_python_dispatch.py", "profiler",
    "autograd/profiler.py", "autograd/profiler_util.py",
)


class PartTimeout(BaseException):
    """A part ran past its own limit. A BaseException, as KeyboardInterrupt is: code under test that catches
    `Exception` (a loader trying the next attention backend, the loss probe leaving a kernel out) must not swallow
    it, or the part would run on past its limit with no alarm left and pass."""


def torch_folder() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def in_torch_machinery(frame, torch_dir: str) -> bool:
    """Whether raising at `frame` could cross torch's C++: a torch file innermost, or torch's machinery anywhere."""
    if frame is not None and frame.f_code.co_filename.startswith(torch_dir):
        return True
    machinery = tuple(torch_dir + part.replace("/", os.sep) for part in MACHINERY)  # built only when an alarm fires
    while frame is not None:
        if frame.f_code.co_filename.startswith(machinery):
            return True
        frame = frame.f_back
    return False


class Limit:
    """One part's alarm: `arm()`, then `disarm()` and `restore()` (the handler before it) in `finally` clauses;
    `deferred_s` says how long it waited for a safe place to raise."""

    def __init__(self, seconds: float):
        self.seconds, self.torch_dir = seconds, torch_folder()
        self.fired_at: float | None = None
        self.deferred_s = 0.0
        self.previous = None

    def _alarm(self, signum, frame):
        now = time.monotonic()
        if self.fired_at is None:
            self.fired_at = now
        self.deferred_s = now - self.fired_at
        inside = in_torch_machinery(frame, self.torch_dir)
        if inside and self.deferred_s < MAX_DEFER_S:
            signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        where = f"still inside torch after {MAX_DEFER_S:.0f} s" if inside else "once out of torch's own code"
        late = f" (raised {self.deferred_s:.1f} s late, {where})" if self.deferred_s >= 0.1 else ""
        raise PartTimeout("ran past its time limit" + late)

    def arm(self) -> None:
        self.previous = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGALRM, self.previous)
