"""The training loop: `train_until` steps the run to a step, logging, evaluating and checkpointing on schedule.

It reads top to bottom: `while step < until: train_step(); log; maybe evaluate; maybe save; maybe export`.

Design choices:
- The loss is the cross-entropy summed over labelled tokens divided by the labelled tokens of the whole global batch
  (all-reduced on the device; the paper's token-level loss), so 1 process x 8 rows, 2 x 4 and 8 accumulation
  steps x 1 row give the same update.
- Metrics stay on the device and reach the host once per `log_every` steps (and before every evaluation and
  checkpoint, so a checkpoint never follows a non-finite step).
- Held-out rows are masked with fixed seeds (negative lanes, never a training lane), so evaluations compare across
  steps.
- `enter_phase` is the one change a run takes between steps: the target of the next phase (`objectives.targets`),
  and on entering a bidirectional one the attention patch, proven by the probe. The engine asks a target for its
  labels, its attention and its metric's name; it never tests a target's name.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from hf_encoderize.objectives.phases import Phase
from hf_encoderize.training.batches import StepBatch, prepare_step, to_device
from hf_encoderize.training.checkpoints import checkpoint_dir, list_checkpoints, prune_checkpoints, save_checkpoint
from hf_encoderize.training.compiling import fall_back_to_eager
from hf_encoderize.training.engine.build import Run
from hf_encoderize.training.engine.export import export_encoder
from hf_encoderize.training.nonfinite import NonFiniteGuard, plain_norm
from hf_encoderize.training.profiling import section


def enter_phase(run: Run, phase: Phase) -> tuple[int, int] | None:
    """Point the run at `phase`'s target; on entering a bidirectional one, make the attention bidirectional and prove
    it with the probe (`NotBidirectionalError` otherwise). Returns the patch counts when it switched, else None."""
    from hf_encoderize.model.bidirectional import make_bidirectional, verify_bidirectional

    run.masker.target = phase.target
    model = run.accelerator.unwrap_model(run.model).model
    if not phase.bidirectional or getattr(model.config, "is_causal", True) is False:
        return None
    counts = make_bidirectional(model)
    with run.accelerator.autocast():  # where and in the precision the model trains (flash kernels need bf16)
        verify_bidirectional(model, pad_token_id=run.tokenizer.pad_token_id)
    return counts


def train_phases(run: Run, monitor, step: int, phases: list[Phase], switches_attention: bool,
                 ) -> tuple[int, tuple[int, int] | None]:
    """Train from `step` through `phases` (those already passed by a resume or branch are skipped; the last is always
    entered, so the row stream closes). With `switches_attention` (pretrain), each phase is entered with
    `enter_phase` and the run ends bidirectional, as an encoder; otherwise (cpt) the model arrived as one. Every phase
    that ends before the run does is closed with `close_phase`. Returns the step reached and the attention switch's
    patch counts (None when no switch ran)."""
    counts = None
    for phase in phases:
        if step >= phase.end and phase is not phases[-1]:
            continue  # resumed or branched past it
        if switches_attention:
            counts = enter_phase(run, phase) or counts
        step = train_until(run, monitor, step, phase.end)
        if phase.end < run.train.steps:
            close_phase(run, monitor, step)
    if switches_attention:
        # Every split ends as an encoder, clm:1.0 too: the paper fine-tunes all of them bidirectionally (section 2).
        counts = enter_phase(run, Phase("mlm", step, step, run.target)) or counts or (0, 0)
    return step, counts


def close_phase(run: Run, monitor, step: int) -> None:
    """Score the phase that just ended on the held-out rows (always, --eval-steps 0 included: the end of a phase is
    an end, and the branch point's score is what a split comparison reads), then save the state others branch from
    under `switch/`, never pruned."""
    if run.eval_batches:
        monitor.evaluation(step, evaluate_held_out(run))
    save_checkpoint(run.accelerator, checkpoint_dir(run.output_dir, step, folder="switch"), step)


def train_until(run: Run, monitor, step: int, until: int) -> int:
    """Train from `step` up to `until` (the whole run, or one pretraining phase): log every step, evaluate and
    checkpoint on schedule. Returns the step reached. Metrics stay on the device and reach the host once per
    `log_every` steps (and before every evaluation and checkpoint, so a checkpoint never follows a non-finite step)."""
    from hf_encoderize.training.profiling import StepProfiler, steady_window

    train, guard = run.train, NonFiniteGuard(run.train.on_nonfinite, run.output_dir)
    profiler = StepProfiler(run.output_dir / "profile", first=steady_window(step, until)) if train.profile else None
    ended = False
    try:
        while step < until:
            lr = run.scheduler.get_last_lr()[0]  # the LR this step applies; train_step moves the scheduler on
            with profiler.around(step) if profiler else contextlib.nullcontext():
                stats = train_step(run, with_accuracy=(step + 1) % train.log_every == 0 or step + 1 == until)
            step += 1
            guard.check_all(monitor.step(step, lr=lr, **stats))
            if train.eval_every and step % train.eval_every == 0 and step < train.steps:
                guard.check_all(monitor.flush())
                monitor.evaluation(step, evaluate_held_out(run))
            if step % train.save_every == 0 or step == train.steps:
                guard.check_all(monitor.flush())
                save_checkpoint(run.accelerator, checkpoint_dir(run.output_dir, step), step)
                if run.accelerator.is_main_process:
                    prune_checkpoints(run.output_dir, train.keep_last)
            if step in train.exports:
                export_encoder(run, step)
        guard.check_all(monitor.flush())
        ended = True
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: checkpoints are written atomically, so the newest
        monitor.close()  # end the progress bar's line now: the CLI's one line follows it, and tqdm never redraws it
        # (checkpoint is whole); the type says which signal
        raise type(interrupt)(resume_hint(run.output_dir, train.save_every)) from None
    finally:
        run.rows.close()  # stop the prefetching thread; the stream rewinds to the last batch trained on
        if profiler and ended:
            profiler.close()
        elif profiler:  # a run cut short (an error, Ctrl-C) writes no profile: its window may be partial or unreadable
            profiler.abandon()
    return step


def resume_hint(output_dir: Path, save_every: int) -> str:
    """What an interrupted run leaves, and how to go on (`save_every`: --save-steps)."""
    last = list_checkpoints(output_dir)
    if not last:
        return (f"no checkpoint was written yet (one every --save-steps {save_every} steps); run the same "
                "command with --overwrite to start over")
    return f"the newest checkpoint is {str(last[-1])!r}; run the same command with --resume to continue from it"


def next_batch(run: Run) -> StepBatch:
    """The next prepared step; re-masked here if it was prepared under the target of the phase before."""
    batch = run.rows.next()
    if batch.target != run.masker.target.name:
        pin = run.accelerator.device.type == "cuda"
        batch = prepare_step(*batch.raw, run.masker, run.train.grad_accum, _backend(run), pin)
    return batch


def _backend(run: Run) -> str:
    return run.accelerator.unwrap_model(run.model).model.config._attn_implementation


def train_step(run: Run, with_accuracy: bool = False) -> dict:
    """One optimizer step over `grad_accum` micro-batches of `batch_size` rows on each process.

    Returns device tensors (no host sync): the summed loss, correct predictions (`with_accuracy`) and gradient norm of
    the global batch, and its labelled and real token counts, plus the target's name. `monitor.step` turns them into
    per-token figures when it next syncs.
    """
    with section("data_wait"):
        batch = next_batch(run)
    accumulated = run.accelerator.step
    try:
        stats = _step_on(run, batch, with_accuracy)
    except Exception as error:  # a compiler failure on the first compiled step falls back to eager layers
        model = run.accelerator.unwrap_model(run.model).model
        if not fall_back_to_eager(run.compiled, model, error, run.scheduler.last_epoch + 1, "training step"):
            raise
        run.optimizer.zero_grad(set_to_none=True)  # the failed attempt's partial gradients
        run.accelerator.step = accumulated  # and its count of accumulated micro-batches
        stats = _step_on(run, batch, with_accuracy)
    run.compiled["ran"] = True
    return stats


def _step_on(run: Run, batch: StepBatch, with_accuracy: bool) -> dict:
    accelerator, train = run.accelerator, run.train
    processes, micro = accelerator.num_processes, train.grad_accum
    device = accelerator.device
    counts = accelerator.reduce(batch.counts.to(device, non_blocking=True), reduction="sum")  # global batch
    # Each process's loss is a sum over its labelled tokens; DDP/FSDP average gradients over processes and Accelerate
    # divides by the accumulation steps, so this scale makes the update the mean over the global batch's tokens.
    scale = (processes * micro / counts[0].clamp(min=1)).float()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    grad_norm = torch.zeros((), device=device)
    for part in batch.micro:
        with accelerator.accumulate(run.model):
            loss, right = run.model(to_device(part, device), with_accuracy, run.loss_kernel)
            with section("backward"):
                accelerator.backward(loss * scale)
            with section("optimizer"):
                if accelerator.sync_gradients:
                    grad_norm = _finite_or_skip(clip_gradients(run), run)
                run.optimizer.step()
                run.optimizer.zero_grad()
        loss_sum, correct = loss_sum + loss.detach().float(), correct + right
    run.scheduler.step()
    totals = torch.stack([loss_sum, correct.float(), torch.as_tensor(grad_norm, device=device).float()])
    totals = accelerator.reduce(totals, reduction="sum")
    return {"totals": totals, "counts": counts, "processes": processes, "target": run.masker.target.name,
            "with_accuracy": with_accuracy, "data_wait_s": run.rows.take_wait()}


def clip_gradients(run: Run):
    """Clip the global batch's gradients to `--max-grad-norm` and return their norm before clipping.

    Where the optimizer is torch's fused AdamW and every gradient is whole here (`build.clip_can_fold`), the clip is
    folded into the step: the norm is computed (one read of the gradients) and the fused kernel is given
    `grad_scale = 1 / coefficient`, which it divides each gradient by as it reads it, the way it unscales fp16
    gradients for GradScaler. `clip_grad_norm_` would read and write every gradient once more to scale it first. The
    coefficient is `clip_grad_norm_`'s own, max_norm / (norm + 1e-6) capped at 1, so the update is the same but for
    the rounding of one division against one multiplication (`tests/test_engine.py`)."""
    accelerator, train = run.accelerator, run.train
    if not run.fold_clip:
        return accelerator.clip_grad_norm_(run.model.parameters(), train.max_grad_norm)
    grads = [p.grad for p in run.model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
    coefficient = (train.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
    optimizer = getattr(run.optimizer, "optimizer", run.optimizer)  # Accelerate's wrapper holds torch's AdamW
    optimizer.grad_scale = coefficient.reciprocal().float()  # read by the next fused step (torch.optim.adamw)
    return norm


def _finite_or_skip(grad_norm, run: Run):
    """With `--on-nonfinite skip`, drop a non-finite gradient so `optimizer.step()` leaves weights and moments as
    they were: gradients set to None make torch's AdamW pass over the parameters (a zero gradient would still
    apply weight decay and decay the moments). Under fp16 the GradScaler already skips overflowing steps."""
    grad_norm = plain_norm(grad_norm)
    if run.train.on_nonfinite != "skip" or str(run.accelerator.mixed_precision) == "fp16":
        return grad_norm
    if not bool(torch.isfinite(torch.as_tensor(grad_norm))):
        run.optimizer.zero_grad(set_to_none=True)
    return grad_norm


@torch.no_grad()
def evaluate_held_out(run: Run) -> dict:
    """Loss and accuracy on the held-out rows under the current target, masked with fixed seeds (each held-out row
    has its own key) so evaluations are comparable across steps. Both are averaged over labelled tokens, not batches.
    In a CLM phase the accuracy is next-token accuracy and named so. The evaluation before the first step is where
    compiled layers first run: a compiler failure there falls back to eager layers as in `train_step`."""
    try:
        return _held_out(run)
    except Exception as error:
        model = run.accelerator.unwrap_model(run.model).model
        if not fall_back_to_eager(run.compiled, model, error, run.scheduler.last_epoch, "held-out evaluation"):
            raise
        return _held_out(run)


def _held_out(run: Run) -> dict:
    device, backend = run.accelerator.device, _backend(run)
    run.model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for number, (input_ids, document_ids) in enumerate(run.eval_batches):
        keys = [(-1 - number, row) for row in range(len(input_ids))]  # negative lanes: never a training lane
        batch = prepare_step(input_ids, document_ids, keys, run.masker, 1, backend, pin=False)
        loss, right = run.model(to_device(batch.micro[0], device), True, run.loss_kernel)
        loss_sum, correct, count = loss_sum + float(loss), correct + int(right), count + int(batch.counts[0])
    run.model.train()
    accuracy = run.masker.target.metric  # eval_next_token_accuracy in a CLM phase
    if not run.eval_batches:
        return {}
    # No labelled token (a tiny --mlm-probability): there is no score, and 0.0 would read as a perfect one.
    return {"eval_loss": loss_sum / count if count else None, accuracy: correct / count if count else None}
