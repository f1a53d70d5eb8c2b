"""`--loss-implementation`: the pick among our fused loss, Liger-Kernel and Cut-Cross-Entropy (`loss_kernels`).

Liger and CCE are Triton kernels for CUDA (tests/test_gpu.py checks them where they run). Here the choosing is tested
with stand-in kernels registered for the CPU: a right one that is slower or faster than ours, one that is wrong by
1%, one that raises, and a training run whose loss goes through a registered kernel end to end.
"""

import json
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import write_corpus

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives import loss_kernels
from hf_encoderize.objectives.loss import fused_linear_cross_entropy, mlm_loss
from hf_encoderize.objectives.loss_kernels import LossKernel, choose_loss_implementation
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.train_config import TrainConfig

CPU = torch.device("cpu")
SHAPE = dict(hidden=32, vocab=512, rows=64, dtype=torch.float32)


def _dense(rows, weight, targets, bias, with_accuracy):
    """A right kernel: full logits and torch's cross-entropy."""
    logits = F.linear(rows, weight, bias).float()
    correct = (logits.argmax(-1) == targets).sum() if with_accuracy else None
    return F.cross_entropy(logits, targets, reduction="sum"), correct


def _slow(rows, weight, targets, bias, with_accuracy):
    time.sleep(0.05)
    return _dense(rows, weight, targets, bias, with_accuracy)


def _off_by_one_percent(rows, weight, targets, bias, with_accuracy):
    loss, correct = _dense(rows, weight, targets, bias, with_accuracy)
    return loss * 1.01, correct


def _raises(rows, weight, targets, bias, with_accuracy):
    raise RuntimeError("no kernel image is available for execution on the device")


def _register(monkeypatch, **kernels):
    monkeypatch.setattr(loss_kernels, "KERNELS",
                        {name: LossKernel("torch", name, fn, devices=("cpu",), auto_devices=("cpu",))
                         for name, fn in kernels.items()})


def test_on_cpu_auto_keeps_ours_and_says_why_the_kernels_cannot_run():
    name, report = choose_loss_implementation("auto", CPU, **SHAPE)
    assert name == "fused" and report["chosen"] == "fused"
    assert set(report["unavailable"]) == {"compiled", "dense", "liger", "cce"}
    assert all("cuda only" in why for why in report["unavailable"].values())
    assert "seconds" not in report  # nothing to time against


@pytest.mark.parametrize("kernel", ["liger", "cce"])
def test_naming_a_kernel_that_cannot_run_here_is_one_line_that_says_what_to_do(kernel):
    with pytest.raises(EncoderizeError) as err:
        choose_loss_implementation(kernel, CPU, **SHAPE)
    message = str(err.value)
    assert "\n" not in message and f"--loss-implementation {kernel}" in message
    assert "cuda" in message and "--loss-implementation auto" in message


def test_auto_keeps_the_fastest_kernel_that_agrees_and_records_the_others(monkeypatch):
    _register(monkeypatch, slow=_slow, wrong=_off_by_one_percent, broken=_raises)
    name, report = choose_loss_implementation("auto", CPU, **SHAPE)
    assert name == "fused"  # the only right candidate faster than ours is none: slow sleeps 50 ms
    assert set(report["seconds"]) == {"fused", "slow"} and report["seconds"]["slow"] >= 0.05
    assert "disagrees with the reference loss" in report["failed"]["wrong"]
    assert report["failed"]["broken"].startswith("raised RuntimeError: no kernel image")

    def fast(rows, weight, targets, bias, with_accuracy):  # right, and no slower than ours by construction
        return fused_linear_cross_entropy(rows, weight, targets, bias, with_accuracy=with_accuracy)

    _register(monkeypatch, slow=_slow, fast=fast)
    monkeypatch.setattr(loss_kernels, "_reference", _slow)  # now ours is the slow one
    name, report = choose_loss_implementation("auto", CPU, **SHAPE)
    assert name == "fast" and report["chosen"] == "fast"


def test_a_named_kernel_that_disagrees_stops_the_run_before_training(monkeypatch):
    _register(monkeypatch, wrong=_off_by_one_percent)
    with pytest.raises(EncoderizeError, match="--loss-implementation wrong disagrees with the reference loss"):
        choose_loss_implementation("wrong", CPU, **SHAPE)
    _register(monkeypatch, wrong=_dense)  # a right one is taken as named, after the check
    assert choose_loss_implementation("wrong", CPU, **SHAPE)[0] == "wrong"


def test_a_wrong_gradient_is_caught_even_when_the_loss_is_right(monkeypatch):
    class HalfGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, rows):
            return rows.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * 0.5

    def half_gradient(rows, weight, targets, bias, with_accuracy):
        return _dense(HalfGradient.apply(rows), weight, targets, bias, with_accuracy)

    _register(monkeypatch, half=half_gradient)
    _, report = choose_loss_implementation("auto", CPU, **SHAPE)
    assert "reference gradient of the rows" in report["failed"]["half"]


def test_mlm_loss_runs_the_kernel_and_falls_back_to_ours_without_rows():
    torch.manual_seed(0)
    hidden, head = torch.randn(2, 5, 8), torch.nn.Linear(8, 40, bias=False)
    index, targets = torch.tensor([1, 4, 7]), torch.tensor([3, 9, 39])
    calls = []

    def kernel(*args):
        calls.append(args[0].shape[0])
        return _dense(*args)

    ours = mlm_loss(hidden, head, index, targets, with_accuracy=True)
    theirs = mlm_loss(hidden, head, index, targets, with_accuracy=True, kernel=kernel)
    torch.testing.assert_close(theirs[0], ours[0])
    assert int(theirs[1]) == int(ours[1]) and calls == [3]
    empty = mlm_loss(hidden, head, index[:0], targets[:0], kernel=kernel)
    assert float(empty[0]) == 0.0 and calls == [3]  # no rows: ours, which still gives the head a zero gradient


def test_a_run_trains_through_the_chosen_kernel_and_records_it(decoder_dir, tmp_path, monkeypatch):
    """End to end: `auto` picks a registered kernel that is right and faster than ours, every micro-batch's loss goes
    through it, the losses are ours to fp32 noise, and the run record says which ran with the probe's timings."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 120, lambda i: 4 + i % 19)
    calls = []

    def counted(rows, weight, targets, bias, with_accuracy):
        calls.append(rows.shape[0])
        return _dense(rows, weight, targets, bias, with_accuracy)

    def run(out, implementation):
        data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=8)
        train = TrainConfig(output_dir=str(tmp_path / out), steps=4, batch_size=4, lr=1e-2, warmup_steps=1,
                            progress=False, loss_implementation=implementation, save_every=100)
        return cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), train)

    reference = run("fused", "fused")
    _register(monkeypatch, counted=counted)
    monkeypatch.setattr(loss_kernels, "_reference", _slow)  # ours loses the probe, so auto takes `counted`
    probed = len(calls)
    summary = run("auto", "auto")
    assert len(calls) > probed + 4  # 4 training steps and the held-out evaluation, past the probe's own calls
    torch.testing.assert_close(summary["losses"], reference["losses"], rtol=1e-4, atol=1e-5)
    record = json.loads((tmp_path / "auto" / "run_record.json").read_text())
    assert record["loss_implementation"]["chosen"] == "counted"
    assert set(record["loss_implementation"]["seconds"]) == {"fused", "counted"}
    fused_record = json.loads((tmp_path / "fused" / "run_record.json").read_text())
    assert fused_record["loss_implementation"] == {"requested": "fused", "chosen": "fused"}


def test_an_unknown_loss_implementation_is_refused_in_one_line():
    with pytest.raises(EncoderizeError,
                       match="--loss-implementation must be one of auto, fused, compiled, dense, liger, cce"):
        TrainConfig(loss_implementation="triton")


def test_compiled_is_left_out_by_auto_on_cpu_but_runs_when_named():
    """`compiled` (our loss with the softmax gradient under torch.compile) is timed by `auto` on CUDA only; named, it
    runs on the CPU after the same agreement check as any kernel."""
    name, report = choose_loss_implementation("auto", CPU, **SHAPE)
    assert name == "fused" and "--loss-implementation compiled runs it here" in report["unavailable"]["compiled"]
    name, report = choose_loss_implementation("compiled", CPU, **SHAPE)
    assert name == "compiled" and set(report["seconds"]) == {"fused", "compiled"} and not report["failed"]


def test_dense_masked_rows_agree_with_ours_when_named_on_the_cpu():
    """`dense`: one GEMM over the masked rows and a compiled cross-entropy. `auto` times it on CUDA only; named, it
    passes the probe's agreement check with ours (loss and both gradients), with and without an LM-head bias, and
    counts the same right predictions."""
    for bias in (False, True):
        name, report = choose_loss_implementation("dense", CPU, **SHAPE, bias=bias)
        assert name == "dense" and set(report["seconds"]) == {"fused", "dense"} and not report["failed"]
    generator = torch.Generator().manual_seed(0)
    rows, weight = torch.randn(50, 32, generator=generator), torch.randn(512, 32, generator=generator)
    targets = torch.randint(512, (50,), generator=generator)
    for count in (50, 17):  # another row count: the compiled cross-entropy is dynamic, the answer the same
        dense = loss_kernels.loss_function("dense")(rows[:count], weight, targets[:count], None, True)
        ours = fused_linear_cross_entropy(rows[:count], weight, targets[:count], None, with_accuracy=True)
        torch.testing.assert_close(dense[0], ours[0], rtol=1e-5, atol=1e-4)
        assert int(dense[1]) == int(ours[1])


def test_auto_leaves_dense_out_where_its_logits_do_not_fit(monkeypatch):
    """On a GPU, `auto` times `dense` only where the masked rows' logits and their gradient take at most a quarter of
    the free memory; otherwise it says how much they would take. (The CUDA calls are stood in for.)"""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * 2**30, 80 * 2**30))
    cuda = torch.device("cuda")
    assert loss_kernels._dense_fits(cuda, 3277, 128256, torch.bfloat16) is None  # 1B: 1.6 GiB of 8 free
    too_big = loss_kernels._dense_fits(cuda, 16384, 151936, torch.bfloat16)  # 9.3 GiB
    assert "exceed a quarter of the free device memory (8.0 GiB)" in too_big
    reason = loss_kernels.kernel_unavailable("dense", cuda, auto=True,
                                             shape={"rows": 16384, "vocab": 151936, "dtype": torch.bfloat16})
    assert reason.startswith("its logits") and "--loss-implementation dense runs it anyway" in reason
