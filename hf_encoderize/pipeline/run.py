"""`hf-encoderize run MODEL`: continued pretraining, evaluation, model card and Hub push, in one output folder.

Design choices:
- Each stage is the library function its own command calls (`cpt`, `evaluation.evaluate`, `card.write_card`,
  `hub.push`), run in order with a banner; the folder is the state, so a re-run skips every stage whose output is
  already there and resumes the one that was interrupted (cpt from its newest checkpoint, eval from its finished
  fine-tuning runs).
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
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.options import flag, option_name
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD, EVAL_NAMES, RunFolder
from hf_encoderize.common.validation import check_choice, check_number, check_repo_id
from hf_encoderize.pipeline.reuse import (
    card_kept,
    contrastive_done,
    cpt_done,
    eval_done,
    files_fingerprint,
    push_done,
    pushed_files,
)
from hf_encoderize.records.eval_summary import EvalSummary
from hf_encoderize.records.push_record import PushRecord
from hf_encoderize.records.run_record import RunRecord

log = get_logger(__name__)

CAUSAL_BASE = "base-causal"  # eval_base both: the base in its native causal attention, beside OUT/eval/base
EVAL_LISTS = ("eval_tasks", "eval_datasets", "eval_lrs", "eval_seeds")  # what --eval-profile none ignores


@dataclass
class RunConfig:
    """What `run` does after continued pretraining."""

    INPUTS = ("contrastive_teacher", "contrastive_data_files", "eval_data_dir")  # `common.outputs.inputs_of`

    _: KW_ONLY
    eval_profile: Literal["paper", "quick", "smoke", "none"] = "quick"
    """Evaluation after training: paper (the full protocol), quick (one lr, one seed), smoke (offline synthetic
    sets) or none."""
    eval_base: Literal["bidirectional", "causal", "both", "none"] = "bidirectional"
    """Also evaluate the base model, for the comparison: bidirectional (how the paper fine-tunes CLM models),
    causal (its native attention: the fair baseline of a frozen probe, which cannot adapt to a mask it never trained
    with), both (OUT/eval/base and OUT/eval/base-causal), or none.

    The paper fine-tunes CLM models bidirectionally: section 2, "Fine-tuning protocol"."""
    eval_tasks: str | None = None
    """Comma-separated task families to evaluate: sc, tc, qa, ir (default: all of the profile's)."""
    eval_datasets: str | None = None
    """Comma-separated datasets to evaluate (default: the profile's)."""
    eval_max_steps: int | None = None
    """Most fine-tuning steps per evaluation run (default: the profile's)."""
    eval_lrs: str | None = None
    """Comma-separated fine-tuning learning rates (default: the profile's)."""
    eval_seeds: str | None = None
    """Comma-separated fine-tuning seeds (default: the profile's)."""
    eval_frozen: bool = False
    """Train only the task heads on frozen hidden states (`eval --frozen`): a probe cheap enough for several seeds."""
    eval_data_dir: str | None = None
    """Local copies of the evaluation datasets (see `eval --data-dir`)."""
    base_model_id: str | None = None
    """Hub id of the base model for the card's metadata, when MODEL is a local folder or GGUF file."""
    contrastive: Literal["simcse", "supervised", "distill", "none"] = "none"
    """After cpt, make the encoder an embedding model in OUT/contrastive: simcse (on cpt's own text source),
    supervised (on `contrastive_data_files`), distill (`contrastive_teacher`'s embeddings of cpt's own text or of
    `contrastive_data_files`), or none."""
    contrastive_teacher: str | None = None
    """distill: the sentence-transformers teacher (folder or Hub id) whose embeddings the model learns."""
    contrastive_data_files: str | None = None
    """supervised: JSON/JSONL/CSV/Parquet pairs or triplets with anchor, positive[, negative] columns; simcse: texts
    (a `text` column) to train on instead of cpt's own source."""
    contrastive_negative_column: str | None = None
    """A hard-negative column of `contrastive_data_files` (supervised: the anchor's negative; simcse: a text that
    must embed apart from the row's, such as the quickstart's neighbouring sentence)."""
    contrastive_steps: int = 1000
    """Optimizer steps of the contrastive stage."""
    contrastive_batch_size: int = 64
    """Rows per step of the contrastive stage (in-batch negatives: larger is better; lower it on a CPU)."""
    contrastive_max_seq_length: int | None = None
    """Tokens per text in the contrastive stage; default 128, or the model's positions when it has fewer."""
    contrastive_dropout: float | None = None
    """simcse: dropout during the stage (default: the `contrastive` command's, 0.3)."""
    contrastive_lr: float | None = None
    """Learning rate of the contrastive stage (default: the `contrastive` command's, 3e-5)."""
    contrastive_warmup_ratio: float | None = None
    """Warmup share of the contrastive stage's steps (default: the `contrastive` command's, 0.1)."""
    contrastive_distill_variants: int = 0
    """distill: one-word edits of each text the teacher labels too (`contrastive --distill-variants`)."""
    contrastive_distill_synonyms: int = 0
    """distill: near-synonym edits of each text the teacher labels too (`contrastive --distill-synonyms`)."""
    contrastive_mixed_precision: Literal["auto", "bf16", "no"] = "auto"
    """The contrastive stage's `--mixed-precision`: auto (bf16 on a GPU that has it, else fp32), bf16 (on a CPU too:
    autocast over fp32 weights) or no."""
    eval_contrastive: bool = True
    """With --contrastive and an eval profile, evaluate the embedding model too."""

    def __post_init__(self):
        for name in ("contrastive", "eval_profile", "eval_base", "contrastive_mixed_precision"):  # the Literals' values
            check_choice(f"--{name.replace('_', '-')}", getattr(self, name), RunConfig, name)
        if self.contrastive == "supervised" and not self.contrastive_data_files:
            raise EncoderizeError("--contrastive supervised needs --contrastive-data-files (anchor, positive columns)")
        if (self.contrastive == "distill") != (self.contrastive_teacher is not None):
            raise EncoderizeError("--contrastive distill and --contrastive-teacher go together: the teacher is the "
                                  "sentence-transformers model whose embeddings the stage learns")
        if self.contrastive_teacher is not None:
            from hf_encoderize.recipes.contrastive.distill import check_teacher

            check_teacher(self.contrastive_teacher)  # a missing or cut teacher is refused now, not after cpt
        check_repo_id(self.base_model_id, "--base-model-id", namespaced=False)  # the card's, checked before cpt
        if self.contrastive_negative_column and not self.contrastive_data_files:
            raise EncoderizeError("--contrastive-negative-column names a column of --contrastive-data-files; pass "
                                  "the file too")
        check_number("--contrastive-max-steps", self.contrastive_steps, minimum=1, integer=True)
        check_number("--contrastive-batch-size", self.contrastive_batch_size, minimum=2, integer=True)
        check_number("--contrastive-max-seq-length", self.contrastive_max_seq_length, minimum=1, integer=True)
        check_number("--contrastive-dropout", self.contrastive_dropout, minimum=0, below=1)
        check_number("--contrastive-warmup-ratio", self.contrastive_warmup_ratio, minimum=0, below=1)
        check_number("--contrastive-distill-variants", self.contrastive_distill_variants, minimum=0, integer=True)
        if self.contrastive_distill_variants and self.contrastive != "distill":
            raise EncoderizeError("--contrastive-distill-variants adds texts for the teacher to label; add "
                                  "--contrastive distill or drop it")
        check_number("--contrastive-distill-synonyms", self.contrastive_distill_synonyms, minimum=0, integer=True)
        if self.contrastive_distill_synonyms and self.contrastive != "distill":
            raise EncoderizeError("--contrastive-distill-synonyms adds texts for the teacher to label; add "
                                  "--contrastive distill or drop it")
        check_number("--contrastive-learning-rate", self.contrastive_lr, above=0)
        check_number("--eval-max-steps", self.eval_max_steps, minimum=1, integer=True)
        if self.eval_profile != "none":
            self.eval_config("encoder", "results")  # unknown tasks/datasets fail now, not after training
        elif given := [flag(option_name(RunConfig, f)) for f in dataclasses.fields(self)
                       if f.name in EVAL_LISTS and getattr(self, f.name) is not None]:
            # a list nothing reads is refused, not silently dropped (a bad one too)
            raise EncoderizeError(f"{', '.join(given)} set with --eval-profile none, which evaluates nothing; drop "
                                  f"{'them' if len(given) > 1 else 'it'} or pick an --eval-profile")

    def eval_config(self, name: str, output_dir: str, causal: bool = False):
        from hf_encoderize.evaluation import EvalConfig

        return EvalConfig(profile=self.eval_profile, tasks=self.eval_tasks, datasets=self.eval_datasets,
                          max_steps=self.eval_max_steps, data_dir=self.eval_data_dir, output_dir=output_dir,
                          name=name, causal=causal, lrs=self.eval_lrs, seeds=self.eval_seeds, frozen=self.eval_frozen)


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


def contrastive_config(data, run_cfg: RunConfig, out: Path, resume: bool = False):
    """The `contrastive` stage's config: OUT/encoder into OUT/contrastive; SimCSE reads cpt's own text source."""
    from hf_encoderize.recipes.contrastive import ContrastiveConfig

    if run_cfg.contrastive_data_files:  # supervised always; simcse when given texts of its own
        source = {"data_files": run_cfg.contrastive_data_files}
    elif data.data_files:
        source = {"data_files": data.data_files, "text_column": data.text_column, "data_name": data.data_name}
    else:
        source = {"dataset": data.dataset, "dataset_config": data.dataset_config, "split": data.split,
                  "text_column": data.text_column}
    folder = RunFolder(out)
    return ContrastiveConfig(str(folder.encoder), output_dir=str(folder.contrastive), overwrite=not resume,
                             resume=resume, objective=run_cfg.contrastive, steps=run_cfg.contrastive_steps,
                             batch_size=run_cfg.contrastive_batch_size,
                             max_seq_length=run_cfg.contrastive_max_seq_length, **source,
                             negative_column=run_cfg.contrastive_negative_column,
                             teacher=run_cfg.contrastive_teacher,
                             distill_variants=run_cfg.contrastive_distill_variants,
                             distill_synonyms=run_cfg.contrastive_distill_synonyms,
                             mixed_precision=run_cfg.contrastive_mixed_precision,
                             **({"warmup_ratio": run_cfg.contrastive_warmup_ratio}
                                if run_cfg.contrastive_warmup_ratio is not None else {}),
                             **({"dropout": run_cfg.contrastive_dropout} if run_cfg.contrastive_dropout is not None
                                else {}),
                             **({"learning_rate": run_cfg.contrastive_lr} if run_cfg.contrastive_lr is not None
                                else {}))


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
    summary = evaluate(load, run_cfg.eval_config(name, str(RunFolder(out).eval), causal=causal), advice=advice)
    gc.collect()
    means = ", ".join(f"{task} {mean:.2f}" for task, mean in EvalSummary.from_dict(summary).family_means.items())
    return f"{name}: {means} -> {RunFolder(out).eval_results(name) / 'summary.md'}"


def stage_card(out: Path, run_cfg: RunConfig) -> str:
    """The encoder-vs-base comparison (eval/comparison.md and .png, pushed as plots), then the card."""
    from hf_encoderize.publish.card import CardConfig, write_card

    if run_cfg.eval_profile != "none":
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
    names = (CAUSAL_BASE, *EVAL_NAMES)  # the causal base (eval_base both) first, beside the bidirectional one
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
    if run_cfg.contrastive != "none":
        stages.append(Stage(f"contrastive {run_cfg.contrastive}: {run_cfg.contrastive_steps} steps",
                            lambda: contrastive_done(contrastive_config(data, run_cfg, out), out),
                            lambda: stage_contrastive(data, run_cfg, out)))
    if run_cfg.eval_profile != "none":
        stages.append(eval_stage(LoadConfig(str(RunFolder(out).encoder)), "encoder", False, run_cfg, out))
        if run_cfg.contrastive != "none" and run_cfg.eval_contrastive:
            stages.append(eval_stage(LoadConfig(str(RunFolder(out).contrastive)), "contrastive", False, run_cfg, out))
        if run_cfg.eval_base != "none":
            stages.append(eval_stage(load, "base", run_cfg.eval_base == "causal", run_cfg, out))
        if run_cfg.eval_base == "both":
            stages.append(eval_stage(load, CAUSAL_BASE, True, run_cfg, out))
    stages.append(Stage("model card", lambda: card_kept(out), lambda: stage_card(out, run_cfg)))
    if hub.push_to_hub:
        stages.append(Stage(f"push to {hub.push_to_hub}", lambda: push_done(out, hub), lambda: stage_push(out, hub)))
    return stages


def eval_stage(load, name: str, causal: bool, run_cfg: RunConfig, out: Path) -> Stage:
    results = RunFolder(out).eval_results(name)
    config = run_cfg.eval_config(name, str(RunFolder(out).eval), causal=causal)
    return Stage(f"eval {name} ({run_cfg.eval_profile} profile, {'causal' if causal else 'bidirectional'} attention)",
                 lambda: "finished earlier" if eval_done(results, load, config) else None,
                 lambda: stage_eval(load, run_cfg, out, name, causal))


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
                     inputs=inputs_of(load, data, train, run_cfg))
    if run_cfg.contrastive != "none":  # its options, and its folder (replaced) apart from its inputs, before cpt
        stage = contrastive_config(data, run_cfg, out)
        check_apart_from_inputs(stage.output_dir, inputs_of(stage), flag="the contrastive stage's folder")
    check_push_ready(hub)  # no token or offline mode fails now, not after hours of work
    train = dataclasses.replace(train, output_dir=str(out))  # the caller's config is left as it was
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
