"""Load any decoder LLM (Hub id, local folder or GGUF file) and refuse what cannot become a bidirectional encoder.

Design choices:
- The config is read first (cheap) and classified before any weight is downloaded, so an encoder, a seq2seq model, a
  pure SSM/recurrent model or a multimodal wrapper is refused in one line without fetching gigabytes.
- GGUF files go through transformers' own `from_pretrained(..., gguf_file=...)` path (which needs the `gguf` package),
  so the de-quantised weights and the tokenizer are exactly what transformers reads.
- `trust_remote_code` is off unless the user asks for it.
- `--attn-implementation auto` (the default) tries the backends fastest first (`backend_candidates`) and skips, each
  with its reason in the list `load_decoder_trying` returns: one this machine cannot run, one the model class does not
  declare (`_supports_flash_attn`, `_supports_flex_attn`, `_supports_sdpa`, checked before any weight is read), flash
  attention for a hybrid (its varlen path flattens the batch into one row, along which state-space layers would
  carry state), and one whose load fails with an attention-backend error. The caller then probes the encoderized
  model where it trains and excludes a backend that fails (`encoderize_where_it_trains`). An explicit backend is
  taken as asked; one the architecture lacks is a one-line error, never blamed on the model's location.
- A load that fails is explained in one line by `load_errors` (from the folder itself where there is one).
"""

from __future__ import annotations

import contextlib
import copy
import re
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.model.head_file import head_path, load_head
from hf_encoderize.model.load_errors import LOAD_ERRORS as _LOAD_ERRORS
from hf_encoderize.model.load_errors import load_error_message as _load_error_message
from hf_encoderize.model.load_errors import safetensor_error as _safetensor_error

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


@dataclass
class LoadConfig:
    """Where the decoder comes from and how to load it."""

    source: str
    """A Hub id (`org/name`), a local folder, or a `.gguf` file (local path, or a Hub repo id with `gguf_file`)."""
    _: KW_ONLY
    revision: str | None = None
    """Hub revision (branch, tag or commit) to load; ignored for local sources."""
    gguf_file: str | None = None
    """File name of a GGUF inside the Hub repo or folder given as `source`."""
    attn_implementation: str = "auto"
    """Attention backend: auto (the fastest the architecture supports that loads and passes the bidirectionality
    probe here: flash_attention_2 with flash-attn on a GPU in bf16/fp16, then flex_attention on a GPU, then sdpa, then
    eager), eager, sdpa, flex_attention, flash_attention_2 or flash_attention_3. The run record says which ran."""
    dtype: str = "auto"
    """Weights dtype: auto, float32, bfloat16 or float16."""
    trust_remote_code: bool = field(default=False, metadata=identity(HARMLESS))
    """Run modelling code from the Hub repo. Off unless the user asks for it."""

    @property
    def input_path(self) -> str:
        """What an output folder must never be, hold or sit in (`common.outputs`): the GGUF file itself when one is
        named (its folder may hold other models and our outputs beside them), else the model folder or Hub id."""
        return str(Path(self.source) / self.gguf_file) if self.gguf_file else self.source

    def __post_init__(self):
        backends = ("auto", "eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")
        if self.attn_implementation not in backends:
            raise EncoderizeError(
                f"unknown attention backend {self.attn_implementation!r}; choose one of {', '.join(backends)}"
            )
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise EncoderizeError(f"unknown dtype {self.dtype!r}; choose auto, float32, bfloat16 or float16")
        if self.source.endswith(".gguf") and self.gguf_file is None and not Path(self.source).is_file():
            if Path(self.source).parent.is_dir() or "/" not in self.source:
                raise EncoderizeError(f"GGUF file {self.source!r} does not exist; check the path")
        if self.source.endswith(".gguf") and Path(self.source).is_file():
            # A local GGUF path: transformers wants the folder plus the file name.
            path = Path(self.source).resolve()
            self.source, self.gguf_file = str(path.parent), path.name


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


def load_config(cfg: LoadConfig):
    """Read and classify the config; raise `EncoderizeError` for a missing source or a non-decoder."""
    from transformers import AutoConfig

    kwargs = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    if cfg.gguf_file:
        kwargs["gguf_file"] = cfg.gguf_file
    try:
        config = AutoConfig.from_pretrained(cfg.source, **kwargs)
    except _LOAD_ERRORS as err:
        raise EncoderizeError(_load_error_message(cfg, err)) from None
    kind = classify_config(config)
    if kind not in ENCODERIZABLE:
        raise EncoderizeError(refusal_message(kind, config.model_type))
    return config


def load_decoder(cfg: LoadConfig | str, *, model_kwargs: dict | None = None, **overrides):
    """Load a decoder LLM and its tokenizer. Returns `(model, tokenizer)`, the model in eval mode.

    `model_kwargs` go to `from_pretrained` (e.g. a bitsandbytes `quantization_config` for QLoRA).
    `cfg` is a `LoadConfig` or just the source string, with `LoadConfig` fields as keyword overrides:
    `load_decoder("HuggingFaceTB/SmolLM2-135M", revision="main")`.
    Raises `EncoderizeError` (one line) for a missing model, a corrupt GGUF, a model that is not a decoder, or an
    explicit attention backend the architecture does not support.
    """
    if isinstance(cfg, str):
        cfg = LoadConfig(cfg, **overrides)
    model, tokenizer, _ = load_decoder_trying(cfg, model_kwargs=model_kwargs)
    return model, tokenizer


def load_decoder_trying(cfg: LoadConfig, *, model_kwargs: dict | None = None, exclude: dict[str, str] | None = None,
                        compute_dtype=None):
    """`load_decoder`, returning `(model, tokenizer, tried)` where `tried` lists the backends considered, fastest
    first: `[{"backend": "flash_attention_2", "skipped": "needs a CUDA or ROCm GPU"}, ..., {"backend": "sdpa",
    "skipped": None}]`, the last one the backend that loaded.

    `exclude`: backend -> why (`auto` only), e.g. one whose model failed the probe. `compute_dtype`: the dtype attention
    runs in (the autocast dtype when training under mixed precision), for flash attention's bf16/fp16 requirement;
    default: the weights' dtype."""
    from transformers import AutoTokenizer

    check_backend_available(cfg.attn_implementation)
    config = load_config(cfg)
    plan = backend_plan(config, cfg.attn_implementation, cfg.trust_remote_code,
                        compute_dtype or _weights_dtype(cfg, config))  # an unsupported explicit backend stops here
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.source, **_source_kwargs(cfg))
    except (*_LOAD_ERRORS, _safetensor_error()) as err:
        raise EncoderizeError(_load_error_message(cfg, err)) from None
    tried = []
    for backend, skipped in plan:
        skipped = skipped or (exclude or {}).get(backend)
        model, skipped = (None, skipped) if skipped else _load_model(cfg, config, backend, model_kwargs)
        tried.append({"backend": backend, "skipped": skipped})
        if model is not None:
            return model, tokenizer, tried
    reasons = "; ".join(f"{t['backend']}: {t['skipped']}" for t in tried)
    raise EncoderizeError(f"no attention backend works for {config.model_type} here ({reasons})")


def _source_kwargs(cfg: LoadConfig) -> dict:
    kwargs = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    if cfg.gguf_file:
        kwargs["gguf_file"] = cfg.gguf_file
    return kwargs


def _load_model(cfg: LoadConfig, config, backend: str, model_kwargs: dict | None):
    """`(model, None)`, or with `auto` `(None, why)` when the load fails for this backend only. Any other failure
    raises a one-line `EncoderizeError`."""
    from transformers import AutoModelForCausalLM

    head = None if cfg.gguf_file else head_path(cfg.source, cfg.revision)  # a saved encoder's untied MLM head
    try:
        # A copy: from_pretrained writes the backend into the config, and a failed try must not leak into the next.
        with _no_missing_head_report(head):
            model = AutoModelForCausalLM.from_pretrained(cfg.source, config=copy.deepcopy(config), dtype=cfg.dtype,
                                                         attn_implementation=backend, **_source_kwargs(cfg),
                                                         **(model_kwargs or {}))
    except (*_LOAD_ERRORS, _safetensor_error()) as err:
        reason = _backend_error(err)
        if reason is None:
            raise EncoderizeError(_load_error_message(cfg, err)) from None
        if cfg.attn_implementation != "auto":
            raise EncoderizeError(f"{config.model_type} cannot load with --attn-implementation {backend} ({reason}); "
                                  "use --attn-implementation auto or eager") from None
        return None, f"load failed: {reason}"
    if cfg.gguf_file:
        _forget_gguf_quantization(model)
    if head:
        load_head(model, head)
    return model.eval(), None


@contextlib.contextmanager
def _no_missing_head_report(head: str | None):
    """Without transformers' LOAD REPORT for the `lm_head` the checkpoint lacks on purpose (`head_file`): it is
    read from its own file right after."""
    import logging

    reporter = logging.getLogger("transformers.modeling_utils")
    before = reporter.level
    if head:
        reporter.setLevel(logging.ERROR)
    try:
        yield
    finally:
        reporter.setLevel(before)


def _forget_gguf_quantization(model) -> None:
    """transformers de-quantises GGUF weights on load but keeps a `gguf` quantizer tag that blocks
    `save_pretrained`; the tensors are plain floats, so drop the tag."""
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)


def load_encoder(cfg: LoadConfig, *, model_kwargs: dict | None = None):
    """Load a native encoder (BERT, ModernBERT, MiniLM, ...) with its MLM head, for the paper's MLM->MLM CPT
    baseline (section 5). Returns `(model, tokenizer)`."""
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    kwargs = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.source, **kwargs)
        config = AutoConfig.from_pretrained(cfg.source, **kwargs)
        model = AutoModelForMaskedLM.from_pretrained(cfg.source, config=config, dtype=cfg.dtype,
                                                     attn_implementation=None if cfg.attn_implementation ==
                                                     "auto" else cfg.attn_implementation,
                                                     **kwargs, **(model_kwargs or {}))
    except (*_LOAD_ERRORS, _safetensor_error()) as err:
        raise EncoderizeError(_load_error_message(cfg, err)) from None
    if tokenizer.mask_token is None:
        raise EncoderizeError(f"{cfg.source!r} is an encoder without a mask token; it cannot be trained with MLM")
    return model.eval(), tokenizer


def is_native_encoder(cfg: LoadConfig) -> bool:
    """True when `cfg.source` is an encoder (checked from its config only)."""
    from transformers import AutoConfig

    if cfg.gguf_file:
        return False
    try:
        config = AutoConfig.from_pretrained(cfg.source, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    except _LOAD_ERRORS:
        return False  # load_decoder reports the problem in its own words
    return classify_config(config) == ENCODER


# Fastest first. flash-attn's varlen kernel runs packed documents as segments (`cu_seqlens`, no mask at all);
# flex_attention's document BlockMask skips the cross-document tiles of packed rows and keeps GQA unexpanded; sdpa with
# a packed row gets a dense block-diagonal mask (no flash kernel, K/V expanded); eager materialises the scores.
#
# CPU: sdpa, then eager. flex_attention cannot train on CPU (torch 2.13: "FlexAttention does not support backward on
# CPU"; `tests/test_attention_auto.py` notices when that changes) and its forward is 1.4x slower than sdpa. Measured
# with `python tests/test_attention_auto.py` (torch 2.13, 2-core CPU, otherwise idle; tiny Llama hidden 256, 4 layers,
# 8 rows x 512 tokens each packed with documents of 250 + 262 tokens, `packed_forward` with `packed_inputs`, mean of
# 10 steps after 3 warm-up, two runs):
#   forward+backward: sdpa 0.59-0.60 s, eager 1.08-1.10 s, flex_attention unsupported;
#   forward: sdpa 0.21 s, eager 0.28-0.34 s, flex_attention 0.28 s.
_BACKEND_ORDER = ("flash_attention_2", "flex_attention", "sdpa", "eager")
_SUPPORT_FLAGS = {"flash_attention_2": "_supports_flash_attn", "flash_attention_3": "_supports_flash_attn",
                  "flex_attention": "_supports_flex_attn", "sdpa": "_supports_sdpa"}
# What transformers raises when a model class lacks a backend or the backend cannot run here, e.g. "GPTJForCausalLM
# does not support an attention implementation through torch.nn.functional.scaled_dot_product_attention yet".
_BACKEND_ERROR = re.compile(r"attention implementation|attn_implementation|flash.?attention|flash_attn|flex.?attention|"
                            r"scaled_dot_product_attention", re.IGNORECASE)


def machine_skips(dtype=None) -> dict[str, str]:
    """Why `auto` leaves a backend out on this machine, by backend (those absent can run here). `dtype`: the dtype
    attention computes in, when known."""
    import torch

    if not torch.cuda.is_available():
        return {"flash_attention_2": "needs a CUDA or ROCm GPU",
                "flex_attention": "on CPU: no backward pass, and a slower forward than sdpa"}
    problem = _flash_attention_2_problem(dtype)
    return {"flash_attention_2": problem} if problem else {}


def _flash_attention_2_problem(dtype) -> str | None:
    import torch

    try:
        import flash_attn  # noqa: F401  (imported, not just found: a build for another torch fails here)
    except Exception as err:  # ImportError, or OSError for an undefined symbol
        return f"flash_attn does not import ({type(err).__name__}; pip install flash-attn)"
    if torch.version.hip is None and torch.cuda.get_device_capability() < (8, 0):
        return f"needs an Ampere or newer GPU (this one is sm{''.join(map(str, torch.cuda.get_device_capability()))})"
    if dtype is not None and dtype not in (torch.bfloat16, torch.float16):
        return f"runs in bf16/fp16 only, and attention would run in {str(dtype).removeprefix('torch.')}"
    return None


def backend_candidates(dtype=None) -> list[str]:
    """The backends `auto` tries on this machine, fastest first."""
    skips = machine_skips(dtype)
    return [backend for backend in _BACKEND_ORDER if backend not in skips]


def backend_plan(config, requested: str, trust_remote_code: bool = False, dtype=None) -> list[tuple[str, str | None]]:
    """The backends to try in order, each with why it is skipped (None: try it). An explicit backend is the only one;
    one the architecture's class does not support raises a one-line `EncoderizeError`. Checked on the class, before
    any weight is read."""
    unsupported = {**_class_skips(config, trust_remote_code), **_hybrid_skips(config)}
    if requested != "auto":
        if requested in _hybrid_skips(config):
            picks = next(b for b, why in backend_plan(config, "auto", trust_remote_code, dtype) if why is None)
            raise EncoderizeError(f"--attn-implementation {requested} cannot train {config.model_type}: "
                                  f"{_hybrid_skips(config)[requested]}; use --attn-implementation auto (picks {picks})")
        if requested in unsupported:
            picks = next(b for b, why in backend_plan(config, "auto", trust_remote_code, dtype) if why is None)
            model_class = _causal_lm_class(config, trust_remote_code).__name__
            raise EncoderizeError(f"{config.model_type} ({model_class}) does not support "
                                  f"--attn-implementation {requested}; use --attn-implementation auto (picks {picks}) "
                                  "or eager")
        return [(requested, None)]
    skips = {**machine_skips(dtype), **unsupported}  # the class's reason first: it holds on every machine
    return [(backend, skips.get(backend)) for backend in _BACKEND_ORDER]


def choose_backend(config, requested: str, trust_remote_code: bool = False, dtype=None) -> str | None:
    """`requested`, checked against what the architecture supports; for `auto`, the fastest candidate it supports
    (None for remote code: transformers then takes sdpa if the class supports it, else eager). `dtype`: the dtype
    attention computes in, when known (flash attention takes bf16/fp16 only)."""
    if requested == "auto" and _causal_lm_class(config, trust_remote_code) is None:
        return None
    return next(backend for backend, why in backend_plan(config, requested, trust_remote_code, dtype) if why is None)


def _class_skips(config, trust_remote_code: bool) -> dict[str, str]:
    """Backends the model class does not declare support for (none known for remote code or an unmapped config)."""
    model_class = _causal_lm_class(config, trust_remote_code)
    if model_class is None:
        return {}
    return {backend: f"{model_class.__name__} does not support it" for backend, flag in _SUPPORT_FLAGS.items()
            if not getattr(model_class, flag, False)}


def _hybrid_skips(config) -> dict[str, str]:
    """Flash attention for a hybrid: its varlen kernel gets the batch flattened into one row
    (`isolation.packed_forward`), and state-space layers would carry state along it, from one row's document into the
    next row's, packed or padded."""
    if classify_config(config) != HYBRID:
        return {}
    why = "the batch is flattened into one row for it, and the state-space layers would carry state along it"
    return {backend: why for backend in ("flash_attention_2", "flash_attention_3")}


def _causal_lm_class(config, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM

    if trust_remote_code and getattr(config, "auto_map", None):
        return None
    return AutoModelForCausalLM._model_mapping.get(type(config), None) if type(config) in \
        AutoModelForCausalLM._model_mapping else None


def _backend_error(err: Exception) -> str | None:
    """The first sentence of a load error that is about the attention backend, else None."""
    text = " ".join(str(err).split())
    return text.split(". ")[0].rstrip(".") if _BACKEND_ERROR.search(text) else None


def _weights_dtype(cfg: LoadConfig, config):
    """The dtype the weights load in: `--dtype`, else the checkpoint's (fp32 when it names none)."""
    import torch

    name = cfg.dtype if cfg.dtype != "auto" else getattr(config, "dtype", None) or "float32"
    return name if isinstance(name, torch.dtype) else getattr(torch, str(name).removeprefix("torch."), torch.float32)


def check_backend_available(attn_implementation: str) -> None:
    """Refuse flash attention up front when there is no GPU or no flash-attn package, before any download."""
    if not attn_implementation.startswith("flash_attention"):
        return
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        raise EncoderizeError(f"{attn_implementation} needs a CUDA or ROCm GPU; use --attn-implementation sdpa on CPU")
    package = "flash_attn_interface" if attn_implementation == "flash_attention_3" else "flash_attn"
    if importlib.util.find_spec(package) is None:
        raise EncoderizeError(
            f"{attn_implementation} needs the {package} package: pip install flash-attn, or use sdpa"
        )
