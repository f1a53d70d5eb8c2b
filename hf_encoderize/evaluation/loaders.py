"""The paper's twelve evaluation datasets (section 2, Appendix B) and the synthetic sets, as canonical rows.

Design choices:
- One `DatasetSpec` per dataset: where it lives on the Hub, which splits to read, and a converter from the Hub row
  schema to the canonical row the task family reads. Converters are plain functions, tested on fixture files that
  have exactly the Hub schema (tests/fixtures/eval/).
- Splits follow the issue: the Hub train split is split 95/5 into train and validation with a fixed seed (the same
  for every run), and the original validation split serves as the test set.
- IR: MS MARCO trains and is evaluated; NQ and MLDR are evaluated only, after training on MS MARCO (Appendix B).
  Each query carries its labelled documents (positives and negatives); the evaluation corpus is the union of the
  labelled documents, as the paper does, which makes scores far easier than full-corpus BEIR/MTEB.
- A local copy replaces the Hub: `--data-dir DIR` reads `DIR/<name>/<split>.parquet|.jsonl|.json` in the Hub schema
  (e.g. `load_dataset("nyu-mll/glue", "sst2")["train"].to_parquet("DIR/sst2/train.parquet")`).
- Repos that still carry a loading script (which `datasets` >= 4 no longer runs) are read from the Hub's own parquet
  export, `revision="refs/convert/parquet"`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hf_encoderize.errors import EncoderizeError
from hf_encoderize.evaluation import synthetic

PARQUET_EXPORT = "refs/convert/parquet"
IR_NOTE = ("IR corpus restricted to the labelled documents of the evaluated queries (positives and negatives), as in "
           "the paper (Appendix B); far easier than full-corpus BEIR/MTEB scores, which these are not comparable to")
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
    task: str
    metric: str
    convert: Callable[[dict], dict | None] | None = None
    hub: str | None = None
    config: str | None = None
    revision: str | None = None
    train_split: str | None = "train"
    test_split: str = "validation"
    validation_split: str | None = None
    """A Hub split used as validation instead of 5% of train (MLDR's dev split)."""
    files: str | None = None
    """Path of one split's raw file inside the Hub repo (`{split}` filled in), read with the generic json builder:
    for repos whose loading script `datasets` >= 4 no longer runs and whose parquet export is not guaranteed."""
    train_from: str | None = None
    """Train (and validate, unless `validation_split`) on this other dataset: NQ and MLDR train on MS MARCO."""
    label_names: tuple[str, ...] = ()
    max_length: int | None = None
    """Longer inputs than the run's default (MLDR is the paper's long-document set)."""
    note: str | None = None
    synthetic: Callable[..., list[dict]] | None = None
    synthetic_kwargs: dict = field(default_factory=dict)

    @property
    def source(self) -> str:
        if self.synthetic is not None:
            return "synthetic (generated offline)"
        if self.files:
            return f"hf://datasets/{self.hub}/{self.files}"
        return " ".join(p for p in (self.hub, self.config, f"@{self.revision}" if self.revision else None) if p)


# ------------------------------------------------------------------------------------------------------ converters


def _sc(first: str, second: str | None) -> Callable[[dict], dict | None]:
    def convert(row: dict) -> dict | None:
        if row["label"] < 0:  # GLUE test splits carry label -1
            return None
        pair = row[second] if second else None
        return {"id": str(row["idx"]), "text": row[first], "text_pair": pair, "label": int(row["label"])}

    return convert


def _tc(tag_column: str, id_column: str | None) -> Callable[[dict], dict | None]:
    def convert(row: dict) -> dict | None:
        if not row["tokens"]:
            return None
        row_id = str(row[id_column]) if id_column else hashlib.sha1(" ".join(row["tokens"]).encode()).hexdigest()[:12]
        return {"id": row_id, "tokens": list(row["tokens"]), "tags": [int(t) for t in row[tag_column]]}

    return convert


def _squad(row: dict) -> dict:
    answers = row["answers"]
    return {"id": row["id"], "question": row["question"], "context": row["context"],
            "answers": {"text": list(answers["text"]), "answer_start": [int(s) for s in answers["answer_start"]]}}


def _record(row: dict) -> dict:
    """ReCoRD as extractive QA: the cloze query is the question, every occurrence of an answer entity a gold span.

    Spans are found in the passage text itself rather than taken from `entity_spans`, whose offsets refer to the
    passage before its `@highlight` markers were rewritten."""
    context = row["passage"]
    texts, starts = [], []
    for answer in dict.fromkeys(row["answers"]):
        start = context.find(answer)
        if start >= 0:
            texts.append(answer)
            starts.append(start)
    return {"id": f"{row['idx']['passage']}-{row['idx']['query']}", "question": row["query"], "context": context,
            "answers": {"text": texts, "answer_start": starts}}


def _doc_id(text: str) -> str:
    # MS MARCO v1.1 passages carry no id; the same passage under two queries is one corpus document.
    return "p" + hashlib.sha1(text.encode()).hexdigest()[:16]


def _msmarco(row: dict) -> dict | None:
    passages = row["passages"]
    docs = [{"id": _doc_id(text), "text": text, "grade": int(selected)}
            for text, selected in zip(passages["passage_text"], passages["is_selected"], strict=True)]
    return {"id": str(row["query_id"]), "query": row["query"], "docs": docs}


def _tevatron(row: dict) -> dict | None:
    """Tevatron-style rows (NQ, MLDR): positive and negative passages with document ids."""
    def text(passage: dict) -> str:
        return f"{passage['title']} {passage['text']}".strip() if passage.get("title") else passage["text"]

    docs = [{"id": str(p["docid"]), "text": text(p), "grade": 1} for p in row["positive_passages"]]
    docs += [{"id": str(p["docid"]), "text": text(p), "grade": 0} for p in row["negative_passages"]]
    return {"id": str(row["query_id"]), "query": row["query"], "docs": docs}


# --------------------------------------------------------------------------------------------------------- registry

REAL = (
    DatasetSpec("sst2", "sc", "accuracy", _sc("sentence", None), "nyu-mll/glue", "sst2", label_names=("neg", "pos")),
    DatasetSpec("mnli", "sc", "accuracy", _sc("premise", "hypothesis"), "nyu-mll/glue", "mnli",
                test_split="validation_matched", label_names=("entailment", "neutral", "contradiction")),
    DatasetSpec("qqp", "sc", "accuracy", _sc("question1", "question2"), "nyu-mll/glue", "qqp",
                label_names=("not_duplicate", "duplicate")),
    DatasetSpec("conll2003", "tc", "f1", _tc("ner_tags", "id"), "eriktks/conll2003", "conll2003",
                revision=PARQUET_EXPORT, label_names=CONLL_TAGS),
    DatasetSpec("ontonotes5", "tc", "f1", _tc("tags", None), "tner/ontonotes5", "ontonotes5",
                revision=PARQUET_EXPORT, label_names=ONTONOTES_TAGS),
    DatasetSpec("uner", "tc", "f1", _tc("ner_tags", "idx"), "universalner/universal_ner", "en_ewt",
                revision=PARQUET_EXPORT, label_names=UNER_TAGS),
    DatasetSpec("squad", "qa", "f1", _squad, "rajpurkar/squad", "plain_text"),
    DatasetSpec("squad_v2", "qa", "f1", _squad, "rajpurkar/squad_v2", "squad_v2"),
    DatasetSpec("record", "qa", "f1", _record, "aps/super_glue", "record"),
    DatasetSpec("msmarco", "ir", "ndcg@10", _msmarco, "microsoft/ms_marco", "v1.1", note=IR_NOTE),
    DatasetSpec("nq", "ir", "ndcg@10", _tevatron, "Tevatron/wikipedia-nq", "default", revision=PARQUET_EXPORT,
                train_split=None, test_split="dev", train_from="msmarco",
                note=IR_NOTE + "; trained on MS MARCO, learning rate chosen on MS MARCO validation"),
    # Shitao/MLDR is a loading-script repo (MLDR.py); the script reads mldr-v1.0-<lang>/<split>.jsonl.gz, so do we.
    DatasetSpec("mldr", "ir", "ndcg@10", _tevatron, "Shitao/MLDR", "en", files="mldr-v1.0-en/{split}.jsonl.gz",
                train_split=None, test_split="test", validation_split="dev", train_from="msmarco", max_length=2048,
                note=IR_NOTE + "; trained on MS MARCO, learning rate chosen on MLDR dev"),
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
TASKS = ("sc", "tc", "qa", "ir")


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


def _read_hub(spec: DatasetSpec, split: str) -> list[dict]:
    import datasets

    try:
        if spec.files:
            where = f"hf://datasets/{spec.hub}@{spec.revision or 'main'}/{spec.files.format(split=split)}"
            rows = datasets.load_dataset("json", data_files=where, split="train")  # the one file is one "train"
        else:
            rows = datasets.load_dataset(spec.hub, spec.config, split=split, revision=spec.revision)
    except Exception as err:  # datasets raises many types (ConnectionError, FileNotFoundError, RuntimeError, ...)
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("HF_DATASETS_OFFLINE")
        reason = "the Hub is offline (HF_HUB_OFFLINE is set)" if offline else type(err).__name__
        raise EncoderizeError(
            f"dataset {spec.name!r} needs the Hugging Face Hub ({spec.source}, split {split!r}) and could not be "
            f"loaded: {reason}; or point at a local copy with --data-dir DIR holding DIR/{spec.name}/{split}.parquet "
            f"(or .jsonl) in the Hub schema"
        ) from None
    return list(rows)


def _json_line(line: str, path: Path, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise EncoderizeError(f"{path} line {number}: not valid JSON ({err.msg}); fix or remove the line") from None
    if not isinstance(row, dict):
        raise EncoderizeError(f"{path} line {number}: a JSON {type(row).__name__}, not an object with the Hub columns")
    return row


def read_split(spec: DatasetSpec, split: str, data_dir: str | None) -> list[dict]:
    """Canonical rows of one Hub split of `spec` (from `data_dir` when given, else from the Hub). A row without the
    Hub schema's columns (or with values of the wrong kind) is one error naming the dataset, split and row."""
    raw = _read_local(spec, split, data_dir) if data_dir else _read_hub(spec, split)
    rows = []
    for index, row in enumerate(raw):
        try:
            rows.append(spec.convert(row))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            columns = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
            raise EncoderizeError(f"dataset {spec.name!r}, {split} split, row {index}: not in the Hub schema of "
                                  f"{spec.source} ({type(err).__name__}: {err}; columns: {columns})") from None
    return [row for row in rows if row is not None]


def split_train(rows: list[dict], fraction: float = 0.05) -> tuple[list[dict], list[dict]]:
    """Split the Hub train split 95/5 into train and validation, with a fixed seed shared by every run."""
    order = list(range(len(rows)))
    random.Random(1234).shuffle(order)
    n_val = max(1, round(len(rows) * fraction)) if len(rows) > 1 else 0
    return [rows[i] for i in sorted(order[n_val:])], [rows[i] for i in sorted(order[:n_val])]


def load_splits(spec: DatasetSpec, *, data_dir: str | None = None, sizes: dict | None = None,
                max_eval_examples: int | None = None) -> dict[str, list[dict]]:
    """`{"train", "validation", "test"}` canonical rows for `spec`.

    `sizes` gives the synthetic sets' sizes (`train`, `test`; validation is 5% of train)."""
    if spec.synthetic is not None:
        sizes = sizes or {"train": 600, "test": 200}
        pool = spec.synthetic(round(sizes["train"] / 0.95), seed=0, test=False, **spec.synthetic_kwargs)
        train, validation = split_train(pool)
        test = spec.synthetic(sizes["test"], seed=0, test=True, **spec.synthetic_kwargs)
    else:
        source = DATASETS[spec.train_from] if spec.train_from else spec
        train, validation = split_train(read_split(source, source.train_split, data_dir))
        if spec.validation_split:
            validation = read_split(spec, spec.validation_split, data_dir)
        test = read_split(spec, spec.test_split, data_dir)
    if max_eval_examples:
        validation, test = validation[:max_eval_examples], test[:max_eval_examples]
    for split, rows in (("train", train), ("validation", validation), ("test", test)):
        if not rows:
            raise EncoderizeError(f"dataset {spec.name!r} has no usable {split} rows; check its source {spec.source}")
    return {"train": train, "validation": validation, "test": test}
