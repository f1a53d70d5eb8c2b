"""`contrastive_run.json`: the contrastive stage of an embedding model, written by `recipes.contrastive.train`."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_encoderize.records.fields import Fields


@dataclass
class ContrastiveRecord(Fields):
    """`contrastive_run.json`: the contrastive stage of an embedding model, and the encoder it started from."""

    source: str | None = None
    """The MLM encoder folder the stage trained from."""
    config: dict = field(default_factory=dict)
    """The stage's `ContrastiveConfig`, every field."""
    stage: dict = field(default_factory=dict)
    losses: list = field(default_factory=list)
