"""The Space's computations and rendering, free of gradio: embeddings, cosine matrices, the causal-vs-bidirectional
shift and the similarity heatmap. `app.py` imports it from the same folder (the Space uploads both files).
"""

from __future__ import annotations

import html


def encode(model, texts: list[str], prompt: str | None = None):
    """`model.encode` with its saved prompt of that name (a contrastive stage's --query-prefix) when it has one."""
    named = {"prompt_name": prompt} if prompt and prompt in (model.prompts or {}) else {}
    return model.encode(texts, convert_to_tensor=True, **named)


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
            batch = tokenizer(text, return_tensors="pt", truncation=True, max_length=512)
            rows.append(model(**batch).last_hidden_state[0].float().mean(0))  # (hidden,)
    return torch.stack(rows)


def first_token_shift(model, tokenizer, text: str) -> float:
    """How far the first word's hidden state moves when the last word changes: 0 for a causal model."""
    import torch

    batch = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True, truncation=True, max_length=512)
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
