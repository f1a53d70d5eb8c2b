"""A small corpus in one try (issue 49, point 4): the held-out count scales down (5%, as run_mlm.py holds out a
share), every check that can run before the weights load does, and a refused start leaves nothing behind, so the
next try is not refused as "folder not empty"."""

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.data.sources import DataConfig

TINY = ["--seq-len", "32", "--batch-size", "2", "--steps", "2", "--no-progress", "--save-steps", "100"]


@pytest.mark.parametrize("documents, held_out", [(20, 1), (200, 10), (2000, 64)])
def test_the_held_out_count_scales_down_for_a_small_corpus(tmp_path, documents, held_out):
    corpus = write_corpus(tmp_path / "docs.jsonl", documents, lambda i: 8)
    assert DataConfig(data_files=str(corpus)).eval_documents == held_out
    assert DataConfig(data_files=str(corpus), eval_documents=64).eval_documents == 64  # given: kept
    assert DataConfig().eval_documents == 64  # a Hub source is not counted


@pytest.fixture
def no_weights(monkeypatch):
    """Fail the test if a cpt loads its model: what is checked here must be refused before."""
    def loaded(*args, **kwargs):
        raise AssertionError("the weights were loaded before the refusal")
    monkeypatch.setattr("hf_encoderize.recipes.cpt.encoderize_where_it_trains", loaded)
    monkeypatch.setattr("hf_encoderize.model.loading.load_encoder", loaded)


@pytest.mark.parametrize("flags, said", [
    (["--batch-size", "64"], "19 training documents after the held-out ones; a step takes 64 rows"),
    (["--seq-len", "4096"], "--max-seq-length 4096 is above the model's limit"),
])
def test_a_small_corpus_is_refused_before_the_weights_load(decoder_dir, tmp_path, no_weights, capsys, flags, said):
    corpus = write_corpus(tmp_path / "docs.jsonl", 20, lambda i: 8)
    out = tmp_path / "run"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), *TINY, *flags])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert not out.exists() or not any(out.iterdir())


def test_a_refused_start_leaves_nothing_behind_and_the_next_try_runs(decoder_dir, tmp_path, monkeypatch, capsys):
    from hf_encoderize.common.errors import EncoderizeError

    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    out = tmp_path / "run"
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), *TINY]

    def refused(*args, **kwargs):  # a refusal met as training starts (a streamed source too small for a step)
        raise EncoderizeError("refused as training starts")
    with monkeypatch.context() as patched:
        patched.setattr("hf_encoderize.training.runner.train_phases", refused)
        assert main(argv) == 2
    assert "refused as training starts" in capsys.readouterr().err
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []  # no settings, metrics or marker
    assert main(argv) == 0, capsys.readouterr().err  # the same command again: not "folder not empty"
    assert (out / "encoder" / "config.json").is_file()


def test_a_run_that_trained_a_step_keeps_its_folder(decoder_dir, tmp_path, monkeypatch):
    """Only a start is discarded: a run that failed after training keeps its metrics (they tell what went wrong)."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.training import runner

    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    out = tmp_path / "run"
    real = runner.train_phases

    def then_refused(*args, **kwargs):
        real(*args, **kwargs)
        raise EncoderizeError("refused after training")
    monkeypatch.setattr("hf_encoderize.training.runner.train_phases", then_refused)
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), *TINY]) == 2
    assert '"kind": "train"' in (out / "metrics.jsonl").read_text()


def test_the_data_checks_on_the_tokenizer_speak_before_the_weights_load(decoder_dir, tmp_path, monkeypatch, capsys):
    """The token budget and the document-length lines need only the tokenizer: they come before the weights load (a
    loader that refuses here stops the run after them), not after a load that may take minutes."""
    from hf_encoderize.common.errors import EncoderizeError

    def refused(*args, **kwargs):
        raise EncoderizeError("the weights load here")
    monkeypatch.setattr("hf_encoderize.recipes.cpt.encoderize_where_it_trains", refused)
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 2)  # ~2-token documents, far too few tokens
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(tmp_path / "run"), *TINY[:4],
            "--steps", "50", *TINY[6:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    said = [err.find("repeats tokens"), err.find("the median training document is"), err.find("the weights load here")]
    assert -1 not in said and said[0] < said[2] and said[1] < said[2], err
