"""The Trainer's names (issue 67, point 5): `TrainingArguments`' and `run_mlm.py`'s names for our options are accepted
as flags and config-file keys, shown in --help beside ours, and a YAML written with them trains."""

import json

import yaml
from conftest import write_corpus

from hf_encoderize import cli

TRAINER = {"per_device_train_batch_size": 4, "torch_compile": True, "bf16": True, "warmup_ratio": 0.1,
           "dataset_name": "org/corpus", "hub_model_id": "alice/enc", "resume_from_checkpoint": True}
OURS = {"batch_size": 4, "compile": True, "mixed_precision": "bf16", "warmup_ratio": 0.1, "dataset": "org/corpus",
        "push_to_hub": "alice/enc", "resume": True}


def _printed(argv, capsys) -> dict:
    assert cli.main([*argv, "--print-config"]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


def test_the_trainers_flags_set_our_options(capsys):
    flags = ["--per-device-train-batch-size", "4", "--torch-compile", "--bf16", "--warmup-ratio", "0.1",
             "--dataset-name", "org/corpus", "--hub-model-id", "alice/enc", "--resume-from-checkpoint"]
    printed = _printed(["cpt", "m", "--max-steps", "100", *flags], capsys)
    assert {key: printed[key] for key in OURS} == OURS
    assert _printed(["cpt", "m", "--train-file", "corpus.jsonl"], capsys)["data_files"] == "corpus.jsonl"
    helped = cli.build_parser(only="cpt")._subparsers._group_actions[0].choices["cpt"].format_help()
    for shown in ("--batch-size N, --per-device-train-batch-size N", "--data-files DATA_FILES, --train-file",
                  "--compile, --no-compile, --torch-compile", "--bf16", "--hub-model-id"):
        assert shown in helped, shown


def test_the_trainers_names_in_a_config_file(tmp_path, capsys):
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump({**TRAINER, "max_steps": 100}))
    printed = _printed(["cpt", "m", "--config", str(tmp_path / "trainer.yaml")], capsys)
    assert {key: printed[key] for key in OURS} == OURS
    (tmp_path / "both.yaml").write_text("per_device_train_batch_size: 4\nbatch_size: 8\n")
    assert cli.main(["cpt", "m", "--config", str(tmp_path / "both.yaml")]) == 2
    assert "two spellings of one option" in capsys.readouterr().err
    (tmp_path / "clash.yaml").write_text("bf16: true\nmixed_precision: 'no'\n")
    assert cli.main(["cpt", "m", "--config", str(tmp_path / "clash.yaml")]) == 2
    assert "disagree" in capsys.readouterr().err


def test_warmup_ratio_and_warmup_steps_together_are_refused(capsys):
    assert cli.main(["cpt", "m", "--warmup-ratio", "0.1", "--warmup-steps", "5", "--print-config"]) == 2
    assert capsys.readouterr().err.startswith("error: give --warmup-steps or --warmup-ratio, not both")


def test_a_yaml_in_the_trainers_names_trains(decoder_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    config = {"train_file": str(corpus), "per_device_train_batch_size": 2, "warmup_ratio": 0.5, "max_steps": 2,
              "max_seq_length": 32, "eval_documents": 2, "save_steps": 100, "progress": False,
              "output_dir": str(tmp_path / "run")}
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["cpt", str(decoder_dir), "--config", str(tmp_path / "trainer.yaml")]) == 0
    settings = json.loads((tmp_path / "run" / "run_settings.json").read_text())
    assert settings["batch_size"] == 2 and settings["warmup_steps"] == 1  # half of 2 steps
