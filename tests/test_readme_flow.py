"""The README's order, followed as written on a tiny model: convert -> cpt -> eval -> card ends in a card with the
eval table (issue 49). Before any eval the card names the commands that fill it; running exactly those commands must
fill it, for a run's encoder (scored into RUN/eval/encoder, where the card reads it) and for a converted encoder."""

import json
import re
import shlex

from hf_encoderize.cli import main

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--no-progress"]
EVAL = ["--profile", "smoke", "--datasets", "syn-sentiment", "--max-steps", "2"]


def hinted_commands(card: str) -> list[list[str]]:
    """The hf-encoderize commands the card's "Not evaluated yet" line names, as argument lists."""
    line = card.split("Not evaluated yet.")[1].split("table here.")[0]
    return [shlex.split(command)[1:] for command in re.findall(r"`(hf-encoderize [^`]+)`", line)]


def follow_hint(target, tmp_path) -> str:
    """Write the card of `target`, run the commands its hint names (eval made tiny), and return the card after."""
    assert main(["card", str(target)]) == 0
    card = (target / "encoder" if (target / "encoder").is_dir() else target) / "README.md"
    commands = hinted_commands(card.read_text())
    assert [c[0] for c in commands] == ["eval", "card"], commands
    assert main([*commands[0], *EVAL]) == 0
    assert main(commands[1]) == 0
    return card.read_text()


def test_readme_order_ends_in_a_card_with_the_eval_table(decoder_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # eval's default results/ folder is relative to where it runs
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))})
                              + "\n" for d in range(120)))
    assert main(["convert", str(decoder_dir), "converted"]) == 0
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--output-dir", "run",
                 *TINY]) == 0
    # The README's eval line, no --output-dir: a run's encoder is scored where its card and push read it.
    assert main(["eval", "run/encoder", *EVAL]) == 0
    assert (tmp_path / "run" / "eval" / "encoder" / "summary.json").is_file()
    assert not (tmp_path / "results").exists()
    assert main(["card", "run"]) == 0
    card = (tmp_path / "run" / "encoder" / "README.md").read_text()
    summary = json.loads((tmp_path / "run" / "eval" / "encoder" / "summary.json").read_text())
    assert "Not evaluated yet" not in card
    assert f"| Sequence classification | syn-sentiment | {summary['results'][0]['metric']} |" in card


def test_the_not_evaluated_hint_is_true(decoder_dir, tiny_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["convert", str(decoder_dir), "converted"]) == 0
    for target in (tmp_path / "converted", tiny_run):
        card = follow_hint(target, tmp_path)
        assert "Not evaluated yet" not in card and "| Sequence classification | syn-sentiment |" in card, target


def test_the_readme_set_up_is_short_sections_with_a_pip_line_on_the_first_screen():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0].split("**What the quickstart does.**")[0]
    headings = re.findall(r"^### (.+)$", setup, re.M)
    assert headings == ["Install (CPU)", "Install (GPU)", "GGUF export (optional)", "The demo and the tests"]
    prose = [block for block in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", setup, flags=re.S)) if block.strip()]
    assert max(len(block.strip().splitlines()) for block in prose) <= 5  # no 19-line paragraph of everything
    assert any("pip install" in line for line in text.splitlines()[:50])  # on the first screen
