"""`ContrastiveConfig`: what the contrastive stage trains, on which rows, and how; every option validated where
it is declared (the hard-negative and Matryoshka options too)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal, get_args

from hf_encoderize.common.arguments import formerly
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.precision import check_bf16
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.common.validation import check_choice, check_data_name, check_number, parse_dims

Method = Literal["simcse", "supervised", "distill"]
METHODS = get_args(Method)

BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
"""The local file types contrastive reads: cpt's, plus CSV (pairs and triplets are often kept as tables)."""

Pooling = Literal["mean", "lasttoken", "weightedmean"]  # sentence-transformers' pooling_mode names
POOLINGS = {name: name for name in get_args(Pooling)}

Loss = Literal["mnrl", "cached_mnrl"]
LOSSES = get_args(Loss)

Precision = Literal["auto", "bf16", "no"]


@dataclass
class ContrastiveConfig:
    """The contrastive stage: method, data, pooling and training settings."""

    INPUTS = ("encoder_folder", "data_files", "teacher")  # what its output stays apart from (`outputs.inputs_of`)

    encoder: str
    """An encoder folder (a cpt/convert output, OUT or OUT/encoder) or any sentence-transformers/transformers folder."""
    _: KW_ONLY
    output_dir: str | None = field(default=None, metadata=identity(HARMLESS))
    """Folder to write the embedding model to; must be empty or absent unless `overwrite`. Default: RUN/contrastive
    for a run folder RUN (or RUN/encoder), where `card`, `eval`, `push` and `space` find a run's embedding model;
    runs/contrastive for any other encoder."""
    overwrite: bool = field(default=False, metadata=identity(HARMLESS))
    """Replace a non-empty output folder."""
    method: Method = field(default="simcse", metadata=formerly("objective"))
    """simcse (unsupervised: each text is its own positive, dropout makes the two views), supervised (pairs or
    triplets with hard negatives) or distill (unsupervised: the model learns `--teacher`'s embedding of each text)."""
    teacher: str | None = None
    """distill: the teacher, a sentence-transformers folder (or Hub id) whose embeddings the model learns; loaded
    without remote code. A Dense projection to the teacher's width is added when the widths differ, and saved."""
    distill_contrastive_weight: float = 0.0
    """distill: weight of SimCSE's in-batch contrastive loss added to the distillation loss (0: distillation alone;
    above 0 the text is given twice and `--dropout` makes the two views, as in simcse)."""
    distill_variants: int = 0
    """distill: also train on N minimal edits of each text (one word of 3+ lowercase letters replaced by another word
    of the texts, drawn with `--seed`), each labelled by the teacher: the student sees how far one changed word moves
    the teacher's embedding, which plain sentences rarely show. 0: the texts alone."""
    distill_synonyms: int = 0
    """distill: also train on N near-synonym edits of each text (one content word replaced by its nearest other word
    of the texts in the teacher's embedding space, at cosine 0.6 or more and not an inflection of it: car -> vehicle,
    quickly -> rapidly), each labelled by the teacher: where the one-word edits show that a word can change the
    meaning, these show that another word can keep it. 0: none."""
    data_files: str | None = None
    """Local JSON/JSONL, CSV, Parquet or .txt file(s) (a glob works; .txt: one text per line, column `text`)."""
    data_name: str | None = field(default=None, metadata=identity(HARMLESS))
    """How the model card names the --data-files texts (recorded), e.g. "Python 3.11 docs". Default: the card
    describes them ("a local JSONL file") and never prints their path or file name."""
    dataset: str | None = None
    """A Hub dataset id instead of `data_files`; streamed: only the first `max_rows` rows (default: steps x batch
    size) are read."""
    dataset_config: str | None = None
    """The Hub dataset's configuration name."""
    split: str = "train"
    """Split to train on."""
    text_column: str = "text"
    """simcse: the text column."""
    anchor_column: str = "anchor"
    """supervised: the query/anchor column."""
    positive_column: str = "positive"
    """supervised: the positive column."""
    negative_column: str | None = None
    """A hard-negative column (optional; in-batch negatives are always used). supervised: the anchor's negative;
    simcse: a text that must embed apart from the row's text (for example a neighbouring sentence on the same topic)."""
    max_rows: int | None = None
    """Use at most this many rows."""
    pooling: Pooling = "mean"
    """mean (the paper's pooling for IR), lasttoken or weightedmean."""
    query_prefix: str = ""
    """Instruction prefixed to anchors (and saved as the "query" prompt)."""
    document_prefix: str = ""
    """Instruction prefixed to positives and negatives (and saved as the "document" prompt)."""
    lead_token: bool = True
    """Put two EOS tokens before every text. A causally pretrained model keeps position 0 as an attention sink whose
    hidden state hardly depends on the token: without a lead every one-token text embeds alike (the quickstart encoder
    gives "cat"/"stocks" cosine 1.00, above "cat"/"kitten" 0.66; with the lead 0.69 and 0.86). The lead is saved as the
    default prompt, so `SentenceTransformer(out).encode` adds it; sentence-transformers leaves the first EOS out of the
    pooling (it counts a trailing special token as text), the second is pooled, in training and at inference alike.
    Instruction prefixes follow the lead inside the prompts and are left out of the pooling, as LLM2Vec does."""
    loss: Loss = "mnrl"
    """mnrl (MultipleNegativesRankingLoss) or cached_mnrl (GradCache: large batches on small memory)."""
    mini_batch_size: int = 32
    """cached_mnrl: rows per forward pass."""
    scale: float = 20.0
    """Similarity scale of the loss (1 / temperature; 20 = temperature 0.05, as in SimCSE and LLM2Vec)."""
    dropout: float = 0.3
    """simcse: dropout applied during training (LLM2Vec's SimCSE setting); saved back as 0."""
    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 64
    """Rows per step (in-batch negatives: larger is better)."""
    learning_rate: float = 3e-5
    """Peak learning rate (LLM2Vec's SimCSE and supervised runs use 3e-5 and 2e-4 with LoRA; full fine-tuning here)."""
    warmup_ratio: float = 0.1
    """Linear warmup over this share of the steps, then linear decay."""
    max_seq_length: int | None = None
    """Tokens per text; default 128, or the model's positions when it has fewer. A value above them is refused."""
    seed: int = 0
    """Seed for data order and dropout."""
    mixed_precision: Precision = "auto"
    """auto (bf16 on a GPU that has it, none on CPU), bf16 or no: autocast over the fp32 master weights. On a CPU
    with native bf16 (`lscpu` lists avx512_bf16 or amx_bf16) bf16 trains faster than fp32 (benchmarks/
    contrastive_precision.py measures it; docs/contrastive.md has the figures); elsewhere it is emulated."""
    save_every: int = field(default=500, metadata=identity(HARMLESS))
    """Save a resumable checkpoint (weights, optimizer, scheduler, RNG, data position) every N steps, in the
    `.NAME.work/` folder next to the output; it is removed once the embedding model is written."""
    keep_last: int = field(default=2, metadata=identity(HARMLESS))
    """Checkpoints to keep."""
    resume: bool = field(default=False, metadata=identity(HARMLESS))
    """Continue an interrupted run from its newest checkpoint (same settings), as `cpt --resume` does."""
    cross_device_negatives: bool = True
    """With several processes (accelerate launch / torchrun), every process's rows are negatives for every anchor
    (sentence-transformers' `gather_across_devices`): the in-batch negatives of the whole global batch."""
    progress: bool = field(default=True, metadata=identity(HARMLESS))
    """Show the trainer's progress bar."""
    report_to: str = field(default="none", metadata=identity(HARMLESS))
    """Comma-separated trackers the trainer logs loss and learning rate to (transformers' Trainer integrations):
    tensorboard, wandb, trackio, mlflow, comet_ml, clearml, dvclive; or none. tensorboard's events end up in
    OUTPUT_DIR/trackers/."""
    hard_negatives: int = 0
    """supervised: mine K hard negatives per pair with the model first (`mine_hard_negatives`, false negatives out)."""
    matryoshka_dims: str | None = None
    """Embedding sizes the loss is also applied at, e.g. 768,512,256,128,64 (`MatryoshkaLoss`); at most the width."""

    def __post_init__(self):
        problems = []
        for name in ("method", "pooling", "loss", "mixed_precision"):  # the Literal's values, on the field
            try:
                check_choice(f"--{name.replace('_', '-')}", getattr(self, name), ContrastiveConfig, name)
            except EncoderizeError as err:
                problems.append(str(err))
        if (self.data_files is None) == (self.dataset is None):
            problems.append("give exactly one of --data-files or --dataset")
        if problems:
            raise EncoderizeError("; ".join(problems))
        check_data_name(self.data_name, self.data_files)
        for name in ("steps", "batch_size", "max_seq_length", "mini_batch_size", "save_every", "keep_last",
                     "max_rows"):  # max_rows None: every row
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)
        if self.method == "simcse":
            check_number("--batch-size", self.batch_size, minimum=2, integer=True)  # in-batch negatives need two
        check_number("--seed", self.seed, minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range
        check_number("--hard-negatives", self.hard_negatives, minimum=0, integer=True)  # 0: none mined
        check_number("--scale", self.scale, above=0)  # 1 / temperature: 0 makes every similarity equal
        check_number("--learning-rate", self.learning_rate, above=0)
        check_number("--dropout", self.dropout, minimum=0, below=1)
        check_number("--warmup-ratio", self.warmup_ratio, minimum=0, below=1)
        check_extras(self)  # --hard-negatives, --matryoshka-dims (a size above the width: once the model loads)
        check_distill_options(self)  # --teacher with --method distill, and only then
        check_bf16(self.mixed_precision)
        if self.output_dir is None:
            self.output_dir = default_output_dir(self.encoder)

    @property
    def encoder_folder(self) -> str:
        """The saved encoder `encoder` names (`model.saving.encoder_dir`: RUN/encoder for a run folder RUN), what the
        stage reads; `encoder` as given while there is none yet (`run` checks its stages before cpt makes it)."""
        from hf_encoderize.model.saving import encoder_dir

        try:
            return str(encoder_dir(self.encoder))
        except EncoderizeError:
            return self.encoder

    def identity_value(self, name: str):
        """The value a setting runs with, for "same run?" (`common.identity`): `data_files` by content (size and a
        hash of each whole file, as cpt's resume counts it), not by the path text: an edit in place is other data,
        `./pairs.jsonl` for `pairs.jsonl` the same. A local `teacher` by its content too (`distill.teacher_identity`):
        its labels are what the model learns, so a teacher whose weights changed in place is another run."""
        from hf_encoderize.data.corpus_files import content_identity

        if name == "teacher":
            return teacher_identity(self.teacher)
        return content_identity(self.data_files) if name == "data_files" else getattr(self, name)

def default_output_dir(encoder: str) -> str:
    """Where the embedding model goes when no --output-dir is given: RUN/contrastive for a run folder RUN or its
    RUN/encoder (a folder holding run_record.json), runs/contrastive for any other encoder.

    >>> default_output_dir("some/converted-encoder")
    'runs/contrastive'
    """
    given = Path(str(encoder).rstrip("/") or ".")
    for run in (RunFolder(given), RunFolder(given.parent)):
        if run.run_record.is_file() and given.resolve() in (run.root.resolve(), run.encoder.resolve()):
            return str(run.contrastive)
    return "runs/contrastive"


def teacher_identity(name: str | None) -> str | None:
    """The teacher as "same run?" counts it (`ContrastiveConfig.identity_value`): a local folder by its content, a
    hash of every file the model loads from (what `card` and `export` add beside it left out), so a teacher changed in
    place is another teacher and `./T` is `T`; a Hub id by its name."""
    from hf_encoderize.common.outputs import SERVED
    from hf_encoderize.data.corpus_files import folder_identity

    path = Path(name).expanduser() if name else None
    return folder_identity(path, skip=SERVED) if path is not None and path.is_dir() else name


def check_extras(config) -> None:
    """`--hard-negatives` needs (anchor, positive) pairs and no negative column of the user's; the dims must parse."""
    parse_dims(config.matryoshka_dims)
    check_number("--hard-negatives", config.hard_negatives, minimum=0, integer=True)
    if config.hard_negatives and config.method != "supervised":
        raise EncoderizeError("--hard-negatives mines negatives for (anchor, positive) pairs; add --method "
                              "supervised and the pair columns")
    if config.hard_negatives and config.negative_column:
        raise EncoderizeError("--hard-negatives mines the negatives itself; drop --negative-column or --hard-negatives")

def check_distill_options(config) -> None:
    """`--teacher` goes with `--method distill` and only with it; distillation reads one text column, unprefixed
    (the teacher embeds the text itself). The teacher itself is checked by `distill.load_teacher`."""
    check_number("--distill-contrastive-weight", config.distill_contrastive_weight, minimum=0)
    check_number("--distill-variants", config.distill_variants, minimum=0, integer=True)
    check_number("--distill-synonyms", config.distill_synonyms, minimum=0, integer=True)
    if config.method != "distill":
        if config.teacher is not None:
            raise EncoderizeError("--teacher is the model --method distill learns from; add --method distill or "
                                  "drop --teacher")
        if config.distill_contrastive_weight:
            raise EncoderizeError("--distill-contrastive-weight weighs a loss of --method distill; add it or drop "
                                  "the weight")
        if config.distill_variants:
            raise EncoderizeError("--distill-variants adds texts for the teacher to label (--method distill); add "
                                  "--method distill or drop --distill-variants")
        if config.distill_synonyms:
            raise EncoderizeError("--distill-synonyms adds texts for the teacher to label (--method distill); add "
                                  "--method distill or drop --distill-synonyms")
        return
    if not config.teacher:
        raise EncoderizeError("--method distill needs --teacher: a sentence-transformers model folder (or Hub id) "
                              "whose embeddings the model learns")
    if config.negative_column or config.hard_negatives:
        raise EncoderizeError("--method distill learns the teacher's embedding of each text and reads no negatives; "
                              "drop --negative-column / --hard-negatives")
    if config.query_prefix or config.document_prefix:
        raise EncoderizeError("--method distill embeds each text as it is (the teacher sees it without a prefix); "
                              "drop --query-prefix / --document-prefix")
