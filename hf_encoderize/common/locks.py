"""The output folder's lock: one live run per folder, whichever command it is.

Design choices:
- `LOCK` (`.hf-encoderize.lock`) is held with `filelock` (the kernel's flock: two processes cannot both take it, and it
  goes with a process that dies) and names its holder (pid, host, command) for the refusal; a second run into the
  folder is refused in one line. A lock file naming a live process of this host that holds no flock (an older
  version's run) is respected; one whose process is gone is stale and taken over; one of this very process (a run
  started again in the same Python session after an error) is ours. Every command takes it the same way
  (`acquire_lock`; `lock_output` for a folder that does not exist yet, as `convert`'s).
- A command that fails gives back the locks it took (`releasing_locks`), and `held_here` tells a save inside the live
  run's own folder (its encoder, its exports) that the folder is the run's to replace.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

LOCK = ".hf-encoderize.lock"


def check_unlocked(folder: Path) -> None:
    """Refuse a folder a live run holds (its lock names a process that is running)."""
    if Path(folder).resolve() in _HELD:
        return
    _check_lock_is_a_file(Path(folder))
    holder = _live_holder(Path(folder))
    if holder:
        _refuse_in_use(folder, holder)


def _refuse_in_use(folder: Path, holder: dict) -> None:
    raise EncoderizeError(f"{str(folder)!r} is in use by a running {holder.get('command', 'run')} (pid "
                          f"{holder.get('pid')} on {holder.get('host')}); wait for it or pick another --output-dir "
                          f"(if no run is live, delete {str(Path(folder) / LOCK)!r})")


_HELD: dict[Path, object] = {}  # folder -> the FileLock this process holds, so a failed command gives them back


def acquire_lock(folder: Path, command: str) -> None:
    """Take `folder`'s lock for this process (the folder exists): refused while another live run holds it, a stale
    one is taken over. The flock is what makes two takers exclusive; the pid in the file is only what the refusal
    names and what an older version's lock is judged by."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    if folder.resolve() in _HELD:
        return
    _check_lock_is_a_file(folder)
    lock = FileLock(str(folder / LOCK), timeout=0, is_singleton=False)
    try:
        lock.acquire()
    except Timeout:
        _refuse_in_use(folder, _holder(folder / LOCK))
    holder = _live_holder(folder, flock=False)  # an older version's lock of a live process holds no flock
    if holder:
        lock.release()
        _refuse_in_use(folder, holder)
    (folder / LOCK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command})
                               + "\n")
    _HELD[folder.resolve()] = lock


def _check_lock_is_a_file(folder: Path) -> None:
    """A folder (or a link) where our lock file goes is not ours to replace or delete: refused in one line."""
    lock = folder / LOCK
    if lock.is_symlink() or (lock.exists() and not lock.is_file()):
        kind = "a symlink" if lock.is_symlink() else "a folder"
        raise EncoderizeError(f"{str(lock)!r} is {kind}, not hf-encoderize's lock file; move it away (it is not ours "
                              "to delete) or pick another --output-dir")


def lock_output(output_dir: str | os.PathLike, command: str) -> Path:
    """Make `output_dir` (if absent) and take its lock: for a command that writes a folder whole (`convert`), so a
    second one into the same folder is refused rather than both exiting 0 with one model lost."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    acquire_lock(out, command)
    return out


def release_lock(folder: Path) -> None:
    """Give the lock back when this process holds it (its file goes first, then the flock)."""
    lock = Path(folder) / LOCK
    held = _HELD.pop(Path(folder).resolve(), None)
    if _holder(lock).get("pid") == os.getpid():
        lock.unlink(missing_ok=True)
    if held is not None:
        held.release()


def releasing_locks(command):
    """Decorate a command so that a failure (a refusal after the lock was taken, an error, Ctrl-C) gives back the
    locks it took: the folder is left as the failure left it, with no lock of a dead run in it."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        before = set(_HELD)
        try:
            return command(*args, **kwargs)
        except BaseException:
            for folder in set(_HELD) - before:
                release_lock(folder)
            raise
    return run


def held_here(path: str | os.PathLike) -> bool:
    """True when `path` is inside (or is) a folder this process holds the lock of: a part of the live run's folder,
    which the run may replace (its encoder, its exports) whatever an older version left there."""
    path = Path(path).resolve()
    return any(folder in _HELD for folder in (path, *path.parents))


def _holder(lock: Path) -> dict:
    try:
        found = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _live_holder(folder: Path, flock: bool = True) -> dict | None:
    holder = _holder(folder / LOCK)
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return None
    if flock and _flocked(folder / LOCK):
        return holder
    if holder.get("host") != socket.gethostname():
        return holder  # another machine's process cannot be looked up: assume it is live
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # gone: a stale lock
    except PermissionError:
        pass  # exists, run by another user
    return holder


def _flocked(lock: Path) -> bool:
    """Whether another process holds `lock`'s flock (a live run of this version), without creating the file."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
