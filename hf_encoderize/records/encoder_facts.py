"""The `hf_encoderize` block of a saved encoder's config.json: where it came from and what the patch did."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hf_encoderize.common.run_folder import read_json
from hf_encoderize.records.contrastive_record import ContrastiveStage
from hf_encoderize.records.fields import Fields, Part
from hf_encoderize.records.run_record import PatchFacts, RunRecord
from hf_encoderize.records.run_settings import lift_old_keys

# What the patch report says beyond the typed fields, kept in the block's `facts`.
_PATCH_COUNTS = ("config_switch", "modules_patched", "causal_buffers_replaced")
OLD_KEYS = (("phases", "schedule"), ("objective", "phases"))  # the block never held the LR schedule


@dataclass
class EncoderFacts(Fields):
    """The `hf_encoderize` block of a saved encoder's config.json: where it came from and what the patch did.

    One writer (`model.saving`: `save_encoder`, which stamps `version` and `plain_attention`, and `write_encoder_block`
    for a folder another library saved); a training run's block is built in one place, from its record
    (`EncoderFacts.of_run`), `convert` and the contrastive stage fill it from typed parts, and every reader reads
    fields (`EncoderFacts.of(folder)`). The patch report's other keys and any key of an older or newer version are
    kept in `facts`.

    >>> EncoderFacts(command="cpt", base_model="m", steps=4).to_dict()["steps"]
    4
    """

    version: str | None = None
    """The hf-encoderize release that saved it."""
    command: str | None = None
    """convert, cpt or pretrain (None: convert, before it was recorded)."""
    base_model: str | None = None
    """The model it came from, as given (Hub id, folder or GGUF folder); None after `pretrain`."""
    revision: str | None = None
    gguf_file: str | None = None
    phases: str | None = None
    """What each phase learnt, joined by "+" (`mntp`, `clm+mlm`); an export's, the phase it was taken in."""
    mask_ratio: float | None = None
    steps: int | None = None
    lora_r: int | None = None
    schedule: str | None = None
    """pretrain's phases' shares, e.g. "clm:0.75,mlm"."""
    export_step: int | None = None
    """The step of an intermediate export (`OUT/exports/step-N`)."""
    packing: str | None = None
    model_type: str | None = None
    attn_implementation: str | None = None
    tokens: dict | None = None
    """What the token set-up did (mask token added or reused, pad token)."""
    plain_attention: dict | None = None
    """Which attention backends a plain load runs bidirectionally (written by the saver)."""
    contrastive: ContrastiveStage | None = None
    """The contrastive stage of an embedding model (`contrastive`)."""

    def to_dict(self) -> dict:
        return _known(super().to_dict())

    @classmethod
    def from_dict(cls, data: dict | None):
        """Read in today's words: a block written before issue 70's rename (`objective`, `phases`) is lifted."""
        return super().from_dict(lift_old_keys(data or {}, renamed=OLD_KEYS))

    @classmethod
    def of(cls, encoder: str | os.PathLike) -> EncoderFacts:
        """The block in `encoder/config.json` (empty when the folder has none: a model hf-encoderize did not save)."""
        return cls.from_dict((read_json(Path(encoder) / "config.json") or {}).get("hf_encoderize") or {})

    @classmethod
    def of_run(cls, record: RunRecord) -> EncoderFacts:
        """The block of an encoder a training run saves (final or `--export-steps`), from the run's record: the one
        place a `cpt` or `pretrain` run's settings and patch report become it.

        >>> from hf_encoderize.records.run_record import PatchFacts
        >>> EncoderFacts.of_run(RunRecord(command="cpt", base_model="m", steps=4, phases="mlm",
        ...                               encoderize=PatchFacts(model_type="llama", modules_patched=2))).to_dict()
        {'command': 'cpt', 'base_model': 'm', 'phases': 'mlm', 'steps': 4, 'lora_r': 0, 'packing': 'packed', \
'model_type': 'llama', 'modules_patched': 2}
        """
        report = record.encoderize or PatchFacts()
        counts = {key: getattr(report, key) for key in _PATCH_COUNTS if getattr(report, key) is not None}
        return cls(command=record.command, base_model=record.base_model, revision=record.revision,
                   gguf_file=record.gguf_file, phases=record.phases, mask_ratio=record.mask_ratio,
                   steps=record.steps, lora_r=record.lora.r if record.lora else 0, schedule=record.schedule,
                   packing=report.packing or "packed", model_type=report.model_type,
                   attn_implementation=report.attn_implementation,
                   tokens=_known(report.tokens.to_dict()) if report.tokens else None, facts=counts)


def _known(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}  # config.json holds what is known


@dataclass(frozen=True, kw_only=True)
class PlainAttention(Part):
    """`EncoderFacts.plain_attention`: which attention backends a plain transformers load runs bidirectionally
    (`model.plain_attention`), one verdict per backend (kept in `facts`: True, False, or None where it could not
    run), the backend config.json selects and the transformers release the verdicts hold for."""

    saved_default: str | None = None
    transformers: str | None = None

    def verdicts(self) -> dict[str, bool | None]:
        """Backend -> verdict."""
        return dict(self.facts)

    def verdict(self, backend: str | None) -> bool | None:
        return self.facts.get(backend)
