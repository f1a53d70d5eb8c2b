"""GPU-only checks: flash attention with packed cu_seqlens in bf16. Skipped without a CUDA/ROCm GPU."""

import importlib.util

import pytest
import torch
from conftest import make_decoder

from hf_encoderize.bidirectional import encoderize, verify_bidirectional

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
    pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn"),
]


@pytest.mark.parametrize("model_type, extra", [("llama", {}), ("mistral", {"sliding_window": 4})])
def test_flash_attention_2_probe_bf16(model_type, extra):
    model = make_decoder(model_type, "flash_attention_2", **extra).to("cuda", torch.bfloat16)
    encoderize(model)
    result = verify_bidirectional(model)
    assert result.passed, result.summary()
