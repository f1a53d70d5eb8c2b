"""benchmarks/distill_gap.py's figures mean what its docstring says: agreement is the student-teacher cosine, the
pair correlation ignores coordinates, and the margin is paraphrase minus closest distractor (issue 53)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from distill_gap import agreement, held_out_texts, margins  # noqa: E402
from topical_paraphrases import held_out  # noqa: E402


def _unit(rows: int, width: int, seed: int) -> torch.Tensor:
    draws = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(draws, dim=-1)


def test_agreement_is_the_cosine_and_the_correlation_ignores_coordinates():
    teacher = _unit(40, 16, 0)
    same = agreement(teacher, teacher)
    assert same["agreement"] == 1.0 and same["similarity_correlation"] == 1.0
    rotation, _ = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(1)))
    rotated = agreement(teacher @ rotation, teacher)  # other coordinates, the same geometry
    assert rotated["agreement"] < 0.5 and rotated["similarity_correlation"] == 1.0
    unrelated = agreement(_unit(40, 16, 2), teacher)
    assert abs(unrelated["similarity_correlation"]) < 0.3
    narrower = agreement(_unit(40, 8, 3), teacher)  # not this teacher's student: no cosine, the pairs still compare
    assert narrower["agreement"] is None and narrower["similarity_correlation"] is not None
    assert same["mean_similarity"]["student"] == same["mean_similarity"]["teacher"]


def test_the_margin_is_paraphrase_minus_the_closest_distractor():
    n = len(held_out())
    assert len(held_out_texts()) == 5 * n
    queries = _unit(n, 8 * n, 4)
    wins = torch.cat([queries, queries, torch.zeros(3 * n, 8 * n)])  # paraphrase = query, distractors at 0
    assert margins(wins) == {"query_paraphrase": 1.0, "query_closest_distractor": 0.0, "margin": 1.0}
    loses = torch.cat([queries, torch.zeros(n, 8 * n), queries.repeat_interleave(3, 0)])  # every distractor = query
    assert margins(loses)["margin"] == -1.0
