"""The card's results as the Hub reads them: `model-index` (huggingface_hub's `EvalResult`) and the newer
`.eval_results/*.yaml` (`EvalResultEntry`), from the eval summary and the MTEB summary.

Design choices:
- Only scores on real Hub datasets enter the metadata, each named by its Hub dataset id, config and split, taken from
  the loader's spec (`evaluation.loaders`, in the source set the run used). Synthetic offline sets and the smoke
  profile stay in the card's body, marked as such: a leaderboard must never read them as scores.
- A metric's name states its protocol: fine-tuned or frozen, the profile, the seeds and the selection rule
  ("accuracy (fine-tuned, quick profile, 1 seed, lr chosen on validation)"); `metric_args` holds the same facts.
- The source is this run, not the paper: the model's own repo, where `push` uploads the summary the scores come from
  (`eval/summary.json`); without a repo id the card names no source URL.
- MTEB scores are converted by mteb itself (`TaskResult.get_hf_eval_results`, from the task result files `eval
  --mteb` wrote), so they read as mteb writes them: dataset `mteb/...` at its revision, subset, split, main score.
- `.eval_results/hf-encoderize.yaml` holds one entry per real dataset (the schema has one value per dataset and task,
  no metric name: the main metric, the protocol in `notes`). The Hub shows such files for benchmark datasets that
  declare themselves benchmarks; the model-index stays the form every Hub page reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_encoderize.evaluation.loaders import DatasetSpec, dataset_spec
from hf_encoderize.publish.card_facts import CardFacts
from hf_encoderize.records.eval_summary import DatasetResult, EvalSummary

# Hub task ids for the model-index, per task family of the evaluation suite (paper, section 2).
TASK_TYPES = {"sc": "text-classification", "tc": "token-classification", "qa": "question-answering",
              "ir": "sentence-similarity"}
TASK_NAMES = {"sc": "Sequence classification", "tc": "Token classification", "qa": "Question answering",
              "ir": "Information retrieval"}
EVAL_RESULTS_FILE = ".eval_results/hf-encoderize.yaml"


def hub_spec(summary: EvalSummary, row: DatasetResult) -> DatasetSpec | None:
    """The loader's spec of a row when it is a real Hub dataset the metadata may name; None for a synthetic set, the
    smoke profile or a dataset no loader declares."""
    if summary.profile == "smoke":
        return None
    source = summary.protocol.dataset_source or "authors"
    try:
        spec = dataset_spec(row.dataset or "", source)
    except KeyError:
        return None
    return spec if spec.synthetic is None and spec.hub else None


def protocol_words(summary: EvalSummary, row: DatasetResult) -> str:
    """The protocol in a few words for a metric's name."""
    protocol = summary.protocol
    seeds = row.n_seeds or len(protocol.seeds or []) or 1
    how = "frozen encoder, task head only" if protocol.frozen else "fine-tuned"
    lrs = len(protocol.lrs or [])
    chosen = "lr chosen on validation" if lrs > 1 else "one lr"
    return f"{how}, {summary.profile} profile, {seeds} seed{'s' if seeds != 1 else ''}, {chosen}"


def source(facts: CardFacts) -> dict:
    """Where a score comes from: this run's summary in the model's own repo (`push` uploads it), else nothing."""
    if not facts.repo_id:
        return {}
    return {"source_name": "hf-encoderize eval (this model's run)",
            "source_url": f"https://huggingface.co/{facts.repo_id}/blob/main/eval/summary.json"}


def eval_results(facts: CardFacts) -> list:
    """One `EvalResult` per real dataset and metric of the encoder's summary (0-100 scale), then the MTEB scores."""
    from huggingface_hub import EvalResult

    summary, results = facts.results or EvalSummary(), []
    for row in summary.results:
        spec = hub_spec(summary, row)
        if spec is None:
            continue
        words = protocol_words(summary, row)
        args = {"protocol": words, "selection": summary.protocol.selection,
                "attention": summary.mode}
        for metric, value in {row.metric: row.test_mean, **(row.extra_metrics or {})}.items():
            if value is None:
                continue
            results.append(EvalResult(
                task_type=TASK_TYPES.get(row.task, row.task), task_name=TASK_NAMES.get(row.task),
                dataset_type=spec.hub, dataset_name=spec.name, dataset_config=spec.config,
                dataset_split=spec.test_split, dataset_revision=spec.revision, metric_type=metric,
                metric_value=value, metric_name=f"{metric} ({words})", metric_args=args, **source(facts)))
    return results + mteb_results(facts)


def mteb_results(facts: CardFacts) -> list:
    """The MTEB scores in mteb's own model-index form (`TaskResult.get_hf_eval_results`: dataset `mteb/...` at its
    revision, subset, split, main score as mteb reports it), read from the task result files `eval --mteb` wrote.
    A local BEIR collection is no MTEB task (mteb cannot name its dataset): it stays in the card's body only."""
    if not facts.mteb or not facts.mteb_dir:
        return []
    import warnings

    try:
        from mteb import TaskResult
    except ImportError:  # the results were made where mteb is installed; here the card's body still shows them
        return []

    results = []
    for task in facts.mteb.tasks:
        path = Path(facts.mteb_dir) / f"{task}.json"
        if not path.is_file():
            continue
        try:
            with warnings.catch_warnings():  # mteb marks the model-index form deprecated; the Hub still reads it
                warnings.simplefilter("ignore")
                results += TaskResult.from_dict(json.loads(path.read_text())).get_hf_eval_results()
        except (KeyError, ValueError, LookupError):
            continue  # not a task of mteb's registry: a local collection
    return results


def is_mteb_task(name: str) -> bool:
    """Whether `name` is a task of mteb's registry (a Hub dataset), not a local collection."""
    try:
        import mteb

        mteb.get_task(name)
    except (ImportError, KeyError, ValueError, LookupError):
        return False
    return True


def eval_result_entries(facts: CardFacts) -> list:
    """`.eval_results/*.yaml` entries: one per real dataset (its main metric), the protocol in `notes`."""
    from huggingface_hub import EvalResultEntry

    summary, entries = facts.results or EvalSummary(), []
    for row in summary.results:
        spec = hub_spec(summary, row)
        if spec is None or row.test_mean is None:
            continue
        found = source(facts)
        entries.append(EvalResultEntry(
            dataset_id=spec.hub, task_id=spec.config or spec.name, value=row.test_mean,
            dataset_revision=spec.revision if spec.revision and len(spec.revision) == 40 else None,
            source_url=found.get("source_url"), source_name=found.get("source_name"),
            notes=f"{row.metric}, 0-100, split {spec.test_split}: {protocol_words(summary, row)}"))
    return entries


def eval_results_yaml(facts: CardFacts) -> str | None:
    """The text of `.eval_results/hf-encoderize.yaml`, None when no real dataset was scored."""
    import yaml
    from huggingface_hub import eval_result_entries_to_yaml

    entries = eval_result_entries(facts)
    return yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False) if entries else None


def is_synthetic(summary: EvalSummary, row: DatasetResult) -> bool:
    """A row that stays out of the metadata (a synthetic set, the smoke profile, an undeclared dataset)."""
    return hub_spec(summary, row) is None
