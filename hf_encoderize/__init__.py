"""hf-encoderize: turn any decoder LLM into a verified bidirectional text encoder.

The pipeline, one module each: load (`loading`), encoderize and verify (`bidirectional`), document-isolated
packing (`packing`), mask/pad tokens (`tokens`), save in a format plain transformers and sentence-transformers load
(`saving`), the architecture matrix (`architectures`), and the thin CLI (`cli`).

Heavy imports (torch, transformers) happen inside the functions, so `import hf_encoderize` stays cheap.
"""

from hf_encoderize.errors import EncoderizeError

__version__ = "0.1.0"

__all__ = [
    "EncoderizeError",
    "encoderize",
    "load_decoder",
    "save_encoder",
    "verify_bidirectional",
    "__version__",
]


def __getattr__(name: str):
    # Lazy re-exports: keep `import hf_encoderize` free of torch/transformers.
    if name == "load_decoder":
        from hf_encoderize.loading import load_decoder

        return load_decoder
    if name in ("encoderize", "verify_bidirectional"):
        from hf_encoderize import bidirectional

        return getattr(bidirectional, name)
    if name == "save_encoder":
        from hf_encoderize.saving import save_encoder

        return save_encoder
    raise AttributeError(f"module 'hf_encoderize' has no attribute {name!r}")
