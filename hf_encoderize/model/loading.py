"""Load any decoder LLM (Hub id, local folder or GGUF file) and refuse what cannot become a bidirectional encoder.

Design choices:
- The config is read first (cheap) and classified before any weight is downloaded (`model.kinds`), so what cannot
  become a bidirectional encoder is refused in one line without fetching gigabytes.
- GGUF files go through transformers' own `from_pretrained(..., gguf_file=...)` path (which needs the `gguf` package),
  so the de-quantised weights and the tokenizer are exactly what transformers reads.
- `trust_remote_code` is off unless the user asks for it.
- `--attn-implementation auto` (the default) tries the backends fastest first (`model.attention_backends`), skipping
  with its reason in the list `load_decoder_trying` returns each one this machine or the model class cannot run, and
  one whose load fails with an attention-backend error. The caller then probes the encoderized model where it trains
  and excludes a backend that fails (`encoderize_where_it_trains`).
- A load that fails is explained in one line by `load_errors` (from the folder itself where there is one).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.validation import check_choice
from hf_encoderize.model.attention_backends import (
    AttentionBackend,
    backend_error,
    backend_plan,
    check_backend_available,
)
from hf_encoderize.model.head_file import head_path, load_head
from hf_encoderize.model.kinds import ENCODER, ENCODERIZABLE, classify_config, refusal_message
from hf_encoderize.model.load_errors import LOAD_ERRORS as _LOAD_ERRORS
from hf_encoderize.model.load_errors import load_error_message as _load_error_message
from hf_encoderize.model.load_errors import safetensor_error as _safetensor_error


@dataclass
class LoadConfig:
    """Where the decoder comes from and how to load it."""

    INPUTS = ("input_path",)  # what an output folder stays apart from (`common.outputs.inputs_of`)

    source: str
    """A Hub id (`org/name`), a local folder, or a `.gguf` file (local path, or a Hub repo id with `gguf_file`)."""
    _: KW_ONLY
    revision: str | None = None
    """Hub revision (branch, tag or commit) to load; ignored for local sources."""
    gguf_file: str | None = None
    """File name of a GGUF inside the Hub repo or folder given as `source`."""
    attn_implementation: AttentionBackend = "auto"
    """Attention backend: auto (the fastest the architecture supports that loads and passes the bidirectionality
    probe here: flash_attention_2 with flash-attn on a GPU in bf16/fp16, then flex_attention on a GPU, then sdpa, then
    eager), eager, sdpa, flex_attention, flash_attention_2 or flash_attention_3. The run record says which ran."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype: auto, float32, bfloat16 or float16."""
    trust_remote_code: bool = field(default=False, metadata=identity(HARMLESS))
    """Run modelling code from the Hub repo. Off unless the user asks for it."""

    @property
    def input_path(self) -> str:
        """What an output folder must never be, hold or sit in (`common.outputs`): the GGUF file itself when one is
        named (its folder may hold other models and our outputs beside them), else the model folder or Hub id."""
        return str(Path(self.source) / self.gguf_file) if self.gguf_file else self.source

    def __post_init__(self):
        for name in ("attn_implementation", "dtype"):  # the Literal's values, declared above
            check_choice(f"--{name.replace('_', '-')}", getattr(self, name), LoadConfig, name)
        if self.source.endswith(".gguf") and self.gguf_file is None and not Path(self.source).is_file():
            if Path(self.source).parent.is_dir() or "/" not in self.source:
                raise EncoderizeError(f"GGUF file {self.source!r} does not exist; check the path")
        if self.source.endswith(".gguf") and Path(self.source).is_file():
            # A local GGUF path: transformers wants the folder plus the file name.
            path = Path(self.source).resolve()
            self.source, self.gguf_file = str(path.parent), path.name


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
    check_backend_available(cfg.attn_implementation)
    config = load_config(cfg)
    plan = backend_plan(config, cfg.attn_implementation, cfg.trust_remote_code,
                        compute_dtype or _weights_dtype(cfg, config))  # an unsupported explicit backend stops here
    tokenizer = load_tokenizer(cfg)
    tried = []
    for backend, skipped in plan:
        skipped = skipped or (exclude or {}).get(backend)
        model, skipped = (None, skipped) if skipped else _load_model(cfg, config, backend, model_kwargs)
        tried.append({"backend": backend, "skipped": skipped})
        if model is not None:
            return model, tokenizer, tried
    reasons = "; ".join(f"{t['backend']}: {t['skipped']}" for t in tried)
    raise EncoderizeError(f"no attention backend works for {config.model_type} here ({reasons})")


def load_tokenizer(cfg: LoadConfig):
    """The source's tokenizer alone (a GGUF's from its metadata, as `from_pretrained` reads it): seconds, where the
    weights may take minutes, so a check that needs only the tokenizer and the data runs before any weight loads.
    Raises a one-line `EncoderizeError`."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(cfg.source, **_source_kwargs(cfg))
    except (*_LOAD_ERRORS, _safetensor_error()) as err:
        raise EncoderizeError(_load_error_message(cfg, err)) from None


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
        reason = backend_error(err)
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


def _weights_dtype(cfg: LoadConfig, config):
    """The dtype the weights load in: `--dtype`, else the checkpoint's (fp32 when it names none)."""
    import torch

    name = cfg.dtype if cfg.dtype != "auto" else getattr(config, "dtype", None) or "float32"
    return name if isinstance(name, torch.dtype) else getattr(torch, str(name).removeprefix("torch."), torch.float32)
