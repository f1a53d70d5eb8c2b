"""`contrastive_run.json`: the contrastive stage of an embedding model, written by `recipes.contrastive.train`."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_encoderize.records.fields import Fields, Part


@dataclass
class ContrastiveRecord(Fields):
    """`contrastive_run.json`: the contrastive stage of an embedding model, and the encoder it started from."""

    source: str | None = None
    """The MLM encoder folder the stage trained from."""
    config: dict = field(default_factory=dict)
    """The stage's `ContrastiveConfig`, every field."""
    stage: dict = field(default_factory=dict)
    """What the stage did, as config.json's `hf_encoderize.contrastive` holds it too; read as `stage_facts()`."""
    losses: list = field(default_factory=list)

    def stage_facts(self) -> ContrastiveStage:
        """The stage, typed."""
        return ContrastiveStage.from_dict(self.stage or {})

    def source_facts(self) -> ContrastiveSource:
        """What the card reads of the stage's config, typed: where its rows came from, its Matryoshka sizes."""
        return ContrastiveSource.from_dict(self.config or {})


@dataclass(frozen=True, kw_only=True)
class ContrastiveStage(Part):
    """The contrastive stage as `recipes.contrastive.train` records it (a key of a later version is kept in `facts`)."""

    objective: str | None = None
    """simcse, supervised or distill."""
    pooling: str | None = None
    loss: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    scale: float | None = None
    training_dropout: dict | None = None
    """The dropout fields set for training (SimCSE's two views), put back to the source's values in the saved model."""
    rows: int | None = None
    final_loss: float | None = None
    lora: dict | None = None
    processes: int | None = None
    data_identity: list | str | None = None
    lead: str | None = None
    """The lead token the model is trained and saved with ("" without)."""
    teacher: str | None = None
    """distill: the teacher as given, its name and license, the projection to its width."""
    teacher_identity: str | None = None
    """distill: the teacher's content (`distill.teacher_identity`: `sha256:...` of a local folder's files, a Hub id's
    name), what `run` compares before reusing the stage."""
    teacher_name: str | None = None
    teacher_license: str | None = None
    distill_contrastive_weight: float | None = None
    distill_variants: int | None = None
    """distill: minimal edits of each text the teacher labelled too (`--distill-variants`)."""
    distill_synonyms: int | None = None
    """distill: near-synonym edits of each text the teacher labelled too (`--distill-synonyms`)."""
    distill_variant_edits: int | None = None
    """distill: the one-word edits `--distill-variants` made, in all (None: recorded before they were counted)."""
    distill_synonym_edits: int | None = None
    """distill: the near-synonym edits `--distill-synonyms` made, in all: 0 when no word of the texts had one."""
    projection: list | None = None


@dataclass(frozen=True, kw_only=True)
class ContrastiveSource(Part):
    """Where the stage's rows came from and the sizes it trained (its `ContrastiveConfig`'s fields the card reads)."""

    dataset: str | None = None
    data_files: str | None = None
    data_name: str | None = None
    matryoshka_dims: str | list | None = None
