"""The attention patch and its probe, on tiny random decoders."""

import contextlib

import pytest
import torch
from conftest import make_decoder

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model import isolation
from hf_encoderize.model.bidirectional import NotBidirectionalError, encoderize, verify_bidirectional

# flex_attention runs unfused on CPU (no torch.compile), by far the slowest backend here (gemma3_text: 13-95 s).
BACKENDS = ["eager", "sdpa", pytest.param("flex_attention", marks=pytest.mark.slow)]
SLIDING = {
    "llama": {},
    "mistral": {"sliding_window": 4},
    "qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "gemma3_text": {"sliding_window": 4},
}


def _first_position(model, ids):
    return model.model(input_ids=ids).last_hidden_state[0, 0]


def test_later_token_changes_first_position_only_after_patch(decoder):
    ids = torch.randint(0, 100, (1, 10))
    changed = ids.clone()
    changed[0, -1] += 1
    with torch.no_grad():
        assert torch.equal(_first_position(decoder, ids), _first_position(decoder, changed))  # causal: unchanged
        encoderize(decoder)
        assert not torch.allclose(_first_position(decoder, ids), _first_position(decoder, changed))


def test_probe_fails_loudly_on_a_causal_model(decoder):
    with pytest.raises(NotBidirectionalError, match="later_token_changes_first"):
        verify_bidirectional(decoder)
    result = verify_bidirectional(decoder, raise_on_failure=False)
    assert not result.passed
    assert result.checks["every_attention_layer_bidirectional"] is not True
    assert result.checks["packed_documents_isolated"] is True  # isolation works causal or not


def test_probe_catches_a_single_causal_layer(decoder):
    encoderize(decoder)

    def force_causal(module, args, kwargs):  # one layer left causal, as a buggy patch would leave it
        return args, {**kwargs, "attention_mask": None, "is_causal": True}

    decoder.model.layers[1].self_attn.register_forward_pre_hook(force_causal, with_kwargs=True)
    result = verify_bidirectional(decoder, raise_on_failure=False)
    assert result.checks["later_token_changes_first"] is True  # the end-to-end check alone would miss it
    assert "layers.1.self_attn" in result.checks["every_attention_layer_bidirectional"]


def test_probe_builds_its_inputs_on_the_models_device(decoder):
    """On a GPU the default device is the CPU and the model is not on it; every tensor the probe builds must follow
    the model. Here the default device is meta and the model is on the CPU: a tensor built without a device lands
    on meta, and the check that uses it fails (the padding and packing checks did, before they named the device)."""
    encoderize(decoder)
    with torch.device("meta"):
        result = verify_bidirectional(decoder, raise_on_failure=False)
    assert result.passed, result.failures()


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_probe_under_bf16_autocast_passes_and_still_catches_a_leak(backend, monkeypatch):
    """fp32 weights under bf16 autocast (how a GPU run probes, `accelerator.autocast()`) compute in bf16: sdpa's masked
    and unmasked kernels then differ by ~3e-3, which an fp32 tolerance (1e-4) called a leak. A real leak (documents
    not isolated) still differs by ~0.6 and is still caught."""
    model = make_decoder(attn_implementation=backend)
    encoderize(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert verify_bidirectional(model, raise_on_failure=False).passed
        monkeypatch.setattr(isolation, "isolate_documents", lambda *args, **kwargs: contextlib.nullcontext())
        leaky = verify_bidirectional(model, raise_on_failure=False)
    assert "documents leak" in leaky.checks["packed_documents_isolated"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model_type", sorted(SLIDING))
def test_encoderize_passes_probe_for_every_backend(model_type, backend, request):
    from packaging.version import Version
    from transformers import __version__ as transformers_version

    if (model_type, backend) == ("gemma3_text", "flex_attention") and Version(transformers_version) >= Version("5.24"):
        # transformers 5.24's Gemma 3 sliding-window mask function, compiled by torch 2.13's inductor for the CPU,
        # fails in g++ (CppCompileError) on the packed-documents check; 5.17-5.23 pass. `auto` never picks flex on a
        # CPU; on a GPU flex compiles through Triton, not this C++ path (tests/test_gpu.py). Not strict: in a fresh
        # clone's run (2026-11-26, same versions) the compile went through and the probe passed (XPASS).
        request.applymarker(pytest.mark.xfail(raises=NotBidirectionalError, strict=False,
                                              reason="transformers >= 5.24: inductor's CPU C++ compile of Gemma 3's "
                                                     "flex mask fails"))
    model = make_decoder(model_type, backend, **SLIDING[model_type])
    assert not verify_bidirectional(model, raise_on_failure=False).passed
    encoderize(model)
    result = verify_bidirectional(model)
    assert result.passed, result.summary()


def test_hard_coded_causal_buffer_is_replaced():
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    config = GPTNeoConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64,
                          attention_types=[[["global", "local"], 1]], window_size=4)
    model = GPTNeoForCausalLM(config).eval()
    report = encoderize(model)
    assert report.causal_buffers_replaced == 2
    local = model.transformer.h[1].attn.attention.bias[0, 0, :8, :8]
    assert torch.equal(local, local.T) and not local.all()  # symmetric band, not full attention
    assert verify_bidirectional(model).passed


def test_sliding_window_stays_local_but_symmetric():
    model = make_decoder("mistral", "sdpa", sliding_window=3, num_hidden_layers=1)
    encoderize(model)
    ids = torch.randint(0, 100, (1, 12))
    with torch.no_grad():
        base = model.model(input_ids=ids).last_hidden_state[0, 5]
        for position, should_change in ((2, True), (8, True), (11, False), (0, False)):
            changed = ids.clone()
            changed[0, position] += 1
            moved = not torch.allclose(base, model.model(input_ids=changed).last_hidden_state[0, 5])
            assert moved == should_change, position


def test_encoderize_refuses_an_encoder():
    from transformers import BertConfig, BertLMHeadModel

    model = BertLMHeadModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, is_decoder=True))
    with pytest.raises(EncoderizeError, match="already an encoder"):
        encoderize(model)
