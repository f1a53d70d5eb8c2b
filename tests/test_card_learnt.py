"""What was learnt is named once (`records.learnt`): the card, the run record and the metrics say the contrastive
method, the masking target and the phases that ran, never another's (issue 66 points 1 and 5, issue 70 point 1)."""

import json
import shutil

import pytest
import yaml
from hub_server import make_run_folder, run_record

from hf_encoderize.publish.card import CardConfig, gather_facts, render_card
from hf_encoderize.records.learnt import LEARNT, learnt, of_kind

# Each method's own words on the card, and the words of the others that must not appear.
METHOD_WORDS = {"simcse": "SimCSE (unsupervised", "supervised": "supervised pairs", "distill": "distillation"}


def embedding_model(root, method: str, **stage) -> str:
    """RUN/contrastive beside RUN/encoder, with the contrastive record `method` writes (`stage` over the defaults)."""
    out = make_run_folder(root, evaluated=False, base_evaluated=False)
    folder = out / "contrastive"
    shutil.copytree(out / "encoder", folder)
    defaults = {"objective": method, "pooling": "mean", "loss": "mse" if method == "distill" else "mnrl",
                "steps": 40, "batch_size": 8, "learning_rate": 2e-5, "scale": 20.0, "rows": 320,
                "final_loss": 0.0016, "lead": ""}
    if method == "distill":
        defaults.update(teacher="teacher", teacher_name="all-MiniLM-L6-v2", teacher_license="apache-2.0",
                        projection=[64, 384])
    if method == "simcse":
        defaults.update(training_dropout={"attention_dropout": 0.1})
    (folder / "contrastive_run.json").write_text(json.dumps({
        "source": str(out / "encoder"), "config": {"data_files": "pairs.jsonl"},
        "stage": {**defaults, **stage}, "losses": [1.0, 0.0016]}))
    return str(folder)


@pytest.mark.parametrize("method", ["simcse", "supervised", "distill"])
def test_the_card_names_the_contrastive_method_that_ran(tmp_path, method):
    card = render_card(gather_facts(CardConfig(embedding_model(tmp_path, method))))
    intro = card.split("It was then trained as an embedding model", 1)[1].split("\n\n", 1)[0]
    assert learnt(method).phrase.split(":")[0].split(",")[0] in intro.replace("\n", " ")
    others = [words for name, words in METHOD_WORDS.items() if name != method]
    body = card.replace("\n", " ")
    assert not [words for words in others if words in body], f"{method}'s card names another method"
    limitations = card.split("## Limitations", 1)[1].replace("\n", " ")
    assert learnt(method).trained_on in limitations
    assert method in yaml.safe_load(card.split("---\n")[1])["tags"]  # the method's one word, as its flag says it


def test_distilled_card_has_loss_digits_and_no_scale_for_mse(tmp_path):
    card = render_card(gather_facts(CardConfig(embedding_model(tmp_path, "distill"))))
    stage = next(line for line in card.splitlines() if line.startswith("| Contrastive stage |"))
    assert "final loss 0.0016" in stage and "0.00;" not in stage
    assert "`mse` loss," in stage and "scale" not in stage  # MSE to a teacher has no similarity scale
    assert "MSE to the teacher's embedding" in stage and "all-MiniLM-L6-v2" in stage


def test_supervised_card_keeps_the_scale_of_its_in_batch_loss(tmp_path):
    card = render_card(gather_facts(CardConfig(embedding_model(tmp_path, "supervised"))))
    assert "`mnrl` loss with scale 20.0" in card


CASES = {  # run record -> (the card's Objective row, the phrase of its intro)
    "mlm": (dict(objective="mlm"), "MLM", "masked language modelling"),
    "mntp": (dict(objective="mntp"), "MNTP (masked next-token prediction, LLM2Vec)", "masked next-token prediction"),
    "clm->mlm": (dict(objective="clm+mlm", phases="clm:0.5,mlm:0.5"), "CLM for steps 0-600, then MLM for steps "
                 "600-1,200", "masked language modelling"),
    "clm->mntp": (dict(objective="clm+mntp", phases="clm:0.5,mlm:0.5"), "CLM for steps 0-600, then MNTP (masked "
                  "next-token prediction, LLM2Vec) for steps 600-1,200", "masked next-token prediction"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_card_names_the_masking_target_and_phases_that_ran(tmp_path, case):
    record, row, phrase = CASES[case]
    out = make_run_folder(tmp_path, evaluated=False, base_evaluated=False, **record)
    if "phases" in record:  # pretrain: random weights, a switch half-way
        record = {**run_record("", **record), "command": "pretrain", "base_model": None, "model_config": "210M",
                  "tokenizer": "tok", "switch_step": 600}
        (out / "run_record.json").write_text(json.dumps(record))
    card = render_card(gather_facts(CardConfig(str(out))))
    assert f"| Objective | {row}, mask ratio 40%" in card
    intro = card.split("## What was done", 1)[0].replace("\n", " ")
    assert phrase in intro
    wrong = "masked language modelling" if "mntp" in case else "masked next-token prediction"
    assert wrong not in intro
    held_out = "MNTP" if "mntp" in case else "MLM"
    assert f"| Held-out {held_out} loss / masked-token accuracy |" in card


@pytest.mark.parametrize(("schedule", "target", "expected"), [
    ("clm:0.5,mlm:0.5", "mntp", "clm+mntp"), ("clm:0.5,mlm:0.5", "mlm", "clm+mlm"), ("mlm:1.0", "mntp", "mntp"),
    ("clm:1.0", "mntp", "clm")])
def test_pretrain_records_the_masking_target_it_ran(schedule, target, expected):
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.objectives.phases import parse_schedule
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain_settings
    from hf_encoderize.training.train_config import TrainConfig

    train, masking = TrainConfig(steps=10), MaskingConfig(masking_target=target)
    settings = pretrain_settings(PretrainConfig(model_config="210M", tokenizer="tok", schedule=schedule),
                                 DataConfig(data_files="docs.jsonl", eval_documents=4),
                                 masking, train, parse_schedule(schedule, 10, masking), None)
    assert settings.phases == expected


def test_one_table_names_every_method_target_and_phase():
    from typing import get_args

    from hf_encoderize.objectives.targets import TARGETS
    from hf_encoderize.recipes.contrastive.config import Method

    assert set(of_kind("method")) == set(get_args(Method)) == {"simcse", "supervised", "distill"}
    masking_targets = {name for name, target in TARGETS.items() if target.learnt.kind == "masking_target"}
    assert set(of_kind("masking_target")) >= masking_targets >= {"mlm", "mntp"}  # a test may register its own
    assert all(target.learnt is LEARNT[name] for name, target in TARGETS.items())
    assert learnt("clm").metric == "eval_next_token_accuracy" and not learnt("clm").bidirectional
    assert learnt("mntp").metric == "eval_masked_accuracy"
