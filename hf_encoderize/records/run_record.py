"""`run_record.json`: what a `cpt` or `pretrain` run was and what it did, the model card's main source.

Design choices:
- Every key a reader reads (the card, the Space, `run`'s stage reuse) is a typed field, documented here or, for
  what the run was asked, once in `records.run_settings` (`RunRecord` extends `PretrainSettings`: issue 70 found all
  34 settings fields declared twice); readers read attributes, never key strings. A key this version does not type
  (written by a newer or older version) stays in `facts` and is written back as it was read.
- A field a run did not record is None; readers say "n/a" or fall back (a record from before `adam_eps` existed says
  so on the card).
- One builder (`build_run_record`) assembles the record from the run's typed settings (`records.run_settings`) and
  parts; the training engine's `save_run` is its one caller and `to_json` its one writer.
- The nested parts are typed too (`DataFacts`, `LoraFacts`, `HardwareFacts`, `PatchFacts`): frozen `Part`s, made by
  keyword by one owner each (`data.sources.data_facts`, `training.monitor.hardware_facts`, the patch report's
  `EncoderizeReport.facts`), so a misspelt field fails when the run is saved; a record of an earlier version reads
  into them, its other keys kept. `identity` (config field name -> value) and `data_position` stay mappings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from hf_encoderize.records.fields import JsonFile, Part
from hf_encoderize.records.run_settings import PretrainSettings, RunSettings, lift_old_keys


@dataclass(frozen=True, kw_only=True)
class HardwareFacts(Part):
    """Where a run trained (`training.monitor.hardware_facts`)."""

    device: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    num_processes: int | None = None
    mixed_precision: str | None = None
    distributed_type: str | None = None
    rocm: bool | None = None
    cpu: str | None = None
    torch: str | None = None
    transformers: str | None = None


@dataclass(frozen=True, kw_only=True)
class TokenFacts(Part):
    """Which special tokens the encoder uses and how they were obtained (`model.tokens.TokenReport`)."""

    mask_token: str | None = None
    mask_token_id: int | None = None
    mask_token_path: str | None = None
    """`existing`, `reserved` or `added`."""
    pad_token: str | None = None
    pad_token_id: int | None = None
    pad_token_path: str | None = None
    """`existing`, `reserved` or `eos`."""


@dataclass(frozen=True, kw_only=True)
class PatchFacts(Part):
    """What the attention patch and the token set-up did (`model.bidirectional.EncoderizeReport.facts`): the report
    and its tokens, nested (`tokens`). Records written before held the token fields beside them too: read into
    `tokens`, written back there only.

    >>> old = {"model_type": "llama", "mask_token": "<mask>", "tokens": {"mask_token": "<mask>"}}
    >>> PatchFacts.from_dict(old).to_dict()
    {'model_type': 'llama', 'tokens': {'mask_token': '<mask>'}}
    """

    model_type: str | None = None
    attn_implementation: str | None = None
    config_switch: bool | None = None
    modules_patched: int | None = None
    causal_buffers_replaced: int | None = None
    tokens: TokenFacts | None = None
    packing: str | None = None
    """"packed", or "padded rows: <why>"."""
    attn_candidates: list | None = None
    probe: str | None = None

    @classmethod
    def from_dict(cls, data: dict | None):
        if not isinstance(data, dict):
            return super().from_dict(data)
        tokens = {f.name for f in fields(TokenFacts)} - {"facts", "read_keys"}
        beside = {key: value for key, value in data.items() if key in tokens}  # the layout before nesting alone
        if not beside:
            return super().from_dict(data)
        nested = data.get("tokens") if isinstance(data.get("tokens"), dict) else {}
        return super().from_dict({**{k: v for k, v in data.items() if k not in tokens},
                                  "tokens": {**beside, **nested}})


@dataclass(frozen=True, kw_only=True)
class RunRecord(PretrainSettings, JsonFile):
    """`run_record.json`: what a `cpt` or `pretrain` run was and what it did (the model card's main source). It is
    the run's settings (`records.run_settings`: every field is declared there once; a cpt run's pretrain-only fields
    are None) plus the fields below, in one flat file: what a script or `jq` reads of it is where it always was.

    >>> record = RunRecord.from_dict({"command": "cpt", "base_model": "m", "steps": 4, "note": "kept"})
    >>> record.command, record.steps, record.lr, record.facts
    ('cpt', 4, None, {'note': 'kept'})
    >>> RunRecord.from_dict(record.to_dict()) == record, record.to_dict()
    (True, {'base_model': 'm', 'steps': 4, 'command': 'cpt', 'note': 'kept'})
    """

    # A record is read, not made: what a file does not hold is unknown (None), never the settings' default.
    lr_schedule: str | None = None
    """Learning-rate schedule (wsd); None: not recorded."""

    # ------------------------------------------------------------------ what ran it
    command: str | None = None
    """`cpt` or `pretrain`."""
    decay_fraction: float | None = None
    """The decay as a fraction of steps: records from before `decay_steps` existed."""
    compiled: dict | None = None
    """Whether the decoder layers ran compiled, why, and dynamo's counters over the run (graphs compiled, graph
    breaks, recompile-limit hits); None: recorded before this field existed."""
    loss_implementation: str | None = None
    saved_dtype: str | None = None

    # ------------------------------------------------------------------ where and when
    encoderize: PatchFacts | None = None
    """What the attention patch and the token set-up did."""
    num_processes: int | None = None
    hardware: HardwareFacts | None = None
    """`training.monitor.hardware_facts`: device, gpu_name, mixed_precision, torch, transformers, ..."""
    data_position: dict | None = None
    """Where the data stream stopped (`data.packing.data_position`): a later run can go on from there."""
    started_at: str | None = None
    finished_at: str | None = None
    wall_time_s: float | None = None
    hf_encoderize_version: str | None = None

    # ------------------------------------------------------------------ what it did
    tokens_seen: int | None = None
    final_train_loss: float | None = None
    skipped_nonfinite_steps: int | None = None
    eval_loss: float | None = None
    """Held-out MLM loss of the trained model."""
    eval_masked_accuracy: float | None = None
    """Held-out masked-token accuracy of the trained model."""
    initial_eval_loss: float | None = None
    """The same held-out loss of the starting model, before the first step (recorded since 0.3)."""

    @property
    def from_random_weights(self) -> bool:
        """Trained from random weights (a model config, no base model: `pretrain`), read from the record's facts, not
        from the command's name."""
        return self.base_model is None and self.model_config is not None

    @classmethod
    def from_dict(cls, data: dict | None):
        """Read in today's words: a record written before issue 70's rename is lifted (`lift_old_keys`)."""
        return super().from_dict(lift_old_keys(data or {}))

    @classmethod
    def of_settings(cls, settings: RunSettings) -> RunRecord:
        """A record holding what a run was asked to do: each settings field in the record field of its name; a field
        of a recipe's own settings that the record does not declare goes to `facts`, as written (`to_dict`)."""
        written, declared = settings.to_dict(), {f.name for f in fields(cls)} - {"facts", "read_keys"}
        typed = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name in declared}
        return cls(**typed, facts={k: v for k, v in written.items() if k not in typed})


def build_run_record(*, version: str, command: str, settings: RunSettings, encoderize: PatchFacts,
                     train_metrics: list[dict], final_eval: dict, initial_eval_loss: float | None, started_at: str,
                     finished_at: str, wall_time_s: float, num_processes: int, hardware: HardwareFacts,
                     loss_implementation: str | None = None, from_checkpoint: str | None = None,
                     saved_dtype: str | None = None, data_position: dict | None = None,
                     compiled: dict | None = None) -> RunRecord:
    """The run record of a finished `cpt` or `pretrain`: the one place its parts become `run_record.json`'s fields.

    `settings` is what the run was asked to do (the recipe's typed `RunSettings`: every field is a record field).
    `train_metrics` are metrics.jsonl's train lines (tokens seen, skipped steps and the final loss are counted from
    them); `final_eval` the trained model's held-out scores (`evaluate_held_out`).

    >>> record = build_run_record(version="0.3.0", command="cpt", settings=RunSettings(steps=2, lr=1e-4),
    ...     encoderize=PatchFacts(model_type="llama"), train_metrics=[{"tokens": 64, "loss": 3.0}] * 2,
    ...     final_eval={"eval_loss": 2.4}, initial_eval_loss=3.1, started_at="t0", finished_at="t1",
    ...     wall_time_s=1.234, num_processes=1, hardware=HardwareFacts(device="cpu"))
    >>> record.tokens_seen, record.final_train_loss, record.eval_loss, record.wall_time_s, record.facts
    (128, 3.0, 2.4, 1.23, {})
    """
    return replace(
        RunRecord.of_settings(settings), hf_encoderize_version=version, command=command,
        from_checkpoint=from_checkpoint, saved_dtype=saved_dtype, encoderize=encoderize, data_position=data_position,
        loss_implementation=loss_implementation, num_processes=num_processes, hardware=hardware, compiled=compiled,
        started_at=started_at, finished_at=finished_at, wall_time_s=round(wall_time_s, 2),
        eval_loss=final_eval.get("eval_loss"), eval_masked_accuracy=final_eval.get("eval_masked_accuracy"),
        initial_eval_loss=initial_eval_loss, tokens_seen=sum(line["tokens"] for line in train_metrics),
        skipped_nonfinite_steps=sum(1 for line in train_metrics if line.get("skipped_nonfinite")),
        final_train_loss=train_metrics[-1]["loss"] if train_metrics else None,
    )
