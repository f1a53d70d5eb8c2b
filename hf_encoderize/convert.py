"""`hf-encoderize convert MODEL OUTPUT_DIR`: load a decoder, encoderize it, verify it, save it. No training.

The output folder is checked before anything is loaded (a non-empty folder is refused unless `overwrite`), and the
encoder is written atomically, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from hf_encoderize.loading import LoadConfig


@dataclass
class ConvertConfig:
    """Where to write the converted encoder."""

    output_dir: str
    """Folder to write; must be empty or absent unless `overwrite`."""
    _: KW_ONLY
    overwrite: bool = False
    """Replace a non-empty output folder."""
    verify: bool = True
    """Run the bidirectionality probe before saving and refuse to save a model that fails it."""


def convert(load: LoadConfig, out: ConvertConfig) -> dict:
    """Encoderize `load.source` and save it to `out.output_dir`. Returns a summary dict (printed by the CLI)."""
    from hf_encoderize.bidirectional import encoderize, verify_bidirectional
    from hf_encoderize.loading import load_decoder
    from hf_encoderize.saving import check_output_dir, save_encoder

    check_output_dir(out.output_dir, out.overwrite)
    model, tokenizer = load_decoder(load)
    report = encoderize(model, tokenizer)
    probe = verify_bidirectional(model, pad_token_id=tokenizer.pad_token_id) if out.verify else None
    metadata = {**report.to_dict(), "base_model": load.source, "revision": load.revision, "gguf_file": load.gguf_file}
    save_encoder(model, tokenizer, out.output_dir, overwrite=out.overwrite, metadata=metadata)
    return {
        "output_dir": str(out.output_dir),
        "model_type": report.model_type,
        "attn_implementation": report.attn_implementation,
        "modules_patched": report.modules_patched,
        "causal_buffers_replaced": report.causal_buffers_replaced,
        "mask_token": f"{report.tokens['mask_token']} (id {report.tokens['mask_token_id']}, "
        f"{report.tokens['mask_token_path']})",
        "pad_token": f"{report.tokens['pad_token']} ({report.tokens['pad_token_path']})",
        "probe": probe.summary() if probe else "skipped",
    }
