"""What a command leaves on stdout: its result alone, in its own form or as one JSON object (`--json`).

Design choices:
- stdout is for the reader of the result (a pipe, `python -m json.tool`, a script); progress, warnings and every
  library's chatter go to stderr. Libraries print to stdout on their own (transformers' Trainer writes its log dicts
  with `tqdm.write`, DeepSpeed its notices), so while a command runs `result_on_stdout` points stdout at stderr: at the
  file-descriptor level in a real process (C code and subprocesses too), at `sys.stdout` inside a Python caller.
- `--json` prints one object: `json_object` turns a result (a dict, a list of files, a path, text) into one, with
  paths as text and NaN/inf as null (strict JSON).
- `--print-config` prints the effective settings of every config as YAML keyed by the option names, which `--config`
  reads back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
from pathlib import PurePath

from hf_encoderize.common import stages
from hf_encoderize.common.options import option_name


@contextlib.contextmanager
def result_on_stdout():
    """Inside: whatever is written to stdout goes to stderr (the command's result is printed after, on stdout)."""
    sys.stdout.flush()
    real = sys.stdout is sys.__stdout__ and _fileno(sys.stdout) == 1 and _fileno(sys.stderr) is not None
    saved = os.dup(1) if real else None
    if real:
        os.dup2(_fileno(sys.stderr), 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def json_object(result) -> dict:
    """`result` as one JSON-ready object: a mapping as it is, a list as `{"files": ...}`, a path `{"path": ...}`,
    other text `{"text": ...}`; paths inside become text, NaN/inf null.

    >>> json_object({"loss": float("nan"), "folder": PurePath("runs/a")})
    {'loss': None, 'folder': 'runs/a'}
    >>> json_object(["README.md"])
    {'files': ['README.md']}
    """
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    if not isinstance(result, dict):
        key = "files" if isinstance(result, list | tuple) else "path" if isinstance(result, PurePath) else "text"
        result = {key: result}
    return _clean(result)


def _clean(value):
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # a Path, a dtype, a version


def print_json(result, indent: int | None = 1) -> None:
    """`result` as one strict JSON object on stdout."""
    print(json.dumps(json_object(result), indent=indent, allow_nan=False))


def effective_settings(configs) -> dict:
    """Every keyword option of `configs` under its option name, as the command would run it (positional arguments
    are the command line's: a config file cannot set them)."""
    values = {}
    for config in configs:
        for field in dataclasses.fields(config):
            if stages.stage_of(field):  # a stage's options, nested: `contrastive: {method: simcse, ...}`
                values[field.name] = _clean(stages.stage_settings(config, field))
            elif field.kw_only and not field.name.startswith("_"):
                values[option_name(type(config), field)] = _clean(getattr(config, field.name))
    return values


def effective_yaml(configs) -> str:
    """`effective_settings` as YAML, headed by the positional arguments as a comment."""
    import yaml

    given = [f"{option_name(type(c), f)}={getattr(c, f.name)}" for c in configs for f in dataclasses.fields(c)
             if not f.kw_only]
    head = f"# {', '.join(given)} (on the command line)\n" if given else ""
    return head + yaml.safe_dump(effective_settings(configs), sort_keys=False, allow_unicode=True)
