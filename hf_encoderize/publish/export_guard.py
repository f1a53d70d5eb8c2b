"""What `export` checks before any work, and what it may remove: export is as careful as every other command.

Design choices:
- The folder is refused up front, in one line, when it cannot be exported: a cut config.json, truncated weights, a
  file where export writes a folder (`onnx`), a file of ours' name that our previous export record does not list (the
  user's own `onnx/model.onnx` or `model-q8_0.gguf`: export would write over it), or a model with no pad token (a
  decoder: the checks pad texts of several lengths in one batch).
- No code from the folder runs without `trust_remote_code`: config.json's or tokenizer_config.json's `auto_map`, and
  modules.json's module types outside sentence-transformers, name code. Our own `modeling_encoderize.py` is accepted
  without the flag only when it is byte for byte the file this version writes (`saving.modeling_source`).
- Only files our previous export record lists as kept are ever removed (`owned_files`); a check that fails leaves
  every other file as it was.
- A figure that is not finite fails its check: a NaN cosine is not `< threshold`, so the test is `>= threshold`.
"""

from __future__ import annotations

import math
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import read_json
from hf_encoderize.records.export_record import read_export_record

# Where each format puts its kept files, relative to the model folder.
FORMAT_FOLDER = {"onnx": "onnx", "gguf": ""}
OUR_MODULE = "modeling_encoderize"


def owned_files(model_dir: Path, fmt: str) -> set[str]:
    """The files (relative to `model_dir`) that our previous `fmt` export kept: the only ones export may remove."""
    part = read_export_record(model_dir).part(fmt)
    kept = part.kept_files() if part else []
    return {str(Path(FORMAT_FOLDER[fmt], name)) if FORMAT_FOLDER[fmt] else name for name in kept}


def check_exportable(model_dir: Path, fmt: str, files: list[str], *, trust_remote_code: bool) -> bool:
    """Refuse (one line) a folder export cannot work on; `files`: the names this format writes. Returns whether the
    folder's code may run (ours byte for byte, or `trust_remote_code`)."""
    config = read_json(model_dir / "config.json")
    if config is None:
        raise EncoderizeError(f"no config.json in {str(model_dir)!r}; pass a folder written by convert, cpt or "
                              "contrastive")
    _check_weights(model_dir)
    if fmt == "gguf" and any(model_dir.glob("*_Dense/config.json")):  # llama.cpp pools, but has no Dense module
        raise EncoderizeError(f"{str(model_dir)!r} ends in a Dense projection (a distilled model), which a GGUF file "
                              "cannot hold: its vectors would not be the model's; export --format onnx instead")
    folder = FORMAT_FOLDER[fmt]
    if folder and (model_dir / folder).exists() and not (model_dir / folder).is_dir():
        raise EncoderizeError(f"{str(model_dir / folder)!r} is a file; export writes a folder there: move the file "
                              "away and run export again")
    owned = owned_files(model_dir, fmt)
    for name in files:
        rel = str(Path(folder, name)) if folder else name
        if (model_dir / rel).exists() and rel not in owned:
            raise EncoderizeError(f"{str(model_dir / rel)!r} was not written by an earlier export (its "
                                  "export_record.json does not list it), so export does not write over it: move it "
                                  "away and run export again")
    return _may_run_code(model_dir, config, trust_remote_code)


def _check_weights(model_dir: Path) -> None:
    from safetensors import SafetensorError, safe_open

    for weights in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(str(weights), "pt") as opened:
                opened.keys()
        except (SafetensorError, OSError) as err:
            raise EncoderizeError(f"{str(weights)!r} cannot be read ({str(err).splitlines()[0]}): the file is cut or "
                                  "not safetensors; save the model again") from None


def _may_run_code(model_dir: Path, config: dict, trust_remote_code: bool) -> bool:
    from hf_encoderize.model.saving import MODELING_FILE, modeling_source

    named = _code_named(model_dir, config)
    if not named:
        return False
    ours = (named == {OUR_MODULE} and (model_dir / MODELING_FILE).is_file() and
        (model_dir / MODELING_FILE).read_bytes() == modeling_source(str(config.get("model_type"))).encode())
    if ours or trust_remote_code:
        return True
    raise EncoderizeError(f"{str(model_dir)!r} names code of its own ({', '.join(sorted(named))}) that is not the "
                          f"{MODELING_FILE} this hf-encoderize writes; pass --trust-remote-code if you trust it")


def _code_named(model_dir: Path, config: dict) -> set[str]:
    """The modules of the folder's own that loading it would import."""
    named = set()
    tokenizer_config = read_json(model_dir / "tokenizer_config.json") or {}
    for auto_map in (config.get("auto_map"), tokenizer_config.get("auto_map")):
        for value in (auto_map or {}).values():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str):
                    named.add(ref.split("--")[-1].rsplit(".", 1)[0])
    modules = model_dir / "modules.json"
    if modules.is_file():
        import json

        try:
            listed = json.loads(modules.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise EncoderizeError(f"{str(modules)!r} is not valid JSON; save the model again") from None
        for module in listed if isinstance(listed, list) else []:
            kind = module.get("type", "") if isinstance(module, dict) else ""
            if not kind.startswith("sentence_transformers."):
                named.add(str(kind))
    return named


def check_loaded(st, model_dir: Path) -> None:
    """After the load: a model without a pad token (a decoder) cannot embed texts of several lengths in one batch."""
    if getattr(st.tokenizer, "pad_token", None) is None:
        raise EncoderizeError(f"{str(model_dir)!r} has no pad token: it is not an encoder hf-encoderize wrote (a "
                              "decoder?); run convert on it first, then export the encoder")


def verdict(result: dict, threshold: float, engine: str) -> str:
    """'verified', or one line why not; a cosine that is missing or not finite fails (NaN embeddings)."""
    cosine = result.get("min_cosine")
    if cosine is None or not math.isfinite(cosine):
        return f"not kept: {engine} gives embeddings that are not finite (cosine to PyTorch {cosine})"
    if not cosine >= threshold:
        return f"not kept: cosine to PyTorch {cosine:.4f} < {threshold}"
    return "verified"
