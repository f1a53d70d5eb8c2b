"""Replaying a run (issue 67, point 6; issue 68, point 19): `--config RUN/run_settings.json` with one change, a new
budget included, re-derives what the run had derived (its warmup from its steps); a key no version writes is named
in one warning line."""

import json

import pytest
import yaml
from conftest import write_corpus

from hf_encoderize import cli
from hf_encoderize.training.schedule import default_warmup


@pytest.fixture(scope="module")
def finished_run(decoder_dir, tmp_path_factory):
    """A 10-step cpt run (its warmup derived: 2, a fifth of the run)."""
    folder = tmp_path_factory.mktemp("replay")
    corpus = write_corpus(folder / "docs.jsonl", 40, lambda i: 8)
    out = folder / "run"
    assert cli.main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "10", "--max-seq-length",
                     "32", "--batch-size", "2", "--eval-documents", "2", "--eval-steps", "0", "--save-steps", "100",
                     "--no-progress", "--output-dir", str(out)]) == 0
    return out


def test_a_replay_with_a_new_budget_derives_the_warmup_again(finished_run, tmp_path, capsys):
    capsys.readouterr()
    settings = finished_run / "run_settings.json"
    assert json.loads(settings.read_text())["warmup_steps"] == 2
    source = json.loads(settings.read_text())["base_model"]
    argv = ["cpt", source, "--config", str(settings)]
    out = tmp_path / "again"
    code = cli.main([*argv, "--max-steps", "1", "--no-progress", "--output-dir", str(out)])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    replayed = json.loads((out / "run_settings.json").read_text())
    assert replayed["steps"] == 1 and replayed["warmup_steps"] == default_warmup(1) and replayed["batch_size"] == 2
    assert cli.main([*argv, "--max-steps", "4", "--print-config"]) == 0, capsys.readouterr().err
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["max_steps"] == 4 and printed["warmup_steps"] is None  # derived again: a fifth of 4
    assert cli.main([*argv, "--print-config"]) == 0  # the same budget: the run as it was
    assert yaml.safe_load(capsys.readouterr().out)["max_steps"] == 10


def test_a_key_no_version_writes_is_named_in_one_warning(finished_run, tmp_path, capsys):
    capsys.readouterr()
    settings = json.loads((finished_run / "run_settings.json").read_text())
    edited = tmp_path / "run_settings.json"
    edited.write_text(json.dumps({**settings, "frobnicate": 1}))
    assert cli.main(["cpt", settings["base_model"], "--config", str(edited), "--print-config"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "frobnicate" in line]
    assert len(warned) == 1 and warned[0].startswith("warning:"), warned
    assert cli.main(["cpt", settings["base_model"], "--config", str(finished_run / "run_settings.json"),
                     "--print-config"]) == 0
    assert "warning" not in capsys.readouterr().err  # the run's own file: every key is one a version writes


def test_the_settings_say_what_was_given_apart_from_what_was_derived_under_option_names(finished_run):
    options = json.loads((finished_run / "run_settings.json").read_text())["options"]
    assert options["set"]["max_steps"] == 10 and options["set"]["batch_size"] == 2
    assert "steps" not in options["set"] and "learning_rate" not in options["set"]  # option names; defaults unset
    assert options["derived"] == {"warmup_steps": 2, "decay_steps": 2}
    record = json.loads((finished_run / "run_record.json").read_text())
    assert record["options"] == options


def test_a_warmup_given_by_hand_is_kept_by_a_replay_with_a_new_budget(decoder_dir, tmp_path, capsys):
    """`--warmup-steps 2` on a 10-step run is what the run would have derived, yet the user set it: a replay with
    another budget keeps it (a record without `options` could not tell the two apart and derived it again)."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    out = tmp_path / "run"
    assert cli.main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "10", "--warmup-steps", "2",
                     "--max-seq-length", "32", "--batch-size", "2", "--eval-documents", "2", "--eval-steps", "0",
                     "--save-steps", "100", "--no-progress", "--output-dir", str(out)]) == 0
    settings = json.loads((out / "run_settings.json").read_text())
    assert settings["options"]["set"]["warmup_steps"] == 2 and "warmup_steps" not in settings["options"]["derived"]
    capsys.readouterr()
    assert cli.main(["cpt", settings["base_model"], "--config", str(out / "run_settings.json"), "--max-steps", "4",
                     "--print-config"]) == 0, capsys.readouterr().err
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["max_steps"] == 4 and printed["warmup_steps"] == 2
