"""Warmup-Stable-Decay learning-rate schedule (paper, section 2 and Appendix A).

The paper warms up linearly for 2,000 steps, holds the peak, and decays linearly to zero over the final 2,000 steps
("applying learning rate decay only during the final 2,000 steps", section 2), at every budget: 12k, 22k and 42k
steps, and the CPT budgets. Appendix A's table rounds that to "Decay Steps 5%" (2,000 of 42,000 is 4.8%), so the decay
is a number of steps here, not a fraction, and a fraction stays available (`--decay-fraction`).

For runs too short to hold both, the defaults are capped at a fifth of the run each, so a 100-step smoke run still
spends most of its time at the peak; where an explicit warmup and decay overlap, the factor is the smaller of the
two ramps (a triangle), never a jump.
"""

from __future__ import annotations

PAPER_WARMUP_STEPS = 2000  # Appendix A / section 2
PAPER_DECAY_STEPS = 2000  # section 2: decay "only during the final 2,000 steps"
SHORT_RUN_SHARE = 5  # defaults take at most 1/5 of the run each (our choice, for runs shorter than 10k steps)


def default_warmup(total_steps: int) -> int:
    """The paper's 2,000 warmup steps, capped at a fifth of a short run.

    >>> default_warmup(42000), default_warmup(12000), default_warmup(80)
    (2000, 2000, 16)
    """
    return max(1, min(PAPER_WARMUP_STEPS, total_steps // SHORT_RUN_SHARE))


def default_decay(total_steps: int) -> int:
    """The paper's final 2,000 decay steps, capped at a fifth of a short run.

    >>> default_decay(22000), default_decay(2000), default_decay(80)
    (2000, 400, 16)
    """
    return max(1, min(PAPER_DECAY_STEPS, total_steps // SHORT_RUN_SHARE))


def decay_steps_for(total_steps: int, decay_steps: int | None, decay_fraction: float | None) -> int:
    """Steps of final decay: `decay_steps` if given, else `decay_fraction` of the run, else the default."""
    if decay_steps is not None:
        return max(1, min(decay_steps, total_steps))
    if decay_fraction is not None:
        return max(1, round(total_steps * decay_fraction))
    return default_decay(total_steps)


def decay_start(total_steps: int, decay_steps: int) -> int:
    """The first optimizer step of the decay window: it still runs at the peak, each later step lower."""
    return total_steps - decay_steps


def wsd_factor(step: int, total_steps: int, warmup_steps: int, decay_steps: int) -> float:
    """Multiplier of the peak LR at optimizer step `step` (0-based).

    The decay ramps linearly from the peak at its first step to zero at step `total_steps`, the step after the last
    one, so every one of the run's steps updates the weights (a 1-step run trains at the peak, not at zero).

    >>> [round(wsd_factor(s, 10, 2, 2), 2) for s in range(11)]
    [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    >>> [round(wsd_factor(s, 4, 4, 4), 2) for s in range(4)]  # warmup and decay overlap: the smaller ramp
    [0.25, 0.5, 0.5, 0.25]
    """
    warmup = (step + 1) / warmup_steps if step < warmup_steps else 1.0
    decay = 1.0 if step < decay_start(total_steps, decay_steps) else max(0.0, (total_steps - step) / decay_steps)
    return min(warmup, decay)


def wsd_scheduler(optimizer, total_steps: int, warmup_steps: int, decay_steps: int):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: wsd_factor(step, total_steps, warmup_steps, decay_steps)
    )
