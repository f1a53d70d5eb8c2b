"""The training engine on Accelerate: build a run, step it, evaluate on held-out rows, checkpoint, save the result.

`cpt` (continued pretraining of a loaded model) and `pretrain` (from scratch, CLM then MLM) are recipes on top of it:
they load a model, call `build_run`, then `train_until` (per phase for pretrain, switching with `enter_phase`), then
`save_run`. The loop reads top to bottom: `while step < until: train_step(); log; maybe evaluate; maybe save`.

Design choices:
- Accelerate only, so `accelerate launch` with DDP/FSDP/DeepSpeed configs runs it unchanged; the model is wrapped in
  `ObjectiveModel` so the wrapped module's forward (and its gradient hooks) is what runs.
- Optimiser and schedule follow the paper (section 2, Appendix A): AdamW betas (0.9, 0.95), epsilon 1e-5,
  weight decay 0.1, gradient clipping 1.0, Warmup-Stable-Decay.
- One optimizer step takes `batch_size x processes x grad_accum` packed rows: slot j of the global batch comes from
  lane j of the document stream (`packing.LaneStream`), so each process tokenizes, packs and masks only its own
  rows, and every row's mask is seeded by its lane and row number (`objectives.row_seed`): N processes see exactly
  the rows and masks of one. The loss is the cross-entropy summed over labelled tokens divided by the labelled
  tokens of the whole global batch (all-reduced on the device; the paper's token-level objective), so 1 process x 8
  rows, 2 x 4 and 8 accumulation steps x 1 row give the same update.
- The data never makes the GPU wait: a background thread (`prefetch.Prefetcher`) tokenizes, packs, masks, finds the
  labelled positions and the packed-attention boundaries on the host and pins the tensors, which are copied with
  `non_blocking=True`. Metrics stay on the device and are read once per `log_every` steps.
- Packed rows keep documents isolated (`isolation.packed_forward`) and the LM head runs only on labelled positions,
  through a fused linear + cross-entropy (`loss.mlm_loss`). Padded rows (`--no-pack`, or a hybrid whose state-space
  layers would carry state across packed documents) take the same path: one document per row, the padding its own
  attention block and never labelled.
- The row stream's position (every lane's) is registered for checkpointing next to the scheduler
  (`checkpoints.register_state`, saved as JSON rather than pickled), so `checkpoints.save_checkpoint(accelerator,
  folder, step)` saves everything and a resumed run continues token for token. Masking needs no state.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.log import get_logger
from hf_encoderize.data.packing import LaneStream, Packer, data_position, held_out_batches
from hf_encoderize.data.prefetch import Prefetcher
from hf_encoderize.data.sources import DataConfig, Documents, data_facts
from hf_encoderize.model.isolation import packed_forward
from hf_encoderize.objectives.loss import mlm_loss
from hf_encoderize.objectives.loss_kernels import choose_loss_kernel
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.phases import Masker, Phase
from hf_encoderize.training.batches import StepBatch, my_lanes, prepare_step, to_device
from hf_encoderize.training.checkpoints import (
    checkpoint_dir,
    list_checkpoints,
    prune_checkpoints,
    register_state,
    save_checkpoint,
    state_of,
)
from hf_encoderize.training.nonfinite import NonFiniteGuard, check_finite_result, plain_norm
from hf_encoderize.training.profiling import section
from hf_encoderize.training.schedule import wsd_scheduler
from hf_encoderize.training.train_config import ADAMW_BETAS, TrainConfig  # noqa: F401 - re-exported: recipes import it here

log = get_logger(__name__)


class ObjectiveModel(torch.nn.Module):
    """Backbone + LM head -> summed cross-entropy over labelled positions. Wrapped whole by Accelerate (DDP/FSDP).

    `forward` returns `(loss_sum, correct)`: the fp32 cross-entropy summed over labelled positions (the engine divides
    by the labelled tokens of the global batch) and, detached, how many of them the arg-max predicts right (a device
    tensor, so the training step needs no extra host sync)."""

    def __init__(self, model):
        from hf_encoderize.model.loading import ENCODER, classify_config

        super().__init__()
        self.model = model
        self.native_encoder = classify_config(model.config) == ENCODER
        self.loss_kernel = None  # another fused linear + cross-entropy (`loss_kernels`); None: ours

    # What Accelerate reads off the prepared object, delegated to the wrapped transformers model: FSDP2's transformer
    # wrap policy reads `_no_split_modules` (without it the whole model is one FSDP unit), and FSDP2's
    # `cpu_ram_efficient_loading` re-ties embeddings through `tie_weights`/`get_*_embeddings` after moving the model
    # to meta (without them a tied LM head becomes a separate parameter the optimizer never sees).
    @property
    def _no_split_modules(self):
        return getattr(self.model, "_no_split_modules", None)

    @property
    def _tied_weights_keys(self):
        keys = getattr(self.model, "_tied_weights_keys", None)
        if isinstance(keys, dict):
            return {f"model.{k}": f"model.{v}" for k, v in keys.items()}
        return [f"model.{k}" for k in keys] if keys else keys

    def tie_weights(self, *args, **kwargs):
        return self.model.tie_weights(*args, **kwargs)

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def forward(self, batch: dict, with_accuracy: bool = False):
        """`batch`: one micro-batch on the device (`prepare_step`): masked `input_ids`, `document_ids`, `labels`, the
        flat `index` and `targets` of the labelled positions, and the packed-attention inputs."""
        from hf_encoderize.model.bidirectional import base_model_of, last_hidden_state

        packed = batch["packed"]
        if self.native_encoder:
            # A native encoder: its MLM head has a transform before the decoder, so run the whole masked-LM model.
            logits = packed_forward(self.model, batch["input_ids"], batch["document_ids"], packed=packed).logits
            logits = logits.reshape(-1, logits.shape[-1]).index_select(0, batch["index"]).float()
            loss = torch.nn.functional.cross_entropy(logits, batch["targets"], reduction="sum")
            return loss, (logits.detach().argmax(-1) == batch["targets"]).sum()
        with section("forward"):
            output = packed_forward(base_model_of(self.model), batch["input_ids"], batch["document_ids"],
                                    packed=packed, use_cache=False)
        with section("loss"):
            loss, correct = mlm_loss(last_hidden_state(output), self.model.get_output_embeddings(), batch["index"],
                                     batch["targets"], with_accuracy=with_accuracy, kernel=self.loss_kernel)
        return loss, correct if correct is not None else torch.zeros((), dtype=torch.long, device=loss.device)


@dataclass
class Run:
    """What the training steps need, built once by `build_run`; `enter_phase` is the only change made to it."""

    accelerator: object
    model: torch.nn.Module
    """The `ObjectiveModel`, prepared by Accelerate."""
    optimizer: object
    scheduler: object
    rows: Prefetcher
    """This process's training rows (`LaneStream`), prepared ahead by a background thread."""
    masker: Masker
    tokenizer: object
    eval_batches: list
    train: TrainConfig
    output_dir: Path
    exporter: Callable[[int], object] | None = None
    """Saves the encoder at a `--export-steps` step (set by the recipe, which knows what the export records)."""
    loss_implementation: dict | None = None
    """The MLM loss kernel chosen (`loss_kernels.choose_loss_implementation`'s report), for the run record."""


def resolve_grad_accum(train: TrainConfig, seq_len: int) -> TrainConfig:
    """`train` with `grad_accum` worked out from `tokens_per_step` (a copy; unchanged when it is not set). The
    processes are those of the launch (`WORLD_SIZE`), known before the Accelerator exists."""
    import dataclasses

    if train.tokens_per_step is None:
        return train
    processes = world_size()
    per_micro = train.batch_size * processes * seq_len
    return dataclasses.replace(train, grad_accum=max(1, math.ceil(train.tokens_per_step / per_micro)))


def make_accelerator(train: TrainConfig, output_dir: Path, trackers: list[str]):
    """An `Accelerator` for this run: bf16 on a GPU that has it (`auto`), gloo when launched on several CPUs."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    precision = train.mixed_precision
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    if AcceleratorState._shared_state and AcceleratorState().mixed_precision != precision:
        # A second run in one Python process (library use) with another precision: accelerate keeps its state in a
        # process-wide singleton and refuses the change; clear it (not the process group, which stays valid).
        AcceleratorState._reset_state(reset_partial_state=False)
    # Launched on several processes without a GPU (torchrun / accelerate launch on CPU): use gloo, not one-per-process.
    multi_cpu = not torch.cuda.is_available() and world_size() > 1
    # The other processes wait at a barrier while the main one saves the encoder (after merging LoRA adapters into a
    # reloaded base, or gathering FSDP shards): minutes for a large model, which NCCL's default 10-minute timeout
    # would turn into an abort of every process mid-save.
    group = InitProcessGroupKwargs(timeout=datetime.timedelta(hours=2))
    return Accelerator(gradient_accumulation_steps=train.grad_accum, mixed_precision=precision, cpu=multi_cpu,
                       log_with=trackers or None, project_dir=str(output_dir), kwargs_handlers=[group])


def build_run(accelerator, model, tokenizer, documents: Documents, data: DataConfig, masking: MaskingConfig,
              train: TrainConfig, output_dir: Path) -> Run:
    """Objective, AdamW, one WSD schedule over `train.steps`, the packed row stream and the masker, prepared by
    Accelerate, with the scheduler, packer and masker registered for checkpointing. The held-out rows are the first
    `data.eval_documents` documents, never trained on.

    With LoRA, `model` already holds the injected adapters (peft patches in place), so only they train."""
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if backend == "flex_attention" and accelerator.device.type == "cpu":  # torch has no flex backward on CPU
        raise EncoderizeError("--attn-implementation flex_attention cannot train on CPU (torch has no backward pass "
                              "for it there); use sdpa or auto, or train on a GPU")
    objective = ObjectiveModel(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if train.master_weights == "fp32":
        for parameter in trainable:  # bf16 weights would lose AdamW's small updates (and weight decay) to rounding
            if parameter.is_floating_point() and parameter.dtype != torch.float32:
                parameter.data = parameter.data.float()
    # Fused AdamW: one kernel for all parameters, on CUDA/ROCm and on CPU (8x the per-tensor kernel's speed on a
    # 2-core CPU; the quickstart's 80 SmolLM2 steps give the same per-step losses to 3 decimals and held-out loss
    # 5.557 vs 5.546). torch's fused CPU kernel mis-updates a parameter whose gradient has other strides than it
    # (a transposed view with a contiguous gradient: 0.0098 off the per-tensor kernel after 5 steps, torch 2.13).
    # Autograd gives a gradient its parameter's strides, and every parameter is made contiguous here, so any
    # gradient a library sets by hand (contiguous, as they are) matches too.
    for parameter in trainable:
        if not parameter.is_contiguous():
            parameter.data = parameter.data.contiguous()
    fused = all(p.is_floating_point() for p in trainable) and (
        torch.cuda.is_available() or all(p.device.type == "cpu" for p in trainable))
    optimizer = torch.optim.AdamW(trainable, lr=train.lr, betas=ADAMW_BETAS, eps=train.adam_eps,
                                  weight_decay=train.weight_decay, fused=fused)
    scheduler = wsd_scheduler(optimizer, train.steps, train.warmup, train.decay)
    configure_deepspeed(accelerator, train)
    if train.compile:
        from hf_encoderize.training.compiling import compile_decoder_layers

        compile_decoder_layers(model)
    objective, optimizer = accelerator.prepare(objective, optimizer)
    loss_report = choose_loss_kernel(accelerator, objective, masking, data, train)
    embeddings = model.get_input_embeddings().weight
    vocab_size = getattr(embeddings, "ds_shape", embeddings.shape)[0]  # ZeRO-3 partitions report an empty shape
    masker = Masker.for_tokenizer(tokenizer, masking, vocab_size, seed=train.seed)  # stateless: seeds per row
    pack = data.pack is not False  # None (not decided by a recipe) packs, the default
    stream = LaneStream(tokenizer, data.seq_len, pack, documents, data.eval_documents + data.skip_documents,
                        lanes=my_lanes(train, accelerator.num_processes, accelerator.process_index),
                        total_lanes=train.batch_size * accelerator.num_processes * train.grad_accum,
                        shuffle_buffer=data.shuffle_buffer, seed=train.seed,
                        warn=_say if accelerator.is_main_process else None)
    backend = model.config._attn_implementation
    pin = accelerator.device.type == "cuda"

    def produce():
        return prepare_step(*stream.take(), masker, train.grad_accum, backend, pin)

    rows = Prefetcher(stream, produce, depth=train.prefetch)
    # Checkpointed next to the model and optimizer as JSON (never Accelerate's pickled custom state, see checkpoints);
    # the scheduler is stepped once per optimizer step, by us, so it is not prepared either.
    for name, stateful in (("scheduler", scheduler), ("rows", rows)):
        register_state(accelerator, name, stateful)
    held_out = held_out_batches(documents, Packer(tokenizer, data.seq_len, pack), data.eval_documents,
                                data.eval_max_rows, train.batch_size)
    return Run(accelerator, objective, optimizer, scheduler, rows, masker, tokenizer, held_out, train,
               Path(output_dir), loss_implementation=loss_report)


def configure_deepspeed(accelerator, train: TrainConfig) -> None:
    """Fill the `auto` batch values of a DeepSpeed config: accelerate derives them from a prepared DataLoader, and this
    loop has none (it packs its own rows), so `prepare` would raise on `train_micro_batch_size_per_gpu: auto`."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    config = plugin.deepspeed_config
    values = {"train_micro_batch_size_per_gpu": train.batch_size, "gradient_accumulation_steps": train.grad_accum,
              "train_batch_size": train.batch_size * train.grad_accum * accelerator.num_processes,
              "gradient_clipping": train.max_grad_norm}
    for key, value in values.items():
        if config.get(key, "auto") == "auto":
            config[key] = value


def enter_phase(run: Run, phase: Phase) -> tuple[int, int] | None:
    """Point the run at `phase`'s objective; on entering MLM, make the attention bidirectional and prove it with the
    probe (`NotBidirectionalError` otherwise). Returns the patch counts when it switched, else None."""
    from hf_encoderize.model.bidirectional import make_bidirectional, verify_bidirectional

    run.masker.objective = "clm" if phase.objective == "clm" else run.masker.masking.objective
    model = run.accelerator.unwrap_model(run.model).model
    if not phase.bidirectional or getattr(model.config, "is_causal", True) is False:
        return None
    counts = make_bidirectional(model)
    with run.accelerator.autocast():  # where and in the precision the model trains (flash kernels need bf16)
        verify_bidirectional(model, pad_token_id=run.tokenizer.pad_token_id)
    return counts


def train_until(run: Run, monitor, step: int, until: int) -> int:
    """Train from `step` up to `until` (the whole run, or one pretraining phase): log every step, evaluate and
    checkpoint on schedule. Returns the step reached. Metrics stay on the device and reach the host once per
    `log_every` steps (and before every evaluation and checkpoint, so a checkpoint never follows a non-finite step)."""
    from hf_encoderize.training.profiling import StepProfiler

    train, guard = run.train, NonFiniteGuard(run.train, run.output_dir)
    profiler = StepProfiler(run.output_dir / "profile", first=step + 3, count=3) if train.profile else None
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
            if step in train.exports and run.exporter is not None:
                run.exporter(step)
        guard.check_all(monitor.flush())
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: checkpoints are written atomically, so the newest
        monitor.close()  # end the progress bar's line now: the CLI's one line follows it, and tqdm never redraws it
        raise type(interrupt)(resume_hint(run.output_dir, train)) from None  # is whole; the type says which signal
    finally:
        run.rows.close()  # stop the prefetching thread; the stream rewinds to the last batch trained on
        if profiler:
            profiler.close()
    return step


def resume_hint(output_dir: Path, train: TrainConfig) -> str:
    """What an interrupted run leaves, and how to go on."""
    last = list_checkpoints(output_dir)
    if not last:
        return (f"no checkpoint was written yet (one every --save-steps {train.save_every} steps); run the same "
                "command with --overwrite to start over")
    return f"the newest checkpoint is {str(last[-1])!r}; run the same command with --resume to continue from it"


def next_batch(run: Run) -> StepBatch:
    """The next prepared step; re-masked here if it was prepared under the objective of the phase before."""
    batch = run.rows.next()
    if batch.objective != run.masker.objective:
        pin = run.accelerator.device.type == "cuda"
        batch = prepare_step(*batch.raw, run.masker, run.train.grad_accum, _backend(run), pin)
    return batch


def _backend(run: Run) -> str:
    return run.accelerator.unwrap_model(run.model).model.config._attn_implementation


def train_step(run: Run, with_accuracy: bool = False) -> dict:
    """One optimizer step over `grad_accum` micro-batches of `batch_size` rows on each process.

    Returns device tensors (no host sync): the summed loss, correct predictions (`with_accuracy`) and gradient norm of
    the global batch, and its labelled and real token counts, plus the objective. `monitor.step` turns them into
    per-token figures when it next syncs.
    """
    accelerator, train = run.accelerator, run.train
    processes, micro = accelerator.num_processes, train.grad_accum
    with section("data_wait"):
        batch = next_batch(run)
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
            loss, right = run.model(to_device(part, device), with_accuracy)
            with section("backward"):
                accelerator.backward(loss * scale)
            with section("optimizer"):
                if accelerator.sync_gradients:
                    grad_norm = accelerator.clip_grad_norm_(run.model.parameters(), train.max_grad_norm)
                    grad_norm = _finite_or_skip(grad_norm, run)
                run.optimizer.step()
                run.optimizer.zero_grad()
        loss_sum, correct = loss_sum + loss.detach().float(), correct + right
    run.scheduler.step()
    totals = torch.stack([loss_sum, correct.float(), torch.as_tensor(grad_norm, device=device).float()])
    totals = accelerator.reduce(totals, reduction="sum")
    return {"totals": totals, "counts": counts, "processes": processes, "objective": run.masker.objective,
            "with_accuracy": with_accuracy, "data_wait_s": run.rows.take_wait()}


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
    """Loss and accuracy on the held-out rows under the current objective, masked with fixed seeds (each held-out row
    has its own key) so evaluations are comparable across steps. Both are averaged over labelled tokens, not batches.
    In a CLM phase the accuracy is next-token accuracy and named so."""
    device, backend = run.accelerator.device, _backend(run)
    run.model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for number, (input_ids, document_ids) in enumerate(run.eval_batches):
        keys = [(-1 - number, row) for row in range(len(input_ids))]  # negative lanes: never a training lane
        batch = prepare_step(input_ids, document_ids, keys, run.masker, 1, backend, pin=False)
        loss, right = run.model(to_device(batch.micro[0], device), True)
        loss_sum, correct, count = loss_sum + float(loss), correct + int(right), count + int(batch.counts[0])
    run.model.train()
    accuracy = "eval_next_token_accuracy" if run.masker.objective == "clm" else "eval_masked_accuracy"
    if not run.eval_batches:
        return {}
    # No labelled token (a tiny --mlm-probability): there is no score, and 0.0 would read as a perfect one.
    return {"eval_loss": loss_sum / count if count else None, accuracy: correct / count if count else None}


def training_facts(data: DataConfig, masking: MaskingConfig, train: TrainConfig) -> dict:
    """The settings every run records (run record, trackers); recipes add theirs. No secrets: configs hold none."""
    return {
        "objective": masking.objective, "mask_ratio": masking.mask_ratio, "replacement": masking.replacement,
        "data": data_facts(data),
        "steps": train.steps, "lr": train.lr, "schedule": "wsd", "warmup_steps": train.warmup,
        "decay_steps": train.decay, "weight_decay": train.weight_decay, "betas": list(ADAMW_BETAS),
        "adam_eps": train.adam_eps,
        "max_grad_norm": train.max_grad_norm, "batch_size": train.batch_size, "grad_accum": train.grad_accum,
        "tokens_per_step": train.tokens_per_step, "seed": train.seed,
        "gradient_checkpointing": train.gradient_checkpointing, "master_weights": train.master_weights,
        "compile": train.compile, "prefetch": train.prefetch,
    }


def gather_weights(run: Run) -> dict | None:
    """The full weights of a sharded run (FSDP2, DeepSpeed ZeRO-3), gathered for saving; None when the unwrapped
    model already holds them (one process, DDP). Call on every process: gathering is collective."""
    from accelerate.utils import DistributedType

    if run.accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return None
    state = run.accelerator.get_state_dict(run.model)  # full tensors on the main process
    return {name.removeprefix("model."): tensor for name, tensor in state.items()} if state else None


def save_run(model, tokenizer, output_dir: Path, record: dict, state_dict: dict | None = None) -> dict:
    """Save the final model to `OUT/encoder`, draw the loss curve, and write `OUT/run_record.json` (main process).

    `record` holds the run's facts (`training_facts`, the recipe's, `encoderize`, `hardware`, ...); the metrics' (tokens
    seen, final loss, skipped steps) and the finish time are added. `state_dict`: gathered weights of a sharded run."""
    from hf_encoderize.common.run_folder import EncoderFacts, RunFolder, RunRecord
    from hf_encoderize.common.version import __version__
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.training.monitor import plot_loss_curve, read_metrics, utc_now

    folder = RunFolder(output_dir)
    check_finite_result(model, state_dict, {"eval_loss": record.get("eval_loss")})
    report = record["encoderize"]
    patch = {k: report[k] for k in ("config_switch", "modules_patched", "causal_buffers_replaced")}
    metadata = EncoderFacts(command=record["command"], base_model=record["base_model"], revision=record.get("revision"),
                            gguf_file=record.get("gguf_file"), objective=record["objective"],
                            mask_ratio=record["mask_ratio"], steps=record["steps"],
                            lora_r=(record.get("lora") or {}).get("r", 0), phases=record.get("phases"),
                            packing=report.get("packing", "packed"), model_type=report["model_type"],
                            attn_implementation=report["attn_implementation"], tokens=report["tokens"], facts=patch)
    save_encoder(model, tokenizer, folder.encoder, overwrite=True, metadata=metadata, state_dict=state_dict)
    title = "MLM continued pretraining" if record["command"] == "cpt" else f"pretraining, {record.get('phases')}"
    plot_loss_curve(folder.metrics, folder.loss_curve, title=title)
    train_records = [r for r in read_metrics(folder.metrics) if r["kind"] == "train"]
    record = {"hf_encoderize_version": __version__, **record,
              "tokens_seen": sum(r["tokens"] for r in train_records),
              "skipped_nonfinite_steps": sum(1 for r in train_records if r.get("skipped_nonfinite")),
              "final_train_loss": train_records[-1]["loss"] if train_records else None, "finished_at": utc_now()}
    RunRecord.from_dict(record).to_json(folder.run_record)
    return record


def finish_processes(accelerator) -> None:
    """End a run on every process together, once the main process has saved: a recipe returns only when the encoder
    is on disk (a next stage on another process may read it), and no process tears its process group down while the
    others still use theirs (a gloo rank leaving early has aborted at exit with "terminate called without an active
    exception")."""
    accelerator.wait_for_everyone()
    accelerator.end_training()


def align_lr_with_schedule(run: Run) -> None:
    """After loading a checkpoint, give the optimizer this run's LR for the next step. The checkpoint holds the LR its
    own schedule set; a branch (or a longer resume) has another decay, and at its decay start the two differ."""
    scheduler = run.scheduler
    for group, base, factor in zip(run.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in run.optimizer.param_groups]


def _say(message: str) -> None:
    log.info(message)


def stream_position(run: Run, data: DataConfig) -> dict:
    """`packing.data_position` over every process's lanes (a collective: call on every process)."""
    lanes = state_of(run.accelerator, run.rows)
    total = run.train.batch_size * run.accelerator.num_processes * run.train.grad_accum
    return data_position(lanes, total, data.skip_documents)


def run_summary(run: Run, monitor, step: int, started: float, final_eval: dict) -> dict:
    """What `cpt`/`pretrain` return: the run folder, steps, per-step losses, the final held-out scores, wall time."""
    return {"output_dir": str(run.output_dir), "steps": step, "losses": list(monitor.losses), **final_eval,
            "wall_time_s": time.time() - started}
