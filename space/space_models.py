"""The Space's loading side: what it shows (`Settings`), whether an encoder's modeling_encoderize.py may run (the trust
check), and `Models`, which loads each model once, on first use. `app.py` is the UI on top (the tabs, their limits,
and `settings_from_env`, which reads the space_config.json beside it); the design choices are in its docstring.

Self-contained like app.py: torch, transformers, sentence-transformers and gradio only, so it deploys beside app.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from space_compute import (  # noqa: E402
    embedding_sizes,
    first_line,
    matryoshka_dims,
    reachable,
    recorded,
    recorded_base,
    run_record,
    size_note,
)

MODELING_FILE = "modeling_encoderize.py"
REMOTE_MLM_CLASS = "modeling_encoderize.EncoderForMaskedLM"  # the auto_map entry hf-encoderize writes
# SHA-256 of hf_encoderize/model/remote_code/modeling_encoderize.py, the template of every encoder's modeling file.
# Update it whenever the template changes (tests/test_space_trust.py fails until you do).
TRUSTED_MODELING_SHA256 = frozenset({
    "4c075161dc06592d06155daf9521638dbb2e75ad29636c80fb3cfebed16c89a6",  # up to 0.x: patch steps 1-3
    "6986c13b8e4caa77bef041024b1715c3b33d38afa7847229e5f065750f45aab4",  # + symmetric chunks, materialised eager masks
    "1a5334b0eaf1584036849f6f8388cebbbe3a39b26533f50769d577538ebc01c2",  # + native weight init (is_custom_code False)
    "28d8d806f16bc9086a1c4856adceb0177f736665723572e7879a04bfc08186bb",  # + warns for a backend never verified
    "9e7d6b3bc6231b43f9ec5906128f91254e62a818681b633a9391c3513ba7d5da",  # + the untied head in lm_head.safetensors
})



@dataclass
class Settings:
    """What the Space shows: the encoder, the embedding model and, for the Compare tab, the base decoder."""

    encoder: str  # the MLM encoder: Fill-mask, and the embeddings when there is no embedding model
    embedding_model: str | None = None  # sentence-transformers model of the embedding tabs (a contrastive stage's)
    base_model: str | None = None
    base_gguf_file: str | None = None
    base_revision: str | None = None
    trust_remote_code: bool = False  # run an encoder's modeling_encoderize.py even when it is not the shipped one


# ------------------------------------------------------------------------------------------------ remote code


def mlm_mode(config) -> str | None:
    """'remote' when hf-encoderize wrote the MLM head file, 'native' for a built-in MLM class, else None."""
    auto_map = getattr(config, "auto_map", None) or {}
    if getattr(config, "hf_encoderize", None) and auto_map.get("AutoModelForMaskedLM") == REMOTE_MLM_CLASS:
        return "remote"
    if any(name.endswith("ForMaskedLM") for name in getattr(config, "architectures", None) or []):
        return "native"
    return None


_FILLED_MODEL_TYPE = re.compile(rb"^MODEL_TYPE = '[A-Za-z0-9_.-]+'", re.MULTILINE)  # saving.py writes repr(model_type)
_PLACEHOLDER = b'MODEL_TYPE = "__MODEL_TYPE__"'  # the template's line
TRUST_HINT = "pass --trust-remote-code (or set ENCODER_TRUST_REMOTE_CODE=1) if you trust it"


class FillMaskOff(gr.Error):
    """Why fill-mask is off, in one sentence: the tab shows it and a request answers with it."""


def modeling_sha256(source: bytes) -> str:
    """Digest of a saved modeling_encoderize.py with its filled-in `MODEL_TYPE` line put back to the placeholder."""
    unfilled = _FILLED_MODEL_TYPE.sub(_PLACEHOLDER, source.replace(b"\r\n", b"\n"), count=1)
    return hashlib.sha256(unfilled).hexdigest()


def modeling_file(encoder: str) -> Path:
    """The encoder's modeling_encoderize.py on this machine: in its folder, or from the Hub (the download is cached)."""
    if Path(encoder).is_dir():
        return Path(encoder) / MODELING_FILE
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(encoder, MODELING_FILE))


def checked_modeling_source(settings: Settings) -> tuple[bytes, Path, bool]:
    """(source, path, whether it is the shipped file) when the file may run; else FillMaskOff says why not."""
    try:
        path = modeling_file(settings.encoder)
        source = path.read_bytes()
    except Exception as err:  # a missing file, no network, a 404...
        raise FillMaskOff(f"Could not read {MODELING_FILE} of {settings.encoder} to check it ({first_line(err)}), "
                          "so fill-mask is off.") from err
    shipped = modeling_sha256(source) in TRUSTED_MODELING_SHA256
    if not (shipped or settings.trust_remote_code):
        raise FillMaskOff(f"{MODELING_FILE} in {settings.encoder} differs from the one hf-encoderize ships, so "
                          f"fill-mask is off; {TRUST_HINT}.")
    return source, path, shipped


def run_module(source: bytes, path: Path):
    """Execute `source` as a module: the bytes that were checked run, nothing reads the file again."""
    name = f"encoderize_modeling_{hashlib.sha256(source).hexdigest()[:16]}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=str(path)))
    module.__file__ = str(path)
    sys.modules[name] = module  # transformers inspects a model class's module source for its attention checks
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def masked_lm_head(settings: Settings, config) -> tuple[str | None, str]:
    """How fill-mask runs ('remote', 'native', or None: off) and the sentence the tab shows about it."""
    mode = mlm_mode(config)
    if mode == "native":
        return mode, "Native masked-LM head (no remote code)."
    if mode is None:
        return None, ("This encoder has no masked-LM head (its config.json names no `*ForMaskedLM` class and no "
                      "hf-encoderize head), so fill-mask is not available.")
    try:
        shipped = checked_modeling_source(settings)[2]
    except FillMaskOff as off:
        return None, off.message
    if shipped:
        return mode, (f"The MLM head runs `{MODELING_FILE}` from the encoder, byte for byte the file hf-encoderize "
                      "ships (it imports only torch and transformers).")
    return mode, (f"The MLM head runs this encoder's own `{MODELING_FILE}`, which differs from the file "
                  "hf-encoderize ships: you trusted it (--trust-remote-code or ENCODER_TRUST_REMOTE_CODE=1).")


# ------------------------------------------------------------------------------------------------ models


def device() -> str:
    """Where the models run: the GPU when the Space has one (push-space may suggest GPU hardware for a large model),
    else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Models:
    """Loads each model once, on first use, behind a lock (Gradio runs events on worker threads)."""

    def __init__(self, settings: Settings):
        from transformers import AutoConfig

        self.settings = settings
        self.config = AutoConfig.from_pretrained(settings.encoder)  # config only: no remote code runs here
        embedding_config = AutoConfig.from_pretrained(settings.embedding_model) if settings.embedding_model else None
        # The contrastive stage's record (method, pooling...); {} for the encoder or another embedding model.
        block = getattr(embedding_config, "hf_encoderize", None)
        self.contrastive = recorded(block, "EncoderFacts", "contrastive") or {}
        self.embedding_name = settings.embedding_model or settings.encoder
        self.width = getattr(embedding_config or self.config, "hidden_size", None)  # the full embedding size
        self.sizes = embedding_sizes(matryoshka_dims(self.embedding_name, self.contrastive), self.width)
        # The base decoder: a `cpt` run's run_record.json next to a local encoder (it names the GGUF file), else
        # config.json's metadata. A record that cannot be read (cut short, edited) is said on the Compare tab.
        run, self.record_note = run_record(settings.encoder)
        base_model, gguf_file, revision = recorded_base(run, getattr(self.config, "hf_encoderize", None))
        if settings.base_model is None and base_model:
            settings.base_model = base_model
            settings.base_gguf_file = settings.base_gguf_file or gguf_file
            settings.base_revision = settings.base_revision or revision
        self.mlm, self.mlm_note = masked_lm_head(settings, self.config)
        self._lock = threading.Lock()
        self._cache = {}

    @property
    def base_available(self) -> bool:
        return reachable(self.settings.base_model)

    @property
    def embedding_label(self) -> str:
        """What makes the embeddings, in words: the MLM encoder, or the contrastive model trained on top of it."""
        if not self.settings.embedding_model:
            return "the MLM encoder"
        method = recorded(self.contrastive, "ContrastiveStage", "method")
        return f"contrastive ({method}) on top of the MLM encoder" if method else "a sentence-transformers model"

    def embedding_title(self, dim: int = 0) -> str:
        """Heading of the embedding heatmaps ("Encoder", "Embedding model, ..."), with the size if there is a choice."""
        title = f"Embedding model, {self.embedding_label}" if self.settings.embedding_model else "Encoder"
        return f"{title} ({size_note(dim, self.width)})" if len(self.sizes) > 1 else title

    def size(self, dim) -> int:
        """`dim` ("16", or 16 from Python) when the model was trained at that size ("0": the full vector); any other
        size is refused."""
        text = str(dim or 0).strip()
        size = int(text) if text.isdigit() else -1
        if size not in [value for _, value in self.sizes]:
            raise gr.Error(f"Pick an embedding size this model was trained at: {', '.join(dict(self.sizes))}.")
        return size

    def _once(self, key, load):
        with self._lock:
            if key not in self._cache:
                self._cache[key] = load()
            return self._cache[key]

    def embedder(self):
        """The sentence-transformers model of the embedding tabs: the embedding model, else the encoder."""
        from sentence_transformers import SentenceTransformer

        return self._once("embedder", lambda: SentenceTransformer(self.embedding_name, device=device(),
                                                                  trust_remote_code=False))

    def fill_mask(self):
        from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

        def load():
            if self.mlm == "remote":  # checked again now (the folder may have changed), and the checked bytes run
                module = run_module(*checked_modeling_source(self.settings)[:2])
                model = module.EncoderForMaskedLM.from_pretrained(self.settings.encoder)
            else:
                model = AutoModelForMaskedLM.from_pretrained(self.settings.encoder, trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(self.settings.encoder, trust_remote_code=False)
            return pipeline("fill-mask", model=model.eval(), tokenizer=tokenizer, device=device())

        return self._once("fill_mask", load)

    def base(self):
        from transformers import AutoModel, AutoTokenizer

        def load():
            s = self.settings
            kwargs = {"trust_remote_code": False, **({"gguf_file": s.base_gguf_file} if s.base_gguf_file else {})}
            if s.base_revision and not Path(s.base_model).exists():
                kwargs["revision"] = s.base_revision
            model = AutoModel.from_pretrained(s.base_model, **kwargs).to(device()).eval()
            return model, AutoTokenizer.from_pretrained(s.base_model, **kwargs)

        return self._once("base", load)
