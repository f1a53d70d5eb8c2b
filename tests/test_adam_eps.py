"""AdamW epsilon: the paper's 1e-5 by default, given to the optimizer, in the run record and on the card."""

from __future__ import annotations

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main
from hf_encoderize.data.sources import DataConfig, open_documents
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.targets import MaskedTokens
from hf_encoderize.publish.card_rows import _training_rows
from hf_encoderize.recipes.cpt import load_encoderized
from hf_encoderize.records.run_record import RunRecord
from hf_encoderize.records.run_settings import CptSettings
from hf_encoderize.training.engine.accelerator import make_accelerator
from hf_encoderize.training.engine.build import Trainable, build_run
from hf_encoderize.training.lora import AdapterConfig
from hf_encoderize.training.recipe import run_settings
from hf_encoderize.training.train_config import TrainConfig


def _optimizer_eps(decoder_dir, tmp_path, **train_kwargs) -> float:
    tmp_path.mkdir()
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 3 + i % 7)
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=4)
    train = TrainConfig(output_dir=str(tmp_path / "out"), steps=2, batch_size=2, warmup_steps=0, progress=False,
                        **train_kwargs)
    model, tokenizer, _ = load_encoderized(LoadConfig(str(decoder_dir)), data, train, AdapterConfig())
    trainable = Trainable(model=model, tokenizer=tokenizer, data=data)
    run = build_run(make_accelerator(train, tmp_path / "out", []), trainable, open_documents(data),
                    MaskedTokens(MaskingConfig()), train, tmp_path / "out")
    assert {group["eps"] for group in run.optimizer.param_groups} == {train.adam_eps}
    assert run_settings(CptSettings, data, MaskingConfig(), train).adam_eps == train.adam_eps
    return train.adam_eps


def test_the_optimizer_gets_the_papers_epsilon_by_default_and_the_one_given(decoder_dir, tmp_path):
    assert _optimizer_eps(decoder_dir, tmp_path / "default") == 1e-5  # paper, Appendix A; not torch's 1e-8
    assert _optimizer_eps(decoder_dir, tmp_path / "given", adam_eps=1e-7) == 1e-7


@pytest.mark.parametrize("command", ["cpt", "pretrain"])
def test_adam_eps_is_an_option_of_the_training_commands(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--adam-epsilon" in capsys.readouterr().out


def test_a_non_positive_epsilon_is_refused_in_one_line():
    from hf_encoderize.common.errors import EncoderizeError

    with pytest.raises(EncoderizeError, match="--adam-epsilon"):
        TrainConfig(adam_eps=0.0)


def test_the_card_shows_the_recorded_epsilon_and_says_when_none_was_recorded():
    record = {"betas": [0.9, 0.95], "weight_decay": 0.1, "max_grad_norm": 1.0}
    rows = dict(_training_rows(RunRecord.from_dict({**record, "adam_eps": 1e-5})))
    assert rows["Optimizer"] == "AdamW, betas (0.9, 0.95), eps 1e-05, weight decay 0.1, gradient clipping 1.0"
    assert "eps 1e-08 (torch's default" in dict(_training_rows(RunRecord.from_dict(record)))["Optimizer"]
