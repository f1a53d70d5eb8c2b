"""Write docs/compatibility.md: which model types encoderize and round-trip under each transformers stack.

Runs `hf-encoderize architectures --json` (the architecture matrix: tiny model, patch, probe under sdpa and eager,
then save and reload by plain transformers in a fresh process) once per Python environment given, and joins the
results into one table: rows = model types, columns = transformers versions, cells = pass / declared / fail.

    python scripts/compatibility.py floor=/tmp/venv-floor/bin/python newest=/tmp/venv-new/bin/python \
        [--model-types llama qwen2 ...] [--all] [--write docs/compatibility.md]

- pass: every backend transformers offers for the class passes the probe, and the round trip passes with no caveat.
- declared: it works, with a limit the saved folder and its card declare (a backend causal in plain transformers and
  another pinned as the default, only padded rows for a hybrid, plain transformers causal but the shipped remote code
  bidirectional).
- fail: a probe check or the round trip failed; the JSON holds the reason.
Without --all, a subset of common model types is run (the whole matrix takes long on a small machine); the page says
which.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The kinds that get a row (`model.kinds.ENCODERIZABLE`; restated: this script runs without importing the package).
ENCODERIZABLE = ("decoder-only", "hybrid attention+SSM")
SUBSET = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "granite",
          "stablelm", "gpt_neo", "gpt2", "smollm3", "falcon_h1"]
_RUN = "import sys; from hf_encoderize.cli import main; sys.exit(main(sys.argv[1:]))"
_VERSIONS = ("import json, torch, transformers, peft, accelerate, sentence_transformers as st; print(json.dumps("
             "{'transformers': transformers.__version__, 'torch': torch.__version__, 'peft': peft.__version__, "
             "'accelerate': accelerate.__version__, 'sentence-transformers': st.__version__}))")


def cell(result: dict) -> str:
    """pass / declared / fail for one model type's `ArchitectureResult` (as JSON).

    >>> cell({"backends": {"sdpa": "pass", "eager": "pass"}, "roundtrip": "pass (sdpa, eager, flex_attention)"})
    'pass'
    >>> cell({"backends": {"sdpa": "pass", "eager": "pass"},
    ...       "roundtrip": "pass (eager, flex_attention; sdpa causal in plain transformers, saved default eager)"})
    'declared'
    >>> cell({"backends": {"sdpa": "pass", "eager": "probe: bidirectional failed"}, "roundtrip": None})
    'fail'
    """
    backends = [v for v in result.get("backends", {}).values() if not v.startswith("n/a")]
    roundtrip = result.get("roundtrip") or "pass"
    if not backends or not all(v.startswith("pass") for v in backends):
        return "fail"
    if roundtrip.startswith("plain transformers cannot") and "declared" in roundtrip:
        return "declared"
    if not roundtrip.startswith("pass"):
        return "fail"
    caveat = any(v != "pass" for v in backends) or "causal in plain transformers" in roundtrip
    return "declared" if caveat else "pass"


def run_stack(python: str, model_types: list[str] | None) -> tuple[dict, dict, float]:
    """(versions, model type -> result, seconds) for one environment's interpreter."""
    versions = json.loads(subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True,
                                         check=True).stdout)
    argv = ["architectures", "--json", *(["--model-types", *model_types] if model_types else [])]
    start = time.monotonic()
    done = subprocess.run([python, "-c", _RUN, *argv], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise SystemExit(f"error: {python} architectures failed: {done.stderr.strip().splitlines()[-1:]}")
    # The JSON list starts at the first line that is "[" alone: fresh processes of the round trip may print before it.
    lines = done.stdout.splitlines()
    start_line = next((i for i, line in enumerate(lines) if line == "["), None)
    if start_line is None:
        raise SystemExit(f"error: {python} architectures printed no JSON list: {done.stdout[-300:]!r}")
    results = {r["model_type"]: r for r in json.loads("\n".join(lines[start_line:]))}
    return versions, results, time.monotonic() - start


def render(stacks: dict[str, tuple[dict, dict, float]], subset: bool) -> str:
    names = list(stacks)
    rows = sorted({t for _, results, _ in stacks.values() for t, r in results.items()
                   if r.get("kind") in ENCODERIZABLE})
    head = [f"{name}: transformers {stacks[name][0]['transformers']}" for name in names]
    lines = ["# Compatibility: which model types become encoders, on which transformers", "",
             "Generated by `python scripts/compatibility.py` (do not edit by hand). Each cell is the architecture "
             "matrix (`hf-encoderize architectures`) on a tiny model of the type: patch, probe under sdpa and eager, "
             "save, and reload by plain transformers in a fresh process (the round trip).", "",
             "- **pass**: every backend transformers offers for the class passes, and so does the round trip;",
             "- **declared**: it works, with a limit the saved folder and its card declare (a backend causal in plain "
             "transformers with another pinned as the default; padded rows only for a hybrid; plain transformers "
             "causal while the shipped remote code is bidirectional);",
             "- **fail**: a probe check or the round trip failed (`hf-encoderize architectures --model-types TYPE` "
             "says why).", "", "Whether a given model converts on your own machine, and what `auto` picks there:", "",
             "```bash", "hf-encoderize doctor --model Qwen/Qwen3-0.6B", "```", ""]
    if subset:
        lines += [f"This page covers a subset of {len(rows)} common model types, not the whole matrix (every model "
                  "type transformers maps to a causal LM), which takes long on a 2-core CI machine; run the script "
                  "with `--all` for every one.", ""]
    lines += ["Stacks:", ""]
    lines += [f"- {name}: " + ", ".join(f"{k} {v}" for k, v in stacks[name][0].items())
              + f" ({stacks[name][2]:.0f} s)" for name in names]
    lines += ["", "| model type | " + " | ".join(head) + " |", "|---|" + "---|" * len(names)]
    for model_type in rows:
        cells = [cell(stacks[n][1][model_type]) if model_type in stacks[n][1] else "absent" for n in names]
        lines.append(f"| {model_type} | " + " | ".join(cells) + " |")
    counts = {n: {c: sum(cell(r) == c for t, r in stacks[n][1].items() if t in rows) for c in ("pass", "declared",
                                                                                               "fail")} for n in names}
    lines += ["", "Counts: " + "; ".join(f"{n}: {c['pass']} pass, {c['declared']} declared, {c['fail']} fail"
                                        for n, c in counts.items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="+", help="NAME=PYTHON: a name and the interpreter of an environment")
    parser.add_argument("--model-types", nargs="*", default=None, help=f"default: {' '.join(SUBSET)}")
    parser.add_argument("--all", action="store_true", help="every model type (the whole matrix)")
    parser.add_argument("--write", default="docs/compatibility.md")
    args = parser.parse_args(argv)
    model_types = None if args.all else (args.model_types or SUBSET)
    specs = dict(spec.partition("=")[::2] for spec in args.stacks)
    print(f"running the matrix under {', '.join(specs)} side by side", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(len(specs)) as pool:  # one process per stack: each waits on its own subprocess
        futures = {name: pool.submit(run_stack, python, model_types) for name, python in specs.items()}
        stacks = {name: future.result() for name, future in futures.items()}
    Path(args.write).write_text(render(stacks, subset=not args.all))
    print(f"wrote {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
