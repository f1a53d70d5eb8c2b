"""One runner for the training recipes: the lockstep sequence every process walks through, written once.

`cpt` and `pretrain` differ in how the model comes to be (loaded and encoderized, or built at random), in what they
train (one MLM phase, or CLM then MLM with a switch) and in the final model (LoRA merged, or as trained). They hand
`run_recipe` a `Recipe` saying only that; the order below, and which steps are collectives every process must reach,
lives here and nowhere else:

    accelerator -> launch checks -> output folder (refused before any work) -> documents -> model (recipe)
    -> clear the folder (only now: everything was validated) -> barrier -> shared-folder check -> build_run
    -> resume identity -> resume or branch -> LR alignment -> monitor -> train (recipe's phases)
    -> held-out evaluation -> barrier -> stream position and gathered weights (every process: collectives)
    -> final model, record and save (main process) -> finish

Collectives (every process calls them, or the launch hangs): `clear_output_dir`'s barrier, `check_shared_output_dir`,
`resume_newest`/`load_checkpoint`, `train_until`, `evaluate_held_out`, `stream_position`, `gather_weights`,
`finish_processes`. Only the main process prints, writes the record and saves the encoder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.outputs import finish_run
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.data.budget import check_document_length, check_token_budget
from hf_encoderize.data.sources import DataConfig, open_documents
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.training.checkpoints import (
    check_resume_settings,
    check_shared_output_dir,
    claimed_step,
    clear_output_dir,
    inherit_metrics,
    load_checkpoint,
    prepare_output_dir,
    resume_newest,
)
from hf_encoderize.training.engine.accelerator import finish_processes, make_accelerator
from hf_encoderize.training.engine.build import Run, align_lr_with_schedule, build_run
from hf_encoderize.training.engine.finish import gather_weights, run_summary, save_run, stream_position
from hf_encoderize.training.engine.loop import evaluate_held_out
from hf_encoderize.training.exports import export_encoder
from hf_encoderize.training.monitor import TrainingMonitor, hardware_facts, parse_report_to, utc_now
from hf_encoderize.training.train_config import TrainConfig

log = get_logger(__name__)


@dataclass
class Built:
    """What a recipe's `build` returns: the model where it trains, and the facts that depend on it."""

    model: torch.nn.Module
    tokenizer: object
    data: DataConfig
    """The data config as it trains (cpt: padded rows for a model whose packed documents would leak)."""
    facts: dict
    """The run record's settings, sent to trackers and compared on resume (`identity` included)."""
    export_metadata: Callable[[int], EncoderFacts]
    """Step -> the metadata of an intermediate encoder (`--export-steps`)."""
    export_dtype: torch.dtype
    """The dtype encoders are saved in (the loaded one; training may hold fp32 master weights)."""
    settings: dict | None = None
    """What a resume compares, when it is not `facts` (pretrain leaves its memory estimate out)."""
    extra: dict = field(default_factory=dict)
    """Whatever else the recipe needs at the end (its report, LoRA model, special tokens)."""


@dataclass
class Recipe:
    """What differs between the training commands; `run_recipe` does the rest."""

    _: KW_ONLY
    command: str
    """`cpt` or `pretrain`: the run record's command, the output folder's marker, the monitor's label."""
    output_dir: Path
    data: DataConfig
    masking: MaskingConfig
    train: TrainConfig
    inputs: list[Path]
    """Local inputs the output folder must never be, hold or sit inside (`common.outputs`)."""
    build: Callable[[object], Built]
    """accelerator -> the model, loaded or built where it trains. Runs after the output folder was checked."""
    train_phases: Callable[[Run, TrainingMonitor, int], int]
    """(run, monitor, step) -> the last step: train to the end, through the recipe's phases."""
    save: Callable[[Run, Built, dict | None], tuple[torch.nn.Module, dict | None, dict]]
    """Main process, after training: (run, built, gathered weights) -> (the final model, the weights as they are to
    be saved, the record's entries only this recipe knows: what encoderize did, the saved dtype, ...)."""
    extendable: bool = False
    """A resume may extend --max-steps (cpt); pretrain's phases are fixed by its budget."""
    check_launch: Callable[[object], None] | None = None
    """accelerator -> refuse, before any work, what this launch cannot do."""
    check_branch: Callable[[Path, Built], None] | None = None
    """(checkpoint, built) -> refuse a branch point once the model's facts are known."""
    on_start: Callable[[Run, int], None] | None = None
    """Main process, once the step is known: what the recipe records before training (pretrain: its schedule)."""
    end_training: Callable[[Run, int], None] | None = None
    """Every process, after the last phase: leave the model as it is scored and saved (pretrain: MLM, bidirectional)."""
    summary_extra: dict = field(default_factory=dict)
    """Added to the summary the command returns."""


def run_recipe(recipe: Recipe) -> dict:
    """Walk `recipe` through the lockstep sequence (module docstring). Returns the summary: the run folder, steps,
    per-step losses, the final held-out loss and masked accuracy, wall time (and the recipe's `summary_extra`)."""
    train, output_dir = recipe.train, recipe.output_dir
    trackers = parse_report_to(train.report_to)
    accelerator = make_accelerator(train, output_dir, trackers)
    if recipe.check_launch:
        recipe.check_launch(accelerator)
    branch_point = Path(train.from_checkpoint) if train.from_checkpoint else None
    if branch_point and train.overwrite and output_dir.resolve() in branch_point.resolve().parents:
        raise EncoderizeError(f"--from-checkpoint {str(branch_point)!r} is inside the --output-dir that --overwrite "
                              "would delete; branch into a new --output-dir")
    resume_from = prepare_output_dir(output_dir, resume=train.resume, overwrite=train.overwrite, inputs=recipe.inputs,
                                     main_process=accelerator.is_main_process)
    started_at = utc_now()
    documents = open_documents(recipe.data)  # a bad source fails before any weight is loaded
    built = recipe.build(accelerator)
    if branch_point and recipe.check_branch:
        recipe.check_branch(branch_point, built)
    if accelerator.is_main_process:  # a run that will repeat tokens says so now, not hours in when the pass begins
        check_token_budget(built.data, documents, built.tokenizer,
                           train.batch_size * train.grad_accum * accelerator.num_processes, train.steps,
                           say=log.warning)
        check_document_length(built.data, documents, built.tokenizer, say=log.warning)
    # Everything is validated (options, data, model): only now may --overwrite delete the earlier run.
    clear_output_dir(output_dir, overwrite=train.overwrite and not train.resume,
                     main_process=accelerator.is_main_process, command=recipe.command, resume=train.resume)
    accelerator.wait_for_everyone()
    check_shared_output_dir(accelerator, output_dir)
    built.model.train()
    run = build_run(accelerator, built.model, built.tokenizer, documents, built.data, recipe.masking, train, output_dir)
    run.exporter = lambda at: export_encoder(run, at, built.export_metadata(at), built.export_dtype)
    # Before loading: a checkpoint of other settings (e.g. another global batch, so other data lanes) is refused in
    # one line, never mistaken for a corrupt one.
    check_resume_settings(output_dir, built.settings or built.facts, claimed_step(resume_from) if resume_from else None,
                          extendable=recipe.extendable, main_process=accelerator.is_main_process)
    step = resume_newest(accelerator, output_dir) if resume_from else \
        load_checkpoint(accelerator, branch_point) if branch_point else 0
    align_lr_with_schedule(run)
    if accelerator.is_main_process:
        if recipe.on_start:
            recipe.on_start(run, step)
        if branch_point:
            inherit_metrics(branch_point, output_dir)
    monitor = TrainingMonitor(accelerator, output_dir, train.steps, start_step=step, show=train.progress,
                              label=recipe.command, log_every=train.log_every, trackers=trackers, facts=built.facts)
    # The starting model's held-out score, on the rows the final one is scored on: what training changed is then the
    # difference of two figures of one measurement (the base's MLM loss before cpt, the encoder's after). Not for
    # pretrain: its starting model is random weights, and its objective at step 0 is the first phase's.
    initial_eval = evaluate_held_out(run) if step == 0 and not branch_point and recipe.command != "pretrain" else {}
    if initial_eval:
        monitor.evaluation(0, initial_eval)
    started = time.time()
    step = recipe.train_phases(run, monitor, step)
    if recipe.end_training:
        recipe.end_training(run, step)
    final_eval = evaluate_held_out(run)
    if final_eval:
        monitor.evaluation(step, final_eval)
    monitor.close()
    accelerator.wait_for_everyone()
    summary = {**run_summary(run, monitor, step, started, final_eval), **recipe.summary_extra}
    position = stream_position(run, built.data)  # every process: the lanes are gathered
    weights = gather_weights(run)  # every process: FSDP2/ZeRO-3 gather their shards here
    if accelerator.is_main_process:
        model, weights, own = recipe.save(run, built, weights)
        record = {"command": recipe.command, **built.facts, "from_checkpoint": train.from_checkpoint, **own,
                  "data_position": position, "loss_implementation": run.loss_implementation,
                  "num_processes": accelerator.num_processes, "hardware": hardware_facts(accelerator),
                  "wall_time_s": round(summary["wall_time_s"], 2), "eval_loss": summary.get("eval_loss"),
                  "eval_masked_accuracy": summary.get("eval_masked_accuracy"), "started_at": started_at,
                  "initial_eval_loss": initial_eval.get("eval_loss") if initial_eval else
                  first_eval_loss(output_dir)}
        save_run(model, built.tokenizer, output_dir, record, state_dict=weights)
        finish_run(output_dir)  # the marker lists what the run wrote; the lock goes
    finish_processes(accelerator)
    return summary


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
