"""A command that runs other commands' stages holds their configs; their options are generated from that nesting.

Design choices:
- `run`'s `contrastive` field holds the `ContrastiveConfig` the `contrastive` command takes, its `eval` field the
  `EvalConfig` of `eval` (STYLE.md 16, as torchtitan's `Trainer.Config` holds its component configs). A field
  declared with `stage(...)` metadata holds such a config, or None when the stage does not run.
- Every option of the stage's class is an option of the command under the field's name as a prefix
  (`--contrastive-max-steps`; in a config file `contrastive_max_steps: 5` or `contrastive: {max_steps: 5}`), except
  the fields the command fills itself (`fixed`: where the stage reads and writes). A stage that gains an option adds
  no field to the command, and each value list (a `Literal`) is declared once, on the stage's class.
- One option switches the stage (`switch`: the contrastive method, the evaluation profile): its values are its
  `Literal`'s and `off` ("none": the stage does not run). Its flag is the prefixed name unless `flag` names another
  (`--contrastive`). A setting given for a stage that does not run is refused, not silently dropped.
- The stage's class speaks its own flags in its help and its messages (`--max-steps`); under the command they read
  prefixed (`--contrastive-max-steps`, `prefixed_text`), so both are written once.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from typing import Any

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.options import SHORT_SPELLINGS, flag, option_name


@dataclasses.dataclass(frozen=True)
class Stage:
    """How a command holds one stage's config (`stage(...)` declares it on the field)."""

    switch: str
    """The stage's field whose value picks how the stage runs (the contrastive method, the evaluation profile)."""
    flag: str | None = None
    """The switch's option name under the command (default: the prefixed name, `eval_profile`)."""
    off: str = "none"
    """The switch's value for "the stage does not run"."""
    off_help: str = ""
    """What `off` means, for the help and the refusals ("no evaluation")."""
    about: str = ""
    """What the stage does inside the command, heading its options in --help."""
    fixed: tuple[str, ...] = ()
    """Fields the command fills itself (where the stage reads and writes): not options of the command."""
    build: Callable[..., Any] | None = None
    """Makes the config from its option values (default: the field's class)."""


def stage(switch: str, **how) -> dict:
    """Field metadata that makes a config field a stage of the command: `field(default=None, metadata=stage("method",
    flag="contrastive", fixed=("encoder",)))`."""
    return {"stage": Stage(switch, **how)}


def stage_of(field: dataclasses.Field) -> Stage | None:
    return field.metadata.get("stage")


def stage_class(cls, field: dataclasses.Field) -> type:
    """The config class a stage field holds (`ContrastiveConfig | None` -> `ContrastiveConfig`)."""
    hint = typing.get_type_hints(cls)[field.name]
    return next(part for part in (*typing.get_args(hint), hint) if dataclasses.is_dataclass(part))


def stage_fields(cls, field: dataclasses.Field) -> list[dataclasses.Field]:
    """The stage's fields that are options of the command: all but the fixed ones, the switch first."""
    spec = stage_of(field)
    own = [f for f in dataclasses.fields(stage_class(cls, field)) if f.name not in spec.fixed and f.name != "_"]
    return sorted(own, key=lambda f: f.name != spec.switch)


def dest(field: dataclasses.Field, sub: dataclasses.Field) -> str:
    """Where a stage option's value goes: `contrastive.steps`."""
    return f"{field.name}.{sub.name}"


def key(cls, field: dataclasses.Field, sub: dataclasses.Field) -> str:
    """The option name under the command: `contrastive_max_steps`; the switch's may be its own (`contrastive`)."""
    spec = stage_of(field)
    if sub.name == spec.switch and spec.flag:
        return spec.flag
    return f"{field.name}_{option_name(stage_class(cls, field), sub)}"


def old_keys(cls, field: dataclasses.Field, sub: dataclasses.Field) -> list[str]:
    """The other names the option goes by, accepted with a deprecation note: the prefixed field name and short
    spelling (`contrastive_steps`, `contrastive_lr`, as `run`'s own fields were once named), the names the field went
    by before a rename (`formerly`), and the prefixed switch when it has a flag of its own (`contrastive_method`)."""
    name = option_name(stage_class(cls, field), sub)
    names = [sub.name, SHORT_SPELLINGS.get(name), *sub.metadata.get("formerly", ())]
    if sub.name == stage_of(field).switch and stage_of(field).flag:
        names.append(name)
    spelled = [f"{field.name}_{n}" for n in names if n]
    return [n for n in dict.fromkeys(spelled) if n != key(cls, field, sub)]


def prefixed_text(text: str, cls, field: dataclasses.Field) -> str:
    """The stage's help or message with its flags as the command spells them: `--max-steps` -> `--contrastive-max-
    steps`, `--method` -> `--contrastive` (every spelling of every option; the fixed fields' flags are the command's
    own and stay)."""
    inner = stage_class(cls, field)
    names = {}
    for sub in stage_fields(cls, field):
        name = option_name(inner, sub)
        for spelling in (name, sub.name, SHORT_SPELLINGS.get(name), *sub.metadata.get("formerly", ())):
            if spelling:
                names[flag(spelling)] = flag(key(cls, field, sub))
    pattern = re.compile(r"(?<![\w-])(--(?:no-)?)([a-z0-9][a-z0-9-]*)(?![\w-])")

    def swap(match: re.Match) -> str:
        new = names.get(f"--{match.group(2)}")
        return match.group(0) if new is None else match.group(1) + new[2:]

    return pattern.sub(swap, text)


def build_stage(cls, field: dataclasses.Field, values: dict):
    """The config of stage `field` from the option values given (field name -> value), or None when it does not run;
    its refusals speak the command's flags."""
    spec, inner = stage_of(field), stage_class(cls, field)
    switch = values.get(spec.switch)
    default_off = field.default is None
    if switch == spec.off or (switch is None and default_off):
        if given := [flag(key(cls, field, sub)) for sub in stage_fields(cls, field)
                     if sub.name != spec.switch and values.get(sub.name) is not None]:
            switch_flag = flag(key(cls, field, next(f for f in stage_fields(cls, field) if f.name == spec.switch)))
            raise EncoderizeError(f"{', '.join(given)} set with {switch_flag} {spec.off} ({spec.off_help}); drop "
                                  f"{'them' if len(given) > 1 else 'it'} or set {switch_flag}")
        return None
    try:
        return (spec.build or inner)(**values)
    except EncoderizeError as err:
        raise EncoderizeError(prefixed_text(str(err), cls, field)) from None


def stage_settings(config, field: dataclasses.Field) -> dict:
    """A stage's options as a config file takes them (`contrastive: {method: simcse, max_steps: 5}`): its own option
    names, the fixed fields left out; `{switch: off}` when it does not run."""
    value = getattr(config, field.name)
    spec = stage_of(field)
    if value is None:
        return {option_name(stage_class(type(config), field), _switch(type(config), field)): spec.off}
    inner = type(value)
    return {option_name(inner, sub): getattr(value, sub.name) for sub in stage_fields(type(config), field)}


def _switch(cls, field: dataclasses.Field) -> dataclasses.Field:
    return next(sub for sub in stage_fields(cls, field) if sub.name == stage_of(field).switch)
