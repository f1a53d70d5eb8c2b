"""Tiny configs of any model type: hidden size 32, two layers (one of each kind for hybrids), vocabulary 256.

Derived from the model type's default config by shrinking every size field it has, plus per-family fixes the generic
shrinking cannot infer. Saving asks it which backends plain transformers runs bidirectionally for a model type
(`plain_attention`); the architecture matrix and the tests build their tiny models from it.
"""

from __future__ import annotations

# Size fields shrunk when the default config has them. Values keep head_dim = 32 / 4 = 8.
_TINY = {
    "hidden_size": 32, "n_embd": 32, "d_model": 32, "embed_dim": 32, "dim": 32, "model_dim": 32,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "num_key_value_heads": 2, "n_kv_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2,
    "head_dim": 8, "kv_channels": 8, "attention_head_dim": 8,
    "intermediate_size": 64, "n_inner": 64, "ffn_dim": 64, "ffn_hidden_size": 64, "d_ff": 64,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8,
    "vocab_size": 256, "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128, "seq_length": 128,
    "rotary_dim": 4, "sliding_window": 4, "window_size": 4, "attention_chunk_size": 4, "first_k_dense_replace": 1,
    "moe_k": 2,
    # state-space / linear-attention parts of hybrids
    "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_headdim": 8, "mamba_d_state": 8, "mamba_n_groups": 1,
    "ssm_state_size": 8, "n_groups": 1, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    # per-layer input embeddings (Gemma 3n / 4), shared experts, sparse-attention indexers
    "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 8, "shared_experts_intermediate_size": 32,
    "index_head_dim": 8, "index_n_heads": 2, "num_experts_per_token": 2, "num_expert_group": 1,
    "linear_head_dim": 8, "linear_num_heads": 4,
}  # fmt: skip


def _pattern(layer_types: list) -> list:
    """Keep one layer of each kind (first occurrence order), at least two layers."""
    kinds = list(dict.fromkeys(layer_types))
    return kinds if len(kinds) >= 2 else kinds * 2


# Fields that list one entry per layer, under their various names (`layer_types` is the modern one).
_LAYER_PATTERN_FIELDS = ("layer_types", "layers_block_type", "block_types")

# Per-family fixes the generic shrinking cannot infer; each says why.
_FAMILY = {  # fmt: skip
    # hybrids whose defaults put no attention layer in the first two layers: position 0 would see nothing later
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    # Zamba ties every hybrid layer's shared transformer to the first one's and fails when there is no second one
    "zamba": {"layers_block_type": ["linear_attention", "hybrid", "hybrid"], "num_hidden_layers": 3},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},  # the default has no attention
    # Mamba heads must tile the Mamba inner size (2 x hidden, or mamba_d_ssm)
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8},
    "zaya": {"num_experts_per_tok": 1},  # ZAYA supports top-1 routing only
    # the sparse-attention indexer has no defaults; a budget of 16 tokens covers the probe's 12-token rows
    "qwen4_exp_text": {
        "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 8, "indexer_budget": 16,
        "indexer_compress_ratio": 4, "hc_lowrank": 8,
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},  # the default derives none
    "lfm2": {"layer_types": ["conv", "full_attention"]},  # the derived pattern has no conv layer at 2 layers
    # per-layer-type rotary parameters are read by layer type, and the default config has none
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            kind: {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
            for kind in ("sliding_attention", "full_attention")
        },
    },
    # the last 15 layers share earlier layers' KV caches, and the sparsity pattern lists 35 layers
    "gemma3n_text": {"num_kv_shared_layers": 0, "activation_sparsity_pattern": [0.95, 0.0], "laurel_rank": 4},
    # the sliding-window layers' multi-head latent attention sizes come from swa_* fields
    "dots3_note_text": {
        "swa_num_attention_heads": 4, "swa_num_key_value_heads": 4, "swa_q_lora_rank": 16, "swa_kv_lora_rank": 16,
        "swa_head_dim": 8, "swa_qk_nope_head_dim": 4, "swa_v_head_dim": 8, "head_dim": 8,
    },
    # rotary embeddings are sized by head_dim, which must equal the rotary part of the latent-attention head
    "longcat_flash": {"head_dim": 4, "zero_expert_num": 2, "expert_ffn_hidden_size": 32},
    # DbrxAttention reads attn_config.rope_theta, a field real checkpoints carry but the config class lacks
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},  # clip_qkv=None crashes clamp
        "ffn_config": {"hidden_size": 32, "ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    },
}


def _layer_overrides(present: dict, overrides: dict) -> None:
    """Shrink per-layer lists to one layer of each kind and set the layer counts to match."""
    for key in _LAYER_PATTERN_FIELDS:
        if isinstance(present.get(key), list) and present[key]:
            overrides[key] = _pattern(present[key])
            for count in ("num_hidden_layers", "num_layers", "n_layer"):
                if count in overrides:
                    overrides[count] = len(overrides[key])
    layers = next((overrides[k] for k in ("num_hidden_layers", "num_layers", "n_layer") if k in overrides), 2)
    if isinstance(present.get("mlp_layer_types"), list) and present["mlp_layer_types"]:
        kinds = list(dict.fromkeys(present["mlp_layer_types"]))  # dense first, then sparse: keep both
        overrides["mlp_layer_types"] = (kinds * layers)[:layers]


def tiny_config(model_type: str):
    """A tiny config for `model_type`, derived from its default config."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    present = default.to_dict()
    overrides = {key: value for key, value in _TINY.items() if key in present}
    if "kv_lora_rank" in present:
        # multi-head latent attention derives its head dims from the ranks and has one key head per query head
        overrides.pop("head_dim", None)
        overrides["num_key_value_heads"] = overrides.get("num_attention_heads", 4)
    if present.get("sliding_window") is None:
        overrides.pop("sliding_window", None)  # None means "disabled": keep it so
    for token in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(present.get(token), int) and present[token] >= _TINY["vocab_size"]:
            overrides[token] = 1
    _layer_overrides(present, overrides)
    if model_type == "gpt_neo":
        overrides["attention_types"] = [[["global", "local"], 1]]  # one global and one local layer
    overrides.update(_FAMILY.get(model_type, {}))
    attempts = [{}, {"layer_types": None}, {"num_key_value_heads": overrides.get("num_attention_heads")}]
    for attempt, change in enumerate(attempts):
        # Retry with layer_types derived by the config itself, then with plain multi-head attention.
        trial = {k: v for k, v in {**overrides, **change}.items() if v is not None}
        try:
            return AutoConfig.for_model(model_type, **trial)
        except Exception:
            if attempt == len(attempts) - 1:
                raise
