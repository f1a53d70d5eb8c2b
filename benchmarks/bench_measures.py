"""What benchmarks/cpt_throughput.py reads around a run: the GPU's state (allocator retries, clocks, throttle
reasons), the attention spans of `ours`'s packed rows, and the model FLOPs of the timed steps with their MFU
(`hf_encoderize.training.flops`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                    0x100: "display_clocks"}


def device_state() -> dict | None:
    """On a CUDA GPU: the caching allocator's retries so far (a retry frees cached blocks and tries again: a sign of
    memory pressure that slows steps), and from nvidia-smi the SM clock against its maximum, temperature, power and
    the active clock-throttle reasons. None on CPU; clocks are left out, with why, where nvidia-smi does not answer.

    >>> device_state() is None or "alloc_retries" in device_state()
    True
    """
    import torch

    if not torch.cuda.is_available():
        return None
    state = {"alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0)}
    for reasons_field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):  # new name, then old
        query = f"clocks.sm,clocks.max.sm,temperature.gpu,power.draw,{reasons_field}"
        try:
            done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                                  capture_output=True, text=True, timeout=15)
        except (OSError, subprocess.TimeoutExpired) as err:
            return {**state, "clocks": f"not read ({type(err).__name__})"}
        if done.returncode == 0 and done.stdout.strip():
            sm, sm_max, temperature, power, mask = (v.strip() for v in done.stdout.strip().split(","))
            bits = int(mask, 16) if mask.startswith("0x") else 0
            return {**state, "sm_clock_mhz": _number(sm), "sm_clock_max_mhz": _number(sm_max),
                    "temperature_c": _number(temperature), "power_w": _number(power),
                    "throttle_reasons": [name for bit, name in THROTTLE_REASONS.items() if bits & bit]}
    return {**state, "clocks": f"not read (nvidia-smi: {done.stderr.strip()[:120]})"}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def utilisation(folder: Path, result: dict) -> dict:
    """Model FLOPs of the timed steps (training.flops: useful work, the same definition for every arm), their
    rate, and MFU against the device's dense bf16 peak (null on a device not in the table, and on CPU)."""
    from hf_encoderize.training.flops import matmul_params, mfu, training_flops

    config = json.loads((folder / "model" / "config.json").read_text())
    flops = training_flops(config, tokens=result["tokens"], masked_tokens=result["masked_tokens"],
                           document_lengths=result.pop("spans"), head_tokens=result["head_tokens"])
    params = matmul_params(config)
    if flops is None:  # a config training.flops does not cover (MoE, hybrid): no number rather than a wrong one
        return {"params_matmul": params, "flops": None, "model_tflops_per_s": None, "mfu": None}
    per_s = flops["total"] / result["seconds"]
    return {"params_matmul": params, "flops": flops, "model_tflops_per_s": per_s / 1e12,
            "mfu": mfu(per_s, result["device"])}


def ours_spans(preset: dict, folder: Path) -> list[int]:
    """Attention spans of `ours`'s timed rows: the document pieces of each packed row, as `packing.LaneStream` packs
    them (lane j of `rows` takes documents j, j + rows, ...; each gets EOS and continues across row boundaries; a
    lane whose documents run out starts over and drops its partial row; one process, no accumulation and no held-out
    documents, so there are `rows` lanes). A document's tokens are its words + EOS (the word-level tokenizer)."""
    texts = (json.loads(line)["text"] for line in (folder / "docs.jsonl").read_text().splitlines())
    lengths, lanes = [len(text.split()) + 1 for text in texts], preset["rows"]
    total = preset["warmup"] + preset["steps"]
    return [span for lane in range(lanes)
            for row in lane_rows(lengths[lane::lanes], preset["seq_len"], total)[preset["warmup"]:] for span in row]


def lane_rows(lengths: list[int], seq_len: int, count: int) -> list[list[int]]:
    """The first `count` rows one lane packs from documents of `lengths` tokens, each row as its pieces' lengths.

    >>> lane_rows([3, 6, 2], seq_len=4, count=3)  # the third row starts a new pass: [1, 2] is dropped
    [[3, 1], [4], [3, 1]]
    """
    rows: list[list[int]] = []
    while len(rows) < count:
        made, pieces, fill = len(rows), [], 0  # a new pass over the lane's documents; its partial row was dropped
        for length in lengths:
            while length and len(rows) < count:
                take = min(length, seq_len - fill)
                pieces, fill, length = pieces + [take], fill + take, length - take
                if fill == seq_len:
                    rows, pieces, fill = rows + [pieces], [], 0
        if len(rows) == made:
            raise SystemExit(f"a lane's documents do not fill one row of {seq_len} tokens")
    return rows
