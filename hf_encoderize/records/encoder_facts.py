"""The `hf_encoderize` block of a saved encoder's config.json: where it came from and what the patch did."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hf_encoderize.common.run_folder import read_json
from hf_encoderize.records.fields import Fields


@dataclass
class EncoderFacts(Fields):
    """The `hf_encoderize` block of a saved encoder's config.json: where it came from and what the patch did.

    One writer (`model.saving.save_encoder`, which stamps `version` and `plain_attention`); the commands that save an
    encoder (`convert`, `cpt`, `pretrain`, the contrastive stage) fill it from typed parts, and every reader reads
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
    objective: str | None = None
    mask_ratio: float | None = None
    steps: int | None = None
    lora_r: int | None = None
    phases: str | None = None
    """pretrain's schedule, e.g. "clm:0.75,mlm"."""
    export_step: int | None = None
    """The step of an intermediate export (`OUT/exports/step-N`)."""
    packing: str | None = None
    model_type: str | None = None
    attn_implementation: str | None = None
    tokens: dict | None = None
    """What the token set-up did (mask token added or reused, pad token)."""
    plain_attention: dict | None = None
    """Which attention backends a plain load runs bidirectionally (written by the saver)."""
    contrastive: dict | None = None
    """The contrastive stage of an embedding model (`contrastive`)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in super().to_dict().items() if v is not None}  # config.json holds what is known

    @classmethod
    def of(cls, encoder: str | os.PathLike) -> EncoderFacts:
        """The block in `encoder/config.json` (empty when the folder has none: a model hf-encoderize did not save)."""
        return cls.from_dict((read_json(Path(encoder) / "config.json") or {}).get("hf_encoderize") or {})
