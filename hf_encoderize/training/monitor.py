"""What a training run shows and leaves behind: progress bar, metrics JSONL, trackers, loss curve, hardware facts.

Design choices:
- Only the main process prints, writes files or talks to trackers; the other ranks get a monitor that does nothing
  but keep time.
- `metrics.jsonl` is the source of truth: one JSON object per logged optimizer step (`"kind": "train"`) and per
  evaluation (`"kind": "eval"`). On `--resume`, lines past the resumed step are dropped, so the file reads like one
  unbroken run. The loss-curve PNG is drawn from it at the end.
- Trackers are Accelerate's (`log_with`): tensorboard, wandb, trackio, ... whichever the user names and has installed.
- Throughput counts real tokens (padding excluded), so packed and padded runs compare fairly.
- The training step leaves its figures on the device; they are read once every `log_every` steps (one host sync for
  all of them), so the GPU never idles waiting for a loss to be printed. Every step still gets its own line.
  Masked accuracy is computed on logged steps only (null on the others): it costs an arg-max over the vocabulary.
- The run record (`engine.finish`) takes `hardware_facts` from here; it never holds a token or secret: it is built
  from the config dataclasses (which have no token field) and from these facts.
- The loss curve draws each target's steps in its own colour: a CLM phase predicts next tokens, an MLM phase masked
  tokens, so the two losses are not the same quantity. A train line names its `target`; metrics files written before
  issue 70's rename called it `objective`, and `line_target` reads both.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.records.learnt import learnt
from hf_encoderize.records.run_record import HardwareFacts

log = get_logger(__name__)

ETA_AFTER = 3  # steps timed (past the first) before the ETA line
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow",
                    "comet_ml": "comet_ml", "aim": "aim", "clearml": "clearml", "dvclive": "dvclive"}


def parse_report_to(report_to: str | None, known: tuple[str, ...] | None = None, who: str = "") -> list[str]:
    """`"tensorboard,wandb"` -> ["tensorboard", "wandb"]; `none` -> []; a missing package is a one-line error.
    `known`: the trackers the command can log to (default: every one of TRACKER_PACKAGES), `who` says why fewer.

    >>> parse_report_to("none"), parse_report_to(None)
    ([], [])
    """
    import importlib.util

    names = [n.strip() for n in (report_to or "none").split(",") if n.strip() and n.strip() != "none"]
    for name in names:
        if name not in TRACKER_PACKAGES:
            raise EncoderizeError(f"--report-to: unknown tracker {name!r}; pick from {', '.join(TRACKER_PACKAGES)}")
        if known is not None and name not in known:
            raise EncoderizeError(f"--report-to {name}: {who} cannot log to it; pick from {', '.join(known)}")
        if importlib.util.find_spec(TRACKER_PACKAGES[name]) is None:
            raise EncoderizeError(f"--report-to {name}: the package is not installed; pip install {name}")
    return names


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class TrainingMonitor:
    """Progress bar + metrics JSONL + trackers for one run. Call `step()` after every optimizer step."""

    def __init__(self, accelerator, output_dir: Path, total_steps: int, *, start_step: int = 0, show: bool = True,
                 label: str = "cpt", log_every: int = 10, trackers: list[str] | None = None, facts: dict | None = None):
        self.accelerator, self.total_steps, self.start_step = accelerator, total_steps, start_step
        self.main, self.log_every = accelerator.is_main_process, log_every
        self.path = RunFolder(output_dir).metrics
        self.started = self.last = time.perf_counter()
        self.tokens = 0
        self.losses: list[float] = []  # this process's run of steps (from `start_step` on)
        self.pending: list[tuple] = []  # steps whose device figures are not read yet
        self.bar = None
        self.timed: list[float] = []  # step times past the first, until the ETA is said
        self.eta_said = False
        if trackers:
            accelerator.init_trackers(Path(output_dir).name, config=flatten_facts(facts or {}))
        if self.main:
            _truncate_after(self.path, start_step)
            if show and log.isEnabledFor(logging.INFO):  # -q: warnings and errors only, so no bar either
                from tqdm.auto import tqdm

                # Off a terminal (CI logs, nohup) a redraw every 30 s keeps the log readable.
                self.bar = tqdm(total=total_steps, initial=start_step, desc=label, dynamic_ncols=True,
                                mininterval=0.5 if sys.stderr.isatty() else 30.0)

    def step(self, step: int, *, lr: float, totals, counts, processes: int, target: str = "mlm",
             with_accuracy: bool = True, data_wait_s: float = 0.0) -> list[dict]:
        """Record one optimizer step from the engine's device tensors (`train.train_step`): `totals` = summed loss,
        correct predictions and gradient norms over processes; `counts` = labelled and real tokens of the global batch.
        They are read (one host sync for all pending steps) every `log_every` steps; returns the records written then
        (empty between), for the non-finite check."""
        now = time.perf_counter()
        self.pending.append((step, lr, totals.detach(), counts.detach(), processes, target, with_accuracy,
                             data_wait_s, now - self.last, now))
        self.last = now
        return self.flush() if step % self.log_every == 0 else []

    def flush(self) -> list[dict]:
        """Turn the pending steps into records: write metrics.jsonl, trackers and the progress bar (main process)."""
        if not self.pending:
            return []
        values = torch.stack([torch.cat([p[2].float(), p[3].float()]) for p in self.pending]).cpu().tolist()
        # That copy waited for the device to finish every pending step (the host runs ahead of a GPU): the wait is the
        # last step's, so step times add up to wall time between flushes rather than to the host's queueing time.
        synced = time.perf_counter()
        *rest, seconds, _ = self.pending[-1]
        self.pending[-1], self.last = (*rest, seconds + synced - self.last, synced), synced
        records = [self._record(pending, *row) for pending, row in zip(self.pending, values, strict=True)]
        self.pending = []
        if self.main:
            for record in records:
                self._write(record)
                self.accelerator.log({f"train/{k}": v for k, v in record.items() if isinstance(v, float | int)},
                                     step=record["step"])
            self._show(records)
            self._say_eta(records)
        return records

    def _say_eta(self, records: list[dict]) -> None:
        """Once, as soon as `ETA_AFTER` steps past the first (which pays compilation and warm-up) are timed: the mean
        step time and when the run should end, above the bar (the bar's own ETA counts the first step in)."""
        self.timed += [r["step_time_s"] for r in records if r["step"] > self.start_step + 1]
        if self.eta_said or len(self.timed) < ETA_AFTER:
            return
        self.eta_said = True
        per_step = sum(self.timed) / len(self.timed)
        left = self.total_steps - records[-1]["step"]
        ends = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=left * per_step)
        self._say(f"ETA: {left:,} steps left x {per_step:.3g} s = {_duration(left * per_step)} "
                  f"(ends about {ends:%Y-%m-%d %H:%M} UTC)")

    def _say(self, message: str) -> None:
        """A line above the bar, on its stream (stdout holds only the result), or a log line without a bar."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            log.info(message)

    def _record(self, pending: tuple, loss: float, correct: float, norm: float, labelled: float,
                tokens: float) -> dict:
        step, lr, _, _, processes, target, with_accuracy, wait, seconds, ended = pending
        labelled = max(labelled, 1.0)
        self.tokens += int(tokens)
        self.losses.append(loss / labelled)
        record = {"kind": "train", "step": step, "target": target, "loss": loss / labelled,
                  "masked_accuracy": correct / labelled if with_accuracy else None, "lr": lr,
                  "grad_norm": norm / processes, "tokens": int(tokens), "labelled_tokens": int(labelled),
                  "step_time_s": seconds, "tokens_per_s": tokens / max(seconds, 1e-9), "data_wait_s": wait,
                  "elapsed_s": ended - self.started}  # when this step ended, not when its figures were read
        if not (math.isfinite(loss) and math.isfinite(norm)):
            record["skipped_nonfinite"] = True
        return record

    def _show(self, records: list[dict]) -> None:
        last = records[-1]
        if self.bar is not None:
            rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
            accuracy = next((r["masked_accuracy"] for r in reversed(records) if r["masked_accuracy"] is not None),
                            None)
            self.bar.set_postfix(loss=f"{last['loss']:.3f}", acc="-" if accuracy is None else f"{accuracy:.3f}",
                                 lr=f"{last['lr']:.1e}", tok_s=f"{rate:,.0f}", refresh=False)
            self.bar.update(len(records))
        else:
            log.info(f"step {last['step']}/{self.total_steps} loss {last['loss']:.4f} lr {last['lr']:.2e}")

    def evaluation(self, step: int, metrics: dict) -> None:
        if not self.main:
            return
        self._write({"kind": "eval", "step": step, **metrics})
        scored = {k: v for k, v in metrics.items() if v is not None}  # None: no labelled token to score
        self.accelerator.log({f"eval/{k.removeprefix('eval_')}": v for k, v in scored.items()}, step=step)
        self._say(f"step {step}: " + (", ".join(f"{k} {v:.4f}" for k, v in scored.items()) or
                                      "no held-out token was masked, so no held-out score (raise --mlm-probability)"))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _write(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json_line(record))


def _duration(seconds: float) -> str:
    """3725 -> "1h 02m"; 95 -> "1m 35s"; 8.5 -> "8.5s"."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"
    return f"{seconds:.1f}s"


def json_line(record: dict) -> str:
    """One strict-JSON line: a NaN/inf value (a skipped non-finite step) is written as null, never as bare NaN."""
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
    return json.dumps(clean, allow_nan=False) + "\n"


def read_metrics(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines[:-1]]
    try:
        records += [json.loads(line) for line in lines[-1:]]
    except json.JSONDecodeError:
        pass  # a last line cut by a kill mid-write: that step is past every checkpoint and is logged again on resume
    return records


def _truncate_after(path: Path, step: int) -> None:
    """Drop records past `step` (written after the checkpoint a resumed run starts from)."""
    if not path.exists():
        return  # created by the first record, so a run that fails before training leaves no file behind
    kept = [r for r in read_metrics(path) if r["step"] <= step]
    path.write_text("".join(json_line(r) for r in kept))


def line_target(line: dict) -> str:
    """The target a metrics train line was learnt under; lines written before issue 70's rename said `objective`
    (kept so earlier runs' metrics still plot), and the earliest said nothing (MLM)."""
    return line.get("target", line.get("objective", "mlm"))


def plot_loss_curve(metrics_path: Path, png_path: Path, title: str = "MLM continued pretraining") -> Path | None:
    """Training loss (and held-out eval loss, when there is any) against steps, as a PNG. None if nothing to plot."""
    records = read_metrics(metrics_path)
    train = [r for r in records if r["kind"] == "train" and not r.get("skipped_nonfinite")]
    if not train:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    evals = [r for r in records if r["kind"] == "eval" and r.get("eval_loss") is not None]
    figure, axis = plt.subplots(figsize=(7, 4), dpi=120)
    for target in dict.fromkeys(line_target(r) for r in train):
        steps = [r for r in train if line_target(r) == target]
        axis.plot([r["step"] for r in steps], [r["loss"] for r in steps], lw=1, alpha=0.8,
                  label=f"train loss ({learnt(target).card_label})")
    if evals:
        axis.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="held-out loss")
    axis.set(xlabel="optimizer step", ylabel="cross-entropy per predicted token", title=title)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(png_path)
    plt.close(figure)
    return Path(png_path)


def hardware_facts(accelerator) -> HardwareFacts:
    """Device, GPU name and library versions, for the run record and the model card."""
    import platform

    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return HardwareFacts(
        device=accelerator.device.type,
        gpu_name=torch.cuda.get_device_name(0) if cuda else None,
        gpu_count=torch.cuda.device_count() if cuda else 0,
        num_processes=accelerator.num_processes,
        mixed_precision=str(accelerator.mixed_precision),
        distributed_type=str(accelerator.distributed_type).split(".")[-1],
        rocm=bool(getattr(torch.version, "hip", None)),
        cpu=platform.processor() or platform.machine(),
        torch=torch.__version__,
        transformers=transformers.__version__,
    )


def flatten_facts(facts: dict) -> dict:
    """Trackers take scalars only (tensorboard's hparams refuse anything else): nested dicts become `key.sub` at any
    depth, other values (lists, paths) strings, Nones are dropped.

    >>> flatten_facts({"a": {"b": {"c": 1}, "d": [1, 2], "e": None}, "f": 0.5})
    {'a.b.c': 1, 'a.d': '[1, 2]', 'f': 0.5}
    """
    flat = {}
    for key, value in facts.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in flatten_facts(value).items()})
        elif value is not None:
            flat[key] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat


class Trackers:
    """Accelerate's trackers (the classes `log_with` picks) outside a training loop: `eval`'s grid logs each
    fine-tuning run's scores to them, with the run's position in the grid as the step. tensorboard writes its events
    under `logging_dir/run_name`, as a training run's trackers do under its output folder."""

    def __init__(self, names: list[str], run_name: str, logging_dir: Path, config: dict | None = None):
        from accelerate.tracking import LOGGER_TYPE_TO_CLASS

        self.trackers = []
        for name in names:
            kind = LOGGER_TYPE_TO_CLASS[name]
            tracker = kind(run_name, str(logging_dir)) if kind.requires_logging_directory else kind(run_name)
            tracker.start()
            if config:
                tracker.store_init_configuration(flatten_facts(config))
            self.trackers.append(tracker)

    def log(self, values: dict, step: int) -> None:
        for tracker in self.trackers:
            tracker.log(values, step=step)

    def finish(self) -> None:
        for tracker in self.trackers:
            tracker.finish()
