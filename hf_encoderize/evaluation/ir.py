"""Information retrieval (MS MARCO; NQ and MLDR evaluated after MS MARCO training): mean-pooled embeddings trained
with InfoNCE on in-batch negatives, through sentence-transformers' `MultipleNegativesRankingLoss`.

Scored with NDCG@10 (graded, linear gains as in pytrec_eval/BEIR), plus MRR@10 and recall@100 (relevant means grade
above 0). The corpus is the union of the evaluated queries' labelled documents (Appendix B), or, for the authors' IR
sets, the judged documents of both evaluation splits together, as EncodEval's loaders build it (`corpus` from
`loaders.load_splits`); queries with no relevant document are skipped.
"""

from __future__ import annotations

import math

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation.base import Prepared, Scores, Task, mean_pool, pad, sorted_batches, to_device


class _Embedder(torch.nn.Module):
    """What sentence-transformers' losses call: features in, `{"sentence_embedding": (B, H)}` out."""

    def __init__(self, task: Retrieval, model: torch.nn.Module):
        super().__init__()
        self.task, self.model = task, model

    def forward(self, features: dict) -> dict:
        hidden = self.task.hidden(self.model, features)
        return {"sentence_embedding": mean_pool(hidden, features["attention_mask"])}


def rank_metrics(ranking: list[str], grades: dict[str, int]) -> dict[str, float]:
    """NDCG@10, MRR@10 and recall@100 (0-100) of one query's `ranking` given its labelled `grades`."""
    dcg = sum(grades.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:10]))
    ideal = sorted(grades.values(), reverse=True)[:10]
    idcg = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    relevant = {doc for doc, grade in grades.items() if grade > 0}
    reciprocal = next((1.0 / (rank + 1) for rank, doc in enumerate(ranking[:10]) if doc in relevant), 0.0)
    recall = len(relevant & set(ranking[:100])) / len(relevant)
    return {"ndcg@10": 100.0 * dcg / idcg, "mrr@10": 100.0 * reciprocal, "recall@100": 100.0 * recall}


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
        return {"query_ids": [row["id"] for row in rows], "queries": self._ids([row["query"] for row in rows]),
                "doc_ids": list(corpus), "docs": self._ids(list(corpus.values())),
                "grades": [{doc["id"]: max(doc["grade"], 0) for doc in row["docs"]} for row in rows]}

    def prepare(self, splits: dict[str, list[dict]]) -> Prepared:
        corpus = splits.get("corpus")
        return Prepared(self.pairs(splits["train"]), self.eval_set(splits["validation"], corpus),
                        self.eval_set(splits["test"], corpus))

    def make_head(self, hidden_size: int) -> torch.nn.Module:
        return torch.nn.ModuleList()  # no head: the pooled embedding is the output

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

        if getattr(self, "_loss_model", None) is not model:  # one loss object per backbone, built on first use
            self._loss_model = model
            self._loss = MultipleNegativesRankingLoss(_Embedder(self, model))  # scale 20, cosine similarity
        return self._loss([batch["query"], batch["doc"]], labels=None)

    @torch.inference_mode()
    def embed(self, backbone, model, ids: list[list[int]]) -> torch.Tensor:
        """Unit-normalised mean-pooled embeddings, (N, H), in input order."""
        out = torch.empty(len(ids), backbone.hidden_size, device=backbone.device)
        for indices in sorted_batches([len(i) for i in ids], 64):
            batch = to_device({"input_ids": pad([ids[i] for i in indices], self.pad_id),
                               "attention_mask": pad([[1] * len(ids[i]) for i in indices], 0)}, backbone.device)
            with backbone.autocast():
                out[indices] = mean_pool(self.hidden(model, batch), batch["attention_mask"])
        return torch.nn.functional.normalize(out, dim=-1)

    @torch.inference_mode()
    def score(self, backbone, model, head, eval_set: dict) -> Scores:
        queries = self.embed(backbone, model, eval_set["queries"])
        docs = self.embed(backbone, model, eval_set["docs"])
        k = min(100, docs.shape[0])
        per_example = []
        for start in range(0, queries.shape[0], 1024):
            top = (queries[start:start + 1024] @ docs.T).topk(k, dim=-1).indices.tolist()  # (q, k)
            for offset, ranked in enumerate(top):
                index = start + offset
                metrics = rank_metrics([eval_set["doc_ids"][d] for d in ranked], eval_set["grades"][index])
                per_example.append({"id": eval_set["query_ids"][index], **metrics})
        n = len(per_example)
        means = {key: sum(e[key] for e in per_example) / n for key in ("ndcg@10", "mrr@10", "recall@100")}
        return Scores(score=means.pop("ndcg@10"), extra=means, per_example=per_example)
