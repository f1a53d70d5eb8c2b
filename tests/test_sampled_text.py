"""Sentences sampled from a decoder (data.sampled_text): what is kept, that a seed fixes them, and that the caller's
random state is left as it was."""

from __future__ import annotations

import json
import re

import pytest
import torch

from hf_encoderize.data.sampled_text import REQUESTS, prompts, sample_sentences, sentences_of

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "slept", "."]


def _tokenizer(chat: bool = False):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(WORDS)}
    vocab.update({"<unk>": len(vocab), "</s>": len(vocab) + 1})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>",
                                        pad_token="</s>")
    if chat:
        tokenizer.chat_template = "{% for m in messages %}<user> {{ m['content'] }}\n{% endfor %}<assistant> "
    return tokenizer


@pytest.fixture(scope="module")
def tiny():
    """A tiny random Llama over 9 words, '.' among them: its samples hold sentences the rules keep."""
    from conftest import make_decoder

    return make_decoder(vocab_size=len(WORDS) + 2, max_position_embeddings=256), _tokenizer()


def test_sentences_of_keeps_whole_ascii_sentences_of_5_to_30_words():
    text = "Short one. I walked to the shop today.  Then the bus\\ncame late! Café is not ascii here today. A cut"
    assert sentences_of(text.replace("\\n", "\n")) == ["I walked to the shop today.", "Then the bus came late!"]
    assert sentences_of(" ".join(["word"] * 31) + ".") == [] and sentences_of(" ".join(["word"] * 30) + "?") != []


def test_prompts_use_the_chat_template_when_the_tokenizer_has_one():
    assert prompts(_tokenizer()) == [f"{request}\n" for request in REQUESTS]
    chat = prompts(_tokenizer(chat=True))
    assert chat[0] == f"<user> {REQUESTS[0]}\n<assistant> " and len(chat) == len(REQUESTS)


def test_sampled_sentences_are_kept_once_fixed_by_the_seed_and_leave_the_random_state(tiny, tmp_path):
    model, tokenizer = tiny
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    seen = []
    kept = sample_sentences(model, tokenizer, tmp_path / "a.jsonl", 12, batch_size=5, max_new_tokens=60,
                            progress=lambda done, n: seen.append((done, n)))
    assert torch.equal(torch.random.get_rng_state(), before)  # training seeds after it are not moved
    rows = [json.loads(line)["text"] for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert kept == len(rows) > 0 and len(set(rows)) == len(rows)
    assert all(re.fullmatch(r"[a-z ]+ \.", row) and 5 <= len(row.split()) <= 30 for row in rows)
    assert [done for done, _ in seen] == [5, 10, 12] and seen[-1][1] == kept  # batches of 5, the last one short
    sample_sentences(model, tokenizer, tmp_path / "b.jsonl", 12, batch_size=5, max_new_tokens=60)
    sample_sentences(model, tokenizer, tmp_path / "c.jsonl", 12, seed=1, batch_size=5, max_new_tokens=60)
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()
    assert (tmp_path / "c.jsonl").read_text() != (tmp_path / "a.jsonl").read_text()
    assert not list(tmp_path.glob("*.partial"))


def test_a_sampling_cut_short_leaves_no_file(tiny, tmp_path):
    model, tokenizer = tiny

    def interrupted(done, kept):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sample_sentences(model, tokenizer, tmp_path / "s.jsonl", 10, batch_size=5, max_new_tokens=20,
                         progress=interrupted)
    assert list(tmp_path.iterdir()) == []  # a re-run does not take a half file as done
