"""benchmarks/serving.py: PyTorch, ONNX fp32 and ONNX int8 side by side on the same texts; speed, memory, agreement.
GGUF rows come from `export --format gguf` (its files are checked in test_export_gguf.py); the tiny model's word-level
tokenizer is one llama.cpp's converter refuses, which the end-to-end test sees reported as "not exported"."""

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "serving.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("serving_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backends_side_by_side_agree_and_report_what_export_kept_out(tmp_path):
    from hf_encoderize.publish import export
    from hf_encoderize.publish.export_reference import load_model
    from hf_encoderize.publish.onnx_embedding import export_embedding_graph

    bench = load_benchmark()
    texts = bench.benchmark_texts(24)
    assert len(set(map(len, texts))) >= 3  # several lengths, so the batches pad
    encoder = bench.tiny_encoder(tmp_path / "encoder", texts)
    st, pooling = load_model(encoder)  # the files `export` writes, without its out-of-process checks (test_export)
    (encoder / "onnx").mkdir()
    graph = export_embedding_graph(st, encoder / "onnx" / "model.onnx", 17)
    export._export_int8(encoder / "onnx" / "model.onnx", encoder / "onnx" / "model_int8_weight_only.onnx")
    record = {"onnx": {"pooling": pooling, **graph, "variants": {"model.onnx": {"verdict": "verified"},
                                                        "model_int8_weight_only.onnx": {"verdict": "verified"}}}}
    args = argparse.Namespace(threads=1, batch_size=8, rounds=1)

    results = bench.measure(encoder, record, texts, args)
    assert results["gguf_f32"] == results["gguf_q8_0"] == {"export_check": "not exported"}
    assert results["pytorch"]["speed_vs_pytorch"] == 1.0 and results["pytorch"]["min_cosine_to_pytorch"] >= 0.9999
    fp32, int8 = results["onnx_fp32"], results["onnx_int8"]
    assert fp32["min_cosine_to_pytorch"] >= 0.999 and int8["min_cosine_to_pytorch"] >= 0.99
    assert int8["min_cosine_to_pytorch"] < 1.0  # int8 really is a different (rounded) model
    for row in (results["pytorch"], fp32, int8):
        assert row["sentences_per_s"] > 0 and row["peak_memory_added_mib"] >= 0
    assert fp32["file_mib"] > int8["file_mib"] and fp32["export_check"] == "verified"

    # A variant export kept out is not timed: its verdict is reported instead.
    (encoder / "onnx" / "model_int8_weight_only.onnx").unlink()
    record["onnx"]["variants"]["model_int8_weight_only.onnx"]["verdict"] = "not kept: cosine to PyTorch 0.2400 < 0.99"
    results = bench.measure(encoder, record, texts, args)
    assert results["onnx_int8"] == {"export_check": "not kept: cosine to PyTorch 0.2400 < 0.99"}
    assert results["onnx_fp32"]["min_cosine_to_pytorch"] >= 0.999


def test_the_embedding_models_rows_compare_the_pipeline_graph_with_encode(contrastive_run, tmp_path):
    """An embedding model (lead tokens, last-token pooling): PyTorch is `encode` with its default prompt, ONNX the
    graph's `sentence_embedding` on prompt + text; they agree (the lead-token rule is inside the graph)."""
    import shutil

    from hf_encoderize.publish import export
    from hf_encoderize.publish.export_reference import load_model
    from hf_encoderize.publish.onnx_embedding import export_embedding_graph

    bench = load_benchmark()
    folder = shutil.copytree(contrastive_run / "contrastive", tmp_path / "contrastive")
    st, pooling = load_model(folder)
    (folder / "onnx").mkdir()
    graph = export_embedding_graph(st, folder / "onnx" / "model.onnx", 17)
    export._export_int8(folder / "onnx" / "model.onnx", folder / "onnx" / "model_int8_weight_only.onnx")
    kept = {"model.onnx": {"verdict": "verified"}, "model_int8_weight_only.onnx": {"verdict": "verified"}}
    record = {"onnx": {"pooling": pooling, **graph, "variants": kept}}
    assert graph["prompt"] and pooling == "lasttoken"
    results = bench.measure(folder, record, ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10"] * 4,
                            argparse.Namespace(threads=1, batch_size=4, rounds=1))
    assert results["onnx_fp32"]["min_cosine_to_pytorch"] >= 0.999
    assert results["onnx_int8"]["min_cosine_to_pytorch"] >= 0.99


@pytest.mark.slow
def test_the_script_end_to_end_through_export(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--work", str(tmp_path), "--texts", "16", "--rounds", "1",
                           "--batch-size", "8"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert report["texts"] == 16 and report["pooling"] == "mean"
    assert report["results"]["onnx_fp32"]["export_check"] == "verified"  # checked out of process by `export`
    assert report["results"]["onnx_int8"]["min_cosine_to_pytorch"] >= 0.99
    assert report["results"]["gguf_f32"]["export_check"].startswith("not exported")
