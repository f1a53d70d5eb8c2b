"""A candidate for the quickstart embedding model's training data: texts that say the same thing in other words, from
Python's own docstrings, each with a hard negative on the same topic that says something else (issue 42, point 5).

Measured with benchmarks/topical_paraphrases.py against the quickstart's SimCSE stage (same encoder, same 40 steps of
16 rows, 24 tokens, lr 1e-4): better among paraphrases alone (recall@1 0.734 against 0.578) but not against topical
distractors (recall@1 0.172 against 0.281, MRR 0.411 against 0.418), so the quickstart keeps SimCSE and this stays a
benchmark arm. The benchmark's docstring has the figures and the command.

Design choices:
- SimCSE on documentation sentences (each sentence its own positive) teaches topic, not meaning: on held-out everyday
  English a sentence on the query's topic outranks its paraphrase. Pairs whose two sides share meaning but few
  words, against negatives that share topic and words but not meaning, aim at the opposite ranking.
- Every pair is read from the installed standard library, so it stays offline and needs no dataset:
  * the same method of two types, documented twice in other words (`str.isdigit`: "Return True if the string is a
    digit string", `bytes.isdigit`: "Return True if all characters in B are digits ..."); negative: a sibling method
    of the anchor's type ("... is an uppercase string");
  * a function's name spelt as words and its docstring's summary (`os.path.getmtime` -> "get mtime" / "Return the
    last modification time of a file ..."); negative: a sibling function's summary from the same module.
- Rows are (anchor, positive, negative) for `contrastive --method supervised --negative-column negative`: in-batch
  negatives plus one same-topic negative per row (MultipleNegativesRankingLoss with hard negatives).
- Deterministic: modules and names are walked in sorted order and the rows shuffled with a fixed seed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import re
from pathlib import Path

# Types whose methods share names and are documented independently (str vs bytes vs bytearray, the collections ABCs).
TYPES = ("builtins.str", "builtins.bytes", "builtins.bytearray", "builtins.list", "builtins.tuple", "builtins.dict",
         "builtins.set", "builtins.int", "builtins.float", "builtins.memoryview", "builtins.range",
         "collections.deque", "collections.OrderedDict", "collections.Counter", "collections.UserString",
         "collections.abc.Mapping", "collections.abc.MutableMapping", "collections.abc.MutableSequence",
         "collections.abc.Set", "collections.abc.MutableSet", "io.StringIO", "io.BytesIO", "pathlib.Path",
         "datetime.date", "datetime.datetime", "datetime.time", "datetime.timedelta", "decimal.Decimal",
         "fractions.Fraction", "array.array")
# Modules whose public functions have plain-English summaries (name -> description pairs).
MODULES = ("os", "os.path", "shutil", "math", "cmath", "statistics", "random", "string", "textwrap", "re", "time",
           "calendar", "glob", "fnmatch", "tempfile", "heapq", "bisect", "itertools", "functools", "operator", "json",
           "base64", "binascii", "zlib", "gzip", "hashlib", "inspect", "keyword", "locale", "platform", "socket",
           "struct", "sys", "threading", "urllib.parse", "uuid", "warnings", "webbrowser", "html", "difflib",
           "copy", "pprint", "shlex", "unicodedata", "codecs", "getpass", "secrets", "colorsys", "filecmp",
           "mimetypes", "ipaddress", "email.utils", "http.cookies", "logging", "gc", "signal", "select", "errno")


def summary(obj) -> str | None:
    """The first sentence of `obj`'s docstring that is prose (not a signature line), 20-160 characters."""
    doc = inspect.getdoc(obj) or ""
    for paragraph in re.split(r"\n\s*\n", doc):
        text = " ".join(paragraph.split())
        if not text or re.match(r"^[\w.]+\(.*\)( -> .*)?$", text) or "--" in text or "->" in text:
            continue
        sentence = text.split(". ")[0].rstrip(".")
        return sentence if 20 < len(sentence) < 160 else None
    return None


def name_words(name: str) -> str:
    """A function's name as words: `getmtime` -> "get mtime", `make_archive` -> "make archive"."""
    words = re.sub(r"^(get|set|is|has|make|read|write|find|add|remove|split|join)(?=[a-z])", r"\1 ", name)
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", words).replace("_", " ").strip().lower()


def hardest(text: str, candidates: list[str]) -> str:
    """The candidate sharing the most words with `text` (same topic, same words, other meaning): the hard negative."""
    words = set(text.lower().split())
    return max(candidates, key=lambda other: len(words & set(other.lower().split())) / len(set(other.lower().split())))


def _resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _members(owner, predicate) -> dict[str, str]:
    """Public members of a type or module that pass `predicate`, name -> summary (sorted, distinct summaries)."""
    found = {}
    for name in sorted(dir(owner)):
        member = getattr(owner, name, None) if not name.startswith("_") else None
        if member is not None and predicate(member) and (text := summary(member)):
            found[name] = text
    return found


def method_pairs() -> list[dict]:
    """Same-named methods of two types documented in other words; negative: a sibling method of the anchor's type."""
    per_type = {dotted: _members(owner, callable) for dotted in TYPES if (owner := _resolve(dotted)) is not None}
    rows = []
    for name in sorted({name for members in per_type.values() for name in members}):
        owners = [dotted for dotted in per_type if name in per_type[dotted]]
        for first, second in zip(owners, owners[1:], strict=False):
            anchor, positive = per_type[first][name], per_type[second][name]
            siblings = [text for other, text in per_type[first].items() if other != name and text != anchor]
            if anchor != positive and siblings:
                rows.append({"anchor": anchor, "positive": positive, "negative": hardest(positive, siblings)})
    return rows


def name_pairs() -> list[dict]:
    """A module function's name as words and its summary; negative: a sibling function's summary."""
    rows = []
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        members = _members(module, lambda m: inspect.isfunction(m) or inspect.isbuiltin(m))
        for name, text in members.items():
            siblings = [other for key, other in members.items() if key != name and other != text]
            words = name_words(name)
            if siblings and " " in words:  # a name of one word ("chroot") says little in English
                rows.append({"anchor": words, "positive": text, "negative": hardest(text, siblings)})
    return rows


def write_pairs(folder: Path, seed: int = 0) -> Path:
    """The pairs as JSON lines (anchor, positive, negative) in `folder`/docstring_pairs.jsonl. Returns the file."""
    rng = random.Random(seed)
    rows = method_pairs() + name_pairs()
    rows = list({(r["anchor"], r["positive"]): r for r in rows}.values())  # one row per pair
    rng.shuffle(rows)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docstring_pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
