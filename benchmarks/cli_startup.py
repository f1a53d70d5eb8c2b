"""How long `hf-encoderize --help` and `--version` take to answer, as a user's shell starts them: a fresh
`python -m hf_encoderize.cli` process each time, timed from spawn to exit (interpreter start-up included).

    python benchmarks/cli_startup.py                          # this checkout
    python benchmarks/cli_startup.py --before 0371c04         # also the tree of an earlier commit, side by side

`--before REV` exports that commit's tree (`git archive`) to a temporary folder and times it through `PYTHONPATH`, with
the same interpreter and installed libraries, alternating the two trees round by round so a noisy shared machine
slows them alike. The figure is the median of `--rounds` runs (default 7); `cpt --help` is timed too (it imports the
command's config classes, torch among them, so it stays slower).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"help": ["--help"], "version": ["--version"], "cpt_help": ["cpt", "--help"]}


def time_once(tree: Path, words: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.cli", *words], cwd=tree, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(words)} failed in {tree}: {done.stderr[-500:]}")
    return seconds


def measure(trees: dict[str, Path], rounds: int) -> dict:
    times = {name: {arm: [] for arm in ARMS} for name in trees}
    for _ in range(rounds):
        for arm, words in ARMS.items():
            for name, tree in trees.items():  # alternating: the trees share the machine's noise
                times[name][arm].append(time_once(tree, words))
    return {name: {arm: {"median_s": round(statistics.median(values), 3), "min_s": round(min(values), 3)}
                   for arm, values in arms.items()} for name, arms in times.items()}


def export_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="a commit whose tree is timed beside this checkout")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        trees = {"after": ROOT}
        if args.before:
            trees = {"before": export_tree(args.before, Path(work)), **trees}
        results = measure(trees, args.rounds)
    print(json.dumps({"python": sys.version.split()[0], "rounds": args.rounds, "before_rev": args.before,
                      "after_rev": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                                  capture_output=True, text=True).stdout.strip(),
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
