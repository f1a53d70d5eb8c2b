"""A config dataclass as command-line arguments: the one builder every subcommand's parser goes through.

Design choices:
- Every field becomes an argument, positional when declared before `_: KW_ONLY`, else `--option-name` (the field's
  public name, `common.options`), plus its short spelling where it has one (`--steps`, shown, no warning), the
  Trainer's name for it (`--per-device-train-batch-size`, `--bf16`: shown, no warning) and the old spelling as a
  hidden alias that notes its use; the field's docstring is its help text (its first paragraph: the
  sources after it go to the docs) and a `Literal`'s values are its choices (usage lists them, a wrong value is
  refused naming them). Two spellings of one option given different values are refused in one line naming both,
  whichever comes last.
- A refusal is one `error:` line naming the usage (cpt's whole usage is 57 lines), and an unknown flag names the
  closest option, as a config file's unknown key does (`common.config_file`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap

from hf_encoderize.common import stages
from hf_encoderize.common.options import (
    SHORT_SPELLINGS,
    TRAINER_SWITCHES,
    choices,
    closest,
    flag,
    option_name,
    spellings,
)


def field_docs(cls, *, sources: bool = False) -> dict[str, str]:
    """Attribute docstrings (the string right after each field) of a dataclass, inherited fields included (the push
    options are declared once, on `PushOptions`). The first paragraph is the help; what follows a blank line names the
    field's sources (the paper's section, the authors' code) and goes to the docs only (`sources=True`), so `--help`
    says what an option does and the reference says where its default comes from."""
    docs = {}
    for klass in reversed([base for base in cls.__mro__ if dataclasses.is_dataclass(base)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, following in zip(body, body[1:], strict=False):
            if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
                if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                    text = following.value.value
                    docs[node.target.id] = " ".join((text if sources else re.split(r"\n\s*\n", text)[0]).split())
    return docs


def value_type(field: dataclasses.Field) -> tuple[type, bool]:
    """(type of one value, whether the field holds a list of them), read from annotations like `int | None`."""
    annotation = field.type if isinstance(field.type, str) else inspect.formatannotation(field.type)
    first = annotation.split("|")[0].strip()
    is_list = first.startswith("list[")
    return {"int": int, "float": float, "bool": bool}.get(first[5:-1] if is_list else first, str), is_list


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """One argument per field of `cls`: positional before `_: KW_ONLY`, `--option-name` after (`common.options`: the
    field's public name) with the old spelling as a hidden alias; help: its docstring; a `Literal`'s values its
    `choices` (listed in usage; another value is refused before any config is built). A stage field (`common.stages`)
    gives its config's options, prefixed, in a group of their own."""
    docs = field_docs(cls)
    group = parser.add_argument_group(group_title(cls))  # --help lists options by what they configure
    for field in sorted(dataclasses.fields(cls), key=lambda field: field.kw_only):  # positionals before inherited ones
        if stages.stage_of(field):
            continue
        help_text = docs.get(field.name, "").replace("%", "%%")  # argparse %-formats help strings
        if not field.kw_only:
            kind, is_list = value_type(field)
            name, values = option_name(cls, field), choices(cls, field)
            metavar = "{" + ",".join(map(str, values)) + "}" if values else None
            parser.add_argument(field.name, type=kind, nargs="+" if is_list else None, help=help_text,
                                metavar=metavar or name, choices=values)
            continue
        name = option_name(cls, field)
        old = [] if field.name in (name, SHORT_SPELLINGS.get(name)) else [field.name]  # the old spelling, hidden
        _add_option(group, cls, field, help_text, name, spellings(name), [*old, *field.metadata.get("formerly", ())])
        for switch, (target, value) in TRAINER_SWITCHES.items():  # `--bf16`: `--mixed-precision bf16`
            if target == name:
                group.add_argument(flag(switch), dest=field.name, default=None, const=value,
                                   action=_one_value(argparse._StoreConstAction),
                                   help=f"the Trainer's name for {flag(name)} {value}")
    for field in dataclasses.fields(cls):
        if stages.stage_of(field):
            add_stage_args(parser, cls, field, docs.get(field.name, ""))


def add_stage_args(parser: argparse.ArgumentParser, cls, field: dataclasses.Field, about: str) -> None:
    """A stage's options (`common.stages`), prefixed, in one group headed by what the stage does in the command."""
    spec, inner = stages.stage_of(field), stages.stage_class(cls, field)
    group = parser.add_argument_group(stage_title(cls, field),
                                      description=stages.prefixed_text(spec.about or about, cls, field))
    docs, taken = field_docs(inner), set(parser._option_string_actions)
    for sub in stages.stage_fields(cls, field):
        help_text = stages.prefixed_text(docs.get(sub.name, ""), cls, field).replace("%", "%%")
        if sub.name == spec.switch:
            shown = sub.default if field.default is not None else spec.off
            said = "default" in help_text.lower()  # once: `run`'s default named in the class's own words
            help_text = f"{help_text} Or {spec.off}: {spec.off_help}." + ("" if said else f" (default: {shown})")
        name = stages.key(cls, field, sub)
        old = [n for n in stages.old_keys(cls, field, sub) if flag(n) not in taken]  # `--eval-steps` is cpt's
        switch = sub.name == spec.switch
        _add_option(group, inner, sub, help_text, name, [name], old, dest=stages.dest(field, sub),
                    extra=(spec.off,) if switch else (), default_said=switch)


def stage_title(cls, field: dataclasses.Field) -> str:
    """A stage's heading in --help: its class's, and the prefix its options take.

    >>> from hf_encoderize.pipeline.run import RunConfig
    >>> stage_title(RunConfig, dataclasses.fields(RunConfig)[1])
    'The contrastive stage: method, data, pooling and training settings (ContrastiveConfig, as --contrastive-*)'
    """
    return f"{group_title(stages.stage_class(cls, field))[:-1]}, as --{field.name.replace('_', '-')}-*)"


def _add_option(group, cls, field: dataclasses.Field, help_text: str, name: str, shown: list[str], hidden: list[str],
                dest: str | None = None, extra: tuple = (), default_said: bool = False) -> None:
    """`--name` (and its `shown` spellings) for a keyword field, plus each `hidden` spelling noting its use."""
    kind, is_list = value_type(field)
    values = choices(cls, field)
    values = (*values, *extra) if values else None
    metavar = "{" + ",".join(map(str, values)) + "}" if values else None
    if field.default not in (None, dataclasses.MISSING) and "default" not in help_text.lower() and not default_said:
        help_text = f"{help_text} (default: {field.default})"  # once: a docstring that says its default keeps it
    action = argparse.BooleanOptionalAction if kind is bool else None
    named = field.metadata.get("named")  # `--tokens-per-step paper`: a value with a name
    given = {"action": action} if action else {"type": named_value(kind, named) if named else kind,
                                               "nargs": "*" if is_list else None, "choices": values,
                                               "metavar": metavar or _metavar(kind, name, named)}
    dest = dest or field.name
    group.add_argument(*map(flag, shown), dest=dest, default=None, help=help_text,
                       **{**given, "action": _one_value(action or argparse._StoreAction)})
    for old in hidden:  # an old spelling, hidden, one warning
        alias = _deprecated(_one_value(action or argparse._StoreAction), flag(name))
        group.add_argument(flag(old), dest=dest, default=None, help=argparse.SUPPRESS, **{**given, "action": alias})


def formerly(*names: str) -> dict:
    """Field metadata: the names a renamed field went by (`objective`, before `method`), still accepted as a hidden
    flag that notes its use and as a config-file key, so the command lines and files of earlier versions run."""
    return {"formerly": names}


def _metavar(kind: type, name: str, named: dict | None = None) -> str:
    """N for a whole number, X for a real one (short, so an option and its help share a line), else the name; then
    the names a value may go by (`N|paper`)."""
    return "|".join([{int: "N", float: "X"}.get(kind, name.upper()), *(named or ())])


def named_value(kind: type, named: dict):
    """argparse's `type` for a field whose values may go by a name (`field(metadata={"named": {"paper": 2359296}})`):
    the name's value, else the text as `kind`."""

    def convert(text: str):
        if text in named:
            return named[text]
        try:
            return kind(text)
        except ValueError:
            names = " or ".join(map(repr, named))
            raise argparse.ArgumentTypeError(f"{text!r} is neither a {_TYPE_WORDS.get(kind, kind.__name__)} nor "
                                             f"{names}") from None

    return convert


_TYPE_WORDS = {int: "whole number", float: "number"}


def group_title(cls) -> str:
    """A config class's heading in --help: its docstring's first line, then the class a Python caller fills.

    >>> from hf_encoderize.data.sources import DataConfig
    >>> group_title(DataConfig)
    'Where the pretraining text comes from and how it is packed (DataConfig)'
    """
    first = (inspect.getdoc(cls) or cls.__name__).splitlines()[0].rstrip(".")
    return f"{first} ({cls.__name__})"


def _one_value(base: type[argparse.Action]) -> type[argparse.Action]:
    """`base`, refusing a value given under one spelling (`--steps 20`) when another spelling of the same option
    (`--max-steps 30`) set a different one: which should win is the user's call, not argparse's order."""

    class OneValue(base):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            given = dict(getattr(namespace, "spelled", None) or {})
            value = getattr(namespace, self.dest)
            spelling = (option_string or "").replace("--no-", "--")  # --x and --no-x: one spelling, last wins
            before = given.get(self.dest)
            if before is not None and before[0] != spelling and before[2] != value:
                parser.error(f"{before[1]} and {_shown(option_string, value)} are two spellings of one option with "
                             "different values; give it once")
            namespace.spelled = {**given, self.dest: (spelling, _shown(option_string, value), value)}

    return OneValue


def _shown(option_string: str | None, value) -> str:
    """`--steps 20` as given (a boolean flag is its spelling alone)."""
    if isinstance(value, bool):
        return str(option_string)
    return f"{option_string} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def _deprecated(base: type[argparse.Action], new: str) -> type[argparse.Action]:
    """`base`, noting that the old spelling was used (`--no-` twins map to `--no-` twins)."""

    class Deprecated(base):
        def __call__(self, parser, namespace, values, option_string=None):
            now = f"--no-{new[2:]}" if option_string and option_string.startswith("--no-") else new
            said = getattr(namespace, "deprecated", None) or []  # said once logging is set up (`main`)
            namespace.deprecated = [*said, f"{option_string} is now {now}"]
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser whose refusal is one `error:` line that names the usage, not the whole usage (57 lines
    for cpt). A positional argument a config file tried to set says so: argparse reads the command line before the
    file, so the argument goes on the command line."""

    def error(self, message: str):
        positionals = " ".join(a.metavar or a.dest.upper() for a in self._actions
                               if not a.option_strings and a.help != argparse.SUPPRESS)
        if "arguments are required" in message and "--config" in sys.argv[1:] + list(self._argv or []):
            message += " (a config file cannot set a positional argument: put it on the command line)"
        message = self._unknown_before_the_command() or message
        self.exit(2, f"error: {message}; usage: {self.prog} {positionals} [options], see `{self.prog} --help`\n")

    _argv: list[str] | None = None

    def _unknown_before_the_command(self) -> str | None:
        """`hf-encoderize --versoin`: argparse blames the missing COMMAND; the flag mistyped before it is the cause,
        named with the closest top-level option, as a sub-command's unknown flag is."""
        if not any(isinstance(action, argparse._SubParsersAction) for action in self._actions):
            return None
        known = [option for action in self._actions for option in action.option_strings]
        for word in sys.argv[1:] if self._argv is None else self._argv:
            if not word.startswith("-"):
                return None  # the command: what follows is its parser's to judge
            if word.split("=")[0] not in known:
                match = closest(word.split("=")[0], known)
                return f"unrecognized arguments: {word}{f'; did you mean {match}?' if match else ''}"
        return None




def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, where an unknown flag is refused with the closest option named, as a config file's
    unknown key is."""
    CommandParser._argv = None if argv is None else list(argv)  # main(argv) from Python: its flags count as the shell's
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
