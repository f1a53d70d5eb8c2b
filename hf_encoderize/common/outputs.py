"""The one output-folder policy every command follows (convert, cpt, pretrain, contrastive, run, quickstart).

Design choices:
- Ours is what carries our marker, never what looks like ours: every output folder we create gets `MARKER`
  (`.hf-encoderize.json`: the command, and the top-level entries it wrote, updated when a save finishes). A folder
  named like a run (a `metrics.jsonl`, a `checkpoints/`) is not ours by that alone.
- `--overwrite` deletes a folder only when it carries the marker and holds nothing but entries we wrote (listed in the
  marker, the names that command is known to write, or our own temporary names). Anything else is refused in one line
  naming one foreign entry. A folder without a marker (a user's, or a run of an older version) is never deleted; it
  still resumes, since resuming deletes nothing.
- Never deleted or written over, whatever the marker says: the working folder or one of its ancestors, a symlink (its
  target is somewhere else), an input of the command (the output may not be, hold, or sit inside one). A command's
  inputs are what its configs declare (`INPUTS`, read by `inputs_of`): the model, data files, teacher, checkpoint.
- A live run's folder is never touched: its lock (`common.locks`) is checked first and taken before any
  deletion.
- Every check runs before any work; deleting happens only in `clear_for_run`, after the command validated its inputs
  and after it took the lock, so a second `--overwrite` never clears a live run's files before meeting its lock.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import shutil
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.locks import LOCK, acquire_lock, check_unlocked, release_lock
from hf_encoderize.common.run_folder import RunFolder

MARKER = ".hf-encoderize.json"
# Top-level names a command writes besides those its marker lists ("{name}": the folder's own name, which Accelerate's
# trackers use for their log folder). A run folder also receives what `run` adds (eval, contrastive, push record).
# A training recipe's marker lists its names itself (`known`, from the recipe: `training.runner.run_entries`); the
# two below are kept for the markers cpt and pretrain wrote before they did.
KNOWN_ENTRIES = {
    "cpt": (*RunFolder.entries(), "exports", "profile", "{name}"),
    "pretrain": (*RunFolder.entries(), "pretrain_schedule.json", "switch", "exports", "profile", "{name}"),
}
# What `export` and `card` add to a saved model folder (an encoder's, an embedding model's) after its save.
# `card` keeps the options it was given beside a converted encoder or an embedding model too (`run` gives its
# contrastive/ card the --base-model-id): without the name here, `run --overwrite` refused its own run folder.
SERVED = ("README.md", "export_record.json", "onnx", "model-f32.gguf", "model-q8_0.gguf",
          RunFolder(Path()).card_sources.name, ".eval_results", ".sentence-transformers-card.md")  # `card` (card_st)
KNOWN_ENTRIES.update({"encoder": SERVED, "contrastive": SERVED, "convert": SERVED})
# Known sub-folders without a marker of their own, and the files our commands write in them (at any depth): a file of
# another name there (a user's eval/NOTES.md) keeps the folder from being deleted. A sub-folder that carries a marker
# (an encoder under exports/) is judged by its marker.
FILES_OF = {
    "eval": ("*.json", "summary.md", "comparison.md", "*.png"),
    "profile": ("summary.json", "trace.json"),
    "exports": (),
    "onnx": ("model.onnx", "model_int8_weight_only.onnx", "model_qint8.onnx"),  # the last: int8's name before 69
    ".eval_results": ("hf-encoderize.yaml",),  # `card`'s results in the Hub's schema (publish.card_index)
}
# Our temporary names (atomic saves, the shared-folder probe, contrastive's work folder, the marker and lock).
OUR_TEMPORARIES = (MARKER, LOCK, ".*.partial", ".*.tmp", ".*.old-*", ".shared-*", ".*.work")


def inputs_of(*configs) -> list[Path]:
    """Every local input of a command, from the one declaration each of its configs makes: the attributes its class
    names in `INPUTS` (a model, data files, a teacher, a checkpoint, ...), as `input_paths` finds them. A config that
    gains an input declares it there once, and every command taking that config protects it (a teacher counted among
    no command's inputs was deleted by `--overwrite`)."""
    return input_paths(*(getattr(config, name) for config in configs if config is not None
                         for name in getattr(type(config), "INPUTS", ())))


def input_paths(*specs: str | os.PathLike | None) -> list[Path]:
    """The local paths among a command's inputs: those that exist, and the files a glob (`--data-files`) matches;
    Hub ids and unset options drop out."""
    found = []
    for spec in specs:
        if not spec:
            continue
        path = Path(os.path.expanduser(os.fspath(spec)))
        found += [path] if path.exists() else [Path(p) for p in glob.glob(str(path))]
    return found


def check_output_dir(output_dir: str | os.PathLike, *, overwrite: bool, resume: bool = False, inputs=(),
                     flag: str = "--output-dir", resumable: bool = True, check_lock: bool = True) -> Path:
    """Refuse, before any work, an output folder this command may not write or (with `overwrite`) replace.

    `inputs`: the command's local inputs (`input_paths`). `resume`: the folder is continued, so nothing in it is
    deleted and it may hold what it holds. `resumable`: whether to suggest --resume. Returns the folder."""
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise EncoderizeError(f"{flag} {str(out)!r} is a file; pass a folder")
    _check_creatable(out, flag)
    _check_not_an_input(out, inputs, flag, containing=not resume)
    if check_lock:
        check_unlocked(out)
    if resume or not (out.is_dir() and any(p.name != LOCK for p in out.iterdir())):
        return out
    if not overwrite:
        hint = "--resume, --overwrite" if resumable else "--overwrite"
        raise EncoderizeError(f"output folder {str(out)!r} is not empty; use {hint} or a new folder")
    check_deletable(out)
    return out


def check_deletable(out: Path) -> None:
    """Refuse to delete `out` unless it is a folder of ours holding nothing but what we wrote (see module docstring)."""
    advice = f"delete it yourself (rm -r {str(out)!r}) if it is yours to lose, or pick a new --output-dir"
    if out.is_symlink():
        raise EncoderizeError(f"--overwrite: {str(out)!r} is a symlink; its target is not deleted: {advice}")
    here, where = Path.cwd().resolve(), out.resolve()
    if where == here or where in here.parents:
        raise EncoderizeError(f"--overwrite: {str(out)!r} is the working folder or holds it, so it is not deleted; "
                              "pick a new --output-dir")
    marker = read_marker(out)
    if marker is None:
        raise EncoderizeError(f"--overwrite: {str(out)!r} holds files hf-encoderize did not write (no {MARKER} in "
                              f"it), so it is not deleted: {advice}")
    foreign = _foreign_entry(out, marker)
    if foreign is not None:
        raise EncoderizeError(f"--overwrite: {str(out)!r} holds {foreign!r}, which hf-encoderize did not write, so "
                              f"it is not deleted: {advice}")


def _temporary(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in OUR_TEMPORARIES)


def _ours(folder: Path, marker: dict) -> set[str]:
    """The top-level names of `folder` that its marker's command wrote (listed in the marker, or known for it)."""
    return set(marker.get("entries") or []) | _known(folder, marker)


def _known(folder: Path, marker: dict) -> set[str]:
    """The names the marker's command is known to write: those its marker lists (`known`), else `KNOWN_ENTRIES`'."""
    names = marker.get("known") or KNOWN_ENTRIES.get(marker.get("command"), ())
    return {name.replace("{name}", folder.name) for name in names}


def written_by_us(folder: Path, rel: Path) -> bool | None:
    """Whether the file `rel` under `folder` is one our commands wrote, by the same record `--overwrite` reads (the
    markers, KNOWN_ENTRIES, FILES_OF); None when `folder` carries no marker (nothing was recorded)."""
    marker = read_marker(folder)
    return None if marker is None else _written(Path(folder), marker, Path(rel).parts)


def _written(folder: Path, marker: dict, parts: tuple[str, ...]) -> bool:
    if parts[0] not in _ours(folder, marker):
        return False
    sub = folder / parts[0]
    if len(parts) == 1:
        return True
    if (inner := read_marker(sub)) is not None:
        return _written(sub, inner, parts[1:])
    if parts[0] not in FILES_OF:  # checkpoints/, 1_Pooling/: ours whole
        return True
    if len(parts) > 2 and (inner := read_marker(sub / parts[1])) is not None:
        return _written(sub / parts[1], inner, parts[2:])
    return any(fnmatch.fnmatch(parts[-1], p) for p in FILES_OF[parts[0]])


def _foreign_entry(folder: Path, marker: dict) -> str | None:
    """The first path under `folder` (relative) that we did not write, by its marker, recursively; None if none."""
    ours = _ours(folder, marker)
    for entry in sorted(folder.iterdir()):
        if _temporary(entry.name):
            continue
        if entry.name not in ours:
            return entry.name
        if entry.is_dir() and not entry.is_symlink():
            inner = _foreign_inside(entry)
            if inner is not None:
                return f"{entry.name}/{inner}"
    return None


def _foreign_inside(folder: Path) -> str | None:
    """Inside an entry of ours: judged by its own marker, else by the files its known sub-folder holds (FILES_OF);
    any other sub-folder (checkpoints/) is ours whole."""
    marker = read_marker(folder)
    if marker is not None:
        return _foreign_entry(folder, marker)
    if folder.name not in FILES_OF:
        return None
    for entry in sorted(folder.iterdir()):
        if _temporary(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            inner = (_foreign_entry(entry, read_marker(entry)) if read_marker(entry) is not None else
                _foreign_files(entry, FILES_OF[folder.name]))
        else:
            inner = None if any(fnmatch.fnmatch(entry.name, p) for p in FILES_OF[folder.name]) else ""
        if inner is not None:
            return f"{entry.name}/{inner}".rstrip("/")
    return None


def _foreign_files(folder: Path, patterns: tuple[str, ...]) -> str | None:
    """The first file under `folder` (any depth, relative) whose name matches none of `patterns`; None if none."""
    for entry in sorted(folder.rglob("*")):
        if entry.is_file() and not _temporary(entry.name) and not any(fnmatch.fnmatch(entry.name, p)
                                                                         for p in patterns):
            return str(entry.relative_to(folder))
    return None


def clear_for_run(output_dir: str | os.PathLike, command: str, *, overwrite: bool, resume: bool = False,
                  known: tuple[str, ...] = ()) -> Path:
    """After the command validated everything: empty an earlier run of ours (`overwrite`, checked again), make the
    folder, mark it (a fresh start) and take its lock. Main process only. `known`: the top-level names the command
    writes (its marker lists them, so a later --overwrite knows them). Returns the folder."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    acquire_lock(out, command)  # first: a live run's folder is refused before anything in it is deleted
    if overwrite and not resume and any(p.name != LOCK for p in out.iterdir()):
        check_deletable(out)
        for entry in out.iterdir():
            if entry.name != LOCK:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    if not resume or read_marker(out) is not None:  # an older run without a marker is resumed, not claimed
        write_marker(out, command, (read_marker(out) or {}).get("entries", []) if resume else [], known=known)
    return out


def finish_run(output_dir: str | os.PathLike) -> None:
    """When the save finished: record in the marker the entries the command wrote, and give the lock back."""
    out = Path(output_dir)
    marker = read_marker(out)
    if marker is not None:
        known = _known(out, marker)
        written = set(marker.get("entries") or []) | {p.name for p in out.iterdir() if p.name in known}
        write_marker(out, marker["command"], sorted(written), known=marker.get("known") or ())
    release_lock(out)


def match_umask(folder: Path) -> None:
    """Give every file and folder under `folder` the modes the umask gives a new one (0644/0755 under 022): a save
    through a private temporary file (transformers' and safetensors' writers) left model.safetensors 0600 beside
    0644 files, unreadable to the group the rest is shared with."""
    mask = os.umask(0o022)
    os.umask(mask)  # reading the umask means setting it: set straight back
    for path in (Path(folder), *Path(folder).rglob("*")):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def add_to_marker(folder: Path, names: list[str]) -> None:
    """Record in `folder`'s marker (when it has one) top-level `names` a later command wrote there (`export`), so a
    later --overwrite knows them as ours."""
    marker = read_marker(folder)
    if marker is not None:
        write_marker(folder, marker["command"], sorted(set(marker.get("entries") or []) | set(names)),
                     known=marker.get("known") or ())


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, None without one (or one that is not ours: not a JSON object with a command)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("command"), str) else None


def write_marker(folder: Path, command: str, entries: list[str] | None = None, known=()) -> None:
    """Mark `folder` as written by `command`; `entries`: its top-level names (default: what is there now); `known`:
    the names the command may write there (a training recipe's, `clear_for_run`)."""
    folder = Path(folder)
    if entries is None:
        entries = sorted(p.name for p in folder.iterdir() if p.name not in (MARKER, LOCK))
    tmp = folder / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"command": command, "entries": entries, **({"known": list(known)} if known else {})},
                              indent=2) + "\n")
    os.replace(tmp, folder / MARKER)


def check_apart_from_inputs(out: str | os.PathLike, inputs, flag: str = "--output-dir",
                            containing: bool = True) -> None:
    """Refuse an output folder that is, sits inside or (`containing`: it may be emptied) holds one of `inputs` (a
    command's `inputs_of`); `check_output_dir` applies it, and `run` to a later stage's folder before the first
    stage."""
    _check_not_an_input(Path(out), inputs, flag, containing)


def _check_not_an_input(out: Path, inputs, flag: str, containing: bool) -> None:
    where = out.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if where == source or source in where.parents or (containing and where in source.parents):
            relation = "is" if where == source else "is inside" if source in where.parents else "holds"
            raise EncoderizeError(f"{flag} {str(out)!r} {relation} the input {str(given)!r}; pick an --output-dir "
                                  "apart from the command's inputs")


def _check_creatable(out: Path, flag: str) -> None:
    """Refuse an output folder that cannot be made or written: the nearest existing ancestor must be a writable folder
    (as root every folder is writable, so this catches files in the path first)."""
    ancestor = out
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise EncoderizeError(f"{flag} {str(out)!r} cannot be created: {str(ancestor)!r} is a file; pass a folder "
                              "path")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise EncoderizeError(f"{flag} {str(out)!r} cannot be written: {str(ancestor)!r} is read-only for this "
                              "user; pick a writable --output-dir")
