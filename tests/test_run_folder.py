"""The run folder has one owner (`common.run_folder`): its paths are named there only, and the records between stages
are typed, read back equal, read what older versions wrote, and refuse a corrupt file in one line."""

import json
import re
from pathlib import Path

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.records.contrastive_record import ContrastiveRecord
from hf_encoderize.records.eval_summary import EvalSummary
from hf_encoderize.records.run_record import RunRecord
from hf_encoderize.records.run_settings import lift_old_keys

PACKAGE = Path(__file__).resolve().parents[1] / "hf_encoderize"
OWNED = ("run_record.json", "metrics.jsonl", "loss_curve.png", "push_record.json", "contrastive_run.json")

# run_record.json as hf-encoderize 0.1 wrote it (before `identity`, `adam_eps` and the typed records)
OLD_RECORD = {
    "command": "cpt", "base_model": "tiny", "revision": None, "gguf_file": None, "objective": "mlm",
    "mask_ratio": 0.4, "replacement": "mask", "data": {"data_files": "docs.jsonl", "seq_len": 32}, "steps": 4,
    "lr": 0.001, "schedule": "wsd", "warmup_steps": 0, "decay_steps": 1, "betas": [0.9, 0.95],
    "encoderize": {"model_type": "llama", "attn_implementation": "sdpa"}, "eval_loss": 5.5,
    "hf_encoderize_version": "0.1.0", "tokens_seen": 512, "finished_at": "2026-11-01T00:00:00Z",
}


def test_no_module_spells_out_a_run_folder_file_name_but_its_owner():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "run_folder.py" or "space" in path.parts:  # the Space runs without the package
            continue
        for name in OWNED:
            found += [f"{path.relative_to(PACKAGE)}: {name}" for _ in re.finditer(re.escape(f'"{name}"'),
                                                                                 path.read_text())]
    assert not found


def test_paths_of_a_run_folder():
    folder = RunFolder("runs/x")
    assert folder.encoder == Path("runs/x/encoder") and folder.summary("base") == Path("runs/x/eval/base/summary.json")
    assert folder.run_record.name == "run_record.json" and folder.contrastive == Path("runs/x/contrastive")


def test_a_record_of_an_older_version_reads_and_writes_back_unchanged(tmp_path):
    path = tmp_path / "run_record.json"
    path.write_text(json.dumps(OLD_RECORD))
    record = RunRecord.from_json(path)
    assert (record.command, record.steps, record.identity) == ("cpt", 4, None)
    assert (record.lr == 0.001 and record.adam_eps is None and record.data.seq_len == 32 and
        record.facts == {})  # every key of 0.1's record is typed today
    record.to_json(tmp_path / "again.json")
    # written back whole, in today's words (`objective` -> `phases`, the LR's `schedule` -> `lr_schedule`)
    assert ({k: v for k, v in json.loads((tmp_path / "again.json").read_text()).items() if v is not None} ==
        {k: v for k, v in lift_old_keys(OLD_RECORD).items() if v is not None})
    assert (record.phases, record.lr_schedule) == ("mlm", "wsd")


def test_a_record_written_by_cpt_reads_back_equal(tmp_path, decoder_dir):
    from conftest import write_corpus

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    corpus = write_corpus(tmp_path / "docs.jsonl", 60, lambda i: 6 + i % 10)
    out = tmp_path / "run"
    cpt(LoadConfig(str(decoder_dir)), DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4),
        MaskingConfig(), TrainConfig(output_dir=str(out), steps=2, batch_size=2, save_every=2, progress=False))
    on_disk = json.loads(RunFolder(out).run_record.read_text())
    record = RunRecord.from_json(RunFolder(out).run_record)
    assert record.to_dict() == on_disk and record.command == "cpt" and record.identity["train.steps"] == 2
    assert record.facts == {}  # every key the writers write is a typed field
    assert RunRecord.from_dict(record.to_dict()) == record


@pytest.mark.parametrize("kind", [RunRecord, EvalSummary, ContrastiveRecord])
def test_a_corrupt_record_is_one_line_naming_the_file(tmp_path, kind):
    path = tmp_path / "record.json"
    path.write_text('{"command": "cpt", "steps": ')  # cut by a kill mid-write
    with pytest.raises(EncoderizeError, match=r"record.json' is not valid JSON .*; re-run the stage that wrote it"):
        kind.from_json(path)
    path.write_text("[1, 2]")
    with pytest.raises(EncoderizeError, match="holds a JSON list, not an object"):
        kind.from_json(path)
    assert kind.from_json(tmp_path / "missing.json") is None
