"""Enumerated options are `Literal` types declared beside their field (STYLE.md point 12): validation, the CLI's
usage and the docs read the values from that one declaration (`common.options.choices_of`), and every enumerated
option refuses a bad value in the same wording."""

import dataclasses

import pytest

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.options import choices, choices_of
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.pipeline.quickstart import QuickstartConfig
from hf_encoderize.pipeline.run import RunEvalConfig
from hf_encoderize.publish.export import ExportConfig
from hf_encoderize.recipes.contrastive import ContrastiveConfig
from hf_encoderize.recipes.pretrain import PretrainConfig
from hf_encoderize.training.train_config import TrainConfig

BACKENDS = ("auto", "eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")
CONTRASTIVE = dict(encoder="enc", output_dir="o", data_files="x.jsonl")
ENUMERATED = [
    (TrainConfig, {}, "mixed_precision", ("auto", "bf16", "fp16", "no")),
    (TrainConfig, {}, "master_weights", ("fp32", "loaded")),
    (TrainConfig, {}, "on_nonfinite", ("stop", "skip")),
    (TrainConfig, {}, "loss_implementation", ("auto", "fused", "compiled", "dense", "liger", "cce")),
    (EvalConfig, {}, "profile", ("paper", "quick", "smoke")),
    (EvalConfig, {}, "batching", ("random", "length")),
    (EvalConfig, {}, "ndcg_gains", ("binary", "graded")),
    (EvalConfig, {}, "dataset_source", ("authors", "original")),
    (ContrastiveConfig, CONTRASTIVE, "method", ("simcse", "supervised", "distill")),
    (ContrastiveConfig, CONTRASTIVE, "pooling", ("mean", "lasttoken", "weightedmean")),
    (ContrastiveConfig, CONTRASTIVE, "loss", ("mnrl", "cached_mnrl")),
    (ContrastiveConfig, CONTRASTIVE, "mixed_precision", ("auto", "bf16", "no")),
    (LoadConfig, {"source": "m"}, "attn_implementation", BACKENDS),
    (LoadConfig, {"source": "m"}, "dtype", ("auto", "float32", "bfloat16", "float16")),
    (PretrainConfig, {"model_config": "210M", "tokenizer": "t"}, "attn_implementation", BACKENDS),
    (MaskingConfig, {}, "replacement", ("mask", "bert")),
    (DataConfig, {}, "text_unit", ("line", "paragraph", "file")),
    (RunEvalConfig, {}, "base", ("bidirectional", "causal", "both", "none")),
    (QuickstartConfig, {"contrastive_steps": 0}, "distill_text", ("wordnet", "sampled")),
    (ExportConfig, {"output_dir": "o"}, "format", ("onnx", "gguf")),
]

# what a value needs beside it: distillation names its teacher (a Hub id here: only a local path is checked up front)
NEEDS = {("ContrastiveConfig", "distill"): {"teacher": "t"}}


@pytest.mark.parametrize("cls, base, name, values", ENUMERATED, ids=lambda v: v if isinstance(v, str) else "")
def test_an_enumerated_option_is_a_literal_and_refuses_other_values_in_one_wording(cls, base, name, values,
                                                                                   monkeypatch):
    import hf_encoderize.common.precision as precision

    monkeypatch.setattr(precision, "fp16_device", lambda: True)  # every value, where it runs (fp16: a GPU)
    assert choices_of(cls, name) == values
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    assert choices(cls, field) == values  # what the CLI shows in usage
    for value in values:
        cls(**base, **{name: value}, **NEEDS.get((cls.__name__, value), {}))
    flag = f"--{name.replace('_', '-')}"
    with pytest.raises(EncoderizeError) as refused:
        cls(**base, **{name: "bogus"})
    assert f"must be one of {', '.join(values)}, not 'bogus'" in str(refused.value)
    assert flag in str(refused.value) or name in ("mixed_precision",) or "--" in str(refused.value)


def test_choices_of_names_a_field_that_is_not_enumerated():
    with pytest.raises(TypeError, match="TrainConfig.lr is not declared as a Literal"):
        choices_of(TrainConfig, "lr")


@pytest.mark.parametrize("argv, flag, values", [
    (["cpt", "m", "--replacement", "random"], "--replacement", "'mask', 'bert'"),
    (["cpt", "m", "--dtype", "fp8"], "--dtype", "'auto', 'float32', 'bfloat16', 'float16'"),
    (["run", "m", "--eval-base", "encoder"], "--eval-base", "'bidirectional', 'causal', 'both', 'none'"),
    (["run", "m", "--contrastive", "triplet"], "--contrastive", "'simcse', 'supervised', 'distill', 'none'"),
    (["run", "m", "--eval-profile", "full"], "--eval-profile", "'paper', 'quick', 'smoke', 'none'"),
    (["run", "m", "--contrastive-mixed-precision", "fp16"], "--contrastive-mixed-precision", "'auto', 'bf16', 'no'"),
    (["contrastive", "enc", "out", "--pooling", "max"], "--pooling", "'mean', 'lasttoken', 'weightedmean'"),
])
def test_a_value_outside_the_literal_is_refused_on_the_command_line_in_one_line(argv, flag, values, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert f"argument {flag}: invalid choice" in err and f"(choose from {values})" in err


def test_help_lists_a_literal_option_s_values(capsys):
    with pytest.raises(SystemExit):
        main(["cpt", "--help"])
    assert ("--attn-implementation {auto,eager,sdpa,flex_attention,flash_attention_2,flash_attention_3}" in
        capsys.readouterr().out)


def test_bf16_on_a_gpu_without_it_is_refused_in_one_line(monkeypatch, capsys):
    """A T4 or V100 has no bf16: cpt and contrastive say so, before Accelerate or transformers raise their own."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "Tesla T4")
    for make in (lambda: TrainConfig(mixed_precision="bf16"),
                 lambda: ContrastiveConfig(**CONTRASTIVE, mixed_precision="bf16")):
        with pytest.raises(EncoderizeError, match=r"--mixed-precision bf16: this GPU \(Tesla T4\) has no bf16"):
            make()
    TrainConfig(mixed_precision="auto"), ContrastiveConfig(**CONTRASTIVE, mixed_precision="no")  # accepted
    assert main(["contrastive", "enc", "--data-files", "x.jsonl", "--output-dir", "o", "--mixed-precision",
                 "bf16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --mixed-precision bf16: this GPU") and "Traceback" not in err
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    TrainConfig(mixed_precision="bf16")  # an A100 or H100 has it
