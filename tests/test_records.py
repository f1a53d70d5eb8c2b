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
    assert exported.export_step == 1 and exported.objective == "mlm"
    # An older block, with keys this version does not type, reads and writes back whole.
    old = {"version": "0.1.0", "base_model": "m", "note": "kept"}
    assert EncoderFacts.from_dict(old).to_dict() == old and EncoderFacts.from_dict(None) == EncoderFacts()
    config = json.loads((tmp_path / "run" / "encoder" / "config.json").read_text())
    assert None not in config["hf_encoderize"].values()  # what is known, nothing written as null
