"""`--help` grouped by what the options configure (issue 49, point 6): a one-line usage, then one section per config
dataclass headed by its docstring, each option in its own class's section, and no default said twice."""

import dataclasses
import re

import pytest

from hf_encoderize.cli import COMMANDS, main
from hf_encoderize.common.arguments import group_title
from hf_encoderize.common.options import flag, option_name


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_options_are_grouped_by_their_config_class(name, capsys):
    text = _help(name, capsys)
    assert text.startswith(f"usage: hf-encoderize {name} ") and text.splitlines()[0].endswith("[options]")
    assert not text.splitlines()[1].strip()  # the usage is one line, not a list of every option
    sections = {title.strip(): body for title, body in re.findall(r"\n\n([^\n ][^\n]*):\n(.*?)(?=\n\n|\Z)", text, re.S)}
    for cls in COMMANDS[name].configs:
        body = sections[group_title(cls)]
        for field in dataclasses.fields(cls):
            if field.kw_only:
                assert re.search(rf"^  {re.escape(flag(option_name(cls, field)))}\b", body, re.M), (cls, field.name)


@pytest.mark.parametrize("name", ["cpt", "run", "eval"])
def test_no_default_is_said_twice(name, capsys):
    options = [option.split("\n\n")[0] for option in re.split(r"\n  (?=-)", _help(name, capsys))]
    twice = [option.split()[0] for option in options  # "(default: X)" added to a help that says its default
             if "(default: " in option and len(re.findall(r"default", option, re.I)) > 1]
    assert not twice, twice
