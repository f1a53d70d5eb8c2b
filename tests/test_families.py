"""Families the architecture matrix once failed: each is built tiny, encoderized and probed, and must pass.

One backend per family keeps each test to a few seconds; the full matrix (`test_architectures.py`) runs both.
Hybrids pass "on padded rows": their state-space layers carry state across packed documents, their only failing check.
"""

import pytest
import torch

from hf_encoderize.matrix.architectures import PADDED_ROWS, PASS, ArchitectureResult, probe_architecture
from hf_encoderize.model.bidirectional import ProbeResult, encoderize
from hf_encoderize.model.kinds import DECODER, HYBRID
from hf_encoderize.model.tiny import tiny_config

# model type -> the backend probed (eager where the crash was eager-only, or where only eager exists)
DECODERS = {
    "llama4_text": "sdpa",  # chunked-attention layers made bidirectional within each chunk
    "dbrx": "sdpa",
    "cohere_compass_text": "sdpa",
    "gemma3n_text": "sdpa",
    "gemma4_text": "sdpa",
    "longcat_flash": "sdpa",
    "dots3_note_text": "sdpa",
    "modernbert-decoder": "eager",  # eager adds the mask unconditionally: it must be materialised
    "mpt": "eager",
}
HYBRIDS = {
    "bamba": "sdpa",  # the tiny config must keep an attention layer
    "jamba": "sdpa",
    "granitemoehybrid": "sdpa",
    "recurrent_gemma": "sdpa",
    "zamba": "sdpa",
    "zamba2": "sdpa",
    "falcon_h1": "sdpa",
    "lfm2_moe": "sdpa",
    "kimi_linear": "sdpa",
    "bailing_hybrid": "sdpa",
    "qwen4_exp_text": "sdpa",
}


SLOW = {"longcat_flash", "cohere_compass_text", "zamba2", "falcon_h1"}  # over ~3 s each on a laptop CPU


def _params(families: dict) -> list:
    return [pytest.param(t, marks=pytest.mark.slow) if t in SLOW else t for t in sorted(families)]


@pytest.mark.parametrize("model_type", _params(DECODERS))
def test_decoder_family_passes(model_type):
    result = probe_architecture(model_type, backends=(DECODERS[model_type],))
    assert result.kind == DECODER
    assert result.backends == {DECODERS[model_type]: PASS}, result.checks


@pytest.mark.parametrize("model_type", _params(HYBRIDS))
def test_hybrid_family_passes_on_padded_rows(model_type):
    result = probe_architecture(model_type, backends=(HYBRIDS[model_type],))
    assert result.kind == HYBRID and result.passed, result.backends
    checks = result.checks[HYBRIDS[model_type]]
    assert all(value is True for name, value in checks.items() if name != "packed_documents_isolated"), checks


def test_padded_rows_count_as_passing_but_failures_do_not():
    assert ArchitectureResult("x", HYBRID, {"sdpa": PADDED_ROWS, "eager": PASS}).passed
    assert not ArchitectureResult("x", HYBRID, {"sdpa": PADDED_ROWS, "eager": "padding_invariant: changed"}).passed


def test_limitation_cell_names_the_reason_and_the_failing_checks():
    from hf_encoderize.matrix.architectures import _cell

    probe = ProbeResult({"later_token_changes_first": True, "padding_invariant": "left padding changed"})
    cell = _cell("trocr", DECODER, probe)
    assert cell.startswith("transformers limitation: its decoder ignores position_ids") and "padding_invariant" in cell
    assert not ArchitectureResult("trocr", DECODER, {"eager": cell}).passed


@torch.no_grad()
def test_llama4_chunks_are_bidirectional_within_and_isolated_across():
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama4_text")  # attention_chunk_size 4
    config.layer_types, config.num_hidden_layers = ["chunked_attention"], 1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    encoderize(model)
    ids = torch.randint(3, config.vocab_size, (1, 12))
    before = model.model(input_ids=ids).last_hidden_state
    changed = ids.clone()
    changed[0, 3] += 1  # last token of the first chunk (positions 0-3)
    after = model.model(input_ids=changed).last_hidden_state
    moved = (after - before).abs().amax(-1)[0]  # (12,)
    assert bool((moved[:4] > 1e-4).all()), moved  # the whole first chunk sees it, position 0 included
    assert bool((moved[4:] == 0).all()), moved  # the other chunks do not
