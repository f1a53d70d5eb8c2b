"""Does a quickstart run print what the README quotes? Every line of the README's quickstart block (its `...` lines
aside) must stand, to the letter, in the run's captured stdout and stderr, with the run's folder read as `runs/`.

    hf-encoderize quickstart --output-dir /tmp/qs/quickstart > /tmp/qs/out.txt 2> /tmp/qs/err.txt
    python scripts/quickstart_check.py /tmp/qs/out.txt /tmp/qs/err.txt --runs /tmp/qs

Prints one JSON object (the lines quoted, found, and those missing) and exits 1 when a line is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK_START = "held-out paraphrases, and where everything is:\n\n```\n"


def quoted_lines(readme: str) -> list[str]:
    """The README's quickstart block, its elisions (`...`) and blank lines left out."""
    if BLOCK_START not in readme:
        raise SystemExit("error: the README has no quickstart block to check against (its lead-in line changed?)")
    block = readme.split(BLOCK_START, 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and line.strip() != "..."]


def check(readme: str, printed: str, runs: str | None = None) -> dict:
    """The quoted lines that `printed` holds and those it does not (`runs`: the run's parent folder, read as runs/)."""
    if runs:
        printed = printed.replace(runs.rstrip("/") + "/", "runs/")
    lines = quoted_lines(readme)
    missing = [line for line in lines if line not in printed]
    return {"quoted": len(lines), "found": len(lines) - len(missing), "missing": missing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captured", nargs="+", type=Path, help="the run's captured stdout and stderr files")
    parser.add_argument("--runs", help="the folder the run's --output-dir was in, read as runs/")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    printed = "\n".join(path.read_text(errors="replace") for path in args.captured)
    result = check(args.readme.read_text(), printed, args.runs)
    print(json.dumps(result, indent=1))
    return 1 if result["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
