"""The plan a training run states (issue 67, point 1): tokens per step (rows x length x accumulation x processes),
the total, the paper's figure beside it, `--dry-run` that stops there, `--tokens-per-step paper`; then an ETA once a
few steps are timed, and `metrics.jsonl` stamping each step when it ended (point 4)."""

import json

import pytest
from conftest import write_corpus

from hf_encoderize import cli
from hf_encoderize.training.monitor import read_metrics


def test_dry_run_states_the_tokens_and_the_papers_figure_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["cpt", "meta-llama/Llama-3.2-1B", "--steps", "12000", "--dry-run", "--output-dir", str(out)]
    assert cli.main(argv) == 0
    said = capsys.readouterr()
    plan = json.loads(said.out)
    assert plan["tokens_per_step"] == 8 * 512 and plan["total_tokens"] == 49_152_000
    assert plan["paper_tokens"] == 12_000 * 2_359_296  # 28.3B: Appendix A's 1,152 rows of 2,048
    line = next(line for line in said.err.splitlines() if line.startswith("plan:"))
    assert "8 rows x 512 tokens x 1 accumulation x 1 process = 4,096 tokens a step" in line
    assert "49.2M tokens" in line and "28.3B" in line and "0.17%" in line and "--tokens-per-step paper" in line
    assert not out.exists()


def test_the_papers_batch_by_name_on_the_command_line_and_in_a_config(tmp_path, capsys):
    argv = ["cpt", "m", "--max-seq-length", "2048", "--dry-run", "--json"]
    assert cli.main([*argv, "--tokens-per-step", "paper"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["grad_accum"] == 144 and plan["tokens_per_step"] == 2_359_296  # 8 rows x 2,048 x 144
    (tmp_path / "paper.yaml").write_text("tokens_per_step: paper\n")
    assert cli.main([*argv, "--config", str(tmp_path / "paper.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["tokens_per_step"] == 2_359_296
    with pytest.raises(SystemExit) as refused:  # argparse's refusal: one line, exit 2
        cli.main([*argv, "--tokens-per-step", "papr"])
    assert refused.value.code == 2
    assert "'papr' is neither a whole number nor 'paper'" in capsys.readouterr().err


def test_a_run_states_its_plan_first_then_an_eta_and_stamps_each_step(decoder_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "docs.jsonl", 60, lambda i: 8)
    out = tmp_path / "run"
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "5", "--max-seq-length", "32",
            "--batch-size", "2", "--eval-documents", "2", "--eval-steps", "0", "--save-steps", "100",
            "--logging-steps", "5", "--no-progress", "--output-dir", str(out)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    plan = next(i for i, line in enumerate(err) if line.startswith("plan:"))
    assert "2 rows x 32 tokens x 1 accumulation x 1 process = 64 tokens a step, 5 steps = 320 tokens" in err[plan]
    assert plan < next(i for i, line in enumerate(err) if line.startswith("step 5/5"))  # before the first step
    assert any(line.startswith("ETA: ") and "steps left" in line for line in err), err
    steps = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    elapsed = [r["elapsed_s"] for r in steps]  # five steps read in one flush, each stamped when it ended
    assert len(steps) == 5 and all(a < b for a, b in zip(elapsed, elapsed[1:], strict=False)), elapsed
    assert json.loads((out / "run_record.json").read_text())["tokens_seen"] > 0  # the record states tokens trained


def test_the_readmes_headline_command_says_what_it_costs(capsys):
    """The README's headline cpt command is preceded by its plan's figures: the tokens it trains and the paper's."""
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines()
    at = lines.index("hf-encoderize cpt meta-llama/Llama-3.2-1B --max-steps 12000")
    above = " ".join(lines[at - 3:at])
    assert cli.main(["cpt", "meta-llama/Llama-3.2-1B", "--max-steps", "12000", "--dry-run"]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("plan:"))
    for figure in ("49.2M tokens", "0.17%", "28.3B", "--tokens-per-step paper"):
        assert figure in line and figure in above, (figure, above)


def test_fast_dev_run_trains_a_few_steps_without_the_optional_checks_and_says_so(decoder_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "docs.jsonl", 60, lambda i: 8)
    out = tmp_path / "dev"
    assert cli.main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size",
                     "2", "--eval-documents", "2", "--no-progress", "--fast-dev-run", "--output-dir", str(out)]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["steps"] == 3  # not the 12,000 of the default budget
    assert "warning: --fast-dev-run: 3 steps, without the corpus budget check" in said.err
    assert "eval_loss" not in said.err  # no held-out evaluation, before or after
