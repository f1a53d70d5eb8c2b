"""The profile's classification, pinned on kernel lists as an H200 records them: a kernel is attention by the op that
launched it, backward by the autograd region it ran in, and the head's backward by autograd's sequence number; the
kernel's own name decides only when no op claims it, and that share is reported apart."""

import pytest

from hf_encoderize.training.profiling import (
    ATTENTION_BACKWARD,
    HEAD,
    HEAD_BACKWARD,
    Launched,
    classify,
    kernel_class,
    steady_window,
    summarize,
)

EVALUATE = "autograd::engine::evaluate_function: "
# One packed step under sdpa (a dense 4-D mask: the memory-efficient CUTLASS kernels), flash-attn's varlen path,
# compiled layers and the fused MLM head, as `torch.profiler` links each kernel to its launching op (innermost
# first). Seconds are per step.
SDPA_STEP = [
    Launched("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", 0.010,
             ("aten::_efficient_attention_forward", "aten::_scaled_dot_product_efficient_attention",
              "aten::scaled_dot_product_attention", "hf_encoderize::forward")),
    # The backward kernel's name says neither `bwd` nor `backward`: a classifier by name filed it under forward.
    Launched("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", 0.019,
             ("aten::_efficient_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
              "ScaledDotProductEfficientAttentionBackward0", EVALUATE + "ScaledDotProductEfficientAttentionBackward0",
              "hf_encoderize::backward")),
    Launched("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 0.040,
             ("aten::mm", "aten::matmul", "aten::linear", "hf_encoderize::forward")),
    Launched("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64", 0.080,
             ("aten::mm", "MmBackward0", EVALUATE + "MmBackward0", "hf_encoderize::backward")),
    Launched("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", 0.020,
             ("aten::mm", "aten::matmul", "FusedLinearCrossEntropy", HEAD, "hf_encoderize::loss")),
    Launched("vectorized_elementwise_kernel", 0.001,
             ("aten::mul", "FusedLinearCrossEntropyBackward", EVALUATE + "FusedLinearCrossEntropyBackward",
              HEAD_BACKWARD, "hf_encoderize::backward")),
    Launched("multi_tensor_apply_kernel", 0.015, ("aten::_fused_adamw_", "Optimizer.step#AdamW.step",
                                                  "hf_encoderize::optimizer")),
]
FLASH_VARLEN = [
    Launched("flash_fwd_kernel", 0.004, ("flash_attn::_flash_attn_varlen_forward", "FlashAttnVarlenFunc",
                                         "hf_encoderize::forward")),
    Launched("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 0.009,
             ("flash_attn::_flash_attn_varlen_backward", "FlashAttnVarlenFuncBackward",
              EVALUATE + "FlashAttnVarlenFuncBackward", "hf_encoderize::backward")),
]
COMPILED = [  # a compiled layer: attention runs as an extern aten call inside the compiled graph
    Launched("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", 0.019,
             ("aten::_efficient_attention_backward", "## Call CompiledFxGraph f3k2 ##", "CompiledFunctionBackward",
              EVALUATE + "CompiledFunctionBackward", "hf_encoderize::backward")),
    Launched("triton_poi_fused_add_mul_0", 0.002,
             ("## Call CompiledFxGraph f3k2 ##", "CompiledFunctionBackward", EVALUATE + "CompiledFunctionBackward")),
    Launched("triton_tem_fused_1", 0.006, ("## Call CompiledFxGraph a9e1 ##", "CompiledFunction",
                                           "hf_encoderize::forward")),  # flex's template: no op names it
]


@pytest.mark.parametrize(("item", "part", "basis"), [
    (SDPA_STEP[0], "attention_forward", "launching op"),
    (SDPA_STEP[1], "attention_backward", "launching op"),
    (SDPA_STEP[2], "other", "launching op"),
    (SDPA_STEP[3], "other", "launching op"),
    (SDPA_STEP[4], "head_forward", "launching op"),
    (SDPA_STEP[5], "head_backward", "sequence number"),
    (SDPA_STEP[6], "other", "launching op"),
    (FLASH_VARLEN[0], "attention_forward", "launching op"),
    (FLASH_VARLEN[1], "attention_backward", "launching op"),
    (COMPILED[0], "attention_backward", "launching op"),
    (COMPILED[1], "other", "launching op"),
    (COMPILED[2], "attention_forward", "kernel name"),
    (Launched("triton_red_fused_0", 0.001, ("aten::mul", EVALUATE + "MulBackward0", ATTENTION_BACKWARD)),
     "attention_backward", "sequence number"),
])
def test_each_kernel_is_filed_by_who_launched_it(item, part, basis):
    assert kernel_class(item) == (part, basis)


def test_the_sdpa_step_adds_up_and_its_backward_attention_is_not_zero():
    classified = classify(SDPA_STEP)
    assert classified["parts"]["attention_backward"] == pytest.approx(0.019)  # read 0.000 on the H200 before
    assert classified["parts"]["attention_forward"] == pytest.approx(0.010)
    assert classified["attention_by_kernel_name"] == 0
    assert [item["name"] for item in classified["top"]][:2] == [SDPA_STEP[3].name, SDPA_STEP[2].name]
    times = {"data_wait": 0.001, "forward": 0.060, "loss": 0.021, "backward": 0.110, "optimizer": 0.016}
    summary = summarize(times, classified, wall=0.210, steps=1)
    assert summary["backward_other"] == pytest.approx(0.110 - 0.019 - 0.001)
    assert summary["unaccounted"] == pytest.approx(0.210 - sum(times.values()))


def test_a_share_found_by_name_only_is_reported_apart():
    classified = classify(COMPILED)
    assert classified["attention_by_kernel_name"] == pytest.approx(0.006)


def test_the_profiled_steps_are_steady_ones():
    assert steady_window(0, 35) == 10  # the benchmark: 5 warm-up steps, compilation in the first
    assert steady_window(100, 200) == 110  # a resumed run: 10 steps after it resumed
    assert steady_window(0, 7) == 4 and steady_window(0, 3) == 0  # a short run: its last 3 steps


CUT_SCRIPT = r'''
import sys
from pathlib import Path

import torch
from hf_encoderize.training.profiling import StepProfiler

folder = Path(sys.argv[1])
start = torch.profiler.profile.__enter__


def cut(self):  # a time limit or Ctrl-C landing while the profiler starts
    raise KeyboardInterrupt


torch.profiler.profile.__enter__ = cut
cut_start = StepProfiler(folder, first=0, count=2)
try:
    with cut_start.around(0):
        raise AssertionError("the step ran")
except KeyboardInterrupt:
    pass
assert cut_start.profiler is None
cut_start.close()  # what a run's end used to do here: read the results of a profiler that never ran (SIGSEGV)
cut_start.abandon()
torch.profiler.profile.__enter__ = start

cut_step = StepProfiler(folder, first=0, count=2)
try:
    with cut_step.around(0):
        torch.ones(8).sum()
        raise KeyboardInterrupt
except KeyboardInterrupt:
    pass
assert cut_step.profiler is not None  # the run's end decides
cut_step.abandon()
assert not torch.autograd.profiler._is_profiler_enabled
assert not folder.exists()  # a cut window writes nothing

whole = StepProfiler(folder, first=0, count=1)  # and the next window profiles as before
with whole.around(0):
    torch.ones(8).sum()
assert (folder / "summary.json").is_file() and (folder / "trace.json").is_file()
print("ok")
'''


def test_a_window_cut_short_writes_nothing_and_never_crashes(tmp_path):
    """A time limit (or Ctrl-C) that lands in the profiler's start used to leave a profiler that never ran, whose
    results the run's end then exported: SIGSEGV (the GPU session's rehearsal, on a loaded CI machine). Run in its own
    process, so a crash is this test's failure and not the worker's."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CUT_SCRIPT, str(tmp_path / "profile")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-3000:])
