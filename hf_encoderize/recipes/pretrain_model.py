"""The random model `pretrain` starts from: the paper's sizes or any decoder config, its tokenizer, the special tokens.

Design choices:
- The paper's 210M / 610M / 1B (Appendix A) are built from their numbers here; any transformers decoder config (a
  file, a folder, a Hub id) works too, and an encoder's or a seq2seq's is refused in one line.
- Mask and pad tokens are in place from step 0, so the vocabulary (and the optimizer state) never changes at the
  switch, and a CLM checkpoint can be branched into any split.
- The same seed gives every split the same random init: they differ only in objectives.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from hf_encoderize.common.errors import EncoderizeError

# Paper, Appendix A: EuroBERT-style Llama blocks (RMSNorm, SwiGLU, RoPE theta 10,000), context 2,048, the Llama-3
# tokenizer (vocabulary 128,256). Untied input and output embeddings, as in EuroBERT, whose architecture the paper's
# models follow (the authors' trainer, optimus/trainer/model/encoder/eurobert.py: "tied_weights": False). The names
# 210M / 610M / 1B count the encoder without its LM head (embeddings once); the head adds 128,256 x hidden weights.
PAPER_COMMON = dict(model_type="llama", vocab_size=128256, max_position_embeddings=2048, rope_theta=10000.0,
                    hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000,
                    eos_token_id=128001, attention_bias=False, mlp_bias=False)
PAPER_SIZES = {
    "210M": dict(num_hidden_layers=12, hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                 num_key_value_heads=12),
    "610M": dict(num_hidden_layers=26, hidden_size=1152, intermediate_size=4096, num_attention_heads=18,
                 num_key_value_heads=6),
    "1B": dict(num_hidden_layers=28, hidden_size=1728, intermediate_size=5120, num_attention_heads=18,
               num_key_value_heads=6),
}


def model_config_from(spec: str):
    """A transformers config for `spec`: one of the paper's sizes, a config file, a folder or a Hub id."""
    from transformers import AutoConfig

    from hf_encoderize.model.kinds import DECODER, classify_config

    size = {name.lower(): name for name in PAPER_SIZES}.get(str(spec).lower())
    if size:
        values = {**PAPER_COMMON, **PAPER_SIZES[size]}
        return AutoConfig.for_model(values.pop("model_type"), **values)
    try:
        config = AutoConfig.from_pretrained(spec)
    except (OSError, ValueError, KeyError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise EncoderizeError(f"--model-config {spec!r}: not 210M/610M/1B, a config file or a reachable Hub id "
                              f"({reason})") from None
    if classify_config(config) != DECODER:
        raise EncoderizeError(f"--model-config {spec!r} is a {classify_config(config)} config; pretrain needs a "
                              "decoder-only one (e.g. examples/configs/610m.json)")
    return config


def build_random_model(config, tokenizer_name: str, attn_implementation: str, seed: int, dtype: torch.dtype | None):
    """Tokenizer, random model (seeded by `seed`), special tokens, document isolation. `dtype`: the dtype attention
    trains in."""
    from transformers import AutoModelForCausalLM

    from hf_encoderize.model.attention_backends import check_backend_available, choose_backend
    from hf_encoderize.model.isolation import install_document_isolation
    from hf_encoderize.model.tokens import ensure_special_tokens

    tokenizer = load_pretrain_tokenizer(tokenizer_name)
    check_backend_available(attn_implementation)
    torch.manual_seed(seed)  # the same random init for every split: they differ only in objectives
    # A random model is built in fp32, so without autocast `auto` must not pick flash attention (bf16/fp16 only).
    backend = choose_backend(config, attn_implementation, dtype=dtype or torch.float32)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=backend)
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    # Mask and pad tokens in place from step 0: the vocabulary (and so the optimizer state) never changes at the
    # switch, and a CLM checkpoint can be branched into any split.
    tokens = ensure_special_tokens(model, tokenizer)
    install_document_isolation()  # causal within each packed document in CLM, bidirectional within it in MLM
    return model, tokenizer, tokens


def load_pretrain_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, KeyError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise EncoderizeError(
            f"--tokenizer {name!r}: not a tokenizer folder or a reachable Hub id ({reason})") from None
    if tokenizer.eos_token_id is None:
        raise EncoderizeError(f"--tokenizer {name!r} has no EOS token; packing separates documents with it")
    return tokenizer


def switch_report(model, counts: tuple[int, int], tokens, pack: bool):
    """The switch, for the run record and the encoder's config (what `encoderize` reports for cpt)."""
    from hf_encoderize.model.bidirectional import EncoderizeReport

    return EncoderizeReport(model.config.model_type, model.config._attn_implementation, True, counts[0], counts[1],
                            asdict(tokens), packing=packing_label(pack))


def packing_label(pack: bool) -> str:
    from hf_encoderize.model.bidirectional import PACKED

    return PACKED if pack else "padded rows: --no-pack"
