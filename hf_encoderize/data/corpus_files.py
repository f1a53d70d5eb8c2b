"""Local corpus files: which files `--data-files` names, how they are read, and what they hold, for "same data?".

Design choices:
- One reader of local paths (`local_files`) for cpt, pretrain and contrastive: a file, a folder or a glob, after `~`,
  so they accept the same things. `open_local` is the whole step from that text to files ready to read (one kind of
  file, no .txt document too large to hold), so `sources` comes here once per source.
- Bad contents are one-line errors: reading goes through `guarded`, which turns any read/parse error into an
  `EncoderizeError` naming the file and, after re-scanning it (`_diagnose`), the line ("docs.jsonl line 3: not valid
  JSON"). `LocalFiles` streams the files one after the other, so an error can name the file and row it comes from.
- "Same data?" is read from the files, not the path text: `data_files` counts for a resume or a reused stage by each
  file's size and a SHA-256 of all of it (`content_identity`: streamed, once per process, cached by size and mtime),
  so `./docs.jsonl` and `docs.jsonl` are one corpus and a corpus edited in place, anywhere in it, is another.
- Nothing here imports another data module: `sources` (the configured source and its documents) and, through it,
  `budget` stand on this one, and none calls back up.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from collections.abc import Iterator

from hf_encoderize.common.errors import EncoderizeError

HEAD_BYTES = 1 << 20  # the chunk `file_identity` reads; once the only part of each file hashed
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # suffix -> datasets builder
MAX_DOCUMENT_BYTES = 1 << 20  # a .txt document over this is refused (`check_document_size`): it is read whole
_SAMPLE_BY = {"line": "line", "paragraph": "paragraph", "file": "document"}  # datasets' text builder's names


def local_files(spec: str, builders: dict[str, str] = BUILDERS) -> list[str]:
    """The files `--data-files` names: a file (its name taken as it is, brackets and all), a folder (every file under
    it) or a glob, after `~`; only those whose suffix `builders` reads. The one reader of local paths (cpt, pretrain,
    contrastive), so they accept the same things."""
    path = os.path.expanduser(spec)
    if os.path.isfile(path):
        files = [path]  # before the glob: `pairs[1].jsonl` is a character class to glob, a file name here
    elif os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True) if os.path.isfile(f))
    else:
        files = sorted(glob.glob(path))
    files = [f for f in files if os.path.splitext(f)[1] in builders]
    if not files:
        kinds = "/".join(dict.fromkeys(builders))
        raise EncoderizeError(f"no {kinds} files found at {spec!r}; check --data-files")
    return files


def reads_text_files(spec: str | None) -> bool:
    """Whether `--data-files` `spec` names local .txt files only."""
    try:
        return bool(spec) and all(path.endswith(".txt") for path in local_files(spec))
    except EncoderizeError:  # no such files: said where the source is opened
        return False


def content_identity(spec: str | None) -> list[str] | str | None:
    """What `--data-files` `spec` holds, for "same data?": per file, in reading order, `size:sha256-of-the-file`.
    Unset -> None; files that cannot be found -> the path text (opening the source says what is wrong).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp()); (folder / "docs.txt").write_text("one")
    3
    >>> content_identity(str(folder / "docs.txt")) == content_identity(str(folder / "." / "docs.txt"))
    True
    >>> content_identity(str(folder / "docs.txt"))[0].split(":")[0]
    '3'
    """
    if not spec:
        return None
    try:
        files = local_files(spec)
    except EncoderizeError:
        return spec
    return [file_identity(path) for path in files]


_HASHED: dict[tuple, str] = {}  # (real path, size, mtime) -> identity: a file is read once per process


def file_identity(path: str, head_only: bool = False) -> str:
    """`size:sha256` of the whole file, streamed (an edit anywhere is other data), cached by size and modification
    time. `head_only`: the first MiB only, as runs recorded before whole-file hashing (`identity_as_today`)."""
    import hashlib

    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, head_only)
    if key not in _HASHED:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(HEAD_BYTES):
                digest.update(chunk)
                if head_only:
                    break
        _HASHED[key] = f"{stat.st_size}:{digest.hexdigest()}"
    return _HASHED[key]


def folder_identity(folder: str | os.PathLike, skip: tuple[str, ...] = ()) -> str:
    """What a local folder holds, for "same run?" (a teacher model's, `recipes.contrastive.distill.teacher_identity`):
    `sha256:` of every file's relative path and `file_identity`, in name order, hidden files and the top-level names in
    `skip` left out. A file edited in place gives another identity; the folder's own path does not count.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp()); (folder / "config.json").write_text("{}")
    2
    >>> before = folder_identity(folder); (folder / "README.md").write_text("card")
    4
    >>> folder_identity(folder, skip=("README.md",)) == before, folder_identity(folder) == before
    (True, False)
    """
    import hashlib
    from pathlib import Path

    root = Path(os.path.realpath(folder))
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and parts[0] not in skip and not any(part.startswith(".") for part in parts):
            digest.update(f"{'/'.join(parts)}\0{file_identity(str(path))}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def identity_as_today(identity: dict, data_files: str | None = None) -> dict:
    """A recorded identity in today's terms, so a resume or a reused stage compares like with like (kept for runs
    recorded before 0.2's content identity and before `--text-unit`): a `data.data_files` path text becomes the content
    of those files as they are now (such a record cannot tell an edit in place; today's can); first-MiB hashes of the
    files at the recorded path `data_files` become whole-file ones where they still match (`whole_file_identity`)."""
    identity = with_legacy_text_unit(identity)
    recorded = identity.get("data.data_files")
    if isinstance(recorded, str):
        return {**identity, "data.data_files": content_identity(recorded)}
    return ({**identity, "data.data_files": whole_file_identity(recorded, data_files)}
        if isinstance(recorded, list) else identity)


def whole_file_identity(recorded: list[str], spec: str | None) -> list[str]:
    """A record from before whole-file hashing holds each file's size and first-MiB hash: where that still matches
    the file (`spec`), the file's whole-file identity stands for it (such a record cannot tell an edit after the first
    MiB; today's can)."""
    try:
        files = local_files(spec) if spec else []
    except EncoderizeError:
        return recorded
    if len(files) != len(recorded):
        return recorded
    return [file_identity(path) if entry == file_identity(path, head_only=True) else entry
            for entry, path in zip(recorded, files, strict=True)]


def with_legacy_text_unit(identity: dict) -> dict:
    """A recorded identity from before `--text-unit` (no `data.text_unit`) that read .txt files read them one line per
    document: say so, so that a resume or a reused stage compares it with today's unit (paragraph by default) and
    refuses the change, rather than continue the stream's position in other documents."""
    recorded = identity.get("data.data_files")
    if "data.text_unit" in identity or not isinstance(recorded, str) or not reads_text_files(recorded):
        return identity
    return {**identity, "data.text_unit": "line"}


def blank_file(path: str) -> bool:
    """An empty file, or a small one of whitespace only (datasets' JSON builder reads one as a bare StopIteration)."""
    size = os.path.getsize(path)
    return size == 0 or (size < 1 << 16 and not open(path, "rb").read().strip())


def dataset_patterns(files: list[str]) -> list[str]:
    """`files` as `datasets.load_dataset`'s data_files, which it globs: `[` in a name is escaped to stay a name."""
    return [glob.escape(path) for path in files]


def check_document_size(files: list[str], unit: str) -> None:
    """Refuse, by a streamed scan before anything is read whole, a .txt document over `MAX_DOCUMENT_BYTES`: the text
    builder holds a document in memory whole and the tokenizer multiplies it (a 10 MB paragraph peaked at 3.5 GB, a
    200 MB one was killed). A file with no blank line under `paragraph` is the usual cause: its unit is the line."""
    for path in files:
        if unit == "line":
            return
        size = os.path.getsize(path) if unit == "file" else _longest_paragraph(path, MAX_DOCUMENT_BYTES)
        if size > MAX_DOCUMENT_BYTES:
            what = "is over" if unit == "file" else "has a paragraph (text without a blank line) of over"
            raise EncoderizeError(f"{path} {what} {MAX_DOCUMENT_BYTES >> 20} MiB, and --text-unit {unit} reads it "
                                  "as one document held whole in memory; if the file holds one text per line, pass "
                                  "--text-unit line (or split it into paragraphs with blank lines)")


def _longest_paragraph(path: str, limit: int) -> int:
    """The bytes of `path`'s longest run without a blank line, read in chunks; stops once a run passes `limit`."""
    longest, run, ended_in_newline = 0, 0, False
    with open(path, "rb") as handle:
        while chunk := handle.read(HEAD_BYTES):
            chunk = chunk.replace(b"\r\n", b"\n")  # the builder reads universal newlines
            if ended_in_newline and chunk.startswith(b"\n"):
                run, chunk = 0, chunk[1:]
            for index, part in enumerate(chunk.split(b"\n\n")):
                run = run + len(part) if index == 0 else len(part)
                longest = max(longest, run)
            if longest > limit:
                break
            ended_in_newline = chunk.endswith(b"\n")
    return longest


def diagnose_files(files: list[str], err: Exception) -> str:
    """One line for a read error of a set of local files: the first bad line of the first file that has one."""
    for path in files:
        found = _diagnose(path, err)
        if found != _reason(path, err):
            return found
    return _reason(files[0] if len(files) == 1 else ", ".join(files[:3]), err)


def open_local(spec: str, text_unit: str) -> LocalFiles:
    """The files `--data-files` `spec` names, ready to stream: one kind of file only and, for .txt files, no document
    over `MAX_DOCUMENT_BYTES` under `text_unit` (a `--text-unit` value, `sources.TextUnit`)."""
    files = local_files(spec)
    builders = {BUILDERS[os.path.splitext(f)[1]] for f in files}
    if len(builders) > 1:
        raise EncoderizeError("--data-files mixes file types; pass one kind (.txt, .jsonl or .parquet)")
    if builders == {"text"}:
        check_document_size(files, text_unit)
    return LocalFiles(files, builders.pop(), text_unit=text_unit)


class LocalFiles:
    """Local files streamed one after the other, so an error can name the file (and row) it comes from."""

    def __init__(self, files: list[str], builder: str, text_unit: str = "paragraph"):
        self.files, self.builder, self.text_unit = files, builder, text_unit

    def located(self) -> Iterator[tuple[str, int, dict]]:
        """`(file, row number from 1, row)` for every row of every file."""
        import datasets

        # The builders log a parse error before raising it; we report it ourselves, as one line.
        logging.getLogger("datasets.packaged_modules").setLevel(logging.CRITICAL)
        for path in self.files:
            try:
                options = {"sample_by": _SAMPLE_BY[self.text_unit]} if self.builder == "text" else {}
                rows = datasets.load_dataset(self.builder, data_files=dataset_patterns([path]), split="train",
                                             streaming=True, **options)
            except StopIteration:  # the streaming builders read a first row to infer the columns: an empty file
                continue
            except Exception as err:
                raise EncoderizeError(_diagnose(path, err)) from None
            for number, row in enumerate(guarded(rows, path), 1):
                yield path, number, row

    def __iter__(self) -> Iterator[dict]:
        return (row for _, _, row in self.located())


def guarded(rows, where: str) -> Iterator[dict]:
    """`rows`, with any read/parse error turned into one line naming `where` (a file is re-scanned for the line)."""
    try:
        yield from rows
    except EncoderizeError:
        raise
    except Exception as err:  # datasets/pyarrow raise many types (ArrowInvalid, UnicodeDecodeError, ...)
        raise EncoderizeError(_diagnose(where, err) if os.path.isfile(where) else _reason(where, err)) from None


def _reason(where: str, err: Exception) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return f"cannot read {where!r}: {text}"


def _diagnose(path: str, err: Exception) -> str:
    """The first bad line of a local file, found by reading it again; the library's own message when none is found."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            pq.ParquetFile(path)
        except Exception as bad:
            return f"{path}: not a parquet file ({str(bad).splitlines()[0]}); replace it or remove it from --data-files"
        return _reason(path, err)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            problem = _line_problem(raw, json_lines=not path.endswith(".txt"))
            if problem:
                return f"{path} line {number}: {problem}"
    return _reason(path, err)


def _line_problem(raw: bytes, json_lines: bool) -> str | None:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text (a binary file?); pass text, JSON lines or parquet files only"
    if not json_lines or not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError as err:
        return f"not valid JSON ({err}); fix or remove the line"
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object; each line must be one object like {{\"text\": ...}}"
    return None
