"""`eval/<name>/summary.json`: one model's scores under the paper's protocol, written by `evaluation.summary`."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_encoderize.records.fields import Fields, Part


@dataclass(frozen=True, kw_only=True)
class DatasetResult(Part):
    """One dataset's scores at the learning rate its validation score selected (`evaluation.summary.dataset_result`),
    on a 0-100 scale."""

    task: str | None = None
    """sc, tc, qa or ir."""
    dataset: str | None = None
    metric: str | None = None
    best_lr: str | None = None
    test_mean: float | None = None
    test_ci95: float | None = None
    """95% confidence interval over seeds (None with one seed)."""
    n_seeds: int | None = None
    val_mean: float | None = None
    lr_spread: float | None = None
    """Spread of the test mean across the learning rates (0 with one)."""
    per_lr: dict | None = None
    """Learning rate -> val_mean, test_mean, test_ci95, n_seeds."""
    test_bootstrap: dict | None = None
    """The bootstrap interval of the test mean, test examples and seeds redrawn (`evaluation.bootstrap`)."""
    extra_metrics: dict | None = None
    """Other metrics of the selected runs, averaged over seeds (IR's binary NDCG, frozen IR's zero_shot, ...)."""
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class EvalProtocol(Part):
    """How every fine-tuning run behind a summary was made (`EvalConfig.protocol()`, the grid's learning rates and
    seeds as run): what the card's protocol sentence, a metric's name and `run`'s reuse check read."""

    lrs: list | None = None
    """The learning rates run, as their keys ("1e-05", ...), ascending."""
    seeds: list | None = None
    """The seeds run."""
    batch_size: int | None = None
    """Examples per step."""
    max_steps: int | None = None
    """Most optimizer steps per run (a fine-tuned run stops earlier after one epoch)."""
    warmup_ratio: float | None = None
    """Fraction of steps with linear warmup, then linear decay to 0."""
    selection: str | None = None
    """How the learning rate is chosen and the test score reported, in words."""
    schedule: str | None = None
    batching: str | None = None
    """random or length (`EvalConfig.batching`); a summary from before the option holds none (length-grouped)."""
    optimizer: dict | None = None
    """AdamW's name, betas, eps, weight decay and what is not decayed."""
    dataset_source: str | None = None
    """Where the datasets came from: authors (the paper authors' copies) or original."""
    epochs: str | None = None
    frozen: bool | None = None
    """True: a frozen probe (only the task head trained), not the paper's fine-tuning."""
    max_length: int | str | None = None
    """Most tokens per input, or "model limit (0.99 x positions)"."""
    qa_stride: int | None = None
    ndcg_gains: str | None = None
    """IR's NDCG gains: binary or graded."""
    max_eval_examples: int | None = None
    synthetic_sizes: dict | None = None
    """The smoke profile's synthetic set sizes (None for real datasets)."""

    @classmethod
    def from_dict(cls, data):
        return super().from_dict(data if isinstance(data, dict | EvalProtocol) else {})  # a hand-edited non-object

    @classmethod
    def none(cls) -> EvalProtocol:
        """No protocol recorded: every field None, written back as `{}`."""
        return cls.from_dict({})


@dataclass
class EvalSummary(Fields):
    """`eval/<name>/summary.json`: one model's scores under the paper's protocol (`evaluation.summary`)."""

    model: str | None = None
    model_name: str | None = None
    mode: str | None = None
    """bidirectional or causal: the attention the model was fine-tuned with."""
    profile: str | None = None
    protocol: EvalProtocol = field(default_factory=EvalProtocol.none)
    """How the runs were made, typed."""
    results: list[DatasetResult] = field(default_factory=list)
    """One entry per dataset, typed."""
    family_means: dict = field(default_factory=dict)


@dataclass
class MtebSummary(Fields):
    """`eval/mteb/<name>/summary.json`: one model's MTEB zero-shot scores (`evaluation.mteb_suite`)."""

    model: str | None = None
    model_name: str | None = None
    mteb_version: str | None = None
    tasks: dict = field(default_factory=dict)
    """Task name -> main_score (the metric's name), score and per-split scores, x100."""
    model_identity: dict = field(default_factory=dict)
    """The model's files, revision and max length the scores were made with: a later call keeps them only for the
    same (`mteb_suite.model_identity`)."""
    pooling: str | None = None
    max_length: int | None = None
