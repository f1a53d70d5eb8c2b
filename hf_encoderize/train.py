"""MLM continued pretraining on Accelerate: the loop behind `hf-encoderize cpt`.

Design choices:
- The loop is written on Accelerate only, so `accelerate launch` with DDP/FSDP/DeepSpeed configs runs it unchanged;
  the model is wrapped in `MLMObjective` so the wrapped module's forward (and its gradient hooks) is what runs.
- Optimiser and schedule follow the paper (section 2, Appendix A): AdamW betas (0.9, 0.95), weight decay 0.1,
  gradient clipping 1.0, Warmup-Stable-Decay.
- Packed rows keep documents isolated (`packing.packed_forward`) and the LM head runs only on masked positions
  (`masking.sparse_mlm_loss`).
- Checkpoints hold model, optimiser, scheduler, RNG and the data position; they are written under a temporary name
  and renamed into place, keeping the last K. `resume=True` continues from the newest one, token for token.
"""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

import torch

from hf_encoderize.data import Packer, collate
from hf_encoderize.errors import EncoderizeError
from hf_encoderize.masking import sparse_mlm_loss
from hf_encoderize.packing import packed_forward
from hf_encoderize.schedule import PAPER_DECAY_FRACTION


@dataclass
class TrainConfig:
    """How long and how fast to train, and where checkpoints go."""

    _: KW_ONLY
    output_dir: str | None = None
    """Run folder: `checkpoints/` during training, the final encoder in `encoder/`. Default: runs/<model>-mlm."""
    steps: int = 12000
    """Optimizer steps. 12,000 is where the paper's CPT results are already strong (section 5)."""
    lr: float = 1e-4
    """Peak learning rate (see README: a conservative peak for continued pretraining of a converged model)."""
    batch_size: int = 8
    """Rows per device per micro-batch."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    warmup_steps: int | None = None
    """Linear warmup steps; default min(2000, 10% of steps) (paper, Appendix A: 2,000)."""
    decay_fraction: float = PAPER_DECAY_FRACTION
    """Final fraction of steps with linear decay to zero (paper, Appendix A: 5%)."""
    weight_decay: float = 0.1
    """AdamW weight decay (paper, Appendix A)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (paper, Appendix A)."""
    seed: int = 0
    """Seed for initialisation of new rows, data order and masking."""
    save_every: int = 1000
    """Save a full training checkpoint every N steps."""
    keep_last: int = 2
    """Checkpoints to keep."""
    eval_every: int = 500
    """Evaluate on the held-out documents every N steps (0: only at the end, and in `pretrain` at each phase switch)."""
    log_every: int = 10
    """Print the training loss every N steps."""
    resume: bool = False
    """Continue from the newest checkpoint in `output_dir`."""
    overwrite: bool = False
    """Start over in a non-empty `output_dir`, deleting it."""
    mixed_precision: str = "auto"
    """auto (bf16 on GPU, none on CPU), bf16, fp16 or no."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    on_nonfinite: str = "stop"
    """What to do when the loss or gradient norm is NaN/inf: `stop` (one-line error; the last checkpoint is intact)
    or `skip` (drop that update, count it in metrics.jsonl; stop after 10 in a row)."""
    report_to: str = "none"
    """Accelerate trackers to log to, comma-separated: tensorboard, wandb, trackio, mlflow, ... or none."""
    progress: bool = True
    """Show a progress bar (loss, masked accuracy, LR, tokens/s, ETA) on the main process."""

    def __post_init__(self):
        for name in ("steps", "batch_size", "grad_accum", "save_every", "keep_last", "log_every"):
            if int(getattr(self, name)) < 1:
                raise EncoderizeError(f"--{name.replace('_', '-')} must be at least 1")
        if not 0.0 <= float(self.decay_fraction) <= 1.0:
            raise EncoderizeError(f"--decay-fraction must be between 0 and 1, got {self.decay_fraction}")
        if self.mixed_precision not in ("auto", "bf16", "fp16", "no"):
            raise EncoderizeError("--mixed-precision must be auto, bf16, fp16 or no")
        if self.on_nonfinite not in ("stop", "skip"):
            raise EncoderizeError(f"--on-nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}")
        if float(self.lr) <= 0:
            raise EncoderizeError(f"--lr must be positive, got {self.lr}")


class MLMObjective(torch.nn.Module):
    """Backbone + LM head -> sparse MLM loss on a packed batch. Wrapped whole by Accelerate (DDP/FSDP).

    `forward` returns `(loss, correct)`: the mean cross-entropy over labelled positions and, detached, how many of
    them the arg-max predicts right (a device tensor, so the training step needs no extra host sync).
    """

    def __init__(self, model):
        from hf_encoderize.loading import ENCODER, classify_config

        super().__init__()
        self.model = model
        self.native_encoder = classify_config(model.config) == ENCODER

    def forward(self, input_ids, document_ids, labels):
        from hf_encoderize.bidirectional import base_model_of, last_hidden_state

        if self.native_encoder:
            # A native encoder: its MLM head has a transform before the decoder, so use the model's own loss.
            output = packed_forward(self.model, input_ids, document_ids, labels=labels)
            selected = labels != -100
            return output.loss, (output.logits.detach().argmax(-1)[selected] == labels[selected]).sum()
        hidden = last_hidden_state(packed_forward(base_model_of(self.model), input_ids, document_ids, use_cache=False))
        return sparse_mlm_loss(hidden, self.model.get_output_embeddings(), labels, return_correct=True)


def _checkpoints(output_dir: Path) -> list[Path]:
    return sorted((output_dir / "checkpoints").glob("step-*[0-9]"), key=lambda p: int(p.name.split("-")[1]))


def prepare_output_dir(cfg: TrainConfig, main_process: bool = True) -> Path | None:
    """Return the checkpoint to resume from (or None), refusing to clobber an existing run.

    Only the main process deletes anything (with `overwrite`); call `wait_for_everyone()` afterwards.
    """
    out = Path(cfg.output_dir)
    if cfg.resume:
        found = _checkpoints(out)
        if not found:
            raise EncoderizeError(f"--resume: no checkpoint under {str(out / 'checkpoints')!r}")
        return found[-1]
    if out.exists() and any(out.iterdir()):
        if not cfg.overwrite:
            raise EncoderizeError(f"output folder {str(out)!r} is not empty; use --resume, --overwrite or a new folder")
        if main_process:
            shutil.rmtree(out)
    return None


def _generator_state(generator: torch.Generator) -> str:
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode()


def save_checkpoint(accelerator, output_dir: Path, step: int, packer: Packer, generator, keep_last: int,
                    folder: str = "checkpoints") -> Path:
    """Write the full training state under a temporary name, then rename it into place; keep the last K.

    `folder` other than `checkpoints` (e.g. pretrain's `switch/`) is kept whole: never pruned, never resumed from."""
    final = output_dir / folder / f"step-{step:07d}"
    tmp = final.with_name(final.name + ".partial")
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()  # every rank has written its shard/RNG file before the rename
    if accelerator.is_main_process:
        state = {"step": step, "packer": packer.state, "mask_rng": _generator_state(generator)}
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        tmp.rename(final)
        for old in _checkpoints(output_dir)[:-keep_last] if folder == "checkpoints" else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, path: Path, packer: Packer, generator) -> int:
    accelerator.load_state(str(path))
    state = json.loads((path / "trainer_state.json").read_text())
    packer.state = state["packer"]
    generator.set_state(torch.frombuffer(bytearray(base64.b64decode(state["mask_rng"])), dtype=torch.uint8))
    return int(state["step"])


def _maskable(input_ids, document_ids, tokenizer):
    if not hasattr(tokenizer, "_hf_encoderize_special"):  # computed once, not in every micro-batch
        tokenizer._hf_encoderize_special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
    # pads, EOS, mask...: never masked
    return (document_ids >= 0) & ~torch.isin(input_ids, tokenizer._hf_encoderize_special)


def _batches(packer: Packer, documents, skip: int, batch_size: int):
    """Endless stream of collated batches; a new pass starts when the source runs out."""
    while True:
        rows = []
        for row in packer.rows(iter(documents), skip=skip):
            rows.append(row)
            if len(rows) == batch_size:
                yield collate(rows)
                rows = []
        if packer.state["documents"] == 0:
            raise EncoderizeError("the dataset has no training documents after the held-out evaluation slice")
        packer.state = {"documents": 0, "carry": [], "carry_doc": []}


@torch.no_grad()
def evaluate(objective, eval_batches, masking, tokenizer, vocab_size, seed: int, task: str = "mlm") -> dict:
    """Loss and masked-token accuracy on the held-out rows, with a fixed masking seed so evaluations are comparable
    across steps. Both are averaged over labelled tokens, not batches. `task="clm"` (a CLM pretraining phase) scores
    next-token prediction instead and names the accuracy `eval_next_token_accuracy`."""
    from hf_encoderize.objectives import make_inputs

    generator = torch.Generator().manual_seed(seed)
    device = next(objective.parameters()).device
    objective.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for input_ids, document_ids in eval_batches:
        inputs, labels = make_inputs(task, input_ids, _maskable(input_ids, document_ids, tokenizer),
                                     mask_token_id=tokenizer.mask_token_id, vocab_size=vocab_size, masking=masking,
                                     generator=generator, document_ids=document_ids)
        loss, right = objective(inputs.to(device), document_ids.to(device), labels.to(device))
        labelled = int((labels != -100).sum())
        loss_sum, correct, count = loss_sum + float(loss) * labelled, correct + int(right), count + labelled
    objective.train()
    accuracy = "eval_next_token_accuracy" if task == "clm" else "eval_masked_accuracy"
    return {"eval_loss": loss_sum / max(1, count), accuracy: correct / max(1, count)}
