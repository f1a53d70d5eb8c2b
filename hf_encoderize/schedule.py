"""Warmup-Stable-Decay learning-rate schedule (paper, section 2 and Appendix A).

The paper warms up linearly for 2,000 steps, holds the peak, and decays linearly to zero over the final 2,000 of
42,000 steps (about 5%). For shorter runs the warmup is capped at 10% of the steps so a 100-step smoke run still
spends most of its time at the peak.
"""

from __future__ import annotations

PAPER_WARMUP_STEPS = 2000  # Appendix A
PAPER_DECAY_FRACTION = 0.05  # Appendix A: "Decay Steps 5%"


def default_warmup(total_steps: int) -> int:
    return max(1, min(PAPER_WARMUP_STEPS, total_steps // 10))


def wsd_factor(step: int, total_steps: int, warmup_steps: int, decay_fraction: float) -> float:
    """Multiplier of the peak LR at optimizer step `step` (0-based).

    >>> [round(wsd_factor(s, 10, 2, 0.2), 2) for s in range(10)]
    [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    """
    decay_steps = max(1, round(total_steps * decay_fraction))
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return 1.0
    return max(0.0, (total_steps - step - 1) / decay_steps)


def wsd_scheduler(optimizer, total_steps: int, warmup_steps: int, decay_fraction: float):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: wsd_factor(step, total_steps, warmup_steps, decay_fraction)
    )
