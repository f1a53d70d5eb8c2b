"""The fused linear + cross-entropy vs the checkpointed chunk loop vs dense logits, on the masked rows alone.

Three arms run forward+backward of the summed cross-entropy of `rows @ W^T` (rows: N masked hidden states, W: an
LM head of V x H) against random targets, with gradients for both the rows and W:
- `dense`: full logits for the masked rows and an fp32 cross-entropy, what plain user code does;
- `checkpointed`: `loss.checkpointed_cross_entropy`, the engine's loss before the fused one (4096-row chunks, each
  recomputed in the backward); the old engine also counted arg-max hits on every step, which this arm leaves out;
- `fused`: `loss.fused_linear_cross_entropy`;
- `compiled`: the same with each chunk's softmax gradient under torch.compile (`--loss-implementation compiled`);
  its first step, the warmup, compiles;
- `liger`, `cce`: Liger-Kernel's and Cut-Cross-Entropy's fused linear + cross-entropy (`loss_kernels`, exact
  gradients), on CUDA where the package imports; listed under `skipped` with the reason elsewhere. These are what
  `--loss-implementation auto` times on a run's own shape before it picks one.

Each (vocabulary, arm) runs in its own process, so one arm's allocations never count against another. The first
step is the warmup and the memory probe; the time is the median of `--repeats` more. Memory is the peak above what
the process held before the step: `torch.cuda.max_memory_allocated` on CUDA; on CPU the growth of the process's peak
resident set (`ru_maxrss`), which is coarser (allocator caching) but sees torch's allocations, unlike tracemalloc.
On CUDA the arms run under bf16 autocast with an fp32 weight (Accelerate's bf16 mixed precision); on CPU in fp32.
CPU defaults (1,638 rows = 40% of 4 x 1024, 2 repeats) keep the run near 2 minutes on 2 cores; the ratios are
what mean something there.

    python benchmarks/mlm_loss.py [--vocab 32768 151936] [--hidden 896] [--rows N] [--repeats R]
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from hf_encoderize.objectives.loss import checkpointed_cross_entropy, fused_linear_cross_entropy
from hf_encoderize.objectives.loss_kernels import kernel_unavailable, loss_function

ARMS = ("dense", "dense_compiled", "checkpointed", "fused", "compiled", "liger", "cce")
KERNEL_ARMS = {"dense_compiled": "dense", "compiled": "compiled", "liger": "liger", "cce": "cce"}  # arm -> kernel


def dense(rows, head, targets):
    return F.cross_entropy(head(rows).float(), targets, reduction="sum")


def dense_compiled(rows, head, targets):
    """`--loss-implementation dense`: one GEMM over the rows and a compiled cross-entropy."""
    return loss_function("dense")(rows, head.weight, targets, None, False)[0]


def checkpointed(rows, head, targets):
    return checkpointed_cross_entropy(rows, head, targets)[0]


def fused(rows, head, targets):
    return fused_linear_cross_entropy(rows, head.weight, targets)[0]


def compiled(rows, head, targets):
    return loss_function("compiled")(rows, head.weight, targets, None, False)[0]


def liger(rows, head, targets):
    return loss_function("liger")(rows, head.weight, targets, None, False)[0]


def cce(rows, head, targets):
    return loss_function("cce")(rows, head.weight, targets, None, False)[0]


def measure(vocab: int, arm: str, hidden: int, rows: int, repeats: int, device: str) -> dict:
    """One arm in this process: peak extra memory of the first step (MiB), then the median step time."""
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False, device=device)
    states = torch.randn(rows, hidden, device=device, requires_grad=True)  # (N, H)
    targets = torch.randint(vocab, (rows,), device=device)
    loss_fn = globals()[arm]
    cuda = device == "cuda"
    before = torch.cuda.memory_allocated() if cuda else _peak_rss_mib()
    times, loss = [], None
    for step in range(repeats + 1):
        head.weight.grad = states.grad = None
        _sync(device)
        start = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(states, head, targets)
        loss.backward()
        _sync(device)
        times.append(time.perf_counter() - start)
        if step == 0:
            peak = torch.cuda.max_memory_allocated() / 2**20 - before / 2**20 if cuda else _peak_rss_mib() - before
    return {"median_s": round(statistics.median(times[1:]), 4), "peak_extra_mib": round(peak, 1),
            "loss": float(loss.detach())}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def compare(vocab: int, args) -> dict:
    """All arms at one vocabulary, each in a fresh process, and the fused arm's ratios against the others."""
    arms, skipped = {}, {}
    for arm in ARMS:
        why = kernel_unavailable(KERNEL_ARMS[arm], torch.device(args.device)) if arm in KERNEL_ARMS else None
        if why:
            skipped[arm] = why
            continue
        command = [sys.executable, __file__, "--worker", arm, "--vocab", str(vocab), "--hidden", str(args.hidden),
                   "--rows", str(args.rows), "--repeats", str(args.repeats)]
        arms[arm] = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    ran = list(arms)
    fused_arm = arms["fused"]
    for other in ran:
        if other != "fused":
            arms[f"speedup_fused_vs_{other}"] = round(arms[other]["median_s"] / fused_arm["median_s"], 2)
            arms[f"memory_fused_over_{other}"] = round(fused_arm["peak_extra_mib"] / arms[other]["peak_extra_mib"], 3)
    arms["same_loss"] = all(abs(arms[a]["loss"] - fused_arm["loss"]) <= 1e-4 * abs(fused_arm["loss"]) for a in ran)
    arms["skipped"] = skipped
    return arms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, nargs="+", default=[32768, 151936])
    parser.add_argument("--hidden", type=int, default=896)  # Qwen2.5-0.5B
    parser.add_argument("--rows", type=int, default=None, help="masked rows; default 26214 on CUDA, 1638 on CPU")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps after the warmup; 5 CUDA, 2 CPU")
    parser.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.rows = args.rows or (26214 if device == "cuda" else 1638)  # 40% of 64 x 1024, or of 4 x 1024
    args.repeats = args.repeats or (5 if device == "cuda" else 2)
    if args.worker:
        print(json.dumps(measure(args.vocab[0], args.worker, args.hidden, args.rows, args.repeats, device)))
        return
    results = {str(vocab): compare(vocab, args) for vocab in args.vocab}
    print(json.dumps({"device": device, "hidden": args.hidden, "rows": args.rows, "repeats": args.repeats,
                      "precision": "bf16 autocast, fp32 weight" if device == "cuda" else "fp32",
                      "memory": "cuda max_memory_allocated" if device == "cuda" else "ru_maxrss growth",
                      **results}, indent=1))


if __name__ == "__main__":
    main()
