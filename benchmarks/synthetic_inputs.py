"""The synthetic inputs of the throughput benchmarks (benchmarks/cpt_throughput.py, scripts/gpu_check.py,
scripts/gpu_session.py): a word-level tokenizer, a random Llama of a preset's shape saved by hf-encoderize, and
documents with natural-text statistics (Zipf words, log-normal lengths)."""

from __future__ import annotations

import json
from pathlib import Path


def build_inputs(preset: dict, folder: Path, seed: int = 0, decoder: bool = False) -> None:
    """A word-level tokenizer over the whole vocabulary, a random Llama encoder saved by hf-encoderize, and documents
    with a long-tailed length distribution (log-normal, median ~250 tokens) like web text, in `folder`/model and
    `folder`/docs.jsonl. `decoder=True` saves the plain causal decoder instead, as a user's `cpt MODEL` would get."""
    write_documents(folder / "docs.jsonl", preset["documents"], preset["model"]["vocab_size"] - 4, preset["seq_len"],
                    seed)
    build_model(preset, folder / "model", seed=seed, decoder=decoder)


def word_tokenizer(words: int):
    """A fast word-level tokenizer over `words` words `w0` ... plus <unk> and </s> (save_encoder adds pad and mask)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(words)} | {"<unk>": words, "</s>": words + 1}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


def build_model(preset: dict, folder: Path, seed: int = 0, decoder: bool = False, device: str = "cpu") -> None:
    """The preset's random Llama, initialised on `device` (a GPU builds a 1B model in about a second, where a CPU
    takes minutes), made bidirectional and saved by hf-encoderize to `folder` (or saved as the plain decoder)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    words = preset["model"]["vocab_size"] - 4  # room for <unk>, </s>, <pad>, <mask>
    tokenizer = word_tokenizer(words)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**{**preset["model"], "vocab_size": words + 2}))
    if decoder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    else:
        encoderize(model, tokenizer)
        save_encoder(model, tokenizer, folder, overwrite=True)


def write_documents(path: Path, count: int, words: int, seq_len: int, seed: int = 0) -> None:
    """`count` documents of words `w0`..`w{words-1}`, Zipf-distributed as in natural text, with log-normal lengths
    (median ~250 words, at most 4 x seq_len), one JSON line each."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, words + 1)
    zipf = (1.0 / ranks) / (1.0 / ranks).sum()  # word frequencies as in natural text
    with path.open("w") as handle:
        for _ in range(count):
            length = int(np.clip(rng.lognormal(np.log(250), 0.9), 16, 4 * seq_len))
            chosen = rng.choice(words, size=length, p=zipf)
            handle.write(json.dumps({"text": " ".join(f"w{w}" for w in chosen)}) + "\n")
