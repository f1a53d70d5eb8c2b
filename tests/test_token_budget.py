"""A run that will repeat tokens says so before training (issue 31 point 4): the estimate of what a source holds, the
line, and the paper's own budgets against FineWeb-Edu's subsets."""

import json

import pytest
from conftest import make_tokenizer, write_corpus

from hf_encoderize.cli import main
from hf_encoderize.data.budget import check_token_budget, estimate_budget
from hf_encoderize.data.sources import DataConfig, open_documents

PAPER_ROWS, PAPER_SEQ = 1152, 2048  # Appendix A: 2,359,296 tokens a step (12 x 12 x 8 GPUs x 2048)


def test_a_local_source_is_estimated_from_its_own_tokens(tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 300, lambda i: 5 + i % 20)
    cfg = DataConfig(data_files=str(corpus), seq_len=16, eval_documents=10)
    documents = open_documents(cfg)
    truth = sum(len(json.loads(line)["text"].split()) for line in corpus.read_text().splitlines()[10:])
    budget = estimate_budget(cfg, documents, make_tokenizer(), rows_per_step=4, steps=50)
    assert budget.need == 50 * 4 * 16
    assert abs(budget.holds - truth) <= 0.05 * truth, (budget.holds, truth)  # word-level: one token a word


def test_the_line_comes_only_when_the_source_runs_out(tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 100, lambda i: 10)
    cfg = DataConfig(data_files=str(corpus), seq_len=10, eval_documents=0)
    documents, tokenizer = open_documents(cfg), make_tokenizer()
    lines = []
    check_token_budget(cfg, documents, tokenizer, rows_per_step=10, steps=9, say=lines.append)  # 900 of 1,000
    assert lines == []
    budget = check_token_budget(cfg, documents, tokenizer, rows_per_step=10, steps=30, say=lines.append)
    assert budget.passes == pytest.approx(3.0, rel=0.05)
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "3.0 passes" in lines[0], lines
    assert "--max-steps" in lines[0] and str(corpus) in lines[0]


@pytest.mark.parametrize("subset, skip_documents, steps, warns", [
    ("sample-100BT", 0, 42_000, False),  # the paper's base run: 99.1B of about 100B
    ("sample-100BT", 95_000_000, 22_000, True),  # CPT after it, continuing the stream: about 52B more
    ("sample-350BT", 95_000_000, 22_000, False),  # the subset examples/paper reads now: room for both
    ("sample-10BT", 0, 42_000, True),
])
def test_the_paper_budgets_against_fineweb_edu(subset, skip_documents, steps, warns):
    documents = [" ".join(f"w{i % 100}" for i in range(1000))] * 300  # ~1,000 tokens a document, as FineWeb-Edu
    cfg = DataConfig(dataset="HuggingFaceFW/fineweb-edu", dataset_config=subset, seq_len=PAPER_SEQ,
                     eval_documents=64, skip_documents=skip_documents)
    lines = []
    check_token_budget(cfg, documents, make_tokenizer(), PAPER_ROWS, steps, say=lines.append)
    assert bool(lines) is warns, lines


def test_an_unknown_hub_dataset_is_not_estimated():
    cfg = DataConfig(dataset="someone/corpus", dataset_config=None, seq_len=32)
    assert estimate_budget(cfg, ["w1 w2 w3"] * 10, make_tokenizer(), 8, 10) is None


def test_cpt_says_it_before_the_first_step(decoder_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(tmp_path / "run"),
                 "--max-seq-length", "16", "--max-steps", "12", "--batch-size", "4", "--eval-documents", "4",
                 "--eval-steps", "0",
                 "--save-steps", "1000"])
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: this run reads about")]
    assert len(warnings) == 1, err
    assert err.index(warnings[0]) < err.index("pass 2 over them begins"), err  # before the pass it announces


def test_the_card_count_is_converted_into_the_runs_own_tokens():
    """FineWeb-Edu's card counts GPT-2 tokens; each row's token_count says how many its text has. A tokenizer that
    needs half as many tokens (1,000 where GPT-2 counted 2,000) makes sample-100BT about 50B of the run's tokens, so
    the paper's base run (99.1B) now warns; counted in GPT-2 tokens, as before, it did not."""
    from hf_encoderize.data.budget import run_tokens_per_card_token
    from hf_encoderize.data.sources import Documents

    text = " ".join(f"w{i % 100}" for i in range(1000))
    cfg = DataConfig(dataset="HuggingFaceFW/fineweb-edu", dataset_config="sample-100BT", seq_len=PAPER_SEQ,
                     eval_documents=64)
    documents = Documents([{"text": text, "token_count": 2000}] * 400, "text")
    assert run_tokens_per_card_token(cfg, documents, make_tokenizer()) == pytest.approx(0.5)
    lines = []
    budget = check_token_budget(cfg, documents, make_tokenizer(), PAPER_ROWS, 42_000, say=lines.append)
    assert 45e9 < budget.holds < 55e9 and len(lines) == 1 and "GPT-2" not in lines[0]
    # Rows without token_count: the card's count is kept, and the line says what it counts
    plain = Documents([{"text": text}] * 400, "text")
    budget = check_token_budget(cfg, plain, make_tokenizer(), PAPER_ROWS, 60_000, say=lines.append)
    assert budget.holds > 99e9 and "GPT-2 tokens" in lines[-1]
