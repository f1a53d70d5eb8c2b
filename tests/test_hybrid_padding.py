"""Hybrids (attention + state-space layers) train on padded rows, automatically.

Their state-space / linear-attention layers carry state along a row, so documents packed into one row leak into each
other whatever the attention mask says: the probe's packed-documents check fails while every other check passes. Such
a model then trains on padded rows (one document per row), says so in one warning line, and records it; an explicit
`--pack` is refused. A decoder-only model still packs.
"""

import json

import pytest
import torch
from conftest import VOCAB, make_tokenizer, write_corpus

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.bidirectional import PACKED, ProbeResult, base_model_of, encoderize, verify_bidirectional
from hf_encoderize.model.isolation import document_ids_from_lengths, packed_forward
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.model.where_it_trains import encoderize_where_it_trains
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.convert import ConvertConfig, convert
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.train_config import TrainConfig

HYBRID = "qwen3_next"  # one GatedDeltaNet (linear attention) layer and one full-attention layer when built tiny
PADDED = "padded rows: its state-space/linear-attention layers carry state from one packed document into the next"


def make_hybrid():
    from transformers import AutoModelForCausalLM

    from hf_encoderize.model.tiny import tiny_config

    config = tiny_config(HYBRID)  # hidden 32, 2 layers: the architecture matrix's tiny build
    config.vocab_size = VOCAB + 2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / f"tiny-{HYBRID}"
    make_hybrid().save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 40, lambda i: 5 + i % 11)


def _cpt(source, corpus, out, **data):
    return cpt(LoadConfig(str(source)), DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4, **data),
               MaskingConfig(), TrainConfig(output_dir=str(out), steps=3, batch_size=2, eval_every=0, progress=False))


def test_passed_without_packing_ignores_only_the_packing_check():
    checks = {"later_token_changes_first": True, "every_attention_layer_bidirectional": True,
              "padding_invariant": True, "packed_documents_isolated": "documents leak"}
    assert ProbeResult(checks).passed_without_packing and not ProbeResult(checks).passed
    assert not ProbeResult({**checks, "padding_invariant": "changed"}).passed_without_packing


def test_flash_attention_is_never_picked_for_a_hybrid():
    # Its varlen path flattens the batch into one row: the state-space layers would carry state from row to row.
    from hf_encoderize.model.attention_backends import backend_plan
    from hf_encoderize.model.tiny import tiny_config

    config = tiny_config(HYBRID)
    assert "state-space layers would carry state" in dict(backend_plan(config, "auto"))["flash_attention_2"]
    with pytest.raises(EncoderizeError, match="flash_attention_2 cannot train qwen3_next: .* auto \\(picks sdpa\\)"):
        backend_plan(config, "flash_attention_2")


def test_the_hybrid_fails_only_packing_and_a_padded_row_equals_the_document_alone():
    model = make_hybrid()
    encoderize(model, make_tokenizer())
    result = verify_bidirectional(model, raise_on_failure=False)
    assert result.passed_without_packing and result.checks["packed_documents_isolated"] is not True
    # What padded training runs: one document, then padding (document id -1), through the packed path.
    base, doc = base_model_of(model), torch.randint(0, VOCAB, (1, 9))
    row = torch.cat([doc, torch.zeros(1, 7, dtype=torch.long)], dim=1)
    padded = packed_forward(base, row, document_ids_from_lengths([[9]], 16), use_cache=False).last_hidden_state
    alone = base(input_ids=doc, use_cache=False).last_hidden_state
    torch.testing.assert_close(padded[:, :9], alone, atol=1e-5, rtol=1e-4)


def test_cpt_trains_a_hybrid_on_padded_rows_and_records_why(hybrid_dir, corpus, tmp_path, capsys):
    summary = _cpt(hybrid_dir, corpus, tmp_path / "run")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "padded rows" in warnings[0] and "carry state" in warnings[0]
    assert all(torch.isfinite(torch.tensor(summary["losses"]))) and summary["steps"] == 3
    record = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert record["encoderize"]["packing"] == PADDED and record["data"]["pack"] is False
    assert record["encoderize"]["attn_candidates"][-1] == {"backend": "sdpa", "skipped": None}
    config = json.loads((tmp_path / "run" / "encoder" / "config.json").read_text())
    assert config["hf_encoderize"]["packing"] == PADDED


def test_an_explicit_pack_on_a_hybrid_is_refused_before_the_output_folder(hybrid_dir, corpus, tmp_path):
    with pytest.raises(EncoderizeError, match="--pack: qwen3_next cannot train on packed rows") as refusal:
        _cpt(hybrid_dir, corpus, tmp_path / "run", pack=True)
    assert "\n" not in str(refusal.value) and "--no-pack" in str(refusal.value)
    assert not (tmp_path / "run").exists()


def test_no_pack_is_recorded_without_a_warning(hybrid_dir, capsys):
    _, _, report, _ = encoderize_where_it_trains(LoadConfig(str(hybrid_dir)), {}, None, False, pack=False)
    assert report.packing == "padded rows: --no-pack"
    assert "warning:" not in capsys.readouterr().err


def test_a_decoder_only_model_still_packs(decoder_dir, corpus, tmp_path, capsys):
    _cpt(decoder_dir, corpus, tmp_path / "run")
    assert "padded rows" not in capsys.readouterr().err
    record = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert record["encoderize"]["packing"] == PACKED and record["data"]["pack"] is True
    assert [c["backend"] for c in record["encoderize"]["attn_candidates"]][-1] == record["encoderize"][
        "attn_implementation"]


def test_convert_saves_a_hybrid_and_records_padded_rows(hybrid_dir, tmp_path):
    summary = convert(LoadConfig(str(hybrid_dir)), ConvertConfig(str(tmp_path / "encoder")))
    assert summary["packing"] == PADDED and summary["probe"].startswith("packed_documents_isolated")
    saved = json.loads((tmp_path / "encoder" / "config.json").read_text())["hf_encoderize"]
    assert saved["packing"] == PADDED and saved["attn_candidates"][-1]["skipped"] is None
