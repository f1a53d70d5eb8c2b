"""`hf-encoderize pretrain`: from-scratch CLM -> MLM biphasic pretraining under one step budget (paper, sections 3-4).

The run is a list of phases (`objectives.parse_schedule`): `clm:1.0`, `mlm:1.0`, `clm:0.25,mlm:0.75`, ... A recipe
on the training engine (`training.engine`: data, packing, Accelerate, checkpoints, resume, run record); it adds:
- the model is built from a config (the paper's 210M/610M/1B, Appendix A, or any transformers decoder config) with
  random weights, and the mask and pad tokens are in place from the start, so the vocabulary never changes mid-run
  (`pretrain_model`);
- one WSD schedule spans the whole run: warmup at the start, no decay before the switch, decay only at the end of the
  final phase (the paper's PFS setting, section 2 "Pretraining setups");
- at the switch (`enter_phase`) the attention goes causal -> bidirectional (`bidirectional.make_bidirectional`,
  then the behavioural probe) and the labels go next-token -> masked tokens; the state at the switch is saved under
  `switch/`, never pruned;
- `from_checkpoint` branches a new split from any checkpoint of an earlier pretrain run whose schedule agrees up to
  that step, the way the paper reused its CLM checkpoints (section 2, "Experimental scale"); the data, masking and
  learning-rate settings must match (`pretrain_schedule.json` next to the checkpoints records them).

Before anything is built, the training memory is estimated from the config and a run that cannot fit is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import torch

from hf_encoderize.common.config_file import options_of
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, RESUME, identity, identity_of, settings_diff
from hf_encoderize.common.locks import releasing_locks
from hf_encoderize.common.outputs import inputs_of
from hf_encoderize.common.precision import attention_dtype
from hf_encoderize.data.corpus_files import identity_as_today
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.attention_backends import AttentionBackend
from hf_encoderize.model.positions import check_positions, position_limit
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.phases import Phase, parse_schedule
from hf_encoderize.objectives.targets import MaskedTarget, Target, build_target
from hf_encoderize.recipes.pretrain_model import (
    build_random_model,
    load_pretrain_tokenizer,
    model_config_from,
    packing_label,
    switch_report,
)
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_record import PatchFacts, RunRecord
from hf_encoderize.records.run_settings import PretrainSchedule, PretrainSettings
from hf_encoderize.training.checkpoints import check_checkpoint_files
from hf_encoderize.training.engine.accelerator import resolve_grad_accum
from hf_encoderize.training.plan import estimate_memory as plan_memory
from hf_encoderize.training.plan import shape_from_config, state_bytes_per_parameter
from hf_encoderize.training.recipe import Built, FinalModel, Trained, run_settings
from hf_encoderize.training.resume_checks import recorded_decay_steps
from hf_encoderize.training.runner import run_recipe
from hf_encoderize.training.schedule import decay_start
from hf_encoderize.training.train_config import TrainConfig

SCHEDULE_FILE = "pretrain_schedule.json"  # next to checkpoints/ and switch/: what a branch must agree with
MEMORY_HEADROOM = 0.9  # refuse a run whose estimate exceeds 90% of the memory there is


@dataclass
class PretrainConfig:
    """What to pretrain from scratch, and the order of its phases."""

    INPUTS = ("model_config", "tokenizer")  # what an output folder stays apart from (`common.outputs.inputs_of`)

    _: KW_ONLY
    model_config: str | None = None
    """210M, 610M or 1B (JSON copies in examples/configs/), or a transformers decoder config: a config.json file, a
    model folder or a Hub id. Weights start random.

    210M, 610M and 1B are the paper's sizes (Appendix A)."""
    tokenizer: str | None = None
    """Tokenizer folder or Hub id.

    The paper uses the Llama-3 tokenizer (Appendix A)."""
    schedule: str = "clm:0.25,mlm:0.75"
    """Phases in order with their share of --max-steps: clm:1.0, mlm:1.0, clm:0.5,mlm:0.5, ...

    The default 25-75 split is the one that reliably beats MLM alone (paper, section 4)."""
    attn_implementation: AttentionBackend = "auto"
    """Attention backend: auto (the fastest the architecture supports here; see cpt), eager, sdpa, flex_attention,
    flash_attention_2 or flash_attention_3."""
    check_memory: bool = field(default=True, metadata=identity(HARMLESS))
    """Estimate the training memory from the config first and refuse a run that cannot fit on this machine."""

    def __post_init__(self):
        if not self.model_config:
            raise EncoderizeError("pass --model-config: 210M, 610M, 1B, or a transformers config file / Hub id")
        if not self.tokenizer:
            raise EncoderizeError("pass --tokenizer: a tokenizer folder or Hub id (the paper uses Llama-3's)")
        parse_schedule(self.schedule, 10**9)  # names, order and shares; step counts are checked against --max-steps
        from hf_encoderize.model.loading import LoadConfig

        LoadConfig("-", attn_implementation=self.attn_implementation)  # the same one-line refusal as cpt's


# ------------------------------------------------------------------------------------------------- memory check


def estimate_memory(config, data: DataConfig, train: TrainConfig, mixed_precision: bool) -> dict:
    """Bytes needed per process to train `config`, without building it: the plan line's estimate (`training.plan`,
    its one owner: weights, gradients and AdamW states as the launch shards them, activations, one logits chunk)."""
    shape = shape_from_config(config)
    need = plan_memory(shape, rows=train.batch_size, seq_len=data.seq_len, mixed_precision=mixed_precision,
                       checkpointing=bool(train.gradient_checkpointing), state_bytes=state_bytes_per_parameter())
    return {"parameters": shape.parameters, "states": need.states, "activations": need.activations,
            "logits": need.logits, "total": need.total}


def available_memory() -> tuple[int, str]:
    """Memory one process can use: the first GPU's, else the machine's available RAM."""

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory, "GPU memory"
    import psutil

    return psutil.virtual_memory().available, "available RAM"


def check_memory(spec: str, config, data: DataConfig, train: TrainConfig) -> dict:
    """Refuse, in one line, a run whose estimated memory exceeds what this machine has."""

    mixed = train.mixed_precision in ("bf16", "fp16") or (train.mixed_precision == "auto" and torch.cuda.is_available())
    need, (have, where) = estimate_memory(config, data, train, mixed), available_memory()
    if need["total"] > MEMORY_HEADROOM * have:
        gib = 2**30
        raise EncoderizeError(
            f"--model-config {spec} ({need['parameters'] / 1e6:,.0f}M parameters) needs about "
            f"{need['total'] / gib:,.1f} GiB to train at batch {train.batch_size} x {data.seq_len} tokens "
            f"(weights, gradients and AdamW states {need['states'] / gib:,.1f} GiB, activations "
            f"{need['activations'] / gib:,.1f} GiB) but this machine has {have / gib:,.1f} GiB of {where}; lower "
            "--batch-size/--max-seq-length, add --gradient-checkpointing, use a bigger GPU, or pass --no-check-memory")
    return need


# ------------------------------------------------------------------------------------------------ branching


def _branch_identity(spec: PretrainConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig) -> dict:
    """What a branch must share with the run it starts from: every setting that counts for "same run?" (declared on
    the config fields, `common.identity`), but the split (`schedule`) and the length (`LENGTH` fields)."""
    return {key: value for key, value in identity_of(spec, data, masking, train, kinds=(RESUME,)).items()
            if key != "pretrain.schedule"}


def check_branch(checkpoint: Path, phases: list[Phase], identity: dict, train: TrainConfig) -> int:
    """Refuse a branch point the unbroken run would not pass through, or whose files cannot be read; return its
    step."""
    step = check_checkpoint_files(checkpoint)
    record = checkpoint.parent.parent / SCHEDULE_FILE
    if not record.is_file():
        raise EncoderizeError(f"--from-checkpoint {str(checkpoint)!r} has no {SCHEDULE_FILE} beside it; "
                              "branch only from checkpoints of `hf-encoderize pretrain` runs")
    source = PretrainSchedule.from_json(record)
    if not isinstance(source.identity, dict):
        raise EncoderizeError(f"--from-checkpoint: {record} was written before 0.2 and holds no identity to compare "
                              "with; branch from a run pretrained with this version")
    masked_before = any(isinstance(p.target, MaskedTarget) and p.start < step for p in phases)  # once masking ran
    ignore = () if masked_before else tuple(key for key in identity if key.startswith("masking."))
    recorded = identity_as_today(source.identity)
    changed = settings_diff(recorded, identity, ignore=ignore)
    if changed:
        raise EncoderizeError(f"--from-checkpoint: the source run differs ({'; '.join(changed)}); branch with the "
                              "same settings")
    source_phases = [(p["name"], p["start"], p["end"]) for p in source.phases]
    if step >= train.steps:
        raise EncoderizeError(f"--from-checkpoint is at step {step}, not before --max-steps {train.steps}; nothing to "
                              f"do")
    if _prefix(source_phases, step) != _prefix([(p.name, p.start, p.end) for p in phases], step):
        raise EncoderizeError(f"--from-checkpoint is at step {step}, where the source split ({source.schedule}) "
                              f"and this one differ; branch from a step both pass through in the same phases")
    earliest_decay = min(decay_start(source.steps, recorded_decay_steps(source.to_dict())),
                         decay_start(train.steps, train.decay))
    if step > earliest_decay:
        raise EncoderizeError(f"--from-checkpoint step {step} is past the start of a learning-rate decay (step "
                              f"{earliest_decay}); branch from an undecayed checkpoint, as the paper does")
    return step


def _prefix(phases: list[tuple[str, int, int]], step: int) -> list[tuple[str, int, int]]:
    """(name, start, end) of each phase begun before `step`, cut at it."""
    return [(name, start, min(end, step)) for name, start, end in phases if start < step]


# ------------------------------------------------------------------------------------------------ the run


@releasing_locks  # a run that fails gives its output folder's lock back
def pretrain(spec: PretrainConfig, data: DataConfig, masking: MaskingConfig, train: TrainConfig) -> dict:
    """Pretrain from scratch through `spec.schedule`'s phases and save the encoder. Returns a summary (the run folder,
    losses, the phases, the final held-out MLM loss and masked accuracy, wall time)."""
    train = resolve_grad_accum(train, data.seq_len)
    data = dataclasses.replace(data, pack=data.pack is not False)  # decoders only: packed unless --no-pack
    target = build_target(masking)  # what the masked phase learns (--masking-target), handed to the engine
    phases = parse_schedule(spec.schedule, train.steps, masking)
    config = model_config_from(spec.model_config)
    check_positions(data.seq_len, position_limit(config))
    memory = check_memory(spec.model_config, config, data, train) if spec.check_memory else None
    shared = _branch_identity(spec, data, masking, train)
    branch_point = Path(train.from_checkpoint) if train.from_checkpoint else None
    if branch_point:
        check_branch(branch_point, phases, shared, train)
    output_dir = (Path(train.output_dir) if train.output_dir else
        Path("runs") / f"pretrain-{Path(spec.model_config).stem}-{_split_name(phases)}")
    return run_recipe(Pretrain(
        spec=spec, config=config, data=data, masking=masking, train=train, target=target, phases=phases,
        memory=memory,
        output_dir=output_dir, curve_title=f"pretraining, {spec.schedule}",
        inputs=inputs_of(spec, data, train),
        start_files={SCHEDULE_FILE: _schedule_record(spec, phases, shared, train)},
        summary_extra={"schedule": spec.schedule, "phases": [p.to_dict() for p in phases]}))


@dataclass(frozen=True, kw_only=True)
class PretrainBuilt(Built):
    """`Built`, with the special tokens set up at build time (the final report records them)."""

    tokens: object


@dataclass(frozen=True, kw_only=True)
class Pretrain:
    """The pretrain recipe (`training.recipe.Recipe`): a random model through CLM then MLM phases, switching its
    attention at MLM and ending bidirectional."""

    spec: PretrainConfig
    config: object
    """The transformers config the random model is built from."""
    data: DataConfig
    masking: MaskingConfig
    train: TrainConfig
    target: Target
    """What the masked phase learns (`--masking-target`); the run ends under it."""
    phases: list[Phase]
    memory: dict | None
    """The memory estimate (`check_memory`), None with --no-check-memory."""
    output_dir: Path
    inputs: list[Path]
    start_files: dict[str, dict]
    """The schedule next to the checkpoints (`SCHEDULE_FILE`): what a branch must agree with."""
    curve_title: str
    summary_extra: dict
    command: str = "pretrain"
    switches_attention: bool = True
    scores_starting_model: bool = False  # random weights; its target at step 0 is the first phase's
    extendable: bool = False
    outputs: tuple[str, ...] = ()  # its schedule is a start file, its switch/ checkpoints the engine's

    def check_launch(self, accelerator) -> None:
        """Nothing to refuse beyond what `pretrain` checked before the launch."""

    def load_tokenizer(self):
        return load_pretrain_tokenizer(self.spec.tokenizer)

    def build(self, accelerator) -> PretrainBuilt:
        spec, data, masking, train, phases = self.spec, self.data, self.masking, self.train, self.phases
        model, tokenizer, tokens = build_random_model(self.config, spec.tokenizer, spec.attn_implementation,
                                                      train.seed, attention_dtype(accelerator, train.master_weights))
        settings = pretrain_settings(spec, data, masking, train, phases, self.memory)
        # An export's block is the final encoder's as far as the run knows it now, with the phase it was taken in.
        known = EncoderFacts.of_run(dataclasses.replace(
            RunRecord.of_settings(settings), command=self.command,
            encoderize=PatchFacts(model_type=self.config.model_type, packing=packing_label(data.pack))))
        def learnt_at(at: int) -> str:  # the target of the phase the export was taken in: clm, mlm, mntp, ...
            return next(p.target.name for p in phases if p.start < at <= p.end)

        return PretrainBuilt(model=model, tokenizer=tokenizer, data=data, settings=settings,
                             export_dtype=model.dtype, tokens=tokens, export_facts=lambda at: dataclasses.replace(
                                 known, phases=learnt_at(at)))

    def check_branch(self, checkpoint: Path, built: Built) -> None:
        check_checkpoint_files(checkpoint, built.model)  # shapes, once built

    def final_model(self, run, built: PretrainBuilt, trained: Trained, weights: dict | None) -> FinalModel:
        report = switch_report(built.model, trained.switch_counts, built.tokens, self.data.pack)
        return FinalModel(model=run.accelerator.unwrap_model(run.model).model, weights=weights,
                          encoderize=report.facts())


def _split_name(phases: list[Phase]) -> str:
    return "-".join(f"{p.name}{p.end - p.start}" for p in phases)


def _schedule_record(spec: PretrainConfig, phases: list[Phase], identity: dict, train: TrainConfig) -> dict:
    return PretrainSchedule(schedule=spec.schedule, phases=[p.to_dict() for p in phases], steps=train.steps,
                            decay_steps=train.decay, identity=identity).to_dict()


def pretrain_settings(spec: PretrainConfig, data, masking, train, phases: list[Phase],
                      memory: dict | None) -> PretrainSettings:
    """The shared training settings, plus what makes this a pretraining run (no base model: weights start random)."""
    switch = [p.start for p in phases[1:]]
    return run_settings(
        PretrainSettings, data, masking, train, load_in_4bit=False, model_config=spec.model_config,
        tokenizer=spec.tokenizer, schedule=spec.schedule,
        phases="+".join(p.target.name for p in phases),  # what each phase learnt: clm+mntp
        switch_step=switch[0] if switch else None, from_checkpoint=train.from_checkpoint,
        estimated_memory_gib=round(memory["total"] / 2**30, 2) if memory else None,
        parameters=memory["parameters"] if memory else None,
        identity=identity_of(spec, data, masking, train),  # every field that counts for "same run?"
        options=options_of(spec, data, masking, train),  # what was given, and derived, by option name
    )
