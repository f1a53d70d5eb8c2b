"""The twelve real dataset loaders, read from local fixture files that have exactly each Hub dataset's schema: the
upstream repos' (`--dataset-source original`, tests/fixtures/eval/) and the authors' EncodEval copies (the default,
built below in their column layout)."""

import json
from pathlib import Path

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation import synthetic
from hf_encoderize.evaluation.loaders import REAL, dataset_spec, load_splits, read_split, split_train

FIXTURES = str(Path(__file__).parent / "fixtures" / "eval")


def original(name: str):
    return dataset_spec(name, "original")


def _lines(name: str, split: str) -> list[dict]:
    return [json.loads(line) for line in (Path(FIXTURES) / name / f"{split}.jsonl").read_text().splitlines()]


def test_every_real_dataset_has_a_fixture_in_its_hub_schema():
    assert [spec.name for spec in REAL] == ["sst2", "mnli", "qqp", "conll2003", "ontonotes5", "uner", "squad",
                                           "squad_v2", "record", "msmarco", "nq", "mldr"]
    for spec in REAL:
        splits = load_splits(original(spec.name), data_dir=FIXTURES)
        assert all(splits[name] for name in ("train", "validation", "test")), spec.name


def test_splits_are_train_95_5_and_the_original_validation_is_the_test_set():
    splits = load_splits(original("sst2"), data_dir=FIXTURES)
    raw_train, raw_validation = _lines("sst2", "train"), _lines("sst2", "validation")
    assert (len(splits["train"]), len(splits["validation"])) == (19, 1)  # 20 rows: 95/5
    assert {r["id"] for r in splits["train"]} | {r["id"] for r in splits["validation"]} == {
        str(r["idx"]) for r in raw_train}
    assert [r["text"] for r in splits["test"]] == [r["sentence"] for r in raw_validation]
    assert load_splits(original("sst2"), data_dir=FIXTURES) == splits  # the same split for every run
    train, validation = split_train(list(range(1000)))
    assert len(validation) == 50 and not set(train) & set(validation)


@pytest.mark.parametrize("n", [20, 1000, 1001])
def test_the_95_5_split_has_encodeval_train_test_split_indices(n):
    """EncodEval (datasets.py): `dataset["train"].train_test_split(train_size=0.95, seed=42)`."""
    import datasets

    theirs = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(train_size=0.95, seed=42)
    train, validation = split_train(list(range(n)))
    assert (train, validation) == (sorted(theirs["train"]["i"]), sorted(theirs["test"]["i"]))


def test_glue_rows_become_single_sentences_and_pairs():
    sst2 = load_splits(original("sst2"), data_dir=FIXTURES)["test"][0]
    assert sst2 == {"id": "0", "text": "it 's a charming and often affecting journey . ", "text_pair": None, "label": 1}
    mnli = load_splits(original("mnli"), data_dir=FIXTURES)["test"]
    assert mnli[1]["text_pair"] == "The site has no list of winners." and mnli[1]["label"] == 2
    assert original("mnli").label_names[2] == "contradiction" and original("mnli").test_split == "validation_matched"
    qqp = load_splits(original("qqp"), data_dir=FIXTURES)["test"][1]
    assert (qqp["text"], qqp["text_pair"], qqp["label"]) == (
        "How can I lose weight fast?", "What is the fastest way to lose weight?", 1)
    convert = original("sst2").convert
    assert convert({"sentence": "hidden test label", "label": -1, "idx": 3}) is None  # GLUE test splits


def _entities(spec_name: str, split: str = "test") -> list[list[str]]:
    spec = original(spec_name)
    return [[spec.label_names[t] for t in row["tags"]] for row in load_splits(spec, data_dir=FIXTURES)[split]]


def test_ner_tags_map_to_the_hub_label_names():
    assert _entities("conll2003")[1] == ["B-LOC", "O"]  # LONDON 1996-08-30
    conll = load_splits(original("conll2003"), data_dir=FIXTURES)["test"][0]
    assert conll["tokens"][2] == "LEICESTERSHIRE" and _entities("conll2003")[0][2] == "B-ORG"
    assert _entities("ontonotes5")[0] == ["O", "B-PERSON", "O", "B-GPE", "O"]
    assert _entities("uner")[0] == ["B-ORG", "O", "O", "O", "O", "B-LOC", "O"]
    assert load_splits(original("uner"), data_dir=FIXTURES)["test"][0]["id"] == "weblog-0100"


@pytest.mark.parametrize("name", ["squad", "squad_v2", "record"])
def test_qa_answer_spans_point_into_the_context(name):
    for split in ("train", "test"):
        for row in load_splits(original(name), data_dir=FIXTURES)[split]:
            for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True):
                assert row["context"][start:start + len(text)] == text


def test_squad_v2_keeps_unanswerable_questions_and_record_is_a_cloze():
    v2 = load_splits(original("squad_v2"), data_dir=FIXTURES)["test"]
    assert v2[1]["answers"] == {"text": [], "answer_start": []}
    record = load_splits(original("record"), data_dir=FIXTURES)["test"][0]
    assert "@placeholder" in record["question"] and record["answers"]["text"] == ["Afghanistan"]
    assert record["id"] == "500-0"


def test_msmarco_queries_carry_their_labelled_passages():
    test = load_splits(original("msmarco"), data_dir=FIXTURES)["test"]
    assert test[0]["query"] == "what is the speed of light"
    assert [d["grade"] for d in test[0]["docs"]] == [1, 0, 0]
    train = load_splits(original("msmarco"), data_dir=FIXTURES)["train"]
    corporation = [d["id"] for row in train + test for d in row["docs"] if d["text"].startswith("A corporation")]
    assert len(set(corporation)) == 1  # one passage under several queries is one corpus document
    assert "labelled documents" in original("msmarco").note


def test_nq_and_mldr_are_evaluated_after_training_on_msmarco():
    msmarco = load_splits(original("msmarco"), data_dir=FIXTURES)
    nq = load_splits(original("nq"), data_dir=FIXTURES)
    assert nq["train"] == msmarco["train"]
    # NQ's learning rate is chosen on NQ: its two dev queries are halved into validation and test
    assert len(nq["validation"]) == len(nq["test"]) == 1 and nq["validation"][0]["id"] != nq["test"][0]["id"]
    nq_rows = nq["validation"] + nq["test"]
    assert next(r for r in nq_rows if r["docs"][0]["id"] == "11828866")["docs"][0] == {"id": "11828866", "grade": 1,
                                        "text": "Does He Love You Does He Love You is a song recorded by Reba McEntire "
                                                "and Linda Davis."}
    mldr = load_splits(original("mldr"), data_dir=FIXTURES)
    assert mldr["train"] == msmarco["train"]
    assert [r["id"] for r in mldr["validation"]] == ["q-en-1", "q-en-2"]  # MLDR dev chooses the learning rate
    assert [r["id"] for r in mldr["test"]] == ["q-en-3", "q-en-4"]
    assert original("mldr").max_length == 2048


def test_mldr_reads_the_raw_files_its_loading_script_reads(tmp_path, monkeypatch):
    """Shitao/MLDR ships MLDR.py, which `datasets` >= 4 will not run; we read mldr-v1.0-en/<split>.jsonl.gz with the
    json builder. The hf:// path is redirected to gzipped copies of the fixtures, so the real builder and converter
    run (no network)."""
    import gzip

    import datasets

    folder = tmp_path / "mldr-v1.0-en"
    folder.mkdir()
    for split in ("dev", "test"):
        raw = (Path(FIXTURES) / "mldr" / f"{split}.jsonl").read_bytes()
        (folder / f"{split}.jsonl.gz").write_bytes(gzip.compress(raw))
    real, seen = datasets.load_dataset, []

    def local(path, *args, data_files=None, **kwargs):
        seen.append((path, data_files))
        return real(path, *args, data_files=data_files.replace("hf://datasets/Shitao/MLDR@main", str(tmp_path)),
                    **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", local)
    rows = read_split(original("mldr"), "test", None)
    assert seen == [("json", "hf://datasets/Shitao/MLDR@main/mldr-v1.0-en/test.jsonl.gz")]
    assert rows == read_split(original("mldr"), "test", FIXTURES)


def test_a_parquet_local_copy_reads_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("train", "validation"):
        (tmp_path / "squad").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(_lines("squad", split)), tmp_path / "squad" / f"{split}.parquet")
    assert load_splits(original("squad"), data_dir=str(tmp_path)) == load_splits(original("squad"), data_dir=FIXTURES)


def test_a_missing_local_split_names_the_file_it_expected(tmp_path):
    (tmp_path / "sst2").mkdir()
    with pytest.raises(EncoderizeError, match=r"sst2/train\.parquet"):
        read_split(original("sst2"), "train", str(tmp_path))


def test_offline_hub_dataset_error_says_how_to_use_a_local_copy(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(EncoderizeError) as info:
        load_splits(original("sst2"))
    message = str(info.value)
    assert "needs the Hugging Face Hub" in message and "--data-dir" in message and "\n" not in message


# ----------------------------------------------------------------------------------------------- synthetic sets


def test_synthetic_test_words_never_appear_in_training():
    train = synthetic.sentiment(200, seed=0, test=False)
    test = synthetic.sentiment(200, seed=0, test=True)
    adjectives = set(synthetic.POSITIVE) | set(synthetic.NEGATIVE)
    seen = {w for row in train for w in row["text"].split() if w in adjectives}
    assert seen and not seen & {w for row in test for w in row["text"].split() if w in adjectives}
    assert sum(row["label"] for row in test) == 100  # balanced
    train_entities = {w for row in synthetic.entities(300, seed=0, test=False)
                      for w, t in zip(row["tokens"], row["tags"], strict=True) if t}
    test_entities = {w for row in synthetic.entities(300, seed=0, test=True)
                     for w, t in zip(row["tokens"], row["tags"], strict=True) if t}
    assert train_entities and test_entities and train_entities & test_entities == {"the"}  # "the world bank"
    train_answers = {a for row in synthetic.question_answering(200, seed=0, test=False) for a in row["answers"]["text"]}
    test_answers = {a for row in synthetic.question_answering(200, seed=0, test=True) for a in row["answers"]["text"]}
    assert not train_answers & test_answers


def test_synthetic_sets_are_well_formed_and_seeded():
    assert synthetic.entities(5, seed=1, test=True) == synthetic.entities(5, seed=1, test=True)
    for row in synthetic.entities(50, seed=0, test=True):
        assert len(row["tokens"]) == len(row["tags"])
        for k, tag in enumerate(row["tags"]):  # an I- tag always continues an entity of its own type
            name = synthetic.TAG_NAMES[tag]
            if name.startswith("I-"):
                assert synthetic.TAG_NAMES[row["tags"][k - 1]][2:] == name[2:]
    v2 = synthetic.question_answering(300, seed=0, test=True, unanswerable=0.33)
    unanswerable = [row for row in v2 if not row["answers"]["text"]]
    assert 60 < len(unanswerable) < 140
    for row in v2:
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True):
            assert row["context"][start:start + len(text)] == text


def test_synthetic_retrieval_grades_every_document_consistently():
    rows = synthetic.retrieval(30, seed=0, test=True)
    corpus = {d["id"] for d in rows[0]["docs"]}
    assert all({d["id"] for d in row["docs"]} == corpus for row in rows)  # every document labelled for every query
    for row in rows:
        grades = [d["grade"] for d in row["docs"]]
        assert grades[0] == 2 and grades.count(2) == 20 and grades.count(1) == 20
        topic_word = row["query"].split()[-1]  # passages never repeat the query's word: no lexical shortcut
        assert not any(topic_word in d["text"].split() for d in row["docs"])
