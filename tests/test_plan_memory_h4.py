"""The plan line's peak-memory estimate (issue 67 point 1): parameters, gradients and AdamW states at the dtype the
optimizer steps in, plus the activations of rows x length x layers x hidden; said as an estimate, before any weight
loads (`--dry-run` reads the model's config only)."""

import json

from hf_encoderize import cli
from hf_encoderize.training.plan import ModelShape, estimate_memory, state_bytes_per_parameter

SHAPE = ModelShape(parameters=10**9, trainable=10**9, layers=16, hidden=2048, vocab=32000, weight_bytes=2)


def _memory(shape=SHAPE, **changed):
    settings = {"rows": 8, "seq_len": 512, "mixed_precision": True, "checkpointing": False, **changed}
    return estimate_memory(shape, **settings)


def test_the_estimate_scales_as_its_parts_do():
    base = _memory()
    assert base.states == 16 * 10**9  # fp32 weight, gradient and two AdamW moments: 16 bytes a parameter
    assert base.activations == 34 * 8 * 512 * 2048 * 16  # bytes per token, hidden unit and layer in 16-bit
    double_rows, double_length = _memory(rows=16), _memory(seq_len=1024)
    assert double_rows.activations == double_length.activations == 2 * base.activations
    assert double_rows.states == base.states and double_rows.logits == base.logits
    deeper = _memory(ModelShape(**{**SHAPE.__dict__, "layers": 32}))
    assert deeper.activations == 2 * base.activations
    assert _memory(mixed_precision=False).activations == 2 * base.activations  # fp32 activations
    assert _memory(checkpointing=True).activations < base.activations / 4
    bigger = _memory(ModelShape(**{**SHAPE.__dict__, "parameters": 2 * 10**9, "trainable": 2 * 10**9}))
    assert bigger.states == 2 * base.states and bigger.total > base.total
    lora = _memory(ModelShape(**{**SHAPE.__dict__, "trainable": 10**7}))  # a frozen bf16 base: 2 bytes a weight
    assert lora.states == 16 * 10**7 + 2 * (10**9 - 10**7)
    pure_bf16 = _memory(state_bytes=state_bytes_per_parameter({}, step_bytes=2))  # --master-weights loaded
    assert pure_bf16.states == base.states // 2
    sharded = _memory(state_bytes=state_bytes_per_parameter({"WORLD_SIZE": "8", "ACCELERATE_USE_FSDP": "true"}))
    assert sharded.states == base.states // 8


def test_dry_run_states_the_estimate_from_the_models_config(decoder_dir, capsys):
    argv = ["cpt", str(decoder_dir), "--max-seq-length", "32", "--dry-run", "--json"]
    figures = []
    for rows in ("2", "4"):
        assert cli.main([*argv, "--batch-size", rows]) == 0
        said = capsys.readouterr()
        line = next(line for line in said.err.splitlines() if line.startswith("plan:"))
        assert "peak memory about" in line and "(an estimate: " in line and "activations" in line, line
        figures.append(json.loads(said.out)["peak_memory_estimate_bytes"])
    assert figures[1] > figures[0]  # more rows, more activations
    assert cli.main(["cpt", "no-such/model-offline", "--dry-run"]) == 0  # a config it cannot read: said so
    assert "peak memory not estimated" in capsys.readouterr().err
