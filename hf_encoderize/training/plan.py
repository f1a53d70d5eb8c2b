"""The plan a training run states before its first step: how many tokens it trains, beside the paper's figure.

Design choices:
- Tokens per step are rows x length x accumulation x processes: the most a step holds (packed rows are full; padded
  rows hold fewer real tokens, which `metrics.jsonl` counts). The total is that times the steps.
- The paper's figure is beside it, for the same number of steps: its step is 2,359,296 tokens (Appendix A: 1,152
  rows of 2,048), so its 12,000-step CPT trains 28.3B tokens. A run far below it says so, and names the option that
  gives the paper's step (`--tokens-per-step paper`).
- One line, said once by the main process; `--dry-run` prints it and stops before anything is loaded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hf_encoderize.training.train_config import PAPER_TOKENS_PER_STEP


@dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    """What a run will train, known before any weight loads."""

    rows: int
    """Rows per process per micro-batch (`--batch-size`)."""
    seq_len: int
    """Tokens per row (`--max-seq-length`)."""
    grad_accum: int
    """Micro-batches per optimizer step (`--gradient-accumulation-steps`, or worked out from `--tokens-per-step`)."""
    processes: int
    """Processes of the launch (`WORLD_SIZE`)."""
    steps: int
    """Optimizer steps (`--max-steps`)."""

    @property
    def tokens_per_step(self) -> int:
        return self.rows * self.seq_len * self.grad_accum * self.processes

    @property
    def total_tokens(self) -> int:
        return self.tokens_per_step * self.steps

    @property
    def paper_tokens(self) -> int:
        """What the paper's batch trains in as many steps."""
        return PAPER_TOKENS_PER_STEP * self.steps

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_step": self.tokens_per_step, "total_tokens": self.total_tokens,
                "paper_tokens_per_step": PAPER_TOKENS_PER_STEP, "paper_tokens": self.paper_tokens}

    def line(self) -> str:
        """The plan line.

        >>> line = TrainingPlan(rows=8, seq_len=512, grad_accum=1, processes=1, steps=12000).line()
        >>> line.split("; ")[0]
        'plan: 8 rows x 512 tokens x 1 accumulation x 1 process = 4,096 tokens a step, 12,000 steps = 49.2M tokens'
        >>> line.split("; ")[1]
        "the paper's step is 2,359,296 tokens (Appendix A), 28.3B over 12,000 steps, so this run trains 0.17% of it \
(--tokens-per-step paper gives the paper's step)"
        """
        processes = f"{self.processes} process{'es' if self.processes > 1 else ''}"
        said = (f"plan: {self.rows} rows x {self.seq_len} tokens x {self.grad_accum} accumulation x {processes} = "
                f"{self.tokens_per_step:,} tokens a step, {self.steps:,} steps = {short_count(self.total_tokens)} "
                f"tokens; the paper's step is {PAPER_TOKENS_PER_STEP:,} tokens (Appendix A), "
                f"{short_count(self.paper_tokens)} over {self.steps:,} steps")
        if self.tokens_per_step >= PAPER_TOKENS_PER_STEP:
            return f"{said}, so this run trains {self.total_tokens / self.paper_tokens:.0%} of it"
        return (f"{said}, so this run trains {self.total_tokens / self.paper_tokens:.2%} of it (--tokens-per-step "
                "paper gives the paper's step)")


def training_plan(train, data, processes: int) -> TrainingPlan:
    """The plan of a run of `train` (a `TrainConfig`, its accumulation resolved) on rows of `data.seq_len`."""
    return TrainingPlan(rows=train.batch_size, seq_len=data.seq_len, grad_accum=train.grad_accum,
                        processes=processes, steps=train.steps)


def short_count(count: int) -> str:
    """49,152,000 -> "49.2M"; 28,311,552,000 -> "28.3B".

    >>> short_count(999), short_count(49_152_000), short_count(28_311_552_000)
    ('999', '49.2M', '28.3B')
    """
    for size, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)
