"""The run folder OUT and the records its stages hand each other, typed: one owner for every path and file format.

Design choices:
- `RunFolder(out)` names every path a stage writes or reads (`encoder/`, `checkpoints/`, `run_record.json`,
  `eval/<name>/summary.json`, `contrastive/`, ...); no module spells those paths out itself.
- The files between stages are dataclasses with `to_json`/`from_json` (as sentence-transformers' `ModelCardData`):
  `RunRecord` (`run_record.json`, written by `cpt`/`pretrain`), `EvalSummary` (`summary.json`, written by `eval`),
  `ContrastiveRecord` (`contrastive_run.json`, written by `contrastive`). The common fields are typed; the rest of a
  record (the training facts, hardware, timings: many and growing) is kept whole in `facts` and written back as it was
  read, so a record written by an older or newer version reads and re-writes without loss, and the card reads the
  same keys it always did.
- A file that is not valid JSON is a one-line error naming it and what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
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


@dataclass
class _Fields:
    """Typed fields first; `facts` keeps every other key of the file, in the file's order. Read by attribute."""

    facts: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict):
        typed = {f.name for f in fields(cls)} - {"facts"}
        data = data or {}
        return cls(**{k: data[k] for k in typed if k in data}, facts={k: v for k, v in data.items() if k not in typed})

    def to_dict(self) -> dict:
        typed = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "facts"}
        return {**typed, **self.facts}

    @classmethod
    def from_json(cls, path: str | os.PathLike):
        """The record in `path`, or None when the file does not exist."""
        data = read_json(path)
        return None if data is None else cls.from_dict(data)

    def to_json(self, path: str | os.PathLike) -> None:
        from hf_encoderize.common.files import write_json_atomic

        write_json_atomic(Path(path), self.to_dict())


@dataclass
class _Record(_Fields):
    """A record whose readers still read some keys by name (the card's many training facts)."""

    def get(self, key: str, default=None):
        """Any key of the file, typed or not (the card reads many of the facts)."""
        return self.to_dict().get(key, default)

    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def __contains__(self, key: str) -> bool:
        return key in self.to_dict()


@dataclass
class RunRecord(_Record):
    """`run_record.json`: what a `cpt` or `pretrain` run was and what it did (the model card's main source).

    >>> record = RunRecord.from_dict({"command": "cpt", "base_model": "m", "steps": 4, "lr": 1e-4})
    >>> record.command, record.steps, record.facts
    ('cpt', 4, {'lr': 0.0001})
    >>> RunRecord.from_dict(record.to_dict()) == record
    True
    """

    command: str | None = None
    """`cpt` or `pretrain`."""
    base_model: str | None = None
    """The model trained from (Hub id, folder or GGUF folder); None for `pretrain`."""
    revision: str | None = None
    gguf_file: str | None = None
    objective: str | None = None
    """mlm, mntp, or pretrain's phases joined by "+"."""
    mask_ratio: float | None = None
    steps: int | None = None
    identity: dict | None = None
    """Every config field that counts for "same run?" (`common.identity`; recorded since 0.2)."""
    encoderize: dict | None = None
    """What the attention patch and the token set-up did."""
    eval_loss: float | None = None
    """Held-out MLM loss of the trained model."""
    initial_eval_loss: float | None = None
    """The same held-out loss of the starting model, before the first step (recorded since 0.3)."""
    tokens_seen: int | None = None
    hf_encoderize_version: str | None = None


@dataclass
class EvalSummary(_Record):
    """`eval/<name>/summary.json`: one model's scores under the paper's protocol (`evaluation.summary`)."""

    model: str | None = None
    model_name: str | None = None
    mode: str | None = None
    """bidirectional or causal: the attention the model was fine-tuned with."""
    profile: str | None = None
    protocol: dict = field(default_factory=dict)
    results: list = field(default_factory=list)
    """One entry per dataset: task, dataset, metric, best_lr, test_mean, test_ci95, n_seeds, ..."""
    family_means: dict = field(default_factory=dict)


@dataclass
class ContrastiveRecord(_Record):
    """`contrastive_run.json`: the contrastive stage of an embedding model, and the encoder it started from."""

    source: str | None = None
    """The MLM encoder folder the stage trained from."""
    config: dict = field(default_factory=dict)
    """The stage's `ContrastiveConfig`, every field."""
    stage: dict = field(default_factory=dict)
    losses: list = field(default_factory=list)


@dataclass
class EncoderFacts(_Fields):
    """The `hf_encoderize` block of a saved encoder's config.json: where it came from and what the patch did.

    One writer (`model.saving.save_encoder`, which stamps `version` and `plain_attention`); the commands that save an
    encoder (`convert`, `cpt`, `pretrain`, the contrastive stage) fill it from typed parts, and every reader reads
    fields (`EncoderFacts.of(folder)`). The patch report's other keys and any key of an older or newer version are
    kept in `facts`.

    >>> EncoderFacts(command="cpt", base_model="m", steps=4).to_dict()["steps"]
    4
    """

    version: str | None = None
    """The hf-encoderize release that saved it."""
    command: str | None = None
    """convert, cpt or pretrain (None: convert, before it was recorded)."""
    base_model: str | None = None
    """The model it came from, as given (Hub id, folder or GGUF folder); None after `pretrain`."""
    revision: str | None = None
    gguf_file: str | None = None
    objective: str | None = None
    mask_ratio: float | None = None
    steps: int | None = None
    lora_r: int | None = None
    phases: str | None = None
    """pretrain's schedule, e.g. "clm:0.75,mlm"."""
    export_step: int | None = None
    """The step of an intermediate export (`OUT/exports/step-N`)."""
    packing: str | None = None
    model_type: str | None = None
    attn_implementation: str | None = None
    tokens: dict | None = None
    """What the token set-up did (mask token added or reused, pad token)."""
    plain_attention: dict | None = None
    """Which attention backends a plain load runs bidirectionally (written by the saver)."""
    contrastive: dict | None = None
    """The contrastive stage of an embedding model (`contrastive`)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in super().to_dict().items() if v is not None}  # config.json holds what is known

    @classmethod
    def of(cls, encoder: str | os.PathLike) -> EncoderFacts:
        """The block in `encoder/config.json` (empty when the folder has none: a model hf-encoderize did not save)."""
        return cls.from_dict((read_json(Path(encoder) / "config.json") or {}).get("hf_encoderize") or {})
