"""Converters from each evaluation dataset's Hub row schema to the canonical row its task family reads (`loaders`'
registry names one per dataset).

Design choices:
- Plain functions of one row (`None`: the row is skipped), tested on fixture files that have exactly the Hub schema
  (tests/fixtures/eval/ and the authors' schemas built in tests/test_eval_loaders.py).
- The authors' templates are kept as EncodEval writes them ("Premise: ...\nHypothesis: ...", "Query: ", "Document: ").
- IR: the corpus is the judged documents of the evaluation queries (Appendix B: "we restrict the corpus to labeled
  documents only"); a document is relevant when its qrels score is at least 1 (EncodEval: `if example["score"] >= 1`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable


def sc(first: str, second: str | None) -> Callable[[dict], dict | None]:
    def convert(row: dict) -> dict | None:
        if row["label"] < 0:  # GLUE test splits carry label -1
            return None
        pair = row[second] if second else None
        return {"id": str(row["idx"]), "text": row[first], "text_pair": pair, "label": int(row["label"])}

    return convert


def sc_template(first: str, second: str, template: str) -> Callable[[dict], dict | None]:
    """EncodEval's SC inputs (encodeval/datasets.py mnli_m, qqp): both sentences in one text, e.g.
    "Premise: {premise}\nHypothesis: {hypothesis}", rather than a tokenizer pair."""
    def convert(row: dict) -> dict | None:
        if row["label"] < 0:
            return None
        text = template.format(row[first], row[second])
        return {"id": str(row["idx"]), "text": text, "text_pair": None, "label": int(row["label"])}

    return convert


def tc(tag_column: str, id_column: str | None, token_column: str = "tokens") -> Callable[[dict], dict | None]:
    def convert(row: dict) -> dict | None:
        tokens = row[token_column]
        if not tokens:
            return None
        row_id = str(row[id_column]) if id_column else hashlib.sha1(" ".join(tokens).encode()).hexdigest()[:12]
        return {"id": row_id, "tokens": list(tokens), "tags": [int(t) for t in row[tag_column]]}

    return convert


def squad(row: dict) -> dict:
    answers = row["answers"]
    row_id = row.get("id") or hashlib.sha1((row["question"] + row["context"]).encode()).hexdigest()[:16]
    return {"id": str(row_id), "question": row["question"], "context": row["context"],
            "answers": {"text": list(answers["text"]), "answer_start": [int(s) for s in answers["answer_start"]]}}


def record(row: dict) -> dict:
    """ReCoRD as extractive QA: the cloze query is the question, each answer entity a gold answer (its text scores
    F1/EM; its first occurrence in the passage is the training span).

    Spans are found in the passage text itself rather than taken from `entity_spans`, whose offsets refer to the
    passage before its `@highlight` markers were rewritten."""
    context = row["passage"]
    texts, starts = [], []
    for answer in dict.fromkeys(row["answers"]):
        start = context.find(answer)
        if start >= 0:
            texts.append(answer)
            starts.append(start)
    return {"id": f"{row['idx']['passage']}-{row['idx']['query']}", "question": row["query"], "context": context,
            "answers": {"text": texts, "answer_start": starts}}


def record_authors(row: dict) -> dict:
    """hgissbkh/record: EncodEval's `record()` renames nothing and its QA code reads SQuAD's columns (context,
    question, answers), so the copy is read as SQuAD; rows in SuperGLUE's schema (passage, query) are also taken."""
    return record(row) if "passage" in row else squad(row)


def doc_id(text: str) -> str:
    # MS MARCO v1.1 passages carry no id; the same passage under two queries is one corpus document.
    return "p" + hashlib.sha1(text.encode()).hexdigest()[:16]


def msmarco(row: dict) -> dict | None:
    passages = row["passages"]
    docs = [{"id": doc_id(text), "text": text, "grade": int(selected)}
            for text, selected in zip(passages["passage_text"], passages["is_selected"], strict=True)]
    return {"id": str(row["query_id"]), "query": row["query"], "docs": docs}


def msmarco_pairs(row: dict) -> dict:
    """hgissbkh/msmarco-pairs (query, positive) with EncodEval's prefixes (datasets.py `msmarco_pairs`)."""
    text = f"Document: {row['positive']}"
    return {"id": doc_id(row["query"]), "query": f"Query: {row['query']}",
            "docs": [{"id": doc_id(text), "text": text, "grade": 1}]}


def tevatron(row: dict) -> dict | None:
    """Tevatron-style rows (NQ, MLDR): positive and negative passages with document ids."""
    def text(passage: dict) -> str:
        return f"{passage['title']} {passage['text']}".strip() if passage.get("title") else passage["text"]

    docs = [{"id": str(p["docid"]), "text": text(p), "grade": 1} for p in row["positive_passages"]]
    docs += [{"id": str(p["docid"]), "text": text(p), "grade": 0} for p in row["negative_passages"]]
    return {"id": str(row["query_id"]), "query": row["query"], "docs": docs}


def judged_rows(queries: dict, corpus: dict, qrels: list[tuple[str, str, int]]) -> list[dict]:
    """One canonical row per judged query; grade 1 when the qrels score is at least 1 (EncodEval's binarisation, the
    paper profile's NDCG), else 0; `judged` keeps the qrels score for graded NDCG (`ir.rank_metrics`)."""
    rows: dict[str, dict] = {}
    for query_id, doc_id, score in qrels:
        row = rows.setdefault(query_id, {"id": query_id, "query": queries[query_id], "docs": []})
        row["docs"].append({"id": doc_id, "text": corpus[doc_id], "grade": int(score >= 1), "judged": int(score)})
    return list(rows.values())


def halve_queries(qrels: list[tuple], fraction: float, seed: int = 42) -> tuple[list[tuple], list[tuple]]:
    """Split judged pairs by query: `fraction` of the (sorted) query ids, drawn with a fixed seed, go to validation.
    EncodEval's `nq()` draws `random.sample(query_ids, round(0.5 * n))` without a seed of its own."""
    ids = sorted({q for q, *_ in qrels})
    held = set(random.Random(seed).sample(ids, round(fraction * len(ids))))
    return [r for r in qrels if r[0] in held], [r for r in qrels if r[0] not in held]


def beir(document: Callable[[dict], str], qrel_splits: tuple[str, ...], fraction: float | None = None):
    """EncodEval's `msmarco()`/`nq()`: BeIR queries, corpus and qrels; the corpus keeps the judged documents only."""
    def reader(read) -> tuple[list[dict], list[dict], list[dict]]:
        qrels = {split: [(str(r["query-id"]), str(r["corpus-id"]), int(r["score"])) for r in read(f"qrels_{split}")]
                 for split in qrel_splits}
        if fraction is not None:  # NQ: one judged split, halved into validation and test
            qrels = dict(zip(("validation", "test"), halve_queries(qrels["test"], fraction), strict=True))
        wanted_q = {q for pairs in qrels.values() for q, _, _ in pairs}
        wanted_d = {d for pairs in qrels.values() for _, d, _ in pairs}
        queries = {str(r["_id"]): f"Query: {r['text']}" for r in read("queries") if str(r["_id"]) in wanted_q}
        corpus = {str(r["_id"]): document(r) for r in read("corpus") if str(r["_id"]) in wanted_d}
        rows = {split: judged_rows(queries, corpus, pairs) for split, pairs in qrels.items()}
        return rows["validation"], rows["test"], [{"id": k, "text": v} for k, v in corpus.items()]

    return reader


def mldr_authors(read) -> tuple[list[dict], list[dict], list[dict]]:
    """EncodEval's `mldr_en()`: hgissbkh/mldr-en dev and test; the corpus is the queries' positive passages only."""
    qrels, queries = {}, {}
    for split, part in (("validation", "dev"), ("test", "test")):
        rows = list(read(part))
        queries.update({str(r["query_id"]): f"Query: {r['query']}" for r in rows})
        qrels[split] = [(str(r["query_id"]), str(p["docid"]), 1) for r in rows for p in r["positive_passages"]]
    wanted = {d for pairs in qrels.values() for _, d, _ in pairs}
    corpus = {str(r["docid"]): f"Document: {r['text']}" for r in read("corpus") if str(r["docid"]) in wanted}
    rows = {split: judged_rows(queries, corpus, pairs) for split, pairs in qrels.items()}
    return rows["validation"], rows["test"], [{"id": k, "text": v} for k, v in corpus.items()]
