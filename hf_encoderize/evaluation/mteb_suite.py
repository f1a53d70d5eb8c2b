"""`hf-encoderize eval MODEL --mteb TASKS`: zero-shot embedding scores through the `mteb` package.

The fine-tuning suite (`grid`) scores what an encoder becomes after task training; this scores what its sentence
embeddings are worth as they are, which is what the contrastive stage is for. MTEB is the benchmark people quote for
that, so we run MTEB itself (its tasks, metrics and sentence-transformers wrapper) rather than a copy.

Design choices:
- TASKS names MTEB tasks (`STS12,SciFact`, which mteb loads from the Hub) or local folders in the BEIR layout
  (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`), which become MTEB retrieval tasks of their own
  (`LocalRetrieval`): a user's private collection gets MTEB's retrieval metrics, and the tests run offline.
- Everything is checked before the model loads: the package, every name, every folder, and every Hub task's data
  (loaded up front, so an unreachable Hub is one `error:` line, not a traceback halfway through).
- The model is loaded as `SentenceTransformer(MODEL)`: a folder `contrastive` wrote keeps its pooling and its
  default prompt (the lead tokens), which mteb's wrapper leaves to sentence-transformers when a task has no prompt
  of its own; a plain encoder folder gets sentence-transformers' mean pooling.
- Results are MTEB's own task-result JSON, one file per task in `OUTPUT_DIR/<name>/mteb/`, plus `summary.json`
  with each task's main score. mteb's result cache (~/.cache/mteb) is not used: every call scores afresh. Two tasks
  with one name (a/scifact, b/scifact) or a task named `summary` would share a file, so they are refused up front.
- A later call adds its tasks to the summary's earlier ones only when the model is the same: `summary.json` records
  the model's identity (`model_identity`: its files' contents, and the max length), and a model replaced in the same
  folder (a rerun, `--overwrite`) or a changed --max-seq-length drops the earlier scores and their files, saying so.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.log import get_logger
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.records.eval_summary import MtebSummary

log = get_logger(__name__)

BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels")


def _say(message: str) -> None:
    log.info(message)


def evaluate_mteb(load: LoadConfig, cfg: EvalConfig, *, progress: Callable[[str], None] = _say) -> dict:
    """Score `load.source`'s sentence embeddings on the MTEB tasks or BEIR folders of `cfg.mteb`; write one result
    file per task and `summary.json` under `OUTPUT_DIR/<name>/mteb/`. Returns the summary."""
    mteb = _import_mteb()
    if load.gguf_file:
        raise EncoderizeError("eval --mteb scores a sentence-transformers or transformers folder, not a GGUF file; "
                              "convert it first (hf-encoderize convert) and pass the folder")
    tasks = resolve_tasks(cfg.mteb, progress)
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.evaluation.backbone import model_name

    name = cfg.name or model_name(load, False)
    out = Path(cfg.output_dir) / name / "mteb"
    earlier = _earlier_summary(out, load.source)
    device = None if cfg.device == "auto" else cfg.device
    try:
        model = SentenceTransformer(load.source, device=device, revision=load.revision,
                                    trust_remote_code=load.trust_remote_code)
    except (OSError, ValueError) as error:
        raise EncoderizeError(f"cannot load {load.source!r} as a sentence-transformers model "
                              f"({str(error).splitlines()[0]}); pass an encoder folder or Hub id") from None
    if model.max_seq_length is None or (cfg.max_length and cfg.max_length < model.max_seq_length):
        model.max_seq_length = cfg.max_length or 512
    progress(f"mteb: {len(tasks)} task(s) on {load.source} (pooling: {_pooling(model)}, "
             f"max length {model.max_seq_length})")
    identity = model_identity(load.source, load.revision, model.max_seq_length, skip=Path(cfg.output_dir))
    kept = _kept_scores(earlier, identity, out, progress)
    result = mteb.evaluate(model, tasks, cache=None, overwrite_strategy="always", show_progress_bar=False,
                           encode_kwargs={"batch_size": int(cfg.batch_size or 32)})
    main_scores = {task.metadata.name: task.metadata.main_score for task in tasks}
    scores = {}
    for task_result in result.task_results:
        write_json_atomic(out / f"{task_result.task_name}.json", task_result.to_dict())
        splits = {split: round(100 * float(task_result.get_score(splits=[split])), 2) for split in task_result.scores}
        scores[task_result.task_name] = {"main_score": main_scores[task_result.task_name], "splits": splits,
                                         "score": round(100 * float(task_result.get_score()), 2)}
        progress(f"mteb: {task_result.task_name}: {scores[task_result.task_name]['main_score']} "
                 f"{scores[task_result.task_name]['score']:.2f}")
    summary = MtebSummary(model=load.source, model_name=name, mteb_version=mteb.__version__,
                          tasks={**kept, **scores}, model_identity=identity, pooling=_pooling(model),
                          max_length=model.max_seq_length)
    summary.to_json(out / "summary.json")
    return summary.to_dict()


def render_mteb(summary: dict) -> str:
    """The summary as a Markdown table: task, main score, score (x100) per split."""
    lines = [f"MTEB zero-shot scores of {summary['model']} (mteb {summary['mteb_version']})", "",
             "| task | main score | score | per split |", "|---|---|---|---|"]
    for task, row in summary["tasks"].items():
        splits = ", ".join(f"{split} {value:.2f}" for split, value in row["splits"].items())
        lines.append(f"| {task} | {row['main_score']} | {row['score']:.2f} | {splits} |")
    return "\n".join(lines) + "\n"


def _earlier_summary(out: Path, source: str) -> MtebSummary:
    """`out/summary.json` as it is (empty when there is none), refusing another model's folder."""
    path = out / "summary.json"
    if not path.is_file():
        return MtebSummary()
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise EncoderizeError(f"{path} is not valid JSON; delete it to score afresh") from None
    if not isinstance(earlier, dict):
        raise EncoderizeError(f"{path} is not an MTEB summary of ours; delete it to score afresh")
    if earlier.get("model") != source:
        raise EncoderizeError(f"{out} holds MTEB results of another model ({earlier.get('model')!r}); pass --name or "
                              "--output-dir")
    return MtebSummary.from_dict(earlier)


def _kept_scores(earlier: MtebSummary, identity: dict, out: Path, progress: Callable[[str], None]) -> dict:
    """The earlier task scores when they were made with this very model and max length; otherwise none, and their
    result files are deleted (they are ours: named in the summary) so no stale score stays beside the new ones."""
    tasks = earlier.tasks if isinstance(earlier.tasks, dict) else {}
    if not tasks:
        return {}
    before = earlier.model_identity if isinstance(earlier.model_identity, dict) else {}
    if before == identity and identity.get("files"):
        return dict(tasks)
    changed = [key for key in ("files", "revision", "max_length") if before.get(key) != identity.get(key)]
    what = {"files": "the model's files", "revision": "the revision", "max_length": "the max length"}
    reason = (", ".join(what[key] for key in changed) + " changed" if before and identity.get("files")
              else "they cannot be tied to this model")
    progress(f"mteb: the earlier scores in {out} ({', '.join(tasks)}) are dropped: {reason} since they were made")
    for task in tasks:
        stale = out / f"{task}.json"
        if _is_task_name(task) and stale.is_file():
            stale.unlink()
    return {}


def _is_task_name(name: str) -> bool:
    """A plain file name that is not the summary: what a task result file of ours is called."""
    return bool(name) and Path(name).name == name and name not in (".", "..") and name.casefold() != "summary"


def model_identity(source: str, revision: str | None, max_length: int, *, skip: Path | None = None) -> dict:
    """What makes two scorings comparable: the model's files (a digest; None when they cannot be found, which
    never matches) and the max length."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        folder = _hub_snapshot(source, revision)
    return {"files": _files_digest(folder, skip) if folder else None, "revision": revision, "max_length": max_length}


def _hub_snapshot(source: str, revision: str | None) -> Path | None:
    """The local snapshot folder a Hub id was loaded from, or None."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "no snapshot to fingerprint": the scores are not kept
        return None


def _files_digest(folder: Path, skip: Path | None) -> str | None:
    """A digest of the files that define the model: every file's content when small; size, modification time and
    first MiB for large ones (weights), so a digest costs seconds even for big models. Cards (*.md), hidden files
    (our marker) and the results folder (when it lies inside the model folder) do not count."""
    skip = skip.expanduser().resolve() if skip else None
    digest, count = hashlib.sha256(), 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if (not path.is_file() or path.suffix == ".md" or any(part.startswith(".") for part in relative.parts)
                or (skip and path.resolve().is_relative_to(skip))):
            continue
        stat, count = path.stat(), count + 1
        with path.open("rb") as handle:
            head = handle.read(1 << 20)
        tail = b"" if stat.st_size <= len(head) else f"{stat.st_size}:{stat.st_mtime_ns}".encode()
        digest.update(f"{relative.as_posix()}\0".encode() + hashlib.sha256(head).digest() + tail + b"\n")
    return digest.hexdigest() if count else None


def _import_mteb():
    try:
        import mteb
    except ImportError:
        raise EncoderizeError("eval --mteb needs the mteb package: pip install 'hf-encoderize[mteb]'") from None
    return mteb


def _pooling(model) -> str:
    pooling = next((module for module in model if type(module).__name__ == "Pooling"), None)
    return getattr(pooling, "pooling_mode", None) or "unknown"


# ------------------------------------------------------------------------------------------------ tasks


def resolve_tasks(spec: str, progress: Callable[[str], None] = _say) -> list:
    """The MTEB task objects of a comma-separated list of names and BEIR folders, with their data loaded."""
    mteb = _import_mteb()
    items = [item.strip() for item in str(spec).split(",") if item.strip()]
    if not items:
        raise EncoderizeError("--mteb takes comma-separated MTEB task names or BEIR folders, got nothing")
    tasks, names = [], []
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            tasks.append(local_retrieval_task(path))
        elif any(sep in item for sep in ("/", "\\")) or path.suffix:
            raise EncoderizeError(f"--mteb: {item!r} is not a folder; pass an MTEB task name or a BEIR folder "
                                  "(corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
        else:
            names.append(item)
    if names:
        found = []
        for name in names:
            try:
                found.extend(mteb.get_tasks(tasks=[name]))
            except KeyError as error:
                hint = re.search(r"Did you mean:? '([^']+)'", str(error))
                raise EncoderizeError(f"--mteb: unknown MTEB task {name}; "
                                      + (f"did you mean {hint.group(1)}?" if hint else
                                         "names are case-sensitive, e.g. STS12, SciFact, NFCorpus")) from None
        for task in found:
            progress(f"mteb: loading {task.metadata.name} from the Hub ({task.metadata.dataset['path']})")
            try:
                task.load_data()
            except Exception as error:  # noqa: BLE001 - datasets/hub raise many types; all mean "no data"
                raise EncoderizeError(
                    f"--mteb: cannot load the data of {task.metadata.name} ({type(error).__name__}: "
                    f"{str(error).splitlines()[0] if str(error) else 'no message'}); MTEB tasks load from the Hub, "
                    "so connect (HF_HUB_OFFLINE unset) or pass a local BEIR folder") from None
        tasks.extend(found)
    _check_task_names(tasks)
    return tasks


def _check_task_names(tasks: list) -> None:
    """Each task's result is `<name>.json` beside `summary.json`: two tasks with one name (case-insensitively, as
    some file systems compare) would overwrite each other, and one named `summary` the summary."""
    seen: dict[str, str] = {}
    for task in tasks:
        name = task.metadata.name
        where = task.metadata.dataset.get("path") if task.metadata.dataset else None
        label = f"{name} ({where})" if where else name
        if name.casefold() == "summary":
            raise EncoderizeError(f"--mteb: a collection named {name!r} ({where}) would overwrite summary.json; "
                                  "rename its folder")
        if name.casefold() in seen:
            raise EncoderizeError(f"--mteb: two tasks are named {name!r}: {seen[name.casefold()]} and {label}; their "
                                  "results would overwrite each other: rename one folder, or score them in two calls "
                                  "with different --name")
        seen[name.casefold()] = label


def read_beir(path: Path) -> dict:
    """A BEIR folder as {split: {"corpus": [...], "queries": [...], "relevant_docs": {qid: {did: grade}}}}.

    Queries are those judged in the split's qrels; every judged id must exist in the corpus and the queries."""
    for name in BEIR_FILES:
        if not (path / name).exists():
            raise EncoderizeError(f"--mteb: {path} has no {name}; a BEIR folder holds corpus.jsonl, queries.jsonl "
                                  "and qrels/<split>.tsv")
    corpus = _read_jsonl(path / "corpus.jsonl", ("_id", "text"))
    queries = _read_jsonl(path / "queries.jsonl", ("_id", "text"))
    documents = [{"id": str(row["_id"]), "text": str(row["text"]), "title": str(row.get("title") or "")}
                 for row in corpus]
    query_text = {str(row["_id"]): str(row["text"]) for row in queries}
    doc_ids = {row["id"] for row in documents}
    splits = {}
    for qrels in sorted((path / "qrels").glob("*.tsv")):
        judged: dict[str, dict[str, int]] = {}
        reader = csv.reader(_text_lines(qrels), delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise EncoderizeError(f"--mteb: {qrels} must start with the header query-id, corpus-id, score "
                                  "(tab-separated)")
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                query, doc, grade = row[0], row[1], int(row[2])
            except (IndexError, ValueError):
                raise EncoderizeError(f"--mteb: {qrels} line {number} is not 'query-id<TAB>corpus-id<TAB>"
                                      "integer score'") from None
            if query not in query_text or doc not in doc_ids:
                what = f"query {query!r}" if query not in query_text else f"document {doc!r}"
                raise EncoderizeError(f"--mteb: {qrels} line {number} judges {what}, which is not in "
                                      f"{'queries' if query not in query_text else 'corpus'}.jsonl")
            judged.setdefault(query, {})[doc] = grade
        if judged:
            splits[qrels.stem] = {"corpus": documents,
                                  "queries": [{"id": q, "text": query_text[q]} for q in judged],
                                  "relevant_docs": judged}
    if not splits:
        raise EncoderizeError(f"--mteb: {path / 'qrels'} holds no judgements (qrels/<split>.tsv files)")
    return splits


def _read_jsonl(path: Path, keys: tuple[str, ...]) -> list[dict]:
    rows = []
    for number, line in enumerate(_text_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise EncoderizeError(f"--mteb: {path} line {number} is not JSON") from None
        missing = [key for key in keys if not isinstance(row, dict) or key not in row]
        if missing:
            raise EncoderizeError(f"--mteb: {path} line {number} has no {', '.join(missing)} field")
        # str(None) would be scored as the text "None", and an id of null would become the id "None".
        bad = [key for key in keys if not isinstance(row[key], str)
               and (key == "text" or isinstance(row[key], bool) or not isinstance(row[key], int))]
        if bad:
            raise EncoderizeError(f"--mteb: {path} line {number}: {bad[0]} is {json.dumps(row[bad[0]])}, not "
                                  f"{'a string' if bad[0] == 'text' else 'a string or integer'}; fix or drop that line")
        rows.append(row)
    if not rows:
        raise EncoderizeError(f"--mteb: {path} is empty")
    return rows


def _text_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a leading byte-order mark allowed); other bytes are one error naming the line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig").splitlines(keepends=True)
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise EncoderizeError(f"--mteb: {path} line {line} is not UTF-8 text (byte {data[error.start]:#04x}); "
                              "save the file as UTF-8") from None


def local_retrieval_task(path: Path):
    """An MTEB retrieval task (`AbsTaskRetrieval`) over the BEIR folder `path`, named after the folder."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    splits = read_beir(path)
    metadata = TaskMetadata(
        name=path.resolve().name, type="Retrieval", main_score="ndcg_at_10", category="t2t",
        description=f"Local BEIR-format retrieval collection {path.resolve()}, scored by hf-encoderize eval --mteb.",
        reference=None, dataset={"path": str(path.resolve()), "revision": "local"}, eval_splits=sorted(splits),
        eval_langs=["eng-Latn"], date=None, dialect=[], domains=[], task_subtypes=[], license="not specified",
        annotations_creators="derived", modalities=["text"], sample_creation="found", bibtex_citation="",
    )

    class LocalRetrieval(AbsTaskRetrieval):
        def load_data(self, num_proc: int | None = None, **kwargs) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {
                split: RetrievalSplitData(corpus=Dataset.from_list(data["corpus"]),
                                          queries=Dataset.from_list(data["queries"]),
                                          relevant_docs=data["relevant_docs"], top_ranked=None)
                for split, data in splits.items()}}
            self.data_loaded = True

    LocalRetrieval.metadata = metadata
    task = LocalRetrieval()
    task.load_data()
    return task
