"""The records the stages hand each other are typed, each with one writer: config.json's `hf_encoderize` block
(`EncoderFacts`) says where an encoder came from the same way whichever command saved it."""

import json

from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.records.encoder_facts import EncoderFacts


def test_every_saver_fills_the_same_typed_facts(decoder_dir, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 80, lambda i: 6 + i % 12)
    assert main(["convert", str(decoder_dir), str(tmp_path / "converted")]) == 0
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--max-seq-length", "32",
                 "--batch-size", "4", "--eval-documents", "8", "--no-progress", "--export-steps", "1",
                 "--output-dir", str(tmp_path / "run")]) == 0
    converted, trained = EncoderFacts.of(tmp_path / "converted"), EncoderFacts.of(tmp_path / "run" / "encoder")
    exported = EncoderFacts.of(next((tmp_path / "run" / "exports").iterdir()))
    for facts, command in ((converted, "convert"), (trained, "cpt"), (exported, "cpt")):
        assert facts.command == command and facts.base_model == str(decoder_dir) and facts.version
        assert facts.model_type == "llama" and facts.packing and facts.revision is None
    assert trained.steps == 2 and trained.mask_ratio == 0.4 and trained.tokens and trained.attn_implementation
    assert exported.export_step == 1 and exported.phases == "mlm"
    # One builder for a run's blocks (`EncoderFacts.of_run`): an export says what the final encoder says, but its step.
    for name in ("tokens", "attn_implementation", "lora_r", "mask_ratio", "packing", "facts"):
        assert getattr(exported, name) == getattr(trained, name), name
    # An older block, with keys this version does not type, reads and writes back whole.
    old = {"version": "0.1.0", "base_model": "m", "note": "kept"}
    assert EncoderFacts.from_dict(old).to_dict() == old and EncoderFacts.from_dict(None) == EncoderFacts()
    config = json.loads((tmp_path / "run" / "encoder" / "config.json").read_text())
    assert None not in config["hf_encoderize"].values()  # what is known, nothing written as null


def test_one_writer_of_the_encoder_block_writes_it_whole_or_not_at_all(tmp_path, monkeypatch):
    """`model.saving` is the only module that writes config.json's `hf_encoderize` block; its second door (a folder
    another library saved) keeps the other keys in their order and replaces the file atomically."""
    import re
    from pathlib import Path

    import pytest

    from hf_encoderize.model import saving

    package = Path(__file__).resolve().parents[1] / "hf_encoderize"
    writers = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if re.search(r"""(?<!modules)\[["']hf_encoderize["']\]\s*=|["']hf_encoderize["']:\s*\w""",
                            p.read_text())}
    assert writers == {"model/saving.py"}
    folder = tmp_path / "enc"
    folder.mkdir()
    before = {"a": 1, "auto_map": {"AutoModel": "m.M"}, "hf_encoderize": {"command": "cpt"}, "dropout": 0.1}
    (folder / "config.json").write_text(json.dumps(before))
    facts = EncoderFacts(command="cpt", contrastive={"loss": "mnrl"})
    saving.write_encoder_block(folder, facts, updates={"dropout": 0.0}, remove=("auto_map",))
    after = json.loads((folder / "config.json").read_text())
    assert list(after) == ["a", "hf_encoderize", "dropout"] and after["dropout"] == 0.0
    assert after["hf_encoderize"] == {"command": "cpt", "contrastive": {"loss": "mnrl"}}
    assert [p.name for p in folder.iterdir()] == ["config.json"]  # no temporary file left
    monkeypatch.setattr(saving.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        saving.write_encoder_block(folder, EncoderFacts(command="x"))
    assert json.loads((folder / "config.json").read_text()) == after  # the old file, whole


# run_record.json as hf-encoderize 0.1 wrote it: none of the keys added since (identity, adam_eps, eval_masked_accuracy,
# initial_eval_loss, hardware, ...), decay as a fraction, and one key no version types.
OLD_RUN_RECORD = {
    "command": "cpt", "base_model": "tiny", "revision": None, "gguf_file": None, "objective": "mlm", "mask_ratio": 0.4,
    "replacement": "mask", "data": {"data_files": "docs.jsonl", "seq_len": 32, "pack": True}, "steps": 4,
    "lr": 0.001, "schedule": "wsd", "warmup_steps": 0, "decay_fraction": 0.2, "betas": [0.9, 0.95],
    "encoderize": {"model_type": "llama", "attn_implementation": "sdpa", "modules_patched": 2}, "eval_loss": 5.5,
    "hf_encoderize_version": "0.1.0", "tokens_seen": 512, "finished_at": "2026-11-01T00:00:00Z", "note": "kept",
}


def test_a_run_record_round_trips_and_keeps_a_key_it_does_not_type(tmp_path):
    from hf_encoderize.records.run_record import RunRecord

    record = RunRecord.from_dict({**OLD_RUN_RECORD, "lora": {"r": 8, "alpha": 16, "targets": "all-linear"}})
    assert record.facts == {"note": "kept"} and record.lora.r == 8 and record.decay_fraction == 0.2
    record.to_json(tmp_path / "run_record.json")
    again = RunRecord.from_json(tmp_path / "run_record.json")
    assert again == record and json.loads((tmp_path / "run_record.json").read_text())["note"] == "kept"


def test_a_misspelt_record_field_fails_when_the_record_is_made():
    """The settings and the nested parts of a run record are typed and made by keyword: a misspelt field is a
    TypeError where the run writes it, never a key filed silently beside the others (a card reading it would say
    n/a). A file written by another version still reads: its other keys are kept."""
    import pytest

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.records.eval_summary import DatasetResult
    from hf_encoderize.records.run_record import HardwareFacts, PatchFacts, RunRecord
    from hf_encoderize.records.run_settings import CptSettings, DataFacts, LoraFacts, PretrainSettings
    from hf_encoderize.training.recipe import run_settings
    from hf_encoderize.training.train_config import TrainConfig

    data = DataConfig(dataset="d", eval_documents=4)
    with pytest.raises(TypeError, match="base_modle"):
        run_settings(CptSettings, data, MaskingConfig(), TrainConfig(), base_modle="m")
    with pytest.raises(TypeError, match="model_config"):
        run_settings(CptSettings, data, MaskingConfig(), TrainConfig(), model_config="210M")  # pretrain's, not cpt's
    for part, wrong in ((DataFacts, "seq_length"), (LoraFacts, "rank"), (HardwareFacts, "gpu"), (PatchFacts, "patched"),
                        (RunRecord, "step"), (DatasetResult, "mean")):
        with pytest.raises(TypeError, match=wrong):
            part(**{wrong: 1})
    settings = run_settings(PretrainSettings, data, MaskingConfig(), TrainConfig(), estimated_memory_gib=1.5)
    assert "estimated_memory_gib" in settings.to_dict() and "estimated_memory_gib" not in settings.compared()
    record = RunRecord.of_settings(settings)
    assert record.data == data_facts_of(data) and record.data.dataset == "d" and isinstance(record.data, DataFacts)
    older = RunRecord.from_dict({**OLD_RUN_RECORD, "hardware": {"device": "cpu", "gpus": 0}})
    assert older.data.seq_len == 32 and older.hardware.device == "cpu" and older.hardware.facts == {"gpus": 0}
    assert older.encoderize.modules_patched == 2 and RunRecord.from_dict(older.to_dict()) == older


def data_facts_of(data):
    from hf_encoderize.data.sources import data_facts

    return data_facts(data)


def test_records_are_read_by_attribute_only():
    """No `record["key"]`, `record.get("key")` or `"key" in record`: a reader of a key no field declares fails at once
    instead of reading None."""
    import pytest

    from hf_encoderize.records.contrastive_record import ContrastiveRecord
    from hf_encoderize.records.eval_summary import EvalSummary
    from hf_encoderize.records.run_record import RunRecord

    for record in (RunRecord.from_dict(OLD_RUN_RECORD), EvalSummary(), ContrastiveRecord(), EncoderFacts()):
        with pytest.raises(TypeError):
            record["steps"]  # noqa: B018
        with pytest.raises(TypeError):
            "steps" in record  # noqa: B015
        assert not hasattr(record, "get")


def test_every_run_record_key_the_card_template_reads_is_a_field():
    """Jinja reads `f.run.x` by attribute and renders a missing one as nothing: each must be a declared field."""
    import re
    from dataclasses import fields
    from pathlib import Path

    from hf_encoderize.records.run_record import RunRecord

    template = (Path(__file__).resolve().parents[1] / "model_cards" / "encoder.md.j2").read_text()
    read = set(re.findall(r"\bf\.run\.(\w+)", template))
    assert read and read <= {f.name for f in fields(RunRecord)}, read - {f.name for f in fields(RunRecord)}


def test_a_card_renders_from_a_record_an_older_version_wrote(tmp_path):
    from hub_server import make_run_folder

    from hf_encoderize.publish.card import CardConfig, gather_facts, render_card

    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    (out / "run_record.json").write_text(json.dumps(OLD_RUN_RECORD))
    card = render_card(gather_facts(CardConfig(str(out))))
    assert "4 optimizer steps, 512 tokens seen" in card and "linear decay over the final 20% of steps" in card
    assert "eps 1e-08 (torch's default: recorded before --adam-epsilon existed)" in card
    assert "Held-out MLM loss / masked-token accuracy | 5.5 / n/a" in card


def test_the_patch_report_is_made_once_and_never_changed():
    """`EncoderizeReport` is frozen: what the probe and the rows' packing add makes a new report (`replace`), so a
    report handed to the record is the one that was checked."""
    import dataclasses

    import pytest

    from hf_encoderize.model.bidirectional import EncoderizeReport

    report = EncoderizeReport("llama", "sdpa", True, 2, 0, {"mask_token": "<mask>"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.packing = "padded rows: --no-pack"
    facts = dataclasses.replace(report, probe="passed").facts()
    assert facts.probe == "passed" and facts.tokens.mask_token == "<mask>" and "mask_token" not in facts.to_dict()
