"""The run folder OUT: one owner for every path a stage writes or reads, and for reading its JSON files.

Design choices:
- `RunFolder(out)` names every path a stage writes or reads (`encoder/`, `checkpoints/`, `run_record.json`,
  `eval/<name>/summary.json`, `contrastive/`, ...); no module spells those paths out itself.
- What those files hold is typed in `hf_encoderize.records` (`RunRecord`, `EvalSummary`, `ContrastiveRecord`,
  `EncoderFacts`), one record per file format.
- A file that is not valid JSON is a one-line error naming it and what to do (`read_json`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

CONTRASTIVE_RECORD = "contrastive_run.json"  # in an embedding model's folder, written by `contrastive`
EVAL_NAMES = ("base", "encoder", "contrastive")  # base decoder, MLM encoder, embedding model: compared side by side


@dataclass(frozen=True)
class RunFolder:
    """Every path of a run folder OUT (a `cpt`, `pretrain` or `run` output)."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def encoder(self) -> Path:
        return self.root / "encoder"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def run_record(self) -> Path:
        return self.root / "run_record.json"

    @property
    def run_settings(self) -> Path:
        return self.root / "run_settings.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def loss_curve(self) -> Path:
        return self.root / "loss_curve.png"

    @property
    def adapter(self) -> Path:
        return self.root / "adapter"

    @property
    def contrastive(self) -> Path:
        return self.root / "contrastive"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def comparison(self) -> Path:
        return self.eval / "comparison.md"

    @property
    def push_record(self) -> Path:
        return self.root / "push_record.json"

    @property
    def card_sources(self) -> Path:
        """The card options given once (`card --results-dir ...`), so a later `export` or `push` renders no less.
        Hidden: kept out of a push of a converted encoder's own folder."""
        return self.root / ".card_sources.json"

    def eval_results(self, name: str) -> Path:
        """`eval/<name>/`: the summary.json, summary.md and plots of one evaluated model (`EVAL_NAMES`)."""
        return self.eval / name

    def summary(self, name: str) -> Path:
        return self.eval_results(name) / "summary.json"

    @classmethod
    def entries(cls) -> tuple[str, ...]:
        """The top-level names a run folder may hold, every one of them named here (the output-folder policy's list
        of what a run writes)."""
        folder = cls(Path())
        return tuple(getattr(folder, name).name for name in ("checkpoints", "metrics", "run_record", "run_settings",
                                                             "encoder", "loss_curve", "adapter", "eval", "contrastive",
                                                             "push_record", "card_sources"))


def run_model_results(model: str | os.PathLike) -> Path | None:
    """Where the scores of a run's own model belong: RUN/eval/encoder for RUN/encoder, RUN/eval/contrastive for
    RUN/contrastive (RUN holds run_record.json), the folders `card`, `push` and `run` read; None for any other model.
    `eval` writes there by default, and the card's "not evaluated yet" line names the commands from here."""
    model = Path(str(model).rstrip("/"))
    run = RunFolder(model.parent)
    if model.name in ("encoder", "contrastive") and run.run_record.is_file():
        return run.eval_results(model.name)
    return None


def read_json(path: str | os.PathLike) -> dict | None:
    """The JSON object in `path`, None when there is no such file; one line when it is not valid JSON."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EncoderizeError(f"{str(path)!r} is not valid JSON ({err}); re-run the stage that wrote it") from None
    if not isinstance(value, dict):
        raise EncoderizeError(f"{str(path)!r} holds a JSON {type(value).__name__}, not an object; re-run the stage "
                              "that wrote it")
    return value
