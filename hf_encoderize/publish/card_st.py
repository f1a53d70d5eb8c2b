"""An embedding model's card keeps the one sentence-transformers wrote: its `widget:` examples (the Hub page's
similarity widget), dataset-size and loss tags, the full architecture, training logs and time, framework versions
and the loss's citation, under our sections.

Design choices:
- sentence-transformers' trainer writes its card (`SentenceTransformerModelCardData`, rendered) as README.md when
  `contrastive` saves the model; `card` then writes ours there. Before the first overwrite the library's card is kept
  beside it as `.sentence-transformers-card.md` (a hidden file: `push` never uploads it as such), so every later
  `card` or `push` builds on the library's own text, not on a copy of ours.
- Metadata: the library's keys first (widget, tags, datasets, ...), ours over them (license, base model, pipeline,
  model-index); tags are the union, the library's first. Body: ours, then the library's card under one heading, its
  headings one level down and its placeholder model id replaced by the model's.
"""

from __future__ import annotations

import re
from pathlib import Path

ST_CARD = ".sentence-transformers-card.md"
PLACEHOLDER = "sentence_transformers_model_id"  # what the library's usage snippet loads when it knows no repo id


def is_st_card(text: str) -> bool:
    """A card sentence-transformers' trainer wrote (tagged `generated_from_trainer`, titled SentenceTransformer)."""
    return "- generated_from_trainer" in text and "\n# SentenceTransformer" in text


def read_st_card(folder: Path, marker: str) -> str | None:
    """The library's card of the model in `folder`: the kept copy, else README.md while it is still the library's
    (it holds no `marker`: ours never replaced it)."""
    kept, readme = folder / ST_CARD, folder / "README.md"
    if kept.is_file():
        return kept.read_text(errors="replace")
    if readme.is_file():
        text = readme.read_text(errors="replace")
        if marker not in text and is_st_card(text):
            return text
    return None


def keep_st_card(folder: Path, text: str | None) -> None:
    """Keep the library's card beside ours before README.md is replaced (once: the first copy is the library's)."""
    kept = folder / ST_CARD
    if text is not None and not kept.is_file():
        kept.write_text(text)


def split_card(text: str) -> tuple[dict, str]:
    """(front matter, body) of a card."""
    import yaml

    if not text.startswith("---\n"):
        return {}, text
    head, _, body = text[4:].partition("\n---\n")
    try:
        metadata = yaml.safe_load(head) or {}
    except yaml.YAMLError:
        return {}, text
    return (metadata if isinstance(metadata, dict) else {}), body


def merged_metadata(ours: dict, library: dict) -> dict:
    """The library's keys, ours over them, tags the union (the library's first)."""
    merged = {**library, **{key: value for key, value in ours.items() if value is not None}}
    tags = [*(library.get("tags") or []), *(ours.get("tags") or [])]
    if tags:
        merged["tags"] = list(dict.fromkeys(tags))
    return merged


def st_section(body: str, model_ref: str) -> str:
    """The library's card body as one section of ours: its title left out, every heading one level down."""
    lines = body.replace(PLACEHOLDER, model_ref).strip("\n").splitlines()
    in_code, out = False, []
    for line in lines:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and re.match(r"^# ", line):
            continue  # the title: ours names the model
        out.append("#" + line if not in_code and re.match(r"^#{2,5} ", line) else line)
    return ("## sentence-transformers' card\n\nThe card sentence-transformers wrote when the model was saved, kept as "
            "it wrote it.\n\n" + "\n".join(out).strip("\n") + "\n")
