"""Masked-LM and bidirectional backbone for an encoder converted by hf-encoderize.

Self-contained: imports only torch and transformers, so `trust_remote_code=True` needs nothing else installed.
The classes subclass the original architecture's own transformers classes (named by MODEL_TYPE below), so the
checkpoint's weight names, tied embeddings and attention backends are exactly those of the base model; the only
changes are bidirectional attention and an un-shifted masked-LM loss.
"""

import inspect
import sys
import warnings

import torch
import transformers
from transformers.modeling_outputs import MaskedLMOutput
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

MODEL_TYPE = "__MODEL_TYPE__"  # written by hf-encoderize at save time
HEAD_FILE = "lm_head.safetensors"  # the untied MLM head, kept out of model.safetensors (see model/head_file.py)


def _load_head_file(model, source: str, kwargs: dict) -> None:
    """Copy the head saved in HEAD_FILE (a local folder or a Hub repo) into `model`; nothing when there is none (a
    tied head is the embedding; an older folder holds the head in model.safetensors)."""
    import os

    from safetensors.torch import load_file
    from transformers.utils import cached_file

    path = os.path.join(source, HEAD_FILE) if os.path.isdir(source) else cached_file(
        source, HEAD_FILE, revision=kwargs.get("revision"), cache_dir=kwargs.get("cache_dir"),
        token=kwargs.get("token"), _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False)
    if not path or not os.path.isfile(path):
        return
    own = dict(model.named_parameters())
    for key, tensor in load_file(path).items():
        if key in own:
            own[key].data.copy_(tensor.to(device=own[key].device, dtype=own[key].dtype))


def make_bidirectional(model: torch.nn.Module) -> tuple[int, int]:
    """Make every attention layer bidirectional, in place. Returns `(modules_patched, causal_buffers_replaced)`.

    1. `config.is_causal = False` on the config and its text sub-configs: transformers >= 5.2 then builds
       bidirectional (and symmetric sliding-window) masks;
    2. `module.is_causal = False` wherever the attribute exists: sdpa (when the mask is skipped) and flash read it;
    3. square lower-triangular bool buffers (hard-coded causal masks, e.g. GPT-Neo) become `B | B^T`;
    4. chunked-attention layers (Llama 4): transformers' `create_chunked_causal_mask` ignores `config.is_causal`, so
       it is wrapped (see `_symmetric_chunks`) to attend within the whole chunk, as windows are made symmetric;
    5. eager always gets a materialised mask (see `_materialized_eager_masks`).
    """
    for name in ("", "text_config", "decoder", "language_config", "llm_config"):
        config = getattr(model.config, name, None) if name else model.config
        if config is not None and hasattr(config, "to_dict"):
            config.is_causal = False
            if isinstance(getattr(config, "use_bidirectional_attention", None), bool):
                config.use_bidirectional_attention = True  # Gemma 3 style switch
    modules = buffers = 0
    _make_chunks_symmetric(model)
    _materialized_eager_masks()
    for module in model.modules():
        if isinstance(getattr(module, "is_causal", None), bool):
            module.is_causal = False
            modules += 1
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer is None or buffer.dim() < 2 or buffer.shape[-1] != buffer.shape[-2] or buffer.shape[-1] < 2:
                continue
            as_bool = buffer != 0
            if not torch.equal(as_bool.to(buffer.dtype), buffer):
                continue  # not a 0/1 mask (e.g. an additive -inf mask or real weights)
            if torch.equal(as_bool, as_bool.tril()) and not bool(as_bool.all()):
                setattr(module, name, (as_bool | as_bool.transpose(-1, -2)).to(buffer.dtype))
                buffers += 1
    return modules, buffers


def _symmetric_chunks(original):
    """Wrap `create_chunked_causal_mask`: for a config with `is_causal=False`, a query attends to every key of its
    chunk (before and after it) instead of only the earlier ones. A pass-through for causal configs."""
    from transformers.masking_utils import chunked_overlay, or_masks

    signature = inspect.signature(original)

    def create_chunked_mask(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        config, padding = bound.arguments["config"], bound.arguments.get("attention_mask")
        if getattr(config, "is_causal", True) or config.attention_chunk_size is None:
            return original(*args, **kwargs)
        embeds = bound.arguments["inputs_embeds"]
        if torch.is_tensor(padding) and padding.dim() == 2:  # chunks start after the left padding, as in transformers
            left_padding = (padding.cumsum(dim=-1) == 0).sum(dim=-1).to(embeds.device)
        else:
            left_padding = torch.zeros(embeds.shape[0], dtype=torch.long, device=embeds.device)
        # The causal chunk OR the whole chunk = the whole chunk; padding is still masked by the mask interface.
        whole_chunk = chunked_overlay(config.attention_chunk_size, left_padding)
        previous = bound.arguments.get("or_mask_function")
        bound.arguments["or_mask_function"] = whole_chunk if previous is None else or_masks(previous, whole_chunk)
        return original(*bound.args, **bound.kwargs)

    create_chunked_mask._encoderize_original = original
    return create_chunked_mask


def _make_chunks_symmetric(model: torch.nn.Module) -> None:
    """Swap the chunked-mask builder for `_symmetric_chunks` in transformers' masking module and in every modelling
    module of `model` that imported it by name (once per process: the wrapper is idempotent)."""
    from transformers import masking_utils

    python_modules = {sys.modules.get(type(m).__module__) for m in model.modules()} | {masking_utils}
    for python_module in python_modules - {None}:
        current = getattr(python_module, "create_chunked_causal_mask", None)
        if current is not None and not hasattr(current, "_encoderize_original"):
            python_module.create_chunked_causal_mask = _symmetric_chunks(current)
    mapping = masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING
    if not hasattr(mapping["chunked_attention"], "_encoderize_original"):
        mapping["chunked_attention"] = _symmetric_chunks(mapping["chunked_attention"])


def _materialized_eager_masks() -> None:
    """Never let the eager mask builder return None for a plain bidirectional mask (no padding).

    A causal eager mask is always materialised, and some eager code relies on that (ModernBERT-decoder adds the mask
    unconditionally, MPT calls `.to(bool)` on it); the bidirectional path may skip it. An all-zero (B, 1, T, T) mask
    is cheap next to eager's (B, H, T, T) scores. Wrapped once per process; `_hf_encoderize_original` is passed on so
    that hf_encoderize's document isolation, which wraps the same entry, still recognises its own wrapper inside.
    """
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    current = ALL_MASK_ATTENTION_FUNCTIONS["eager"]
    inner = current
    while inner is not None:
        if getattr(inner, "_encoderize_materialized", False):
            return
        inner = getattr(inner, "_hf_encoderize_original", None)

    def eager_mask(*args, **kwargs):
        return current(*args, **{**kwargs, "allow_is_bidirectional_skip": False})

    eager_mask._encoderize_materialized = True
    if hasattr(current, "_hf_encoderize_original"):
        eager_mask._hf_encoderize_original = current._hf_encoderize_original
    AttentionMaskInterface._global_mapping["eager"] = eager_mask


def unverified_backend(config) -> str | None:
    """One line when `config`'s attention backend never ran in the round trip that saved this folder (the backends
    with a verdict in `hf_encoderize.plain_attention`, under the release recorded there), else None. A verdict holds
    for its release only: a later transformers may give the class a kernel (GPT-Neo's sdpa in 5.24) that no one
    checked for bidirectionality. Folders saved before the release was recorded are not judged."""
    plain = (getattr(config, "hf_encoderize", None) or {}).get("plain_attention") or {}
    ran = [backend for backend, verdict in plain.items() if isinstance(verdict, bool)]
    loaded = getattr(config, "_attn_implementation", None)
    if "transformers" not in plain or not ran or loaded in ran:
        return None
    return (f"hf-encoderize: attention backend {loaded!r} was never verified bidirectional for this encoder (verified "
            f"with transformers {plain['transformers']}: {', '.join(ran)}; this is {transformers.__version__}); "
            f"load with attn_implementation={ran[0]!r}")


def _first_forward(model) -> None:
    """Patch once, after weight loading (which may re-initialise non-persistent buffers), and say so when the loaded
    backend is one the saving round trip never ran."""
    make_bidirectional(model)
    model._bidirectional = True
    message = unverified_backend(model.config)
    if message:
        warnings.warn(message, stacklevel=3)


if MODEL_TYPE in MODEL_MAPPING_NAMES:  # False when hf_encoderize imports this file unfilled for the patch

    class EncoderModel(getattr(transformers, MODEL_MAPPING_NAMES[MODEL_TYPE])):
        """The bidirectional backbone (hidden states), for `AutoModel` with `trust_remote_code=True`."""

        config_class = CONFIG_MAPPING[MODEL_TYPE]

        @classmethod
        def is_custom_code(cls) -> bool:
            return False  # see EncoderForMaskedLM.is_custom_code

        def forward(self, *args, **kwargs):
            if not getattr(self, "_bidirectional", False):
                _first_forward(self)
            kwargs["use_cache"] = False
            return super().forward(*args, **kwargs)


    class EncoderForMaskedLM(getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[MODEL_TYPE])):
        """Bidirectional encoder with its LM head used as an MLM head (the token at i predicts itself)."""

        config_class = CONFIG_MAPPING[MODEL_TYPE]
        # An untied head is saved in lm_head.safetensors, not model.safetensors (so that a plain AutoModel load has
        # no unexpected key to report): missing from the checkpoint here, it is read in `from_pretrained` below.
        _keys_to_ignore_on_load_missing = [r"^lm_head\."]

        @classmethod
        def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
            model = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
            _load_head_file(model, str(pretrained_model_name_or_path), kwargs)
            return model

        @classmethod
        def is_custom_code(cls) -> bool:
            """Initialise like the native class. The weight init here is transformers' own (the inherited
            `_init_weights`, which skips loaded tensors); as "custom code", transformers would skip it on every module
            without tensors of its own, the root included, and buffers only the root's branch sets (FalconH1's
            non-persistent `mup_vector`) would stay uninitialised memory: NaN outputs (found by the round trip)."""
            return False

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                    **kw):
            if not getattr(self, "_bidirectional", False):
                _first_forward(self)
            kw.pop("use_cache", None)
            outputs = super().forward(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                inputs_embeds=inputs_embeds,
                use_cache=False,
                **kw,
            )
            logits = outputs.logits  # (batch, seq, vocab)
            loss = None
            if labels is not None:
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1).float(), labels.flatten().to(logits.device), ignore_index=-100
                )
            return MaskedLMOutput(
                loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
            )
