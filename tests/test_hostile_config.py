"""Hostile config files and float options (issue 14), one table per class of bad input, each case run through the real
CLI: exit 2, exactly one `error:` line naming what to fix, no traceback, and the user's folder (passed as the output
folder, with --overwrite where the command has it) byte for byte as it was. Every case fails during validation, so
nothing trains or loads."""

from pathlib import Path

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))}


@pytest.fixture
def user_dir(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("not hf-encoderize's\n")
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 40, lambda i: 4 + i % 9)


def _command(name: str, decoder_dir: Path, corpus: Path, out: Path) -> list[str]:
    """`name` with everything it needs to get as far as validation, writing (if it ever did) into `out`."""
    data = ["--data-files", str(corpus), "--max-seq-length", "32", "--no-progress", "--output-dir", str(out),
            "--overwrite"]
    return {
        "cpt": ["cpt", str(decoder_dir), *data],
        "run": ["run", str(decoder_dir), *data],
        "pretrain": ["pretrain", "--model-config", "210M", "--tokenizer", str(decoder_dir), *data],
        "eval": ["eval", str(decoder_dir), "--profile", "smoke", "--output-dir", str(out)],
        "convert": ["convert", str(decoder_dir), str(out), "--overwrite"],
    }[name]


def _assert_refused(argv: list[str], message: str, user_dir: Path, capsys, *also_unchanged: Path) -> None:
    watched = [user_dir, *also_unchanged]
    before = [_snapshot(p) if p.is_dir() else p.read_bytes() for p in watched]
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], err
    assert [_snapshot(p) if p.is_dir() else p.read_bytes() for p in watched] == before


# ------------------------------------------------------------------------------------------------ config files

CONFIG_FILES = {  # id: (command, file content (bytes: written raw), expected text)
    "unclosed bracket": ("cpt", "steps: [1, 2\n", "is not valid YAML"),
    "mapping inside a scalar": ("cpt", "steps: 10: 20\n", "is not valid YAML"),
    "bad indentation": ("eval", "profile: smoke\n  lrs: 1\n", "is not valid YAML"),
    "not UTF-8": ("cpt", b"steps: \xff\xfe\n", "is not UTF-8"),
    "integer key": ("cpt", "1: 2\n", "the key 1, which is not an option name"),
    "boolean key": ("convert", "true: 2\n", "the key True, which is not an option name"),
    "top-level list": ("cpt", "- steps\n- 10\n", "must hold a mapping"),
    "top-level text": ("run", "steps\n", "must hold a mapping"),
    "misspelt key": ("cpt", "stpes: 10\n", "did you mean 'max_steps'?"),  # the option's name, as --help spells it
    "text for an int": ("cpt", 'steps: "many"\n', "'steps' to 'many', but it takes a whole number"),
    "float for an int": ("pretrain", "steps: 1.5\n", "'steps' to 1.5, but it takes a whole number"),
    "list for a float": ("cpt", "lr: [1]\n", "'lr' to [1], but it takes a number"),
    "text for a float": ("cpt", "mask_ratio: high\n", "'mask_ratio' to 'high', but it takes a number"),
    "text for a bool": ("cpt", 'pack: "maybe"\n', "'pack' to 'maybe', but it takes true or false"),
    "number for a bool": ("convert", "verify: 1\n", "'verify' to 1, but it takes true or false"),
    "bool for text": ("cpt", "mixed_precision: no\n", "'mixed_precision' to False, but it takes text; quote it"),
    "mapping for text": ("eval", "lrs: {a: 1}\n", "'lrs' to {'a': 1}, but it takes text"),
    "text for an int of run": ("run", "eval_max_steps: ten\n", "'eval_max_steps' to 'ten'"),
}


@pytest.mark.parametrize("case", list(CONFIG_FILES))
def test_a_bad_config_file_is_one_line(case, decoder_dir, corpus, user_dir, tmp_path, capsys):
    command, content, message = CONFIG_FILES[case]
    config = tmp_path / "options.yaml"
    config.write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = [*_command(command, decoder_dir, corpus, user_dir), "--config", str(config)]
    _assert_refused(argv, message, user_dir, capsys, config)


def test_the_error_names_the_config_file(decoder_dir, corpus, user_dir, tmp_path, capsys):
    config = tmp_path / "options.yaml"
    config.write_text('steps: "many"\n')
    _assert_refused([*_command("cpt", decoder_dir, corpus, user_dir), "--config", str(config)], repr(str(config)),
                    user_dir, capsys)


# ------------------------------------------------------------------------------------------------ float options

FLOAT_OPTIONS = {  # id: (command, extra flags, expected text)
    "lr nan": ("cpt", ["--learning-rate", "nan"], "--learning-rate must be a finite number above 0, got nan"),
    "lr inf": ("cpt", ["--learning-rate", "inf"], "--learning-rate must be a finite number above 0, got inf"),
    "lr overflowing to inf": ("run", ["--learning-rate", "1e400"], "--learning-rate must be a finite number above 0, "
                                                                   "got inf"),
    "lr negative": ("pretrain", ["--learning-rate=-1e-4"], "--learning-rate must be a finite number above 0, got "
                                                           "-0.0001"),
    "warmup steps negative": ("cpt", ["--warmup-steps=-5"], "--warmup-steps must be at least 0, got -5"),
    "eval every negative": ("cpt", ["--eval-steps=-1"], "--eval-steps must be at least 0, got -1"),
    "decay fraction nan": ("cpt", ["--decay-fraction", "nan"], "--decay-fraction must be a finite number"),
    "weight decay nan": ("cpt", ["--weight-decay", "nan"], "--weight-decay must be a finite number at least 0"),
    "weight decay negative": ("pretrain", ["--weight-decay=-0.1"], "--weight-decay must be a finite number at least 0"),
    "max grad norm inf": ("cpt", ["--max-grad-norm", "inf"], "--max-grad-norm must be a finite number above 0"),
    "max grad norm zero": ("run", ["--max-grad-norm", "0"], "--max-grad-norm must be a finite number above 0"),
    "mask ratio nan": ("cpt", ["--mlm-probability", "nan"], "--mlm-probability must be a finite number above 0 and "
                                                            "below 1"),
    "lora alpha zero": ("cpt", ["--lora-r", "4", "--lora-alpha", "0"], "--lora-alpha must be above 0"),
    "schedule share nan": ("pretrain", ["--schedule", "clm:nan,mlm:0.75"], "the clm share must be a finite number"),
    "schedule share inf": ("pretrain", ["--schedule", "clm:0.25,mlm:inf"], "the mlm share must be a finite number"),
    "schedule share negative": ("pretrain", ["--schedule", "clm:-0.25,mlm:1.25"], "every share must be positive"),
    "eval lr inf": ("eval", ["--learning-rates", "1e-5,inf"], "--learning-rates must be a finite number above 0, got "
                                                              "inf"),
    "eval warmup ratio inf": ("eval", ["--warmup-ratio", "inf"], "--warmup-ratio must be a finite number"),
    "run eval max steps negative": ("run", ["--eval-max-steps=-3"], "--eval-max-steps must be at least 1, got -3"),
}


@pytest.mark.parametrize("case", list(FLOAT_OPTIONS))
def test_a_non_finite_or_negative_number_is_one_line(case, decoder_dir, corpus, user_dir, capsys):
    command, extra, message = FLOAT_OPTIONS[case]
    _assert_refused([*_command(command, decoder_dir, corpus, user_dir), *extra], message, user_dir, capsys)


# ------------------------------------------------------------------------------------------------ YAML lists

YAML_LISTS = {  # id: (command, file content, the option, the comma-separated text its flag would give)
    "eval lrs": ("eval", "lrs: [1e-5, 2.0e-5]\n", "lrs", "1e-5,2e-05"),
    "eval seeds": ("eval", "seeds: [0, 1, 2]\n", "seeds", "0,1,2"),
    "eval datasets": ("eval", "datasets: [syn-sentiment, syn-qa]\n", "datasets", "syn-sentiment,syn-qa"),
    "run eval seeds": ("run", "eval_seeds: [3, 4]\n", "eval", "3,4"),
    "run eval seeds, nested": ("run", "eval:\n  seeds: [3, 4]\n", "eval", "3,4"),
}


@pytest.mark.parametrize("case", list(YAML_LISTS))
def test_a_yaml_list_is_a_comma_separated_option(case, decoder_dir, corpus, user_dir, tmp_path):
    """The flag takes `1e-5,2e-5`; the file took only that text and refused the list (issue 41)."""
    import yaml

    from hf_encoderize.cli import COMMANDS, build_parser
    from hf_encoderize.common.config_file import build_configs

    command, content, option, text = YAML_LISTS[case]
    argv = _command(command, decoder_dir, corpus, user_dir)
    configs = build_configs(COMMANDS[command], build_parser().parse_args(argv), yaml.safe_load(content))
    found = [getattr(c, option) for c in configs if hasattr(c, option)]
    assert [c.seeds if option == "eval" else c for c in found] == [text]  # run's: its eval stage's
