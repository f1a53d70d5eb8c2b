"""`eval/<name>/summary.json`: one model's scores under the paper's protocol, written by `evaluation.summary`."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_encoderize.records.fields import Fields


@dataclass
class EvalSummary(Fields):
    """`eval/<name>/summary.json`: one model's scores under the paper's protocol (`evaluation.summary`)."""

    model: str | None = None
    model_name: str | None = None
    mode: str | None = None
    """bidirectional or causal: the attention the model was fine-tuned with."""
    profile: str | None = None
    protocol: dict = field(default_factory=dict)
    results: list = field(default_factory=list)
    """One entry per dataset: task, dataset, metric, best_lr, test_mean, test_ci95, n_seeds, ..."""
    family_means: dict = field(default_factory=dict)
