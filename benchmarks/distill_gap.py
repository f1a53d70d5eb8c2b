"""How closely does a distilled student follow its teacher on its training texts, and on held-out text? (issue 53)

    python benchmarks/distill_gap.py --texts SENTENCES.jsonl --student NAME=FOLDER [--student ...]
        [--teacher ST_MODEL] [--limit 400] [--threads 2]

A student of `contrastive --method distill` learns its teacher's embedding of each training text. Whether it learnt
the teacher's map, or only its training texts, shows in two places: the first `--limit` texts of `--texts` (what it
trained on) and the 320 sentences of benchmarks/data/topical_paraphrases.jsonl (held out). Per student, on each:
`agreement`, the mean cosine between the student's and the teacher's embedding of a text; `similarity_correlation`,
the Pearson correlation between the two models' cosine similarities over every pair of texts (1: the student ranks
pairs as the teacher does, whatever its coordinates); `mean_similarity`, the mean of those similarities for each.
On the held-out set, per model: the mean similarity of each query to its paraphrase, to its closest own distractor,
and their difference (`margin`, above 0 when the paraphrase wins on average). The teacher is the baseline: a student
as good as its teacher reads agreement 1 and the teacher's margin.

Measured on the quickstart's stage (issue 53; all-mpnet-base-v2, one edit per sentence, the 3,118 sampled sentences;
the five seeds of benchmarks/results/topical_paraphrases-issue53-quickstart-mpnet.json): docs/contrastive.md, "Where
the student falls short of its teacher".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from topical_paraphrases import held_out, named_folder  # noqa: E402


def embed(model, texts: list[str]) -> torch.Tensor:
    """(texts, width) unit vectors, as the benchmark embeds (the model's default prompt)."""
    return model.encode(texts, convert_to_tensor=True, normalize_embeddings=True, batch_size=32).float().cpu()


def pair_similarities(vectors: torch.Tensor) -> torch.Tensor:
    """The cosine similarity of every pair of distinct rows, upper triangle flattened."""
    upper = torch.triu_indices(len(vectors), len(vectors), 1)
    sims = vectors @ vectors.T
    return sims[upper[0], upper[1]]


def agreement(student: torch.Tensor, teacher: torch.Tensor) -> dict:
    """How the student's embeddings of some texts (in the teacher's order) follow the teacher's; `agreement` is None
    for a model of another width (not a student of this teacher: SimCSE, say), whose pairs still compare."""
    pairs_student, pairs_teacher = pair_similarities(student), pair_similarities(teacher)
    correlation = torch.corrcoef(torch.stack([pairs_student, pairs_teacher]))[0, 1]
    same = student.shape == teacher.shape
    return {"agreement": round((student * teacher).sum(-1).mean().item(), 3) if same else None,
            "similarity_correlation": round(correlation.item(), 3),
            "mean_similarity": {"student": round(pairs_student.mean().item(), 3),
                                "teacher": round(pairs_teacher.mean().item(), 3)}}


def held_out_texts() -> list[str]:
    """The held-out set's sentences: queries, then paraphrases, then each query's three distractors."""
    rows = held_out()
    return [r["query"] for r in rows] + [r["paraphrase"] for r in rows] + [d for r in rows for d in r["distractors"]]


def margins(vectors: torch.Tensor) -> dict:
    """`held_out_texts`' embeddings -> mean similarity of each query to its paraphrase and to its closest distractor."""
    n = len(held_out())
    queries, paraphrases, distractors = vectors[:n], vectors[n:2 * n], vectors[2 * n:].view(n, 3, -1)
    to_paraphrase = (queries * paraphrases).sum(-1)
    to_distractor = torch.einsum("nd,nkd->nk", queries, distractors).max(-1).values
    return {"query_paraphrase": round(to_paraphrase.mean().item(), 3),
            "query_closest_distractor": round(to_distractor.mean().item(), 3),
            "margin": round((to_paraphrase - to_distractor).mean().item(), 3)}


def gap(student, teacher_texts: torch.Tensor, teacher_held: torch.Tensor, texts: list[str]) -> dict:
    """Agreement with the teacher's embeddings (`teacher_texts` of `texts`, the ones trained on; `teacher_held` of
    `held_out_texts()`) on both, and the held-out margins of student and teacher."""
    student_held = embed(student, held_out_texts())
    return {"training_texts": agreement(embed(student, texts), teacher_texts),
            "held_out": agreement(student_held, teacher_held),
            "margins": {"student": margins(student_held), "teacher": margins(teacher_held)}}


def main() -> None:
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.pipeline import teachers
    from hf_encoderize.pipeline.quickstart import QuickstartConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", required=True, help="the students' training texts (JSONL with a `text` column)")
    parser.add_argument("--student", action="append", required=True, metavar="NAME=FOLDER", type=named_folder,
                        help="a distilled sentence-transformers folder (or any, for the pair figures); repeatable")
    parser.add_argument("--teacher", help="the teacher (default: the quickstart's, as setup.sh installs it)")
    parser.add_argument("--limit", type=int, default=400, help="training texts compared (the first N)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = [json.loads(line)["text"] for line in Path(args.texts).read_text().splitlines() if line.strip()]
    try:
        teacher_path = args.teacher or str(teachers.packaged(QuickstartConfig.teacher))
    except EncoderizeError as err:
        sys.exit(f"error: {err}")
    teacher = SentenceTransformer(teacher_path, device="cpu")
    compared = texts[:args.limit]
    teacher_texts, teacher_held = embed(teacher, compared), embed(teacher, held_out_texts())  # once, for every student
    results = {name: gap(SentenceTransformer(folder, device="cpu"), teacher_texts, teacher_held, compared)
               for name, folder in args.student}
    print(json.dumps({"texts": args.texts, "compared": len(compared), "held_out": len(held_out_texts()),
                      "teacher": teacher_path, "students": results}, indent=1))


if __name__ == "__main__":
    main()
