"""Which preset made a headline OUT folder, checked before any stage reuses what is in it.

headline.py skips what an OUT already holds (a corpus, an arm's finished models, fine-tuning runs), so a folder made
by another preset would be taken as this one's: `reduced` on a `tiny` OUT took tiny's 32-wide models as its own and
wrote a "Budget `reduced`" table from them. The first run records its preset's settings in OUT/preset.json; a later
run whose settings differ is refused in one line. `orders` is left out of the comparison: `cpu2` on a `cpu` folder
reuses order 0, which is the same work (headline.py's PRESETS say so). A folder from before the record is judged by
what it holds: each order's model config, and the budget headline.json names.
"""

from __future__ import annotations

import json
from pathlib import Path

RECORD = "preset.json"
SHAPE = {"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads",
         "intermediate_size": "intermediate"}


def settings(p: dict) -> dict:
    """What makes two presets' work the same, as JSON gives it back (tuples as lists)."""
    return json.loads(json.dumps({key: value for key, value in p.items() if key != "orders"}))


def older_maker(out: Path, presets: dict) -> str | None:
    """The preset that made a folder from before the record: headline.json's budget, else the preset whose model
    shape its first order's config has ("tiny", or "a preset with hidden 48, 2 layers" when none has it)."""
    if (out / "headline.json").is_file():
        return json.loads((out / "headline.json").read_text()).get("budget")
    configs = sorted(out.glob("order*/config.json"))
    if not configs:
        return None
    config = json.loads(configs[0].read_text())
    shape = {ours: config.get(theirs) for theirs, ours in SHAPE.items()}
    return next((name for name, p in presets.items() if all(p[key] == shape[key] for key in shape)),
                f"a preset with hidden {shape['hidden']}, {shape['layers']} layers")


def check(out: Path, budget: str, presets: dict) -> str | None:
    """One error line when OUT holds another preset's work; None when it is empty, new, or this preset's."""
    wanted = settings(presets[budget])
    if (out / RECORD).is_file():
        made = json.loads((out / RECORD).read_text())
        if made["settings"] == wanted:
            return None
        then = f" (as it was when {out} was made)" if made["budget"] == budget else ""
        return refusal(out, f"the `{made['budget']}` preset{then}", budget)
    made = older_maker(out, presets)
    if made is None or made == budget or (made in presets and settings(presets[made]) == wanted):
        return None
    return refusal(out, f"the `{made}` preset" if made in presets else made, budget)


def refusal(out: Path, made: str, budget: str) -> str:
    """`made`: "the `tiny` preset" or "a preset with ..." (a folder from before the record, of no preset now)."""
    return (f"error: {out} was made by {made}, whose models and runs `{budget}` would take as its own; give "
            f"`{budget}` another OUT")


def record(out: Path, budget: str, p: dict) -> None:
    """OUT/preset.json, written before the first stage (once: a later run of the same preset keeps it)."""
    if not (out / RECORD).is_file():
        (out / RECORD).write_text(json.dumps({"budget": budget, "settings": settings(p)}, indent=1) + "\n")
