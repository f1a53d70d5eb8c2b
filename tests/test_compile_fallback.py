"""A compiler failure on the first compiled step falls back to eager layers instead of ending the run (issue 65)."""

import json
import logging

import pytest
import torch
from conftest import make_decoder, write_corpus

from hf_encoderize.training import compiling
from hf_encoderize.training.engine import build


def _cpt(decoder_dir, corpus, out, compile_on, grad_accum, eval_documents):
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.train_config import TrainConfig

    cpt(LoadConfig(str(decoder_dir), attn_implementation="sdpa"),
        DataConfig(data_files=str(corpus), seq_len=32, eval_documents=eval_documents), MaskingConfig(),
        TrainConfig(output_dir=str(out), steps=3, batch_size=4, grad_accum=grad_accum, eval_every=0, log_every=1,
                    progress=False, compile=compile_on))
    losses = [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "train"]
    return losses, json.loads((out / "run_record.json").read_text())["compiled"]


@pytest.mark.parametrize(("grad_accum", "eval_documents", "during", "step"),
                         [(1, 4, "held-out evaluation", 0), (2, 0, "training step", 1)])
def test_a_compiler_failure_trains_on_eagerly_with_one_warning_and_a_record(decoder_dir, tmp_path, monkeypatch,
                                                                              caplog, grad_accum, eval_documents,
                                                                              during, step):
    """The compile raises as Inductor does when a Triton template asks more shared memory than the GPU has: the run
    trains on, its losses are the eager run's to the last digit (the failed step was taken again with the same batch,
    and its partial gradients and accumulation count were dropped), one warning says so, the record keeps it."""
    def failing_backend(graph, example_inputs):
        raise RuntimeError("out of resource: shared memory, Required: 180224, Hardware limit: 166912 (simulated)")

    real = build.compile_decoder_layers
    monkeypatch.setattr(build, "compile_decoder_layers", lambda model: real(model, backend=failing_backend))
    corpus = write_corpus(tmp_path / "docs.jsonl", 60, lambda i: 5 + i % 17)
    eager, _ = _cpt(decoder_dir, corpus, tmp_path / "eager", False, grad_accum, eval_documents)
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING):
        fallen, compiled = _cpt(decoder_dir, corpus, tmp_path / "fallen", True, grad_accum, eval_documents)
    assert fallen == eager
    assert compiled["on"] is False and compiled["why"] == "--compile"
    assert (compiled["fallback"]["step"], compiled["fallback"]["during"]) == (step, during)
    assert "shared memory" in compiled["fallback"]["error"]
    warnings = [r.getMessage() for r in caplog.records if "compiling the decoder layers failed" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "training on with eager layers" in warnings[0]


def test_only_a_compiler_failure_on_the_first_compiled_step_falls_back():
    from torch._dynamo.exc import BackendCompilerFailed

    model = make_decoder()
    compiling.compile_decoder_layers(model.model, backend="eager")
    failure = BackendCompilerFailed(lambda *a: None, RuntimeError("boom"), None)
    assert not compiling.fall_back_to_eager({"on": True}, model.model, ValueError("a bug of ours"), 1)
    assert not compiling.fall_back_to_eager({"on": True, "ran": True}, model.model, failure, 7)  # ran compiled once
    assert not compiling.fall_back_to_eager({"on": False}, model.model, failure, 1)
    decision = {"on": True}
    assert compiling.fall_back_to_eager(decision, model.model, failure, 1)
    assert all(layer._compiled_call_impl is None for layer in model.model.layers)
    assert decision["fallback"]["now"] == "eager decoder layers" and decision["on"] is False
    triton_like = type("OutOfResources", (RuntimeError,), {"__module__": "triton.runtime.errors"})("shared memory")
    assert compiling.is_compiler_failure(triton_like) and not compiling.is_compiler_failure(RuntimeError("x"))


def test_a_recompile_limit_hit_is_counted():
    """torch 2.13 files a hit under dynamo's "unimplemented" counters, not "frames": the run record's
    `recompile_limit_hits` (and its warning) read both. (dynamo's own `config.patch`: pytest's monkeypatch undoes a
    dynamo option with delattr, which hides it from every later test of the process.)"""
    torch._dynamo.reset()
    before = compiling.dynamo_counters()
    double = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=1):
        for length in (2, 3, 4):
            double(torch.randn(length))
    assert compiling.counters_since(before)["recompile_limit_hits"] >= 1
    assert torch._dynamo.config.recompile_limit == 8  # put back, still there
    torch._dynamo.reset()
