"""`export_record.json`: what `export` kept and why, one part per format; the card's "Serve it" section reads it.

Design choices:
- Layout: `{"onnx": ExportPart, "gguf": ExportPart}`; exporting one format replaces only its own part
  (`write_export_part`), so the record is read and re-written whole, typed, with every key no field declares kept.
- A part's `variants` maps each file to its check in a fresh process (`ExportCheck`): "verified" or "not kept: why".
  The checks' other numbers (the token-state cosines, the token counts) are kept in each check's `facts`.
- A record written before GGUF existed (the ONNX part at the top, `"format": "onnx"`) is read as the ONNX part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from hf_encoderize.records.fields import Fields, Part

EXPORT_RECORD = "export_record.json"
ExportFormat = Literal["onnx", "gguf"]
VERIFIED = "verified"


@dataclass(frozen=True, kw_only=True)
class ExportCheck(Part):
    """One exported file, checked where it runs (`publish.onnx_check`, `publish.gguf_check`) in a fresh process."""

    verdict: str | None = None
    """"verified" (kept), or "not kept: why"."""
    threshold: float | None = None
    """The lowest cosine to PyTorch's embeddings the file needed."""
    min_cosine: float | None = None
    """The lowest cosine of its embeddings to PyTorch's over the check texts (None: not measured)."""
    bidirectional: bool | None = None
    """Whether changing a later token moved position 0, as a bidirectional model's must (None: not checked)."""
    client_pooled_min_cosine: float | None = None
    """GGUF of a lead-token model with mean pooling: the lowest cosine when the client pools the token states (the
    card's snippet), llama.cpp's own pooling being unable to leave the lead out."""

    @property
    def kept(self) -> bool:
        return self.verdict == VERIFIED


@dataclass(frozen=True, kw_only=True)
class ExportPart(Part):
    """One format's export: how the checks ran and each file's check.

    >>> part = ExportPart(pooling="mean", texts=8, variants={"a.gguf": {"verdict": "verified", "threshold": 0.99},
    ...                                                      "b.gguf": {"verdict": "not kept: cosine 0.9"}})
    >>> part.kept_files(), part.to_dict()["variants"]["a.gguf"]
    (['a.gguf'], {'verdict': 'verified', 'threshold': 0.99})
    """

    pooling: str | None = None
    """The model's sentence-transformers pooling the checks compared against (mean, cls, lasttoken)."""
    texts: int | None = None
    """How many check texts (of several lengths) each file embedded."""
    prompt: str | None = None
    """The lead the model puts before every text ("" without): ONNX, the prompt the embedding graph's caller adds;
    GGUF, the one a client pooling its own token states adds (present only for a lead-token model)."""
    prompt_length: int | None = None
    """The lead's tokens the pooling leaves out (`onnx_embedding.prompt_length`)."""
    normalize: bool | None = None
    """GGUF, client pooling: whether the model ends in Normalize."""
    modules: list | None = None
    """ONNX: the sentence-transformers modules the graph holds after the transformer (Pooling, Normalize, ...): an
    export from before the whole embedding pipeline was traced has none."""
    exporter: str | None = None
    """ONNX: the exporter whose fp32 graph verified (dynamo, else the TorchScript tracer)."""
    exporter_fallback: str | None = None
    """ONNX: why the first exporter's graph was not kept, when a later one was."""
    llama_cpp_python: str | None = None
    """GGUF: the llama-cpp-python release the checks ran on."""
    variants: dict[str, ExportCheck] = field(default_factory=dict)
    """File (relative to the format's folder) -> its check, in the order they were exported."""

    def __post_init__(self):
        checks = {name: ExportCheck.from_dict(check if isinstance(check, dict | ExportCheck) else {})
                  for name, check in (self.variants or {}).items()}
        object.__setattr__(self, "variants", checks)  # frozen: each check typed once, where the part is made

    @property
    def embedding_graph(self) -> bool:
        """ONNX: the graph is the whole embedding pipeline (its `sentence_embedding` output pools and normalises)."""
        return self.modules is not None

    def kept_files(self) -> list[str]:
        """The files that passed their check, in the record's order."""
        return [name for name, check in self.variants.items() if check.kept]

    def check(self, name: str) -> ExportCheck:
        """The check of file `name` (an empty one when the record has none)."""
        return self.variants.get(name) or ExportCheck()

    def to_dict(self) -> dict:
        written = {key: value for key, value in super().to_dict().items()
                   if value is not None or key in (self.read_keys or ())}  # what a format does not have is left out
        return {**written, "variants": {name: check.to_dict() for name, check in self.variants.items()}}


@dataclass
class ExportRecord(Fields):
    """`export_record.json` in the model folder, written by `export` (`publish.export`, `publish.gguf_export`), read
    by the card's "Serve it" section (`publish.card_serve`) and by the next export (`publish.export_guard`)."""

    onnx: ExportPart | None = None
    """What `export --format onnx` kept (files under `onnx/`)."""
    gguf: ExportPart | None = None
    """What `export --format gguf` kept (files beside the model)."""

    @classmethod
    def from_dict(cls, data: dict | None):
        if isinstance(data, dict) and data.get("format") == "onnx":  # the layout before GGUF: the ONNX part alone
            data = {"onnx": data}
        return super().from_dict(data)

    def to_dict(self) -> dict:
        return {key: value for key, value in super().to_dict().items() if value is not None}

    def part(self, fmt: ExportFormat) -> ExportPart | None:
        return getattr(self, fmt)


def read_export_record(model_dir: str | os.PathLike) -> ExportRecord:
    """The record in `model_dir`; empty when nothing was exported.

    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / EXPORT_RECORD).write_text(json.dumps({"format": "onnx", "variants": {}}))
    >>> read_export_record(folder).to_dict()
    {'onnx': {'variants': {}, 'format': 'onnx'}}
    """
    return ExportRecord.from_json(Path(model_dir) / EXPORT_RECORD) or ExportRecord()


def write_export_part(model_dir: str | os.PathLike, fmt: ExportFormat, part: ExportPart) -> Path:
    """Replace the record's `fmt` part, keeping the other formats'."""
    path = Path(model_dir) / EXPORT_RECORD
    replace(read_export_record(model_dir), **{fmt: part}).to_json(path)
    return path
