"""The architecture matrix (probe + round trip through plain transformers) must not regress below the count committed
in docs/architectures.md."""

from pathlib import Path

import pytest

from hf_encoderize.matrix.architectures import parse_committed_count, passing_count, render_markdown, run_matrix
from hf_encoderize.model.kinds import DECODER, ENCODER, ENCODER_DECODER, MULTIMODAL, RECURRENT

TABLE = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"


@pytest.mark.slow
def test_matrix_does_not_regress():
    results = run_matrix()
    committed = parse_committed_count(TABLE.read_text())
    assert passing_count(results) >= committed, render_markdown(results)
    kinds = {r.model_type: r.kind for r in results}
    assert kinds["llama"] == DECODER and kinds["bert"] == ENCODER and kinds["bart"] == ENCODER_DECODER
    assert kinds["mamba"] == RECURRENT and kinds["gemma3"] == MULTIMODAL
    by_type = {r.model_type: r for r in results}
    for model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma2", "phi3", "gpt2", "smollm3",
                       "stablelm", "bloom", "gptj"):
        assert by_type[model_type].passed, (model_type, by_type[model_type].backends, by_type[model_type].roundtrip)
    assert "saved default eager" in by_type["stablelm"].roundtrip  # sdpa stays causal in plain transformers
    assert by_type["llama"].roundtrip.startswith("pass (sdpa, eager, flex_attention")
