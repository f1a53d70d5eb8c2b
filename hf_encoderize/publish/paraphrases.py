"""Held-out paraphrase triples, and the check that an embedding model ranks each paraphrase above the unrelated text.

Design choices:
- Everyday English, unlike any training corpus here (the quickstart's, the tests' random words): the check asks
  whether the model learnt meaning in general, not whether it memorised its data. Each triple is (anchor, paraphrase,
  unrelated); the paraphrase shares few words with the anchor, so word overlap alone cannot pass it.
- Four triples are twelve sentences, one Similarity request of the Space (its limit is 12 per request), which the
  browser test in tests/test_space_browser.py types in and reads back from the rendered heatmap.
- `ranks_paraphrases_first` returns the two cosines per triple rather than a verdict, so a caller can print them (the
  quickstart's last line) as well as test `cos_paraphrase > cos_unrelated`. It takes any sentence-transformers model;
  nothing here imports gradio.
"""

from __future__ import annotations

from typing import NamedTuple

HELD_OUT_TRIPLES: tuple[tuple[str, str, str], ...] = (
    ("A cat sits on the mat.", "A kitten rests on a rug.", "Stock markets fell sharply today."),
    ("The train to London was an hour late.", "Our London train arrived sixty minutes behind schedule.",
     "She planted tomatoes in the back garden."),
    ("He is cooking pasta for dinner tonight.", "Tonight he is making spaghetti for supper.",
     "The new phone has a bigger battery."),
    ("It rained all weekend, so we stayed indoors.", "We stayed inside because of the weekend rain.",
     "The museum opens a dinosaur exhibition in May."),
)
"""(anchor, paraphrase, unrelated) sentences held out from every training corpus of this project."""

SPACE_EXAMPLE: tuple[str, str, str, str] = (
    "A cat sits on the mat.", "A kitten rests on a rug.", "The cat chased a mouse across the garden.",
    "Stock markets fell sharply today.")
"""The Space's first Similarity example (space/app.py's EXAMPLE_SENTENCES): the first triple's anchor and paraphrase,
a sentence on the anchor's topic that means something else (the same cat, another action: the distractor
benchmarks/topical_paraphrases.py is made of, here without shared words), and the unrelated sentence. A model that
embeds meaning puts the paraphrase above the same-topic sentence; the MLM encoder alone does not (0.63 against 0.87)."""


class TripleScore(NamedTuple):
    """One triple's result: the anchor and its cosine similarity to the paraphrase and to the unrelated sentence."""

    anchor: str
    cos_paraphrase: float
    cos_unrelated: float

    @property
    def ranked_first(self) -> bool:
        """Whether the paraphrase scores above the unrelated sentence."""
        return self.cos_paraphrase > self.cos_unrelated


def ranks_paraphrases_first(embedder, triples: tuple[tuple[str, str, str], ...] = HELD_OUT_TRIPLES, *,
                            truncate_dim: int | None = None) -> list[TripleScore]:
    """(anchor, cos_paraphrase, cos_unrelated) for each (anchor, paraphrase, unrelated) triple, by `embedder`'s
    embeddings (a `SentenceTransformer`; `truncate_dim` cuts them to a Matryoshka size first). The model ranks the
    paraphrases first when `all(score.ranked_first for score in result)`.
    """
    import torch

    sentences = [sentence for triple in triples for sentence in triple]
    vectors = embedder.encode(sentences, convert_to_tensor=True, truncate_dim=truncate_dim)  # (3 * triples, dim)
    unit = torch.nn.functional.normalize(vectors.float(), dim=-1).reshape(len(triples), 3, -1)
    cosines = torch.einsum("td,tkd->tk", unit[:, 0], unit[:, 1:])  # (triples, 2): paraphrase, unrelated
    return [TripleScore(anchor, *row) for (anchor, _, _), row in zip(triples, cosines.tolist(), strict=True)]


def space_example_cosines(embedder) -> dict[str, float]:
    """Cosine of SPACE_EXAMPLE's anchor to its paraphrase, its same-topic sentence and its unrelated sentence, by
    `embedder`'s embeddings (a `SentenceTransformer`)."""
    import torch

    vectors = embedder.encode(list(SPACE_EXAMPLE), convert_to_tensor=True).float()
    vectors = torch.nn.functional.normalize(vectors, dim=-1)
    paraphrase, same_topic, unrelated = (vectors[1:] @ vectors[0]).tolist()
    return {"paraphrase": paraphrase, "same_topic": same_topic, "unrelated": unrelated}
