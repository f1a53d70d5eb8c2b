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
  target is somewhere else), an input of the command (the output may not be, hold, or sit inside one).
- `LOCK` (`.hf-encoderize.lock`: pid and host) marks a live run; a second run into the folder is refused in one line.
  A lock whose process is gone on this host is stale and taken over; one of this very process (a run started again in
  the same Python session after an error) is ours.
- Every check runs before any work; deleting happens only in `clear_for_run`, after the command validated its inputs.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import json
import os
import shutil
import socket
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import RunFolder

MARKER = ".hf-encoderize.json"
LOCK = ".hf-encoderize.lock"
# Top-level names a command writes besides those its marker lists ("{name}": the folder's own name, which Accelerate's
# trackers use for their log folder). A run folder also receives what `run` adds (eval, contrastive, push record).
KNOWN_ENTRIES = {
    "cpt": (*RunFolder.entries(), "exports", "profile", "{name}"),
    "pretrain": (*RunFolder.entries(), "pretrain_schedule.json", "switch", "exports", "profile", "{name}"),
}
# Our temporary names (atomic saves, the shared-folder probe, contrastive's work folder, the marker and lock).
OUR_TEMPORARIES = (MARKER, LOCK, ".*.partial", ".*.tmp", ".*.old-*", ".shared-*", ".*.work")


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
    if resume or not (out.is_dir() and any(out.iterdir())):
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
    ours = set(marker.get("entries") or []) | {name.replace("{name}", out.name)
                                               for name in KNOWN_ENTRIES.get(marker.get("command"), ())}
    for entry in sorted(out.iterdir()):
        if entry.name not in ours and not any(fnmatch.fnmatch(entry.name, p) for p in OUR_TEMPORARIES):
            raise EncoderizeError(f"--overwrite: {str(out)!r} holds {entry.name!r}, which hf-encoderize did not "
                                  f"write, so it is not deleted: {advice}")


def clear_for_run(output_dir: str | os.PathLike, command: str, *, overwrite: bool, resume: bool = False) -> Path:
    """After the command validated everything: empty an earlier run of ours (`overwrite`, checked again), make the
    folder, mark it (a fresh start) and take its lock. Main process only. Returns the folder."""
    out = Path(output_dir)
    if overwrite and not resume and out.is_dir() and any(out.iterdir()):
        check_deletable(out)
        for entry in out.iterdir():
            if entry.name != LOCK:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    if not resume or read_marker(out) is not None:  # an older run without a marker is resumed, not claimed
        write_marker(out, command, (read_marker(out) or {}).get("entries", []) if resume else [])
    acquire_lock(out, command)
    return out


def finish_run(output_dir: str | os.PathLike) -> None:
    """When the save finished: record in the marker the entries the command wrote, and give the lock back."""
    out = Path(output_dir)
    marker = read_marker(out)
    if marker is not None:
        known = {n.replace("{name}", out.name) for n in KNOWN_ENTRIES.get(marker.get("command"), ())}
        written = set(marker.get("entries") or []) | {p.name for p in out.iterdir() if p.name in known}
        write_marker(out, marker["command"], sorted(written))
    release_lock(out)


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, None without one (or one that is not ours: not a JSON object with a command)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("command"), str) else None


def write_marker(folder: Path, command: str, entries: list[str] | None = None) -> None:
    """Mark `folder` as written by `command`; `entries`: its top-level names (default: what is there now)."""
    folder = Path(folder)
    if entries is None:
        entries = sorted(p.name for p in folder.iterdir() if p.name not in (MARKER, LOCK))
    tmp = folder / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"command": command, "entries": entries}, indent=2) + "\n")
    os.replace(tmp, folder / MARKER)


def check_unlocked(folder: Path) -> None:
    """Refuse a folder a live run holds (its lock names a process that is running)."""
    holder = _live_holder(Path(folder))
    if holder:
        raise EncoderizeError(f"{str(folder)!r} is in use by a running {holder.get('command', 'run')} (pid "
                              f"{holder.get('pid')} on {holder.get('host')}); wait for it or pick another "
                              f"--output-dir (if no run is live, delete {str(Path(folder) / LOCK)!r})")


_HELD: set[Path] = set()  # the folders this process locked, so a failed command gives them back


def acquire_lock(folder: Path, command: str) -> None:
    """Take `folder`'s lock for this process: refused while a live run holds it, a stale one is taken over."""
    check_unlocked(folder)
    tmp = Path(folder) / f".{LOCK}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command}) + "\n")
    os.replace(tmp, Path(folder) / LOCK)
    _HELD.add(Path(folder).resolve())


def release_lock(folder: Path) -> None:
    """Give the lock back when this process holds it."""
    lock = Path(folder) / LOCK
    if _holder(lock).get("pid") == os.getpid():
        lock.unlink(missing_ok=True)
    _HELD.discard(Path(folder).resolve())


def releasing_locks(command):
    """Decorate a command so that a failure (a refusal after the lock was taken, an error, Ctrl-C) gives back the
    locks it took: the folder is left as the failure left it, with no lock of a dead run in it."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        before = set(_HELD)
        try:
            return command(*args, **kwargs)
        except BaseException:
            for folder in _HELD - before:
                release_lock(folder)
            raise
    return run


def held_here(path: str | os.PathLike) -> bool:
    """True when `path` is inside (or is) a folder this process holds the lock of: a part of the live run's folder,
    which the run may replace (its encoder, its exports) whatever an older version left there."""
    path = Path(path).resolve()
    return any(_holder(folder / LOCK).get("pid") == os.getpid() and _holder(folder / LOCK).get("host")
               == socket.gethostname() for folder in (path, *path.parents))


def _holder(lock: Path) -> dict:
    try:
        found = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _live_holder(folder: Path) -> dict | None:
    holder = _holder(folder / LOCK)
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return None
    if holder.get("host") != socket.gethostname():
        return holder  # another machine's process cannot be looked up: assume it is live
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # gone: a stale lock
    except PermissionError:
        pass  # exists, run by another user
    return holder


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
