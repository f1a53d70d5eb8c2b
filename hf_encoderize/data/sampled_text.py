"""Sentences sampled from a decoder: everyday unlabelled text for distillation when none is at hand.

Design choices:
- Why: a student distilled from a sentence-transformers teacher (`contrastive --method distill`) learns the teacher's
  map where it sees text. Measured on benchmarks/topical_paraphrases.py (issue 53, the quickstart's encoder,
  all-MiniLM-L6-v2 as teacher, one seed): on the quickstart's Python-documentation sentences recall@1 stayed at
  0.23-0.28 from 50 to 400 steps, while on 3,118 sentences sampled here from SmolLM2-135M-Instruct it reached
  0.28-0.33 from 100 steps on (the teacher: 0.34). The decoder being encoderized writes them, so the quickstart stays
  offline and needs no corpus beyond the one it ships.
- The decoder answers a few generic requests in turn (a story, a news report, advice, a description, a review, a
  conversation, an explanation, a week), written without reference to any evaluation set, through its chat template
  when it has one. Sampling: temperature 1, top-p 0.95, 96 new tokens, from one seeded generator, batches of 32 with
  left padding; the same seed, model and machine give the same sentences.
- Kept: each sentence of 5-30 words, ASCII, ending in ".", "!" or "?", once, in the order sampled. The fragments that
  a 96-token cut leaves, and the chat formatting, are dropped by those rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import torch

REQUESTS = (
    "Tell me a short story about an ordinary day.", "Write a short news report.",
    "Give me some practical advice for everyday life.", "Describe a place, a person or an object in a few sentences.",
    "Write a short review of something you bought or visited.", "Write a short conversation between two friends.",
    "Explain something simple about how the world works.", "Write a few sentences about your week.",
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def prompts(tokenizer, requests: tuple[str, ...] = REQUESTS) -> list[str]:
    """Each request as the model's chat turn (its chat template, with the generation prompt), or as plain text."""
    if not getattr(tokenizer, "chat_template", None):
        return [f"{request}\n" for request in requests]
    return [tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                          add_generation_prompt=True) for request in requests]


def sentences_of(text: str) -> list[str]:
    """The sentences of one sample worth a teacher's label: 5-30 words, ASCII, ending in . ! or ?.

    >>> sentences_of("I walked to the shop today. It rained! Then the bus came late and I got home at")
    ['I walked to the shop today.']
    """
    found = SENTENCE_END.split(" ".join(text.split()))
    return [s for s in found if 5 <= len(s.split()) <= 30 and s.isascii() and s[-1] in ".!?"]


def sample_sentences(model, tokenizer, path: Path, sequences: int, *, seed: int = 0, batch_size: int = 32,
                     max_new_tokens: int = 96, progress: Callable[[int, int], None] | None = None) -> int:
    """Sample `sequences` answers from `model` (a causal LM) and write their distinct sentences to `path`, one JSON
    line {"text": ...} each. Returns how many were written. `progress(sequences_done, sentences)` after each batch."""
    asks = prompts(tokenizer)
    tokenizer.padding_side = "left"  # generation continues every row from its last real token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # padding only: left of the prompt, masked out
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    seen: dict[str, None] = {}
    model.eval()
    try:
        for start in range(0, sequences, batch_size):
            batch = tokenizer([asks[(start + i) % len(asks)] for i in range(min(batch_size, sequences - start))],
                              return_tensors="pt", padding=True).to(model.device)
            with torch.no_grad():
                out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=0.95,
                                     max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.eos_token_id)  # (rows, prompt + new)
            for text in tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True):
                seen.update(dict.fromkeys(sentences_of(text)))
            if progress:
                progress(start + batch["input_ids"].shape[0], len(seen))
    finally:
        torch.random.set_rng_state(generator_state)  # the caller's training seeds are not moved by the sampling
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(json.dumps({"text": s}) + "\n" for s in seen))
    partial.replace(path)  # whole or absent: a cut run leaves no half file for a re-run to take as done
    return len(seen)
