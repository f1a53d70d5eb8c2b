"""`eval --frozen`: only the task heads train, on hidden states cached once per input.

What must hold: a cached row is exactly what the model gives for it in any padded batch; every row is encoded once
for the whole grid; the backbone's weights do not move; retrieval's projection starts at the identity; a frozen run's
results are never taken for a fine-tuned run's (or the other way round); and the grid is reproducible by seed."""

import json

import pytest
import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation import EvalConfig, evaluate
from hf_encoderize.evaluation.backbone import load_backbone
from hf_encoderize.evaluation.frozen import CachedEncoder, FrozenBackbone, IdentityProjection
from hf_encoderize.evaluation.grid import task_class
from hf_encoderize.evaluation.loaders import dataset_spec
from hf_encoderize.model.loading import LoadConfig


def frozen_config(out, **overrides) -> EvalConfig:
    settings = dict(profile="smoke", frozen=True, tasks="sc,ir", seeds="0,1", lrs="1e-3", max_steps=60,
                    output_dir=str(out), name="m")
    return EvalConfig(**{**settings, **overrides})


def test_a_cached_row_is_what_the_model_gives_it_in_any_padded_batch(encoder):
    backbone = load_backbone(LoadConfig(str(encoder)), device="cpu")
    backbone.model.eval()
    cached = CachedEncoder(backbone.model, backbone.device)
    rows = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
    ids = torch.zeros(3, 6, dtype=torch.long)
    mask = torch.zeros(3, 6, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    first = cached(input_ids=ids, attention_mask=mask).last_hidden_state
    with torch.no_grad():
        direct = backbone.model(input_ids=ids, attention_mask=mask).last_hidden_state
    for i, row in enumerate(rows):
        torch.testing.assert_close(first[i, :len(row)], direct[i, :len(row)], atol=1e-5, rtol=1e-4)
        assert not first[i, len(row):].any()  # padding positions stay zero
    assert cached.encoded_rows == 3
    # The same rows in another batch, with other padding: served from the cache, equal to the model's own output.
    again = cached(input_ids=ids[1:, :3], attention_mask=mask[1:, :3]).last_hidden_state
    assert cached.encoded_rows == 3
    with torch.no_grad():
        alone = backbone.model(input_ids=ids[2:, :3], attention_mask=mask[2:, :3]).last_hidden_state
    torch.testing.assert_close(again[1], alone[0], atol=1e-5, rtol=1e-4)
    assert list(cached.parameters()) == []


def test_the_grid_encodes_each_row_once_and_never_moves_the_backbone(encoder, tmp_path, monkeypatch):
    from hf_encoderize.evaluation import grid

    built = []
    original = grid.FrozenBackbone

    def spy(backbone):
        built.append(original(backbone))
        return built[-1]

    monkeypatch.setattr(grid, "FrozenBackbone", spy)
    backbone = load_backbone(LoadConfig(str(encoder)), device="cpu")
    before = {k: v.clone() for k, v in backbone.model.state_dict().items()}
    summary = evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path, tasks="sc", seeds="0,1,2"), backbone=backbone)
    after = backbone.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    cache = built[0].model
    assert cache.encoded_rows == len(cache.cache)  # no row went through the model twice, over three seeds
    result = summary["results"][0]
    assert result["n_seeds"] == 3 and summary["protocol"]["frozen"] is True
    record = json.loads(next((tmp_path / "m").rglob("results.json")).read_text())
    assert record["steps"] == 60  # several epochs: 640 rows are 40 batches of 16
    assert record["fingerprint"]["frozen"] is True


def test_retrievals_projection_starts_at_the_identity(encoder):
    backbone = FrozenBackbone(load_backbone(LoadConfig(str(encoder)), device="cpu"))
    task = task_class("ir")(dataset_spec("syn-retrieval", "authors"), backbone.tokenizer, 32, frozen=True)
    head = task.make_head(backbone.hidden_size)
    assert isinstance(head, IdentityProjection)
    ids = [[5, 6, 7], [8, 9, 10, 11]]
    projected, raw = (task.embed(backbone, backbone.model, ids, h) for h in (head, None))
    torch.testing.assert_close(projected, raw)
    fine_tuned = task_class("ir")(dataset_spec("syn-retrieval", "authors"), backbone.tokenizer, 32)
    assert not list(fine_tuned.make_head(backbone.hidden_size).parameters())


def test_frozen_and_fine_tuned_results_are_never_mixed(encoder, tmp_path):
    evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path, tasks="sc", seeds="0", max_steps=5))
    with pytest.raises(EncoderizeError, match="another protocol.*frozen"):
        evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path, tasks="sc", seeds="0", max_steps=5, frozen=False))


def test_the_frozen_grid_is_reproducible_by_seed(encoder, tmp_path):
    first = evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path / "a", max_steps=30))
    second = evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path / "b", max_steps=30))
    assert [r["test_mean"] for r in first["results"]] == [r["test_mean"] for r in second["results"]]


def test_the_summary_and_the_card_say_the_backbone_was_frozen(tmp_path):
    from hf_encoderize.evaluation.summary import render_markdown
    from hf_encoderize.publish.card import protocol_sentence
    from hf_encoderize.publish.card_facts import CardFacts
    from hf_encoderize.records.eval_summary import EvalSummary

    protocol = {"lrs": ["0.001"], "seeds": [0, 1], "batch_size": 16, "max_steps": 200, "warmup_ratio": 0.1,
                "selection": "best validation"}
    for frozen in (True, False):
        summary = {"model_name": "m", "model": "m", "mode": "bidirectional", "profile": "smoke", "results": [],
                   "family_means": {}, "protocol": {**protocol, "frozen": frozen}}
        facts = CardFacts(model_name="m", model_ref="m", base_model="b", results=EvalSummary.from_dict(summary))
        text, sentence = render_markdown(summary), protocol_sentence(facts)
        assert ("frozen hidden states" in text) is frozen and ("or one epoch" in text) is not frozen
        assert ("frozen hidden states" in sentence) is frozen
        assert ("the paper's fine-tuning protocol (section 2):" in sentence) is not frozen


def test_frozen_retrieval_reports_the_zero_shot_map_beside_the_trained_one(encoder, tmp_path):
    """The identity map before training is scored too (what the frozen embedding holds alone), in the summary's extra
    metrics and as its own row of `compare`'s table, so the trained 576x576-style map's share of the score shows."""
    from hf_encoderize.evaluation.compare import compare

    summary = evaluate(LoadConfig(str(encoder)), frozen_config(tmp_path, tasks="ir", seeds="0,1", max_steps=10))
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "m").rglob("results.json"))]
    assert len({r["test"]["zero_shot"] for r in records}) == 1  # no training, no seed: one score
    ir = summary["results"][0]
    assert ir["extra_metrics"]["zero_shot"] == records[0]["test"]["zero_shot"]
    table = compare([str(tmp_path / "m")], str(tmp_path / "cmp"))["table"]
    assert table.startswith("Protocol: frozen probe")
    assert (f"| ir | syn-retrieval, zero-shot (untrained map) | ndcg@10 (binary gains) | "
           f"{ir['extra_metrics']['zero_shot']:.2f} |" in table)
