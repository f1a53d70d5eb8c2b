"""contrastive --hard-negatives (mined with the model, false negatives filtered) and --matryoshka-dims (the loss at each
truncated size), end to end through the CLI on the tiny model; bad values are one line."""

import json
import random

import pytest
from sentence_transformers.sentence_transformer.losses import multiple_negatives_ranking

from hf_encoderize.cli import main
from hf_encoderize.recipes.contrastive import train as contrastive_module  # the command's module: what it calls


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    rng = random.Random(0)
    rows = []
    for _ in range(32):
        anchor = [rng.randrange(100) for _ in range(6)]
        rows.append({"q": " ".join(f"w{i}" for i in anchor), "pos": " ".join(f"w{i}" for i in reversed(anchor))})
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, rows


def _run(encoder, data, out, *extra):
    return main(["contrastive", str(encoder), "--method", "supervised", "--data-files", str(data),
                 "--anchor-column", "q", "--positive-column", "pos", "--output-dir", str(out), "--max-steps", "2",
                 "--batch-size", "8", "--max-seq-length", "32", "--no-progress", *extra])


def test_hard_negatives_are_mined_into_columns_and_differ_from_the_positives(encoder, pairs, tmp_path, monkeypatch):
    mined = []
    original = contrastive_module.mine_negatives
    monkeypatch.setattr(contrastive_module, "mine_negatives", lambda *args: mined.append(original(*args)) or mined[-1])
    assert _run(encoder, pairs[0], tmp_path / "out", "--hard-negatives", "2") == 0
    rows = mined[0]
    assert rows.column_names == ["anchor", "positive", "negative_1", "negative_2"]
    positives = {row["pos"] for row in pairs[1]}
    for row in rows:
        assert row["negative_1"] != row["positive"] and row["negative_2"] != row["positive"]
        assert row["negative_1"] in positives and row["negative_2"] in positives  # the other pairs' positives
    record = json.loads((tmp_path / "out" / "contrastive_run.json").read_text())
    assert record["config"]["hard_negatives"] == 2 and record["losses"]


def _dims_seen(monkeypatch):
    seen = []
    original = multiple_negatives_ranking.MultipleNegativesRankingLoss.compute_loss_from_embeddings

    def recording(self, embeddings, labels):
        seen.append(embeddings[0].shape[-1])
        return original(self, embeddings, labels)

    monkeypatch.setattr(multiple_negatives_ranking.MultipleNegativesRankingLoss, "compute_loss_from_embeddings",
                        recording)
    return seen


def test_matryoshka_applies_the_loss_at_each_truncated_size(encoder, pairs, tmp_path, monkeypatch):
    seen = _dims_seen(monkeypatch)
    assert _run(encoder, pairs[0], tmp_path / "plain") == 0
    assert set(seen) == {32}  # without the option: the full width only
    seen.clear()
    assert _run(encoder, pairs[0], tmp_path / "mrl", "--matryoshka-dims", "32,16,8") == 0
    assert set(seen) == {32, 16, 8} and seen[:3] == [32, 16, 8]  # every step: each size, largest first


@pytest.mark.parametrize("extra, wording", [
    (["--matryoshka-dims", "64,32"], "--matryoshka-dims 64 is above the model's embedding width 32"),
    (["--matryoshka-dims", "32,x"], "--matryoshka-dims must be comma-separated whole numbers"),
    (["--matryoshka-dims", "16,8"], "--matryoshka-dims 16,8 leaves out the model's full embedding width 32"),
    (["--hard-negatives", "-1"], "--hard-negatives"),
    (["--hard-negatives", "2", "--negative-column", "pos"], "--hard-negatives mines the negatives itself"),
])
def test_bad_values_are_one_line(encoder, pairs, tmp_path, capsys, extra, wording):
    assert _run(encoder, pairs[0], tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err
    assert wording in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_pairs_left_without_negatives_are_reported_and_none_left_says_what_to_do(monkeypatch, capsys):
    import types

    import sentence_transformers.util as st_util

    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.recipes.contrastive.losses import mine_negatives

    config = types.SimpleNamespace(hard_negatives=1, batch_size=4)
    rows = [{"anchor": f"a{i}", "positive": f"p{i}"} for i in range(10)]
    monkeypatch.setattr(st_util, "mine_hard_negatives", lambda rows, *a, **k: rows[:6])
    assert len(mine_negatives(None, rows, config, {})) == 6
    assert "6 of 10 pairs have that many negatives" in capsys.readouterr().err
    monkeypatch.setattr(st_util, "mine_hard_negatives", lambda rows, *a, **k: rows[:1])
    with pytest.raises(EncoderizeError, match="train a stage without --hard-negatives first"):
        mine_negatives(None, rows, config, {})


@pytest.mark.parametrize("objective, columns", [
    ("simcse", dict(text_column="text")),
    ("supervised", dict(anchor_column="text", positive_column="para")),
])
def test_a_negative_column_comes_last_whatever_its_place_in_the_file(objective, columns, tmp_path):
    """The loss reads (anchor, positive, negative) by position; a file whose negative column came first trained the
    negative as the anchor. simcse takes a negative column too: a text that must embed apart from the row's own."""
    from hf_encoderize.recipes.contrastive import ContrastiveConfig, load_rows

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"neg": f"other {i}", "para": f"para {i}", "text": f"text {i}"}) + "\n"
                            for i in range(4)))
    rows = load_rows(ContrastiveConfig("unused", method=objective, data_files=str(path), negative_column="neg",
                                       lead_token=False, **columns))
    assert rows.column_names == ["anchor", "positive", "negative"]
    assert rows[0] == {"anchor": "text 0", "positive": "text 0" if objective == "simcse" else "para 0",
                       "negative": "other 0"}
