"""Enumerated options are `Literal` types declared beside their field (STYLE.md point 12): validation, the CLI's
usage and the docs read the values from that one declaration (`common.options.choices_of`), and every enumerated
option refuses a bad value in the same wording."""

import dataclasses

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.options import choices, choices_of
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.recipes.contrastive import ContrastiveConfig
from hf_encoderize.training.train_config import TrainConfig

CONTRASTIVE = dict(encoder="enc", output_dir="o", data_files="x.jsonl")
ENUMERATED = [
    (TrainConfig, {}, "mixed_precision", ("auto", "bf16", "fp16", "no")),
    (TrainConfig, {}, "master_weights", ("fp32", "loaded")),
    (TrainConfig, {}, "on_nonfinite", ("stop", "skip")),
    (TrainConfig, {}, "loss_implementation", ("auto", "fused", "compiled", "liger", "cce")),
    (EvalConfig, {}, "profile", ("paper", "quick", "smoke")),
    (EvalConfig, {}, "batching", ("random", "length")),
    (EvalConfig, {}, "ndcg_gains", ("binary", "graded")),
    (EvalConfig, {}, "dataset_source", ("authors", "original")),
    (ContrastiveConfig, CONTRASTIVE, "objective", ("simcse", "supervised")),
    (ContrastiveConfig, CONTRASTIVE, "pooling", ("mean", "lasttoken", "weightedmean")),
    (ContrastiveConfig, CONTRASTIVE, "loss", ("mnrl", "cached_mnrl")),
]


@pytest.mark.parametrize("cls, base, name, values", ENUMERATED, ids=lambda v: v if isinstance(v, str) else "")
def test_an_enumerated_option_is_a_literal_and_refuses_other_values_in_one_wording(cls, base, name, values):
    assert choices_of(cls, name) == values
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    assert choices(cls, field) == values  # what the CLI shows in usage
    for value in values:
        cls(**base, **{name: value})
    flag = f"--{name.replace('_', '-')}"
    with pytest.raises(EncoderizeError) as refused:
        cls(**base, **{name: "bogus"})
    assert f"must be one of {', '.join(values)}, not 'bogus'" in str(refused.value)
    assert flag in str(refused.value) or name in ("mixed_precision",) or "--" in str(refused.value)


def test_choices_of_names_a_field_that_is_not_enumerated():
    with pytest.raises(TypeError, match="TrainConfig.lr is not declared as a Literal"):
        choices_of(TrainConfig, "lr")
