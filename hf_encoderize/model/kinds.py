"""What kind of model a config describes (decoder, hybrid, encoder, encoder-decoder, recurrent, multimodal wrapper),
read from the config alone, and the one-line refusal for each kind that cannot become a bidirectional encoder.

Design choices:
- Classified from the config before any weight is downloaded, so an encoder, a seq2seq model, a pure SSM/recurrent
  model or a multimodal wrapper is refused without fetching gigabytes (`loading.load_config`).
- A hybrid (attention interleaved with state-space, linear-recurrence or convolution layers) is encoderizable; its
  attention becomes bidirectional and its other layers stay as they are.
"""

from __future__ import annotations

# Kinds returned by `classify_config`. Only the first two can be encoderized.
DECODER = "decoder-only"
HYBRID = "hybrid attention+SSM"
ENCODER = "encoder"
ENCODER_DECODER = "encoder-decoder"
RECURRENT = "recurrent/SSM"
MULTIMODAL = "multimodal wrapper"
ENCODERIZABLE = (DECODER, HYBRID)

# Pure state-space / recurrent families: there is no attention mask to make bidirectional.
_RECURRENT_TYPES = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}
# Families that interleave attention with SSM / linear-recurrence / convolution layers.
_HYBRID_TYPES = {
    "jamba", "zamba", "zamba2", "bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "lfm2", "lfm2_moe",
    "qwen3_next", "recurrent_gemma", "plamo2", "minimax", "olmo_hybrid", "qwen3_5", "qwen3_5_moe", "kimi_linear",
}  # fmt: skip
# "hybrid" is transformers' layer type for attention plus a linear-attention/convolution state (Inkling, ZAYA), and
# the substring also covers "hybrid_sliding".
_NON_ATTENTION_LAYER_TYPES = ("mamba", "linear", "conv", "recurrent", "ssm", "mlstm", "rwkv", "deltanet", "hybrid")
# A config holding a text sub-config (or vision/audio ones) wraps a text decoder inside a multimodal model.
_MULTIMODAL_SUBCONFIGS = ("vision_config", "audio_config", "speech_config", "vq_config", "image_config")


def classify_config(config) -> str:
    """Return what kind of model `config` describes: one of the module-level kinds (DECODER, HYBRID, ...)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    model_type = config.model_type
    if getattr(config, "is_encoder_decoder", False) or model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return ENCODER_DECODER
    if any(getattr(config, name, None) is not None for name in _MULTIMODAL_SUBCONFIGS + ("text_config",)):
        return MULTIMODAL
    if model_type in _RECURRENT_TYPES:
        return RECURRENT
    layer_types = [str(t) for t in (getattr(config, "layer_types", None) or [])]
    if model_type in _HYBRID_TYPES or any(k in t for t in layer_types for k in _NON_ATTENTION_LAYER_TYPES):
        return HYBRID
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        # BERT-likes also register a causal-LM head (BertLMHeadModel); they are encoders all the same.
        return ENCODER
    return DECODER


def refusal_message(kind: str, model_type: str) -> str:
    if kind == ENCODER:
        return (
            f"{model_type!r} is already an encoder; it needs no attention patch: run `hf-encoderize cpt` on it directly"
        )
    if kind == ENCODER_DECODER:
        return f"{model_type!r} is an encoder-decoder model; pass a decoder-only LLM (e.g. Llama, Qwen, SmolLM2)"
    if kind == RECURRENT:
        return f"{model_type!r} is a state-space/recurrent model with no attention, so it cannot be made bidirectional"
    return (
        f"{model_type!r} is a multimodal wrapper; pass its text-only decoder (e.g. the `*_text` model) instead"
    )
