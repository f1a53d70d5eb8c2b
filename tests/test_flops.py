"""training.flops: hand-computed FLOPs on a tiny config, and device names mapped to the right dense peaks."""

import pytest
from transformers import LlamaConfig, MixtralConfig

from hf_encoderize.training.flops import matmul_params, mfu, peak_tflops, training_flops

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1000)
# By hand, head_dim 16: q and o are 64x64 each, k and v 64x32 each (2 kv heads x 16) = 12,288; the gated MLP is
# 3 x 64 x 128 = 24,576; per layer 36,864, two layers 73,728. The head is 64 x 1000.
LAYER_PARAMS, HEAD_PARAMS = 73_728, 64_000
# Attention per layer and token pair: 2 (QK^T) x 2 (AV) x 4 heads x 16 = 256 forward, x3 with backward, x2 layers.
PAIR_FLOPS = 3 * 2 * 256


@pytest.mark.parametrize("config", [TINY, LlamaConfig(**TINY)])
def test_matmul_params_by_hand(config):
    assert matmul_params(config) == {"layers": LAYER_PARAMS, "head": HEAD_PARAMS, "num_layers": 2, "query_width": 64}


def test_head_dim_wider_than_hidden_over_heads():
    # Qwen3-style: 4 heads of 32 = 128 query width on a 64-wide model: q and o are 64x128, k and v 64x64.
    params = matmul_params({**TINY, "head_dim": 32})
    assert params["query_width"] == 128
    assert params["layers"] == 2 * (2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 128)


def test_out_of_scope_configs_give_none():
    assert matmul_params(MixtralConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128)) is None
    assert matmul_params({**TINY, "layer_types": ["full_attention", "linear_attention"]}) is None
    assert matmul_params({"hidden_size": 64}) is None
    assert training_flops({"hidden_size": 64}, tokens=1, masked_tokens=1, document_lengths=[1]) is None


def test_isolated_documents_versus_one_grouped_row():
    isolated = training_flops(TINY, tokens=8, masked_tokens=3, document_lengths=[3, 5])
    grouped = training_flops(TINY, tokens=8, masked_tokens=3, document_lengths=[8])
    assert isolated["layers"] == grouped["layers"] == 6 * LAYER_PARAMS * 8 == 3_538_944
    assert isolated["head"] == 6 * HEAD_PARAMS * 3 == 1_152_000
    assert isolated["attention"] == PAIR_FLOPS * (9 + 25) == 52_224
    assert grouped["attention"] == PAIR_FLOPS * 64 == 98_304
    assert isolated["total"] == 3_538_944 + 1_152_000 + 52_224


def test_dense_head_is_reported_but_not_credited():
    sparse = training_flops(TINY, tokens=8, masked_tokens=3, document_lengths=[8])
    dense = training_flops(TINY, tokens=8, masked_tokens=3, document_lengths=[8], head_tokens=8)
    assert dense["total"] == sparse["total"]
    assert (sparse["head_executed"], dense["head_executed"]) == (6 * HEAD_PARAMS * 3, 6 * HEAD_PARAMS * 8)


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.4),
    ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", 835.5),
    ("NVIDIA H200", 989.4),
    ("NVIDIA H200 NVL", 835.5),
    ("NVIDIA GH200 480GB", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100-PCIE-40GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA L40S", 362.05),
    ("NVIDIA L40", 181.05),
    ("NVIDIA L4", 121.0),
    ("NVIDIA A10G", 70.0),
    ("NVIDIA A10", 125.0),
    ("AMD Instinct MI300X", 1307.4),
    ("AMD Instinct MI250X", 191.5),
    ("AMD Instinct MI210", 181.0),
])
def test_peak_by_exact_device_name(name, peak):
    assert peak_tflops(name) == peak
    assert peak_tflops(name, "fp16") == peak


@pytest.mark.parametrize("name", ["NVIDIA H100", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "NVIDIA H800", "cpu", "",
                                  "AMD Instinct MI250X / MI250", "NVIDIA GeForce RTX 4090"])
def test_unknown_or_ambiguous_names_get_none(name):
    assert peak_tflops(name) is None
    assert mfu(1e12, name) is None


def test_h100_pcie_is_not_given_the_sxm_peak():
    assert peak_tflops("NVIDIA H100 PCIe") < peak_tflops("NVIDIA H100 80GB HBM3")
    assert mfu(756.5e12, "NVIDIA H100 PCIe") == pytest.approx(1.0)
