"""`hf-encoderize eval` and `compare` from the command line: real runs on a tiny model, the real loaders on fixture
files, and every bad input as one `error:` line with exit code 2 that loses no finished result."""

import json
import re
from pathlib import Path

import pytest

from hf_encoderize.cli import build_parser, main

FIXTURES = str(Path(__file__).parent / "fixtures" / "eval")
TINY = ["--max-steps", "2", "--batch-size", "4", "--max-seq-length", "32"]


def _error(capsys, argv) -> str:
    capsys.readouterr()  # drop what earlier commands printed
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_help_lists_eval_and_compare(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert re.search(r"^ +eval +fine-tune and score", out, re.M) and re.search(r"^ +compare +one table", out, re.M)
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["eval", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("usage: hf-encoderize eval ")
    for option in ("source", "--profile", "--datasets", "--data-dir", "--causal", "--push-to-hub", "--config"):
        assert re.search(rf"(?<![\w-]){option}(?![\w-])", out), option
    assert "--eval-profile" not in out and "--torch-profile" not in out  # run's and cpt's options are not eval's
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["compare", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "results_dirs [results_dirs ...]" in out and "--output-dir" in out


def test_eval_on_the_real_loaders_through_the_cli(decoder_dir, tmp_path, capsys):
    """One real dataset per family, read from fixture files in the Hub schema, fine-tuned for two steps."""
    argv = ["eval", str(decoder_dir), "--profile", "quick", "--datasets", "sst2,conll2003,squad_v2,nq",
            "--data-dir", FIXTURES, "--dataset-source", "original", "--output-dir", str(tmp_path), *TINY]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "| sst2 | accuracy |" in captured.out and "| nq | ndcg@10 (binary gains) |" in captured.out
    assert "labelled documents" in captured.out and "note: nq:" in captured.err
    assert "[4/4] ir/nq lr=5e-05 seed=0: validation" in captured.err
    summary = json.loads((tmp_path / "tiny-llama" / "summary.json").read_text())
    assert [r["dataset"] for r in summary["results"]] == ["sst2", "conll2003", "squad_v2", "nq"]
    run = json.loads((tmp_path / "tiny-llama" / "qa" / "squad_v2" / "lr5e-05_sd0" / "results.json").read_text())
    assert [e["id"] for e in run["per_example"]["test"]] == ["5733be284776f41900660900", "5733be284776f41900660902"]


def test_causal_runs_go_to_their_own_folder(decoder_dir, tmp_path, capsys):
    argv = ["eval", str(decoder_dir), "--profile", "smoke", "--datasets", "syn-sentiment", "--causal",
            "--output-dir", str(tmp_path), *TINY]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "tiny-llama-causal" / "summary.json").read_text())
    assert summary["mode"] == "causal" and summary["model_name"] == "tiny-llama-causal"


def test_bad_names_and_an_empty_grid_are_one_line_errors(decoder_dir, capsys):
    assert "unknown task 'sentiment'" in _error(capsys, ["eval", str(decoder_dir), "--tasks", "sentiment"])
    assert "unknown dataset 'squad3'" in _error(capsys, ["eval", str(decoder_dir), "--datasets", "squad3"])
    assert "empty grid" in _error(capsys, ["eval", str(decoder_dir), "--tasks", "ir", "--datasets", "sst2"])
    assert "empty grid" in _error(capsys, ["eval", str(decoder_dir), "--seeds", ","])
    with pytest.raises(SystemExit) as refused:  # the Literal's values are the flag's choices: argparse refuses it
        main(["eval", str(decoder_dir), "--profile", "full"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1
    assert "--profile: invalid choice: 'full' (choose from 'paper', 'quick', 'smoke')" in err


def test_a_dataset_out_of_reach_says_to_use_the_hub_or_a_local_copy(decoder_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    message = _error(capsys, ["eval", str(decoder_dir), "--datasets", "mnli", "--output-dir", str(tmp_path)])
    assert "needs the Hugging Face Hub" in message and "--data-dir DIR" in message
    assert not (tmp_path / "tiny-llama").exists()


def test_a_model_that_cannot_be_loaded_is_one_line(tmp_path, capsys):
    message = _error(capsys, ["eval", str(tmp_path / "nope"), "--profile", "smoke", "--output-dir", str(tmp_path)])
    assert "nope" in message
    encoder = tmp_path / "bert"
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(encoder)
    message = _error(capsys, ["eval", str(encoder), "--profile", "smoke", "--causal", "--output-dir", str(tmp_path)])
    assert "--causal keeps a decoder's causal mask" in message and "an ablation" in message


def test_another_protocol_never_overwrites_finished_runs(decoder_dir, tmp_path, capsys):
    argv = ["eval", str(decoder_dir), "--profile", "smoke", "--datasets", "syn-sentiment", "--output-dir",
            str(tmp_path), *TINY]
    assert main(argv) == 0
    results = tmp_path / "tiny-llama" / "sc" / "syn-sentiment" / "lr0.0002_sd0" / "results.json"
    before = results.read_bytes()
    message = _error(capsys, [*argv[:-6], "--max-steps", "3", "--batch-size", "4", "--max-seq-length", "32"])
    assert "another protocol" in message and "max_steps" in message
    assert results.read_bytes() == before
    assert main([*argv, "--seeds", "0,1"]) == 0  # a wider grid of the same protocol reuses seed 0
    assert results.read_bytes() == before
    assert "finished earlier, skipped" in capsys.readouterr().err


def test_compare_refuses_a_folder_without_summary(tmp_path, capsys):
    assert "holds no summary.json" in _error(capsys, ["compare", str(tmp_path), "--output-dir", str(tmp_path / "c")])
