"""`contrastive(config)`: check every input, build the model, train with sentence-transformers' trainer, write the
folder under a temporary name and move it into place (the package docstring says why each choice)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import torch

from hf_encoderize.common import outputs
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.locks import LOCK, acquire_lock, check_unlocked, release_lock, releasing_locks
from hf_encoderize.common.precision import resolve_mixed_precision
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD
from hf_encoderize.model.saving import MODELING_FILE, encoder_dir, write_encoder_block
from hf_encoderize.recipes.contrastive import distill
from hf_encoderize.recipes.contrastive.config import ContrastiveConfig
from hf_encoderize.recipes.contrastive.losses import mine_negatives, stage_loss
from hf_encoderize.recipes.contrastive.model import (
    build_model,
    check_peft_integration,
    dropout_kwargs,
    merge_adapters,
    saved_prompts,
    source_dtype,
    warn_without_dropout,
)
from hf_encoderize.recipes.contrastive.resume import check_resume, checkpoints, set_aside, settings_of, work_dir
from hf_encoderize.recipes.contrastive.rows import check_distinct, load_rows
from hf_encoderize.records.contrastive_record import ContrastiveRecord, ContrastiveStage
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.training.lora import AdapterConfig, check_targets_before_load
from hf_encoderize.training.monitor import parse_report_to

# What `--report-to` may name here: the trackers both Accelerate (`parse_report_to`) and transformers' Trainer know.
TRAINER_TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "clearml", "dvclive")


@releasing_locks  # a run that fails gives its output folder's lock back
def contrastive(config: ContrastiveConfig, adapter: AdapterConfig | None = None) -> dict:
    """Train the contrastive stage and save a sentence-transformers folder to `config.output_dir`. Returns a summary.

    Works under `accelerate launch` / `torchrun` as it is (the trainer is sentence-transformers' on Accelerate); only
    the main process writes the output."""
    from accelerate import PartialState
    from sentence_transformers import SentenceTransformerTrainer

    adapter = adapter or AdapterConfig()
    report_to = parse_report_to(config.report_to, TRAINER_TRACKERS, "the contrastive trainer (transformers' Trainer)")
    if adapter.load_in_4bit:
        raise EncoderizeError("contrastive does not train 4-bit weights; drop --load-in-4bit (LoRA works without it)")
    if adapter.lora_r:
        check_peft_integration()
    source = encoder_dir(config.encoder)
    check_targets_before_load(source, adapter)  # a --lora-targets typo, from the config alone
    out, work = Path(config.output_dir), work_dir(config.output_dir)
    # --resume too: the output folder is written at the end, so what the user has there is checked now, not deleted then
    out = outputs.check_output_dir(config.output_dir, overwrite=config.overwrite, resumable=not config.resume,
                                   inputs=outputs.inputs_of(config))
    check_unlocked(work)  # another contrastive run is live on this output: its work folder is not wiped
    broken = check_resume(config, adapter, work)  # a checkpoint cut short while saving: resumed from the one before
    rows = load_rows(config)  # every input is checked before the output folder is touched
    check_distinct(rows, config)  # a batch holds no text twice: data that cannot fill one would train 0 steps
    teacher = distill.load_teacher(config.teacher) if config.method == "distill" else None  # before the student
    two_views = config.method == "simcse" or config.distill_contrastive_weight  # dropout makes SimCSE's two views
    dropout = dropout_kwargs(source, config.dropout) if two_views else {}
    model = build_model(source, config, dropout, adapter)
    warn_without_dropout(model, config)  # SimCSE's two views of a text differ only by dropout
    prompts = saved_prompts(config, model.tokenizer)
    rows = mine_negatives(model, rows, config, prompts)  # --hard-negatives: negative_1..negative_K columns
    if teacher is not None:  # the projection to the teacher's width, the teacher's embeddings as labels, MSELoss
        model, rows, loss, made = distill.prepare(model, rows, teacher, config, prompts.get("text", ""))
        del teacher
    else:
        loss, made = stage_loss(model, config), {}  # with --matryoshka-dims, at each size
    roles = {"anchor": "query", "text": "text",
             **{column: "document" for column in rows.column_names if column not in ("anchor", "text", "label")}}
    training = ({column: prompts[roles[column]] for column in rows.column_names if roles.get(column) in prompts}
        if config.lead_token else None)
    args = _training_args(config, work, len(rows), training, report_to)  # sets up a distributed launch's processes
    state = PartialState()
    state.wait_for_everyone()  # every process has checked the folders before the main one changes them
    if state.is_main_process:  # the lock first, then the wipe: a run that went live while this one loaded is refused
        work.mkdir(parents=True, exist_ok=True)  # here, not wiped (lock and checkpoints); it goes with the work folder
        acquire_lock(work, "contrastive")
        for entry in [e for e in work.iterdir() if e.name != LOCK] if not config.resume else []:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        if not config.resume:
            (work / "trainer").mkdir(parents=True)
            (work / "settings.json").write_text(json.dumps(settings_of(config, adapter), indent=2) + "\n")
        set_aside(broken, work)
    state.wait_for_everyone()
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=rows, loss=loss)
    _first_step_trains(trainer)
    if not config.progress:  # no progress bar and no printed log dicts either (the log is in contrastive_run.json)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    keep_tracker_logs(trainer, work)
    try:
        trainer.train(resume_from_checkpoint=True if config.resume else None)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (the type says which); the CLI says "interrupted"
        saved = checkpoints(work)  # the Trainer's checkpoint-STEP folders
        where = f"the newest checkpoint is {str(saved[-1])!r}" if saved else f"checkpoints are in {str(work)!r}"
        raise type(interrupt)(f"{where}; run the same command with --resume to continue") from None
    summary = {}
    if trainer.is_world_process_zero():
        summary = _write_output(trainer, model, source, config, adapter, dropout, len(rows), out, work, made)
    trainer.accelerator.wait_for_everyone()
    return {**summary, "output_dir": str(out)}

def keep_tracker_logs(trainer, work: Path) -> None:
    """tensorboard writes into the work folder's `trackers/` (a resumed run appends there), which moves into the
    output folder with the model; transformers' default, `trainer/runs/`, goes with the checkpoints."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:  # TENSORBOARD_LOGGING_DIR wins
            callback.logging_dir = str(work / "trackers")


def _training_args(config: ContrastiveConfig, work: Path, rows: int, prompts: dict | None,
                   report_to: list[str] | None = None):
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    # Several CPU processes (torchrun/accelerate with gloo): the trainer goes distributed only when told
    cpu, bf16 = not torch.cuda.is_available(), resolve_mixed_precision(config.mixed_precision) == "bf16"
    multi_cpu = cpu and world_size() > 1
    return SentenceTransformerTrainingArguments(
        **({"ddp_backend": "gloo"} if multi_cpu else {}),
        **({"use_cpu": True} if multi_cpu or (cpu and bf16) else {}),  # bf16 on a CPU: refused without use_cpu
        output_dir=str(work / "trainer"), max_steps=config.steps, per_device_train_batch_size=config.batch_size,
        # transformers v5 reads a float warmup_steps below 1 as a ratio (warmup_ratio is deprecated)
        learning_rate=config.learning_rate, warmup_steps=config.warmup_ratio, lr_scheduler_type="linear",
        seed=config.seed, data_seed=config.seed, batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="steps", save_steps=config.save_every, save_total_limit=config.keep_last,
        report_to=report_to or "none", logging_steps=max(1, config.steps // 20), disable_tqdm=not config.progress,
        prompts=prompts,
        dataloader_drop_last=rows >= config.batch_size,
        bf16=bf16,  # autocast over the fp32 master weights
    )

def warmup_decay_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak LR at optimizer step `step` (0-based), as cpt's schedule counts: linear warmup whose
    first step already trains, then linear decay to zero at `total_steps`, the step after the last one.
    transformers' "linear" starts at 0, so step 1 of a SimCSE run changed nothing and logged learning_rate 0.0.

    >>> [round(warmup_decay_factor(s, 6, 2), 2) for s in range(6)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

def _first_step_trains(trainer) -> None:
    """Give `trainer` the warmup_decay_factor schedule (same warmup count as transformers' ratio gives). The
    Trainer logs the LR each step applied, so the run record's learning_rate is what the step trained with."""
    from functools import partial

    def create_scheduler(num_training_steps: int, optimizer=None):
        if trainer.lr_scheduler is None:
            factor = partial(warmup_decay_factor, total_steps=num_training_steps,
                             warmup_steps=trainer.args.get_warmup_steps(num_training_steps))
            trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or trainer.optimizer, factor)
            trainer._created_lr_scheduler = True
        return trainer.lr_scheduler

    trainer.create_scheduler = create_scheduler

def _write_output(trainer, model, source: Path, config: ContrastiveConfig, adapter: AdapterConfig, dropout: dict,
                  rows: int, out: Path, work: Path, made: dict) -> dict:
    """Merge adapters, save under `work/final`, finish the folder, then move it into place (main process)."""
    final = work / "final"
    shutil.rmtree(final, ignore_errors=True)
    if adapter.lora_r:
        merge_adapters(model, source, work / "adapter")
    saved_dtype = source_dtype(source)
    if saved_dtype is not None:
        model.to(saved_dtype)  # trained on fp32 master weights, saved in the encoder's dtype
    model.prompts = saved_prompts(config, model.tokenizer)
    model.default_prompt_name = "text" if "text" in model.prompts else None
    model.save(str(final))
    log = trainer.state.log_history
    summary = _finish_folder(final, source, config, dropout, [e["loss"] for e in log if "loss" in e], rows,
                             adapter, log, made)
    outputs.match_umask(final)  # safetensors wrote model.safetensors 0600 beside 0644 files
    if out.is_symlink() or out.exists():  # allowed at the start; checked again now that it goes
        if out.is_dir() and not out.is_symlink() and any(out.iterdir()):
            outputs.check_deletable(out)
        out.unlink() if out.is_symlink() else shutil.rmtree(out)
    final.rename(out)
    if adapter.lora_r and adapter.save_adapter:  # the unmerged adapter, next to the merged model
        shutil.move(str(work / "adapter"), str(out / "adapter"))
        outputs.match_umask(out / "adapter")
    if (work / "trackers").is_dir():  # --report-to tensorboard's events
        shutil.move(str(work / "trackers"), str(out / "trackers"))
    outputs.write_marker(out, "contrastive")  # what a later --overwrite may replace
    release_work(work)
    return {**summary, "steps": trainer.state.global_step}  # the steps trained, not the ones asked for

def release_work(work: Path) -> None:
    """The work folder goes after the last write, its lock last: the lock is given back (here, not only on failure, so
    a later run in this process checks the lock again) before the then empty folder is removed, never with it."""
    for entry in [e for e in work.iterdir() if e.name != LOCK] if work.is_dir() else []:
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    release_lock(work)
    with contextlib.suppress(OSError):  # a run that took the lock since keeps its folder
        work.rmdir()


def _finish_folder(folder: Path, source: Path, config: ContrastiveConfig, dropout: dict, logged: list, rows: int,
                   adapter: AdapterConfig, log: list, made: dict):
    """Dropout back to the source's values, the shipped modeling file, the run record (`made`: the distillation
    edits made, `distill.with_variants`)."""
    source_config = json.loads((source / "config.json").read_text())
    saved = json.loads((folder / "config.json").read_text())
    updates = {name: source_config.get(name, 0.0) for name in dropout}
    auto_map = {k: v for k, v in (saved.get("auto_map") or {}).items() if k != "AutoModelForMaskedLM"}
    if auto_map and (source / MODELING_FILE).is_file():
        shutil.copyfile(source / MODELING_FILE, folder / MODELING_FILE)
        updates["auto_map"] = auto_map
    stage = ContrastiveStage(**{  # typed: a misspelt key fails here
        "method": config.method, "pooling": config.pooling, "loss": config.loss, "steps": config.steps,
        "batch_size": config.batch_size, "learning_rate": config.learning_rate, "scale": config.scale,
        "training_dropout": dropout, "rows": rows, "final_loss": logged[-1] if logged else None,
        "lora": {"r": adapter.lora_r, "alpha": adapter.lora_alpha, "targets": adapter.lora_targets,
                 "merged": True} if adapter.lora_r else None,
        "processes": world_size(),
        "data_identity": config.identity_value("data_files"),  # what `run` compares before reusing the stage
        "lead": json.loads((folder / "config_sentence_transformers.json").read_text()).get("prompts", {}).get(
            "text", ""), **distill.distill_stage(config, folder, made)})
    previous = EncoderFacts.from_dict(saved.get("hf_encoderize"))  # the MLM encoder's facts, kept
    write_encoder_block(folder, replace(previous, contrastive=stage), updates=updates,
                        remove=() if "auto_map" in updates else ("auto_map",))
    ContrastiveRecord(source=os.fspath(source), config=asdict(config), stage=stage, losses=logged,
                      facts={"metrics": log, "base_encoder": previous.to_dict()}).to_json(folder / CONTRASTIVE_RECORD)
    return {"method": config.method, "rows": rows, "steps": config.steps, "first_loss": logged[0] if logged
            else None, "final_loss": stage.final_loss}
