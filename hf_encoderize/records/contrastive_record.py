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
    stage: ContrastiveStage | None = None
    """What the stage did, as config.json's `hf_encoderize.contrastive` holds it too (`EncoderFacts.contrastive`)."""
    losses: list = field(default_factory=list)
    """The training loss at each logged step."""

    def stage_facts(self) -> ContrastiveStage:
        """The stage; an empty one for a record that holds none."""
        return self.stage or ContrastiveStage()

    def source_facts(self) -> ContrastiveSource:
        """What the card reads of the stage's config, typed: where its rows came from, its Matryoshka sizes."""
        return ContrastiveSource.from_dict(self.config or {})


@dataclass(frozen=True, kw_only=True)
class ContrastiveStage(Part):
    """The contrastive stage as `recipes.contrastive.train` records it, in `contrastive_run.json` and in config.json's
    `hf_encoderize.contrastive` (a key of a later version is kept in `facts`). A stage recorded before the method had
    its one name holds it as `objective`: read as `method`, written back as `method`.

    >>> ContrastiveStage.from_dict({"objective": "simcse", "steps": 2}).to_dict()
    {'method': 'simcse', 'steps': 2}
    """

    method: str | None = None
    """How the stage learns (`ContrastiveConfig.method`): simcse, supervised or distill."""
    pooling: str | None = None
    """The sentence-transformers pooling mode the model was saved with (mean, cls, lasttoken)."""
    loss: str | None = None
    """The loss trained: mnrl (in-batch negatives), mse (distill), mse+mnrl (distill with a contrastive term)."""
    steps: int | None = None
    """The optimizer steps asked for."""
    batch_size: int | None = None
    """Rows per step (each process's)."""
    learning_rate: float | None = None
    """The peak learning rate."""
    scale: float | None = None
    """The similarity scale of the in-batch loss (the inverse temperature)."""
    training_dropout: dict | None = None
    """The dropout fields set for training (SimCSE's two views), put back to the source's values in the saved model."""
    rows: int | None = None
    """The training rows the stage read (after the distillation edits)."""
    final_loss: float | None = None
    """The last logged training loss."""
    lora: dict | None = None
    """The LoRA adapter trained and merged ({r, alpha, targets, merged}); None without LoRA."""
    processes: int | None = None
    """The processes that trained it (the data-parallel world size)."""
    data_identity: list | str | None = None
    """The training data by content (`ContrastiveConfig.identity_value("data_files")`): what `run` compares before
    reusing the stage."""
    lead: str | None = None
    """The lead token the model is trained and saved with ("" without)."""
    teacher: str | None = None
    """distill: the teacher as given, its name and license, the projection to its width."""
    teacher_identity: str | None = None
    """distill: the teacher's content (`distill.teacher_identity`: `sha256:...` of a local folder's files, a Hub id's
    name), what `run` compares before reusing the stage."""
    teacher_name: str | None = None
    """distill: the teacher's own name (its card's heading)."""
    teacher_license: str | None = None
    """distill: the teacher's license, as its card declares it."""
    distill_contrastive_weight: float | None = None
    """distill: the weight of the in-batch contrastive term added to the MSE (0: MSE alone)."""
    distill_variants: int | None = None
    """distill: minimal edits of each text the teacher labelled too (`--distill-variants`)."""
    distill_synonyms: int | None = None
    """distill: near-synonym edits of each text the teacher labelled too (`--distill-synonyms`)."""
    distill_variant_edits: int | None = None
    """distill: the one-word edits `--distill-variants` made, in all (None: recorded before they were counted)."""
    distill_synonym_edits: int | None = None
    """distill: the near-synonym edits `--distill-synonyms` made, in all: 0 when no word of the texts had one."""
    projection: list | None = None
    """distill: the saved Dense projection to the teacher's width, [in_features, out_features] (None: same width)."""

    @classmethod
    def from_dict(cls, data: dict | None):
        if isinstance(data, dict) and "objective" in data and "method" not in data:  # recorded before the rename
            data = {("method" if key == "objective" else key): value for key, value in data.items()}
        return super().from_dict(data)


@dataclass(frozen=True, kw_only=True)
class ContrastiveSource(Part):
    """Where the stage's rows came from and the sizes it trained (its `ContrastiveConfig`'s fields the card reads)."""

    dataset: str | None = None
    data_files: str | None = None
    data_name: str | None = None
    matryoshka_dims: str | list | None = None
