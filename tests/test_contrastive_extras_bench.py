"""benchmarks/contrastive_extras_quality.py: every arm trains (the continued ones from the supervised one) and is scored
at every size, on the tiny encoder."""

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "contrastive_extras_quality.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("contrastive_extras_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def word_pairs(path: Path) -> Path:
    """48 (anchor, positive) pairs in the tiny tokenizer's words (the synthetic set's words are all <unk> to it, and
    pairs that embed alike leave the miner no negative below 95% of the positive)."""
    rng = random.Random(0)
    rows = []
    for _ in range(48):
        start = rng.randrange(100)
        rows.append({"anchor": " ".join(f"w{start + i}" for i in range(3)),
                     "positive": " ".join(f"w{(start + i) % 110}" for i in range(1, 9))})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.slow  # five 2-step trainings and their scoring: 12-30 s on a shared 2-core CPU
def test_every_arm_is_scored_at_every_size(encoder, tmp_path):
    bench = load_benchmark()
    args = bench.parse_args(["--steps", "2", "--continue-steps", "2", "--batch-size", "8", "--max-seq-length", "16",
                             "--matryoshka-dims", "32,16,8", "--work", str(tmp_path)])
    report = bench.run(Path(encoder), tmp_path, args, pairs=word_pairs(tmp_path / "pairs.jsonl"))
    json.dumps(report)  # what main prints
    assert set(report["arms"]) == set(report["results"]) == set(bench.ARMS)
    assert report["arms"]["supervised+hard_negatives"]["start"] == "supervised"
    assert report["settings"]["relative_margin"] == 0.05
    for name, arm in report["arms"].items():
        assert arm["wall_time_s"] > 0 and arm["final_loss"] is not None
        sizes = report["results"][name]
        assert list(sizes) == ["full", "16", "8"]  # 32 is the tiny model's full width
        assert [s["dim"] for s in sizes.values()] == [32, 16, 8]
        for figures in sizes.values():
            assert 0 <= figures["syn_retrieval_ndcg@10"] <= 100 and 0 <= figures["paraphrase_ndcg@10"] <= 100
    mined = json.loads((tmp_path / "hard_negatives" / "config.json").read_text())["hf_encoderize"]["contrastive"]
    assert mined["rows"] == report["arms"]["hard_negatives"]["rows"] <= 48


def test_truncation_is_sentence_transformers_truncate_dim(encoder, tmp_path):
    """The benchmark encodes once and truncates itself; that must equal loading the model with `truncate_dim`."""
    from sentence_transformers import SentenceTransformer

    bench = load_benchmark()
    texts = ["w1 w2 w3", "w4 w5", "w9 w8 w7 w6 w5"]
    full = SentenceTransformer(str(encoder), device="cpu").encode(texts, convert_to_tensor=True)
    cut = SentenceTransformer(str(encoder), device="cpu", truncate_dim=8).encode(texts, convert_to_tensor=True,
                                                                                normalize_embeddings=True)
    assert cut.shape == (3, 8)
    torch.testing.assert_close(bench.truncated(full, 8), cut, atol=1e-5, rtol=0)
