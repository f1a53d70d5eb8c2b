"""Fine-tuning protocol choices the paper leaves open, taken from the authors' EncodEval (branch MLM_vs_CLM): the
AdamW settings of configs/*/*.yaml and the input length of encodeval/eval_tasks/abstract_eval.py."""

import pytest
import torch
from conftest import make_decoder

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation.base import AdamWSettings, decay_groups, make_optimizer
from hf_encoderize.evaluation.config import EvalConfig, model_limit
from hf_encoderize.evaluation.grid import fingerprint, input_length
from hf_encoderize.evaluation.loaders import DATASETS
from hf_encoderize.model.loading import LoadConfig


def test_adamw_defaults_are_the_authors_configs():
    cfg = EvalConfig()
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_epsilon, cfg.weight_decay) == (0.9, 0.95, 1e-5, 0.1)
    assert cfg.adamw() == AdamWSettings() == AdamWSettings(betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    assert cfg.protocol()["optimizer"] == {"name": "AdamW", "betas": [0.9, 0.95], "eps": 1e-5, "weight_decay": 0.1,
                                           "no_decay": "biases and norm weights"}
    assert "optimizer" in fingerprint(LoadConfig("m"), cfg)  # runs with other settings are never mixed in
    with pytest.raises(EncoderizeError, match="--adam-beta2"):
        EvalConfig(adam_beta2=1.0)
    with pytest.raises(EncoderizeError, match="--weight-decay"):
        EvalConfig(weight_decay=-0.1)


def test_biases_and_norm_weights_get_no_weight_decay():
    """As transformers' Trainer (`get_decay_parameter_names`), through which the authors fine-tune."""
    model = make_decoder().model  # LlamaModel: RMSNorm weights named `*norm.weight`, no biases
    head = torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.LayerNorm(3))
    decay, no_decay = decay_groups([model, head], 0.1)
    names = {id(p): n for m in (model, head) for n, p in m.named_parameters()}
    decayed, exempt = {names[id(p)] for p in decay["params"]}, {names[id(p)] for p in no_decay["params"]}
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert "embed_tokens.weight" in decayed and "layers.0.self_attn.q_proj.weight" in decayed and "0.weight" in decayed
    assert {"norm.weight", "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight", "0.bias",
            "1.weight", "1.bias"} <= exempt
    assert not any("norm" in name or "bias" in name for name in decayed)
    assert len(decayed) + len(exempt) == sum(1 for m in (model, head) for _ in m.parameters())


def test_make_optimizer_builds_both_groups_with_the_settings():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    optimizer = make_optimizer([model], 2e-5, AdamWSettings())
    assert isinstance(optimizer, torch.optim.AdamW) and len(optimizer.param_groups) == 2
    for group in optimizer.param_groups:
        assert (group["lr"], group["betas"], group["eps"]) == (2e-5, (0.9, 0.95), 1e-5)
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.1, 0.0]
    assert [len(group["params"]) for group in optimizer.param_groups] == [1, 3]  # Linear weight | bias, LN w and b


def test_weight_decay_shrinks_a_weight_without_gradient_and_spares_its_bias():
    layer = torch.nn.Linear(2, 2)
    before = (layer.weight.detach().clone(), layer.bias.detach().clone())
    optimizer = make_optimizer([layer], 0.1, AdamWSettings(weight_decay=0.5))
    layer.weight.grad, layer.bias.grad = torch.zeros_like(layer.weight), torch.zeros_like(layer.bias)
    optimizer.step()
    torch.testing.assert_close(layer.weight.detach(), before[0] * (1 - 0.1 * 0.5))
    torch.testing.assert_close(layer.bias.detach(), before[1])


def test_paper_profile_uses_the_model_limit_and_quick_the_shorter_length():
    paper, quick = EvalConfig(profile="paper"), EvalConfig(profile="quick")
    assert paper.grid().max_length is None and quick.grid().max_length == 512
    assert paper.protocol()["max_length"] == "model limit (0.99 x positions)"
    assert model_limit(2048) == 2028 and model_limit(512) == 507  # EncodEval: round(0.99 * max_length)
    for name in ("sst2", "conll2003", "squad", "msmarco", "mldr"):  # every task, MLDR included
        assert input_length(paper, DATASETS[name], 2048) == 2028
    assert input_length(quick, DATASETS["sst2"], 2048) == 512
    assert input_length(quick, DATASETS["mldr"], 2048) == 2048  # the long-document set keeps 2,048 in quick
    assert input_length(quick, DATASETS["mldr"], 1024) == 1024  # never past the model's positions
    assert input_length(EvalConfig(profile="paper", max_length=300), DATASETS["mldr"], 2048) == 300  # the flag wins
    assert input_length(EvalConfig(profile="smoke"), DATASETS["syn-sentiment"], 2048) == 64


def test_causal_is_described_as_an_ablation_not_the_papers_clm_rows():
    """Section 2 fine-tunes every model, CLM-pretrained ones included, with bidirectional attention."""
    from pathlib import Path

    import hf_encoderize.evaluation as evaluation

    sources = {p.name: p.read_text() for p in Path(evaluation.__file__).parent.glob("*.py")}
    assert not [name for name, text in sources.items() if "CLM rows" in text or "CLM row" in text]
    assert "ablation outside the paper's protocol" in sources["config.py"]
    assert "ablation outside the paper's protocol" in sources["backbone.py"]
