"""Information retrieval (MS MARCO; NQ and MLDR evaluated after MS MARCO training): mean-pooled embeddings trained
with InfoNCE on in-batch negatives, through sentence-transformers' `MultipleNegativesRankingLoss`.

Scored with NDCG@10, plus MRR@10 and recall@100 (relevant means grade above 0). NDCG's gains are binary by default:
EncodEval (the authors' code, whose numbers the paper reports) reads a qrels score of 1 or more as relevant, so a
graded judgment (TREC DL 2019's 0-3 on MS MARCO's test split) counts 1. Graded NDCG (linear gains, the judged score
itself, as pytrec_eval and BEIR compute it) is also reported, as `ndcg@10_graded`, for sets whose judgments are graded;
`--ndcg-gains graded` makes it the headline score (and the binary one `ndcg@10_binary`).

The corpus is the union of the evaluated queries' labelled documents (Appendix B), or, for the authors' IR sets, the
judged documents of both evaluation splits together, as EncodEval's loaders build it (`corpus` from
`loaders.load_splits`); queries with no relevant document are skipped.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation.base import Prepared, Scores, Task, mean_pool, pad, sorted_batches, to_device
from hf_encoderize.evaluation.frozen import IdentityProjection


class _Embedder(torch.nn.Module):
    """What sentence-transformers' losses call: features in, `{"sentence_embedding": (B, H)}` out."""

    def __init__(self, task: Retrieval, model: torch.nn.Module, head: torch.nn.Module):
        super().__init__()
        self.task, self.model, self.head = task, model, head

    def forward(self, features: dict) -> dict:
        hidden = self.task.hidden(self.model, features)
        return {"sentence_embedding": self.task.project(self.head, mean_pool(hidden, features["attention_mask"]))}


NdcgGains = Literal["binary", "graded"]


def ndcg_at_10(ranking: list[str], gains: dict[str, float]) -> float:
    """NDCG@10 (0-100) with linear gains (pytrec_eval's `ndcg_cut_10`): gain / log2(rank + 1), over the ideal order."""
    dcg = sum(gains.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:10]))
    ideal = sorted(gains.values(), reverse=True)[:10]
    idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return 100.0 * dcg / idcg


def rank_metrics(ranking: list[str], grades: dict[str, int], judged: dict[str, int] | None = None) -> dict[str, float]:
    """NDCG@10, MRR@10 and recall@100 (0-100) of one query's `ranking` given its labelled `grades` (binary for the
    authors' sets); with the graded `judged` scores too, `ndcg@10_graded` as well."""
    relevant = {doc for doc, grade in grades.items() if grade > 0}
    reciprocal = next((1.0 / (rank + 1) for rank, doc in enumerate(ranking[:10]) if doc in relevant), 0.0)
    recall = len(relevant & set(ranking[:100])) / len(relevant)
    metrics = {"ndcg@10": ndcg_at_10(ranking, grades), "mrr@10": 100.0 * reciprocal, "recall@100": 100.0 * recall}
    if judged is not None:
        metrics["ndcg@10_graded"] = ndcg_at_10(ranking, judged)
    return metrics


class Retrieval(Task):
    name = "ir"

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]

    def pairs(self, rows: list[dict]) -> list[dict]:
        """(query, first positive document) training pairs."""
        rows = [row for row in rows if any(doc["grade"] > 0 for doc in row["docs"])]  # nothing to learn from
        if not rows:
            raise EncoderizeError(f"{self.spec.name}: no training query has a relevant document; check the data")
        positives = [max(row["docs"], key=lambda d: d["grade"])["text"] for row in rows]
        queries, docs = self._ids([row["query"] for row in rows]), self._ids(positives)
        return [{"query": q, "doc": d} for q, d in zip(queries, docs, strict=True)]

    def eval_set(self, rows: list[dict], corpus_rows: list[dict] | None = None) -> dict:
        """Queries with a relevant document, the corpus (`corpus_rows`, else all their labelled documents), and the
        grades."""
        rows = [row for row in rows if any(doc["grade"] > 0 for doc in row["docs"])]
        if not rows:
            raise EncoderizeError(f"{self.spec.name}: no evaluation query has a relevant document; check the data")
        corpus = {doc["id"]: doc["text"] for doc in corpus_rows or ()}
        for row in rows:
            for doc in row["docs"]:
                corpus.setdefault(doc["id"], doc["text"])
        graded = any(doc.get("judged", 0) > 1 for row in rows for doc in row["docs"])  # judgments beyond 0/1
        return {"query_ids": [row["id"] for row in rows], "queries": self._ids([row["query"] for row in rows]),
                "doc_ids": list(corpus), "docs": self._ids(list(corpus.values())),
                "grades": [{doc["id"]: max(doc["grade"], 0) for doc in row["docs"]} for row in rows],
                "judged": [{doc["id"]: max(doc["judged"], 0) for doc in row["docs"]} for row in rows] if graded
                else None}

    def prepare(self, splits: dict[str, list[dict]]) -> Prepared:
        corpus = splits.get("corpus")
        return Prepared(self.pairs(splits["train"]), self.eval_set(splits["validation"], corpus),
                        self.eval_set(splits["test"], corpus))

    def make_head(self, hidden_size: int) -> torch.nn.Module:
        if self.frozen:  # nothing else would train: a linear map of the pooled embedding, from the identity
            return IdentityProjection(hidden_size)
        return torch.nn.ModuleList()  # no head: the pooled embedding is the output

    @staticmethod
    def project(head: torch.nn.Module | None, pooled: torch.Tensor) -> torch.Tensor:
        return head(pooled) if isinstance(head, IdentityProjection) else pooled

    def length(self, feature: dict) -> int:
        return len(feature["query"]) + len(feature["doc"])

    def collate(self, features: list[dict]) -> dict:
        batch = {}
        for side in ("query", "doc"):
            ids = [f[side] for f in features]
            batch[side] = {"input_ids": pad(ids, self.pad_id), "attention_mask": pad([[1] * len(i) for i in ids], 0)}
        return batch

    def loss(self, model, head, batch: dict) -> torch.Tensor:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

        if getattr(self, "_loss_for", None) != (model, head):  # one loss object per backbone and head
            self._loss_for = (model, head)
            self._loss = MultipleNegativesRankingLoss(_Embedder(self, model, head))  # scale 20, cosine similarity
        return self._loss([batch["query"], batch["doc"]], labels=None)

    @torch.inference_mode()
    def embed(self, backbone, model, ids: list[list[int]], head: torch.nn.Module | None = None) -> torch.Tensor:
        """Unit-normalised mean-pooled embeddings, (N, H), in input order."""
        out = torch.empty(len(ids), backbone.hidden_size, device=backbone.device)
        for indices in sorted_batches([len(i) for i in ids], 64):
            batch = to_device({"input_ids": pad([ids[i] for i in indices], self.pad_id),
                               "attention_mask": pad([[1] * len(ids[i]) for i in indices], 0)}, backbone.device)
            with backbone.autocast():
                out[indices] = self.project(head, mean_pool(self.hidden(model, batch), batch["attention_mask"]))
        return torch.nn.functional.normalize(out, dim=-1)

    @torch.inference_mode()
    def score(self, backbone, model, head, eval_set: dict) -> Scores:
        queries = self.embed(backbone, model, eval_set["queries"], head)
        docs = self.embed(backbone, model, eval_set["docs"], head)
        k = min(100, docs.shape[0])
        per_example = []
        for start in range(0, queries.shape[0], 1024):
            top = (queries[start:start + 1024] @ docs.T).topk(k, dim=-1).indices.tolist()  # (q, k)
            for offset, ranked in enumerate(top):
                index = start + offset
                judged = eval_set.get("judged")
                metrics = rank_metrics([eval_set["doc_ids"][d] for d in ranked], eval_set["grades"][index],
                                       judged[index] if judged else None)
                per_example.append({"id": eval_set["query_ids"][index], **metrics})
        n = len(per_example)
        means = {key: sum(e[key] for e in per_example) / n for key in per_example[0] if key != "id"}
        if self.ndcg_gains == "graded" and "ndcg@10_graded" in means:
            means["ndcg@10_binary"] = means.pop("ndcg@10")
            return Scores(score=means.pop("ndcg@10_graded"), extra=means, per_example=per_example)
        return Scores(score=means.pop("ndcg@10"), extra=means, per_example=per_example)
