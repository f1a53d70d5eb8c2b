"""The PyTorch side of every export check: the check texts, the model as sentence-transformers loads it, and the
reference file (our embeddings, token probes) that the out-of-process checks (`onnx_check.py`, `gguf_check.py`) read.

Its own module so that the ONNX (`export`) and GGUF (`gguf_export`) paths share one reference, not two that drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish.onnx_embedding import default_prompt, prompt_length

# Texts of several lengths, padded in one batch by the ONNX check, so padding must not move the real tokens' outputs.
# 24 of them, short ones many: with the first 4 alone the SmolLM2-135M int8 export passed at 0.9928, while
# benchmarks/serving.py found 0.966 on other short texts; on these 24 it reads 0.9889 and is kept out, as it should be.
DEFAULT_TEXTS = ("Hi.", "A cat sits on the mat.", "Stock markets fell sharply today after the announcement.",
                 "The committee met on Tuesday to discuss the budget, the schedule and the new members who joined "
                 "this year, and agreed to meet again next month.", "Questions on banjo.", "Lime as well as papaya.",
                 "Our guide covers peas and zucchini.", "Where is the station?", "Thanks!",
                 "Read the manual before you start.", "How do I reset my password?", "Apples, pears and plums.",
                 "The river floods every spring.", "A kitten rests on a rug.", "Interest rates rose again.",
                 "Call me tomorrow morning.", "Solar panels convert sunlight into electricity.",
                 "The museum opens at nine.", "Bring an umbrella.",
                 "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in the leaves of green "
                 "plants.", "Guitar lessons for beginners.", "The recipe needs two eggs and a cup of flour.",
                 "Error 404: page not found.", "Paris is the capital of France.")
POOLING_MODES = ("mean", "cls", "lasttoken")  # the ones the checks pool as sentence-transformers does


def check_texts(path: str | None) -> list[str]:
    """The texts of `--check-texts` (one a line), or DEFAULT_TEXTS."""
    if path is None:
        return list(DEFAULT_TEXTS)
    texts = [line.strip() for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()]
    texts = [text for text in texts if text]
    if len(texts) < 2:
        raise EncoderizeError(f"--check-texts: {path!r} has {len(texts)} non-empty line(s); give at least 2 texts")
    return texts


def load_model(model_dir: Path, trust_remote_code: bool = False):
    """The model as sentence-transformers loads it, in fp32 (the exports are checked against fp32), and its pooling.

    `trust_remote_code`: run the folder's modeling code (`export_guard` allows it for our own file, byte for byte)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.publish.export_guard import check_loaded

    try:
        st = SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=trust_remote_code,
                                 model_kwargs={"dtype": torch.float32}).eval()
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, AttributeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise EncoderizeError(f"cannot load {str(model_dir)!r} with sentence-transformers ({first}); export takes "
                              "a folder written by convert, cpt or contrastive") from None
    check_loaded(st, model_dir)
    pooling = getattr(st[1], "pooling_mode", None) if len(st) > 1 else None
    if pooling not in POOLING_MODES:
        raise EncoderizeError(f"pooling {pooling!r} of {str(model_dir)!r} cannot be checked after export; "
                              f"export supports {', '.join(POOLING_MODES)}")
    return st, pooling


def write_reference(st, pooling: str, texts: list[str], path: Path) -> Path:
    """Our PyTorch embeddings of `texts` and the token probes, written for the out-of-process checks.

    The ONNX check feeds token ids (`probe_ids`, its last id swapped for `probe_other_id`); the GGUF check feeds text
    to llama.cpp's own tokenizer (`probe_texts`: the same words, the last one changed)."""
    tokenizer = st.tokenizer
    probe = tokenizer(" ".join(texts[-2:]))["input_ids"][:16]
    if len(probe) < 2:
        raise EncoderizeError("the check texts tokenize to fewer than 2 tokens; give longer --check-texts")
    words = " ".join(texts[-2:]).split()[:8]
    changed = words[:-1] + ["zebra" if words[-1] != "zebra" else "violin"] if len(words) > 1 else [*words, "zebra"]
    # llama.cpp embeds all texts in one batch (one sequence each, in one context): room for every token, plus BOS/EOS.
    tokens = sum(len(tokenizer(text)["input_ids"]) + 2 for text in texts)
    # Whole texts: the exported files have no truncation of their own (llama.cpp embeds every token), while a
    # contrastive model may keep its training length as `max_seq_length` (the quickstart's: 24 tokens), which cut
    # the longer check texts and made a faithful GGUF read 0.96. Within the model's positions.
    longest = max(len(tokenizer(text)["input_ids"]) for text in texts)
    positions = getattr(st[0].auto_model.config.get_text_config(), "max_position_embeddings", None) or longest
    saved, st.max_seq_length = st.max_seq_length, max(st.max_seq_length or 0, min(longest, positions))
    try:
        # prompt="": the checks feed the raw texts; a default prompt (lead tokens) is added outside the exported model.
        embeddings = st.encode(texts, batch_size=len(texts), convert_to_numpy=True, prompt="")
        max_length = st.max_seq_length
        # What `encode` returns, default prompt (lead) and all: the ONNX graph's `sentence_embedding` must equal it.
        prompt = default_prompt(st)
        st.max_seq_length = min(positions, st.max_seq_length + len(tokenizer(prompt)["input_ids"]))
        encoded = st.encode(texts, batch_size=len(texts), convert_to_numpy=True)
        encoded_max_length = st.max_seq_length
    finally:
        st.max_seq_length = saved
    path.write_text(json.dumps({
        "texts": texts, "embeddings": embeddings.tolist(), "pooling": pooling, "max_length": max_length,
        "prompt": prompt, "encoded": encoded.tolist(), "encoded_max_length": encoded_max_length,
        # what a client that pools token states itself must do to match `encode` (GGUF: llama.cpp cannot leave the
        # prompt out of its pooling): skip the prompt's first `prompt_length` tokens, then normalise if the model does
        "prompt_length": prompt_length(st, prompt), "normalize": any(type(m).__name__ == "Normalize" for m in st),
        "probe_ids": probe, "probe_other_id": (probe[-1] + 1) % len(tokenizer),
        "probe_texts": [" ".join(words), " ".join(changed)], "n_ctx": max(64, tokens + 16),
    }))
    return path
