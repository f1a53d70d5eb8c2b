"""What a push sends: the files of a folder that a push uploads, decided here file by file, and what is checked in them.

Design choices:
- The folder's files minus training state (`checkpoints/`, optimizer/scheduler/RNG state, hidden files, our output
  marker and lock), plus named extras (the card, plots); extras win over folder files.
- Of a folder our command marked, only what it recorded writing (the record `--overwrite` reads, `common.outputs`):
  a file the user put there (`encoder/NOTES.md`) is left out and named in a warning. A folder without a marker (made
  by hand, or by an older version) recorded nothing, so it goes as it is.
- Regular files inside the folder only: a symlink whose target leaves the folder is refused in one line (never
  followed, never silently skipped).
- Local paths in the uploaded JSON (the base model's folder, the data files) are set to null in the staged bytes and
  the card's prose keeps their last component; the user's files keep their paths.
- `files_holding` finds the files that hold a secret (the Hub token; safetensors: the header, where free-form metadata
  lives), so a push can refuse before anything leaves the machine.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.locks import LOCK
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.outputs import MARKER, written_by_us

log = get_logger(__name__)

# Never uploaded: training state and local clutter. Matched against each path component / the file name.
EXCLUDED_DIRS = {"checkpoints", "__pycache__", "adapter-checkpoints"}
EXCLUDED_NAMES = ("optimizer*", "scheduler*", "rng_state*", "random_states*", "training_args.bin", "*.partial",
                  "*.pyc", "*.lock", "trainer_state.json")
UNSCANNED_JSON = {"tokenizer.json", "vocab.json"}  # vocabularies: their tokens are text, not paths
# Files that hold token strings ("/*" is a token, not a path): only their `name_or_path` keys are looked at.
TOKEN_JSON = {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"}


def upload_set(folder: str | os.PathLike, extra_files: dict | None = None) -> dict[str, Path | bytes]:
    """Repo path -> local file (or bytes) for everything a push of `folder` sends; extras win over folder files."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EncoderizeError(f"{str(folder)!r} is not a folder; nothing to push")
    files: dict[str, Path | bytes] = {}
    unrecorded = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not _excluded(rel):
            _refuse_link_out(path, folder, rel.as_posix())
            if path.is_file() and written_by_us(folder, rel) is False:
                unrecorded.append(rel.as_posix())
            elif path.is_file():
                files[rel.as_posix()] = path
    if unrecorded:
        log.warning(f"left out of the upload, as no hf-encoderize command wrote them into {str(folder)!r}: "
                    f"{', '.join(unrecorded)}; upload them yourself if they are meant to be public")
    for repo_path, value in (extra_files or {}).items():
        if not isinstance(value, bytes):  # an extra (a run's plot) may not leave the folder it lives in either
            _refuse_link_out(Path(value), Path(value).parent, repo_path)
        files[repo_path] = value if isinstance(value, bytes) else Path(value)
    return files


def _refuse_link_out(path: Path, folder: Path, repo_path: str) -> None:
    """Refuse, rather than skip, a symlink whose target is outside `folder`: skipping would push a repo missing a file
    the user put there on purpose (a weights file linked from a cache), and following it uploads whatever it names
    (a `.env`). rglob does not descend into a linked folder, so the link itself is checked here."""
    if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
        raise EncoderizeError(f"{repo_path!r} is a symlink to {str(path.resolve())!r}, outside "
                              f"{str(folder)!r}; push uploads files inside the folder only: copy the file in or "
                              "remove the link")


def _excluded(rel: Path) -> bool:
    if rel.name in (MARKER, LOCK):  # our output-folder marker and run lock (`common.outputs`) stay local
        return True
    if any(part.startswith(".") or part in EXCLUDED_DIRS for part in rel.parts):
        return True
    return any(fnmatch.fnmatch(rel.name, pattern) for pattern in EXCLUDED_NAMES)


def strip_local_paths(files: dict[str, Path | bytes]) -> tuple[dict[str, Path | bytes], list[str]]:
    """The upload set with every local path in its JSON files set to null (the base model's folder in config.json,
    the data files in contrastive_run.json, ...), and the `file: field` names it nulled. Only the staged bytes change:
    the user's files keep their paths. A path is absolute, home- or dot-relative, or a relative path that exists here;
    a Hub id (`user/name`) is none of these. Vocabularies (tokenizer.json) are left alone: their tokens are text."""
    cleaned, stripped, paths = dict(files), [], set()
    for repo_path, value in files.items():
        if not repo_path.endswith(".json") or Path(repo_path).name in UNSCANNED_JSON:
            continue
        raw = value if isinstance(value, bytes) else (value.read_bytes() if value.stat().st_size < 1 << 24 else b"")
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            continue
        fields: list[tuple[str, str]] = []  # (field, the path it held)
        if Path(repo_path).name in TOKEN_JSON and isinstance(document, dict):
            document = {k: _null_paths(v, k, fields) if k.endswith("name_or_path") else v for k, v in document.items()}
        else:
            document = _null_paths(document, "", fields)
        if fields:
            cleaned[repo_path] = (json.dumps(document, indent=2) + "\n").encode()
            stripped += [f"{repo_path}: {field}" for field, _ in fields]
            paths.update(value for _, value in fields)
    return _name_only_in_text(cleaned, paths, stripped), stripped


def _name_only_in_text(files: dict[str, Path | bytes], paths: set[str], stripped: list[str]) -> dict:
    """The card (README.md, written from the same records) names those paths in prose: there each becomes its last
    component, which still says which model it was."""
    for repo_path, value in files.items():
        if not repo_path.endswith(".md") or not paths:
            continue
        text = value if isinstance(value, bytes) else value.read_bytes()
        cleaned = text
        for path in sorted(paths, key=len, reverse=True):  # a longer path first: it may contain a shorter one
            cleaned = cleaned.replace(path.encode(), Path(path.rstrip("/\\")).name.encode())
        if cleaned != text:
            files[repo_path] = cleaned
            stripped.append(f"{repo_path}: the same paths in its text (last component kept)")
    return files


def _null_paths(value, where: str, fields: list[tuple[str, str]]):
    if isinstance(value, dict):
        return {k: _null_paths(v, f"{where}.{k}" if where else str(k), fields) for k, v in value.items()}
    if isinstance(value, list):
        return [_null_paths(v, f"{where}[{i}]", fields) for i, v in enumerate(value)]
    if isinstance(value, str) and _is_local_path(value):
        fields.append((where, value))
        return None
    return value


# A relative data path (`--data-files corpora/mine.jsonl`, recorded as given) need not exist from where push runs; a
# Hub id never ends in a data file's suffix, so a string that does is a local path.
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".txt", ".txt.gz", ".csv", ".tsv", ".parquet", ".arrow", ".zst")


def _is_local_path(text: str) -> bool:
    if len(text) < 2 or len(text) > 4096 or "\n" in text:
        return False
    if text.startswith(("/", "~", "./", "../", ".\\", "file:")) or re.match(r"[A-Za-z]:[\\/]", text):
        return True
    if not re.match(r"[a-z][a-z0-9+.-]*://", text) and " " not in text and text.lower().endswith(DATA_SUFFIXES):
        return True
    return ("/" in text or os.sep in text) and os.path.exists(text)


def files_holding(files: dict[str, Path | bytes], secret: str) -> list[str]:
    """Repo paths whose content contains `secret` (safetensors: the JSON header only)."""
    needle = secret.encode()
    return [repo_path for repo_path, value in files.items() if _contains(value, needle)]


def _contains(value: Path | bytes, needle: bytes) -> bool:
    if isinstance(value, bytes):
        return needle in value
    with open(value, "rb") as handle:
        if value.suffix == ".safetensors":
            length = int.from_bytes(handle.read(8), "little")
            return needle in handle.read(min(length, 100_000_000))
        tail = b""
        while chunk := handle.read(1 << 24):
            if needle in tail + chunk:
                return True
            tail = chunk[-len(needle):]
    return False
