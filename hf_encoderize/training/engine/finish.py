"""The end of a run: the encoder, loss curve and run record saved, from what the run was and did (`Outcome`).

Design choices:
- `save_run` runs on the main process only and writes the encoder, `loss_curve.png` and `run_record.json`; the
  collectives before it (`accelerator.gather_weights`, `build.stream_position`) are every process's.
- A run whose weights or held-out loss are not finite is refused before anything is written
  (`nonfinite.check_finite_result`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_record import PatchFacts
from hf_encoderize.records.run_settings import RunSettings
from hf_encoderize.training.engine.build import Run
from hf_encoderize.training.nonfinite import check_finite_result


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a run was and did, beyond what the engine knows itself: the parts of its record, typed."""

    command: str
    """`cpt` or `pretrain`."""
    settings: RunSettings
    """What the run was asked to do (the recipe's typed settings: base model, LoRA, phases, identity, ...)."""
    from_checkpoint: str | None
    encoderize: PatchFacts
    """What the attention patch and the token set-up did."""
    saved_dtype: str | None
    data_position: dict
    """Where the data stream stopped (`stream_position`)."""
    started_at: str
    wall_time_s: float
    final_eval: dict
    """The trained model's held-out scores (`evaluate_held_out`)."""
    initial_eval_loss: float | None
    """The starting model's held-out loss on the same rows (None: not scored)."""
    curve_title: str
    """The loss curve's title."""


def save_run(run: Run, model, outcome: Outcome, state_dict: dict | None = None) -> dict:
    """Save the final model to `OUT/encoder`, draw the loss curve, and write `OUT/run_record.json` (main process):
    the one writer of a training run's record, from `outcome` and what the run and its metrics say (loss kernel,
    processes, hardware, tokens seen, final loss, skipped steps, finish time). `state_dict`: gathered weights of a
    sharded run. Returns the record as written."""
    from hf_encoderize.common.run_folder import RunFolder
    from hf_encoderize.common.version import __version__
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.records.run_record import build_run_record
    from hf_encoderize.training.compiling import compile_report
    from hf_encoderize.training.monitor import hardware_facts, plot_loss_curve, read_metrics, utc_now

    folder = RunFolder(run.output_dir)
    check_finite_result(model, state_dict, {"eval_loss": outcome.final_eval.get("eval_loss")})
    train_records = [r for r in read_metrics(folder.metrics) if r["kind"] == "train"]
    record = build_run_record(
        version=__version__, command=outcome.command, settings=outcome.settings, encoderize=outcome.encoderize,
        train_metrics=train_records, final_eval=outcome.final_eval, initial_eval_loss=outcome.initial_eval_loss,
        started_at=outcome.started_at, finished_at=utc_now(), wall_time_s=outcome.wall_time_s,
        num_processes=run.accelerator.num_processes, hardware=hardware_facts(run.accelerator),
        loss_implementation=run.loss_implementation, from_checkpoint=outcome.from_checkpoint,
        saved_dtype=outcome.saved_dtype, data_position=outcome.data_position, compiled=compile_report(run.compiled))
    # The encoder's config block comes from the record it is saved with (`EncoderFacts.of_run`), so the two agree.
    save_encoder(model, run.tokenizer, folder.encoder, overwrite=True, metadata=EncoderFacts.of_run(record),
                 state_dict=state_dict)
    plot_loss_curve(folder.metrics, folder.loss_curve, title=outcome.curve_title)
    record = replace(record, finished_at=utc_now())  # the run finishes once its encoder is on disk
    record.to_json(folder.run_record)
    return record.to_dict()
