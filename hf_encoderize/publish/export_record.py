"""`export_record.json`: what `export` kept and why, one part per format; the card's "Serve it" section reads it.

Its own module so that `card` (which renders the record) and the exporters (which write it) share the file name and
layout without importing each other. Layout: `{"onnx": {...}, "gguf": {...}}`, each part
`{"pooling", "texts", "variants": {file: {"verdict": "verified" | "not kept: why", ...}}}`; exporting one format
replaces only its own part. A record written before GGUF existed (the ONNX part at the top, `"format": "onnx"`) is
read as the ONNX part.
"""

from __future__ import annotations

import os
from pathlib import Path

from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.run_folder import read_json

EXPORT_RECORD = "export_record.json"


def read_export_record(model_dir: str | os.PathLike) -> dict[str, dict]:
    """Format -> its part of the record; empty when nothing was exported.

    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / EXPORT_RECORD).write_text(json.dumps({"format": "onnx", "variants": {}}))
    >>> read_export_record(folder)
    {'onnx': {'format': 'onnx', 'variants': {}}}
    """
    record = read_json(Path(model_dir) / EXPORT_RECORD) or {}
    if record.get("format") == "onnx":  # the layout before GGUF
        return {"onnx": record}
    return record


def write_export_part(model_dir: str | os.PathLike, fmt: str, part: dict) -> Path:
    """Replace the record's `fmt` part, keeping the other formats'."""
    return write_json_atomic(Path(model_dir) / EXPORT_RECORD, {**read_export_record(model_dir), fmt: part})
