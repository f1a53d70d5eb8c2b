"""`--help` grouped by what the options configure (issue 49, point 6): a one-line usage, then one section per config
dataclass headed by its docstring, each option in its own class's section, and no default said twice."""

import dataclasses
import re

import pytest

from hf_encoderize.cli import COMMANDS, main
from hf_encoderize.common.arguments import group_title, stage_title
from hf_encoderize.common.options import flag, option_name
from hf_encoderize.common.stages import key, stage_fields, stage_of


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
            if stage_of(field):  # `run`'s stages: a section each, the stage's own options prefixed
                stage = text.split(f"\n\n{stage_title(cls, field)}:\n", 1)[1].split("\n\n", 2)[1]
                for sub in stage_fields(cls, field):
                    assert re.search(rf"^  {re.escape(flag(key(cls, field, sub)))}\b", stage, re.M), sub.name
            elif field.kw_only:
                assert re.search(rf"^  {re.escape(flag(option_name(cls, field)))}\b", body, re.M), (cls, field.name)


@pytest.mark.parametrize("name", ["cpt", "run", "eval"])
def test_no_default_is_said_twice(name, capsys):
    options = [option.split("\n\n")[0] for option in re.split(r"\n  (?=-)", _help(name, capsys))]
    twice = [option.split()[0] for option in options  # "(default: X)" added to a help that says its default
             if "(default: " in option and len(re.findall(r"default", option, re.I)) > 1]
    assert not twice, twice


def _option_help(text: str, option: str) -> str:
    """The help block of `option` in a --help text, its lines joined."""
    (block,) = [b for b in re.split(r"\n  (?=-)", text) if b.startswith(f"{option} ") or b.startswith(f"{option},")]
    return " ".join(block.split("\n\n")[0].split())


@pytest.mark.parametrize("name, option, said", [
    ("cpt", "--report-to", ["none", "tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "aim", "clearml",
                            "dvclive"]),
    ("cpt", "--lora-targets", ["all-linear", "q_proj,v_proj", "any module name the model has"]),
    ("space", "--embedding-model", ["auto", "encoder", "sentence-transformers folder's path"]),
    ("push-space", "--embedding-model", ["auto", "encoder", "sentence-transformers folder's path"]),
    ("eval", "--mteb", ["STS12", "any name `mteb.get_tasks()` knows", "BEIR folders"]),
])
def test_a_free_form_option_says_what_it_accepts(name, option, said, capsys):
    """A closed set is listed whole (--report-to: every tracker `parse_report_to` accepts); an open one gives examples
    and says what else is accepted (issue 49, point 6)."""
    from hf_encoderize.training.monitor import TRACKER_PACKAGES

    text = _option_help(_help(name, capsys), option)
    flat = "".join(text.split())  # argparse wraps at hyphens ("sentence- transformers")
    assert all("".join(word.split()) in flat for word in said), text
    if option == "--report-to":
        assert all(tracker in text for tracker in TRACKER_PACKAGES), text


CITATION = re.compile(r"section \d|Appendix [A-Z]|Figure \d|EncodEval configs|optimus/", re.I)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_help_cites_no_paper_section_and_the_reference_keeps_them(name, capsys):
    """Paper citations go to the docs, not --help: a field docstring's paragraph after a blank line names its sources,
    docs/commands.md prints it, --help does not."""
    assert not CITATION.search(" ".join(_help(name, capsys).split())), CITATION.search(_help(name, capsys))


def test_the_reference_keeps_the_citations():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text()
    steps = next(line for line in page.splitlines() if line.startswith("- `--max-steps` / `--steps` (`int`"))
    assert "paper's CPT results are already strong (section 5)" in steps
    assert "0.1: the paper, Appendix A." in page and "optimus/trainer/configuration/train.py" in page
