"""One runner for the training recipes: the lockstep sequence every process walks through, written once.

`cpt` and `pretrain` differ in how the model comes to be (loaded and encoderized, or built at random), in what they
train (one MLM phase, or CLM then MLM with a switch) and in the final model (LoRA merged, or as trained). Each is a
`training.recipe.Recipe` saying only that, as fields and five verbs; the order below, and which steps are
collectives every process must reach, lives here and nowhere else. A run has three verbs:

    setup:  accelerator -> launch checks (recipe) -> output folder (refused before any work) -> documents
            -> tokenizer (recipe) and the data checks on it -> model (recipe) -> branch checks (recipe)
            -> clear the folder (only now: everything was validated)
            -> barrier -> shared-folder check -> build_run -> resume identity -> resume or branch -> LR alignment
            -> start files -> monitor -> the starting model's held-out score
    train:  the recipe's phases (`engine.loop.train_phases`)
    finish: held-out evaluation -> barrier -> stream position and gathered weights (every process: collectives)
            -> final model (recipe), encoder, loss curve and record (main process, `engine.finish.save_run`)
            -> finish

Collectives (every process calls them, or the launch hangs): `clear_output_dir`'s barrier, `check_shared_output_dir`,
`resume_newest`/`load_checkpoint`, `train_phases`, `evaluate_held_out`, `stream_position`, `gather_weights`,
`finish_processes`. Only the main process prints, writes the record and saves the encoder.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.locks import held_here
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.outputs import MARKER, finish_run
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.data.budget import check_document_length, check_token_budget
from hf_encoderize.data.sources import open_documents
from hf_encoderize.training.checkpoints import (
    check_shared_output_dir,
    claimed_step,
    clear_output_dir,
    inherit_metrics,
    load_checkpoint,
    prepare_output_dir,
    resume_newest,
)
from hf_encoderize.training.engine.accelerator import finish_processes, gather_weights, make_accelerator
from hf_encoderize.training.engine.build import Run, align_lr_with_schedule, build_run, stream_position
from hf_encoderize.training.engine.export import EXPORTS
from hf_encoderize.training.engine.finish import Outcome, save_run
from hf_encoderize.training.engine.loop import evaluate_held_out, train_phases
from hf_encoderize.training.monitor import TrainingMonitor, parse_report_to, utc_now
from hf_encoderize.training.plan import model_shape, planned_shape, training_plan
from hf_encoderize.training.recipe import Built, Recipe, Trained
from hf_encoderize.training.resume_checks import check_resume_settings, keep_recorded_warmup

log = get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Started:
    """A run set up and ready to train (`setup`): built once, read by `train` and `finish`."""

    recipe: Recipe
    built: Built
    run: Run
    monitor: TrainingMonitor
    step: int
    """The step training starts from (0, or a resumed or branched checkpoint's)."""
    started_at: str
    initial_eval_loss: float | None
    train_started: float
    """`time.time()` as training begins: the summary's wall time counts from here."""


def run_recipe(recipe: Recipe) -> dict:
    """Set `recipe`'s run up, train it, finish it (module docstring). Returns the summary: the run folder, steps,
    per-step losses, the final held-out loss and masked accuracy, wall time (and the recipe's `summary_extra`).
    The plan line (`training.plan`) comes once the data and the model were checked, before the first step; with
    `--dry-run` it is all that runs (nothing is loaded or written), and the plan is the summary."""
    if recipe.train.dry_run:
        plan = training_plan(recipe.train, recipe.data, world_size(), planned_shape(recipe))
        log.info(plan.line())
        return {"dry_run": True, "output_dir": str(recipe.output_dir), **plan.to_dict()}
    try:
        started = setup(recipe)
        trained = train(started)
    except EncoderizeError:
        discard_refused_start(recipe)
        raise
    return finish(started, trained)


def discard_refused_start(recipe: Recipe) -> None:
    """A fresh run refused before its first optimizer step leaves nothing behind: what it wrote (settings, the base's
    held-out score, the marker) would make the next try "not empty". Only a folder this process holds the lock of is
    touched (this run cleared and marked it; a refusal before that wrote nothing); a resumed or branched run, or one
    that trained a step (its metrics tell what went wrong), keeps its folder as it is."""
    folder = RunFolder(recipe.output_dir)
    if (recipe.train.resume or recipe.train.from_checkpoint or folder.checkpoints.exists()
            or not held_here(folder.root) or '"kind": "train"' in _text(folder.metrics)):
        return
    for name in (*RunFolder.entries(), MARKER):
        path = folder.root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def setup(recipe: Recipe) -> Started:
    """Everything before the first step, in lockstep on every process: checks first, then the model, the run, the
    resumed or branched state and the starting model's held-out score."""
    train, output_dir = recipe.train, recipe.output_dir
    trackers = parse_report_to(train.report_to)
    accelerator = make_accelerator(train, output_dir, trackers)
    recipe.check_launch(accelerator)
    branch_point = Path(train.from_checkpoint) if train.from_checkpoint else None
    if branch_point and train.overwrite and output_dir.resolve() in branch_point.resolve().parents:
        raise EncoderizeError(f"--from-checkpoint {str(branch_point)!r} is inside the --output-dir that --overwrite "
                              "would delete; branch into a new --output-dir")
    resume_from = prepare_output_dir(output_dir, resume=train.resume, overwrite=train.overwrite, inputs=recipe.inputs,
                                     main_process=accelerator.is_main_process)
    if resume_from:  # an extended run keeps the warmup its record holds unless --warmup-steps says otherwise
        recipe = dataclasses.replace(recipe, train=keep_recorded_warmup(output_dir, train))
        train = recipe.train
    started_at = utc_now()
    # A bad source, or one too small for a step, fails before any weight is loaded; so does what needs the tokenizer.
    rows_per_step = train.batch_size * train.grad_accum * accelerator.num_processes
    documents = open_documents(recipe.data, rows_per_step)
    check_data_on_tokenizer(recipe, documents, rows_per_step, main_process=accelerator.is_main_process)
    built = recipe.build(accelerator)
    # Before the first step, once everything a refusal could name is checked (data, tokenizer, weights): a bad input
    # is answered by its one error line alone (docs/hostile_input.md).
    log.info(training_plan(train, recipe.data, accelerator.num_processes, model_shape(built.model)).line())
    if branch_point:
        recipe.check_branch(branch_point, built)
    # Everything is validated (options, data, model): only now may --overwrite delete the earlier run.
    clear_output_dir(output_dir, overwrite=train.overwrite and not train.resume,
                     main_process=accelerator.is_main_process, command=recipe.command, resume=train.resume,
                     known=run_entries(recipe))
    accelerator.wait_for_everyone()
    check_shared_output_dir(accelerator, output_dir)
    built.model.train()
    run = build_run(accelerator, built, documents, recipe.target, train, output_dir)
    # Before loading: a checkpoint of other settings (e.g. another global batch, so other data lanes) is refused in
    # one line, never mistaken for a corrupt one.
    check_resume_settings(output_dir, built.settings.compared(), claimed_step(resume_from) if resume_from else None,
                          extendable=recipe.extendable, main_process=accelerator.is_main_process,
                          written=built.settings.to_dict())
    step = (resume_newest(accelerator, output_dir) if resume_from else
        load_checkpoint(accelerator, branch_point) if branch_point else 0)
    align_lr_with_schedule(run)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        for name, content in recipe.start_files.items():
            (output_dir / name).write_text(json.dumps(content, indent=2))
        if branch_point:
            inherit_metrics(branch_point, output_dir)
    monitor = TrainingMonitor(accelerator, output_dir, train.steps, start_step=step, show=train.progress,
                              label=recipe.command, log_every=train.log_every, trackers=trackers,
                              facts=built.settings.to_dict())
    # The starting model's held-out score, on the rows the final one is scored on: what training changed is then the
    # difference of two figures of one measurement (the base's MLM loss before cpt, the encoder's after).
    initial_eval = evaluate_held_out(run) if (step == 0 and not branch_point and recipe.scores_starting_model
                                              and not train.fast_dev_run) else {}
    if initial_eval:
        monitor.evaluation(0, initial_eval)
    return Started(recipe=recipe, built=built, run=run, monitor=monitor, step=step, started_at=started_at,
                   initial_eval_loss=initial_eval.get("eval_loss") if initial_eval else first_eval_loss(output_dir),
                   train_started=time.time())


def run_entries(recipe: Recipe) -> tuple[str, ...]:
    """The top-level names a training run writes in its folder: the run folder's, the engine's (exports, profile, the
    switch checkpoints of a recipe that switches attention, the trackers' folder named like the run: "{name}") and
    the recipe's own (`start_files`, `outputs`). Its marker lists them, so --overwrite knows them as ours."""
    switch = ("switch",) if recipe.switches_attention else ()
    return (*RunFolder.entries(), *recipe.start_files, *switch, EXPORTS, "profile", "{name}", *recipe.outputs)


def check_data_on_tokenizer(recipe: Recipe, documents, rows_per_step: int, main_process: bool) -> None:
    """The checks that need only the tokenizer and the data, before any weight loads (every process loads the
    tokenizer, so a source that fails fails everywhere; the main one says): a run that will repeat tokens says so now,
    not hours in when the pass begins, and one on fragments of documents too."""
    tokenizer = recipe.load_tokenizer()
    if main_process and recipe.train.fast_dev_run:
        log.warning(f"--fast-dev-run: {recipe.train.steps} steps, without the corpus budget check, the document "
                    "length check and the held-out evaluations")
    elif main_process:
        check_token_budget(recipe.data, documents, tokenizer, rows_per_step, recipe.train.steps, say=log.warning)
        check_document_length(recipe.data, documents, tokenizer, say=log.warning)


def train(started: Started) -> Trained:
    """Train through the recipe's phases (every process)."""
    recipe = started.recipe
    step, counts = train_phases(started.run, started.monitor, started.step, recipe.phases, recipe.switches_attention)
    return Trained(step=step, switch_counts=counts)


def finish(started: Started, trained: Trained) -> dict:
    """Score the trained model, gather what every process holds, and save the encoder and the run record (main
    process); every process returns together, once the encoder is on disk. Returns the command's summary."""
    recipe, run, monitor = started.recipe, started.run, started.monitor
    final_eval = {} if recipe.train.fast_dev_run else evaluate_held_out(run)
    if final_eval:
        monitor.evaluation(trained.step, final_eval)
    monitor.close()
    run.accelerator.wait_for_everyone()
    summary = {**run_summary(run, monitor, trained.step, started.train_started, final_eval), **recipe.summary_extra}
    position = stream_position(run, started.built.data)  # every process: the lanes are gathered
    weights = gather_weights(run.accelerator, run.model)  # every process: FSDP2/ZeRO-3 gather their shards here
    if run.accelerator.is_main_process:
        final = recipe.final_model(run, started.built, trained, weights)
        outcome = Outcome(command=recipe.command, settings=started.built.settings,
                          from_checkpoint=recipe.train.from_checkpoint, encoderize=final.encoderize,
                          saved_dtype=final.saved_dtype, data_position=position, started_at=started.started_at,
                          wall_time_s=summary["wall_time_s"], final_eval=final_eval,
                          initial_eval_loss=started.initial_eval_loss, curve_title=recipe.curve_title)
        save_run(run, final.model, outcome, state_dict=final.weights)
        finish_run(recipe.output_dir)  # the marker lists what the run wrote; the lock goes
    finish_processes(run.accelerator)
    return summary


def run_summary(run: Run, monitor, step: int, started: float, final_eval: dict) -> dict:
    """What `cpt`/`pretrain` return: the run folder, steps, per-step losses, the final held-out scores, wall time."""
    return {"output_dir": str(run.output_dir), "steps": step, "losses": list(monitor.losses), **final_eval,
            "wall_time_s": time.time() - started}


def first_eval_loss(output_dir: Path) -> float | None:
    """The held-out loss logged at step 0 (before the first step) in OUT/metrics.jsonl, for a resumed run; None when
    the run started from a checkpoint or before this was logged."""
    path = RunFolder(output_dir).metrics
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "eval" and record.get("step") == 0:
            return record.get("eval_loss")
    return None
