"""Everyday English sentences for `contrastive --method distill`: WordNet 3.0's usage examples, one JSONL row each.

    python scripts/wordnet_sentences.py --count 12000 --output wn12k.jsonl    # the copy scripts/setup.sh installed
    apt-get download wordnet-base && dpkg -x wordnet-base_*.deb wordnet    # or Debian's / WordNet 3.0's dict/
    python scripts/wordnet_sentences.py wordnet/usr/share/wordnet --count 12000 --output wn12k.jsonl

hf_encoderize/data/wordnet.py does the work and says how the sentences are chosen; this script adds the held-out
benchmark (`--exclude`, a topical_paraphrases-style JSONL) to the texts left out, with any sentence sharing 60% of
its words with one. WordNet's license (Princeton, permissive: use, copy, modify and distribute with its copyright
notice) is printed with the summary; keep it beside the file you pass on.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data import wordnet


def held_out_texts(path: Path | None) -> list[str]:
    """Every query, paraphrase and distractor of a held-out set."""
    if path is None:
        return []
    texts = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            texts += [row["query"], row["paraphrase"], *row["distractors"]]
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="?",
                        help="WordNet 3.0's database folder (data.noun, data.verb, ...); default: the copy "
                             "scripts/setup.sh installed")
    parser.add_argument("--count", type=int, default=12000, help="sentences to write")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle that picks them")
    parser.add_argument("--exclude", type=Path,
                        default=Path(__file__).parents[1] / "benchmarks" / "data" / "topical_paraphrases.jsonl",
                        help="held-out set whose sentences (and near copies) are left out")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    try:
        database = args.folder or wordnet.folder()
    except EncoderizeError as err:
        parser.exit(2, f"error: {err}\n")
    if not (database / "data.noun").is_file():
        parser.exit(2, f"error: {database} has no data.noun; give WordNet 3.0's database folder\n")
    if args.output.exists():
        parser.exit(2, f"error: {args.output} exists; give a new --output\n")
    exclude = held_out_texts(args.exclude if args.exclude and args.exclude.is_file() else None)
    print(json.dumps(wordnet.write_sentences(database, args.output, args.count, args.seed, exclude)))


if __name__ == "__main__":
    main()
