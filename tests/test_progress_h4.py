"""Long phases show progress with an ETA (issue 67 point 4), on a fresh process's real stderr: `eval`'s grid of
fine-tunings has one bar over all its runs, under the runs' progress lines; `-q` draws none."""

import os
import re
import subprocess
import sys

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SMALL = ["--profile", "smoke", "--datasets", "syn-sentiment", "--seeds", "0,1", "--max-steps", "2", "--batch-size", "4",
         "--max-seq-length", "32"]


def _eval(model, out, *flags) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hf_encoderize.cli", *flags, "eval", str(model), *SMALL, "--output-dir", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=600)


def test_the_eval_grid_has_one_bar_with_an_eta(decoder_dir, tmp_path):
    done = _eval(decoder_dir, tmp_path / "a")
    assert done.returncode == 0, done.stderr[-3000:]
    drawn = re.findall(r"eval: +(\d+)%\|[^|]*\| (\d+)/(\d+) \[[0-9:]+<([0-9:?]+)", done.stderr)
    assert drawn and {total for *_, total, _ in drawn} == {"2"}, done.stderr[-3000:]  # two fine-tunings, one bar
    assert drawn[-1][:3] == ("100", "2", "2")
    assert any(eta != "?" for *_, eta in drawn)  # an ETA once a run is timed
    assert "[2/2] sc/syn-sentiment lr=0.0002 seed=1: validation" in done.stderr  # the run lines still said
    assert done.stdout.startswith("# Evaluation of")  # stdout: the result alone
    quiet = _eval(decoder_dir, tmp_path / "b", "-q")
    assert quiet.returncode == 0 and "eval:" not in quiet.stderr, quiet.stderr[-3000:]


def _teacher(root):
    """A tiny random sentence-transformers teacher (as tests/test_contrastive_distill.py's)."""
    from conftest import make_tokenizer
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=122, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(root / "bert")
    tokenizer = make_tokenizer()
    tokenizer.pad_token = "<unk>"
    tokenizer.save_pretrained(root / "bert")
    modules = [models.Transformer(str(root / "bert")), models.Pooling(24, "mean"), models.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "teacher"))
    (root / "teacher" / "README.md").write_text("---\nlicense: mit\n---\n\n# tiny-teacher\n")
    return root / "teacher"


def test_the_teachers_labelling_has_a_bar_with_an_eta(encoder, tmp_path):
    """`contrastive --method distill` labels every text with the teacher before training (40 of 66 s on the tiny run,
    minutes on WordNet with mpnet): a line says so, then a bar counts its batches with an ETA; -q draws none."""
    teacher = _teacher(tmp_path)
    text = tmp_path / "text.jsonl"
    text.write_text("".join(f'{{"text": "w{i} w{i + 1} w{i + 2} w{i + 3}"}}\n' for i in range(96)))
    argv = [sys.executable, "-m", "hf_encoderize.cli", "contrastive", str(encoder), "--method", "distill", "--teacher",
            str(teacher), "--data-files", str(text), "--max-steps", "1", "--batch-size", "8", "--max-seq-length", "16",
            "--save-steps", "100"]
    done = subprocess.run([*argv, "--output-dir", str(tmp_path / "a")], capture_output=True, text=True, env=ENV,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "labelling 96 texts with the teacher" in done.stderr
    assert re.search(r"Batches: +100%\|[^|]*\| 2/2 \[[0-9:]+<[0-9:]+", done.stderr), done.stderr[-3000:]
    quiet = subprocess.run([*argv, "--output-dir", str(tmp_path / "b"), "-q"], capture_output=True, text=True, env=ENV,
                           timeout=600)
    assert quiet.returncode == 0 and "Batches" not in quiet.stderr, quiet.stderr[-3000:]
