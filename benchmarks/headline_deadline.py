"""A wall-clock deadline that stops a training phase (a base's `pretrain`, a `cpt`) at a step boundary.

The gpu-pilot has one GPU window (issue 65): its deadline used to be checked only between fine-tuning calls, so a
base or CPT already under way ran on past it. The engine has no deadline of its own, and the package is not the
benchmark's to change, so `phase_deadline` wraps the loop's step function (`training.engine.loop.train_step`, looked up
by name at each step) for the phase it guards: before each step it reads the clock, and past the deadline it raises
`DeadlineReached` instead of starting the step. Nothing is half done: the loop's `finally` closes the row stream, no
encoder is saved, and the caller records the phase as partial (its steps reached and planned, its last logged
training loss), never as a finished model. A signal (SIGALRM, SIGTERM) would stop wherever Python is, inside a step.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path


class DeadlineReached(Exception):
    """The deadline passed before the step after `steps_done` began."""

    def __init__(self, steps_done: int):
        super().__init__(f"deadline reached after {steps_done} steps of this phase")
        self.steps_done = steps_done


@contextlib.contextmanager
def phase_deadline(deadline: float | None):
    """Within the block, a training step that would start at or after `deadline` (time.time()) raises
    `DeadlineReached` instead; None: no deadline. The loop's own step function is restored on leaving."""
    from hf_encoderize.training.engine import loop

    if deadline is None:
        yield
        return
    step_function, done = loop.train_step, [0]

    def guarded(run, *args, **kwargs):
        if time.time() >= deadline:
            raise DeadlineReached(done[0])
        result = step_function(run, *args, **kwargs)
        done[0] += 1
        return result

    loop.train_step = guarded
    try:
        yield
    finally:
        loop.train_step = step_function


def partial_record(folder: Path, name: str, stopped: DeadlineReached, planned: int, seconds: float) -> dict:
    """What a phase cut by the deadline leaves in the pilot's facts: PARTIAL, its steps and its last logged loss."""
    metrics = folder / "metrics.jsonl"
    losses = [row["loss"] for row in map(json.loads, metrics.read_text().splitlines())
              if row.get("kind") == "train" and row.get("loss") is not None] if metrics.is_file() else []
    return {"model": name, "status": "PARTIAL: stopped at the deadline, not fine-tuned, not analysed",
            "steps_done": stopped.steps_done, "steps_planned": planned,
            "last_train_loss": losses[-1] if losses else None, "seconds": round(seconds, 1)}
