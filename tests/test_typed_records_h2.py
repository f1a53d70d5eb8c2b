"""Issue 70 point 2: the last records written as hand dicts are typed (`ContrastiveStage`, `ExportRecord`,
`EvalProtocol`), and a record written before a field was renamed reads through the same round-trip."""

from __future__ import annotations

import json

from hf_encoderize.records.contrastive_record import ContrastiveRecord, ContrastiveStage
from hf_encoderize.records.encoder_facts import EncoderFacts

OLD_STAGE = {"objective": "distill", "pooling": "mean", "loss": "mse", "steps": 4, "teacher": "t",
             "teacher_name": "all-MiniLM-L6-v2", "teacher_license": "apache-2.0", "lead": ""}


def test_a_stage_recorded_as_objective_reads_and_writes_back_as_method(tmp_path):
    """The contrastive method's one name is `method` (`ContrastiveConfig.method`); a contrastive_run.json or a
    config.json block written before says `objective`: lifted on read, in both files, and written back renamed."""
    path = tmp_path / "contrastive_run.json"
    path.write_text(json.dumps({"source": "enc", "config": {}, "stage": OLD_STAGE, "losses": [1.0]}))
    record = ContrastiveRecord.from_json(path)
    assert isinstance(record.stage, ContrastiveStage) and record.stage_facts().method == "distill"
    record.to_json(path)
    written = json.loads(path.read_text())["stage"]
    assert written["method"] == "distill" and "objective" not in written
    assert set(written) == {"method", *OLD_STAGE} - {"objective"}  # nothing else is added or lost
    block = EncoderFacts.from_dict({"command": "cpt", "contrastive": OLD_STAGE})
    assert block.contrastive.method == "distill" and block.to_dict()["contrastive"]["method"] == "distill"


def test_the_stage_is_built_typed_so_a_misspelt_key_fails_where_it_is_written():
    import pytest

    with pytest.raises(TypeError, match="objective"):
        ContrastiveStage(**{"objective": "simcse"})
    assert ContrastiveStage(method="simcse", steps=2).known() == {"method": "simcse", "steps": 2}


def test_the_export_record_is_typed_and_an_old_layout_keeps_every_key_when_a_format_is_added(tmp_path):
    """export_record.json was `dict[str, dict]` read by key in the card; now `ExportRecord` of `ExportPart`s of
    `ExportCheck`s. A record from before GGUF (the ONNX part at the top) reads as its ONNX part, and writing the GGUF
    part keeps it whole; a part is built by keyword, so a misspelt key fails where the exporter writes it."""
    import pytest

    from hf_encoderize.records.export_record import (
        EXPORT_RECORD,
        ExportPart,
        read_export_record,
        write_export_part,
    )

    old = {"format": "onnx", "pooling": "mean", "texts": 8, "variants": {
        "model.onnx": {"verdict": "verified", "min_cosine": 0.99999, "threshold": 0.9999, "position_0_moved": 0.3},
        "model_int8_weight_only.onnx": {"verdict": "not kept: cosine 0.95", "threshold": 0.99}}}
    (tmp_path / EXPORT_RECORD).write_text(json.dumps(old))
    record = read_export_record(tmp_path)
    assert record.onnx.kept_files() == ["model.onnx"] and not record.onnx.embedding_graph
    assert record.onnx.check("model.onnx").min_cosine == 0.99999 and record.gguf is None
    write_export_part(tmp_path, "gguf", ExportPart(pooling="mean", texts=8, llama_cpp_python="0.3.16",
                                                   variants={"model-f32.gguf": {"verdict": "verified"}}))
    written = json.loads((tmp_path / EXPORT_RECORD).read_text())
    assert written["onnx"] == old and written["gguf"]["variants"] == {"model-f32.gguf": {"verdict": "verified"}}
    assert read_export_record(tmp_path).gguf.kept_files() == ["model-f32.gguf"]
    with pytest.raises(TypeError):
        ExportPart(pooling="mean", variant={})


def test_the_eval_protocol_is_read_by_field_and_a_summary_without_one_writes_it_back_empty(tmp_path):
    """`EvalSummary.protocol` was a dict read with `.get(` in the card, the metric names, compare and `run`'s reuse;
    now `EvalProtocol`. A summary without a protocol (or a hand-edited non-object) reads as an empty one."""
    from hf_encoderize.evaluation.compare import protocol_of
    from hf_encoderize.records.eval_summary import EvalProtocol, EvalSummary

    protocol = {"lrs": ["0.0001"], "seeds": [0, 1], "batch_size": 16, "frozen": True, "later_key": 3}
    (tmp_path / "summary.json").write_text(json.dumps({"model": "m", "protocol": protocol, "results": []}))
    summary = EvalSummary.from_json(tmp_path / "summary.json")
    assert isinstance(summary.protocol, EvalProtocol) and summary.protocol.seeds == [0, 1]
    assert protocol_of(summary) == "frozen probe" and summary.to_dict()["protocol"] == protocol
    for hollow in ({}, {"protocol": None}, {"protocol": "edited by hand"}):
        read = EvalSummary.from_dict(hollow)
        assert read.protocol.frozen is None and protocol_of(read) == "fine-tuned" and read.to_dict()["protocol"] == {}


def test_patch_facts_hold_the_tokens_once_and_a_record_with_them_beside_is_lifted():
    """`PatchFacts` repeated `TokenFacts`' six fields beside its nested `tokens`; now the tokens are nested only. A
    run_record.json written before (tokens beside, or beside only) reads into `tokens` and writes them there."""
    from dataclasses import fields

    from hf_encoderize.records.run_record import PatchFacts, RunRecord, TokenFacts

    token_fields = {f.name for f in fields(TokenFacts)} - {"facts", "read_keys"}
    assert not token_fields & {f.name for f in fields(PatchFacts)}
    beside_only = RunRecord.from_dict({"command": "cpt", "encoderize": {"model_type": "llama", "mask_token": "<m>",
                                                                        "mask_token_path": "added"}})
    tokens = beside_only.encoderize.tokens
    assert tokens.mask_token == "<m>" and tokens.mask_token_path == "added"
    assert beside_only.to_dict()["encoderize"] == {"model_type": "llama",
                                                   "tokens": {"mask_token": "<m>", "mask_token_path": "added"}}
