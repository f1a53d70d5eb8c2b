"""The plan a training run states before its first step: how many tokens it trains, beside the paper's figure.

Design choices:
- Tokens per step are rows x length x accumulation x processes: the most a step holds (packed rows are full; padded
  rows hold fewer real tokens, which `metrics.jsonl` counts). The total is that times the steps.
- The paper's figure is beside it, for the same number of steps: its step is 2,359,296 tokens (Appendix A: 1,152
  rows of 2,048), so its 12,000-step CPT trains 28.3B tokens. A run far below it says so, and names the option that
  gives the paper's step (`--tokens-per-step paper`).
- Peak memory a process, an estimate said as one, and its one owner (pretrain's memory check reads it too): weights,
  gradients and AdamW's two moments at the dtype the optimizer steps in (fp32 master weights: 4 + 4 + 8 bytes a
  trainable parameter, divided as FSDP or ZeRO shard them; `--master-weights loaded` in bf16: 2 + 2 + 4), frozen
  weights (LoRA's base) at their own dtype; the activations of one micro-batch, ~34 bytes per token, hidden unit and
  layer in 16-bit with a fused attention (no T^2 term; Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", section 4.1), twice that in fp32, and under gradient checkpointing each layer's input
  plus one layer; and one chunk of the fused loss's logits. Not counted: the allocator's slack, CUDA's own context.
  The model's shape comes from its config alone (a meta-device copy, `shape_from_config`), so `--dry-run` loads no
  weight.
- One line, said once by the main process; `--dry-run` prints it and stops before anything is loaded.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from hf_encoderize.common.launch import world_size
from hf_encoderize.objectives.loss import CHUNK_ELEMENTS
from hf_encoderize.training.train_config import PAPER_TOKENS_PER_STEP

ACTIVATION_BYTES_16BIT = 34  # per token x hidden unit x layer, fused attention (Korthikanti et al. 2022, section 4.1)


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What the memory estimate reads of a model: its size, depth, width and vocabulary."""

    parameters: int
    """All parameters."""
    trainable: int
    """Parameters the optimizer steps (all of them, or LoRA's adapters)."""
    layers: int
    """Decoder layers (`num_hidden_layers`)."""
    hidden: int
    """Hidden size."""
    vocab: int
    """Vocabulary size (the LM head's rows)."""
    weight_bytes: int = 4
    """Bytes of one loaded weight: 2 (bf16, fp16) or 4 (fp32)."""


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Peak memory of one process, in bytes, by part (module docstring: what each part counts)."""

    states: int
    """Weights, gradients and AdamW's moments."""
    activations: int
    """One micro-batch's activations."""
    logits: int
    """One chunk of the fused loss's logits and the LM head's fp32 gradient."""

    @property
    def total(self) -> int:
        return self.states + self.activations + self.logits


def state_bytes_per_parameter(environ=None, step_bytes: int = 4) -> float:
    """Weights, gradients and two AdamW moments (each `step_bytes`: 4 + 4 + 8 with fp32 master weights) held by one
    process of this launch: all of them divided among the processes under FSDP or DeepSpeed ZeRO-3, gradients and
    moments only under ZeRO-2, none under DDP (read from `accelerate launch`'s environment, before the Accelerator
    exists).

    >>> state_bytes_per_parameter({"WORLD_SIZE": "8", "ACCELERATE_USE_FSDP": "true"})
    2.0
    >>> state_bytes_per_parameter({"WORLD_SIZE": "4", "ACCELERATE_USE_DEEPSPEED": "true",
    ...                            "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"})
    7.0
    >>> state_bytes_per_parameter({"WORLD_SIZE": "8"}), state_bytes_per_parameter({}, step_bytes=2)
    (16.0, 8.0)
    """
    environ = os.environ if environ is None else environ
    processes, full = world_size(environ), 4.0 * step_bytes
    deepspeed = environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
    stage = environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") if deepspeed else ""
    if environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" or stage == "3":
        return full / processes
    if stage == "2":
        return step_bytes + (full - step_bytes) / processes
    return full


def estimate_memory(shape: ModelShape, *, rows: int, seq_len: int, mixed_precision: bool, checkpointing: bool,
                    state_bytes: float = 16.0) -> MemoryEstimate:
    """Peak bytes a process (the module docstring's estimate). `mixed_precision`: bf16/fp16 autocast (16-bit
    activations); `state_bytes`: `state_bytes_per_parameter()` of this launch.

    >>> shape = ModelShape(parameters=10**9, trainable=10**9, layers=16, hidden=2048, vocab=32000)
    >>> one = estimate_memory(shape, rows=8, seq_len=512, mixed_precision=True, checkpointing=False)
    >>> one.states, one.activations  # 16 bytes a parameter; 34 x 4,096 tokens x 2,048 x 16 layers
    (16000000000, 4563402752)
    """
    tokens = rows * seq_len
    per_layer = tokens * shape.hidden * ACTIVATION_BYTES_16BIT * (1 if mixed_precision else 2)
    # With checkpointing only each layer's input (2 bytes a value) stays, plus one layer being recomputed.
    activations = (per_layer + tokens * shape.hidden * 2 * shape.layers if checkpointing else
                   per_layer * shape.layers)
    # The fused loss's chunk (2**26 logits: fp32 softmax + compute-dtype logits and gradient) and its fp32 grad_W.
    logits = CHUNK_ELEMENTS * (4 + 2 + 2) + shape.vocab * shape.hidden * 4
    frozen = (shape.parameters - shape.trainable) * shape.weight_bytes
    return MemoryEstimate(states=round(state_bytes * shape.trainable) + frozen, activations=activations, logits=logits)


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
    memory: MemoryEstimate | None = None
    """Peak memory a process, estimated; None where the model's config could not be read (a Hub id offline)."""

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
        memory = {"peak_memory_estimate_bytes": self.memory.total} if self.memory else {}
        return {**{k: v for k, v in asdict(self).items() if k != "memory"}, "tokens_per_step": self.tokens_per_step,
                "total_tokens": self.total_tokens, "paper_tokens_per_step": PAPER_TOKENS_PER_STEP,
                "paper_tokens": self.paper_tokens, **memory}

    def memory_line(self) -> str:
        """The estimate's clause of the plan line.

        >>> shape = ModelShape(parameters=10**9, trainable=10**9, layers=16, hidden=2048, vocab=32000)
        >>> memory = estimate_memory(shape, rows=8, seq_len=512, mixed_precision=True, checkpointing=False)
        >>> TrainingPlan(rows=8, seq_len=512, grad_accum=1, processes=1, steps=1, memory=memory).memory_line()
        'peak memory about 21.4 GB a process (an estimate: 16.0 GB weights, gradients and AdamW states, 4.6 GB \
activations, 0.8 GB loss logits)'
        """
        if self.memory is None:
            return "peak memory not estimated (the model's config could not be read)"
        return (f"peak memory about {self.memory.total / 1e9:.1f} GB a process (an estimate: "
                f"{self.memory.states / 1e9:.1f} GB weights, gradients and AdamW states, "
                f"{self.memory.activations / 1e9:.1f} GB activations, {self.memory.logits / 1e9:.1f} GB loss logits)")

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
            return f"{said}, so this run trains {self.total_tokens / self.paper_tokens:.0%} of it; {self.memory_line()}"
        return (f"{said}, so this run trains {self.total_tokens / self.paper_tokens:.2%} of it (--tokens-per-step "
                f"paper gives the paper's step); {self.memory_line()}")


def training_plan(train, data, processes: int, shape: ModelShape | None = None) -> TrainingPlan:
    """The plan of a run of `train` (a `TrainConfig`, its accumulation resolved) on rows of `data.seq_len`; with the
    model's `shape`, its peak memory estimate."""
    from hf_encoderize.common.precision import resolve_mixed_precision

    memory = None
    if shape is not None:
        step_bytes = 4 if train.master_weights == "fp32" else shape.weight_bytes
        memory = estimate_memory(shape, rows=train.batch_size, seq_len=data.seq_len,
                                 mixed_precision=resolve_mixed_precision(train.mixed_precision) in ("bf16", "fp16"),
                                 checkpointing=bool(train.gradient_checkpointing),
                                 state_bytes=state_bytes_per_parameter(step_bytes=step_bytes))
    return TrainingPlan(rows=train.batch_size, seq_len=data.seq_len, grad_accum=train.grad_accum,
                        processes=processes, steps=train.steps, memory=memory)


def model_shape(model) -> ModelShape:
    """The shape of a built model (its trainable parameters as the optimizer will see them)."""
    config = model.config
    parameters = list(model.parameters())
    text = config.get_text_config()
    return ModelShape(parameters=sum(p.numel() for p in parameters),
                      trainable=sum(p.numel() for p in parameters if p.requires_grad),
                      layers=int(text.num_hidden_layers), hidden=int(text.hidden_size), vocab=int(text.vocab_size),
                      weight_bytes=parameters[0].element_size() if parameters else 4)


def shape_from_config(config, dtype: str = "auto") -> ModelShape:
    """The shape of a transformers decoder `config`'s model from the config alone: a copy on the meta device (no
    memory, no weight). `dtype`: the weights' (`--dtype`; auto: the config's)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        count = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    text = config.get_text_config()
    loaded = str(getattr(config, "dtype", None) or "float32") if dtype == "auto" else dtype
    return ModelShape(parameters=count, trainable=count, layers=int(text.num_hidden_layers),
                      hidden=int(text.hidden_size), vocab=int(text.vocab_size), weight_bytes=4 if "32" in loaded else 2)


def shape_of_source(source: str, *, revision: str | None = None, dtype: str = "auto") -> ModelShape | None:
    """`shape_from_config` of the model at `source` (a folder or a Hub id), None where its config cannot be read here
    (a Hub id offline, a GGUF file, an architecture this transformers lacks): the plan then says so."""
    from transformers import AutoConfig

    try:
        return shape_from_config(AutoConfig.from_pretrained(source, revision=revision), dtype)
    except Exception:  # noqa: BLE001 (the plan says the estimate is missing; the run's own load says why)
        return None


def planned_shape(recipe) -> ModelShape | None:
    """`--dry-run`'s shape, read before anything loads: from the model config a recipe builds from (`config`: pretrain's
    random model) or the config at the source it loads (`load`: cpt's `LoadConfig`; a GGUF file is not read)."""
    config, load = getattr(recipe, "config", None), getattr(recipe, "load", None)
    if config is not None and hasattr(config, "get_text_config"):
        return shape_from_config(config)
    if load is not None and not getattr(load, "gguf_file", None):
        return shape_of_source(load.source, revision=load.revision, dtype=load.dtype)
    return None


def short_count(count: int) -> str:
    """49,152,000 -> "49.2M"; 28,311,552,000 -> "28.3B".

    >>> short_count(999), short_count(49_152_000), short_count(28_311_552_000)
    ('999', '49.2M', '28.3B')
    """
    for size, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)
