"""The paper's twelve evaluation datasets (section 2, Appendix B) and the synthetic sets, as canonical rows.

Design choices:
- One `DatasetSpec` per dataset: where it lives on the Hub, which splits to read, and a converter from the Hub row
  schema to the canonical row the task family reads (`evaluation.converters`, plain functions tested on fixture files
  that have exactly the Hub schema).
- Two source sets. `authors` (the default) reads the Hub copies the authors' evaluation code loads (EncodEval, branch
  MLM_vs_CLM, encodeval/datasets.py): nyu-mll/glue, hgissbkh/conll2003-en, hgissbkh/ontonotes5, hgissbkh/uner_en,
  rajpurkar/squad(_v2), hgissbkh/record, hgissbkh/msmarco-pairs (IR training), BeIR/msmarco(-qrels), BeIR/nq(-qrels),
  hgissbkh/mldr-en, with their input templates ("Premise: ...\nHypothesis: ...", "Query: ", "Document: ").
  `original` (`--dataset-source original`) reads the upstream repos this package used first.
- Splits (Appendix B): where the test set is not public (SC, QA) the Hub train split is split 95/5 into train and
  validation, as EncodEval's `train_test_split(train_size=0.95, seed=42)` (same indices), and the original validation
  split is the test set. TC (CoNLL, OntoNotes, UNER) has public test splits: trained on train, learning rate chosen on
  validation, scored on test (EncodEval's TC loaders keep the three splits).
- IR: MS MARCO trains; NQ and MLDR are evaluated after MS MARCO training (section 2). MS MARCO: validation is BeIR's
  dev qrels, test BeIR's test qrels (TREC DL 2019). NQ has one judged split, so its queries are halved at random
  (fixed seed here; EncodEval's `nq()` samples half for validation), and the learning rate is chosen on NQ's half.
  MLDR: dev and test. The corpus is the union of the judged documents of both evaluation splits, as EncodEval's loaders
  build it (Appendix B: "we restrict the corpus to labeled documents only"); a document is relevant when its qrels
  score is at least 1 (EncodEval: `if example["score"] >= 1`). Far easier than full-corpus BEIR/MTEB scores.
- A local copy replaces the Hub: `--data-dir DIR` reads `DIR/<name>/<split>.parquet|.jsonl|.json` in the Hub schema
  (e.g. `load_dataset("nyu-mll/glue", "sst2")["train"].to_parquet("DIR/sst2/train.parquet")`); the authors' IR sets
  read `DIR/<name>/{queries,corpus,qrels_validation,qrels_test}` (BeIR) or `DIR/mldr/{dev,test,corpus}`, and MS MARCO
  training pairs `DIR/msmarco-pairs/train`.
- Repos that still carry a loading script (which `datasets` >= 4 no longer runs) are read from the Hub's own parquet
  export, `revision="refs/convert/parquet"`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation import synthetic
from hf_encoderize.evaluation.converters import (
    beir,
    halve_queries,
    mldr_authors,
    msmarco,
    msmarco_pairs,
    record,
    record_authors,
    sc,
    sc_template,
    squad,
    tc,
    tevatron,
)

# The task families (section 2) and the two source sets of the datasets: `eval`'s --tasks and --dataset-source.
Task = Literal["sc", "tc", "qa", "ir"]
DatasetSource = Literal["authors", "original"]
PARQUET_EXPORT = "refs/convert/parquet"
IR_NOTE = ("IR corpus restricted to the labelled documents (judged in the qrels) of the evaluation queries, as in "
           "the paper (Appendix B) and the authors' loaders; far easier than full-corpus BEIR/MTEB scores, which "
           "these are not comparable to")
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
UNER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
# tner/ontonotes5 dataset/label.json (label2id), in id order.
ONTONOTES_TAGS = (
    "O", "B-CARDINAL", "B-DATE", "I-DATE", "B-PERSON", "I-PERSON", "B-NORP", "B-GPE", "I-GPE", "B-LAW", "I-LAW",
    "B-ORG", "I-ORG", "B-PERCENT", "I-PERCENT", "B-ORDINAL", "B-MONEY", "I-MONEY", "B-WORK_OF_ART", "I-WORK_OF_ART",
    "B-FAC", "B-TIME", "I-CARDINAL", "B-LOC", "B-QUANTITY", "I-QUANTITY", "I-NORP", "I-LOC", "B-PRODUCT", "I-TIME",
    "B-EVENT", "I-EVENT", "I-FAC", "B-LANGUAGE", "I-PRODUCT", "I-ORDINAL", "I-LANGUAGE",
)  # fmt: skip


@dataclass(frozen=True)
class DatasetSpec:
    """One evaluation dataset: its task family, metric, source and the converter to canonical rows."""

    name: str
    task: Task
    metric: str
    convert: Callable[[dict], dict | None] | None = None
    hub: str | None = None
    config: str | None = None
    revision: str | None = None
    train_split: str | None = "train"
    test_split: str = "validation"
    validation_split: str | None = None
    """A Hub split used as validation instead of 5% of train (TC's validation, MLDR's dev); train is then whole."""
    query_split: float | None = None
    """Fraction of the test split's queries held out as validation (NQ, which has one judged split)."""
    files: str | None = None
    """Path of one split's raw file inside the Hub repo (`{split}` filled in), read with the generic json builder:
    for repos whose loading script `datasets` >= 4 no longer runs and whose parquet export is not guaranteed."""
    parts: dict = field(default_factory=dict)
    """Split or part name -> (repo, config, split, revision) where it is not `hub`/`config`/`revision` (BeIR's
    queries, corpus and qrels live in two repos)."""
    reader: Callable | None = None
    """Builds the evaluation splits itself: `reader(read) -> (validation, test, corpus)`, `read(part)` giving raw rows
    (the authors' IR sets: queries, corpus and qrels joined)."""
    train_from: str | None = None
    """Train on this other dataset (its own training rows): NQ and MLDR train on MS MARCO, MS MARCO on its pairs."""
    source_set: DatasetSource = "authors"
    """`authors` (EncodEval's Hub copies) or `original` (upstream repos); `train_from` resolves in the same set."""
    label_names: tuple[str, ...] = ()
    max_length: int | None = None
    """Longer inputs than the quick profile's 512 (MLDR is the paper's long-document set)."""
    note: str | None = None
    synthetic: Callable[..., list[dict]] | None = None
    synthetic_kwargs: dict = field(default_factory=dict)

    @property
    def source(self) -> str:
        if self.synthetic is not None:
            return "synthetic (generated offline)"
        if self.files:
            return f"hf://datasets/{self.hub}/{self.files}"
        repos = dict.fromkeys([self.hub] + [part[0] for part in self.parts.values()])
        return " + ".join(" ".join(p for p in (repo, self.config if repo == self.hub else None,
                                                f"@{self.revision}" if self.revision and repo == self.hub else None)
                                   if p) for repo in repos if repo)


# --------------------------------------------------------------------------------------------------------- registry

_BEIR_PARQUET = PARQUET_EXPORT  # BeIR/msmarco and BeIR/nq carry loading scripts (EncodEval: trust_remote_code=True)
_MSMARCO_PARTS = {"queries": ("BeIR/msmarco", "queries", "queries", _BEIR_PARQUET),
                  "corpus": ("BeIR/msmarco", "corpus", "corpus", _BEIR_PARQUET),
                  "qrels_validation": ("BeIR/msmarco-qrels", None, "validation", None),
                  "qrels_test": ("BeIR/msmarco-qrels", None, "test", None)}
_NQ_PARTS = {"queries": ("BeIR/nq", "queries", "queries", _BEIR_PARQUET),
             "corpus": ("BeIR/nq", "corpus", "corpus", _BEIR_PARQUET),
             "qrels_test": ("BeIR/nq-qrels", None, "test", None)}
_MLDR_PARTS = {"dev": ("hgissbkh/mldr-en", "default", "dev", None),
               "test": ("hgissbkh/mldr-en", "default", "test", None),
               "corpus": ("hgissbkh/mldr-en", "corpus", "corpus", None)}

# EncodEval encodeval/datasets.py, one entry per loader; the TC copies keep train/validation/test.
REAL = (
    DatasetSpec("sst2", "sc", "accuracy", sc("sentence", None), "nyu-mll/glue", "sst2", label_names=("neg", "pos")),
    DatasetSpec("mnli", "sc", "accuracy", sc_template("premise", "hypothesis", "Premise: {}\nHypothesis: {}"),
                "nyu-mll/glue", "mnli", test_split="validation_matched",
                label_names=("entailment", "neutral", "contradiction")),
    DatasetSpec("qqp", "sc", "accuracy", sc_template("question1", "question2", "Question 1: {}\nQuestion 2: {}"),
                "nyu-mll/glue", "qqp", label_names=("not_duplicate", "duplicate")),
    DatasetSpec("conll2003", "tc", "f1", tc("ner", None, "words"), "hgissbkh/conll2003-en", test_split="test",
                validation_split="validation", label_names=CONLL_TAGS),
    DatasetSpec("ontonotes5", "tc", "f1", tc("tags", None), "hgissbkh/ontonotes5", revision=PARQUET_EXPORT,
                test_split="test", validation_split="validation", label_names=ONTONOTES_TAGS),
    DatasetSpec("uner", "tc", "f1", tc("ner_tags", "idx"), "hgissbkh/uner_en", test_split="test",
                validation_split="validation", label_names=UNER_TAGS),
    DatasetSpec("squad", "qa", "f1", squad, "rajpurkar/squad", "plain_text"),
    DatasetSpec("squad_v2", "qa", "f1", squad, "rajpurkar/squad_v2", "squad_v2"),
    DatasetSpec("record", "qa", "f1", record_authors, "hgissbkh/record"),
    DatasetSpec("msmarco", "ir", "ndcg@10", hub="BeIR/msmarco", parts=_MSMARCO_PARTS, train_from="msmarco-pairs",
                reader=beir(lambda r: f"Document: {r['text']}", ("validation", "test")),
                note=IR_NOTE + "; validation: BeIR dev qrels, test: BeIR test qrels (TREC DL 2019)"),
    DatasetSpec("nq", "ir", "ndcg@10", hub="BeIR/nq", parts=_NQ_PARTS, train_from="msmarco-pairs", query_split=0.5,
                reader=beir(lambda r: f"Document: {r['title']}. {r['text']}", ("test",), fraction=0.5),
                note=IR_NOTE + "; trained on MS MARCO; NQ's judged queries halved (fixed seed): learning rate chosen "
                               "on one half, scored on the other"),
    DatasetSpec("mldr", "ir", "ndcg@10", hub="hgissbkh/mldr-en", parts=_MLDR_PARTS, train_from="msmarco-pairs",
                reader=mldr_authors, max_length=2048,
                note=IR_NOTE + "; trained on MS MARCO, learning rate chosen on MLDR dev; corpus: positives only"),
)
TRAIN_ONLY = (
    DatasetSpec("msmarco-pairs", "ir", "ndcg@10", msmarco_pairs, "hgissbkh/msmarco-pairs"),
)
# The upstream repos this package read first (`--dataset-source original`), where they differ from the authors'.
ORIGINAL = (
    DatasetSpec("sst2", "sc", "accuracy", sc("sentence", None), "nyu-mll/glue", "sst2", label_names=("neg", "pos"),
                source_set="original"),
    DatasetSpec("mnli", "sc", "accuracy", sc("premise", "hypothesis"), "nyu-mll/glue", "mnli",
                test_split="validation_matched", label_names=("entailment", "neutral", "contradiction"),
                source_set="original"),
    DatasetSpec("qqp", "sc", "accuracy", sc("question1", "question2"), "nyu-mll/glue", "qqp",
                label_names=("not_duplicate", "duplicate"), source_set="original"),
    DatasetSpec("conll2003", "tc", "f1", tc("ner_tags", "id"), "eriktks/conll2003", "conll2003",
                revision=PARQUET_EXPORT, test_split="test", validation_split="validation", label_names=CONLL_TAGS,
                source_set="original"),
    DatasetSpec("ontonotes5", "tc", "f1", tc("tags", None), "tner/ontonotes5", "ontonotes5",
                revision=PARQUET_EXPORT, test_split="test", validation_split="validation",
                label_names=ONTONOTES_TAGS, source_set="original"),
    DatasetSpec("uner", "tc", "f1", tc("ner_tags", "idx"), "universalner/universal_ner", "en_ewt",
                revision=PARQUET_EXPORT, test_split="test", validation_split="validation", label_names=UNER_TAGS,
                source_set="original"),
    DatasetSpec("record", "qa", "f1", record, "aps/super_glue", "record", source_set="original"),
    DatasetSpec("msmarco", "ir", "ndcg@10", msmarco, "microsoft/ms_marco", "v1.1", note=IR_NOTE,
                source_set="original"),
    DatasetSpec("nq", "ir", "ndcg@10", tevatron, "Tevatron/wikipedia-nq", "default", revision=PARQUET_EXPORT,
                train_split=None, test_split="dev", query_split=0.5, train_from="msmarco", source_set="original",
                note=IR_NOTE + "; trained on MS MARCO; NQ dev queries halved (fixed seed): learning rate chosen on "
                               "one half, scored on the other"),
    # Shitao/MLDR is a loading-script repo (MLDR.py); the script reads mldr-v1.0-<lang>/<split>.jsonl.gz, so do we.
    DatasetSpec("mldr", "ir", "ndcg@10", tevatron, "Shitao/MLDR", "en", files="mldr-v1.0-en/{split}.jsonl.gz",
                train_split=None, test_split="test", validation_split="dev", train_from="msmarco", max_length=2048,
                source_set="original", note=IR_NOTE + "; trained on MS MARCO, learning rate chosen on MLDR dev"),
)
SYNTHETIC = (
    DatasetSpec("syn-sentiment", "sc", "accuracy", synthetic=synthetic.sentiment, label_names=("negative", "positive"),
                note="synthetic offline set; test words unseen in training"),
    DatasetSpec("syn-entities", "tc", "f1", synthetic=synthetic.entities, label_names=tuple(synthetic.TAG_NAMES),
                note="synthetic offline set; test entities unseen in training"),
    DatasetSpec("syn-qa", "qa", "f1", synthetic=synthetic.question_answering,
                note="synthetic offline set; test answers unseen in training"),
    DatasetSpec("syn-qa-v2", "qa", "f1", synthetic=synthetic.question_answering,
                synthetic_kwargs={"unanswerable": 0.33},
                note="synthetic offline set with unanswerable questions; test answers unseen in training"),
    DatasetSpec("syn-retrieval", "ir", "ndcg@10", synthetic=synthetic.retrieval,
                note="synthetic offline set; " + IR_NOTE.split(",")[0]),
)
DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in REAL + SYNTHETIC}
TASKS = get_args(Task)
_BY_SOURCE = {"authors": {s.name: s for s in REAL + TRAIN_ONLY + SYNTHETIC},
              "original": {**{s.name: s for s in REAL + SYNTHETIC}, **{s.name: s for s in ORIGINAL}}}


def dataset_spec(name: str, source: DatasetSource = "authors") -> DatasetSpec:
    """The spec of `name` in the `authors` (default) or `original` source set."""
    return _BY_SOURCE[source][name]


# ---------------------------------------------------------------------------------------------------------- reading


def _read_local(spec: DatasetSpec, split: str, data_dir: str) -> list[dict]:
    folder = Path(os.path.expanduser(data_dir)) / spec.name
    for suffix in (".parquet", ".jsonl", ".json"):
        path = folder / f"{split}{suffix}"
        if path.is_file():
            if suffix == ".parquet":
                import pyarrow.parquet as pq

                return pq.read_table(path).to_pylist()
            try:
                with open(path, encoding="utf-8") as handle:
                    if suffix == ".json" and handle.read(1) == "[":
                        handle.seek(0)
                        return json.load(handle)
                    handle.seek(0)
                    return [_json_line(line, path, number) for number, line in enumerate(handle, 1) if line.strip()]
            except UnicodeDecodeError:
                raise EncoderizeError(f"{path}: not UTF-8 text; --data-dir needs the Hub files as JSON lines or "
                                      "parquet") from None
            except json.JSONDecodeError as err:
                raise EncoderizeError(f"{path}: not valid JSON ({err.msg}); fix the file") from None
    raise EncoderizeError(
        f"local copy of {spec.name!r} has no {split!r} split: expected {folder}/{split}.parquet (or .jsonl/.json) "
        f"in the Hub schema of {spec.source}"
    )


def _read_hub(spec: DatasetSpec, split: str):
    """The raw rows of one split (or part) of `spec` on the Hub, as a lazily read `datasets.Dataset`."""
    import datasets

    repo, config, hub_split, revision = spec.parts.get(split, (spec.hub, spec.config, split, spec.revision))
    try:
        if spec.files:
            where = f"hf://datasets/{repo}@{revision or 'main'}/{spec.files.format(split=split)}"
            return datasets.load_dataset("json", data_files=where, split="train")  # the one file is one "train"
        return datasets.load_dataset(repo, config, split=hub_split, revision=revision)
    except Exception as err:  # datasets raises many types (ConnectionError, FileNotFoundError, RuntimeError, ...)
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("HF_DATASETS_OFFLINE")
        reason = "the Hub is offline (HF_HUB_OFFLINE is set)" if offline else type(err).__name__
        raise EncoderizeError(
            f"dataset {spec.name!r} needs the Hugging Face Hub ({spec.source}, split {split!r}) and could not be "
            f"loaded: {reason}; point at a local copy with --data-dir DIR holding DIR/{spec.name}/{split}.parquet "
            f"(or .jsonl) in the Hub schema, or run the offline synthetic sets with --profile smoke"
        ) from None


def _json_line(line: str, path: Path, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise EncoderizeError(f"{path} line {number}: not valid JSON ({err.msg}); fix or remove the line") from None
    if not isinstance(row, dict):
        raise EncoderizeError(f"{path} line {number}: a JSON {type(row).__name__}, not an object with the Hub columns")
    return row


def read_raw(spec: DatasetSpec, split: str, data_dir: str | None):
    """Raw rows of one split (or IR part: queries, corpus, qrels_test, ...) in the Hub schema."""
    return _read_local(spec, split, data_dir) if data_dir else _read_hub(spec, split)


def read_split(spec: DatasetSpec, split: str, data_dir: str | None) -> list[dict]:
    """Canonical rows of one Hub split of `spec` (from `data_dir` when given, else from the Hub). A row without the
    Hub schema's columns (or with values of the wrong kind) is one error naming the dataset, split and row."""
    rows = []
    for index, row in enumerate(read_raw(spec, split, data_dir)):
        try:
            rows.append(spec.convert(row))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise _schema_error(spec, split, index, row, err) from None
    return [row for row in rows if row is not None]


def _schema_error(spec: DatasetSpec, split: str, index, row, err: Exception) -> EncoderizeError:
    columns = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
    return EncoderizeError(f"dataset {spec.name!r}, {split} split, row {index}: not in the Hub schema of "
                           f"{spec.source} ({type(err).__name__}: {err}; columns: {columns})")


def split_train(rows: list, fraction: float = 0.05, seed: int = 42) -> tuple[list, list]:
    """Split the Hub train split 95/5 into train and validation, with the indices of EncodEval's
    `dataset["train"].train_test_split(train_size=0.95, seed=42)` (datasets' permutation of `default_rng(seed)`:
    the first `n - floor(0.95 n)` permuted rows are validation). Fixed, so every run shares it."""
    import numpy as np

    if len(rows) < 2:
        return list(rows), []
    n_train = math.floor((1 - fraction) * len(rows))
    permutation = np.random.default_rng(seed).permutation(len(rows)).tolist()
    n_val = len(rows) - n_train
    return [rows[i] for i in sorted(permutation[n_val:])], [rows[i] for i in sorted(permutation[:n_val])]


def _own_train(spec: DatasetSpec, data_dir: str | None) -> tuple[list[dict], list[dict] | None]:
    """The rows `spec` trains on, and its 95/5 validation when it has no validation of its own. A dataset that
    trains on another (`train_from`) gets exactly that dataset's training rows, so shared runs see the same data."""
    rows = read_split(spec, spec.train_split, data_dir)
    if spec.validation_split or spec.reader or spec.query_split or spec.name in {s.name for s in TRAIN_ONLY}:
        return rows, None
    return split_train(rows)


def _eval_splits(spec: DatasetSpec, data_dir: str | None, validation: list[dict] | None):
    """(validation, test, shared corpus or None) of a real dataset."""
    if spec.reader is not None:
        def read(part: str):
            return read_raw(spec, part, data_dir)

        try:
            return spec.reader(read)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise EncoderizeError(f"dataset {spec.name!r}: not in the Hub schema of {spec.source} "
                                  f"({type(err).__name__}: {err})") from None
    test = read_split(spec, spec.test_split, data_dir)
    if spec.validation_split:
        validation = read_split(spec, spec.validation_split, data_dir)
    elif spec.query_split:  # NQ: learning rate chosen on NQ's own held-out queries, not on the training set's
        held = set(halve_queries([(row["id"],) for row in test], spec.query_split)[0])
        validation, test = [r for r in test if (r["id"],) in held], [r for r in test if (r["id"],) not in held]
    return validation, test, None


def load_splits(spec: DatasetSpec, *, data_dir: str | None = None, sizes: dict | None = None,
                max_eval_examples: int | None = None) -> dict[str, list[dict]]:
    """`{"train", "validation", "test"}` canonical rows for `spec` (plus `corpus`, the documents shared by both IR
    evaluation splits, for the authors' IR sets).

    `sizes` gives the synthetic sets' sizes (`train`, `test`; validation is 5% of train)."""
    corpus = None
    if spec.synthetic is not None:
        sizes = sizes or {"train": 600, "test": 200}
        pool = spec.synthetic(round(sizes["train"] / 0.95), seed=0, test=False, **spec.synthetic_kwargs)
        train, validation = split_train(pool)
        test = spec.synthetic(sizes["test"], seed=0, test=True, **spec.synthetic_kwargs)
    else:
        source = dataset_spec(spec.train_from, spec.source_set) if spec.train_from else spec
        train, validation = _own_train(source, data_dir)
        validation, test, corpus = _eval_splits(spec, data_dir, None if spec.train_from else validation)
    if max_eval_examples:
        validation, test = validation[:max_eval_examples], test[:max_eval_examples]
    for split, rows in (("train", train), ("validation", validation), ("test", test)):
        if not rows:
            raise EncoderizeError(f"dataset {spec.name!r} has no usable {split} rows; check its source {spec.source}")
    splits = {"train": train, "validation": validation, "test": test}
    return splits if corpus is None else {**splits, "corpus": corpus}
