"""How long and how fast to train: `TrainConfig`, the settings the training engine (`training.engine`) takes.

Defaults follow the paper (section 2, Appendix A): AdamW betas (0.9, 0.95), weight decay 0.1, clipping 1.0, WSD
with 2,000 warmup and 2,000 decay steps (`schedule`). Every field is validated where it is declared, in one line that
says what to do.
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, LENGTH, identity
from hf_encoderize.common.precision import check_bf16, check_fp16
from hf_encoderize.common.validation import check_choice, check_number
from hf_encoderize.objectives.loss_kernels import LossImplementation
from hf_encoderize.training.schedule import decay_steps_for, default_warmup

ADAMW_BETAS = (0.9, 0.95)  # paper, Appendix A
FAST_DEV_STEPS = 3  # --fast-dev-run: enough to pass a checkpoint-free step, the schedule and the save
PAPER_TOKENS_PER_STEP = 1_152 * 2_048  # paper, Appendix A: 1,152 rows of 2,048 tokens, 2,359,296 a step


@dataclass
class TrainConfig:
    """How long and how fast to train, and where checkpoints go."""

    INPUTS = ("from_checkpoint",)  # what an output folder stays apart from (`common.outputs.inputs_of`)

    _: KW_ONLY
    output_dir: str | None = field(default=None, metadata=identity(HARMLESS))
    """Run folder: `checkpoints/` during training, the final encoder in `encoder/`. Default: runs/<model>-mlm."""
    steps: int = field(default=12000, metadata=identity(LENGTH))
    """Optimizer steps.

    12,000 is where the paper's CPT results are already strong (section 5)."""
    lr: float = 1e-4
    """Peak learning rate (see README: a conservative peak for continued pretraining of a converged model)."""
    batch_size: int = 8
    """Rows per device per micro-batch."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (see --tokens-per-step)."""
    tokens_per_step: int | None = field(default=None, metadata={"named": {"paper": PAPER_TOKENS_PER_STEP}})
    """Target tokens per optimizer step, or `paper` (2,359,296): sets --gradient-accumulation-steps to ceil(target /
    (batch size x processes x seq len)); default: --gradient-accumulation-steps as given.

    The paper's step is 2,359,296 tokens (Appendix A: 1,152 rows of 2,048)."""
    warmup_steps: int | None = None
    """Linear warmup steps; default 2,000, at most a fifth of a short run.

    2,000: the paper, section 2 and Appendix A."""
    warmup_ratio: float | None = field(default=None, metadata=identity(HARMLESS))  # counted as the warmup it gives
    """Instead of --warmup-steps: the fraction of --max-steps that warms up (the Trainer's name and meaning)."""
    decay_steps: int | None = field(default=None, metadata=identity(LENGTH))
    """Final steps of linear decay to zero; default 2,000, at most a fifth of a short run.

    2,000: the paper, section 2 ("decay only during the final 2,000 steps", at every budget)."""
    decay_fraction: float | None = field(default=None, metadata=identity(LENGTH))
    """Instead of --decay-steps: the final fraction of the steps that decays.

    The paper's Appendix A table rounds its 2,000 of 42,000 to 5%."""
    weight_decay: float = 0.1
    """AdamW weight decay.

    0.1: the paper, Appendix A."""
    adam_eps: float = 1e-5
    """AdamW epsilon (torch's is 1e-8).

    1e-5: the paper's Appendix A "Adam epsilon" row and the default of the authors' trainer (EuroBERT
    `optimus/trainer/configuration/train.py`, `eps: float = 1e-5`, passed to `torch.optim.AdamW`)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm.

    1.0: the paper, Appendix A."""
    seed: int = 0
    """Seed for initialisation of new rows, data order and masking."""
    save_every: int = field(default=1000, metadata=identity(HARMLESS))
    """Save a full training checkpoint every N steps."""
    keep_last: int = field(default=2, metadata=identity(HARMLESS))
    """Checkpoints to keep."""
    export_steps: str | None = field(default=None, metadata=identity(HARMLESS))
    """Also save a full encoder at these steps, comma-separated (e.g. 5000,10000,20000), into OUT/exports/step-N.

    The paper fine-tunes such intermediate checkpoints for its data-efficiency result (section 3, Figure 4)."""
    eval_every: int = field(default=500, metadata=identity(HARMLESS))
    """Evaluate on the held-out documents every N steps (0: only at the end, and in `pretrain` at each phase switch)."""
    log_every: int = field(default=10, metadata=identity(HARMLESS))
    """Read the training loss from the device and write it to metrics.jsonl every N steps; it is printed as a line
    with --no-progress, and shown on the progress bar otherwise."""
    resume: bool = field(default=False, metadata=identity(HARMLESS))
    """Continue from the newest checkpoint in `output_dir`."""
    from_checkpoint: str | None = field(default=None, metadata=identity(HARMLESS))
    """Branch a new run from a checkpoint folder of an earlier run of the same command (OUT/checkpoints/step-N, or
    pretrain's OUT/switch/step-N) instead of redoing the shared prefix: the settings must be the same but for
    --max-steps and the decay, and the checkpoint must come before both runs' decays. The data continue from the
    checkpoint's position.

    The paper branches its PFS splits and CPT budgets this way (section 2, "Experimental scale")."""
    overwrite: bool = field(default=False, metadata=identity(HARMLESS))
    """Start over in a non-empty `output_dir`, deleting it."""
    mixed_precision: Literal["auto", "bf16", "fp16", "no"] = "auto"
    """auto (bf16 on GPU, none on CPU), bf16, fp16 or no: the precision of the compute (autocast)."""
    master_weights: Literal["fp32", "loaded"] = "fp32"
    """fp32: trainable weights are kept (upcast) in fp32 for the optimizer, whatever dtype they were loaded in, and
    the encoder is saved in the loaded dtype. `loaded`: train the weights in the dtype they were loaded in (pure bf16
    for a bf16 checkpoint: half the optimizer memory, but AdamW updates below bf16's resolution, about 0.4% of a
    weight, round to nothing, and weight decay with it)."""
    gradient_checkpointing: bool = field(default=False, metadata=identity(HARMLESS))
    """Recompute activations in the backward pass to save memory."""
    compile: bool | None = field(default=None, metadata=identity(HARMLESS))
    """`torch.compile` every decoder layer (static shapes: packing gives fixed batch x seq len). Unset: on for a CUDA
    or ROCm GPU unless the run rules it out (4-bit, gradient checkpointing, DeepSpeed), off elsewhere
    (`training.compiling`); the first steps pay the compilation."""
    loss_implementation: LossImplementation = field(default="auto", metadata=identity(HARMLESS))
    """The MLM loss kernel: auto (on CUDA, the fastest of our fused linear + cross-entropy, ours with a compiled
    softmax gradient, one dense GEMM over the masked rows with a compiled cross-entropy where its logits fit,
    Liger-Kernel's and Cut-Cross-Entropy's that runs and agrees with ours, timed on this run's shape; ours elsewhere),
    fused (ours), compiled, dense, liger or cce (`loss_kernels`). The run record says which ran, with the timings."""
    prefetch: int = field(default=2, metadata=identity(HARMLESS))
    """Batches tokenized, packed, masked (and pinned, on a GPU) ahead in a background thread; 0: in the loop."""
    profile: bool = field(default=False, metadata=identity(HARMLESS))
    """Time 3 steady steps (after the first 10, or the last 3 of a shorter run) by component (attention and the MLM
    head, forward and backward, optimizer, data wait, ...) with torch.profiler; writes OUT/profile/summary.json (with
    the 20 kernels that take the most time) and a Chrome trace. The timed steps synchronise the GPU, so they run
    slower."""
    on_nonfinite: Literal["stop", "skip"] = "stop"
    """What to do when the loss or gradient norm is NaN/inf: `stop` (one-line error; the last checkpoint is intact)
    or `skip` (drop that update, count it in metrics.jsonl; stop after 10 in a row)."""
    report_to: str = field(default="none", metadata=identity(HARMLESS))
    """Comma-separated trackers to log to (Accelerate's): tensorboard, wandb, trackio, mlflow, comet_ml, aim, clearml,
    dvclive; or none. Each needs its own package (pip install wandb, ...)."""
    progress: bool = field(default=True, metadata=identity(HARMLESS))
    """Show a progress bar (loss, masked accuracy, LR, tokens/s, ETA) on the main process."""
    fast_dev_run: bool = field(default=False, metadata=identity(HARMLESS))  # its steps and schedule count
    """Lightning's name: train 3 steps (no warmup or decay), skipping the optional checks (the corpus budget read, the
    held-out evaluations), to see a whole run go through; it says what it skipped."""
    dry_run: bool = field(default=False, metadata=identity(HARMLESS))
    """Print the plan (tokens per step, total tokens, the paper's figure) and stop: nothing is loaded or written."""

    def __post_init__(self):
        if self.fast_dev_run:  # a budget of its own: the run's warmup and decay would not fit in it
            self.steps, self.warmup_steps, self.warmup_ratio = FAST_DEV_STEPS, 0, None
            self.decay_steps, self.decay_fraction, self.eval_every = 1, None, 0
        for name in ("steps", "batch_size", "grad_accum", "save_every", "keep_last", "log_every"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)
        if self.tokens_per_step is not None:
            check_number("--tokens-per-step", self.tokens_per_step, minimum=1, integer=True)
        for name in ("warmup_steps", "eval_every", "prefetch"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=0, integer=True)
        check_number("--seed", self.seed, minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range
        check_number("--learning-rate", self.lr, above=0)
        if self.decay_steps is not None:
            check_number("--decay-steps", self.decay_steps, minimum=1, integer=True)
        if self.decay_fraction is not None:
            check_number("--decay-fraction", self.decay_fraction, above=0, maximum=1)
        if self.warmup_ratio is not None:
            check_number("--warmup-ratio", self.warmup_ratio, minimum=0, below=1)  # as eval and contrastive
        if self.warmup_steps is not None and self.warmup_ratio is not None:
            raise EncoderizeError("give --warmup-steps or --warmup-ratio, not both")
        if self.decay_steps is not None and self.decay_fraction is not None:
            raise EncoderizeError("give --decay-steps or --decay-fraction, not both")
        if self.from_checkpoint and not (Path(self.from_checkpoint) / "trainer_state.json").is_file():
            raise EncoderizeError(f"--from-checkpoint {self.from_checkpoint!r} is not a checkpoint folder; pass "
                                  "OUT/checkpoints/step-N (or pretrain's OUT/switch/step-N) of an earlier run")
        if self.from_checkpoint and self.resume:
            raise EncoderizeError("--from-checkpoint starts a new run and --resume continues one; pass one of them")
        self._check_exports_after_branch(parse_export_steps(self.export_steps, self.steps))
        for name in ("warmup_steps", "decay_steps"):
            if (getattr(self, name) or 0) > self.steps:
                raise EncoderizeError(f"--{name.replace('_', '-')} {getattr(self, name)} is more than --max-steps "
                                      f"{self.steps}; lower it or train longer")
        check_number("--weight-decay", self.weight_decay, minimum=0)
        check_number("--adam-epsilon", self.adam_eps, above=0)
        check_number("--max-grad-norm", self.max_grad_norm, above=0)
        for name in ("mixed_precision", "on_nonfinite", "loss_implementation", "master_weights"):
            check_choice(f"--{name.replace('_', '-')}", getattr(self, name), TrainConfig, name)  # the Literal's values
        check_bf16(self.mixed_precision)
        check_fp16(self.mixed_precision)  # on a CPU it would train in fp32 and record fp16

    def _check_exports_after_branch(self, exports: tuple[int, ...]) -> None:
        """A branch starts after its checkpoint's step, so an export at or before it would never be written."""
        if not (self.from_checkpoint and exports):
            return
        try:
            start = int(json.loads((Path(self.from_checkpoint) / "trainer_state.json").read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # an unreadable checkpoint is refused where it is loaded, with its own message
        if exports[0] <= start:
            raise EncoderizeError(f"--export-steps {exports[0]} is at or before the --from-checkpoint step {start}, "
                                  "where this run starts; export only steps after it (or export from the source run)")

    def identity_value(self, name: str):
        """The value a setting runs with, for "same run?" (`common.identity`): an unset warmup or decay is its
        default, so `--warmup-steps 2` where 2 is the default resumes the same run."""
        return {"warmup_steps": self.warmup, "decay_steps": self.decay}.get(name, getattr(self, name))

    @staticmethod
    def derived(values: dict) -> dict:
        """What an unset --warmup-steps and --decay-steps become for the recorded `values` (field names): a replay
        that changes the budget (`--config RUN/run_settings.json --max-steps N`) re-derives them rather than keep the
        old run's, as it would had they been left unset."""
        steps = values.get("steps", 12000)
        return {"warmup_steps": default_warmup(steps),
                "decay_steps": decay_steps_for(steps, None, values.get("decay_fraction"))}

    @property
    def warmup(self) -> int:
        if self.warmup_ratio is not None:
            return round(self.warmup_ratio * self.steps)
        return self.warmup_steps if self.warmup_steps is not None else default_warmup(self.steps)

    @property
    def exports(self) -> tuple[int, ...]:
        return parse_export_steps(self.export_steps, self.steps)

    @property
    def decay(self) -> int:
        return decay_steps_for(self.steps, self.decay_steps, self.decay_fraction)


def parse_export_steps(spec: str | None, steps: int) -> tuple[int, ...]:
    """`"5000,10000"` -> (5000, 10000): distinct whole steps between 1 and `steps` - 1 (the last step is the final
    encoder anyway).

    >>> parse_export_steps("10, 5,10", 12)
    (5, 10)
    """
    if not spec:
        return ()
    try:
        values = sorted({int(part) for part in str(spec).split(",") if part.strip()})
    except ValueError:
        raise EncoderizeError(f"--export-steps {spec!r}: give whole steps separated by commas, e.g. "
                              "5000,10000") from None
    wrong = [v for v in values if not 0 < v < steps]
    if wrong:
        raise EncoderizeError(f"--export-steps {wrong[0]} is outside 1..{steps - 1} (--max-steps {steps} saves the "
                              "final encoder anyway); pick steps inside the run")
    return tuple(values)
