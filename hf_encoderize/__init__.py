"""hf-encoderize: turn any decoder LLM into a verified bidirectional text encoder.

The pipeline, one module (or folder) per step:
- load: `loading` (Hub id, local folder or GGUF file; refuses what cannot become an encoder);
- encoderize: `bidirectional` (the attention patch and its verification probe), `tokens` (mask and pad tokens);
- pack: `data` (text sources), `packing` (row packing: documents -> fixed-length rows with document ids, `Packer`,
  `collate`), `isolation` (attention isolation of packed documents: `packed_forward`, `isolate_documents`);
- mask: `masking` (MLM/MNTP masking and the MLM loss), `objectives` (CLM and MLM phases);
- train: `train` (the Accelerate engine) with its recipes `cpt` (continued pretraining) and `pretrain` (from
  scratch, CLM then MLM), plus `lora`, `schedule` and `monitor`;
- save: `saving` (a folder plain transformers and sentence-transformers load; `remote_code/` holds the MLM head shipped
  in it), and `convert` (load, encoderize, save, no training);
- evaluate: `evaluation/` (the paper's SC, TC, QA and IR fine-tuning suite);
- card: `card` (the model card, rendered through `model_cards/encoder.md.j2`);
- push: `hub`;
- space: `space` (the Gradio demo; the app itself is the repository's `space/app.py`).
Around them: `cli` (thin commands), `pipeline` (`run`: every stage into one folder), `quickstart` (the embedded
default, offline), `architectures` (the architecture matrix), and the helpers `errors`, `files` and `licenses`.

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
