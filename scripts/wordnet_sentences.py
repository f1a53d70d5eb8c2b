"""Everyday English sentences for `contrastive --method distill`: WordNet 3.0's usage examples, one JSONL row each.

    apt-get download wordnet-base && dpkg -x wordnet-base_*.deb wordnet    # Debian/Ubuntu; or WordNet 3.0's dict/
    python scripts/wordnet_sentences.py wordnet/usr/share/wordnet --count 12000 --output wn12k.jsonl

Every synset gloss in WordNet's `data.noun`, `data.verb`, `data.adj` and `data.adv` ends with quoted examples of the
word in use ("she lost her husband in the war"): about 29,000 distinct sentences of 5-25 words on every topic the
lexicon covers. Measured on benchmarks/topical_paraphrases.py (issue 53, docs/contrastive.md "Distillation on
WordNet's example sentences"), a student distilled on 12,000 of them put a same-topic distractor above the paraphrase
far less often than one distilled on as many sentences SmolLM2 sampled. The examples are kept as written, first letter
capitalised and a full stop added; only plain ASCII text of 5 to 25 words is kept, drawn in a shuffled order
(`--seed`), and any sentence of the held-out benchmark (`--exclude`, a topical_paraphrases-style JSONL) or one
sharing 60% or more of its words with one is left out. WordNet's license (Princeton, permissive: use, copy, modify and
distribute with its copyright notice) is printed with the summary; keep it beside the file you pass on.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

PARTS = ("noun", "verb", "adj", "adv")
PLAIN = re.compile(r"[A-Za-z0-9 ,.'!?\-:;()]+")
WORDS = re.compile(r"[a-z']+")
LICENSE = "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. (WordNet 3.0 license)"


def examples(folder: Path) -> list[str]:
    """The quoted usage examples of every gloss, in file order, deduplicated, as sentences."""
    found = []
    for part in PARTS:
        for line in (folder / f"data.{part}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:  # the license header lines start with two spaces
                continue
            for quoted in re.findall(r'"([^"]+)"', line.split("|", 1)[1]):
                text = quoted.strip().rstrip(";").strip()
                if not 5 <= len(text.split()) <= 25 or not PLAIN.fullmatch(text):
                    continue
                text = text[0].upper() + text[1:]
                found.append(text if text[-1] in ".!?" else text + ".")
    return list(dict.fromkeys(found))


def held_out_texts(path: Path | None) -> list[set[str]]:
    """The word sets of every query, paraphrase and distractor of a held-out set."""
    if path is None:
        return []
    texts = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            texts += [row["query"], row["paraphrase"], *row["distractors"]]
    return [set(WORDS.findall(text.lower())) for text in texts]


def near(words: set[str], held_out: list[set[str]], overlap: float = 0.6) -> bool:
    """Whether the word set shares `overlap` (Jaccard) or more with any held-out text."""
    return any(len(words & other) / max(1, len(words | other)) >= overlap for other in held_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="WordNet 3.0's database folder (data.noun, data.verb, ...)")
    parser.add_argument("--count", type=int, default=12000, help="sentences to write")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle that picks them")
    parser.add_argument("--exclude", type=Path,
                        default=Path(__file__).parents[1] / "benchmarks" / "data" / "topical_paraphrases.jsonl",
                        help="held-out set whose sentences (and near copies) are left out")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    if not (args.folder / "data.noun").is_file():
        parser.exit(2, f"error: {args.folder} has no data.noun; give WordNet 3.0's database folder\n")
    if args.output.exists():
        parser.exit(2, f"error: {args.output} exists; give a new --output\n")
    sentences = examples(args.folder)
    random.Random(args.seed).shuffle(sentences)
    held_out = held_out_texts(args.exclude if args.exclude and args.exclude.is_file() else None)
    kept = [text for text in sentences[:args.count] if not near(set(WORDS.findall(text.lower())), held_out)]
    args.output.write_text("".join(json.dumps({"text": text}) + "\n" for text in kept))
    print(json.dumps({"examples": len(sentences), "written": len(kept),
                      "left_out_near_held_out": min(args.count, len(sentences)) - len(kept),
                      "output": str(args.output), "license": LICENSE}))


if __name__ == "__main__":
    main()
