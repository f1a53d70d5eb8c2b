"""What is learnt is a component (issue 70 point 1): a masking target brought from outside the package trains, and is
named by the record, the metrics and the card; `pretrain --masking-target mntp` is recorded and carded as MNTP; records
written before the rename (`objective`) still load."""

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_decoder, make_tokenizer, write_corpus

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.targets import MaskTokens, build_target
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_record import RunRecord
from hf_encoderize.records.run_settings import PretrainSchedule


@pytest.fixture(autouse=True)
def _registry_as_it_was():
    """The span toy registers itself on import; after each test the registry is the package's again (and the toy
    module forgotten, so the next import registers it anew): other tests of the worker never see `span`."""
    registries = [importlib.import_module("hf_encoderize.objectives.targets").TARGETS,
                  importlib.import_module("hf_encoderize.records.learnt").LEARNT]  # the live modules' (a test may
    before = [dict(registry) for registry in registries]  # have imported the package afresh)
    yield
    for registry, kept in zip(registries, before, strict=True):
        registry.clear()
        registry.update(kept)
    sys.modules.pop("toy_span_target", None)


def _train_lines(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "train"]


def test_a_target_from_outside_the_package_masks_spans():
    import toy_span_target

    target = build_target(MaskingConfig(mask_ratio=0.3, masking_target="span"))
    ids = torch.arange(10, 74).reshape(1, 64)
    tokens = MaskTokens.of(mask_token_id=1, vocab_size=100, special_ids=[], seed=0)
    masked, labels = target.labels(ids, torch.zeros_like(ids), [(0, 0)], tokens)
    chosen = (labels != -100)[0].tolist()
    runs = [len(run) for run in "".join("x" if c else " " for c in chosen).split()]
    assert runs and all(length >= toy_span_target.SPAN for length in runs)  # contiguous spans, never lone tokens
    assert (masked[labels != -100] == 1).all() and target.bidirectional and target.card_label.startswith("span")


def test_an_unknown_target_is_one_line_naming_the_known_ones():
    try:
        build_target(MaskingConfig(masking_target="spam"))
    except EncoderizeError as error:
        assert "--masking-target must be one of mlm, mntp" in str(error) and "'spam'" in str(error)
    else:
        raise AssertionError("an unknown target was built")


def test_a_toy_brings_its_own_target_and_trains_records_and_cards_it(decoder_dir, tmp_path, capsys):
    import toy_span_target  # noqa: F401 (registers `span`)

    from hf_encoderize import cli

    corpus = write_corpus(tmp_path / "docs.jsonl", 80, lambda i: 6 + i % 12)
    out = tmp_path / "span-run"
    assert cli.main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--max-seq-length",
                     "32", "--batch-size", "4", "--eval-documents", "8", "--no-progress", "--masking-target", "span",
                     "--output-dir", str(out)]) == 0, capsys.readouterr().err
    record = RunRecord.from_json(out / "run_record.json")
    assert record.phases == "span" and record.steps == 2
    assert {line["target"] for line in _train_lines(out)} == {"span"}
    assert EncoderFacts.of(out / "encoder").phases == "span"
    assert cli.main(["card", str(out)]) == 0, capsys.readouterr().err
    card = (out / "encoder" / "README.md").read_text()
    assert "| Objective | span masking (3-token spans), mask ratio 40%" in card
    assert "span masking (contiguous runs of 3 tokens masked together)" in " ".join(card.split())
    package = Path(cli.__file__).parent
    assert not [p for p in package.rglob("*.py") if "toy_span_target" in p.read_text() or "SpanTarget" in p.read_text()]


def test_pretrain_with_mntp_records_and_cards_mntp(tmp_path, capsys):
    from hf_encoderize import cli

    make_decoder().config.to_json_file(tmp_path / "config.json")
    make_tokenizer().save_pretrained(tmp_path / "tokenizer")
    corpus = write_corpus(tmp_path / "docs.jsonl", 120, lambda i: 6 + i % 12)
    out = tmp_path / "pretrain-mntp"
    args = ["pretrain", "--model-config", str(tmp_path / "config.json"), "--tokenizer", str(tmp_path / "tokenizer"),
            "--data-files", str(corpus), "--max-seq-length", "32", "--eval-documents", "8", "--max-steps", "4",
            "--batch-size", "4", "--schedule", "clm:0.5,mlm:0.5", "--masking-target", "mntp", "--no-progress",
            "--output-dir", str(out)]
    assert cli.main(args) == 0, capsys.readouterr().err
    record = RunRecord.from_json(out / "run_record.json")
    assert (record.phases, record.schedule, record.lr_schedule) == ("clm+mntp", "clm:0.5,mlm:0.5", "wsd")
    assert [line["target"] for line in _train_lines(out)] == ["clm", "clm", "mntp", "mntp"]
    raw = json.loads((out / "run_record.json").read_text())
    assert "objective" not in raw and raw["phases"] == "clm+mntp"
    assert cli.main(["card", str(out)]) == 0, capsys.readouterr().err
    card = " ".join((out / "encoder" / "README.md").read_text().split())
    assert "then MNTP (masked next-token prediction, LLM2Vec) for steps 2-4" in card
    assert "| Held-out MNTP loss" in card and "then MLM for steps" not in card


def test_records_written_before_the_rename_still_load(tmp_path):
    old = {"command": "pretrain", "objective": "clm+mntp", "phases": "clm:0.5,mlm:0.5", "schedule": "wsd",
           "identity": {"masking.objective": "mntp", "train.lr": 0.001}, "steps": 4}
    (tmp_path / "run_record.json").write_text(json.dumps(old))
    record = RunRecord.from_json(tmp_path / "run_record.json")
    assert (record.phases, record.schedule, record.lr_schedule) == ("clm+mntp", "clm:0.5,mlm:0.5", "wsd")
    assert record.identity == {"masking.masking_target": "mntp", "train.lr": 0.001} and record.facts == {}
    block = EncoderFacts.from_dict({"command": "pretrain", "objective": "clm", "phases": "clm:0.5,mlm:0.5"})
    assert (block.phases, block.schedule) == ("clm", "clm:0.5,mlm:0.5")
    schedule = PretrainSchedule.from_dict({"phases": [{"objective": "clm", "start": 0, "end": 2}],
                                           "identity": {"masking.objective": "mlm"}})
    assert schedule.phases == [{"name": "clm", "start": 0, "end": 2}]
    assert schedule.identity == {"masking.masking_target": "mlm"}


def test_a_pretrain_run_masked_from_the_first_step_says_its_target_on_the_attention_row(tmp_path):
    from hub_server import make_run_folder, run_record

    from hf_encoderize.publish.card import CardConfig, gather_facts, render_card

    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    record = {**run_record("", phases="mntp", schedule="mlm:1.0"), "command": "pretrain", "base_model": None,
              "model_config": "210M", "tokenizer": "tok", "switch_step": None}
    record.pop("objective", None)
    (out / "run_record.json").write_text(json.dumps(record))
    card = render_card(gather_facts(CardConfig(str(out))))
    assert "| Attention | bidirectional from the first step (MNTP (masked next-token prediction, LLM2Vec) only)" in card
    assert "causal throughout training" not in card


def test_a_run_started_before_the_rename_resumes_and_still_refuses_another_target(tmp_path):
    import pytest

    from hf_encoderize.common.identity import identity_of
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.records.run_settings import CptSettings
    from hf_encoderize.training.recipe import run_settings
    from hf_encoderize.training.resume_checks import SETTINGS_FILE, check_resume_settings
    from hf_encoderize.training.train_config import TrainConfig

    data, train = DataConfig(data_files="docs.jsonl", eval_documents=4), TrainConfig(steps=4)

    def settings(target: str) -> dict:
        masking = MaskingConfig(masking_target=target)
        return run_settings(CptSettings, data, masking, train, base_model="m",
                            identity=identity_of(masking, train)).compared()

    now = settings("mlm")
    old = {("objective" if k == "phases" else "schedule" if k == "lr_schedule" else k): v for k, v in now.items()}
    old["identity"] = {k.replace("masking.masking_target", "masking.objective"): v for k, v in now["identity"].items()}
    assert "objective" in old and "masking.objective" in old["identity"]  # as the code before the rename wrote it
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(old))
    check_resume_settings(tmp_path, now, 2, extendable=True, main_process=False)  # the same run: no refusal
    with pytest.raises(EncoderizeError, match="masking_target"):
        check_resume_settings(tmp_path, settings("mntp"), 2, extendable=True, main_process=False)
