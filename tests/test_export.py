"""`export --format onnx`: fp32 and int8 files that ONNX Runtime runs bidirectionally and that match PyTorch, checked
in a process without hf_encoderize; a causal graph is kept out; bad input is one line (GGUF: test_export_gguf.py)."""

import json
import subprocess
import sys
import warnings

import pytest
from conftest import make_decoder, make_tokenizer
from test_card import serve_commands_in

pytest.importorskip("onnxruntime")

from hf_encoderize.cli import main  # noqa: E402
from hf_encoderize.model.bidirectional import encoderize  # noqa: E402
from hf_encoderize.model.saving import save_encoder  # noqa: E402
from hf_encoderize.publish import export as export_module  # noqa: E402
from hf_encoderize.publish.card import CardConfig, write_card  # noqa: E402
from hf_encoderize.publish.upload_set import upload_set  # noqa: E402

# Run by the test itself in a fresh process without our package: the ONNX files alone, as a user would run them.
ORT_CHECK = """
import json, sys
sys.modules["hf_encoderize"] = None
import numpy as np, onnxruntime
out = sys.argv[1]
report = {}
for name in ("model.onnx", "model_int8_weight_only.onnx"):
    session = onnxruntime.InferenceSession(f"{out}/onnx/{name}", providers=["CPUExecutionProvider"])
    ids = np.array([[5, 6, 7, 8, 9, 10]], dtype=np.int64)
    changed = ids.copy(); changed[0, -1] = 11
    mask = np.ones_like(ids)
    first, second = (session.run(None, {"input_ids": x, "attention_mask": mask})[0][0, 0] for x in (ids, changed))
    report[name] = float(np.abs(first - second).max())
print(json.dumps(report))
"""


def _encoder(root):
    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    return save_encoder(model, tokenizer, root / "encoder", metadata=report.to_dict())


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("w1 w2 w3\nw4 w5 w6 w7 w8 w9 w10\nw11\nw12 w13 w14 w15\n")
    return path


def test_onnx_export_is_kept_verified_and_on_the_card(tmp_path, texts, capsys):
    encoder = _encoder(tmp_path / "run")
    write_card(CardConfig(str(tmp_path / "run")))
    with warnings.catch_warnings(record=True) as caught:  # the tracer's notes are expected and checked after: -v
        warnings.simplefilter("always")
        assert main(["export", str(tmp_path / "run"), "--check-texts", str(texts)]) == 0
    shown = [w for w in caught if not issubclass(w.category, DeprecationWarning)]  # Python hides those by default
    assert not [(w.category.__name__, w.filename) for w in shown if "Tracer" in w.category.__name__
                or "torch/onnx" in w.filename]
    out = capsys.readouterr().out
    assert "model.onnx: verified" in out
    cosine = float(out.split("model.onnx: verified (lowest cosine to PyTorch ")[1].split(")")[0])
    assert (encoder / "onnx" / "model.onnx").is_file() and (encoder / "onnx" / "model_int8_weight_only.onnx").is_file()
    record = json.loads((encoder / "export_record.json").read_text())["onnx"]
    fp32, int8 = record["variants"]["model.onnx"], record["variants"]["model_int8_weight_only.onnx"]
    assert fp32["min_cosine"] >= 0.999 and int8["min_cosine"] >= 0.99
    assert round(fp32["min_cosine"], 5) == cosine
    assert record["exporter"] == "dynamo" and "exporter_fallback" not in record  # issue 69.5: not the deprecated tracer
    assert fp32["bidirectional"] and int8["bidirectional"] and fp32["hf_encoderize_importable"] is False
    assert len(fp32["padded_lengths"]) >= 3  # texts of several lengths, padded in one batch
    kept = {"onnx/model.onnx", "onnx/model_int8_weight_only.onnx", "export_record.json"}
    assert kept <= set(upload_set(encoder))  # push
    card = (encoder / "README.md").read_text()
    assert "## Serve it" in card and "| `onnx/model_int8_weight_only.onnx` | verified | yes |" in card
    done = subprocess.run([sys.executable, "-c", ORT_CHECK, str(encoder)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(moved > 1e-6 for moved in json.loads(done.stdout.strip().splitlines()[-1]).values())
    # Every command the "Serve it" section marks verified runs as printed, in a clean interpreter without our package.
    commands = serve_commands_in(card)
    verified = [(engine, code) for engine, ok, _, code in commands if ok]
    assert [engine for engine, _ in verified] == ["sentence-transformers (PyTorch)", "ONNX Runtime"]
    assert not dict((e, ok) for e, ok, _, _ in commands)["sentence-transformers (ONNX backend)"]  # needs optimum
    program = "import sys\nsys.modules['hf_encoderize'] = None\n" + "".join(
        f"exec(compile({code!r}, 'command{i}', 'exec'), {{}})\n" for i, (_, code) in enumerate(verified))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("(2, 32)") == 2  # 2 sentences x hidden 32, from sentence-transformers and from ORT


def test_a_causal_graph_is_kept_out_with_one_line(tmp_path, texts, monkeypatch):
    encoder = _encoder(tmp_path)
    causal = make_decoder().model.eval()  # the same weights before encoderize: causal attention
    original = export_module.export_embedding_graph

    def export_causal(st, path, opset, *exporter):
        st[0].model = causal  # the Transformer module's model (`auto_model` reads it)
        return original(st, path, opset, *exporter)

    monkeypatch.setattr(export_module, "export_embedding_graph", export_causal)
    monkeypatch.setattr(export_module, "THRESHOLDS", {"model.onnx": 0.999})
    result = export_module.export(export_module.ExportConfig(str(encoder), check_texts=str(texts)))
    assert result["model.onnx"] == "not kept: ONNX Runtime runs it causally (a later token does not move position 0)"
    assert not (encoder / "onnx" / "model.onnx").exists()
    assert not list(encoder.glob(".onnx-export-*"))  # the staging folder is gone


@pytest.mark.parametrize("extra, wording", [
    (["--format", "gguf", "--llama-cpp", "/nonexistent"], "--llama-cpp: '/nonexistent' does not exist"),
    (["--format", "tflite"], "error: argument --format: invalid choice: 'tflite' (choose from 'onnx', 'gguf')"),
    (["--check-texts", "/nonexistent.txt"], "--check-texts: '/nonexistent.txt' is not a file"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, wording):
    encoder = _encoder(tmp_path)
    before = sorted(p.name for p in encoder.iterdir())
    try:
        code = main(["export", str(encoder), *extra])
    except SystemExit as refused:  # a value outside the option's Literal: argparse's choices refuse it
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err
    assert wording in err and "Traceback" not in err
    assert sorted(p.name for p in encoder.iterdir()) == before


def test_the_reference_embeds_whole_texts_even_when_the_model_keeps_a_short_training_length(encoder, tmp_path):
    """A contrastive model saves its training length as max_seq_length (the quickstart's: 24 tokens); the exported
    files embed every token, so the reference must too (it cut the texts and a faithful GGUF read 0.96)."""
    import numpy as np

    from hf_encoderize.publish.export_reference import load_model, write_reference

    st, pooling = load_model(encoder)
    texts = ["w1 w2 w3 w4 w5 w6 w7 w8 w9", "w3 w4", "w5 w6 w7 w8 w9 w10 w11"]
    st.max_seq_length = 3
    reference = json.loads(write_reference(st, pooling, texts, tmp_path / "reference.json").read_text())
    assert st.max_seq_length == 3  # the model is left as it was
    st.max_seq_length = 64
    whole = st.encode(texts, convert_to_numpy=True, prompt="")
    assert np.allclose(reference["embeddings"], whole, atol=1e-5) and reference["max_length"] >= 9


@pytest.mark.parametrize("run", ["contrastive_run", "matryoshka_run"])  # lasttoken + "query" prompt; mean pooling
def test_the_onnx_graph_returns_what_encode_returns_and_the_card_snippet_runs_as_printed(run, request, tmp_path):
    """The embedding model's graph ends in its own pooling with the lead-token rule (the first lead EOS left out of
    the pooling), so ONNX Runtime gives `SentenceTransformer(folder).encode`'s embeddings; the card's ONNX Runtime
    snippet is marked verified and, run as printed in a process without our package, gives them too."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    folder = request.getfixturevalue(run) / "contrastive"
    assert export_module.export(export_module.ExportConfig(str(folder)))["model.onnx"] == "verified"
    record = json.loads((folder / "export_record.json").read_text())["onnx"]
    assert record["prompt"] and record["prompt_length"] == 1  # two lead EOS: the first is left out of the pooling
    for name in ("model.onnx", "model_int8_weight_only.onnx"):
        variant = record["variants"][name]
        assert variant["min_cosine_embedding"] >= variant["threshold"], (name, variant)
    snippets = {engine: (ok, code) for engine, ok, _, code in serve_commands_in((folder / "README.md").read_text())}
    ok, code = snippets["ONNX Runtime"]
    assert ok and 'session.run(["sentence_embedding"]' in code
    program = ("import sys\nsys.modules['hf_encoderize'] = None\n" + code +
               "\nimport json\nprint(json.dumps(embeddings.tolist()))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    onnx_side = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    torch_side = SentenceTransformer(str(folder), device="cpu").encode(
        ["A cat sits on the mat.", "Stock markets fell today."])
    cosines = (onnx_side * torch_side).sum(1) / np.linalg.norm(onnx_side, axis=1) / np.linalg.norm(torch_side, axis=1)
    assert cosines.min() >= 0.999, cosines


def test_int8_keeps_the_first_blocks_of_a_deep_model_in_fp32():
    """Weight-only int8 everywhere read 0.969 on a SmolLM2-135M embedding model; with blocks 0 and 1 in fp32, 0.994:
    their MatMuls are left out of the quantizer, and a shallow model (the tests' 2 layers) is quantized whole."""
    import onnx

    from hf_encoderize.publish.onnx_embedding import fp32_block_matmuls

    def graph(blocks):
        nodes = [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name=f"/model/layers.{i}/mlp/{part}/MatMul")
                 for i in range(blocks) for part in ("up_proj", "down_proj")]
        return onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [], []))

    assert fp32_block_matmuls(graph(30)) == [f"/model/layers.{i}/mlp/{part}/MatMul" for i in (0, 1)
                                             for part in ("up_proj", "down_proj")]
    assert fp32_block_matmuls(graph(2)) == []


def test_int8_finds_the_blocks_of_a_dynamo_graph_by_its_scope_metadata():
    """The dynamo exporter names nodes `node_linear_N` and says where they sit in `namespace` metadata."""
    import onnx

    from hf_encoderize.publish.onnx_embedding import fp32_block_matmuls

    nodes = []
    for i in range(30):
        node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name=f"node_linear_{i}")
        entry = node.metadata_props.add()
        entry.key, entry.value = "namespace", (f": Pipeline/model: LlamaModel/model.layers.{i}: LlamaDecoderLayer/"
                                               f"model.layers.{i}.mlp.up_proj: Linear/linear")
        nodes.append(node)
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [], []))
    assert fp32_block_matmuls(model) == ["node_linear_0", "node_linear_1"]


def test_a_graph_dynamo_cannot_export_falls_back_to_the_tracer_and_says_why(tmp_path, texts, monkeypatch):
    import hf_encoderize.publish.onnx_embedding as onnx_embedding

    real = onnx_embedding.export_embedding_graph

    def dynamo_fails(st, path, opset, exporter="dynamo"):
        if exporter == "dynamo":
            raise RuntimeError("torch.export: data-dependent control flow")
        return real(st, path, opset, exporter)

    monkeypatch.setattr(export_module, "export_embedding_graph", dynamo_fails)
    encoder = _encoder(tmp_path / "run")
    assert main(["export", str(encoder), "--check-texts", str(texts)]) == 0
    record = json.loads((encoder / "export_record.json").read_text())["onnx"]
    assert record["exporter"] == "torchscript" and record["variants"]["model.onnx"]["verdict"] == "verified"
    assert record["exporter_fallback"] == "dynamo: RuntimeError: torch.export: data-dependent control flow"


def test_the_int8_file_is_named_for_what_it_is_and_the_old_name_is_cleared(tmp_path):
    """Weight-only 8-bit is not sentence-transformers' dynamic `qint8`: an earlier export's `model_qint8.onnx` (ours,
    by its record) goes when a new export keeps `model_int8_weight_only.onnx`; a user's file of that name stays."""
    assert "model_int8_weight_only.onnx" in export_module.THRESHOLDS
    assert "model_qint8.onnx" not in export_module.THRESHOLDS
    for owned in ({"onnx/model_qint8.onnx"}, set()):
        model_dir, staging = tmp_path / f"m{len(owned)}", tmp_path / f"s{len(owned)}"
        (model_dir / "onnx").mkdir(parents=True)
        staging.mkdir()
        (model_dir / "onnx" / "model_qint8.onnx").write_bytes(b"old")
        (staging / "model_int8_weight_only.onnx").write_bytes(b"new")
        export_module._keep_passing(model_dir, staging, {"model_int8_weight_only.onnx": {"verdict": "verified"}}, owned)
        assert (model_dir / "onnx" / "model_int8_weight_only.onnx").read_bytes() == b"new"
        assert (model_dir / "onnx" / "model_qint8.onnx").exists() == (not owned)
