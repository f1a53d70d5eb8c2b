"""Batches prepared before the training loop asks: a background thread runs ahead of the GPU.

Design choices:
- One thread, `depth` items ahead (default 2). Tokenizing and packing are mostly Rust and numpy, so a thread (not a
  process) overlaps them with the GPU's work without copying batches between processes.
- Checkpoints stay token-exact: every item travels with the source's state right after it was made, and
  `state_dict()` returns the state after the last item *handed out*, never after the prefetched ones. Loading a
  state stops the thread, drops what it had prepared and restarts from the loaded state on the next `next()`.
- Errors in the thread (bad data, out of documents) are re-raised in the training loop by `next()`, as they are;
  `close()` (called on every exit of the loop, Ctrl-C included) stops the thread and joins it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    """`next()` returns `produce()`'s items in order, made up to `depth` ahead in a thread (`depth=0`: made in
    `next()` itself). `source` has `snapshot()`, `state_dict(snapshot)` and `load_state_dict(state)`.

    >>> class Counter:
    ...     def __init__(self): self.n = 0
    ...     def snapshot(self): return self.n
    ...     def state_dict(self, snapshot=None): return {"n": self.n if snapshot is None else snapshot}
    ...     def load_state_dict(self, state): self.n = state["n"]
    >>> source = Counter()
    >>> def produce():
    ...     source.n += 1
    ...     return source.n
    >>> prefetcher = Prefetcher(source, produce, depth=2)
    >>> [prefetcher.next() for _ in range(3)], prefetcher.state_dict()
    ([1, 2, 3], {'n': 3})
    >>> prefetcher.close()
    """

    sharded_state = True  # each process's source holds its own part (checkpoints gathers them)

    def __init__(self, source, produce: Callable[[], object], depth: int = 2):
        self.source, self.produce, self.depth = source, produce, depth
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._handed: object = None  # the source's snapshot after the last item handed out
        self.wait_s = 0.0  # time `next()` spent waiting for the thread (the data stalls the GPU saw)

    def next(self):
        if self.depth == 0:  # made here: the whole making is time the device waits
            started = time.perf_counter()
            item = self.produce()
            self._handed = self.source.snapshot()
            self.wait_s += time.perf_counter() - started
            return item
        if self._thread is None:
            self._start()
        started = time.perf_counter()
        item, snapshot = self._queue.get()
        self.wait_s += time.perf_counter() - started
        if isinstance(item, _Failure):
            self._thread.join()
            self._thread = None
            raise item.error
        self._handed = snapshot
        return item

    def take_wait(self) -> float:
        """Seconds `next()` waited for data since the last call (per step, for the metrics)."""
        wait, self.wait_s = self.wait_s, 0.0
        return wait

    def _start(self) -> None:
        if self._handed is None:  # nothing handed out yet: a checkpoint (or `close`) goes back to here
            self._handed = self.source.snapshot()
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(target=self._work, name="hf-encoderize-prefetch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                entry = (self.produce(), self.source.snapshot())
            except BaseException as error:  # noqa: BLE001 - handed to the training loop, which raises it
                entry = (_Failure(error), None)
            while not self._stop.is_set():
                try:
                    self._queue.put(entry, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(entry[0], _Failure):
                return

    def state_dict(self) -> dict:
        return self.source.state_dict(self._handed)

    def load_state_dict(self, state: dict) -> None:
        self.close()
        self.source.load_state_dict(state)
        self._handed = None

    def close(self) -> None:
        """Stop the thread and drop what it prepared, rewinding the source to the last item handed out, so a later
        `next()` goes on from there (idempotent)."""
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(timeout=0.1)
        self._thread, self._queue = None, None
        if self._handed is not None:
            self.source.load_state_dict(self.source.state_dict(self._handed))
