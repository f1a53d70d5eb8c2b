"""`card` on an embedding model builds on sentence-transformers' own card (issue 66 point 3): the `widget:` examples,
the dataset-size and loss tags, the training logs and framework versions survive, under our sections, on every
regeneration and in what `push` sends; `contrastive RUN` writes the model where `card` finds it (point 6)."""

import json

import pytest
import yaml
from hub_server import make_run_folder

from hf_encoderize.cli import main
from hf_encoderize.publish.card_st import ST_CARD


@pytest.fixture(scope="module")
def embedding_run(tmp_path_factory):
    """A run folder whose embedding model `contrastive RUN` wrote (no --output-dir), before any `card`."""
    root = tmp_path_factory.mktemp("st_card")
    run = make_run_folder(root, evaluated=False, base_evaluated=False)
    texts = root / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w{i + 2} w{i * 7 % 11}"}) + "\n" for i in range(24)))
    assert main(["-q", "contrastive", str(run), "--data-files", str(texts), "--max-steps", "2", "--batch-size",
                 "4"]) == 0
    return run


def front_matter(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_contrastive_on_a_run_writes_into_it(embedding_run):
    assert (embedding_run / "contrastive" / "contrastive_run.json").is_file()
    assert not (embedding_run.parent / "runs").exists()


def test_card_keeps_the_widget_and_training_logs_of_sentence_transformers(embedding_run):
    from huggingface_hub import ModelCard

    folder = embedding_run / "contrastive"
    library = (folder / "README.md").read_text()  # what sentence-transformers' trainer wrote
    widget = front_matter(library)["widget"]
    for _ in range(2):  # a regeneration builds on the library's card too, not on ours
        assert main(["-q", "card", str(folder)]) == 0
        text = (folder / "README.md").read_text()
        meta = front_matter(text)
        assert meta["widget"] == widget and meta["pipeline_tag"] == "sentence-similarity"
        assert {"dataset_size:24", "loss:MultipleNegativesRankingLoss", "hf-encoderize"} <= set(meta["tags"])
        assert "It was then trained as an embedding model" in text  # ours first
        assert "#### Training Logs" in text and "#### Framework Versions" in text and "Sentence Transformers:" in text
        assert "sentence_transformers_model_id" not in text and str(folder.resolve()) in text
    assert (folder / ST_CARD).read_text() == library
    assert ModelCard.load(folder / "README.md").data.widget == widget


def test_push_sends_the_merged_card(embedding_run):
    from hf_encoderize.publish.hub import encoder_upload

    folder = embedding_run / "contrastive"
    _, extra = encoder_upload(folder, "alice/embedder")
    text = extra["README.md"].decode()
    assert "widget" in front_matter(text) and "#### Training Logs" in text
    assert 'SentenceTransformer("alice/embedder")' in text.split("## sentence-transformers' card", 1)[1]


def test_a_carded_embedding_model_is_still_ours_to_overwrite(embedding_run):
    folder = embedding_run / "contrastive"
    assert main(["-q", "card", str(folder)]) == 0
    assert (folder / ST_CARD).is_file()
    texts = embedding_run.parent / "texts.jsonl"
    assert main(["-q", "contrastive", str(embedding_run), "--data-files", str(texts), "--max-steps", "2",
                 "--batch-size", "4", "--overwrite"]) == 0
    assert not (folder / ST_CARD).exists()  # the new model's library card is README.md again
