"""The README and the docs/ pages stay true: every `hf-encoderize ...` line in their bash blocks parses with the real
CLI parser (so a renamed or removed flag fails here, not in a newcomer's terminal), the README's YAML example builds
the cpt configs it claims to, the README stays a front page (at most 400 lines, the two set-up commands first), and
every docs/ page is linked from it and every link between them points at a page that exists."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from hf_encoderize.cli import COMMANDS, build_parser
from hf_encoderize.common.config_file import build_configs

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
MAIN_COMMANDS = {"cpt", "eval", "compare", "run", "card", "push", "convert", "pretrain", "space", "push-space"}
SETUP = ("bash examples/quickstart.sh", "bash scripts/test.sh")


def _blocks(language: str, page: Path = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def _commands(pages: list[Path]) -> list[tuple[str, list[str]]]:
    """Each hf-encoderize invocation in the pages' bash blocks, continuation lines joined, as (page name, the part
    after the program)."""
    found = []
    for page in pages:
        for block in _blocks("bash", page):
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.split("&&"):
                    words = shlex.split(part, comments=True)
                    for marker in ("hf-encoderize", "hf_encoderize.cli"):
                        if marker in words:
                            found.append((page.name, words[words.index(marker) + 1:]))
    return found


def _links(page: Path) -> list[str]:
    """Relative link targets of a page (no web addresses, no in-page anchors), without their #fragment."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [target.split("#")[0] for target in targets if not re.match(r"[a-z]+:", target) and target[0] != "#"]


def test_the_readme_and_docs_have_commands():
    everywhere = _commands(PAGES)
    assert len(everywhere) > 30
    assert {words[0] for _, words in everywhere} >= set(COMMANDS)  # every command is shown somewhere
    assert {words[0] for _, words in _commands([README])} >= MAIN_COMMANDS  # and the main ones on the front page


def _id(value) -> str:
    return value if isinstance(value, str) else " ".join(value)[:60]


@pytest.mark.parametrize(("page", "words"), _commands(PAGES), ids=_id)
def test_every_readme_and_docs_command_parses(page, words):
    try:
        build_parser().parse_args(words)
    except SystemExit as exit_:
        pytest.fail(f"{page} command does not parse (exit {exit_.code}): hf-encoderize {' '.join(words)}")


def test_the_readme_yaml_example_builds_the_cpt_configs():
    (block,) = [b for b in _blocks("yaml") if "hf-encoderize cpt" in b]
    values = yaml.safe_load(block)
    args = build_parser().parse_args(["cpt", "meta-llama/Llama-3.2-1B"])
    load, data, masking, train, adapter, hub = build_configs(COMMANDS["cpt"], args, values)  # unknown keys: refused
    assert load.source == "meta-llama/Llama-3.2-1B" and data.data_files == "corpus/*.jsonl" and data.seq_len == 1024
    assert train.steps == 12000 and train.batch_size == 16 and train.mixed_precision == "bf16"
    assert masking.mask_ratio == 0.4  # untouched fields keep the paper's defaults
    # flags given on the command line win over the file
    args = build_parser().parse_args(["cpt", "meta-llama/Llama-3.2-1B", "--max-steps", "50"])
    assert build_configs(COMMANDS["cpt"], args, values)[3].steps == 50


def test_the_readme_is_a_front_page_with_the_two_setup_commands_first():
    lines = README.read_text().splitlines()
    assert len(lines) <= 400, f"README.md has {len(lines)} lines; move detail into a docs/ page and link it"
    first = _blocks("bash")[0]
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == list(SETUP)
    assert (REPO / ".ci" / "run").read_text().strip().endswith(SETUP[1])  # CI runs the README's test command


def test_every_docs_page_is_linked_from_the_readme_and_every_link_exists():
    linked = {(README.parent / target).resolve() for target in _links(README)}
    assert {page.resolve() for page in DOCS.glob("*.md")} <= linked, "a docs/ page the README does not link"
    for page in PAGES:
        for target in _links(page):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_every_anchor_into_a_docs_page_names_one_of_its_headings():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s:]*\.md)#([^)\s]+)\)", page.read_text()):
            headings = re.findall(r"^#+ (.+)$", (page.parent / target).read_text(), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}
            assert anchor in slugs, f"{page.name} links to {target}#{anchor}, a heading {target} does not have"
