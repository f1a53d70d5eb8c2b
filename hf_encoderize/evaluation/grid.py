"""Run the grid (dataset x learning rate x seed), one results.json per run, then write the summary.

Design choices:
- Every run writes `RESULTS/<task>/<dataset>/lr<lr>_sd<seed>/results.json` atomically (temp file + rename), so an
  interrupted grid leaves only finished runs behind; re-running skips them and resumes.
- A finished run made with another protocol (steps, batch size, length, model, mode) is never overwritten: the grid
  refuses to start and says which folder differs.
- Everything that can fail on bad input (unknown names, unreachable datasets, an unloadable model) fails before the
  first run; datasets are read and tokenised once per grid (in memory), the model loaded once.
- One bar over the whole grid (the paper profile is 360 fine-tunings), with its ETA, on stderr; each run's start and
  scores are progress lines above it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.identity import differing
from hf_encoderize.common.log import ProgressBar, get_logger
from hf_encoderize.evaluation.config import SMOKE_SIZES, EvalConfig, fingerprint_keys, lr_key, model_limit
from hf_encoderize.evaluation.frozen import FrozenBackbone
from hf_encoderize.evaluation.loaders import DatasetSpec, dataset_spec, load_splits
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.training.monitor import Trackers, parse_report_to

log = get_logger(__name__)

# Protocol keys that must match for a finished run to count as part of this grid: declared on EvalConfig's fields.
FINGERPRINT_KEYS = fingerprint_keys()
# What a run recorded before a key existed did: fine-tuning batches were length-grouped until `batching` was added.
LEGACY_FINGERPRINT = {"batching": "length"}


def task_class(task: str):
    from hf_encoderize.evaluation.ir import Retrieval
    from hf_encoderize.evaluation.qa import QuestionAnswering
    from hf_encoderize.evaluation.sc import SequenceClassification
    from hf_encoderize.evaluation.tc import TokenClassification

    return {"sc": SequenceClassification, "tc": TokenClassification, "qa": QuestionAnswering, "ir": Retrieval}[task]


def fingerprint(load: LoadConfig, cfg: EvalConfig) -> dict:
    protocol = cfg.protocol()
    return {"model": load.source, "gguf_file": load.gguf_file, "revision": load.revision,
            "mode": "causal" if cfg.causal else "bidirectional", **{k: protocol[k] for k in FINGERPRINT_KEYS},
            **({"frozen": True} if cfg.frozen else {})}  # only when set: runs recorded before the option still match


def protocol_differences(found: dict, expected: dict) -> list[str]:
    """The one comparison of "same protocol?" (a finished run's results.json, a summary's protocol): the keys of
    `expected` that `found` holds otherwise (a key it lacks reads as what runs did before the key existed), and
    `frozen` as a flag."""
    changed = set(differing(found, expected, lacking=LEGACY_FINGERPRINT))
    return sorted(changed | ({"frozen"} if bool(found.get("frozen")) != bool(expected.get("frozen")) else set()))


def run_dir(results_dir: Path, spec: DatasetSpec, lr: float, seed: int) -> Path:
    return results_dir / spec.task / spec.name / f"lr{lr_key(lr)}_sd{seed}"


EVAL_ADVICE = "pick another results folder (a new --output-dir or --name), or delete that folder to redo it"


def is_finished(path: Path, expected: dict, advice: str = EVAL_ADVICE) -> bool:
    """True if `path` holds a finished run of this protocol; raise if it holds one of another protocol, with `advice`
    (what the calling command offers: `eval` has --name, `run` has not)."""
    results = path / "results.json"
    if not results.is_file():
        return False
    try:
        found = json.loads(results.read_text()).get("fingerprint", {})
    except json.JSONDecodeError:
        raise EncoderizeError(f"{results} is not valid JSON; delete that run folder to redo it") from None
    differing = protocol_differences(found, expected)
    if differing:
        raise EncoderizeError(
            f"{path} holds a finished run made with another protocol or model ({', '.join(differing)} differ); "
            f"{advice}"
        )
    return True


def _say(message: str) -> None:
    log.info(message)


def evaluate(load: LoadConfig, cfg: EvalConfig, *, progress: Callable[[str], None] = _say, backbone=None,
             advice: str = EVAL_ADVICE) -> dict:
    """Fine-tune and score `load.source` on the grid of `cfg`; write results and the summary of that grid (finished
    runs of the same protocol are reused, runs of another grid left out). Returns the summary.

    `backbone` (from `backbone.load_backbone`) reuses an already loaded model instead of loading `load.source`.
    `advice`: what to do about a finished run of another protocol in the results folder (`is_finished`).
    With `cfg.mteb`, scores the sentence embeddings on those MTEB tasks instead (`mteb_suite.evaluate_mteb`)."""
    from hf_encoderize.common.outputs import check_output_dir
    from hf_encoderize.evaluation.backbone import pick_device

    cfg = cfg.placed(load.source)
    # Before any model or data loads: a results path that is (or runs through) a file, a device this machine lacks
    # and a tracker that is not installed are one line each, not a traceback after the first fine-tuning.
    trackers = parse_report_to(cfg.report_to)
    if trackers and cfg.mteb:
        raise EncoderizeError("--report-to logs the fine-tuning grid's runs; --mteb scores without fine-tuning: "
                              "drop one of them")
    check_output_dir(cfg.output_dir, overwrite=False, resume=True, check_lock=False)
    pick_device(cfg.device)
    if cfg.mteb:
        from hf_encoderize.evaluation.mteb_suite import evaluate_mteb

        return evaluate_mteb(load, cfg, progress=progress)
    from hf_encoderize.evaluation.backbone import load_backbone, model_name
    from hf_encoderize.evaluation.summary import write_summary

    grid = cfg.grid()
    name = cfg.name or model_name(load, cfg.causal)
    results_dir = Path(cfg.output_dir) / name
    expected = fingerprint(load, cfg)
    specs = [dataset_spec(n, cfg.dataset_source) for n in grid.datasets]
    pending = {spec.name: [(lr, seed) for lr in grid.lrs for seed in grid.seeds
                           if not is_finished(run_dir(results_dir, spec, lr, seed), expected, advice)]
               for spec in specs}
    sizes = SMOKE_SIZES if cfg.profile == "smoke" else None
    splits = {spec.name: load_splits(spec, data_dir=cfg.data_dir, sizes=sizes, max_eval_examples=grid.max_eval_examples)
              for spec in specs if pending[spec.name]}
    if splits and backbone is None:
        backbone = load_backbone(load, causal=cfg.causal, device=cfg.device)
    if splits and cfg.frozen:
        backbone = FrozenBackbone(backbone)
    groups = training_groups(specs)
    tracked = None
    if trackers:  # --report-to: each finished run's scores, at its position in the grid
        tracked = Trackers(trackers, name, results_dir / "trackers", {"model": load.source, **expected})
    try:
        with ProgressBar(fine_tunings(groups, grid, pending), "eval", unit="run") as bar:
            _run_grid(groups, grid, pending, splits, backbone, bar.above(progress), bar, cfg=cfg,
                      results_dir=results_dir, identity=(load.source, name, expected), tracked=tracked)
    finally:
        if tracked:
            tracked.finish()
    asked = {run_dir(results_dir, spec, lr, seed) for spec in specs for lr in grid.lrs for seed in grid.seeds}
    return write_summary(results_dir, model=load.source, model_name=name, profile=cfg.profile, expected=expected,
                         runs=asked)


def tracker_values(spec: DatasetSpec, lr: float, seed: int, record: dict) -> dict:
    """What a tracker gets for one finished run: its scores under `task/dataset/`, with the run's lr and seed.

    >>> from types import SimpleNamespace as S
    >>> values = tracker_values(S(task="sc", name="sst2"), 2e-5, 0, {"validation": {"score": 80.0},
    ...                         "test": {"score": 79.5}, "wall_time_s": 3.0})
    >>> values["sc/sst2/test"], values["sc/sst2/lr"], values["sc/sst2/seed"], sorted(values)[-1]
    (79.5, 2e-05, 0, 'sc/sst2/wall_time_s')
    """
    key = f"{spec.task}/{spec.name}"
    return {f"{key}/validation": record["validation"]["score"], f"{key}/test": record["test"]["score"],
            f"{key}/lr": lr, f"{key}/seed": seed, f"{key}/wall_time_s": record["wall_time_s"]}


def fine_tunings(groups: list[list[DatasetSpec]], grid, pending: dict) -> int:
    """The fine-tuning runs left to do: one per (group, lr, seed) that some dataset of the group still needs (a shared
    run on MS MARCO, scored on three datasets, is one)."""
    return sum(1 for group in groups for lr in grid.lrs for seed in grid.seeds
               if any((lr, seed) in pending[spec.name] for spec in group))


def _run_grid(groups, grid, pending: dict, splits: dict, backbone, progress, bar: ProgressBar, *, cfg: EvalConfig,
              results_dir: Path, identity: tuple[str, str, dict], tracked: Trackers | None = None) -> None:
    """The grid's runs in order, each written as it finishes; `bar` moves by one per fine-tuning run.
    `identity`: (model source, results name, fingerprint) that every record carries. `tracked`: the trackers each
    finished run's scores go to, at its position in the grid (`--report-to`)."""
    source, name, expected = identity
    position = 0
    for group in groups:
        for spec in group:
            if spec.note and spec.task == "ir":
                progress(f"note: {spec.name}: {spec.note}")
        prepared: dict[str, tuple] = {}
        for lr in grid.lrs:
            for seed in grid.seeds:
                todo = [spec for spec in group if (lr, seed) in pending[spec.name]]
                for spec in group:
                    if spec not in todo:
                        position += 1
                        progress(f"[{position}/{grid.runs}] {spec.task}/{spec.name} lr={lr_key(lr)} seed={seed}: "
                                 "finished earlier, skipped")
                if not todo:
                    continue
                for spec in todo:
                    if spec.name not in prepared:
                        prepared[spec.name] = _prepare(spec, backbone, cfg, splits.pop(spec.name), progress)
                task, data = prepared[todo[0].name]
                names = "/".join(spec.name for spec in todo)
                shared = f", one run scored on {names}" if len(todo) > 1 else ""
                progress(f"[{position + 1}/{grid.runs}] {todo[0].task}/{names} lr={lr_key(lr)} seed={seed}: "
                         f"fine-tuning ({len(data.train)} examples, at most {grid.max_steps} steps{shared})")
                records = run_shared(task, backbone, data.train, [prepared[spec.name] for spec in todo], lr=lr,
                                     seed=seed, cfg=cfg)
                bar.update()
                for spec, record in zip(todo, records, strict=True):
                    position += 1
                    record.update(model=source, model_name=name, mode=backbone.mode, fingerprint=expected)
                    write_json_atomic(run_dir(results_dir, spec, lr, seed) / "results.json", record)
                    if tracked:
                        tracked.log(tracker_values(spec, lr, seed, record), step=position)
                    progress(f"[{position}/{grid.runs}] {spec.task}/{spec.name} lr={lr_key(lr)} seed={seed}: "
                             f"validation {record['validation']['score']:.2f}, test {record['test']['score']:.2f} "
                             f"{spec.metric} ({record['wall_time_s']:.0f} s, {record['train_examples_per_s']:.1f} "
                             "train examples/s)")


def _prepare(spec: DatasetSpec, backbone, cfg: EvalConfig, splits: dict, progress):
    """Tokenise the dataset once for all its runs."""
    length = input_length(cfg, spec, backbone.max_positions)
    task = task_class(spec.task)(spec, backbone.tokenizer, length, qa_stride=int(cfg.qa_stride),
                                 ndcg_gains=cfg.ndcg_gains, frozen=bool(cfg.frozen))
    started = time.perf_counter()
    prepared = task.prepare(splits)
    progress(f"tokenised {spec.name} once for all runs (max length {length}, {time.perf_counter() - started:.1f} s)")
    return task, prepared


def input_length(cfg: EvalConfig, spec: DatasetSpec, max_positions: int) -> int:
    """Tokens per input: --max-seq-length if given; else the profile's (quick: 512, or the dataset's own longer length,
    2,048 for MLDR); else (paper profile) the model's limit, round(0.99 x positions), for every task, as the authors'
    EncodEval (abstract_eval.py). Never more than the model's positions."""
    profile_length = cfg.grid().max_length
    if cfg.max_length:
        return min(int(cfg.max_length), max_positions)
    if profile_length is None:
        return model_limit(max_positions)
    return min(max(profile_length, spec.max_length or 0), max_positions)


def training_groups(specs: list[DatasetSpec]) -> list[list[DatasetSpec]]:
    """Datasets that share their fine-tuning runs, in grid order: NQ and MLDR train on MS MARCO (Appendix B), so one
    run per (lr, seed) on MS MARCO is scored on all three instead of training three times on the same data."""
    groups: dict[tuple[str, str], list[DatasetSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.task, spec.train_from or spec.name), []).append(spec)
    return list(groups.values())


def run_shared(task, backbone, train, targets: list[tuple], *, lr: float, seed: int, cfg: EvalConfig) -> list[dict]:
    """One fine-tuning run on `train` with `task`'s head and loss, then each (task, prepared) target's validation and
    test scores (0-100, with per-example scores) from the same weights. One record per target; the training facts
    and time are the shared run's."""
    from hf_encoderize.evaluation.base import finetune

    grid = cfg.grid()
    random.seed(seed)
    torch.manual_seed(seed)  # head initialisation, dropout and batch order all follow the seed
    head = task.make_head(backbone.hidden_size)
    zero_shot = {}  # frozen IR: the map at its start (the identity), scored before training, beside the trained map
    if cfg.frozen and task.name == "ir":
        head.to(backbone.device)
        zero_shot = {id(target): target.score(backbone, backbone.model, head, prepared.test).score
                     for target, prepared in targets}
    started = time.perf_counter()
    facts = finetune(task, backbone, head, train, lr=lr, seed=seed, max_steps=grid.max_steps,
                     batch_size=grid.batch_size, warmup_ratio=float(cfg.warmup_ratio), adamw=cfg.adamw(),
                     epochs=grid.max_steps if cfg.frozen else 1, batching=cfg.batching)
    train_time = time.perf_counter() - started
    records = []
    for target, prepared in targets:
        scored = time.perf_counter()
        validation = target.score(backbone, backbone.model, head, prepared.validation)
        test = target.score(backbone, backbone.model, head, prepared.test)
        records.append({
            "task": target.name, "dataset": target.spec.name, "metric": target.spec.metric, "lr": lr_key(lr),
            "seed": seed, "protocol": cfg.protocol(), "note": target.spec.note, **facts,
            "validation": {"score": validation.score, **validation.extra},
            "test": {"score": test.score, **test.extra,
                     **({"zero_shot": zero_shot[id(target)]} if id(target) in zero_shot else {})},
            "trained_with": [t.spec.name for t, _ in targets] if len(targets) > 1 else None,
            "train_time_s": round(train_time, 3), "wall_time_s": round(train_time + time.perf_counter() - scored, 3),
            "train_examples_per_s": facts["train_examples"] / max(train_time, 1e-9),
            "device": str(backbone.device), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "per_example": {"validation": validation.per_example, "test": test.per_example},
        })
    return records
