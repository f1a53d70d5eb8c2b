"""Is this the same run? One answer for every command that resumes, branches or reuses a finished stage.

Design choices:
- Whether a setting counts is declared on the config field itself: `field(default=..., metadata=identity(HARMLESS))`.
  A field with no declaration counts (`RESUME`), so a new option is part of the identity until someone decides, in
  one place, that it cannot change the updates.
- Three kinds: `RESUME` (the updates depend on it: a resume, a branch or a reused stage must have the same value),
  `LENGTH` (the run's length: `steps` and its decay; a resume may extend a run under the rules of
  `training.checkpoints`), `HARMLESS` (speed, memory, logging, where things are written: the same updates).
- `identity_of(configs)` reads the declarations into a flat, JSON-plain dict (`"train.mixed_precision": "bf16"`). A
  config whose unset option takes a default from other options (TrainConfig's warmup follows --max-steps) gives the
  value
  that runs through an `identity_value(name)` method, so stating the default explicitly is the same run;
  `differing(before, now)` is the one comparison, for run settings (`settings_diff`, which names each change) and an
  eval protocol (`evaluation.grid.protocol_differences`) alike. A key the earlier record does not hold (a field added
  since that run was recorded) is not compared, so run folders written by older versions still resume; or it reads
  as what runs did before the key existed (`lacking`).
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Literal

Identity = Literal["resume", "length", "harmless"]
RESUME: Identity = "resume"
LENGTH: Identity = "length"
HARMLESS: Identity = "harmless"


def identity(kind: Identity) -> dict:
    """Field metadata that declares how a setting counts for "same run?":
    `field(default=0, metadata=identity(HARMLESS))`."""
    if kind not in (RESUME, LENGTH, HARMLESS):
        raise ValueError(f"identity kind {kind!r} is not one of {RESUME}, {LENGTH}, {HARMLESS}")
    return {"identity": kind}


def kind_of(config_field) -> Identity:
    """How a dataclass field counts: its declaration, else RESUME (undeclared fields count)."""
    return config_field.metadata.get("identity", RESUME)


def names_of(config_class, kind: Identity) -> tuple[str, ...]:
    """The field names of `config_class` declared `kind`.

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Demo:
    ...     lr: float = 1e-4
    ...     log_every: int = field(default=10, metadata=identity(HARMLESS))
    >>> names_of(Demo, HARMLESS), names_of(Demo, RESUME)
    (('log_every',), ('lr',))
    """
    return tuple(f.name for f in fields(config_class) if f.name != "_" and kind_of(f) == kind)


def prefix_of(config) -> str:
    """`TrainConfig` -> "train", `LoadConfig` -> "load": the key prefix of a config's settings."""
    return type(config).__name__.removesuffix("Config").lower()


def identity_of(*configs, kinds: tuple[Identity, ...] = (RESUME, LENGTH), prefixed: bool = True) -> dict:
    """The settings of `configs` that count, as one flat JSON-plain dict (`"train.lr": 0.0001`).

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class TrainConfig:
    ...     lr: float = 1e-4
    ...     steps: int = field(default=10, metadata=identity(LENGTH))
    ...     progress: bool = field(default=True, metadata=identity(HARMLESS))
    >>> identity_of(TrainConfig())
    {'train.lr': 0.0001, 'train.steps': 10}
    >>> identity_of(TrainConfig(), kinds=(RESUME,), prefixed=False)
    {'lr': 0.0001}
    """
    settings = {}
    for config in configs:
        if config is None:
            continue
        if not is_dataclass(config):
            raise TypeError(f"identity_of takes config dataclasses, not {type(config).__name__}")
        prefix = f"{prefix_of(config)}." if prefixed else ""
        resolved = getattr(config, "identity_value", None)  # a default that follows other fields, as it runs
        for config_field in fields(config):
            if config_field.name != "_" and kind_of(config_field) in kinds:
                value = resolved(config_field.name) if resolved else getattr(config, config_field.name)
                settings[prefix + config_field.name] = _plain(value)
    return settings


def _plain(value):
    """What JSON would give back: tuples become lists, paths and other objects their text."""
    return json.loads(json.dumps(value, default=str))


def settings_diff(before: dict, now: dict, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """One clause per setting that differs: `"train.mixed_precision was 'no', now 'bf16'"`. Keys in `ignore`, and
    keys the earlier record does not hold (fields added since it was written), are not compared.

    >>> settings_diff({"lr": 0.1, "seed": 0}, {"lr": 0.2, "seed": 0, "new_field": 1})
    ['lr was 0.1, now 0.2']
    >>> settings_diff({"lr": 0.1, "steps": 10}, {"lr": 0.1, "steps": 20}, ignore=("steps",))
    []
    """
    now = _plain(now)
    return [f"{key} was {before[key]!r}, now {now[key]!r}" for key in differing(before, now, ignore=ignore)]


def differing(before: dict, now: dict, *, ignore: tuple[str, ...] = (), lacking: dict | None = None) -> list[str]:
    """The one comparison of "same run?": the keys of `now` (but `ignore`) whose value `before` holds otherwise, in
    `now`'s order. A key `before` lacks (a field added since it was written) is not compared, or, with `lacking`,
    reads as `lacking`'s value for it (None if it names none): what runs did before the key existed (an eval
    protocol's, `evaluation.grid.protocol_differences`).

    >>> differing({"lr": 0.1}, {"lr": 0.2, "batching": "random"})
    ['lr']
    >>> differing({"lr": 0.1}, {"lr": 0.1, "batching": "random"}, lacking={"batching": "length"})
    ['batching']
    """
    return [key for key, value in now.items() if key not in ignore
            and (key in before or lacking is not None)
            and (before[key] if key in before else lacking.get(key)) != value]
