"""`CardFacts`: everything a model card states, gathered from the files of one run (`card.gather_facts`).

Its own module so that the card and its row builders (`card_rows`) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

from hf_encoderize.records.contrastive_record import ContrastiveRecord
from hf_encoderize.records.encoder_facts import PlainAttention
from hf_encoderize.records.eval_summary import EvalSummary, MtebSummary
from hf_encoderize.records.run_record import PatchFacts, RunRecord


@dataclass
class CardFacts:
    """Everything the card states, gathered from the files of one run."""

    _: KW_ONLY
    model_name: str
    """Short name for the title and the model-index."""
    model_ref: str
    """What the usage snippets load: the Hub repo id, or the local encoder folder."""
    repo_id: str | None = None
    """The Hub repo id (`--model-id`, or push's REPO_ID); None: the card names the model by its local folder and
    says so."""
    mteb: MtebSummary | None = None
    """`eval --mteb`'s summary of this model (`eval/<model>/mteb/summary.json`), None when it was not run."""
    mteb_dir: str | None = None
    """The folder of that summary and of mteb's task result files (the model-index reads them through mteb)."""
    base_model: str
    """The base model as it was given to convert/cpt (Hub id, folder or GGUF folder)."""
    base_model_id: str | None = None
    """The base model's Hub id, when known (metadata `base_model`)."""
    base_revision: str | None = None
    """Hub revision the base model was loaded at."""
    gguf_file: str | None = None
    """GGUF file the base weights came from."""
    license: str | None = None
    """License id inherited from the base model, or given."""
    language: list[str] | None = None
    """Languages of the base model, where its metadata says."""
    encoderize: PatchFacts = field(default_factory=PatchFacts)
    """What the attention patch and token set-up did (the `hf_encoderize` block of config.json, with the run record's
    `encoderize` over it)."""
    plain_attention: PlainAttention | None = None
    """What a plain transformers load runs bidirectionally (the block's `plain_attention`)."""
    run: RunRecord | None = None
    """`run_record.json` of the cpt run; None for a converted-only encoder."""
    results: EvalSummary | None = None
    """`summary.json` of the encoder's evaluation."""
    base_results: EvalSummary | None = None
    """`summary.json` of the base model's evaluation."""
    has_mlm_head: bool = True
    """The saved weights include the MLM (LM) head, so fill-mask works."""
    native_encoder: bool = False
    """The base model was already an encoder (MLM->MLM), saved without remote code."""
    model_type: str = ""
    """transformers model_type."""
    num_parameters: int | None = None
    """Parameter count read from the safetensors headers."""
    hidden_size: int | None = None
    """Width of the embeddings."""
    max_seq_length: int | None = None
    """sentence-transformers max_seq_length."""
    pooling: str | None = None
    """sentence-transformers pooling mode (`1_Pooling/config.json`): what a serving engine must be told."""
    plots: list[str] = field(default_factory=list)
    """Repo paths of plots pushed next to the card (shown only in a pushed card)."""
    contrastive: ContrastiveRecord | None = None
    """`contrastive_run.json` of an embedding model made by `contrastive` (the second stage, after cpt)."""
    export_command: str = ""
    """`hf-encoderize export` of this model as printed on the card (a download first for a Hub card)."""
    evaluate_hint: str = ""
    """The commands that evaluate this model and bring its scores into the card (shown while it has none)."""
    st_card: str | None = None
    """The card sentence-transformers wrote for an embedding model (`card_st`): ours is built on it."""
    base_label: str = "base model"
    """Name of the comparison column: the base decoder, or the MLM encoder for an embedding model."""

    @property
    def pretrained(self) -> bool:
        """Trained from random weights (no base model, as `pretrain`), not converted from a decoder."""
        return self.run is not None and self.run.from_random_weights
