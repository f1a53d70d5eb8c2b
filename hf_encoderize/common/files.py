"""Small file helpers shared by the training and evaluation records.

`write_json_atomic` writes to a hidden temporary name unique to this process, then renames it into place, so a crash
(or two processes writing the same record) never leaves a half-written JSON file that a resume or the card would read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomic(path: str | os.PathLike, payload: dict) -> Path:
    """Write `payload` as indented JSON to `path` atomically (parent folders are created). Returns the path.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_json_atomic(folder / "a" / "record.json", {"step": 3}).read_text()
    '{\\n  "step": 3\\n}\\n'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path
