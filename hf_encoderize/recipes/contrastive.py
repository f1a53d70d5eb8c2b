"""`hf-encoderize contrastive ENCODER`: turn an encoder made here into an embedding model with sentence-transformers.

Design choices:
- Everything that trains is sentence-transformers' own: `SentenceTransformerTrainer`, its
  `MultipleNegativesRankingLoss` (InfoNCE with in-batch negatives, LLM2Vec's loss for both stages) or the cached
  (GradCache) variant for large batches on small memory, and its no-duplicates batch sampler (a duplicate in a batch
  would be a false negative). No hand-written loss.
- `simcse` (unsupervised, Gao et al. 2021; LLM2Vec's second stage): each sentence is its own positive, the two views
  differing only by dropout, so dropout must be on. Decoder configs usually have none (Llama's `attention_dropout` is
  0.0): the model loads with `attention_dropout` (and hidden dropouts the config has) set to `--dropout`, 0.3 by
  default as in LLM2Vec's SimCSE configs, and the saved config has them back at 0 for inference.
- `supervised`: (anchor, positive[, hard negative]) rows from `--data-files` or a Hub dataset, column names as options.
- Pooling: mean (default, the paper's pooling for IR), last token or weighted mean, as LLM2Vec offers. Optional
  instruction prefixes for queries and documents are applied in training and saved as sentence-transformers prompts
  (`encode(..., prompt_name="query")`).
- Precision: a full fine-tune loads the encoder in fp32 (master weights; bf16 autocast on a GPU that has it) and is
  saved back in the encoder's own dtype. An encoder saved in bf16 would otherwise train in pure bf16, where AdamW
  updates below about 0.4% of a weight round to nothing. LoRA keeps the base as saved (its adapters are fp32).
- Everything is validated (encoder folder, output folder, objective, columns, rows) before the output folder is touched;
  the result is written under a temporary name and renamed into place, so a failure leaves nothing half-written. The
  output folder follows `common.outputs` (only a marked folder of ours is replaced, never the encoder read), and the
  work folder holds the run's lock, so a second run on the same output is refused while the first is live.
- The output loads without hf-encoderize: a sentence-transformers folder whose transformer config keeps
  `is_causal: false` (plain `AutoModel` is bidirectional), with the input folder's `modeling_encoderize.py` so
  `AutoModel.from_pretrained(out, trust_remote_code=True)` still applies the patch. The MLM head is not part of an
  embedding model, so the `AutoModelForMaskedLM` entry is dropped. `contrastive_run.json` records both stages.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path

import torch

from hf_encoderize.common import outputs
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.outputs import releasing_locks
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD, ContrastiveRecord
from hf_encoderize.common.validation import check_number
from hf_encoderize.data.sources import blank_file, dataset_patterns, diagnose_files, local_files
from hf_encoderize.model.load_errors import is_remote_code_refusal, remote_code_message
from hf_encoderize.model.saving import MODELING_FILE, encoder_dir
from hf_encoderize.recipes.contrastive_extras import (
    check_distinct,
    check_extras,
    mine_negatives,
    stage_loss,
    warn_without_dropout,
)
from hf_encoderize.recipes.contrastive_resume import (
    check_resume,
    checkpoints,
    set_aside,
    settings_of,
    work_dir,
)
from hf_encoderize.training.lora import AdapterConfig, check_targets, check_targets_before_load, target_modules

OBJECTIVES = ("simcse", "supervised")
BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
"""The local file types contrastive reads: cpt's, plus CSV (pairs and triplets are often kept as tables)."""
POOLINGS = {"mean": "mean", "lasttoken": "lasttoken", "weightedmean": "weightedmean"}
LOSSES = ("mnrl", "cached_mnrl")
_DROPOUT_FIELDS = ("attention_dropout", "hidden_dropout", "hidden_dropout_prob", "attention_probs_dropout_prob",
                   "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout")


@dataclass
class ContrastiveConfig:
    """The contrastive stage: objective, data, pooling and training settings."""

    encoder: str
    """An encoder folder (a cpt/convert output, OUT or OUT/encoder) or any sentence-transformers/transformers folder."""
    _: KW_ONLY
    output_dir: str = field(default="runs/contrastive", metadata=identity(HARMLESS))
    """Folder to write the embedding model to; must be empty or absent unless `overwrite`."""
    overwrite: bool = field(default=False, metadata=identity(HARMLESS))
    """Replace a non-empty output folder."""
    objective: str = "simcse"
    """simcse (unsupervised: each text is its own positive, dropout makes the two views) or supervised (pairs or
    triplets with hard negatives)."""
    data_files: str | None = None
    """Local JSON/JSONL, CSV, Parquet or .txt file(s) (a glob works; .txt: one text per line, column `text`)."""
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
    """supervised: a hard-negative column (optional; in-batch negatives are always used)."""
    max_rows: int | None = None
    """Use at most this many rows."""
    pooling: str = "mean"
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
    loss: str = "mnrl"
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
    hard_negatives: int = 0
    """supervised: mine K hard negatives per pair with the model first (`mine_hard_negatives`, false negatives out)."""
    matryoshka_dims: str | None = None
    """Embedding sizes the loss is also applied at, e.g. 768,512,256,128,64 (`MatryoshkaLoss`); at most the width."""

    def __post_init__(self):
        problems = []
        if self.objective not in OBJECTIVES:
            problems.append(f"--objective must be one of {', '.join(OBJECTIVES)} (got {self.objective!r})")
        if self.pooling not in POOLINGS:
            problems.append(f"--pooling must be one of {', '.join(POOLINGS)} (got {self.pooling!r})")
        if self.loss not in LOSSES:
            problems.append(f"--loss must be one of {', '.join(LOSSES)} (got {self.loss!r})")
        if (self.data_files is None) == (self.dataset is None):
            problems.append("give exactly one of --data-files or --dataset")
        if problems:
            raise EncoderizeError("; ".join(problems))
        for name in ("steps", "batch_size", "max_seq_length", "mini_batch_size", "save_every", "keep_last",
                     "max_rows"):  # max_rows None: every row
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)
        if self.objective == "simcse":
            check_number("--batch-size", self.batch_size, minimum=2, integer=True)  # in-batch negatives need two
        check_number("--seed", self.seed, minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range
        check_number("--hard-negatives", self.hard_negatives, minimum=0, integer=True)  # 0: none mined
        check_number("--scale", self.scale, above=0)  # 1 / temperature: 0 makes every similarity equal
        check_number("--learning-rate", self.learning_rate, above=0)
        check_number("--dropout", self.dropout, minimum=0, below=1)
        check_number("--warmup-ratio", self.warmup_ratio, minimum=0, below=1)
        check_extras(self)  # --hard-negatives, --matryoshka-dims (a size above the width: once the model loads)


def _columns(config: ContrastiveConfig) -> list[str]:
    if config.objective == "simcse":
        return [config.text_column]
    return [config.anchor_column, config.positive_column] + ([config.negative_column] if config.negative_column else [])


def load_rows(config: ContrastiveConfig):
    """The training rows as a `datasets.Dataset` with columns anchor, positive[, negative], prefixes applied."""
    import datasets

    datasets.disable_progress_bars()  # a bad-input run prints one error line, not a progress bar before it
    try:
        if config.data_files is not None:
            # cpt's reader finds the files (a folder, `~`, a glob, a name with brackets); contrastive also reads CSV
            files = local_files(config.data_files, BUILDERS)
            builder = {BUILDERS[Path(f).suffix] for f in files}
            if len(builder) > 1:
                raise EncoderizeError("--data-files mixes file types; pass one kind (JSON/JSONL, CSV, Parquet or .txt)")
            if all(blank_file(f) for f in files):  # datasets' JSON builder raises a bare StopIteration for these
                raise EncoderizeError(f"--data-files {config.data_files!r} holds no rows (empty or blank file"
                                      f"{'s' if len(files) > 1 else ''}); point it at your training data")
            try:
                rows = datasets.load_dataset(builder.pop(), data_files=dataset_patterns(files), split="train")
            except Exception as err:  # a bad line: name its file and line, as cpt does
                raise EncoderizeError(diagnose_files(files, err)) from None
        else:  # streamed, as cpt reads it: only the rows the stage uses are read (run's default corpus is 10B tokens)
            stream = datasets.load_dataset(config.dataset, config.dataset_config, split=config.split, streaming=True)
            rows = datasets.Dataset.from_list(list(stream.take(rows_used(config))), features=stream.features)
    except EncoderizeError:
        raise
    except Exception as err:  # unreadable file, unknown Hub dataset, offline Hub
        raise EncoderizeError(f"cannot read the training data: {type(err).__name__}: {' '.join(str(err).split())[:200]}"
                              ) from None
    wanted = _columns(config)
    missing = [c for c in wanted if c not in rows.column_names]
    if missing:
        hint = " (supervised needs an anchor and a positive column: pairs or triplets)" \
            if config.objective == "supervised" else ""
        raise EncoderizeError(f"column(s) {', '.join(map(repr, missing))} not in the data (it has "
                              f"{', '.join(map(repr, rows.column_names))}); pass the column options{hint}")
    rows = rows.select_columns(wanted).filter(lambda row: all(isinstance(row[c], str) and row[c].strip()
                                                              for c in wanted))
    if config.max_rows:
        rows = rows.select(range(min(config.max_rows, len(rows))))
    if len(rows) < 2:
        raise EncoderizeError(f"the training data has {len(rows)} usable row(s) with non-empty {', '.join(wanted)}; "
                              "in-batch negatives need at least 2")
    # With a lead, the prefixes are part of the prompts the trainer adds (left out of the pooling), not of the rows.
    query, document = ("", "") if config.lead_token else (config.query_prefix, config.document_prefix)
    if config.objective == "simcse":  # the same text twice: dropout makes the two views
        text = config.text_column
        return rows.map(lambda row: {"anchor": query + row[text], "positive": document + row[text]},
                        remove_columns=[text])
    renamed = {config.anchor_column: "anchor", config.positive_column: "positive"}
    if config.negative_column:
        renamed[config.negative_column] = "negative"
    rows = rows.rename_columns({k: v for k, v in renamed.items() if k != v})
    return rows.map(lambda row: {key: (query if key == "anchor" else document) + value for key, value in row.items()})


def rows_used(config: ContrastiveConfig) -> int:
    """How many rows a Hub dataset gives the stage: `--max-train-samples`, else one epoch of the run's steps (every
    process's batch), what the trainer would draw before repeating."""
    return config.max_rows or config.steps * config.batch_size * world_size()


def _dropout_kwargs(folder: Path, value: float) -> dict:
    """The dropout fields this architecture's config has, set to `value` (SimCSE needs dropout in training)."""
    config = json.loads((folder / "config.json").read_text())
    return {name: value for name in _DROPOUT_FIELDS if isinstance(config.get(name), (int, float))
            and not isinstance(config.get(name), bool)}


@releasing_locks  # a run that fails gives its output folder's lock back
def contrastive(config: ContrastiveConfig, adapter: AdapterConfig | None = None) -> dict:
    """Train the contrastive stage and save a sentence-transformers folder to `config.output_dir`. Returns a summary.

    Works under `accelerate launch` / `torchrun` as it is (the trainer is sentence-transformers' on Accelerate); only
    the main process writes the output."""
    from accelerate import PartialState
    from sentence_transformers import SentenceTransformerTrainer

    adapter = adapter or AdapterConfig()
    if adapter.load_in_4bit:
        raise EncoderizeError("contrastive does not train 4-bit weights; drop --load-in-4bit (LoRA works without it)")
    if adapter.lora_r:
        check_peft_integration()
    source = encoder_dir(config.encoder)
    check_targets_before_load(source, adapter)  # a --lora-targets typo, from the config alone
    out, work = Path(config.output_dir), work_dir(config.output_dir)
    # --resume too: the output folder is written at the end, so what the user has there is checked now, not deleted then
    out = outputs.check_output_dir(config.output_dir, overwrite=config.overwrite, resumable=not config.resume,
                                   inputs=outputs.input_paths(source, config.data_files))
    outputs.check_unlocked(work)  # another contrastive run is live on this output: its work folder is not wiped
    broken = check_resume(config, adapter, work)  # a checkpoint cut short while saving: resumed from the one before
    rows = load_rows(config)  # every input is checked before the output folder is touched
    check_distinct(rows, config)  # a batch holds no text twice: data that cannot fill one would train 0 steps
    dropout = _dropout_kwargs(source, config.dropout) if config.objective == "simcse" else {}
    model = build_model(source, config, dropout, adapter)
    warn_without_dropout(model, config)  # SimCSE's two views of a text differ only by dropout
    prompts = saved_prompts(config, model.tokenizer)
    rows = mine_negatives(model, rows, config, prompts)  # --hard-negatives: negative_1..negative_K columns
    loss = stage_loss(model, config)  # with --matryoshka-dims, at each size
    roles = {"anchor": "query", **{column: "document" for column in rows.column_names if column != "anchor"}}
    training = {column: prompts[roles[column]] for column in rows.column_names if roles[column] in prompts} \
        if config.lead_token else None
    args = _training_args(config, work, len(rows), training)  # sets up the processes of a distributed launch
    state = PartialState()
    state.wait_for_everyone()  # every process has checked the folders before the main one changes them
    if state.is_main_process:  # the lock first, then the wipe: a run that went live while this one loaded is refused
        work.mkdir(parents=True, exist_ok=True)  # here, not wiped (lock and checkpoints); it goes with the work folder
        outputs.acquire_lock(work, "contrastive")
        for entry in [e for e in work.iterdir() if e.name != outputs.LOCK] if not config.resume else []:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        if not config.resume:
            (work / "trainer").mkdir(parents=True)
            (work / "settings.json").write_text(json.dumps(settings_of(config, adapter), indent=2) + "\n")
        set_aside(broken, work)
    state.wait_for_everyone()
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=rows, loss=loss)
    if not config.progress:  # no progress bar and no printed log dicts either (the log is in contrastive_run.json)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    try:
        trainer.train(resume_from_checkpoint=True if config.resume else None)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (the type says which); the CLI says "interrupted"
        saved = checkpoints(work)  # the Trainer's checkpoint-STEP folders
        where = f"the newest checkpoint is {str(saved[-1])!r}" if saved else f"checkpoints are in {str(work)!r}"
        raise type(interrupt)(f"{where}; run the same command with --resume to continue") from None
    summary = {}
    if trainer.is_world_process_zero():
        summary = _write_output(trainer, model, source, config, adapter, dropout, len(rows), out, work)
    trainer.accelerator.wait_for_everyone()
    return {**summary, "output_dir": str(out)}


def check_peft_integration() -> None:
    """Refuse `--lora-r` in one line, before any work, when transformers' PEFT integration (which
    sentence-transformers' `add_adapter` goes through) refuses the installed peft: transformers 5.24 asks for peft
    0.22, newer than PyPI's 0.21.2. Only this path: cpt's LoRA calls peft directly and runs."""
    from importlib.metadata import version

    import transformers
    from packaging.version import Version
    from transformers.integrations import peft as integration

    wanted = getattr(integration, "MIN_PEFT_VERSION", None)
    if wanted and Version(version("peft")) < Version(wanted):
        raise EncoderizeError(f"contrastive --lora-r: transformers {transformers.__version__}'s PEFT integration needs "
                              f"peft >= {wanted} (installed: {version('peft')}); install a newer peft, or "
                              "transformers < 5.24, or drop --lora-r (a full fine-tune)")


DEFAULT_MAX_SEQ_LENGTH = 128


def _check_positions(source: Path, max_seq_length: int | None) -> int:
    """The tokens per text: the one asked for, or the default capped at the model's positions. Longer inputs than
    the model has positions for fail deep in the forward pass (an index error), so an explicit value above them is
    refused before the load, from the folder's config."""
    try:
        positions = json.loads((Path(source) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        positions = None  # no readable config here: the load below reports the folder
    if max_seq_length is None:
        return min(DEFAULT_MAX_SEQ_LENGTH, positions) if isinstance(positions, int) else DEFAULT_MAX_SEQ_LENGTH
    if isinstance(positions, int) and max_seq_length > positions:
        raise EncoderizeError(f"--max-seq-length {max_seq_length} is above the model's {positions} positions; pass "
                              f"--max-seq-length {positions} or less")
    return max_seq_length


def build_model(source: Path, config: ContrastiveConfig, dropout: dict, adapter: AdapterConfig):
    """The encoder as a sentence-transformers model with the chosen pooling, LoRA adapters added when asked."""
    from peft import LoraConfig
    from sentence_transformers import SentenceTransformer, models
    from transformers import set_seed

    max_seq_length = _check_positions(source, config.max_seq_length)
    master = None if adapter.lora_r else {"dtype": torch.float32}  # full fine-tune: fp32 master weights
    try:
        model = SentenceTransformer(str(source), device=None, config_kwargs=dropout or None, model_kwargs=master)
    except Exception as err:
        if is_remote_code_refusal(err):
            raise EncoderizeError(remote_code_message(str(source), flag=None)) from None
        raise EncoderizeError(f"cannot load {str(source)!r} as an encoder: {type(err).__name__}: "
                              f"{' '.join(str(err).split())[:200]}") from None
    model.max_seq_length = max_seq_length
    dim = model.get_embedding_dimension()
    pooling = models.Pooling(dim, pooling_mode=POOLINGS[config.pooling], include_prompt=not config.lead_token)
    model = SentenceTransformer(modules=[model[0], pooling], device=str(model.device))
    if adapter.lora_r:  # sentence-transformers' own PEFT integration: its checkpoints save and resume the adapters
        check_targets(model[0].auto_model, adapter)  # peft would pass over a target that matches nothing
        set_seed(config.seed)  # LoRA's A matrices start random; the Trainer seeds only later, in its __init__
        model.add_adapter(LoraConfig(r=int(adapter.lora_r), lora_alpha=int(adapter.lora_alpha),
                                     target_modules=target_modules(adapter), lora_dropout=0.0,
                                     task_type="FEATURE_EXTRACTION"))
    return model


def saved_prompts(config: ContrastiveConfig, tokenizer) -> dict[str, str]:
    """The sentence-transformers prompts the model is trained and saved with: "query", "document" and, with a lead
    token, "text" (the lead token alone, the default prompt)."""
    lead = _lead(config, tokenizer)
    prompts = {"query": lead + config.query_prefix, "document": lead + config.document_prefix, "text": lead}
    return {name: prompt for name, prompt in prompts.items() if prompt}


def _lead(config: ContrastiveConfig, tokenizer) -> str:
    return 2 * (tokenizer.eos_token or "") if config.lead_token else ""


def _training_args(config: ContrastiveConfig, work: Path, rows: int, prompts: dict | None):
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    # Several CPU processes (torchrun/accelerate with gloo): the trainer goes distributed only when told
    multi_cpu = not torch.cuda.is_available() and world_size() > 1
    return SentenceTransformerTrainingArguments(
        **({"ddp_backend": "gloo", "use_cpu": True} if multi_cpu else {}),
        output_dir=str(work / "trainer"), max_steps=config.steps, per_device_train_batch_size=config.batch_size,
        # transformers v5 reads a float warmup_steps below 1 as a ratio (warmup_ratio is deprecated)
        learning_rate=config.learning_rate, warmup_steps=config.warmup_ratio, lr_scheduler_type="linear",
        seed=config.seed, data_seed=config.seed, batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="steps", save_steps=config.save_every, save_total_limit=config.keep_last,
        report_to="none", logging_steps=max(1, config.steps // 20), disable_tqdm=not config.progress, prompts=prompts,
        dataloader_drop_last=rows >= config.batch_size,
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),  # autocast over the fp32 master weights
    )


def _write_output(trainer, model, source: Path, config: ContrastiveConfig, adapter: AdapterConfig, dropout: dict,
                  rows: int, out: Path, work: Path) -> dict:
    """Merge adapters, save under `work/final`, finish the folder, then move it into place (main process)."""
    final = work / "final"
    shutil.rmtree(final, ignore_errors=True)
    if adapter.lora_r:
        _merge_adapters(model, source, work / "adapter")
    saved_dtype = source_dtype(source)
    if saved_dtype is not None:
        model.to(saved_dtype)  # trained on fp32 master weights, saved in the encoder's dtype
    model.prompts = saved_prompts(config, model.tokenizer)
    model.default_prompt_name = "text" if "text" in model.prompts else None
    model.save(str(final))
    log = trainer.state.log_history
    summary = _finish_folder(final, source, config, dropout, [e["loss"] for e in log if "loss" in e], rows,
                             adapter, log)
    if out.is_symlink() or out.exists():  # allowed at the start; checked again now that it goes
        if out.is_dir() and not out.is_symlink() and any(out.iterdir()):
            outputs.check_deletable(out)
        out.unlink() if out.is_symlink() else shutil.rmtree(out)
    final.rename(out)
    if adapter.lora_r and adapter.save_adapter:  # the unmerged adapter, next to the merged model
        shutil.move(str(work / "adapter"), str(out / "adapter"))
    outputs.write_marker(out, "contrastive")  # what a later --overwrite may replace
    shutil.rmtree(work, ignore_errors=True)
    return {**summary, "steps": trainer.state.global_step}  # the steps trained, not the ones asked for


def source_dtype(source: Path) -> torch.dtype | None:
    """The floating dtype the encoder at `source` is saved in (config.json's `dtype`, or `torch_dtype` before
    transformers 5), None when it does not say."""
    config = json.loads((source / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


def _merge_adapters(model, source: Path, adapter_dir: Path) -> None:
    """Fold the trained LoRA adapters into the weights: the adapter is saved, then applied to a fresh copy of the
    source encoder and merged (peft's `merge_and_unload`), so the result is a plain model, as cpt's LoRA is."""
    from peft import PeftModel
    from transformers import AutoModel

    transformer = model[0]
    transformer.auto_model.save_pretrained(str(adapter_dir))  # the adapter only (transformers' PEFT integration)
    fresh = AutoModel.from_pretrained(str(source), dtype=transformer.auto_model.dtype)
    merged = PeftModel.from_pretrained(fresh, str(adapter_dir)).merge_and_unload()
    if isinstance(getattr(type(transformer), "auto_model", None), property):
        transformer.model = merged  # sentence-transformers >= 6: `auto_model` is a read-only alias of `model`
    else:
        transformer.auto_model = merged


def _finish_folder(folder: Path, source: Path, config: ContrastiveConfig, dropout: dict, logged: list, rows: int,
                   adapter: AdapterConfig, log: list):
    """Dropout back to the source's values, the shipped modeling file, the run record."""
    source_config = json.loads((source / "config.json").read_text())
    saved = json.loads((folder / "config.json").read_text())
    for name in dropout:
        saved[name] = source_config.get(name, 0.0)
    auto_map = {k: v for k, v in (saved.get("auto_map") or {}).items() if k != "AutoModelForMaskedLM"}
    if auto_map and (source / MODELING_FILE).is_file():
        shutil.copyfile(source / MODELING_FILE, folder / MODELING_FILE)
        saved["auto_map"] = auto_map
    else:
        saved.pop("auto_map", None)
    stage = {"objective": config.objective, "pooling": config.pooling, "loss": config.loss, "steps": config.steps,
             "batch_size": config.batch_size, "learning_rate": config.learning_rate, "scale": config.scale,
             "training_dropout": dropout, "rows": rows, "final_loss": logged[-1] if logged else None,
             "lora": {"r": adapter.lora_r, "alpha": adapter.lora_alpha, "targets": adapter.lora_targets,
                      "merged": True} if adapter.lora_r else None,
             "processes": world_size(),
             "lead": json.loads((folder / "config_sentence_transformers.json").read_text()).get("prompts", {}).get(
                 "text", "")}
    previous = saved.get("hf_encoderize") or {}
    saved["hf_encoderize"] = {**previous, "contrastive": stage}
    (folder / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    ContrastiveRecord(source=os.fspath(source), config=asdict(config), stage=stage, losses=logged,
                      facts={"metrics": log, "base_encoder": previous}).to_json(folder / CONTRASTIVE_RECORD)
    return {"objective": config.objective, "rows": rows, "steps": config.steps, "first_loss": logged[0] if logged
            else None, "final_loss": stage["final_loss"]}
