"""One vocabulary across the CLI (issue 40, point 4): one option name per concept, the old spellings hidden aliases
with one deprecation line, enumerations' values in usage, `--version`, "did you mean" for flags as for config keys, and
a finished run's run_settings.json replays the run."""

import json

import pytest

from hf_encoderize.cli import COMMANDS, build_parser, main
from hf_encoderize.common.version import __version__

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--save-steps", "100", "--no-progress",
        "--logging-steps", "100", "--eval-steps", "0"]


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("concept, name, others", [
    ("learning rate", "--learning-rate", ("--lr ", "--lr\n", "--lrs", "--contrastive-lr ")),
    ("steps", "--max-steps", ("--steps ", "--contrastive-steps ")),
    ("length", "--max-seq-length", ("--seq-len", "--max-length")),
    ("epsilon", "--adam-epsilon", ("--adam-eps ",)),
])
def test_one_name_per_concept_in_every_command(concept, name, others, capsys):
    shown = {command: _help(command, capsys) for command in COMMANDS}
    assert any(name in text for text in shown.values()), concept
    for command, text in shown.items():
        assert not [old for old in others if old in text], (command, concept)


def test_profile_means_one_thing_and_the_input_folder_is_not_called_output_dir(capsys):
    assert "--profile" not in _help("cpt", capsys) and "--torch-profile" in _help("cpt", capsys)
    assert "--profile" in _help("eval", capsys)  # the evaluation protocol
    for command in ("card", "export", "push", "space", "push-space"):
        usage = _help(command, capsys).split("\n\n")[0]
        assert "run_dir" in usage and "output_dir" not in usage, command


def test_old_spelling_still_works_with_one_deprecation_line(tmp_path, capsys):
    args = build_parser().parse_args(["cpt", "m", "--lr", "3e-4", "--seq-len", "64", "--no-profile"])
    assert args.lr == 3e-4 and args.seq_len == 64 and args.profile is False
    code = main(["cpt", "m", "--lr", "3e-4", "--seq-len", "2", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 2, err  # one deprecation line, then the one error line
    assert "--lr is now --learning-rate" in err[0] and "--seq-len is now --max-seq-length" in err[0]
    assert err[1].startswith("error: --max-seq-length")  # the messages speak the new names


def test_choices_show_in_usage_and_version(capsys):
    assert "--text-unit {line,paragraph,file}" in _help("cpt", capsys)
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"hf-encoderize {__version__}"


def test_a_mistyped_flag_gets_the_closest_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cpt", "m", "--seqlen", "64"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unrecognized arguments: --seqlen 64; did you mean --max-seq-length?" in err


def test_config_keys_take_option_or_field_names_and_typos_get_the_option_name(decoder_dir, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rate: 3e-4\nlr: 3e-4\nmax_seqlen: 64\n")
    code = main(["cpt", str(decoder_dir), "--config", str(config), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "'max_seqlen'" in err and "did you mean 'max_seq_length'?" in err, err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(120)))
    return path


def test_a_finished_run_replays_from_its_run_settings(decoder_dir, corpus, tmp_path, capsys):
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--learning-rate", "3e-3",
                 "--mlm-probability", "0.3", "--output-dir", str(first), *TINY]) == 0
    capsys.readouterr()
    code = main(["cpt", str(decoder_dir), "--config", str(first / "run_settings.json"), "--output-dir", str(again),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    settings = [json.loads((run / "run_settings.json").read_text()) for run in (first, again)]
    assert settings[0]["identity"] == settings[1]["identity"]
    assert settings[1]["lr"] == 3e-3 and settings[1]["mask_ratio"] == 0.3 and settings[1]["steps"] == 2
