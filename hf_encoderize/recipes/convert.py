"""`hf-encoderize convert MODEL OUTPUT_DIR`: load a decoder, encoderize it, verify it, save it. No training.

The output folder is checked before anything is loaded (`common.outputs`: a non-empty folder is refused unless
`overwrite`, and even then unless an earlier run of ours wrote it; never the model folder itself), and the encoder is
written atomically, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path

from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.records.encoder_facts import EncoderFacts


@dataclass
class ConvertConfig:
    """Where to write the converted encoder."""

    output_dir: str
    """Folder to write; must be empty or absent unless `overwrite`."""
    _: KW_ONLY
    overwrite: bool = False
    """Replace an output folder an earlier run of hf-encoderize wrote (a folder holding anything else is refused)."""
    verify: bool = True
    """Run the bidirectionality probe before saving and refuse to save a model that fails it (one that fails only
    packed-document isolation, a hybrid, is saved and recorded as one to train on padded rows)."""


def convert(load: LoadConfig, out: ConvertConfig) -> dict:
    """Encoderize `load.source` and save it to `out.output_dir`. Returns a summary dict (printed by the CLI).

    With `verify`, the backend is picked as `cpt` picks it (`encoderize_where_it_trains`: with `auto`, one whose
    model fails the probe gives way to the next), and a model that fails only packed-document isolation (a hybrid)
    is saved all the same, recorded as one to train on padded rows (`packing` in the saved config)."""
    from hf_encoderize.common.locks import lock_output, release_lock, releasing_locks
    from hf_encoderize.common.outputs import inputs_of
    from hf_encoderize.model.saving import check_output_dir

    inputs = inputs_of(load)
    check_output_dir(out.output_dir, out.overwrite, inputs=inputs)  # before any work
    # Two converts into one folder both exited 0 and one model was lost: the folder is locked (and checked again,
    # now that no other run can change it) before the model loads, and given back once the encoder is in place.
    created = not Path(out.output_dir).exists()
    folder = lock_output(out.output_dir, "convert")
    try:
        summary = releasing_locks(_convert_locked)(load, out, inputs)
    finally:
        release_lock(folder)
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # a failed convert leaves no empty folder behind
    return summary


def _convert_locked(load: LoadConfig, out: ConvertConfig, inputs) -> dict:
    from hf_encoderize.model.saving import check_output_dir, save_encoder
    from hf_encoderize.model.where_it_trains import encoderize_where_it_trains

    check_output_dir(out.output_dir, out.overwrite, inputs=inputs)
    if out.verify:
        model, tokenizer, report, _ = encoderize_where_it_trains(load, {}, None, False)
    else:
        model, tokenizer, report = _encoderize_unverified(load)
    metadata = replace(EncoderFacts.from_dict(report.to_dict()), command="convert", base_model=load.source,
                       revision=load.revision, gguf_file=load.gguf_file)
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
        "probe": report.probe or "skipped",
        "packing": report.packing,
    }


def _encoderize_unverified(load: LoadConfig):
    """`--no-verify`: the first backend that loads, patched, unprobed (so packing is not known either)."""
    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.loading import load_decoder_trying

    model, tokenizer, tried = load_decoder_trying(load)
    report = replace(encoderize(model, tokenizer), attn_candidates=tried, packing="not checked (--no-verify)")
    return model, tokenizer, report
