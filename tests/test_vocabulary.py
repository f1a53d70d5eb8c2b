"""One vocabulary across the CLI (issue 40, point 4): one option name per concept, the old spellings hidden aliases
with one deprecation line, enumerations' values in usage, `--version`, "did you mean" for flags as for config keys, and
a finished run's run_settings.json replays the run."""

import json
import re

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
    ("learning rate", "--learning-rate", ("--lrs", "--contrastive-lr ")),
    ("steps", "--max-steps", ("--contrastive-steps ",)),
    ("length", "--max-seq-length", ("--max-length",)),
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
    args = build_parser().parse_args(["cpt", "m", "--adam-eps", "1e-6", "--grad-accum", "2", "--no-profile"])
    assert args.adam_eps == 1e-6 and args.grad_accum == 2 and args.profile is False
    code = main(["cpt", "m", "--adam-eps", "1e-6", "--mask-ratio", "2", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 2, err  # one deprecation line, then the one error line
    assert "--adam-eps is now --adam-epsilon" in err[0] and "--mask-ratio is now --mlm-probability" in err[0]
    assert "0.3" not in err[0]  # no promise of a release that has come and gone
    assert err[1].startswith("error: --mlm-probability")  # the messages speak the new names


TRAINING = ("cpt", "pretrain", "contrastive", "run", "quickstart")


@pytest.mark.parametrize("short, long", [("--steps", "--max-steps"), ("--lr", "--learning-rate"),
                                         ("--seq-len", "--max-seq-length")])
def test_the_short_spellings_are_first_class_in_help(short, long, capsys):
    """The mission's `cpt MODEL --steps 12000`: shown beside the long name wherever that option is."""
    for command in COMMANDS:
        text = _help(command, capsys)
        if f"  {long} " in text:
            assert re.search(rf"^  {long} \S+, {short} ", text, re.M), (command, short)  # one line, one option
    assert all(f", {short} " in _help(command, capsys) for command in ("cpt", "run")), short
    assert ", --steps " in _help("contrastive", capsys)


def test_the_short_spellings_train_without_a_warning(decoder_dir, corpus, tmp_path, capsys):
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--steps", "2", "--lr", "3e-3", "--seq-len",
                 "32", "--output-dir", str(tmp_path / "o"), *TINY[2:]])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "is now" not in err and "--steps" not in err and "--lr" not in err and "--seq-len" not in err, err
    settings = json.loads((tmp_path / "o" / "run_settings.json").read_text())
    assert settings["steps"] == 2 and settings["lr"] == 3e-3 and settings["data"]["seq_len"] == 32


@pytest.mark.parametrize("argv, named", [
    (["cpt", "m", "--steps", "20", "--max-steps", "30"], ("--steps 20", "--max-steps 30")),
    (["cpt", "m", "--max-seq-length", "64", "--seq-len", "32"], ("--max-seq-length 64", "--seq-len 32")),
    (["run", "m", "--learning-rate", "1e-4", "--lr", "3e-4"], ("--learning-rate 0.0001", "--lr 0.0003")),
    (["cpt", "m", "--adam-epsilon", "1e-6", "--adam-eps", "1e-8"], ("--adam-epsilon 1e-06", "--adam-eps 1e-08")),
])
def test_two_spellings_with_different_values_are_one_error_line(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert all(name in err for name in named), err


def test_two_spellings_with_one_value_and_a_no_twin_are_accepted():
    args = build_parser().parse_args(["cpt", "m", "--steps", "20", "--max-steps", "20", "--no-progress", "--progress"])
    assert args.steps == 20 and args.progress is True  # --x then --no-x: the last wins, as argparse has it


def test_a_config_file_with_two_spellings_of_different_values_is_one_error_line(decoder_dir, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rate: 1e-4\nlr: 3e-4\n")
    code = main(["cpt", str(decoder_dir), "--config", str(config), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "learning_rate: 1e-4 and lr: 3e-4" in err, err


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


def test_objective_is_the_phase_the_masking_target_and_the_contrastive_method_have_their_own_names(tmp_path, capsys):
    """Issue 52: cpt's `--objective mlm|mntp` is `--masking-target`, contrastive's `--objective simcse|...` is
    `--method`; the old flag still works with one deprecation line, and the messages speak the new names."""
    cpt = build_parser().parse_args(["cpt", "m", "--objective", "mntp"])
    contrastive = build_parser().parse_args(["contrastive", "m", "--objective", "distill"])
    assert cpt.masking_target == "mntp" and contrastive.method == "distill"  # the fields take the new names
    assert main(["cpt", "m", "--objective", "mntp", "--mlm-probability", "2", "--output-dir",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "--objective is now --masking-target" in err[0], err
    assert main(["contrastive", "m", "--data-files", str(tmp_path / "t.jsonl"), "--objective", "distill",
                 "--output-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "--objective is now --method" in err[0] and err[-1].startswith("error: --method distill needs --teacher")
    with pytest.raises(SystemExit) as exited:
        main(["contrastive", "m", "--data-files", "t.jsonl", "--method", "triplet"])
    assert exited.value.code == 2 and "argument --method: invalid choice: 'triplet'" in capsys.readouterr().err
