"""Every command a card prints runs as printed, for a Hub id as for a folder (issue 68 points 7 and 17): the
"Not evaluated yet" commands fill the card's table, the export commands export, and every argument is shell-quoted
(a folder named `my enc` stays one argument)."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from hf_encoderize.cli import COMMANDS, build_parser, main
from hf_encoderize.common.config_file import build_configs

EVAL = ["--profile", "smoke", "--datasets", "syn-sentiment", "--max-steps", "2"]  # the suite made tiny


def printed(card: str) -> dict[str, list[str]]:
    """The commands of the card's "Not evaluated yet" line and of its "No ONNX/GGUF export yet" lines."""
    hint = card.split("Not evaluated yet.")[1].split("table here.")[0]
    exports = re.findall(r"No (?:ONNX|GGUF) export yet: `([^`]+)`", card)
    return {"hint": re.findall(r"`((?:hf-encoderize|hf download) [^`]+)`", hint), "export": exports}


def run_hint(commands: list[str], download_from: Path | None = None) -> None:
    """Run the hint's commands as printed; `eval` gets the tiny suite's options added, `hf download` (the Hub is
    offline here) is checked against the installed `hf` and done by a copy of the pushed folder."""
    for command in commands:
        argv = shlex.split(command)
        if argv[:2] == ["hf", "download"]:
            assert download_from is not None and argv[3] == "--local-dir" and len(argv) == 5, command
            assert "--local-dir" in hf_download_help()
            shutil.copytree(download_from, argv[4])
            continue
        assert argv[0] == "hf-encoderize", command
        assert main(argv[1:] + (EVAL if argv[1] == "eval" else [])) == 0, command


def hf_download_help() -> str:
    hf = Path(shutil.which("hf") or Path(__import__("sys").executable).parent / "hf")
    return subprocess.run([str(hf), "download", "--help"], capture_output=True, text=True, check=True).stdout


def export_argv(command: str, download_from: Path | None = None) -> list[str]:
    """The arguments of a printed export command, after its download step (done as in `run_hint`)."""
    parts = [shlex.split(part) for part in command.split(" && ")]
    if parts[0][:2] == ["hf", "download"]:
        target = Path(parts[0][4])
        if not target.exists():
            shutil.copytree(download_from, target)
        parts = parts[1:]
    (argv,) = parts
    assert argv[:2] == ["hf-encoderize", "export"], command
    return argv[1:]


def export_folder(argv: list[str]) -> Path:
    """The folder `export` works on, resolved as `export` resolves it (`encoder_dir`: "not a folder" for a Hub id)."""
    from hf_encoderize.model.saving import encoder_dir

    (config,) = build_configs(COMMANDS["export"], build_parser().parse_args(argv), {})
    return encoder_dir(config.output_dir).resolve()


def test_a_folder_with_a_space_gets_commands_that_run_as_printed(decoder_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["convert", str(decoder_dir), "my enc"]) == 0
    assert main(["card", "my enc"]) == 0
    card = (tmp_path / "my enc" / "README.md").read_text()
    commands = printed(card)
    assert "'my enc'" in commands["hint"][0] and len(commands["export"]) == 2
    run_hint(commands["hint"])
    assert "| Sequence classification | syn-sentiment |" in (tmp_path / "my enc" / "README.md").read_text()
    for command in commands["export"]:
        assert export_folder(export_argv(command)) == (tmp_path / "my enc").resolve()


def test_a_card_for_the_hub_prints_commands_that_run_on_the_pushed_model(decoder_dir, tmp_path, monkeypatch):
    from hf_encoderize.publish.card import CardConfig, gather_facts, render_card

    monkeypatch.chdir(tmp_path)
    assert main(["convert", str(decoder_dir), "source"]) == 0
    card = render_card(gather_facts(CardConfig("source", repo_id="alice/enc")))  # what `push alice/enc` uploads
    commands = printed(card)
    assert commands["hint"][0] == "hf download alice/enc --local-dir enc"
    assert not re.search(r"\b(RUN|ENCODER|NAME)\b", " ".join(commands["hint"]))  # no placeholder to fill in
    run_hint(commands["hint"], download_from=tmp_path / "source")
    done = (tmp_path / "enc" / "README.md").read_text()
    assert "| Sequence classification | syn-sentiment |" in done and 'SentenceTransformer("alice/enc")' in done
    onnx, gguf = (export_argv(command, download_from=tmp_path / "source") for command in commands["export"])
    assert export_folder(gguf) == (tmp_path / "enc").resolve() and gguf[-2:] == ["--format", "gguf"]
    assert main(onnx) == 0 and (tmp_path / "enc" / "onnx" / "model.onnx").is_file()  # runs as printed
