"""`hf-encoderize run MODEL`: continued pretraining, evaluation, model card and Hub push, in one output folder.

Design choices:
- Each stage is the library function its own command calls (`cpt`, `evaluation.evaluate`, `card.write_card`,
  `hub.push`), run in order with a banner; the folder is the state, so a re-run skips every stage whose output is
  already there and resumes the one that was interrupted (cpt from its newest checkpoint, eval from its finished
  fine-tuning runs).
- `RunConfig` holds the configs of the later stages, the ones their own commands take (`ContrastiveConfig`;
  `EvalConfig`, as `RunEvalConfig` with which models to score), and their options are `run`'s, prefixed
  (`--contrastive-max-steps`, `common.stages`): a stage that gains an option gains it here with no edit.
- A finished cpt is only reused when it was made with the same settings; otherwise the run stops and says so rather
  than mixing two runs in one folder.
- The base model is evaluated with the same protocol so the card and the final table show what continued
  pretraining changed. The paper fine-tunes every model, CLM ones included, with bidirectional attention (section 2,
  "Fine-tuning protocol"), so that is the default mode for the base model too.
- The push is recorded (repo, revision, a fingerprint of the files, never the token) so an unchanged folder is not
  pushed twice.

Layout of OUT: encoder/ (the model and its README.md card), checkpoints/, run_record.json, metrics.jsonl,
loss_curve.png, eval/encoder/ and eval/base/ (summary.json, summary.md, plots), eval/comparison.md, push_record.json.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD, EVAL_NAMES, RunFolder
from hf_encoderize.common.stages import stage
from hf_encoderize.common.validation import check_choice, check_repo_id
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.pipeline.reuse import (
    card_kept,
    contrastive_done,
    cpt_done,
    eval_done,
    files_fingerprint,
    push_done,
    pushed_files,
)
from hf_encoderize.recipes.contrastive.config import ContrastiveConfig
from hf_encoderize.records.eval_summary import EvalSummary
from hf_encoderize.records.push_record import PushRecord
from hf_encoderize.records.run_record import RunRecord

log = get_logger(__name__)

CAUSAL_BASE = "base-causal"  # eval.base both: the base in its native causal attention, beside OUT/eval/base
RUN_ENCODER = "OUT/encoder"  # the contrastive stage's encoder until the run folder is known (`contrastive_config`)
CPT_TEXT = "cpt's text source"  # the contrastive stage's data when it names none: cpt's (`contrastive_config`)


def run_contrastive(**settings) -> ContrastiveConfig:
    """The contrastive stage's config as `run` holds it before its folder exists: `RUN_ENCODER` stands for the
    encoder cpt makes and, when the stage names no data of its own, `CPT_TEXT` for cpt's text source
    (`contrastive_config` puts both in). What cpt's text cannot be is refused now, not after cpt."""
    if settings.get("dataset") == CPT_TEXT:  # as --print-config writes it: decided again here
        settings = {key: value for key, value in settings.items() if key != "dataset"}
    own_data = bool(settings.get("data_files")) or settings.get("dataset") is not None
    if not own_data:
        if settings.get("method") == "supervised":
            raise EncoderizeError("--method supervised needs --data-files (anchor, positive columns): cpt's text "
                                  "holds no pairs")
        if settings.get("negative_column"):
            raise EncoderizeError("--negative-column names a column of --data-files; pass the file too")
        settings = {**settings, "dataset": CPT_TEXT}
    if settings.get("teacher") is not None:
        from hf_encoderize.recipes.contrastive.distill import check_teacher

        check_teacher(settings["teacher"])  # a missing or cut teacher is refused now, not after cpt
    return ContrastiveConfig(RUN_ENCODER, **settings)


@dataclass
class RunEvalConfig(EvalConfig):
    """The evaluation: the `eval` command's settings, and which models `run` scores with them."""

    _: KW_ONLY
    base: Literal["bidirectional", "causal", "both", "none"] = field(default="bidirectional",
                                                                    metadata=identity(HARMLESS))
    """Also evaluate the base model, for the comparison: bidirectional (how the paper fine-tunes CLM models),
    causal (its native attention: the fair baseline of a frozen probe, which cannot adapt to a mask it never trained
    with), both (OUT/eval/base and OUT/eval/base-causal), or none.

    The paper fine-tunes CLM models bidirectionally: section 2, "Fine-tuning protocol"."""
    contrastive: bool = field(default=True, metadata=identity(HARMLESS))
    """When the run makes an embedding model, evaluate it too."""

    def __post_init__(self):
        check_choice("--base", self.base, RunEvalConfig, "base")
        super().__post_init__()

    def of(self, name: str, output_dir: str, causal: bool = False) -> EvalConfig:
        """The `eval` command's config for one model of the run, scored into OUTPUT_DIR/NAME."""
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(EvalConfig)}
        return EvalConfig(**{**settings, "output_dir": output_dir, "name": name, "causal": causal})


@dataclass
class RunConfig:
    """What `run` does after continued pretraining."""

    _: KW_ONLY
    eval: RunEvalConfig | None = field(default_factory=RunEvalConfig, metadata=stage(
        "profile", off_help="no evaluation", fixed=("output_dir", "name", "causal", "mteb", "report_to"),
        about="After cpt, the encoder, the base model (--eval-base) and the embedding model (--eval-contrastive) are "
              "fine-tuned and scored with the `eval` command's protocol into OUT/eval/NAME."))
    """The evaluation stage (None: none)."""
    contrastive: ContrastiveConfig | None = field(default=None, metadata=stage(
        "method", flag="contrastive", off_help="no contrastive stage", build=run_contrastive,
        fixed=("encoder", "output_dir", "overwrite", "resume", "report_to"),
        about="After cpt, the `contrastive` command makes OUT/encoder an embedding model in OUT/contrastive: on cpt's "
              "own text source unless --data-files or --dataset names other texts (supervised: pairs or triplets)."))
    """The contrastive stage (None: none)."""
    base_model_id: str | None = None
    """Hub id of the base model for the card's metadata, when MODEL is a local folder or GGUF file."""

    def __post_init__(self):
        check_repo_id(self.base_model_id, "--base-model-id", namespaced=False)  # the card's, checked before cpt


def banner(index: int, total: int, title: str, note: str = "") -> None:
    line = f"[{index}/{total}] {title}" + (f" -- {note}" if note else "")
    log.info(f"\n{'=' * 8} {line} {'=' * max(4, 100 - len(line))}")


def stage_cpt(load, data, masking, train, adapter, out: Path) -> str:
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.checkpoints import list_checkpoints

    resume = not train.overwrite and bool(list_checkpoints(out))  # an interrupted cpt continues
    summary = cpt(load, data, masking, dataclasses.replace(train, resume=resume or train.resume), adapter)
    gc.collect()  # the trained model is not needed any more; free it before evaluation loads another
    return f"{summary['steps']} steps in {summary['wall_time_s']:.0f} s"


def contrastive_config(data, run_cfg: RunConfig, out: Path, resume: bool = False) -> ContrastiveConfig:
    """The `contrastive` stage's config: OUT/encoder into OUT/contrastive, on cpt's text source (`data`) unless the
    stage names data of its own."""
    stage, folder = run_cfg.contrastive, RunFolder(out)
    source = {}
    if stage.dataset == CPT_TEXT and data.data_files:
        source = {"data_files": data.data_files, "dataset": None, "text_column": data.text_column,
                  "data_name": data.data_name}
    elif stage.dataset == CPT_TEXT:
        source = {"dataset": data.dataset, "dataset_config": data.dataset_config, "split": data.split,
                  "text_column": data.text_column}
    return dataclasses.replace(stage, encoder=str(folder.encoder), output_dir=str(folder.contrastive),
                               overwrite=not resume, resume=resume, **source)


def stage_contrastive(data, run_cfg: RunConfig, out: Path) -> str:
    from hf_encoderize.recipes.contrastive import contrastive, work_dir

    resume = any(work_dir(RunFolder(out).contrastive).glob("trainer/checkpoint-*"))  # an interrupted stage continues
    summary = contrastive(contrastive_config(data, run_cfg, out, resume))
    return (f"{summary['steps']} steps on {summary['rows']} rows, "
            f"loss {summary['first_loss']} -> {summary['final_loss']}")


def stage_eval(load, run_cfg: RunConfig, out: Path, name: str, causal: bool = False) -> dict:
    from hf_encoderize.evaluation import evaluate

    # `run` has no --name: one evaluation per model lives in eval/<name>, and a new --output-dir redoes every stage.
    advice = (f"`run` keeps one evaluation of {name} per folder: give the --eval-* options it was made with to keep "
              f"it, or delete {RunFolder(out).eval_results(name)} to redo it with these")
    summary = evaluate(load, run_cfg.eval.of(name, str(RunFolder(out).eval), causal=causal), advice=advice)
    gc.collect()
    means = ", ".join(f"{task} {mean:.2f}" for task, mean in EvalSummary.from_dict(summary).family_means.items())
    return f"{name}: {means} -> {RunFolder(out).eval_results(name) / 'summary.md'}"


def stage_card(out: Path, run_cfg: RunConfig) -> str:
    """The encoder-vs-base comparison (eval/comparison.md and .png, pushed as plots), then the card."""
    from hf_encoderize.publish.card import CardConfig, write_card

    if run_cfg.eval is not None:
        comparison(out)
    cards = [write_card(CardConfig(str(out), base_model_id=run_cfg.base_model_id))]
    contrastive = RunFolder(out).contrastive
    if (contrastive / CONTRASTIVE_RECORD).is_file():  # the embedding model gets its own card
        cards.append(write_card(CardConfig(str(contrastive), base_model_id=run_cfg.base_model_id)))
    return f"card: {', '.join(str(c) for c in cards)}"


def stage_push(out: Path, hub) -> str:
    from hf_encoderize.publish.hub import push_after

    files = push_after(out, hub)
    PushRecord(repo_id=hub.push_to_hub, revision=hub.hub_revision or "main", create_pr=hub.hub_create_pr,
               files=files, fingerprint=files_fingerprint(pushed_files(out)),  # after the card was rewritten
               pushed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())).to_json(RunFolder(out).push_record)
    return f"pushed {len(files)} files to {hub.push_to_hub}"


def _hub_url() -> str:
    from huggingface_hub import constants

    from hf_encoderize.publish.hub import mask_credentials

    return mask_credentials((os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"))  # never print user:pass


def comparison(out: Path) -> str | None:
    """The encoder-vs-base table (Markdown) from the eval summaries, also written to OUT/eval/comparison.md."""
    from hf_encoderize.evaluation.compare import compare

    folder = RunFolder(out)  # base decoder, MLM encoder, embedding model: side by side
    names = (CAUSAL_BASE, *EVAL_NAMES)  # the causal base (eval.base both) first, beside the bidirectional one
    folders = [str(folder.eval_results(n)) for n in names if folder.summary(n).is_file()]
    if not folders:
        return None
    return compare(folders, output_dir=str(folder.eval))["table"]


@dataclass
class Stage:
    """One step of the pipeline: `done()` says why it can be skipped (or None), `action()` does it."""

    title: str
    done: Callable[[], str | None]
    action: Callable[[], str | None]


def plan(load, data, masking, train, adapter, run_cfg: RunConfig, hub, out: Path) -> list[Stage]:
    """The stages of this invocation, in order."""
    from hf_encoderize.model.loading import LoadConfig

    source = load.source + (f" ({load.gguf_file})" if load.gguf_file else "")
    stages = [Stage(f"cpt {source}: {train.steps} steps",
                    lambda: None if train.overwrite or not cpt_done(out, load, data, masking, train, adapter)
                    else "finished earlier",
                    lambda: stage_cpt(load, data, masking, train, adapter, out))]
    if run_cfg.contrastive is not None:
        stages.append(Stage(f"contrastive {run_cfg.contrastive.method}: {run_cfg.contrastive.steps} steps",
                            lambda: contrastive_done(contrastive_config(data, run_cfg, out), out),
                            lambda: stage_contrastive(data, run_cfg, out)))
    if (evaluation := run_cfg.eval) is not None:
        stages.append(eval_stage(LoadConfig(str(RunFolder(out).encoder)), "encoder", False, run_cfg, out))
        if run_cfg.contrastive is not None and evaluation.contrastive:
            stages.append(eval_stage(LoadConfig(str(RunFolder(out).contrastive)), "contrastive", False, run_cfg, out))
        if evaluation.base != "none":
            stages.append(eval_stage(load, "base", evaluation.base == "causal", run_cfg, out))
        if evaluation.base == "both":
            stages.append(eval_stage(load, CAUSAL_BASE, True, run_cfg, out))
    stages.append(Stage("model card", lambda: card_kept(out), lambda: stage_card(out, run_cfg)))
    if hub.push_to_hub:
        stages.append(Stage(f"push to {hub.push_to_hub}", lambda: push_done(out, hub), lambda: stage_push(out, hub)))
    return stages


def eval_stage(load, name: str, causal: bool, run_cfg: RunConfig, out: Path) -> Stage:
    results = RunFolder(out).eval_results(name)
    config = run_cfg.eval.of(name, str(RunFolder(out).eval), causal=causal)
    return Stage(f"eval {name} ({run_cfg.eval.profile} profile, {'causal' if causal else 'bidirectional'} attention)",
                 lambda: "finished earlier" if eval_done(results, load, config) else None,
                 lambda: stage_eval(load, run_cfg, out, name, causal))


def with_trackers(run_cfg: RunConfig, report_to: str) -> RunConfig:
    """`run --report-to` is every stage's: the contrastive stage and the evaluations log to the trackers cpt logs
    to (refused now, before cpt, where the contrastive trainer cannot log to one)."""
    from hf_encoderize.recipes.contrastive.train import TRAINER_TRACKERS
    from hf_encoderize.training.monitor import parse_report_to

    if run_cfg.contrastive is not None:
        parse_report_to(report_to, TRAINER_TRACKERS, "the contrastive stage (transformers' Trainer)")
    return dataclasses.replace(
        run_cfg, eval=run_cfg.eval and dataclasses.replace(run_cfg.eval, report_to=report_to),
        contrastive=run_cfg.contrastive and dataclasses.replace(run_cfg.contrastive, report_to=report_to))


def run(load, data, masking, train, adapter, run_cfg: RunConfig, hub) -> dict:
    """cpt -> eval (encoder, then base) -> card -> push in one folder, skipping finished stages; returns where
    everything is."""
    if world_size() > 1:  # the eval and push stages would run once per process
        raise EncoderizeError("run is single-process: launch `cpt` with accelerate/torchrun, then the same `run` "
                              "command picks up the finished cpt")
    if train.dry_run:  # the cpt stage's plan, and nothing run
        from hf_encoderize.recipes.cpt import cpt

        return cpt(load, data, masking, train, adapter)
    from hf_encoderize.common.outputs import check_apart_from_inputs, check_output_dir, inputs_of
    from hf_encoderize.publish.hub import check_push_ready
    from hf_encoderize.recipes.cpt import default_output_dir

    out, started = Path(train.output_dir) if train.output_dir else default_output_dir(load), time.time()
    # The output-folder policy first (cpt applies it again): without --overwrite a run continues in its folder, so
    # only an input, a file or a live run's folder is refused; with it, only a marked folder of ours is replaced.
    check_output_dir(out, overwrite=train.overwrite, resume=not train.overwrite,
                     inputs=inputs_of(load, data, train, run_cfg.eval, run_cfg.contrastive))  # OUT/encoder: made here
    if run_cfg.contrastive is not None:  # its options, and its folder (replaced) apart from its inputs, before cpt
        stage = contrastive_config(data, run_cfg, out)
        check_apart_from_inputs(stage.output_dir, inputs_of(stage), flag="the contrastive stage's folder")
    check_push_ready(hub)  # no token or offline mode fails now, not after hours of work
    train = dataclasses.replace(train, output_dir=str(out))  # the caller's config is left as it was
    run_cfg = with_trackers(run_cfg, train.report_to)
    stages = plan(load, data, masking, train, adapter, run_cfg, hub, out)
    for index, stage in enumerate(stages, 1):
        skipped = stage.done()
        banner(index, len(stages), stage.title, f"{skipped}, skipped" if skipped else "")
        if not skipped and (note := stage.action()):
            log.info(note)
    table_file = RunFolder(out).comparison
    table = table_file.read_text().split("\n\n", 2)[-1] if table_file.is_file() else None  # after its header
    return report(out, table, hub.push_to_hub, time.time() - started)


def report(out: Path, table: str | None, repo_id: str | None, seconds: float) -> dict:
    """Where everything is (`render_report` prints it; the CLI's `--json` prints it as it is)."""
    folder = RunFolder(out)
    encoder = folder.encoder
    places = {
        "encoder": str(encoder), "model card": str(encoder / "README.md"),
        "run record": str(folder.run_record), "metrics": str(folder.metrics), "loss curve": str(folder.loss_curve),
        "embedding model": str(folder.contrastive),
        "eval (encoder)": str(folder.eval_results("encoder") / "summary.md"),
        "eval (embedding model)": str(folder.eval_results("contrastive") / "summary.md"),
        "eval (base)": str(folder.eval_results("base") / "summary.md"),
        "comparison": str(folder.comparison),
    }
    places = {k: v for k, v in places.items() if Path(v).exists()}
    if repo_id and folder.push_record.is_file():
        places["hub"] = f"{_hub_url()}/{repo_id}"
    return {"output_dir": str(out), "places": places, "table": table, "held_out": held_out_losses(out),
            "wall_time_s": seconds}


def render_report(result: dict) -> str:
    """`report`'s result as the screen the CLI prints: the table, the held-out losses, where everything is."""
    places, encoder = result["places"], RunFolder(Path(result["output_dir"])).encoder
    lines = [f"\n{'=' * 8} done in {result['wall_time_s'] / 60:.1f} min {'=' * 80}"]
    if result.get("table"):
        lines.append(result["table"])
    if result.get("held_out"):
        lines.append(result["held_out"] + "\n")
    width = max((len(k) for k in places), default=0)
    lines += [f"{key:<{width}}  {value}" for key, value in places.items()]
    lines.append(f'\nLoad it: AutoModel.from_pretrained("{encoder}") or SentenceTransformer("{encoder}")')
    return "\n".join(lines) + "\n" + result.get("notes", "")  # notes: what a command adds (quickstart's checks)


def held_out_losses(out: Path) -> str | None:
    """The held-out MLM loss of the starting model and of the encoder (same rows, same masks), in one line."""
    record = RunRecord.from_json(RunFolder(out).run_record)
    if record is None or record.eval_loss is None:
        return None
    before = f"base {record.initial_eval_loss:.3f} -> " if record.initial_eval_loss is not None else ""
    return f"held-out MLM loss (same rows and masks, lower is better): {before}encoder {record.eval_loss:.3f}"
