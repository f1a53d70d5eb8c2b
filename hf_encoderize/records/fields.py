"""The base of every record: typed fields first, the file's other keys kept whole.

Design choices:
- A record is a dataclass with `to_json`/`from_json` (as sentence-transformers' `ModelCardData`). The fields that
  readers read are typed and documented where they are declared; any other key of the file (written by an older or
  newer version) is kept in `facts` and written back as it was read, so reading and re-writing loses nothing.
- A file that is not valid JSON is a one-line error naming it and what to do (`common.run_folder.read_json`).
- A record's nested parts (a run's `data`, `lora`, `hardware`) are `Part`s: frozen and keyword-only, so a misspelt
  field fails where the part is made, and read back the same way (typed fields, other keys kept).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.run_folder import read_json


class JsonFile:
    """A record that is a file: `from_json` (None when there is none) and `to_json`, through its `from_dict`/`to_dict`
    (a `Fields` record, or a `Part` that is a whole file: the run record)."""

    @classmethod
    def from_json(cls, path: str | os.PathLike):
        """The record in `path`, or None when the file does not exist."""
        data = read_json(path)
        return None if data is None else cls.from_dict(data)

    def to_json(self, path: str | os.PathLike) -> None:
        write_json_atomic(Path(path), self.to_dict())


@dataclass
class Fields(JsonFile):
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
        kinds = part_fields(cls)
        typed = {f.name for f in fields(cls)} - {"facts"}
        data = data or {}
        return cls(**{k: _read(kinds.get(k), data[k]) for k in typed if k in data},
                   facts={k: v for k, v in data.items() if k not in typed})

    def to_dict(self) -> dict:
        typed = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "facts"}
        return {**{k: _written(v) for k, v in typed.items()}, **self.facts}



@dataclass(frozen=True, kw_only=True)
class Part:
    """A typed part nested in a record (its `data`, `lora`, `hardware`, ...): frozen, built by keyword only, so a
    misspelt field is a TypeError where the part is made; read back, a key no field declares is kept in `facts` and
    written back as it was read (an older or newer version's).

    >>> @dataclass(frozen=True, kw_only=True)
    ... class Size(Part):
    ...     rows: int | None = None
    >>> Size.from_dict({"rows": 3, "note": "kept"}).to_dict()
    {'rows': 3, 'note': 'kept'}
    >>> Size(rowz=3)
    Traceback (most recent call last):
    TypeError: Size.__init__() got an unexpected keyword argument 'rowz'
    """

    facts: dict = field(default_factory=dict)
    read_keys: frozenset | None = field(default=None, compare=False, repr=False)
    """The keys of the dict the part was read from (None: made by a run): `to_dict` writes back those of its fields,
    so a record of an earlier version reads and writes back unchanged."""

    @classmethod
    def from_dict(cls, data: dict | None):
        """The part in `data`; None stays None (a record that did not hold it)."""
        if data is None:
            return None
        if isinstance(data, cls):
            return data
        kinds = part_fields(cls)
        typed = {f.name for f in fields(cls)} - {"facts", "read_keys"}
        return cls(**{k: _read(kinds.get(k), data[k]) for k in typed if k in data},
                   facts={k: v for k, v in data.items() if k not in typed}, read_keys=frozenset(data))

    def to_dict(self) -> dict:
        typed = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("facts", "read_keys")
                 and (self.read_keys is None or f.name in self.read_keys)}
        return {**{k: _written(v) for k, v in typed.items()}, **self.facts}

    def known(self) -> dict:
        """`to_dict` without the values that are None (what this part knows)."""
        return {key: value for key, value in self.to_dict().items() if value is not None}


def _read(kind, value):
    """A value as the field of `kind` holds it: a `Part` (or a list of them) from its dict(s); other values as read."""
    if kind is None:
        return value
    if isinstance(kind, list):
        return [kind[0].from_dict(item) for item in value] if isinstance(value, list) else value
    return kind.from_dict(value)


def _written(value):
    if isinstance(value, Part):
        return value.to_dict()
    return [_written(item) for item in value] if isinstance(value, list) else value


def part_fields(cls) -> dict[str, type[Part] | list[type[Part]]]:
    """The fields of dataclass `cls` that hold a `Part`, by name -> the part's class (read from the annotation, which
    names one `Part` subclass, optionally `| None`), or `[class]` for a list of them (`list[Result]`)."""
    import sys

    namespace = {}
    for base in reversed(cls.__mro__):  # a field declared in a base class names a class of the base's module
        namespace.update(vars(sys.modules[base.__module__]))
    found = {}
    for f in fields(cls):
        name = str(f.type).split("|")[0].strip()
        listed = name.startswith("list[") and name.endswith("]")
        kind = namespace.get(name[5:-1] if listed else name)
        if isinstance(kind, type) and issubclass(kind, Part):
            found[f.name] = [kind] if listed else kind
    return found
