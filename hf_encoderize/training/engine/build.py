"""`build_run`: everything the training steps need, built once and complete (`Run`).

Design choices:
- Optimiser and schedule follow the paper (section 2, Appendix A): AdamW betas (0.9, 0.95), epsilon 1e-5,
  weight decay 0.1, gradient clipping 1.0, Warmup-Stable-Decay over `--max-steps`.
- One optimizer step takes `batch_size x processes x grad_accum` packed rows: slot j of the global batch comes from
  lane j of the document stream (`packing.LaneStream`), so each process tokenizes, packs and masks only its own
  rows, and every row's mask is seeded by its lane and row number (`objectives.row_seed`): N processes see exactly
  the rows and masks of one.
- The data never makes the GPU wait: a background thread (`prefetch.Prefetcher`) tokenizes, packs, masks, finds the
  labelled positions and the packed-attention boundaries on the host and pins the tensors.
- Padded rows (`--no-pack`, or a hybrid whose state-space layers would carry state across packed documents) take
  the same path as packed ones: one document per row, the padding its own attention block and never labelled.
- The row stream's position (every lane's) is registered for checkpointing next to the scheduler
  (`checkpoints.register_state`, saved as JSON rather than pickled), so a resumed run continues token for token.
  Masking needs no state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger
from hf_encoderize.data.packing import LaneStream, Packer, data_position, held_out_batches
from hf_encoderize.data.prefetch import Prefetcher
from hf_encoderize.data.sources import DataConfig, Documents
from hf_encoderize.objectives.loss_kernels import choose_loss_kernel
from hf_encoderize.objectives.phases import Masker
from hf_encoderize.objectives.targets import Target
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.training.batches import my_lanes, prepare_step
from hf_encoderize.training.checkpoints import register_state, state_of
from hf_encoderize.training.compiling import compile_decision, compile_decoder_layers, dynamo_counters
from hf_encoderize.training.engine.accelerator import configure_deepspeed
from hf_encoderize.training.engine.loss_model import LossModel
from hf_encoderize.training.schedule import wsd_scheduler
from hf_encoderize.training.train_config import ADAMW_BETAS, TrainConfig

log = get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Trainable:
    """The model where it trains, and what `build_run` needs beside it: a recipe's `build` returns one (its `Built`
    adds the run's settings), a test builds one from a loaded model."""

    model: torch.nn.Module
    tokenizer: object
    data: DataConfig
    """The data config as it trains (cpt: padded rows for a model whose packed documents would leak)."""
    export_facts: Callable[[int], EncoderFacts] = lambda step: EncoderFacts()
    """Step -> the config facts of an intermediate encoder (`--export-steps`); default: the step alone."""
    export_dtype: torch.dtype | None = None
    """The dtype encoders are saved in (the loaded one; training may hold fp32 master weights); None: the model's."""


@dataclass
class Run:
    """What the training steps need, built once by `build_run`; `enter_phase` is the only change made to it."""

    accelerator: object
    model: torch.nn.Module
    """The `LossModel`, prepared by Accelerate."""
    optimizer: object
    scheduler: object
    rows: Prefetcher
    """This process's training rows (`LaneStream`), prepared ahead by a background thread."""
    masker: Masker
    """Labels each batch under the current phase's target (`enter_phase` sets it)."""
    tokenizer: object
    eval_batches: list
    train: TrainConfig
    output_dir: Path
    loss_kernel: Callable | None
    """The fused linear + cross-entropy `loss_kernels` chose for the run's shape; None: ours (the reference)."""
    loss_implementation: dict
    """The MLM loss kernel chosen (`loss_kernels.choose_loss_implementation`'s report), for the run record."""
    export_facts: Callable[[int], EncoderFacts]
    """Step -> the config facts of an intermediate encoder (`--export-steps`, `engine.export`)."""
    export_dtype: torch.dtype | None
    """The dtype encoders are saved in (the loaded one; training may hold fp32 master weights); None: the model's."""
    fold_clip: bool
    """Gradient clipping is folded into the fused AdamW step (`loop.clip_gradients`): the optimizer divides each
    gradient by 1 / clip coefficient as it reads it, instead of a separate pass that scales every gradient first."""
    compiled: dict
    """Whether the decoder layers were compiled and why (`compiling.compile_decision`), with dynamo's counters as they
    stood before (`dynamo_counters`); the run record gets the difference at the end."""
    target: Target
    """What the encoder learns (the masked phase's target, from the recipe): the run ends under it."""


def build_run(accelerator, trainable: Trainable, documents: Documents, target: Target, train: TrainConfig,
              output_dir: Path) -> Run:
    """The loss model, AdamW, one WSD schedule over `train.steps`, the packed row stream and the masker, prepared by
    Accelerate, with the scheduler, packer and masker registered for checkpointing; the masker starts on `target` (the
    encoder's, from the recipe). The held-out rows are the first `trainable.data.eval_documents` documents, never
    trained on.

    With LoRA, `trainable.model` already holds the injected adapters (peft patches in place), so only they train."""
    model, tokenizer, data = trainable.model, trainable.tokenizer, trainable.data
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if backend == "flex_attention" and accelerator.device.type == "cpu":  # torch has no flex backward on CPU
        raise EncoderizeError("--attn-implementation flex_attention cannot train on CPU (torch has no backward pass "
                              "for it there); use sdpa or auto, or train on a GPU")
    loss_model = LossModel(model)
    learning = [p for p in model.parameters() if p.requires_grad]
    if train.master_weights == "fp32":
        for parameter in learning:  # bf16 weights would lose AdamW's small updates (and weight decay) to rounding
            if parameter.is_floating_point() and parameter.dtype != torch.float32:
                parameter.data = parameter.data.float()
    # Fused AdamW: one kernel for all parameters, on CUDA/ROCm and on CPU (8x the per-tensor kernel's speed on a
    # 2-core CPU; the quickstart's 80 SmolLM2 steps give the same per-step losses to 3 decimals and held-out loss
    # 5.557 vs 5.546). torch's fused CPU kernel mis-updates a parameter whose gradient has other strides than it
    # (a transposed view with a contiguous gradient: 0.0098 off the per-tensor kernel after 5 steps, torch 2.13).
    # Autograd gives a gradient its parameter's strides, and every parameter is made contiguous here, so any
    # gradient a library sets by hand (contiguous, as they are) matches too.
    for parameter in learning:
        if not parameter.is_contiguous():
            parameter.data = parameter.data.contiguous()
    fused = all(p.is_floating_point() for p in learning) and (
        torch.cuda.is_available() or all(p.device.type == "cpu" for p in learning))
    optimizer = torch.optim.AdamW(learning, lr=train.lr, betas=ADAMW_BETAS, eps=train.adam_eps,
                                  weight_decay=train.weight_decay, fused=fused)
    scheduler = wsd_scheduler(optimizer, train.steps, train.warmup, train.decay)
    configure_deepspeed(accelerator, train)
    compiled = compile_decision(train.compile, accelerator.device, model, gradient_checkpointing=
                                train.gradient_checkpointing,
                                deepspeed=getattr(accelerator.state, "deepspeed_plugin", None) is not None)
    compiled["counters_before"] = dynamo_counters()
    if compiled["on"]:
        compile_decoder_layers(model)
    loss_model, optimizer = accelerator.prepare(loss_model, optimizer)
    masked_rows = round(target.masking.mask_ratio * train.batch_size * data.seq_len)
    loss_kernel, loss_report = pick_loss_kernel(accelerator, loss_model, train.loss_implementation, masked_rows)
    fold_clip = fused and clip_can_fold(accelerator)
    if torch.cuda.is_available():  # the probe's scratch tensors are not the run's memory: peak memory counts from here
        torch.cuda.reset_peak_memory_stats()
    embeddings = model.get_input_embeddings().weight
    vocab_size = getattr(embeddings, "ds_shape", embeddings.shape)[0]  # ZeRO-3 partitions report an empty shape
    masker = Masker.for_tokenizer(tokenizer, target, vocab_size, seed=train.seed)  # stateless: seeds per row
    pack = data.pack is not False  # None (not decided by a recipe) packs, the default
    stream = LaneStream(tokenizer, data.seq_len, pack, documents, data.eval_documents + data.skip_documents,
                        lanes=my_lanes(train.batch_size, train.grad_accum, accelerator.num_processes,
                                       accelerator.process_index),
                        total_lanes=train.batch_size * accelerator.num_processes * train.grad_accum,
                        shuffle_buffer=data.shuffle_buffer, seed=train.seed,
                        warn=log.info if accelerator.is_main_process else None)
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
    return Run(accelerator, loss_model, optimizer, scheduler, rows, masker, tokenizer, held_out, train,
               Path(output_dir), loss_kernel, loss_report, trainable.export_facts, trainable.export_dtype, fold_clip,
               compiled, target)


def clip_can_fold(accelerator) -> bool:
    """Whether clipping can ride on the fused AdamW step: on a GPU (where the pass it saves over the gradients costs
    memory bandwidth; on CPU the unfolded clip keeps runs digit for digit as before, the quickstart's held-out loss
    5.609 included: folding's one rounding per gradient moved it to 5.749 over 80 clipped steps), every gradient whole
    on this process (one process, DDP; not FSDP's shards or DeepSpeed's partitions, whose norms their engines
    compute) and no fp16 loss scaler (which uses the fused step's `grad_scale` itself)."""
    from accelerate.utils import DistributedType

    whole = (DistributedType.NO, DistributedType.MULTI_GPU)
    return (accelerator.device.type == "cuda" and accelerator.distributed_type in whole
            and str(accelerator.mixed_precision) != "fp16")


def pick_loss_kernel(accelerator, loss_model, requested: str, masked_rows: int) -> tuple[Callable | None, dict]:
    """The MLM loss kernel and its report (`loss_kernels.choose_loss_kernel`); a native encoder's whole MLM head runs
    instead, for its transform before the decoder."""
    unwrapped = accelerator.unwrap_model(loss_model)  # the LossModel, whatever wraps it
    if unwrapped.native_encoder:
        return None, {"requested": requested, "chosen": "native MLM head",
                      "why": "a native encoder's MLM head has a transform before its decoder: its whole head runs"}
    return choose_loss_kernel(requested, unwrapped.model.get_output_embeddings(), masked_rows, accelerator)


def align_lr_with_schedule(run: Run) -> None:
    """After loading a checkpoint, give the optimizer this run's LR for the next step. The checkpoint holds the LR its
    own schedule set; a branch (or a longer resume) has another decay, and at its decay start the two differ."""
    scheduler = run.scheduler
    for group, base, factor in zip(run.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in run.optimizer.param_groups]


def stream_position(run: Run, data: DataConfig) -> dict:
    """`packing.data_position` over every process's lanes (a collective: call on every process)."""
    lanes = state_of(run.accelerator, run.rows)
    total = run.train.batch_size * run.accelerator.num_processes * run.train.grad_accum
    return data_position(lanes, total, data.skip_documents)
