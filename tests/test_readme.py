"""The README's commands and config example stay true: every `hf-encoderize ...` line in its bash blocks parses with
the real CLI parser (so a renamed or removed flag fails here, not in a newcomer's terminal), and its YAML example
builds the cpt configs it claims to."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from hf_encoderize.cli import COMMANDS, build_configs, build_parser

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def _commands() -> list[str]:
    """Each hf-encoderize invocation in the bash blocks, continuation lines joined, as the part after the program."""
    found = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                for marker in ("hf-encoderize", "hf_encoderize.cli"):
                    if marker in words:
                        found.append(words[words.index(marker) + 1:])
    return found


def test_the_readme_has_commands():
    commands = _commands()
    assert len(commands) > 30
    assert {c[0] for c in commands} >= {"cpt", "eval", "compare", "run", "card", "push", "convert", "pretrain", "space",
                                        "push-space"}


@pytest.mark.parametrize("words", _commands(), ids=lambda words: " ".join(words)[:60])
def test_every_readme_command_parses(words):
    try:
        build_parser().parse_args(words)
    except SystemExit as exit_:
        pytest.fail(f"README command does not parse (exit {exit_.code}): hf-encoderize {' '.join(words)}")


def test_the_readme_yaml_example_builds_the_cpt_configs():
    (block,) = [b for b in _blocks("yaml") if "hf-encoderize cpt" in b]
    values = yaml.safe_load(block)
    args = build_parser().parse_args(["cpt", "meta-llama/Llama-3.2-1B"])
    load, data, masking, train, adapter, hub = build_configs(COMMANDS["cpt"], args, values)  # unknown keys: refused
    assert load.source == "meta-llama/Llama-3.2-1B" and data.data_files == "corpus/*.jsonl" and data.seq_len == 1024
    assert train.steps == 12000 and train.batch_size == 16 and train.mixed_precision == "bf16"
    assert masking.mask_ratio == 0.4  # untouched fields keep the paper's defaults
    # flags given on the command line win over the file
    args = build_parser().parse_args(["cpt", "meta-llama/Llama-3.2-1B", "--steps", "50"])
    assert build_configs(COMMANDS["cpt"], args, values)[3].steps == 50
