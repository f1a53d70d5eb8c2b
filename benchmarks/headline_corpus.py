"""The headline benchmarks' corpus: English text that ships with Python and its packages, split per data order.

Design choices:
- The texts are pydoc topics, docstrings of the standard library and of site-packages, and package descriptions, in a
  fixed order, each over 200 characters, deduplicated, until the preset's token target is reached. It is NOT
  FineWeb-Edu: technical prose, much of it about code.
- One data order is one shuffle of those texts (`random.Random(order)`), cut into a pretraining part and a held-apart
  CPT part (documents the bases never saw, the same for both arms).
- The texts are written once, gzipped (`texts.jsonl.gz`, about 10.6 MB for the GPU presets' 44M characters), and an
  order's split is made from them where training runs (`split_order`), checked against the SHA-256 recorded when the
  order was prepared. The split files themselves (about 45 MB per order, 180 MB for 4 orders) are then never carried:
  the GPU machine receives at most 64 MiB (issue 65). Which site-packages a machine has changes the texts, so they are
  read on the machine that prepares and carried, not read again on the GPU's.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import random
import sysconfig
from pathlib import Path

CHARS_PER_TOKEN = 3.65  # measured with the 8k BPE on this corpus; the size is a target, the real count is reported
TEXTS = "texts.jsonl.gz"
SPLITS = ("pretrain", "cpt")


def _docstrings(source: Path) -> list[str]:
    try:
        tree = ast.parse(source.read_text(errors="ignore"))
    except (SyntaxError, ValueError, OSError):
        return []
    nodes = (n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef
                                                    | ast.AsyncFunctionDef))
    return [d for d in (ast.get_docstring(n) for n in nodes) if d]


def _shipped_texts():
    """Texts in a fixed order: pydoc topics, the standard library's docstrings, package descriptions, then
    site-packages docstrings (the largest source, read last and only as far as needed)."""
    from pydoc_data.topics import topics

    yield from (topics[key] for key in sorted(topics))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for source in sorted(stdlib.rglob("*.py")):
        if "site-packages" not in source.parts and "test" not in source.parts:
            yield from _docstrings(source)
    purelib = Path(sysconfig.get_paths()["purelib"])
    for metadata in sorted(purelib.glob("*.dist-info/METADATA")):
        yield metadata.read_text(errors="ignore").partition("\n\n")[2]
    for source in sorted(purelib.rglob("*.py")):
        if "tests" not in source.parts and "test" not in source.parts:
            yield from _docstrings(source)


def collect_texts(tokens: int) -> list[str]:
    """The shipped texts over 200 characters, one document per line, deduplicated, up to ~`tokens` tokens."""
    seen, texts, chars = set(), [], 0
    for text in _shipped_texts():
        text = " ".join(text.split())  # one docstring or topic is one document, on one line
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        if len(text) < 200 or digest in seen:
            continue
        seen.add(digest)
        texts.append(text)
        chars += len(text)
        if chars >= tokens * CHARS_PER_TOKEN:
            break
    return texts


def write_texts(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=6) as handle:
        handle.writelines(json.dumps(t) + "\n" for t in texts)


def read_texts(path: Path) -> list[str]:
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle]


def split_order(texts: list[str], folder: Path, order: int, cpt_share: float) -> dict:
    """pretrain.jsonl and cpt.jsonl (disjoint) of one data order: `texts` shuffled by `order`, the last `cpt_share`
    held apart for the CPT. Returns the counts and each file's SHA-256 (what a later `split_order` must reproduce)."""
    texts = list(texts)
    random.Random(order).shuffle(texts)
    cut = round(len(texts) * (1 - cpt_share))
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    for name, part in zip(SPLITS, (texts[:cut], texts[cut:]), strict=True):
        data = "".join(json.dumps({"text": t}) + "\n" for t in part).encode()
        (folder / f"{name}.jsonl").write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    return {"documents": len(texts), "characters": sum(map(len, texts)), "pretrain_documents": cut,
            "cpt_documents": len(texts) - cut, "sha256": digests}


def build_corpus(folder: Path, tokens: int, order: int, cpt_share: float) -> dict:
    """One order's split from the shipped texts (read afresh): what the `cpu` presets have always done."""
    return split_order(collect_texts(tokens), folder, order, cpt_share)


def ensure_split(work: Path, texts: Path, order: int, cpt_share: float) -> None:
    """Re-make an order's split files from the carried texts when they are missing (a compact carry), and refuse a
    split that differs from the one the order's tokenizer was trained on."""
    if all((work / f"{name}.jsonl").is_file() for name in SPLITS):
        return
    if not texts.is_file():
        raise SystemExit(f"error: {work} has no pretrain.jsonl/cpt.jsonl and {texts} is missing; prepare again")
    made = split_order(read_texts(texts), work, order, cpt_share)
    recorded = json.loads((work / "corpus.json").read_text()).get("sha256")
    if recorded and made["sha256"] != recorded:
        raise SystemExit(f"error: the split re-made in {work} differs from the one prepared (SHA-256); prepare again")


def compact(out: Path) -> list[Path]:
    """Delete every order's split files under OUT (re-made from OUT/texts.jsonl.gz where training runs); the deleted."""
    gone = sorted(out.glob("order*/pretrain.jsonl")) + sorted(out.glob("order*/cpt.jsonl"))
    for path in gone:
        path.unlink()
    return gone


def folder_bytes(out: Path) -> int:
    """What carrying OUT costs: the bytes of every file under it."""
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
