"""Load any decoder LLM (Hub id, local folder or GGUF file) and refuse what cannot become a bidirectional encoder.

Design choices:
- The config is read first (cheap) and classified before any weight is downloaded, so an encoder, a seq2seq model, a
  pure SSM/recurrent model or a multimodal wrapper is refused in one line without fetching gigabytes.
- GGUF files go through transformers' own `from_pretrained(..., gguf_file=...)` path (which needs the `gguf` package),
  so the de-quantised weights and the tokenizer are exactly what transformers reads.
- `trust_remote_code` is off unless the user asks for it.
- A load that fails on a local folder is explained from the folder itself (`local_folder_problem`): missing or corrupt
  config.json, missing or corrupt tokenizer files, missing or corrupt weights, each named by file, rather than from
  whatever exception transformers happened to raise.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.errors import EncoderizeError

# Errors a load can raise for a bad source (safetensors' own error is neither an OSError nor a ValueError).
_LOAD_ERRORS = (OSError, ValueError, KeyError, RuntimeError, EOFError, TypeError, AttributeError, ImportError)
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "tokenizer_config.json",
)
_JSON_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")

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
_NON_ATTENTION_LAYER_TYPES = ("mamba", "linear", "conv", "recurrent", "ssm", "mlstm", "rwkv", "deltanet")
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
    """Attention backend: auto (the fastest the architecture supports and this machine has: flash_attention_2 with
    flash-attn on a GPU, then flex_attention on a GPU, then sdpa, then eager), eager, sdpa, flex_attention,
    flash_attention_2 or flash_attention_3. The run record says which ran."""
    dtype: str = "auto"
    """Weights dtype: auto, float32, bfloat16 or float16."""
    trust_remote_code: bool = False
    """Run modelling code from the Hub repo. Off unless the user asks for it."""

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


def _load_error_message(cfg: LoadConfig, err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if cfg.gguf_file:
        if "gguf" in text.lower() and ("install" in text.lower() or "not available" in text.lower()):
            return "reading GGUF files needs the gguf package: pip install 'hf-encoderize[gguf]'"
        return (
            f"cannot read GGUF file {cfg.gguf_file!r} in {cfg.source!r} (corrupt or unsupported architecture): {text}"
        )
    if not os.path.exists(cfg.source) and ("/" in cfg.source and cfg.source.startswith((".", "/", "~"))):
        return f"model folder {cfg.source!r} not found (the path does not exist); check the path"
    if os.path.isdir(cfg.source):
        return local_folder_problem(Path(cfg.source)) or f"cannot load the local model folder {cfg.source!r}: {text}"
    return f"cannot load {cfg.source!r}: not a local model folder or a reachable Hub model id ({text})"


def _safetensor_error() -> type[Exception]:
    try:
        from safetensors import SafetensorError
    except ImportError:  # an older safetensors: its errors then surface as OSError/RuntimeError
        return OSError
    return SafetensorError


def local_folder_problem(folder: Path) -> str | None:
    """What is wrong with a local model folder, in one line naming the file, or None when nothing is found.

    Checked in the order transformers reads: config.json, the tokenizer files, then the weights."""
    where = str(folder)
    if not (folder / "config.json").is_file():
        return f"{where!r} has no config.json, so it is not a model folder; pass a folder written by save_pretrained"
    problem = _json_problem(folder / "config.json", must_be_object=True)
    if problem:
        return f"corrupt config.json in {where!r} ({problem}); re-download or re-save the model"
    for name in _JSON_TOKENIZER_FILES:
        problem = (folder / name).is_file() and _json_problem(folder / name, must_be_object=name != "vocab.json")
        if problem:
            return f"corrupt tokenizer file ({name}: {problem}) in {where!r}; re-download or re-save the tokenizer"
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return (f"no tokenizer files in {where!r} (tokenizer.json, tokenizer.model or vocab files); save the tokenizer "
                "next to the model (tokenizer.save_pretrained)")
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin"))
    if not weights:
        return f"no weights file (model.safetensors or pytorch_model.bin) in {where!r}; re-download or re-save it"
    for path in (w for w in weights if w.suffix == ".safetensors"):
        problem = _safetensors_problem(path)
        if problem:
            return f"corrupt weights (file {path.name}: {problem}) in {where!r}; re-download or re-save the model"
    return None


def _json_problem(path: Path, *, must_be_object: bool) -> str | None:
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        return f"not valid JSON: {err}"
    if must_be_object and not isinstance(value, dict):
        return f"holds a JSON {type(value).__name__}, not an object"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors; a truncated download leaves a
    file shorter than the header says (which loads lazily and would fail only later, or not at all on some tensors)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return "header larger than the file (truncated or not a safetensors file)"
        try:
            header = json.loads(handle.read(length))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, IndexError, AttributeError):
            return "unreadable header (not a safetensors file)"
    if 8 + length + end > size:
        return f"truncated: {size} bytes, the header describes {8 + length + end}"
    return None


def load_decoder(cfg: LoadConfig | str, *, model_kwargs: dict | None = None, **overrides):
    """Load a decoder LLM and its tokenizer. Returns `(model, tokenizer)`, the model in eval mode.

    `model_kwargs` go to `from_pretrained` (e.g. a bitsandbytes `quantization_config` for QLoRA).
    `cfg` is a `LoadConfig` or just the source string, with `LoadConfig` fields as keyword overrides:
    `load_decoder("HuggingFaceTB/SmolLM2-135M", revision="main")`.
    Raises `EncoderizeError` (one line) for a missing model, a corrupt GGUF or a model that is not a decoder.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(cfg, str):
        cfg = LoadConfig(cfg, **overrides)
    check_backend_available(cfg.attn_implementation)
    config = load_config(cfg)
    backend = choose_backend(config, cfg.attn_implementation, cfg.trust_remote_code)
    kwargs = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    if cfg.gguf_file:
        kwargs["gguf_file"] = cfg.gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            cfg.source, config=config, dtype=cfg.dtype, attn_implementation=backend,
            **kwargs, **(model_kwargs or {}),
        )
    except (*_LOAD_ERRORS, _safetensor_error()) as err:
        raise EncoderizeError(_load_error_message(cfg, err)) from None
    if cfg.gguf_file:
        _forget_gguf_quantization(model)
    return model.eval(), tokenizer


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


# Fastest first. flex_attention's document BlockMask skips the cross-document tiles of packed rows and keeps GQA
# unexpanded; sdpa with a packed row gets a dense block-diagonal mask (no flash kernel, K/V expanded). On CPU flex runs
# through compiled CPU kernels that measured slower than sdpa for our packed batches, so CPU keeps sdpa.
_SUPPORT_FLAGS = {"flash_attention_2": "_supports_flash_attn", "flex_attention": "_supports_flex_attn",
                  "sdpa": "_supports_sdpa", "eager": None}


def backend_candidates() -> list[str]:
    """The backends `auto` tries on this machine, fastest first."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return ["sdpa", "eager"]
    flash = ["flash_attention_2"] if importlib.util.find_spec("flash_attn") is not None else []
    return [*flash, "flex_attention", "sdpa", "eager"]


def choose_backend(config, requested: str, trust_remote_code: bool = False) -> str:
    """`requested`, checked against what the architecture supports; for `auto`, the fastest candidate it supports.

    Checked on the model class before any weight is read, so an unsupported backend is one line naming it, not a load
    failure blamed on the model's location."""
    model_class = _causal_lm_class(config, trust_remote_code)
    if model_class is None:  # remote code or an unmapped config: let transformers decide
        return None if requested == "auto" else requested
    supported = [b for b in _SUPPORT_FLAGS if _SUPPORT_FLAGS[b] is None or getattr(model_class, _SUPPORT_FLAGS[b], 0)]
    if requested == "auto":
        return next(b for b in backend_candidates() if b in supported)
    flag = _SUPPORT_FLAGS.get(requested, "_supports_flash_attn")
    if flag and not getattr(model_class, flag, False):
        raise EncoderizeError(f"{config.model_type} ({model_class.__name__}) does not support --attn-implementation "
                              f"{requested}; use --attn-implementation auto (picks {choose_backend(config, 'auto')}) "
                              "or eager")
    return requested


def _causal_lm_class(config, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM

    if trust_remote_code and getattr(config, "auto_map", None):
        return None
    return AutoModelForCausalLM._model_mapping.get(type(config), None) if type(config) in \
        AutoModelForCausalLM._model_mapping else None


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
