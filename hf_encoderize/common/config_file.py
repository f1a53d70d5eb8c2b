"""A `--config` file's values as config dataclasses: YAML (or a finished run's `run_settings.json`) overridden by the
flags given.

Design choices:
- The file's values get the checks argparse gives flags, from the same field annotations (`arguments.value_type`): a
  key that no config of the command has is refused (naming the closest option), and so is a value of the wrong type
  (`steps: many`); ints and numeric text (`1e-4`, which YAML 1.1 reads as text) pass for floats, only true/false for
  bools. Ranges and choices are the configs' own `__post_init__` checks.
- A key is the option's name (`learning_rate`) or its field's (`lr`: the Python API's, a run's `run_settings.json`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Protocol

from hf_encoderize.common import stages
from hf_encoderize.common.arguments import field_docs, value_type
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import identity_of, settings_diff
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.options import TRAINER_SWITCHES, closest, option_name, spellings

log = get_logger(__name__)


class Command(Protocol):
    """What building a command's configs reads of it (the CLI's `Command`): its name and its config classes."""

    name: str
    configs: tuple[type, ...]


def load_yaml(path: str | None) -> dict:
    if not path:
        return {}
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as err:
        raise EncoderizeError(f"cannot read config file {path!r}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise EncoderizeError(f"config file {path!r} is not UTF-8 text; pass a YAML file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise EncoderizeError(f"config file {path!r} is not valid YAML ({getattr(err, 'problem', None) or 'syntax'}"
                              f"{where}); fix it, e.g. `steps: 100` on each line") from None
    if data is None:
        return {}  # an empty file (or only comments) sets nothing
    if not isinstance(data, dict):
        raise EncoderizeError(f"config file {path!r} must hold a mapping of option names to values (e.g. `steps: "
                              f"100`), not a {type(data).__name__}")
    if bad := [key for key in data if not isinstance(key, str)]:
        raise EncoderizeError(f"config file {path!r} has the key {bad[0]!r}, which is not an option name; keys are "
                              "option names such as `steps`")
    return {key.replace("-", "_"): value for key, value in data.items()}


_TYPE_NAMES = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


def _yaml_value(where: str, key: str, value, field: dataclasses.Field):
    """`value` as the field's flag would give it (an int for a float field becomes a float), or a one-line refusal."""
    kind, is_list = value_type(field)
    if value is None:
        return None  # `key:` with nothing after it: the default
    if isinstance(value, str) and value in field.metadata.get("named", {}):
        return field.metadata["named"][value]  # `tokens_per_step: paper`, as its flag takes it
    if is_list:
        if not isinstance(value, list):
            raise EncoderizeError(f"{where} sets {key!r} to {value!r}; it takes a list, e.g. `{key}: [a, b]`")
        return [_scalar(where, key, item, kind) for item in value]
    return _scalar(where, key, value, kind)


def _scalar(where: str, key: str, value, kind: type):
    if kind is float and isinstance(value, str):
        value = _number_text(value)  # YAML 1.1 reads `1e-4` (no dot) as text; a float option takes what it spells
    fits = {bool: isinstance(value, bool),
            int: isinstance(value, int) and not isinstance(value, bool),
            float: isinstance(value, int | float) and not isinstance(value, bool),
            str: isinstance(value, str | int | float) and not isinstance(value, bool)}[kind]
    if not fits:
        hint = "; quote it to pass it as text" if kind is str and isinstance(value, bool) else ""
        raise EncoderizeError(f"{where} sets {key!r} to {value!r}, but it takes {_TYPE_NAMES[kind]}{hint}")
    return kind(value)


def _number_text(text: str):
    """`text` as a float when it spells one (`1e-4`, ` 3 `, `nan`: the range check refuses NaN in one line), else the
    text itself, for the type refusal to name."""
    try:
        return float(text)
    except ValueError:
        return text


def build_config(cls, args: argparse.Namespace, yaml_values: dict):
    """Instantiate `cls` from YAML values overridden by the flags the user actually gave; a stage field
    (`common.stages`) from its prefixed options."""
    values = {}
    for field in dataclasses.fields(cls):
        if stages.stage_of(field):
            given = {sub.name: _given(args, yaml_values, stages.dest(field, sub))
                     for sub in stages.stage_fields(cls, field)}
            values[field.name] = stages.build_stage(cls, field, {k: v for k, v in given.items() if v is not None})
            continue
        value = _given(args, yaml_values, field.name)
        if value is not None:
            values[field.name] = value
    positional = [f.name for f in dataclasses.fields(cls) if not f.kw_only and f.name in values]
    return cls(*[values.pop(name) for name in positional], **values)


def _given(args: argparse.Namespace, yaml_values: dict, name: str):
    given = getattr(args, name, None)
    return given if given is not None else yaml_values.get(name, None)


def option_fields(cls) -> dict[str, tuple[str, dataclasses.Field, list[str]]]:
    """Every option of config class `cls` as a config file names it: option name -> (where its value goes, its field,
    the other names it goes by), a stage's options prefixed (`contrastive_max_steps` -> `contrastive.steps`)."""
    options = {}
    for field in dataclasses.fields(cls):
        if not stages.stage_of(field):
            name = option_name(cls, field)
            options[name] = (field.name, field, [field.name, *spellings(name), *field.metadata.get("formerly", ())])
            continue
        for sub in stages.stage_fields(cls, field):
            options[stages.key(cls, field, sub)] = (stages.dest(field, sub), sub, stages.old_keys(cls, field, sub))
    return options


def options_of(*configs) -> dict:
    """What a run was asked, under the option names a flag or a YAML file uses (`learning_rate`, not the field's
    `lr`), recorded in `run_settings.json` (issue 67, point 6): `set`, every option whose value is not its default
    (what the user gave; a default repeated by hand runs the same and is not told apart), and `derived`, what the run
    worked out for the options left unset (`warmup_steps` from `max_steps`: a config class's `derived`). A replay
    (`replayed`) derives again exactly what is under `derived`.

    >>> from hf_encoderize.training.train_config import TrainConfig
    >>> options_of(TrainConfig(steps=80, lr=3e-4))
    {'set': {'max_steps': 80, 'learning_rate': 0.0003}, 'derived': {'warmup_steps': 16, 'decay_steps': 16}}
    >>> options_of(TrainConfig(steps=80, warmup_steps=16))["derived"]
    {'decay_steps': 16}
    """
    chosen, derived = {}, {}
    for config in configs:
        cls = type(config)
        names = {where: name for name, (where, _, _) in option_fields(cls).items()}
        for field in dataclasses.fields(cls):
            if field.name in names and not stages.stage_of(field) and getattr(config, field.name) != _default(field):
                chosen[names[field.name]] = _plain(getattr(config, field.name))
        if hasattr(cls, "derived"):
            worked_out = cls.derived({f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})
            read = getattr(config, "identity_value", worked_out.get)  # the value the run used
            derived.update({names.get(name, name): _plain(read(name)) for name in worked_out
                            if getattr(config, name) is None})
    return {"set": chosen, "derived": derived}


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NO_DEFAULT


_NO_DEFAULT = object()  # a field every run gives (the model): always under `set`


def _plain(value):
    """A config value as JSON holds it (a path as text, a tuple as a list)."""
    if isinstance(value, Path):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def option_docs(cls) -> dict[str, str]:
    """`field_docs` of `cls` and of its stages' classes, keyed by where each value goes (`eval.lrs`)."""
    docs = field_docs(cls)
    for field in dataclasses.fields(cls):
        if stages.stage_of(field):
            inner = field_docs(stages.stage_class(cls, field))
            docs.update({stages.dest(field, sub): inner.get(sub.name, "") for sub in stages.stage_fields(cls, field)})
    return docs


def nested_stages(configs, values: dict) -> dict:
    """`contrastive: {max_steps: 5}` as `contrastive_max_steps: 5`, and `contrastive: simcse` (a stage's name with
    a value) as its switch: the nested form of a stage's options, and the flat one, read alike."""
    values = dict(values)
    for cls in configs:
        for field in dataclasses.fields(cls):
            if (spec := stages.stage_of(field)) is None or field.name not in values:
                continue
            given = values[field.name]
            if isinstance(given, dict):
                del values[field.name]
                values.update({f"{field.name}_{key}".replace("-", "_"): value for key, value in given.items()})
            elif field.name != spec.flag:  # `eval: none`, as `eval_profile: none`
                values[f"{field.name}_{spec.switch}"] = values.pop(field.name)
    return values


def build_configs(command: Command, args: argparse.Namespace, yaml_values: dict,
                  record_keys: frozenset[str] = frozenset()) -> list:
    """Every config of `command`; a YAML key that none of them has is refused rather than silently ignored.
    `record_keys`: the keys a run's `run_settings.json` holds besides options (its facts), for a replay."""
    options = {name: option for cls in reversed(command.configs) for name, option in option_fields(cls).items()}
    fields = {where: field for where, field, _ in options.values()}
    # a key is the option's name (`learning_rate`) or its field's (`lr`: the Python API's, a run's run_settings.json)
    names = {name: where for name, (where, _, _) in options.items()}
    known = {**{where: where for where in fields}, **{spelling: where for where, _, others in options.values()
                                                      for spelling in others}, **names}
    where = f"config file {args.config!r}" if getattr(args, "config", None) else "the config"
    yaml_values = nested_stages(command.configs, yaml_values)
    yaml_values = trainer_switches(where, yaml_values, names)
    recorded = yaml_values.get("identity") if isinstance(yaml_values.get("identity"), dict) else None
    derived: set[str] = set()
    if recorded is not None:
        yaml_values, derived = replayed(yaml_values, known, where, command, record_keys)
    if unknown := [key for key in yaml_values if key not in known]:
        match = closest(unknown[0], known)
        guess = f"did you mean {_option_of(match, names)!r}? " if match else ""
        raise EncoderizeError(f"{where} sets {', '.join(map(repr, unknown))}, which `{command.name}` has no option "
                              f"for; {guess}see `hf-encoderize {command.name} --help`")
    _refuse_two_spellings(where, yaml_values, known, fields)
    yaml_values = {known[key]: value for key, value in yaml_values.items()}
    # A comma-separated option takes a YAML list too (`lrs: [1e-5, 2e-5]`), as its flag takes `1e-5,2e-5`.
    listed = {where for cls in command.configs for where, doc in option_docs(cls).items()
              if doc.startswith("Comma-sep")}
    yaml_values = {key: ",".join(map(str, value)) if key in listed and isinstance(value, list)
                   and all(isinstance(item, str | int | float) and not isinstance(item, bool) for item in value)
                   else value for key, value in yaml_values.items()}
    shown = {field: name for name, field in names.items() if "." in field}  # a stage's option as the file names it
    yaml_values = {key: _yaml_value(where, shown.get(key, key), value, fields[key])
                   for key, value in yaml_values.items()}
    configs = [build_config(cls, args, yaml_values) for cls in command.configs]
    if recorded is not None:
        check_replay(where, recorded, configs, args, derived)
    return configs


def check_replay(where: str, recorded: dict, configs: list, args: argparse.Namespace,
                 derived: set[str] = frozenset()) -> None:
    """A replay must run what the record says, unless a flag changed it: the settings that count, rebuilt here, are
    compared with the recorded ones. The data above all: a recorded relative `data_files` path read from another
    folder, or a corpus edited since, is other data (the record holds its content identity). A setting the run had
    derived (`derived`: its warmup from its steps) is compared only in a replay that changes nothing: with a flag
    given, it is derived again from the new settings."""
    now = identity_of(*configs)
    given = {key for key in now if getattr(args, key.split(".", 1)[-1], None) is not None}
    if given:
        given |= {key for key in now if key.split(".", 1)[-1] in derived}
    before = {key: _number_text(value) if isinstance(value, str) and isinstance(now.get(key), float) else value
              for key, value in recorded.items() if key not in given  # YAML 1.1 read `1e-05` as text
              and not (key.endswith(".data_files") and isinstance(value, str))}  # a path text: before 0.2's identity
    data = next((key for key in settings_diff(before, now) if key.split(" ", 1)[0].endswith(".data_files")), None)
    if data is not None:
        path = next(config.data_files for config in configs if hasattr(config, "data_files"))
        raise EncoderizeError(f"{where} replays a run on --data-files {path!r}, but from here {path!r} is missing or "
                              "holds other data than the run read; replay from the folder the run started in, or "
                              "give --data-files to train on other data as a new run")
    if differs := settings_diff(before, now):
        raise EncoderizeError(f"{where} replays a run, but here {'; '.join(differs)}; give that option as a flag to "
                              "change it on purpose")


def trainer_switches(where: str, values: dict, names: dict) -> dict:
    """`bf16: true` (the Trainer's) as `mixed_precision: bf16`; `bf16: false` sets nothing. A switch and the option
    it sets, or two switches, that disagree are refused in one line."""
    values = dict(values)
    for switch, (target, value) in TRAINER_SWITCHES.items():
        if switch not in values or target not in names:
            continue
        on = values.pop(switch)
        if not isinstance(on, bool):
            raise EncoderizeError(f"{where} sets {switch!r} to {on!r}, but it takes true or false")
        if on and values.setdefault(target, value) != value:
            raise EncoderizeError(f"{where} sets {switch}: true and {target}: {values[target]}, which disagree; "
                                  "keep one")
    return values


def _refuse_two_spellings(where: str, yaml_values: dict, known: dict, fields: dict) -> None:
    """`learning_rate: 1e-4` and `lr: 3e-4` in one file: one line naming both, as two flags of one option are."""
    seen: dict[str, str] = {}
    for key, value in yaml_values.items():
        other = seen.setdefault(known[key], key)
        field, first = fields[known[key]], yaml_values[other]
        if other != key and _yaml_value(where, other, first, field) != _yaml_value(where, key, value, field):
            raise EncoderizeError(f"{where} sets {other}: {first} and {key}: {value}, two spellings of one option "
                                  "with different values; keep one")


def _option_of(name: str, names: dict) -> str:
    """The option name for a field or option name (`lr` -> `learning_rate`)."""
    return name if name in names else next((option for option, field in names.items() if field == name), name)


def replayed(settings: dict, known: dict, where: str, command: Command,
             record_keys: frozenset[str] = frozenset()) -> tuple[dict, set[str]]:
    """A finished run's `run_settings.json` as option values, to replay the run: its `identity` block (every setting
    that counts, `"train.lr": 1e-4`) and the model it loaded (`base_model`, the `source` option). The rest is what the
    run wrote about itself (parameter count, resolved betas, the `data` facts again) and is not an option: left out;
    a key that is neither (`record_keys`) nor an option is named in one warning line. A value the run derived (its
    warmup from its steps: a config class's `derived`) is left out too, so it is derived again. Options that do not
    count (output folder, logging cadence) take their defaults or the flags given. Returns the values and the names
    left out as derived."""
    values = {key.split(".", 1)[-1]: value for key, value in settings["identity"].items()}
    if unknown := [key for key in settings["identity"] if key.split(".", 1)[-1] not in known]:
        raise EncoderizeError(f"{where} replays {', '.join(map(repr, unknown))}, which `{command.name}` has no option "
                              f"for (a run of another command, or an edited file?); replay a `{command.name}` run's "
                              "run_settings.json, or remove the key")
    if record_keys and (strange := [key for key in settings if key not in record_keys and key not in known]):
        log.warning(f"{where} holds {', '.join(map(repr, strange))}, which no version of hf-encoderize writes and "
                    "no option reads; replaying without it")
    if isinstance(values.get("data_files"), list):  # the identity holds the files' content; the facts their path
        values["data_files"] = (settings.get("data") or {}).get("data_files")
    if settings.get("base_model") is not None:
        values.setdefault("source", settings["base_model"])
    recorded = settings.get("options") if isinstance(settings.get("options"), dict) else {}
    if isinstance(recorded.get("derived"), dict):  # recorded since issue 67: what the run derived, by name
        derived = {known.get(name, name) for name in recorded["derived"]}
    else:  # a run recorded before: a value equal to what its class derives is taken as derived
        derived = {name for cls in command.configs if hasattr(cls, "derived")
                   for name, value in cls.derived(values).items() if values.get(name) == value}
    return {key: value for key, value in values.items() if key in known and key not in derived}, derived
