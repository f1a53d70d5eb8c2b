"""`run_record.json`: what a `cpt` or `pretrain` run was and what it did, the model card's main source."""

from __future__ import annotations

from dataclasses import dataclass

from hf_encoderize.records.fields import Record


@dataclass
class RunRecord(Record):
    """`run_record.json`: what a `cpt` or `pretrain` run was and what it did (the model card's main source).

    >>> record = RunRecord.from_dict({"command": "cpt", "base_model": "m", "steps": 4, "lr": 1e-4})
    >>> record.command, record.steps, record.facts
    ('cpt', 4, {'lr': 0.0001})
    >>> RunRecord.from_dict(record.to_dict()) == record
    True
    """

    command: str | None = None
    """`cpt` or `pretrain`."""
    base_model: str | None = None
    """The model trained from (Hub id, folder or GGUF folder); None for `pretrain`."""
    revision: str | None = None
    gguf_file: str | None = None
    objective: str | None = None
    """mlm, mntp, or pretrain's phases joined by "+"."""
    mask_ratio: float | None = None
    steps: int | None = None
    identity: dict | None = None
    """Every config field that counts for "same run?" (`common.identity`; recorded since 0.2)."""
    encoderize: dict | None = None
    """What the attention patch and the token set-up did."""
    eval_loss: float | None = None
    """Held-out MLM loss of the trained model."""
    initial_eval_loss: float | None = None
    """The same held-out loss of the starting model, before the first step (recorded since 0.3)."""
    tokens_seen: int | None = None
    hf_encoderize_version: str | None = None
