"""The base of every record: typed fields first, the file's other keys kept whole.

Design choices:
- A record is a dataclass with `to_json`/`from_json` (as sentence-transformers' `ModelCardData`). The fields that
  readers read are typed and documented where they are declared; any other key of the file (written by an older or
  newer version) is kept in `facts` and written back as it was read, so reading and re-writing loses nothing.
- A file that is not valid JSON is a one-line error naming it and what to do (`common.run_folder.read_json`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.run_folder import read_json


@dataclass
class Fields:
    """Typed fields first; `facts` keeps every other key of the file, in the file's order.

    Read by attribute only: there is no `record["key"]` or `record.get("key")`, so a reader cannot read a key no field
    declares (a typo or a key the writer stopped writing would read None silently).

    >>> Fields.from_dict({"note": "kept"})["note"]
    Traceback (most recent call last):
    TypeError: 'Fields' object is not subscriptable
    """

    facts: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict | None):
        typed = {f.name for f in fields(cls)} - {"facts"}
        data = data or {}
        return cls(**{k: data[k] for k in typed if k in data}, facts={k: v for k, v in data.items() if k not in typed})

    def to_dict(self) -> dict:
        typed = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "facts"}
        return {**typed, **self.facts}

    @classmethod
    def from_json(cls, path: str | os.PathLike):
        """The record in `path`, or None when the file does not exist."""
        data = read_json(path)
        return None if data is None else cls.from_dict(data)

    def to_json(self, path: str | os.PathLike) -> None:
        write_json_atomic(Path(path), self.to_dict())

