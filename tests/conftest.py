"""Shared fixtures: tiny random decoders and a word-level tokenizer built in-process (no network, no GPU)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # scripts/test.sh runs two workers on a two-core machine: one intra-op thread each (torch reads this at import,
    # and the processes a test starts inherit it), not two each fighting for both cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Scripts run in subprocesses, not modules to import for doctests (ddp_cpt.py trains at import).
collect_ignore = ["scripts", "clean_env_check.py"]

VOCAB = 120  # w0..w119, then <unk>, </s>


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab.update({"<unk>": VOCAB, "</s>": VOCAB + 1})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


def make_decoder(model_type="llama", attn_implementation="sdpa", **overrides):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = dict(vocab_size=VOCAB + 2, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    sizes.update(overrides)
    config = AutoConfig.for_model(model_type, **sizes)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation).eval()


def write_corpus(path, count: int, length):
    """A JSONL corpus an MLM can learn: document i is a run of `length(i)` consecutive word ids from a random start."""
    import json

    import torch

    generator = torch.Generator().manual_seed(0)
    with open(path, "w") as handle:
        for index in range(count):
            start = torch.randint(0, 60, (1,), generator=generator).item()
            handle.write(json.dumps({"text": " ".join(f"w{start + i}" for i in range(length(index)))}) + "\n")
    return path


@pytest.fixture
def tokenizer():
    return make_tokenizer()


@pytest.fixture
def decoder():
    return make_decoder()


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory):
    """A tiny Llama and its tokenizer saved as a local model folder."""
    path = tmp_path_factory.mktemp("models") / "tiny-llama"
    make_decoder().save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    return path


def on_meta_default(function):
    """`function` run with meta as the default device: a tensor it builds without naming a device lands on meta and
    fails where it is used. With the model on the CPU this stands in for a GPU run, where the model is on CUDA and the
    default device is the CPU (tests/test_engine.py, test_eval_mechanics.py)."""
    import functools

    import torch

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with torch.device("meta"):
            return function(*args, **kwargs)

    return wrapped
