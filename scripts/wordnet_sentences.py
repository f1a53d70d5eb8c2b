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


def held_out_texts(path: Path) -> list[str]:
    """Every query, paraphrase and distractor of a held-out set; one `EncoderizeError` line when it cannot be read (a
    held-out set that is silently skipped lets its sentences into training)."""
    if not path.is_file():
        raise EncoderizeError(f"--exclude {str(path)!r}: no such file; give the held-out set's JSONL (query, "
                              "paraphrase, distractors), whose sentences are kept out of the output")
    texts = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                texts += [row["query"], row["paraphrase"], *row["distractors"]]
            except (ValueError, KeyError, TypeError):
                raise EncoderizeError(f"--exclude {str(path)!r}, line {number}: not a JSON row with query, "
                                      "paraphrase and distractors; give the held-out set's JSONL") from None
    return texts


def check_arguments(args) -> None:
    """Refuse, before anything is read or written, a count that writes nothing and an output that cannot be made."""
    if args.count < 1:
        raise EncoderizeError(f"--count {args.count}: the number of sentences to write must be 1 or more")
    if args.output.exists():
        raise EncoderizeError(f"{args.output} exists; give a new --output")
    parent = args.output.parent
    if not parent.is_dir():
        raise EncoderizeError(f"--output {str(args.output)!r}: the folder {str(parent)!r} does not exist; make it "
                              "first or give an --output in an existing folder")


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
        check_arguments(args)
        database = args.folder or wordnet.folder()
        if not (database / "data.noun").is_file():
            raise EncoderizeError(f"{database} has no data.noun; give WordNet 3.0's database folder")
        exclude = held_out_texts(args.exclude)
    except EncoderizeError as err:
        parser.exit(2, f"error: {err}\n")
    print(json.dumps(wordnet.write_sentences(database, args.output, args.count, args.seed, exclude)))


if __name__ == "__main__":
    main()
