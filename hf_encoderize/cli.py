"""`hf-encoderize`: a table of subcommands, each a plain library function and the config dataclasses it takes.

Design choices:
- One `Command` record per subcommand and no per-command code here. Where a command needs glue (check a push target
  before fine-tuning, render a table), that glue is a public function of the module that owns the command.
- One builder: every field of a command's config dataclasses becomes an argument, positional when declared before
  `_: KW_ONLY`, else `--field-name`, with the field's docstring as its help text.
- One runner: each config is built from the `--config file.yaml` values overridden by the flags given, then the
  function is called (cpt, pretrain, eval and run check a `--push-to-hub` before any work) and its result reported. Any
  `EncoderizeError` becomes one `error:` line and exit code 2.
- The file's values get the checks argparse gives flags, from the same field annotations (`_value_type`): a key that no
  config of the command has is refused (naming the closest option), and so is a value of the wrong type (`steps:
  many`); ints and numeric text (`1e-4`, which YAML 1.1 reads as text) pass for floats, only true/false for bools.
  Ranges are the configs' own `__post_init__` checks.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import torch.distributed

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process
from hf_encoderize.common.log import get_logger, setup_logging, teardown_logging
from hf_encoderize.common.options import choices, closest, flag, option_name
from hf_encoderize.common.version import __version__
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.evaluation.compare import CompareConfig, compare_results
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.evaluation.mteb_suite import render_mteb
from hf_encoderize.evaluation.summary import render_markdown
from hf_encoderize.matrix.architectures import ArchitecturesConfig, architectures
from hf_encoderize.matrix.doctor import DoctorConfig, doctor
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.pipeline.commands import cpt_and_push, evaluate_and_push, pretrain_and_push
from hf_encoderize.pipeline.quickstart import QuickstartConfig, quickstart
from hf_encoderize.pipeline.run import RunConfig, run
from hf_encoderize.publish.card import CardConfig, write_card
from hf_encoderize.publish.export import ExportConfig, export
from hf_encoderize.publish.hub import HubConfig, PushConfig, push
from hf_encoderize.publish.space import PushSpaceConfig, SpaceConfig, launch_space, push_space
from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive
from hf_encoderize.recipes.convert import ConvertConfig, convert
from hf_encoderize.recipes.pretrain import PretrainConfig
from hf_encoderize.training.lora import AdapterConfig
from hf_encoderize.training.train_config import TrainConfig

log = get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: `function(*configs)` with one config per class of `configs`, then `report(result, *configs)`."""

    name: str
    help: str
    function: Callable[..., Any]
    configs: tuple[type, ...]
    report: Callable[..., None] | None = None


# ------------------------------------------------------------------------------------------------ reports


def _print_summary(summary: dict, *configs) -> None:
    print(json.dumps({key: value for key, value in summary.items() if key != "losses"}))  # losses: one per step


def _print_fields(summary: dict, *configs) -> None:
    for key, value in summary.items():
        print(f"{key}: {value}")


def _print_result(result, *configs) -> None:
    print(result)


def _print_text(text: str, *configs) -> None:
    print(text, end="")


def _print_eval(summary: dict, *configs) -> None:
    print(render_mteb(summary) if "mteb_version" in summary else render_markdown(summary), end="")


def _print_comparison(written: dict, *configs) -> None:
    print(written["table"], end="")
    print(f"wrote {written['markdown']} and {written['plot']}")


def _print_upload(files: list[str], config) -> None:
    where = config.repo_id if isinstance(config, PushConfig) else f"Space {config.space_id}"
    print(f"{'would upload' if config.dry_run else 'uploaded'} {len(files)} files to {where}:")
    print("\n".join(f"  {name}" for name in files))


# ------------------------------------------------------------------------------------------------ the table

_CPT_CONFIGS = (LoadConfig, DataConfig, MaskingConfig, TrainConfig, AdapterConfig)

COMMANDS: dict[str, Command] = {command.name: command for command in (
    Command("cpt", "MLM continued pretraining of a decoder (or encoder) into an encoder",
            cpt_and_push, (*_CPT_CONFIGS, HubConfig), _print_summary),
    Command("pretrain", "pretrain an encoder from scratch: CLM, MLM or CLM then MLM (one budget)",
            pretrain_and_push, (PretrainConfig, DataConfig, MaskingConfig, TrainConfig, HubConfig), _print_summary),
    Command("convert", "encoderize a decoder and save it (no training)",
            convert, (LoadConfig, ConvertConfig), _print_fields),
    Command("contrastive", "make an encoder an embedding model: SimCSE or supervised contrastive training",
            contrastive, (ContrastiveConfig, AdapterConfig), _print_fields),
    Command("eval", "fine-tune and score a model on the paper's SC/TC/QA/IR suite",
            evaluate_and_push, (LoadConfig, EvalConfig, HubConfig), _print_eval),
    Command("compare", "one table and one plot of several eval results folders side by side",
            compare_results, (CompareConfig,), _print_comparison),
    Command("architectures", "probe every causal-LM architecture transformers ships",
            architectures, (ArchitecturesConfig,), _print_text),
    Command("doctor", "versions, GPU, what auto picks here, known-bad combinations; with a model, whether it converts",
            doctor, (DoctorConfig,), _print_text),
    Command("card", "(re)generate the model card (OUT/encoder/README.md) from the run's records",
            write_card, (CardConfig,), _print_result),
    Command("export", "write ONNX (fp32, int8) or GGUF (f32, q8_0) of an encoder or embedding model, each checked "
            "where it runs (ONNX Runtime, llama.cpp)",
            export, (ExportConfig,), _print_fields),
    Command("push", "upload the encoder, its card and plots to the Hub (never checkpoints)",
            push, (PushConfig,), _print_upload),
    Command("run", "cpt, eval, card and push in one output folder; a re-run skips finished stages",
            run, (*_CPT_CONFIGS, RunConfig, HubConfig)),
    Command("quickstart", "offline demo on the embedded SmolLM2-135M: short cpt, smoke eval, card",
            quickstart, (QuickstartConfig,)),
    Command("space", "serve the Gradio demo of an encoder on this machine (needs the space extra)",
            launch_space, (SpaceConfig,)),
    Command("push-space", "create/update a Gradio Space that demos the encoder",
            push_space, (PushSpaceConfig,), _print_upload),
)}


# ------------------------------------------------------------------------------------------------ builder


def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings (the string right after each field) of a dataclass, inherited fields included (the push
    options are declared once, on `PushOptions`)."""
    docs = {}
    for klass in reversed([base for base in cls.__mro__ if dataclasses.is_dataclass(base)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, following in zip(body, body[1:], strict=False):
            if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
                if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                    docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _value_type(field: dataclasses.Field) -> tuple[type, bool]:
    """(type of one value, whether the field holds a list of them), read from annotations like `int | None`."""
    annotation = field.type if isinstance(field.type, str) else inspect.formatannotation(field.type)
    first = annotation.split("|")[0].strip()
    is_list = first.startswith("list[")
    return {"int": int, "float": float, "bool": bool}.get(first[5:-1] if is_list else first, str), is_list


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """One argument per field of `cls`: positional before `_: KW_ONLY`, `--option-name` after (`common.options`: the
    field's public name) with the old spelling as a hidden alias; help: its docstring; a `Literal`'s values in usage."""
    docs = field_docs(cls)
    for field in sorted(dataclasses.fields(cls), key=lambda field: field.kw_only):  # positionals before inherited ones
        help_text = docs.get(field.name, "").replace("%", "%%")  # argparse %-formats help strings
        kind, is_list = _value_type(field)
        name, values = option_name(cls, field), choices(cls, field)
        metavar = "{" + ",".join(map(str, values)) + "}" if values else None
        if not field.kw_only:
            parser.add_argument(field.name, type=kind, nargs="+" if is_list else None, help=help_text,
                                metavar=metavar or name)
            continue
        help_text = f"{help_text} (default: {field.default})"
        action = argparse.BooleanOptionalAction if kind is bool else None
        given = {"action": action} if action else {"type": kind, "nargs": "*" if is_list else None,
                                                   "metavar": metavar or name.upper()}
        parser.add_argument(flag(name), dest=field.name, default=None, help=help_text, **given)
        if name != field.name:  # the old spelling still works, hidden from --help, with one deprecation line
            alias = _deprecated(action or argparse._StoreAction, flag(name))
            parser.add_argument(flag(field.name), dest=field.name, default=None, help=argparse.SUPPRESS,
                                **{**given, "action": alias})


def _deprecated(base: type[argparse.Action], new: str) -> type[argparse.Action]:
    """`base`, noting that the old spelling was used (`--no-` twins map to `--no-` twins)."""

    class Deprecated(base):
        def __call__(self, parser, namespace, values, option_string=None):
            now = f"--no-{new[2:]}" if option_string and option_string.startswith("--no-") else new
            said = getattr(namespace, "deprecated", None) or []  # said once logging is set up (`main`)
            namespace.deprecated = [*said, f"{option_string} is now {now}"]
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser whose refusal is one `error:` line that names the usage, not the whole usage (57 lines
    for cpt). A positional argument a config file tried to set says so: argparse reads the command line before the
    file, so the argument goes on the command line."""

    def error(self, message: str):
        positionals = " ".join(a.metavar or a.dest.upper() for a in self._actions
                               if not a.option_strings and a.help != argparse.SUPPRESS)
        if "arguments are required" in message and "--config" in sys.argv[1:] + list(self._argv or []):
            message += " (a config file cannot set a positional argument: put it on the command line)"
        self.exit(2, f"error: {message}; usage: {self.prog} {positionals} [options], see `{self.prog} --help`\n")

    _argv: list[str] | None = None


def build_parser() -> argparse.ArgumentParser:
    """One subparser per `COMMANDS` entry, each with its configs' arguments and `--config`; `-q`/`-v` before or after
    the command."""
    parser = argparse.ArgumentParser(prog="hf-encoderize", description="Turn any decoder LLM into a text encoder.")
    parser.add_argument("--version", action="version", version=f"hf-encoderize {__version__}")
    _add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_CommandParser)
    for command in COMMANDS.values():
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        for cls in command.configs:
            add_dataclass_args(command_parser, cls)
        command_parser.add_argument("--config", default=None, help="YAML file of option defaults (flags win), or a "
                                    "finished run's RUN/run_settings.json to replay it")
        _add_verbosity(command_parser)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's unset flag does not overwrite the one given before the command
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="only warnings and errors (no progress lines)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug lines, and the INFO lines of transformers, datasets, ONNX Runtime and the like")


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, where an unknown flag is refused with the closest option named, as a config file's
    unknown key is."""
    _CommandParser._argv = list(argv or [])  # main(argv) from Python: its --config counts as the shell's does
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        visible = {a.dest: a.option_strings[0] for a in command._actions
                   if a.option_strings and a.help != argparse.SUPPRESS}
        canonical = {option: visible.get(a.dest, option) for a in command._actions for option in a.option_strings}
        match = closest(unknown[0].split("=")[0], canonical) if unknown[0].startswith("-") else None
        guess = f"; did you mean {canonical[match]}?" if match else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{guess}")
    return args


# ------------------------------------------------------------------------------------------------ runner


def _load_yaml(path: str | None) -> dict:
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
    kind, is_list = _value_type(field)
    if value is None:
        return None  # `key:` with nothing after it: the default
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
    """Instantiate `cls` from YAML values overridden by the flags the user actually gave."""
    values = {}
    for field in dataclasses.fields(cls):
        given = getattr(args, field.name, None)
        value = given if given is not None else yaml_values.get(field.name, None)
        if value is not None:
            values[field.name] = value
    positional = [f.name for f in dataclasses.fields(cls) if not f.kw_only and f.name in values]
    return cls(*[values.pop(name) for name in positional], **values)


def build_configs(command: Command, args: argparse.Namespace, yaml_values: dict) -> list:
    """Every config of `command`; a YAML key that none of them has is refused rather than silently ignored."""
    fields = {field.name: field for cls in reversed(command.configs) for field in dataclasses.fields(cls)}
    # a key is the option's name (`learning_rate`) or its field's (`lr`: the Python API's, a run's run_settings.json)
    names = {option_name(cls, field): field.name for cls in command.configs for field in dataclasses.fields(cls)}
    known = {**{name: name for name in fields}, **names}
    where = f"config file {args.config!r}" if getattr(args, "config", None) else "the config"
    if isinstance(yaml_values.get("identity"), dict):
        yaml_values = replayed(yaml_values, known)
    if unknown := [key for key in yaml_values if key not in known]:
        match = closest(unknown[0], known)
        guess = f"did you mean {_option_of(match, names)!r}? " if match else ""
        raise EncoderizeError(f"{where} sets {', '.join(map(repr, unknown))}, which `{command.name}` has no option "
                              f"for; {guess}see `hf-encoderize {command.name} --help`")
    yaml_values = {known[key]: value for key, value in yaml_values.items()}
    # A comma-separated option takes a YAML list too (`lrs: [1e-5, 2e-5]`), as its flag takes `1e-5,2e-5`.
    listed = {name for cls in command.configs for name, doc in field_docs(cls).items() if doc.startswith("Comma-sep")}
    yaml_values = {key: ",".join(map(str, value)) if key in listed and isinstance(value, list)
                   and all(isinstance(item, str | int | float) and not isinstance(item, bool) for item in value)
                   else value for key, value in yaml_values.items()}
    yaml_values = {key: _yaml_value(where, key, value, fields[key]) for key, value in yaml_values.items()}
    return [build_config(cls, args, yaml_values) for cls in command.configs]


def _option_of(name: str, names: dict) -> str:
    """The option name for a field or option name (`lr` -> `learning_rate`)."""
    return name if name in names else next((option for option, field in names.items() if field == name), name)


def replayed(settings: dict, known: dict) -> dict:
    """A finished run's `run_settings.json` as option values, to replay the run: its `identity` block (every setting
    that counts, `"train.lr": 1e-4`) and the model it loaded (`base_model`, the `source` option). The rest is what the
    run wrote about itself (parameter count, resolved betas, the `data` facts again) and is not an option: left out.
    Options that do not count (output folder, logging cadence) take their defaults or the flags given."""
    values = {key.split(".", 1)[-1]: value for key, value in settings["identity"].items()}
    if isinstance(values.get("data_files"), list):  # the identity holds the files' content; the facts their path
        values["data_files"] = (settings.get("data") or {}).get("data_files")
    if settings.get("base_model") is not None:
        values.setdefault("source", settings["base_model"])
    return {key: value for key, value in values.items() if key in known}


def run_command(command: Command, args: argparse.Namespace, yaml_values: dict) -> None:
    """Build the configs, call the command's function (each checks a push it is asked for before any work) and
    report its result."""
    configs = build_configs(command, args, yaml_values)
    result = command.function(*configs)
    if command.report:
        command.report(result, *configs)


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm, Kubernetes, `timeout`), raised where Ctrl-C's KeyboardInterrupt is: the same handlers save
    what they can and say where the run stopped. A subclass, so every `except KeyboardInterrupt` catches it too."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    setup_logging(-1 if getattr(args, "quiet", False) else int(getattr(args, "verbose", False)))
    if said := getattr(args, "deprecated", None):
        log.warning(f"{', '.join(said)}: the old names go in 0.3")
    previous = _on_sigterm(_raise_terminated)
    try:
        run_command(COMMANDS[args.command], args, _load_yaml(args.config))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # training says where it stopped and how to resume
        _on_sigterm(signal.SIG_IGN)  # a second SIGTERM (the scheduler's grace period) does not cut this line short
        said = str(interrupt)
        stopped = "terminated (SIGTERM)" if isinstance(interrupt, Terminated) else "interrupted"
        if is_main_process():  # the launcher signals every process: one line, not one per process
            print(f"error: {stopped}{f'; {said}' if said else ''}", file=sys.stderr)
        return 143 if isinstance(interrupt, Terminated) else 130  # 128 + the signal, as the shell reports it
    finally:
        _on_sigterm(previous)
        teardown_logging()
    leave_process_group()
    return 0


def _on_sigterm(handler):
    """Install `handler` for SIGTERM and return the one before (None off the main thread, where Python cannot)."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def leave_process_group() -> None:
    """Under torchrun or `accelerate launch`, every process leaves its process group before it exits: a command that
    does not end one itself (contrastive runs the transformers Trainer, which never does) would leave gloo's worker
    threads to the interpreter's exit, where they can abort the process ("terminate called without an active
    exception") after the work is done."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
