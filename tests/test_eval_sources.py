"""The default dataset sources are the authors' (EncodEval, branch MLM_vs_CLM, encodeval/datasets.py). The Hub is
offline here, so each source's column layout is rebuilt in a temporary --data-dir and read through the real loaders.
"""

import json
import shutil
from pathlib import Path

import pytest

from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.evaluation.loaders import DATASETS, REAL, dataset_spec, load_splits

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def _write(folder: Path, part: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def _conll(words: list[str], ner: list[int]) -> dict:  # hgissbkh/conll2003-en: words, ner (renamed by EncodEval)
    return {"words": words, "ner": ner}


def _beir(folder: Path, queries: dict, corpus: dict, qrels: dict) -> None:
    _write(folder, "queries", [{"_id": k, "title": "", "text": v} for k, v in queries.items()])
    _write(folder, "corpus", [{"_id": k, "title": t, "text": x} for k, (t, x) in corpus.items()])
    for split, rows in qrels.items():
        _write(folder, f"qrels_{split}", [{"query-id": q, "corpus-id": d, "score": s} for q, d, s in rows])


@pytest.fixture(scope="module")
def authors_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("authors")
    for name in ("sst2", "mnli", "qqp", "squad", "squad_v2"):  # same repos (nyu-mll/glue, rajpurkar/*) as before
        shutil.copytree(FIXTURES / name, root / name)
    train = [_conll(["EU", "rejects", "German", "call"], [3, 0, 7, 0]) for _ in range(6)]
    _write(root / "conll2003", "train", train)
    _write(root / "conll2003", "validation", [_conll(["Peter", "Blackburn"], [1, 2])])
    _write(root / "conll2003", "test", [_conll(["SOCCER", "-", "JAPAN", "WIN"], [0, 0, 5, 0]),
                                        _conll(["Nadim", "Ladki"], [1, 2])])
    onto = {"tokens": ["Kim", "went", "to", "Paris"], "tags": [4, 0, 0, 7]}
    for split, n in (("train", 5), ("validation", 1), ("test", 2)):
        _write(root / "ontonotes5", split, [onto] * n)
    for split, n in (("train", 5), ("validation", 1), ("test", 3)):  # hgissbkh/uner_en keeps universal_ner's columns
        _write(root / "uner", split, [{"idx": f"{split}-{i}", "text": "Google in Paris", "tokens": ["Google", "in",
                                       "Paris"], "ner_tags": [3, 0, 5], "annotator": "a"} for i in range(n)])
    record = {"context": "Kabul is the capital of Afghanistan.", "question": "@placeholder is in Asia.",
              "answers": {"text": ["Afghanistan"], "answer_start": [24]}}
    _write(root / "record", "train", [record] * 20)
    _write(root / "record", "validation", [record])
    _write(root / "msmarco-pairs", "train", [{"query": f"question {i}", "positive": f"answer {i}"} for i in range(8)])
    _beir(root / "msmarco", {"1": "speed of light", "2": "capital of france", "3": "tallest tree"},
          {"d1": ("", "Light travels at 299,792 km/s."), "d2": ("", "Paris is the capital."),
           "d3": ("", "Redwoods are tall."), "d4": ("", "Sound is slower."), "d9": ("", "never judged")},
          {"validation": [("1", "d1", 1), ("2", "d2", 1)], "test": [("3", "d3", 2), ("3", "d4", 0)]})
    _beir(root / "nq", {str(i): f"who wrote song {i}" for i in range(10)},
          {f"n{i}": (f"Song {i}", f"Song {i} was written by X{i}.") for i in range(12)},
          {"test": [(str(i), f"n{i}", 1) for i in range(10)]})
    dev = [{"query_id": f"q{i}", "query": f"long question {i}", "positive_passages": [{"docid": f"m{i}"}],
            "negative_passages": [{"docid": "m-neg"}]} for i in range(2)]
    _write(root / "mldr", "dev", dev)
    _write(root / "mldr", "test", [{**dev[0], "query_id": "q7", "positive_passages": [{"docid": "m7"}]}])
    _write(root / "mldr", "corpus", [{"docid": d, "text": f"doc {d}"} for d in ("m0", "m1", "m7", "m-neg")])
    return root


def test_the_defaults_are_the_authors_hub_copies():
    sources = {spec.name: spec.source for spec in REAL}
    for repo in ("hgissbkh/conll2003-en", "hgissbkh/ontonotes5", "hgissbkh/uner_en", "rajpurkar/squad",
                 "rajpurkar/squad_v2", "hgissbkh/record", "BeIR/msmarco", "BeIR/msmarco-qrels", "BeIR/nq",
                 "BeIR/nq-qrels", "hgissbkh/mldr-en"):
        assert any(repo in source.split() for source in sources.values()), repo
    assert sources["sst2"].startswith("nyu-mll/glue") and dataset_spec("msmarco-pairs").hub == "hgissbkh/msmarco-pairs"
    assert DATASETS["msmarco"].train_from == "msmarco-pairs"
    assert dataset_spec("conll2003", "original").hub == "eriktks/conll2003"  # the upstream repos stay selectable
    assert dataset_spec("nq", "original").hub == "Tevatron/wikipedia-nq"
    assert EvalConfig().dataset_source == "authors"
    assert EvalConfig(dataset_source="original").protocol()["dataset_source"] == "original"


def test_every_dataset_loads_from_the_authors_schemas(authors_dir):
    for spec in REAL:
        splits = load_splits(spec, data_dir=str(authors_dir))
        assert all(splits[name] for name in ("train", "validation", "test")), spec.name


def test_glue_pairs_use_the_authors_templates(authors_dir):
    mnli = load_splits(DATASETS["mnli"], data_dir=str(authors_dir))["test"][1]
    assert mnli["text"].startswith("Premise: ") and "\nHypothesis: The site has no list of winners." in mnli["text"]
    assert mnli["text_pair"] is None
    qqp = load_splits(DATASETS["qqp"], data_dir=str(authors_dir))["test"][1]
    assert qqp["text"] == "Question 1: How can I lose weight fast?\nQuestion 2: What is the fastest way to lose weight?"


@pytest.mark.parametrize("name", ["conll2003", "ontonotes5", "uner"])
def test_tc_trains_on_train_chooses_on_validation_and_is_scored_on_test(authors_dir, name):
    """Appendix B's "report on validation" rule is for sets whose test split is not public (SC, QA); TC's is."""
    folder = authors_dir / name
    lines = {split: len((folder / f"{split}.jsonl").read_text().splitlines()) for split in ("train", "validation",
                                                                                            "test")}
    splits = load_splits(DATASETS[name], data_dir=str(authors_dir))
    assert {split: len(rows) for split, rows in splits.items()} == lines  # nothing of train held out
    assert DATASETS[name].test_split == "test" and DATASETS[name].validation_split == "validation"
    assert dataset_spec(name, "original").test_split == "test"


def test_conll_words_and_ner_columns_map_to_tokens_and_tags(authors_dir):
    test = load_splits(DATASETS["conll2003"], data_dir=str(authors_dir))["test"]
    assert test[0]["tokens"] == ["SOCCER", "-", "JAPAN", "WIN"]
    assert [DATASETS["conll2003"].label_names[t] for t in test[1]["tags"]] == ["B-PER", "I-PER"]


def test_record_copy_reads_as_squad_columns(authors_dir):
    row = load_splits(DATASETS["record"], data_dir=str(authors_dir))["test"][0]
    start = row["answers"]["answer_start"][0]
    assert row["context"][start:start + len("Afghanistan")] == "Afghanistan" and row["id"]


def test_msmarco_trains_on_pairs_and_is_scored_on_beir_judged_documents(authors_dir):
    splits = load_splits(DATASETS["msmarco"], data_dir=str(authors_dir))
    assert len(splits["train"]) == 8 and splits["train"][0]["query"] == "Query: question 0"
    assert splits["train"][0]["docs"][0]["text"] == "Document: answer 0"
    assert [r["id"] for r in splits["validation"]] == ["1", "2"]  # BeIR dev qrels
    assert [r["id"] for r in splits["test"]] == ["3"]  # BeIR test qrels (TREC DL 2019)
    assert [d["grade"] for d in splits["test"][0]["docs"]] == [1, 0]  # relevant when score >= 1 (EncodEval)
    corpus = {d["id"]: d["text"] for d in splits["corpus"]}
    assert set(corpus) == {"d1", "d2", "d3", "d4"}  # judged documents of both splits; d9 is never judged
    assert corpus["d1"] == "Document: Light travels at 299,792 km/s."
    assert splits["test"][0] and splits["validation"][0]["query"] == "Query: speed of light"


def test_nq_learning_rate_is_chosen_on_half_of_nq_itself(authors_dir):
    splits = load_splits(DATASETS["nq"], data_dir=str(authors_dir))
    validation, test = {r["id"] for r in splits["validation"]}, {r["id"] for r in splits["test"]}
    assert len(validation) == len(test) == 5 and not validation & test and validation | test == set(map(str, range(10)))
    assert load_splits(DATASETS["nq"], data_dir=str(authors_dir))["validation"] == splits["validation"]  # fixed seed
    assert splits["train"] == load_splits(DATASETS["msmarco"], data_dir=str(authors_dir))["train"]  # MS MARCO pairs
    assert {d["id"] for d in splits["corpus"]} == {f"n{i}" for i in range(10)}  # n10, n11 unjudged
    assert splits["test"][0]["docs"][0]["text"].startswith("Document: Song ")  # "Document: {title}. {text}"


def test_mldr_corpus_holds_the_positive_passages_only(authors_dir):
    splits = load_splits(DATASETS["mldr"], data_dir=str(authors_dir))
    assert [r["id"] for r in splits["validation"]] == ["q0", "q1"] and [r["id"] for r in splits["test"]] == ["q7"]
    assert {d["id"] for d in splits["corpus"]} == {"m0", "m1", "m7"}  # EncodEval's mldr_en() skips negatives


def test_retrieval_scores_against_the_shared_corpus(authors_dir, tokenizer):
    from hf_encoderize.evaluation.ir import Retrieval

    splits = load_splits(DATASETS["msmarco"], data_dir=str(authors_dir))
    prepared = Retrieval(DATASETS["msmarco"], tokenizer, 32).prepare(splits)
    assert sorted(prepared.validation["doc_ids"]) == sorted(prepared.test["doc_ids"]) == ["d1", "d2", "d3", "d4"]


def test_the_grid_runs_the_authors_ir_sets_from_one_ms_marco_run(authors_dir, decoder_dir, tmp_path):
    """MS MARCO pairs train once per (lr, seed); MS MARCO, NQ and MLDR are scored from that run."""
    from hf_encoderize.evaluation import evaluate
    from hf_encoderize.model.loading import LoadConfig

    cfg = EvalConfig(profile="quick", datasets="msmarco,nq,mldr", lrs="1e-4", seeds="0", max_steps=2, batch_size=4,
                     max_length=32, data_dir=str(authors_dir), output_dir=str(tmp_path), device="cpu")
    lines = []
    summary = evaluate(LoadConfig(str(decoder_dir)), cfg, progress=lines.append)
    assert [r["dataset"] for r in summary["results"]] == ["msmarco", "nq", "mldr"]
    assert sum("one run scored on msmarco/nq/mldr" in line for line in lines) == 1
    record = json.loads((tmp_path / "tiny-llama" / "ir" / "nq" / "lr0.0001_sd0" / "results.json").read_text())
    assert len(record["per_example"]["validation"]) == len(record["per_example"]["test"]) == 5
    assert record["protocol"]["dataset_source"] == "authors" and record["protocol"]["optimizer"]["eps"] == 1e-5
