"""`hf-encoderize`: a dict of subcommands mapped onto plain library functions. No logic lives here.

Options come from the config dataclasses: every field becomes `--field-name`, its docstring is the help text, and
`--config file.yaml` supplies defaults (command-line flags win). Any `EncoderizeError` becomes one `error:` line and
exit code 2.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import sys
import textwrap
from collections.abc import Callable

from hf_encoderize.errors import EncoderizeError


def _field_docs(cls) -> dict[str, str]:
    """Attribute docstrings (the string right after each field) of a dataclass."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
            if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def add_dataclass_args(parser: argparse.ArgumentParser, cls, positional: tuple[str, ...] = ()) -> None:
    docs = _field_docs(cls)
    for field in dataclasses.fields(cls):
        if field.name == "_":
            continue
        help_text = docs.get(field.name, "").replace("%", "%%")  # argparse %-formats help strings
        if field.name in positional:
            parser.add_argument(field.name, help=help_text)
        elif field.type in ("bool", bool):
            parser.add_argument(f"--{field.name.replace('_', '-')}", action=argparse.BooleanOptionalAction,
                                default=None, help=f"{help_text} (default: {field.default})")
        else:
            kind = {"int": int, "float": float}.get(str(field.type).split(" |")[0], str)
            parser.add_argument(f"--{field.name.replace('_', '-')}", default=None, type=kind,
                                help=f"{help_text} (default: {field.default})")


def build_config(cls, args: argparse.Namespace, yaml_values: dict):
    """Instantiate `cls` from YAML values overridden by the flags the user actually gave."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.name == "_":
            continue
        given = getattr(args, field.name, None)
        value = given if given is not None else yaml_values.get(field.name, None)
        if value is not None:
            values[field.name] = value
    positional = [f.name for f in dataclasses.fields(cls) if f.kw_only is False and f.name in values]
    return cls(*[values.pop(name) for name in positional], **values)


def _load_yaml(path: str | None) -> dict:
    if not path:
        return {}
    import yaml

    try:
        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
    except OSError as err:
        raise EncoderizeError(f"cannot read config file {path!r}: {err.strerror}") from None
    if not isinstance(data, dict):
        raise EncoderizeError(f"config file {path!r} must hold a mapping of option names to values")
    return {key.replace("-", "_"): value for key, value in data.items()}


# ------------------------------------------------------------------------------------------------ subcommands


def _convert_parser(sub) -> None:
    from hf_encoderize.convert import ConvertConfig
    from hf_encoderize.loading import LoadConfig

    parser = sub.add_parser("convert", help="encoderize a decoder and save it (no training)")
    add_dataclass_args(parser, LoadConfig, positional=("source",))
    add_dataclass_args(parser, ConvertConfig, positional=("output_dir",))


def _run_convert(args, yaml_values) -> int:
    from hf_encoderize.convert import ConvertConfig, convert
    from hf_encoderize.loading import LoadConfig

    summary = convert(build_config(LoadConfig, args, yaml_values), build_config(ConvertConfig, args, yaml_values))
    for key, value in summary.items():
        print(f"{key}: {value}")
    return 0


def _architectures_parser(sub) -> None:
    parser = sub.add_parser("architectures", help="probe every causal-LM architecture transformers ships")
    parser.add_argument("--write", default=None, help="also write the markdown table to this file")
    parser.add_argument("--model-types", nargs="*", default=None, help="only these model types")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")


def _run_architectures(args, yaml_values) -> int:
    from hf_encoderize.architectures import render_markdown, run_matrix

    def progress(index, total, result):
        print(f"[{index}/{total}] {result.model_type}: {result.kind}", file=sys.stderr, flush=True)

    results = run_matrix(args.model_types, progress=progress)
    table = render_markdown(results)
    if args.write:
        with open(args.write, "w") as handle:
            handle.write(table)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    else:
        print(table, end="")
    return 0


def _cpt_parser(sub) -> None:
    from hf_encoderize.hub import HubConfig

    parser = sub.add_parser("cpt", help="MLM continued pretraining of a decoder (or encoder) into an encoder")
    classes = _cpt_classes()
    add_dataclass_args(parser, classes[0], positional=("source",))
    for config_class in (*classes[1:], HubConfig):
        add_dataclass_args(parser, config_class)


def _hub_config(args, yaml_values):
    """--push-to-hub & co, checked (repo id, token, offline mode) before any work starts."""
    from hf_encoderize.hub import HubConfig, check_push_ready

    hub = build_config(HubConfig, args, yaml_values)
    check_push_ready(hub)
    return hub


def _push_if_asked(hub, out_dir) -> None:
    """After a command finishes: card, then push; only on the main process of a multi-process launch."""
    import os

    if hub.push_to_hub and os.environ.get("RANK", "0") == "0":
        from hf_encoderize.hub import push_after

        print(f"pushed {len(push_after(out_dir, hub))} files to {hub.push_to_hub}", flush=True)


def _cpt_classes() -> tuple:
    from hf_encoderize.data import DataConfig
    from hf_encoderize.loading import LoadConfig
    from hf_encoderize.lora import AdapterConfig
    from hf_encoderize.masking import MaskingConfig
    from hf_encoderize.train import TrainConfig

    return LoadConfig, DataConfig, MaskingConfig, TrainConfig, AdapterConfig


def _run_cpt(args, yaml_values) -> int:
    from hf_encoderize.cpt import cpt

    configs = [build_config(c, args, yaml_values) for c in _cpt_classes()]
    hub = _hub_config(args, yaml_values)
    summary = cpt(*configs)
    print(json.dumps({k: v for k, v in summary.items() if k != "losses"}))
    _push_if_asked(hub, configs[3].output_dir)  # cpt filled in the default output folder
    return 0


def _pretrain_parser(sub) -> None:
    from hf_encoderize.hub import HubConfig

    parser = sub.add_parser("pretrain", help="pretrain an encoder from scratch: CLM, MLM or CLM then MLM (one budget)")
    for config_class in (*_pretrain_classes(), HubConfig):
        add_dataclass_args(parser, config_class)


def _pretrain_classes() -> tuple:
    from hf_encoderize.data import DataConfig
    from hf_encoderize.masking import MaskingConfig
    from hf_encoderize.pretrain import PretrainConfig
    from hf_encoderize.train import TrainConfig

    return PretrainConfig, DataConfig, MaskingConfig, TrainConfig


def _run_pretrain(args, yaml_values) -> int:
    from hf_encoderize.pretrain import pretrain

    configs = [build_config(c, args, yaml_values) for c in _pretrain_classes()]
    hub = _hub_config(args, yaml_values)
    summary = pretrain(*configs)
    print(json.dumps({k: v for k, v in summary.items() if k != "losses"}))
    _push_if_asked(hub, configs[3].output_dir)  # pretrain filled in the default output folder
    return 0


def _card_parser(sub) -> None:
    from hf_encoderize.card import CardConfig

    parser = sub.add_parser("card", help="(re)generate the model card (OUT/encoder/README.md) from the run's records")
    add_dataclass_args(parser, CardConfig, positional=("output_dir",))


def _run_card(args, yaml_values) -> int:
    from hf_encoderize.card import CardConfig, write_card

    print(write_card(build_config(CardConfig, args, yaml_values)))
    return 0


def _push_parser(sub) -> None:
    from hf_encoderize.hub import PushConfig

    parser = sub.add_parser("push", help="upload the encoder, its card and plots to the Hub (never checkpoints)")
    add_dataclass_args(parser, PushConfig, positional=("output_dir", "repo_id"))


def _run_push(args, yaml_values) -> int:
    from hf_encoderize.hub import PushConfig, push

    config = build_config(PushConfig, args, yaml_values)
    files = push(config)
    print(f"{'would upload' if config.dry_run else 'uploaded'} {len(files)} files to {config.repo_id}:")
    print("\n".join(f"  {name}" for name in files))
    return 0


def _space_parser(sub) -> None:
    from hf_encoderize.space import SpaceConfig

    parser = sub.add_parser("space", help="serve the Gradio demo of an encoder on this machine (needs the space extra)")
    add_dataclass_args(parser, SpaceConfig, positional=("out_dir",))


def _run_space(args, yaml_values) -> int:
    from hf_encoderize.space import SpaceConfig, launch_space

    launch_space(build_config(SpaceConfig, args, yaml_values))
    return 0


def _push_space_parser(sub) -> None:
    from hf_encoderize.space import PushSpaceConfig

    parser = sub.add_parser("push-space", help="create/update a Gradio Space that demos the encoder")
    add_dataclass_args(parser, PushSpaceConfig, positional=("out_dir", "space_id"))


def _run_push_space(args, yaml_values) -> int:
    from hf_encoderize.space import PushSpaceConfig, push_space

    config = build_config(PushSpaceConfig, args, yaml_values)
    files = push_space(config)
    print(f"{'would upload' if config.dry_run else 'uploaded'} {len(files)} files to Space {config.space_id}:")
    print("\n".join(f"  {name}" for name in files))
    return 0


def _pipeline_parser(sub) -> None:
    from hf_encoderize.hub import HubConfig
    from hf_encoderize.pipeline import RunConfig

    parser = sub.add_parser("run", help="cpt, eval, card and push in one output folder; a re-run skips finished stages")
    classes = _cpt_classes()
    add_dataclass_args(parser, classes[0], positional=("source",))
    for config_class in (*classes[1:], RunConfig, HubConfig):
        add_dataclass_args(parser, config_class)


def _run_pipeline(args, yaml_values) -> int:
    from hf_encoderize.pipeline import RunConfig, run

    configs = [build_config(c, args, yaml_values) for c in _cpt_classes()]
    run(*configs, build_config(RunConfig, args, yaml_values), _hub_config(args, yaml_values))
    return 0


def _quickstart_parser(sub) -> None:
    from hf_encoderize.quickstart import QuickstartConfig

    parser = sub.add_parser("quickstart", help="offline demo on the embedded SmolLM2-135M: short cpt, smoke eval, card")
    add_dataclass_args(parser, QuickstartConfig)


def _run_quickstart(args, yaml_values) -> int:
    from hf_encoderize.quickstart import QuickstartConfig, quickstart

    quickstart(build_config(QuickstartConfig, args, yaml_values))
    return 0


def _eval_parser(sub) -> None:
    from hf_encoderize.evaluation.config import EvalConfig
    from hf_encoderize.hub import HubConfig
    from hf_encoderize.loading import LoadConfig

    parser = sub.add_parser("eval", help="fine-tune and score a model on the paper's SC/TC/QA/IR suite")
    add_dataclass_args(parser, LoadConfig, positional=("source",))
    add_dataclass_args(parser, EvalConfig)
    add_dataclass_args(parser, HubConfig)


def _run_eval(args, yaml_values) -> int:
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.evaluation.summary import render_markdown
    from hf_encoderize.hub import eval_push_target, push_eval
    from hf_encoderize.loading import LoadConfig

    load, config = build_config(LoadConfig, args, yaml_values), build_config(EvalConfig, args, yaml_values)
    hub = _hub_config(args, yaml_values)
    target = eval_push_target(load.source) if hub.push_to_hub else None  # a Hub model fails before fine-tuning
    summary = evaluate(load, config)
    print(render_markdown(summary), end="")
    if target is not None:
        files = push_eval(target, f"{config.output_dir}/{summary['model_name']}", hub)
        print(f"pushed {len(files)} files to {hub.push_to_hub}", flush=True)
    return 0


def _compare_parser(sub) -> None:
    parser = sub.add_parser("compare", help="one table and one plot of several eval results folders side by side")
    parser.add_argument("results_dirs", nargs="+", help="eval results folders (each holding summary.json)")
    parser.add_argument("--output-dir", default=None, help="where comparison.md/.png go (default: comparison)")


def _run_compare(args, yaml_values) -> int:
    from hf_encoderize.evaluation.compare import compare

    written = compare(args.results_dirs, args.output_dir or yaml_values.get("output_dir") or "comparison")
    print(written["table"], end="")
    print(f"wrote {written['markdown']} and {written['plot']}")
    return 0


COMMANDS: dict[str, tuple[Callable, Callable]] = {
    "cpt": (_cpt_parser, _run_cpt),
    "pretrain": (_pretrain_parser, _run_pretrain),
    "convert": (_convert_parser, _run_convert),
    "eval": (_eval_parser, _run_eval),
    "compare": (_compare_parser, _run_compare),
    "architectures": (_architectures_parser, _run_architectures),
    "card": (_card_parser, _run_card),
    "push": (_push_parser, _run_push),
    "run": (_pipeline_parser, _run_pipeline),
    "quickstart": (_quickstart_parser, _run_quickstart),
    "space": (_space_parser, _run_space),
    "push-space": (_push_space_parser, _run_push_space),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-encoderize", description="Turn any decoder LLM into a text encoder.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_parser, _ in COMMANDS.values():
        add_parser(sub)
    for command_parser in sub.choices.values():
        command_parser.add_argument("--config", default=None, help="YAML file of option defaults (flags win)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command][1](args, _load_yaml(args.config))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
