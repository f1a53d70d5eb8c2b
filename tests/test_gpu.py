"""GPU-only checks: the probe where a GPU run probes (CUDA, bf16 autocast), flash attention with packed cu_seqlens in
bf16. Skipped without a CUDA/ROCm GPU; the flash tests also without flash-attn."""

import importlib.util

import pytest
import torch
from conftest import make_decoder

from hf_encoderize.model.bidirectional import encoderize, verify_bidirectional

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]
needs_flash_attn = pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn")


@pytest.mark.parametrize("backend", ["sdpa", "eager", "flex_attention"])
def test_probe_on_cuda_under_bf16_autocast(backend):
    """How `cpt` probes on a GPU (`probe_where_it_trains`): fp32 weights moved to the device, bf16 autocast.
    Every probe input must be built on the device, and bf16 kernel differences must not read as a leak. Head size
    16: compiled flex attention on CUDA refuses heads under 16 wide ("NYI: embedding dimension ... at least 16", seen
    on an H200 with the conftest's 8), a kernel limit no real decoder meets."""
    model = make_decoder("llama", backend, hidden_size=64, head_dim=16).to("cuda")
    encoderize(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        result = verify_bidirectional(model, raise_on_failure=False)
    assert result.passed, result.summary()


@needs_flash_attn
@pytest.mark.parametrize("model_type, extra", [("llama", {}), ("mistral", {"sliding_window": 4})])
def test_flash_attention_2_probe_bf16(model_type, extra):
    model = make_decoder(model_type, "flash_attention_2", **extra).to("cuda", torch.bfloat16)
    encoderize(model)
    result = verify_bidirectional(model)
    assert result.passed, result.summary()


@needs_flash_attn
@pytest.mark.parametrize("model_type, causal_in_plain_hands", [("llama", False), ("stablelm", True)])
def test_flash_attention_2_in_plain_hands(tmp_path, model_type, causal_in_plain_hands):
    """A saved encoder loaded by plain transformers under flash_attention_2 (no patch, no remote code): the flash
    wrapper takes `is_causal` from the forward kwargs, which the base model fills from `config.is_causal=False`, so a
    class that passes its kwargs down is bidirectional; StableLM's decoder layer drops them and stays causal (its saved
    config selects eager and declares sdpa causal, `roundtrip.plain_attention`). This is the GPU half of
    `hf_encoderize.matrix.roundtrip`'s reading of the code."""
    from transformers import AutoModel

    from hf_encoderize.matrix.roundtrip import save_tiny

    out = save_tiny(model_type, tmp_path / model_type)
    model = AutoModel.from_pretrained(out, attn_implementation="flash_attention_2", dtype=torch.bfloat16).to("cuda")
    ids = torch.randint(5, 100, (1, 12), device="cuda")
    changed = ids.clone()
    changed[0, -1] += 1
    with torch.no_grad():
        moved = (model(input_ids=ids).last_hidden_state[0, 0] - model(input_ids=changed).last_hidden_state[0, 0])
    assert (float(moved.abs().max()) == 0.0) is causal_in_plain_hands
