"""What a `cpt` or `pretrain` run was asked to do, typed: `run_settings.json` and the settings of `run_record.json`.

Design choices:
- One frozen, keyword-only dataclass per recipe (`CptSettings`, `PretrainSettings`, on the fields every run shares,
  `RunSettings`), built once by the recipe from its configs (`training.recipe.run_settings`). A misspelt field is a
  TypeError where the settings are made, never a key filed silently beside the others.
- Its nested parts (`DataFacts`, `LoraFacts`) are frozen `Part`s too; `to_dict` writes the keys the earlier dicts
  wrote, so run_settings.json files of earlier versions compare with today's, and the record reads them as before.
- `pretrain_schedule.json` (`PretrainSchedule`) is read and written through its type too.
- One word per concept (issue 70): `phases` is what each phase learnt (`clm+mntp`), `schedule` the phases' shares
  (`--schedule`), `lr_schedule` the learning rate's (wsd). Records written before carried `objective`, `phases` and
  `schedule` in those three meanings; `lift_old_keys` reads them in today's words, so they load, resume and compare.
- A fact of the run that is no reason to refuse a resume (pretrain's memory estimate, which depends on the machine)
  says so on its field (`compared=False`) and is left out of what a resume compares (`compared()`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from hf_encoderize.records.fields import Fields, Part

NOT_COMPARED = {"compared": False}  # field metadata: recorded, but a resume does not compare it


@dataclass(frozen=True, kw_only=True)
class DataFacts(Part):
    """Where the text came from, as the run record and the card say it (`data.sources.data_facts`)."""

    dataset: str | None = None
    """Hub dataset id (None for a --data-files run: the default it did not read is not recorded)."""
    dataset_config: str | None = None
    split: str | None = None
    data_files: str | None = None
    data_name: str | None = None
    """The name a local corpus goes by on the card (`--data-name`)."""
    text_column: str | None = None
    text_unit: str | None = None
    """How .txt files were cut into documents (None for other files, and before it was recorded)."""
    seq_len: int | None = None
    pack: bool | None = None
    eval_documents: int | None = None
    skip_documents: int | None = None
    shuffle_buffer: int | None = None


@dataclass(frozen=True, kw_only=True)
class LoraFacts(Part):
    """LoRA adapters merged into the weights."""

    r: int | None = None
    alpha: int | None = None
    targets: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunSettings(Part):
    """The settings every training run records (run record, run_settings.json, trackers); recipes add theirs. Each
    is declared here once: `PretrainSettings` adds pretrain's, and `RunRecord` is the settings plus what the run did."""

    base_model: str | None = None
    """The model trained from (Hub id, folder or GGUF folder); None for `pretrain`."""
    revision: str | None = None
    """Hub revision the base model was loaded at."""
    gguf_file: str | None = None
    """GGUF file the base weights came from."""
    phases: str | None = None
    """What each phase learnt, joined by "+": a masking target (mlm, mntp, ...) or pretrain's clm+mlm, clm+mntp;
    each named by `records.learnt` (records before issue 70 called it `objective`: `lift_old_keys`)."""
    mask_ratio: float | None = None
    replacement: str | None = None
    """How masked tokens are replaced: mask (every one becomes the mask token) or bert (80/10/10)."""
    data: DataFacts | None = None
    """The corpus (`data.sources.data_facts`): data_files or dataset/dataset_config, seq_len, pack, text_unit, ..."""
    steps: int | None = None
    """Optimizer steps."""
    lr: float | None = None
    """Peak learning rate."""
    lr_schedule: str | None = "wsd"
    """Learning-rate schedule (wsd)."""
    warmup_steps: int | None = None
    decay_steps: int | None = None
    weight_decay: float | None = None
    betas: list | None = None
    """AdamW betas."""
    adam_eps: float | None = None
    """AdamW epsilon (None: recorded before `--adam-epsilon` existed, torch's default 1e-8)."""
    max_grad_norm: float | None = None
    batch_size: int | None = None
    """Rows per process per micro-batch."""
    grad_accum: int | None = None
    tokens_per_step: int | None = None
    seed: int | None = None
    gradient_checkpointing: bool | None = None
    master_weights: str | None = None
    compile: bool | None = None
    """`--compile` as asked: True, False, or None (unset: decided by the device; the record's `compiled` says)."""
    prefetch: int | None = None
    lora: LoraFacts | None = None
    """LoRA adapters merged into the weights: r, alpha, targets (None: all weights trained)."""
    load_in_4bit: bool | None = None
    """The base was quantised to 4-bit NF4 (QLoRA)."""
    identity: dict | None = None
    """Every config field that counts for "same run?" (`common.identity.identity_of`; recorded since 0.2)."""
    options: dict | None = field(default=None, metadata=NOT_COMPARED)
    """What the run was asked under the option names (`common.config_file.options_of`): `set`, the options given
    other than their defaults, and `derived`, what it worked out for those left unset (its warmup from its steps)."""

    def compared(self) -> dict:
        """What a resume or a branch compares (`training.resume_checks`): every field but those declared not to."""
        skip = {f.name for f in fields(self) if not f.metadata.get("compared", True)}
        return {key: value for key, value in self.to_dict().items() if key not in skip}


@dataclass(frozen=True, kw_only=True)
class CptSettings(RunSettings):
    """`cpt`'s settings: the shared ones, from a loaded base model (`base_model`, `lora`, `load_in_4bit`)."""


@dataclass(frozen=True, kw_only=True)
class PretrainSettings(RunSettings):
    """`pretrain`'s settings: the shared ones (no base model: weights start random), and its phases and size."""

    model_config: str | None = None
    """`pretrain`: the model config the random weights were built from."""
    tokenizer: str | None = None
    """`pretrain`: the tokenizer it trained with."""
    schedule: str | None = None
    """`pretrain`'s phases' shares (`--schedule`), e.g. "clm:0.75,mlm"."""
    switch_step: int | None = None
    """`pretrain`: the step attention switched from causal to bidirectional (None: no switch)."""
    from_checkpoint: str | None = None
    """The checkpoint a branch started from (`--from-checkpoint`)."""
    estimated_memory_gib: float | None = field(default=None, metadata=NOT_COMPARED)
    """`pretrain`: the memory estimate checked before building the model."""
    parameters: int | None = None
    """`pretrain`: the model's parameter count."""


@dataclass
class PretrainSchedule(Fields):
    """`pretrain_schedule.json`, next to a pretrain run's checkpoints: what a branch (`--from-checkpoint`) from them
    must agree with (`recipes.pretrain.check_branch`)."""

    schedule: str | None = None
    """The schedule string, e.g. "clm:0.25,mlm:0.75"."""
    phases: list | None = None
    """Each phase as `objectives.phases.Phase.to_dict()`: name, start, end."""
    steps: int | None = None
    decay_steps: int | None = None
    """None in schedules written before it existed: their `decay_fraction` (kept in `facts`) says the decay."""
    identity: dict | None = None
    """Every setting that counts for "same run?" but the split and the length (None: written before 0.2)."""

    @classmethod
    def from_dict(cls, data: dict | None):
        """Read in today's words: an identity and phases written before the rename are lifted."""
        data = dict(data or {})
        if isinstance(data.get("identity"), dict):
            data["identity"] = lift_old_identity(data["identity"])
        if isinstance(data.get("phases"), list):
            data["phases"] = [lift_old_phase(p) for p in data["phases"]]
        return super().from_dict(data)


# Keys written before issue 70's rename, in the order they move: `schedule` (the LR's) first frees its name for the
# phases' shares, then `phases` frees its name for what the phases learnt (`objective`).
RENAMED_KEYS = (("schedule", "lr_schedule"), ("phases", "schedule"), ("objective", "phases"))
RENAMED_IDENTITY = {"masking.objective": "masking.masking_target"}


def lift_old_keys(data: dict, renamed=RENAMED_KEYS) -> dict:
    """A run record or `run_settings.json` written before the rename (it holds `objective`) in today's keys, its
    identity too; today's read as they are (kept for records of earlier versions).

    >>> lift_old_keys({"objective": "clm+mlm", "phases": "clm:0.5,mlm:0.5", "schedule": "wsd"})
    {'lr_schedule': 'wsd', 'schedule': 'clm:0.5,mlm:0.5', 'phases': 'clm+mlm'}
    """
    lifted = dict(data)
    if isinstance(lifted.get("identity"), dict):
        lifted["identity"] = lift_old_identity(lifted["identity"])
    if "objective" not in lifted:
        return lifted
    for old, new in renamed:
        if old in lifted:
            lifted[new] = lifted.pop(old)
    return lifted


def lift_old_identity(identity: dict) -> dict:
    """A recorded identity with the config fields' earlier names (`masking.objective`) in today's."""
    return {RENAMED_IDENTITY.get(key, key): value for key, value in identity.items()}


def lift_old_phase(phase):
    """A `pretrain_schedule.json` phase written before the rename (`{"objective": "clm", ...}`) as today's."""
    if isinstance(phase, dict) and "objective" in phase:
        return {"name": phase["objective"], **{k: v for k, v in phase.items() if k != "objective"}}
    return phase


def recorded_keys() -> frozenset[str]:
    """Every top-level key a training run's `run_settings.json` may hold (each recipe's settings' fields): a replay
    (`--config RUN/run_settings.json`) names in a warning any other key it meets."""
    return frozenset(f.name for cls in (CptSettings, PretrainSettings) for f in fields(cls))
