"""The Space's computations and rendering, free of gradio: embeddings (at a Matryoshka size too), cosine matrices,
the causal-vs-bidirectional shift, the similarity heatmap and its CSS. `app.py` imports it from the same folder (the
Space uploads both files).

Records: the Space runs without hf-encoderize (a Space installs requirements.txt only), so it reads the package's
records as JSON, each field through `recorded`, which takes only the fields `RECORD_FIELDS` names;
tests/test_space_records_h2.py checks that list against the records' dataclasses, so a renamed record field fails a
test instead of reading None here.

Matryoshka: an embedding model trained with `contrastive --matryoshka-dims` is offered at each trained size. The size
comes from the stage's record (`contrastive_run.json` beside the model, its `config`), never guessed: a size it was
not trained at would give meaningless scores. Truncation is sentence-transformers' own `encode(..., truncate_dim=D)`
(the first D dimensions), and `cosine_matrix` normalises again afterwards.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

CONTRASTIVE_RECORD = "contrastive_run.json"  # written by `hf-encoderize contrastive` next to the model
# The fields of hf-encoderize's records the Space reads, by record class (`hf_encoderize.records`).
RECORD_FIELDS = {
    "EncoderFacts": ("base_model", "gguf_file", "revision", "contrastive"),  # config.json's `hf_encoderize` block
    "RunRecord": ("base_model", "gguf_file", "revision"),  # run_record.json beside a local encoder
    "ContrastiveStage": ("method", "pooling"),  # the block's `contrastive`
    "ContrastiveRecord": ("config",),  # contrastive_run.json
    "ContrastiveSource": ("matryoshka_dims",),  # that record's `config`
}
# A field's name in records written before it was renamed, read when the field is absent (as the package reads them).
FORMER_NAMES = {("ContrastiveStage", "method"): "objective"}
APP_CSS = """
.heatmap table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.heatmap td, .heatmap th { border: 1px solid #ddd; padding: 6px 10px; text-align: center; }
.heatmap th.row-label { text-align: left; font-weight: normal; max-width: 28em; }
.heatmap .legend { font-size: 0.85em; color: #666; }
"""


def encode(model, texts: list[str], prompt: str | None = None, truncate_dim: int | None = None):
    """`model.encode` with its saved prompt of that name (a contrastive stage's --query-prefix) when it has one, cut
    to the first `truncate_dim` dimensions when given (a Matryoshka size; None or 0: the full vector)."""
    named = {"prompt_name": prompt} if prompt and prompt in (model.prompts or {}) else {}
    return model.encode(texts, convert_to_tensor=True, truncate_dim=truncate_dim or None, **named)


def pooling_mode(model) -> str:
    """How a sentence-transformers model pools its token states, as its Pooling module names the mode ("mean",
    "lasttoken"...; modes joined by "+" when it concatenates several); "none" without a Pooling module."""
    for module in model:
        mode = getattr(module, "pooling_mode", None)  # sentence-transformers 6: a name or a tuple of names
        if mode is None and hasattr(module, "get_pooling_mode_str"):
            mode = module.get_pooling_mode_str()  # sentence-transformers 5
        if mode:
            return mode if isinstance(mode, str) else "+".join(mode)
    return "none"


def is_normalized(model) -> bool:
    """Whether the model's last module normalises its vectors to length 1 (sentence-transformers' Normalize)."""
    return any(type(module).__name__ == "Normalize" for module in model)


def recorded(record: dict | None, kind: str, name: str):
    """Field `name` of a record of class `kind` read as JSON (None when absent or when `record` is not an object). A
    field `RECORD_FIELDS` does not list is refused: every field the Space reads is one the test checks.

    >>> recorded({"objective": "simcse"}, "ContrastiveStage", "method")
    'simcse'
    """
    if name not in RECORD_FIELDS[kind]:
        raise KeyError(f"{kind}.{name}: add it to RECORD_FIELDS (tests/test_space_records_h2.py checks the list)")
    record = record if isinstance(record, dict) else {}
    former = FORMER_NAMES.get((kind, name))
    return record.get(former) if name not in record and former else record.get(name)


def matryoshka_dims(model: str, stage: dict) -> list[int]:
    """The sizes the embedding model `model` (folder or Hub id) was trained at, largest first; [] without Matryoshka.

    `stage` is config.json's `hf_encoderize.contrastive` record: {} for a model no contrastive stage made, which is
    never asked for a record file (an arbitrary Hub model has none).
    """
    if not stage:
        return []
    text = recorded(recorded(_contrastive_record(model), "ContrastiveRecord", "config"), "ContrastiveSource",
                    "matryoshka_dims")
    dims = {int(part) for part in re.findall(r"\d+", str(text or ""))}  # "768,512,256", as the flag takes it
    return sorted((dim for dim in dims if dim > 0), reverse=True)


def _contrastive_record(model: str) -> dict:
    try:
        if Path(model).is_dir():
            path = Path(model) / CONTRASTIVE_RECORD
        else:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(model, CONTRASTIVE_RECORD))
        record = json.loads(path.read_text(encoding="utf-8"))
    except Exception:  # no record (an older model, a repo without it), no network, a file cut short: no sizes
        return {}
    return record if isinstance(record, dict) else {}


def run_record(encoder: str) -> tuple[dict, str]:
    """A `cpt` run's run_record.json next to a local encoder folder, as (its facts, "") or, when it cannot be read (cut
    short, edited), ({}, why): the app then warns on stderr and takes the base from config.json. ({}, "") for none."""
    record = Path(encoder).parent / "run_record.json"
    if not (Path(encoder).is_dir() and record.is_file()):
        return {}, ""
    try:
        facts = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        note = f"{record.name} could not be read ({type(error).__name__})"
        print(f"warning: {record}: {note}; the base decoder comes from config.json", file=sys.stderr)
        return {}, note
    return (facts if isinstance(facts, dict) else {}), ""


def recorded_base(run: dict, block: dict | None) -> tuple[str | None, str | None, str | None]:
    """The base decoder (model, GGUF file, revision) a `cpt` run's record names, else the encoder's config.json block
    (`block`: its `hf_encoderize` metadata)."""
    if recorded(run, "RunRecord", "base_model"):
        return (recorded(run, "RunRecord", "base_model"), recorded(run, "RunRecord", "gguf_file"),
                recorded(run, "RunRecord", "revision"))
    return (recorded(block, "EncoderFacts", "base_model"), recorded(block, "EncoderFacts", "gguf_file"),
            recorded(block, "EncoderFacts", "revision"))


def embedding_sizes(dims: list[int], width: int | None) -> list[tuple[str, int]]:
    """The size picker's choices, (label, value): the full vector (value 0) and each trained size below `width`.

    >>> embedding_sizes([32, 16, 8], 32)
    [('32 (full size)', 0), ('16', 16), ('8', 8)]
    """
    full = f"{width} (full size)" if width else "full size"
    return [(full, 0)] + [(str(dim), dim) for dim in dims if not width or dim < width]


def size_note(dim: int | None, width: int | None) -> str:
    """How a heading names the size: "first 16 of 32 dimensions", or "all 32 dimensions" for the full vector."""
    if dim:
        return f"first {dim} of {width} dimensions" if width else f"first {dim} dimensions"
    return f"all {width} dimensions" if width else "full size"


def first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def base_label(settings) -> str | None:
    """How the base decoder is named on screen: the GGUF file name, else the Hub id or folder."""
    return settings.base_gguf_file or settings.base_model


def reachable(name: str | None) -> bool:
    """A folder on this machine or something shaped like a Hub id; a recorded path from another machine is not."""
    if not name:
        return False
    return Path(name).exists() or re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name) is not None


def cosine_matrix(embeddings) -> list[list[float]]:
    import torch

    unit = torch.nn.functional.normalize(torch.as_tensor(embeddings).float(), dim=-1)  # (n, hidden)
    return (unit @ unit.T).clamp(-1, 1).tolist()


def causal_embeddings(model, tokenizer, texts: list[str]):
    """Mean-pooled last hidden states of the base decoder, one text at a time (its tokenizer may lack a pad)."""
    import torch

    rows = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer(text, return_tensors="pt", truncation=True, max_length=512).to(model.device)
            rows.append(model(**batch).last_hidden_state[0].float().mean(0))  # (hidden,)
    return torch.stack(rows)


def first_token_shift(model, tokenizer, text: str) -> float:
    """How far the first word's hidden state moves when the last word changes: 0 for a causal model."""
    import torch

    batch = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True, truncation=True,
                      max_length=512).to(model.device)
    real = (batch.pop("special_tokens_mask")[0] == 0).nonzero().flatten()
    if len(real) < 2:
        return float("nan")
    changed = batch["input_ids"].clone()
    changed[0, real[-1]] = (changed[0, real[-1]] + 1) % len(tokenizer)
    with torch.no_grad():
        before = model(**batch).last_hidden_state[0, real[0]]
        after = model(**{**batch, "input_ids": changed}).last_hidden_state[0, real[0]]
    return float((before - after).abs().max())


def heatmap_html(labels: list[str], matrix: list[list[float]], title: str) -> str:
    """A table coloured by cosine similarity (white at 0 or below, deep blue at 1) with the values printed."""
    head = "".join(f"<th>{i}</th>" for i in range(1, len(labels) + 1))
    rows = []
    for i, (label, values) in enumerate(zip(labels, matrix, strict=True), 1):
        short = html.escape(label if len(label) <= 48 else label[:45] + "...")
        cells = "".join(_heat_cell(value) for value in values)
        rows.append(f"<tr><th class='row-label' title='{html.escape(label)}'>{i}. {short}</th>{cells}</tr>")
    return (f"<div class='heatmap'><p><b>{html.escape(title)}</b></p><table><tr><th></th>{head}</tr>"
            f"{''.join(rows)}</table><p class='legend'>cosine similarity: 0 or below = white, 1 = dark blue</p></div>")


def _heat_cell(value: float) -> str:
    strength = max(0.0, min(1.0, value))
    red, green = round(255 - 225 * strength), round(255 - 175 * strength)
    ink = "white" if strength > 0.55 else "#111"
    return (f"<td class='score' data-score='{value:.4f}' style='background: rgb({red},{green},255); color: {ink}'>"
            f"{value:.2f}</td>")
