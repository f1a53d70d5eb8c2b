"""The call path of a tiny `cpt` run, from the CLI to the saved encoder, measured as the modules it passes.

    python scripts/call_path.py            # a 2-step cpt of a tiny random Llama on a 200-document corpus, on CPU
    python scripts/call_path.py --json     # the figures as JSON (add --sequence for the whole module sequence)

`sys.setprofile` sees every Python call and return of the main thread (the prefetching thread is not traced: it runs
the data pipeline, not the call path). Only frames of `hf_encoderize` modules count; the module that runs is the one
of the innermost such frame, so a call into transformers and back is not a move. Figures:
- modules: the distinct `hf_encoderize` modules the run passes;
- moves: changes of the running module (a call into another module, or a return out of one);
- re-entries: moves into a module that ran before and was left (the sequence's revisits);
- callbacks: calls into a module that is still on the stack below (a lower layer calling back up: the path climbs back
  into a module it has not yet returned from, e.g. the runner calling the recipe's lambdas);
- layers: the spine with its modules grouped as cli, recipe, runner and engine, and how often the path moves back
  into the recipe once the runner has taken over (what issue 39 asks to bring down);
- spine: the collapsed sequence of the command's own layers (cli, recipes, the runner and the engine), the trip that
  "climbing back into the recipe" describes.
Why a script and not a test: the figures describe the design, they have no right value; the issue's closing note
quotes them before and after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tiny model builders of the suite

PACKAGE = "hf_encoderize"
SPINE = ("hf_encoderize.cli", "hf_encoderize.recipes", "hf_encoderize.training.runner",
         "hf_encoderize.training.train", "hf_encoderize.training.engine")


def layer_of(module: str) -> str:
    """cli, recipe, runner or engine: the spine's modules grouped, so a split of one module is not a new move."""
    if module.startswith(PACKAGE + ".recipes"):
        return "recipe"
    return {"hf_encoderize.cli": "cli", "hf_encoderize.training.runner": "runner"}.get(module, "engine")


def in_spine(module: str) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in SPINE)


class PathRecorder:
    """A `sys.setprofile` hook: the stack of frames' modules, and every change of the running package module."""

    def __init__(self):
        self.stack: list[str | None] = []  # per live frame: its package module, or None for any other code
        self.sequence: list[str] = []  # the running package module, collapsed (one entry per move)
        self.callbacks: list[tuple[str, str]] = []  # (from, into) for each call back into a module below
        self.spine: list[str] = []

    def current(self) -> str | None:
        return next((module for module in reversed(self.stack) if module), None)

    def __call__(self, frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            module = name if name == PACKAGE or name.startswith(PACKAGE + ".") else None
            before = self.current()
            if module and before and module != before and module in self.stack:
                self.callbacks.append((before, module))
            self.stack.append(module)
        elif event == "return" and self.stack:
            self.stack.pop()
        else:
            return
        running = self.current()
        if running and (not self.sequence or self.sequence[-1] != running):
            self.sequence.append(running)
            if in_spine(running) and (not self.spine or self.spine[-1] != running):
                self.spine.append(running)


def figures(recorder: PathRecorder) -> dict:
    seen, reentries = set(), 0
    for module in recorder.sequence:
        reentries += module in seen
        seen.add(module)
    spine_seen, spine_reentries = set(), 0
    for module in recorder.spine:
        spine_reentries += module in spine_seen
        spine_seen.add(module)
    short = [m.removeprefix(PACKAGE + ".") for m in recorder.spine]
    layers = [layer_of(m) for m in recorder.spine]
    layers = [layer for i, layer in enumerate(layers) if i == 0 or layers[i - 1] != layer]
    recipe_returns = sum(1 for i, layer in enumerate(layers) if layer == "recipe" and "runner" in layers[:i])
    spine_callbacks = [(a, b) for a, b in recorder.callbacks if in_spine(a) and in_spine(b)]
    return {"modules": len(seen), "moves": len(recorder.sequence) - 1, "reentries": reentries,
            "callbacks": len(recorder.callbacks), "spine_callbacks": len(spine_callbacks),
            "callbacks_by_pair": {f"{a} -> {b}": n for (a, b), n in Counter(recorder.callbacks).most_common()},
            "layer_moves": len(layers) - 1, "recipe_reentries_after_runner": recipe_returns, "layers": layers,
            "spine_moves": len(recorder.spine) - 1, "spine_reentries": spine_reentries, "spine": short,
            "modules_passed": sorted(seen)}


def tiny_cpt_argv(folder: Path) -> list[str]:
    """A tiny random Llama and a 200-document corpus in `folder`; the cpt command line that trains it 2 steps."""
    from conftest import make_decoder, make_tokenizer, write_corpus

    model = folder / "tiny-llama"
    make_decoder().save_pretrained(model)
    make_tokenizer().save_pretrained(model)
    corpus = write_corpus(folder / "docs.jsonl", 200, lambda i: 6 + i % 12)
    return ["cpt", str(model), "--data-files", str(corpus), "--max-seq-length", "32", "--eval-documents", "8",
            "--max-steps", "2", "--batch-size", "2", "--save-steps", "2", "--eval-steps", "0",
            "--output-dir", str(folder / "run"), "--no-progress", "-q"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--sequence", action="store_true", help="with --json: add the whole collapsed sequence")
    args = parser.parse_args(argv)
    from hf_encoderize.cli import main as cli_main

    with tempfile.TemporaryDirectory() as tmp:
        command = tiny_cpt_argv(Path(tmp))
        recorder = PathRecorder()
        sys.setprofile(recorder)
        try:
            code = cli_main(command)
        finally:
            sys.setprofile(None)
        saved = (Path(tmp) / "run" / "encoder" / "config.json").is_file()
    if code != 0 or not saved:
        print(f"error: the tiny cpt run failed (exit {code}, encoder saved: {saved})", file=sys.stderr)
        return 1
    result = figures(recorder)
    if args.sequence:
        result["sequence"] = [m.removeprefix(PACKAGE + ".") for m in recorder.sequence]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"modules passed: {result['modules']}, moves: {result['moves']}, re-entries (moves into a module "
          f"already left): {result['reentries']}, callbacks (calls up into a module still on the stack): "
          f"{result['callbacks']}")
    for pair, count in result["callbacks_by_pair"].items():
        print(f"  callback {pair}: {count}")
    print(f"spine (cli, recipes, runner, engine): {len(set(result['spine']))} modules, {result['spine_moves']} "
          f"moves, {result['spine_reentries']} re-entries, {result['spine_callbacks']} callbacks")
    print("  " + " -> ".join(result["spine"]))
    print(f"layers (engine = training.train or training.engine.*): {result['layer_moves']} moves, "
          f"{result['recipe_reentries_after_runner']} moves back into the recipe once the runner has started")
    print("  " + " -> ".join(result["layers"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
