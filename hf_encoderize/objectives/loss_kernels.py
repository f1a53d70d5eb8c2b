"""`--loss-implementation`: ours with a compiled softmax gradient, Liger-Kernel's or Cut-Cross-Entropy's fused linear +
cross-entropy where one runs and is faster on the run's own shape; `loss.fused_linear_cross_entropy` otherwise.

Design choices:
- The plain-PyTorch fused loss (`loss.fused_linear_cross_entropy`, "fused") is the reference: it runs on every device
  and is tested against the dense loss and its gradients. Liger-Kernel (`liger_fused_linear_cross_entropy`) and
  Apple's Cut-Cross-Entropy (`linear_cross_entropy`) are Triton kernels for CUDA, so they are candidates only on a
  CUDA device with the package importable. `compiled` is ours with each chunk's softmax gradient under
  `torch.compile` (`loss.softmax_gradient`): a CUDA candidate of `auto` too, and runnable on the CPU when named.
- `dense` is the plain path where the masked rows' logits fit: one GEMM over the labelled rows (N x V in the compute
  dtype), a compiled cross-entropy (one graph for every N: `dynamic=True`) and autograd's two GEMMs back. No chunk
  loop, no host sync, no grad_W accumulator read and written per chunk. At a 1B Llama shape (4 rows x 2048 tokens,
  40% masked: 3,277 rows x 128,256) its bf16 logits and their gradient take 1.7 GB, so `auto` times it only where
  they take at most a quarter of the free device memory (`_dense_fits`), and says so otherwise.
- `auto` (the default) measures rather than assumes: on the run's shape (the masked rows one micro-batch holds x
  hidden x vocabulary, in the compute dtype, with the head's fp32 master weight) it times forward + backward of each
  candidate, checks each against the reference (loss within 1e-3 relative, gradients within 2e-2 relative in norm:
  bf16 products), and keeps the fastest that agrees. A candidate that raises or disagrees is never used, and why is
  recorded. The run record's `loss_implementation` holds the choice and the timings. On CPU the only candidate is
  "fused" and nothing is timed.
- Naming a kernel (`liger`, `cce`) skips the timing but not the agreement check: a kernel that is missing, cannot run
  on this device or disagrees stops the run before training, in one line.
- Cut-Cross-Entropy is called with `filter_eps=None`: its default drops softmax entries below a threshold from the
  gradient, which is fast but no longer the gradient of the loss; exact gradients are what the engine promises.
- Both get the rows and weight cast to the compute dtype (the cast is differentiable, so an fp32 master weight gets
  an fp32 gradient, as with autocast) and return the summed loss in fp32. Accuracy: Liger computes it in the kernel
  (`return_token_accuracy`); CCE has none, so on logged steps its arg-max count comes from the reference's chunk
  loop under `no_grad` (one extra logits pass on those steps only).
- A micro-batch with no masked rows takes the reference, whose zero loss still gives the head a (zero) gradient.
- Both kernels sync the host once per call, which ours never does: Liger counts the non-ignored targets with `.item()`
  (liger-kernel 0.8.5, `ops/fused_linear_cross_entropy.py`), CCE finds the valid rows with `.nonzero()`. The host
  then waits for the backbone's forward before it can queue the backward. The probe times the loss alone, with a
  sync around each call, so it does not see that wait; it is small when kernel launches outpace the GPU (large
  models) and can matter for small ones. `--loss-implementation fused` keeps the step free of syncs.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.precision import autocast_dtype, compute_dtype
from hf_encoderize.objectives.loss import fusable_head, fused_linear_cross_entropy

log = get_logger(__name__)

REFERENCE = "fused"
LossImplementation = Literal["auto", "fused", "compiled", "dense", "liger", "cce"]  # "fused" is REFERENCE
LOSS_IMPLEMENTATIONS = get_args(LossImplementation)
LOSS_RTOL, GRAD_RTOL = 1e-3, 2e-2  # agreement with the reference in the probe (bf16 matmuls)
PROBE_REPEATS = 3  # timed forward + backward steps per candidate, after one warm-up step


def _liger(rows, weight, targets, bias, with_accuracy):
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    dtype = compute_dtype(rows)
    output = liger_fused_linear_cross_entropy(
        rows.to(dtype), weight.to(dtype), targets, None if bias is None else bias.to(dtype), reduction="sum",
        accum_dtype=torch.float32, return_token_accuracy=with_accuracy)
    if not with_accuracy:
        return output.float(), None
    correct = (output.token_accuracy.float() * targets.shape[0]).round().long()  # the kernel gives a fraction
    return output.loss.float(), correct


def _cce(rows, weight, targets, bias, with_accuracy):
    from cut_cross_entropy import linear_cross_entropy

    if bias is not None:
        raise ValueError("Cut-Cross-Entropy takes no LM-head bias")
    dtype = compute_dtype(rows)
    loss = linear_cross_entropy(rows.to(dtype), weight.to(dtype), targets, reduction="sum", filter_eps=None)
    correct = None
    if with_accuracy:
        with torch.no_grad():
            correct = fused_linear_cross_entropy(rows, weight, targets, bias, with_accuracy=True)[1]
    return loss.float(), correct


def _compiled(rows, weight, targets, bias, with_accuracy):
    return fused_linear_cross_entropy(rows, weight, targets, bias, with_accuracy=with_accuracy, compiled=True)


@functools.cache
def _summed_cross_entropy():
    """torch's cross-entropy, summed, in fp32, compiled once for every row count (`dynamic=True`): inductor fuses the
    upcast, log-sum-exp and the gradient's softmax minus one-hot into passes over the 16-bit logits."""

    def summed(logits, targets):
        return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")

    return torch.compile(summed, dynamic=True)


def _dense(rows, weight, targets, bias, with_accuracy):
    dtype = compute_dtype(rows)
    logits = torch.nn.functional.linear(rows.to(dtype), weight.to(dtype),  # (N, V): one GEMM over the masked rows
                                        None if bias is None else bias.to(dtype))
    loss = _summed_cross_entropy()(logits, targets)
    correct = (logits.detach().argmax(-1) == targets).sum() if with_accuracy else None
    return loss, correct


def _dense_fits(device: torch.device, rows: int, vocab: int, dtype: torch.dtype) -> str | None:
    """Why `auto` leaves `dense` out on this shape (its logits and their gradient over a quarter of the free device
    memory), or None when they fit."""
    if device.type != "cuda":
        return None
    needed = 2 * rows * vocab * torch.empty((), dtype=dtype).element_size()
    free = torch.cuda.mem_get_info(device)[0]
    if needed <= free / 4:
        return None
    return (f"its logits and their gradient ({needed / 2**30:.1f} GiB) exceed a quarter of the free device memory "
            f"({free / 2**30:.1f} GiB)")


@dataclass(frozen=True)
class LossKernel:
    """A fused linear + cross-entropy from another package: `fn(rows, weight, targets, bias, with_accuracy)` returns
    the fp32 loss sum and the right arg-max count (or None), as `loss.fused_linear_cross_entropy` does."""

    module: str
    """The import name that must import for it to run."""
    package: str
    """Its name on PyPI (what `pip install` takes)."""
    fn: Callable
    devices: tuple[str, ...] = ("cuda",)
    """torch device types it runs on."""
    auto_devices: tuple[str, ...] = ("cuda",)
    """Device types on which `auto` times it (elsewhere it runs only when named)."""
    fits: Callable | None = None
    """`(device, rows, vocab, dtype) -> reason or None`: why `auto` leaves it out on the run's shape (memory)."""


KERNELS: dict[str, LossKernel] = {
    # Ours with each chunk's softmax gradient compiled (`loss.softmax_gradient`). Named, it runs on the CPU too (a C++
    # compiler is all inductor needs there); `auto` leaves it out on the CPU, where compiling costs seconds per run
    # and the full loss measured no faster (its matmuls dominate there).
    "compiled": LossKernel("torch._inductor", "torch", _compiled, devices=("cuda", "cpu")),
    # One GEMM and a compiled cross-entropy over the masked rows, where their logits fit (see the module docstring).
    "dense": LossKernel("torch._inductor", "torch", _dense, devices=("cuda", "cpu"), fits=_dense_fits),
    "liger": LossKernel("liger_kernel", "liger-kernel", _liger),
    "cce": LossKernel("cut_cross_entropy", "cut-cross-entropy", _cce),
}


def kernel_unavailable(name: str, device: torch.device, auto: bool = False, shape: dict | None = None) -> str | None:
    """Why kernel `name` cannot run on `device` here (one phrase), or None when it can; with `auto`, also why `auto`
    leaves it out (on the run's `shape`: rows, vocab, dtype, where the kernel checks that it fits)."""
    kernel = KERNELS[name]
    if device.type not in kernel.devices:
        return f"runs on {' or '.join(kernel.devices)} only (this run is on {device.type})"
    if auto and device.type not in kernel.auto_devices:
        return f"auto times it on {' or '.join(kernel.auto_devices)} only; --loss-implementation {name} runs it here"
    if auto and kernel.fits and shape:
        too_big = kernel.fits(device, shape["rows"], shape["vocab"], shape["dtype"])
        if too_big:
            return f"{too_big}; --loss-implementation {name} runs it anyway"
    try:
        importlib.import_module(kernel.module)
    except Exception as err:  # noqa: BLE001 - a broken install (missing triton, CUDA mismatch) is "not available"
        return f"{kernel.module} does not import ({type(err).__name__}: {err}); pip install {kernel.package}"
    return None


def loss_function(name: str) -> Callable:
    """The loss for an implementation name: the reference, or a kernel's adapter."""
    if name == REFERENCE:
        return _reference
    return KERNELS[name].fn


def _reference(rows, weight, targets, bias, with_accuracy):
    return fused_linear_cross_entropy(rows, weight, targets, bias, with_accuracy=with_accuracy)


def choose_loss_implementation(requested: str, device: torch.device, hidden: int, vocab: int, rows: int,
                               dtype: torch.dtype, bias: bool = False) -> tuple[str, dict]:
    """The implementation the run uses and what was found: `requested` is auto, fused, liger or cce; `rows` the
    masked rows of one micro-batch; `dtype` the compute dtype (bf16 under bf16 mixed precision). Raises
    `EncoderizeError` when a named kernel cannot run here or disagrees with the reference."""
    if requested == REFERENCE:
        return REFERENCE, {"requested": requested, "chosen": REFERENCE}
    names = list(KERNELS) if requested == "auto" else [requested]
    report = {"requested": requested, "shape": {"rows": rows, "hidden": hidden, "vocab": vocab,
                                                "dtype": str(dtype).removeprefix("torch.")},
              "unavailable": {}, "failed": {}}
    candidates = []
    for name in names:
        reason = kernel_unavailable(name, device, auto=requested == "auto",
                                    shape={"rows": rows, "vocab": vocab, "dtype": dtype})
        if reason is None:
            candidates.append(name)
        elif requested == "auto":
            report["unavailable"][name] = reason
        else:
            raise EncoderizeError(f"--loss-implementation {name}: {KERNELS[name].package} {reason}; or pass "
                                  "--loss-implementation auto")
    if not candidates:
        return REFERENCE, {**report, "chosen": REFERENCE}
    timings, report["failed"] = probe_loss_implementations([REFERENCE, *candidates], device, hidden, vocab, rows,
                                                           dtype, bias)
    report["seconds"] = timings
    if requested != "auto":
        if requested not in timings:
            raise EncoderizeError(f"--loss-implementation {requested} {report['failed'][requested]}; pass "
                                  "--loss-implementation fused (or auto) to train with the reference loss")
        return requested, {**report, "chosen": requested}
    chosen = min(timings, key=timings.get)  # the reference is always timed, and only agreeing kernels are
    return chosen, {**report, "chosen": chosen}


def choose_loss_kernel(requested: str, head, masked_rows: int, accelerator) -> tuple[Callable | None, dict]:
    """Pick the MLM loss kernel (`--loss-implementation` `requested`, see `loss_kernels`) for the prepared LM `head`
    on the shape one micro-batch gives (`masked_rows` labelled positions): returns the kernel (None: ours, the
    reference) and the report for the run record. The main process's choice is broadcast, so every process runs the
    same kernel. A head the fused path cannot read (FSDP2 shard, ZeRO-3 partition, a peft-wrapped head) takes the
    checkpointed fallback whatever is asked, and the report says so."""
    from accelerate.utils import broadcast_object_list

    if head is None or not fusable_head(head):
        return None, {"requested": requested, "chosen": "checkpointed",
                      "why": "the LM head is not a plain Linear here (sharded, partitioned or wrapped)"}
    dtype = autocast_dtype(accelerator) or head.weight.dtype
    name, report = choose_loss_implementation(requested, accelerator.device, head.weight.shape[1],
                                              head.weight.shape[0], max(1, masked_rows), dtype,
                                              bias=head.bias is not None)
    if accelerator.num_processes > 1:
        box = [(name, report)]
        broadcast_object_list(box, from_process=0)
        name, report = box[0]
    if name != REFERENCE and accelerator.is_main_process:
        log.info(f"MLM loss: {name} ({report.get('seconds', {})} s per step on the probe)")
    return (None if name == REFERENCE else loss_function(name)), report


def probe_loss_implementations(names: list[str], device: torch.device, hidden: int, vocab: int, rows: int,
                               dtype: torch.dtype, bias: bool = False) -> tuple[dict, dict]:
    """Median seconds of forward + backward for each of `names` (the first is the reference) on random data of the
    run's shape, for those that agree with the reference, and for the others the reason they were left out."""
    failed = {}
    generator = torch.Generator(device="cpu").manual_seed(0)
    hidden_rows = (torch.randn(rows, hidden, generator=generator) * 0.5).to(device=device, dtype=dtype)
    weight = (torch.randn(vocab, hidden, generator=generator) * 0.02).to(device)  # an fp32 master weight
    bias_tensor = torch.zeros(vocab, device=device) if bias else None
    targets = torch.randint(vocab, (rows,), generator=generator).to(device)
    reference, timings = None, {}
    for name in names:
        try:
            result, seconds = _time_one(loss_function(name), hidden_rows, weight, targets, bias_tensor, device, dtype)
        except Exception as err:  # noqa: BLE001 - a kernel that fails here must not fail the run
            failed[name] = f"raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip()
            if reference is None:
                raise  # the reference itself failing is a real error
            continue
        if reference is None:
            reference = result
        else:
            disagreement = _disagreement(result, reference)
            if disagreement:
                failed[name] = disagreement
                continue
        timings[name] = seconds
    return timings, failed


def _time_one(fn, hidden_rows, weight, targets, bias, device, dtype):
    rows = hidden_rows.detach().requires_grad_(True)
    master = weight.detach().requires_grad_(True)
    bias = None if bias is None else bias.detach().requires_grad_(True)
    times = []
    for _ in range(PROBE_REPEATS + 1):
        rows.grad = master.grad = None
        _sync(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss, _ = fn(rows, master, targets, bias, False)
        loss.backward()
        _sync(device)
        times.append(time.perf_counter() - start)
    return (loss.detach().float(), rows.grad.float(), master.grad.float()), sorted(times[1:])[len(times[1:]) // 2]


def _disagreement(result, reference) -> str | None:
    (loss, grad_rows, grad_weight), (ref_loss, ref_rows, ref_weight) = result, reference
    if not torch.isfinite(loss) or abs(float(loss - ref_loss)) > LOSS_RTOL * abs(float(ref_loss)):
        return f"disagrees with the reference loss ({float(loss):.6g} vs {float(ref_loss):.6g})"
    for what, grad, ref in (("rows", grad_rows, ref_rows), ("weight", grad_weight, ref_weight)):
        error = float((grad - ref).norm() / ref.norm().clamp_min(1e-30))
        if not error <= GRAD_RTOL:  # also catches NaN
            return f"disagrees with the reference gradient of the {what} (relative error {error:.3g})"
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
