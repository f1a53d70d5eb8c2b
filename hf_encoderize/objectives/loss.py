"""The MLM loss on labelled positions: a fused linear + cross-entropy, and the checkpointed chunk loop it replaces.

Design choices:
- Labelled positions are found on the host (`labelled_positions`, from the CPU labels the masker made), so the device
  gathers rows with `index_select` on an index it already has: boolean indexing on the device would make the host
  wait for the device to count the selected rows.
- `fused_linear_cross_entropy` is a `torch.autograd.Function` in the style of Liger-Kernel's fused linear
  cross-entropy, written in plain PyTorch: the forward walks row chunks and, while a chunk's logits are at hand,
  computes the loss *and* its gradients (softmax - one-hot, then grad_hidden = g @ W and grad_W += g^T @ h). The
  backward only scales the stored gradients by the incoming scalar. That is 3 vocabulary-sized matmuls per chunk
  instead of the 4 of a checkpointed chunk (forward, recomputed forward, two backward), and no logits survive the
  chunk. The cost is holding grad_W (V x H, in the weight's dtype) from the forward to the backward.
- Matmuls run in the compute dtype (the autocast dtype when autocast is on for the device, else the hidden states'
  dtype); the log-sum-exp, the loss and grad_W's accumulator across chunks are fp32. Returned gradients have the
  dtype of their input (an fp32 master weight gets an fp32 gradient under bf16 autocast, as autograd would give).
- A chunk holds at most `CHUNK_ELEMENTS` logits: 2**26, i.e. 256 MiB of fp32 softmax plus its compute-dtype logits
  and gradient, whatever the vocabulary (441 rows at Qwen's 151,936). That bounds the extra memory at well under
  1 GiB while keeping each matmul hundreds of rows tall, large enough to run near full speed on a GPU. Each chunk
  also reads and writes the fp32 grad_W accumulator (V x H), about as much traffic as its own logits at H ~ 900, so
  a larger budget (`chunk_rows`) buys fewer passes over grad_W with memory.
- Gradients are only computed for inputs that need them: a frozen LM head (LoRA) costs no grad_W, and under
  `torch.no_grad()` (evaluation) the forward stops at the loss. Accuracy (arg-max == target) is counted only on
  request, on the device, so it adds no host sync.
- `mlm_loss` uses the fused path only when the head is exactly a `torch.nn.Linear` with a plain weight and no hooks.
  Anything else falls back to `checkpointed_cross_entropy`, which calls the head module itself, chunk by chunk:
  DeepSpeed ZeRO-3 gathers a partitioned weight only inside the head's own forward (its hooks), FSDP2/tensor
  parallelism hold a DTensor shard, and a peft-wrapped head (LoRA on `lm_head`) has a forward of its own.
- `compiled=True` (`--loss-implementation compiled`) hands each chunk's softmax gradient to `torch.compile`
  (`softmax_gradient`): inductor fuses the fp32 casts, max, exp, sum, log and the minus-one-hot into a couple of passes
  over the logits in registers, where the eager chunk makes about ten passes over an fp32 copy of them (~46 bytes of
  traffic per logit under bf16, against ~6). No fp32 copy of 16-bit logits is held, so a chunk takes twice the rows
  in the same memory, halving the passes over grad_W. On a 2-core CPU, on bf16 logits of 441 x 32,768 it is 2.96x
  the eager softmax gradient (median of 7), on fp32 ones 0.36x (the eager one works in place on them, no copy); the
  whole fp32 loss at hidden 896 is a tie (1.02 s vs 1.03 s: the matmuls dominate there). Its GPU gain is for
  `loss_kernels`' probe to measure on each run's shape, as for the other kernels.
- Liger-Kernel and Cut-Cross-Entropy (Triton kernels for CUDA) are candidates where installed: `loss_kernels` times
  them against this loss on the run's shape and checks they agree with it before a run uses one (`kernel=`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from hf_encoderize.common.precision import compute_dtype

IGNORE = -100  # the label of a position with nothing to predict (cross_entropy's ignore_index); masking re-exports it
CHUNK_ELEMENTS = 2**26  # logits per fused chunk; see the module docstring
FALLBACK_CHUNK_ROWS = 4096  # rows per checkpointed chunk: few, large calls, since each one all-gathers under ZeRO-3


def labelled_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat int64 indices of the labelled positions of CPU `labels` (B, T), and their targets, computed on the host.

    Pin both and copy them with `non_blocking=True`; `mlm_loss` then gathers rows without a device sync.

    >>> labels = torch.tensor([[-100, 7, -100], [3, -100, 9]])
    >>> labelled_positions(labels)
    (tensor([1, 3, 5]), tensor([7, 3, 9]))
    """
    flat = labels.reshape(-1)
    index = (flat != IGNORE).nonzero().squeeze(1)  # (N,) int64
    return index, flat.index_select(0, index)


def mlm_loss(
    hidden: torch.Tensor,
    lm_head: torch.nn.Module,
    index: torch.Tensor,
    targets: torch.Tensor,
    *,
    with_accuracy: bool = False,
    chunk_rows: int | None = None,
    kernel=None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Summed cross-entropy of `lm_head` on the rows of `hidden` (B, T, H) at flat positions `index` (N,).

    `index` and `targets` (N,) live on hidden's device (`labelled_positions`, then a non-blocking copy). Returns the
    fp32 loss sum and, with `with_accuracy`, how many arg-max predictions are right (a 0-d long tensor), else None.
    `kernel`: another fused linear + cross-entropy with the same contract (`loss_kernels.loss_function`), used for a
    fusable head and at least one row; None for ours.
    """
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (N, H)
    if fusable_head(lm_head):
        if kernel is not None and rows.shape[0]:
            return kernel(rows, lm_head.weight, targets, lm_head.bias, with_accuracy)
        return fused_linear_cross_entropy(rows, lm_head.weight, targets, lm_head.bias, with_accuracy=with_accuracy,
                                          chunk_rows=chunk_rows)
    return checkpointed_cross_entropy(rows, lm_head, targets, with_accuracy=with_accuracy, chunk_rows=chunk_rows)


def fusable_head(lm_head: torch.nn.Module) -> bool:
    """Whether reading `lm_head.weight` directly computes what calling `lm_head` would."""
    if type(lm_head) is not torch.nn.Linear or lm_head._forward_hooks or lm_head._forward_pre_hooks:
        return False
    if "forward" in vars(lm_head):  # Accelerate's offload hooks replace the instance's forward
        return False
    weight = lm_head.weight
    # Exactly a tensor or parameter: not a DTensor shard (FSDP2, tensor parallel), not a quantised parameter class.
    plain = type(weight) in (torch.Tensor, torch.nn.Parameter) and weight.device.type != "meta"
    return plain and not hasattr(weight, "ds_id") and not hasattr(weight, "ds_shape")  # ZeRO-3 partition


def fused_linear_cross_entropy(
    hidden_rows: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    with_accuracy: bool = False,
    chunk_rows: int | None = None,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Summed cross-entropy of `hidden_rows @ weight.T + bias` (N, V) against `targets` (N,), never holding more
    than one chunk of logits. Returns the fp32 loss sum (0-d) and the right arg-max count (0-d long) or None.

    `targets` must be valid class ids (no -100): pass only labelled rows. Zero rows give a zero loss whose gradients
    are zero, so every process of a data-parallel run still reduces a gradient for the head. `compiled`: each
    chunk's softmax gradient through `torch.compile` (module docstring).
    """
    grad_on = torch.is_grad_enabled()
    needs = tuple(grad_on and t is not None and t.requires_grad for t in (hidden_rows, weight, bias))
    dtype = compute_dtype(hidden_rows)
    # Compiled on 16-bit logits: no fp32 copy of them, so twice the rows in the same memory (fp32 logits: the same).
    budget = CHUNK_ELEMENTS * (2 if compiled and dtype.itemsize == 2 else 1)
    rows = chunk_rows or max(1, budget // weight.shape[0])
    loss, correct = _FusedLinearCrossEntropy.apply(hidden_rows, weight, targets, bias, dtype, rows, with_accuracy,
                                                   needs, compiled)
    return loss, correct if with_accuracy else None


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_rows, weight, targets, bias, dtype, chunk_rows, with_accuracy, needs, compiled):
        # Autocast off: every cast here is explicit, so the fp32 parts stay fp32.
        with torch.autocast(hidden_rows.device.type, enabled=False):
            loss, correct, grads = _loss_and_grads(hidden_rows, weight, targets, bias, dtype, chunk_rows,
                                                   with_accuracy, needs, compiled)
        ctx.save_for_backward(*grads)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        # d(grad_loss * loss)/dx = grad_loss * dloss/dx: the gradients were computed in the forward. Scaled in place,
        # so grad_W is not held twice; a second backward through this graph (retain_graph) fails on autograd's
        # version check rather than scaling twice.
        grad_rows, grad_weight, grad_bias = (None if g is None else g.mul_(grad_loss) for g in ctx.saved_tensors)
        return grad_rows, grad_weight, None, grad_bias, None, None, None, None, None


def _loss_and_grads(hidden_rows, weight, targets, bias, dtype, chunk_rows, with_accuracy, needs, compiled):
    """The chunk loop: the fp32 loss sum, the right count, and (grad_hidden, grad_weight, grad_bias), each None
    when not needed, in its input's dtype."""
    need_rows, need_weight, need_bias = needs
    w = weight.to(dtype)  # (V, H), cast once per call rather than per chunk
    b = None if bias is None else bias.to(dtype)
    loss = torch.zeros((), dtype=torch.float32, device=hidden_rows.device)
    correct = torch.zeros((), dtype=torch.long, device=hidden_rows.device)
    grad_rows = torch.empty_like(hidden_rows) if need_rows else None  # (N, H)
    grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
    grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_bias else None
    for start in range(0, hidden_rows.shape[0], chunk_rows):
        h = hidden_rows[start : start + chunk_rows].to(dtype)  # (n, H)
        t = targets[start : start + chunk_rows]
        chunk_loss, chunk_correct, g = _chunk(h, w, b, t, with_accuracy, any(needs), compiled)
        loss += chunk_loss
        if with_accuracy:
            correct += chunk_correct
        if need_rows:
            grad_rows[start : start + chunk_rows] = g @ w  # (n, H)
        if need_weight:
            _accumulate(grad_w, g.T, h)  # (V, H)
        if need_bias:
            grad_b += g.sum(0, dtype=torch.float32)
    grads = (grad_rows, _as(grad_w, weight), _as(grad_b, bias))
    return loss, correct, grads


def _chunk(h, w, b, t, with_accuracy, need_grad, compiled=False):
    """One chunk's fp32 loss sum, right count (or None), and d(loss)/d(logits) (n, V) in the compute dtype."""
    logits = h @ w.T if b is None else torch.addmm(b, h, w.T)  # (n, V), compute dtype
    correct = (logits.argmax(-1) == t).sum() if with_accuracy else None
    if compiled and need_grad:
        loss, g = compiled_softmax_gradient()(logits, t)
        return loss, correct, g
    target_logit = logits.gather(1, t[:, None]).squeeze(1).float()  # (n,)
    z = logits.float()  # (n, V) fp32: a copy under bf16, the logits themselves (no copy) under fp32
    del logits
    # log-sum-exp by hand, in place: torch.logsumexp would allocate another (n, V) fp32 temporary.
    top = z.amax(-1, keepdim=True)  # (n, 1)
    total = z.sub_(top).exp_().sum(-1, keepdim=True)  # z is now exp(logits - top)
    loss = (total.log() + top).squeeze(1).sub(target_logit).sum()
    if not need_grad:
        return loss, correct, None
    z.div_(total)  # softmax
    z.scatter_add_(1, t[:, None], torch.full_like(t[:, None], -1, dtype=z.dtype))  # - one-hot
    return loss, correct, z.to(h.dtype)


def softmax_gradient(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 cross-entropy sum of `logits` (n, V) against `targets` (n,), and its gradient softmax - one-hot in the
    logits' dtype: what `_chunk` computes pass by pass, written as one expression for `torch.compile` to fuse.

    >>> loss, grad = softmax_gradient(torch.tensor([[0.0, 0.0]]), torch.tensor([1]))
    >>> round(float(loss), 4), grad.tolist()
    (0.6931, [[0.5, -0.5]])
    """
    z = logits.float()
    top = z.amax(-1, keepdim=True)  # (n, 1)
    exp = (z - top).exp()
    total = exp.sum(-1, keepdim=True)
    loss = (total.log() + top - z.gather(1, targets[:, None])).sum()
    probs = exp / total
    columns = torch.arange(z.shape[-1], device=z.device)
    return loss, torch.where(columns == targets[:, None], probs - 1, probs).to(logits.dtype)


@functools.cache
def compiled_softmax_gradient():
    """`softmax_gradient` under `torch.compile`, built once per process. dynamic=None: the first chunk size compiles
    static, and the last chunk of a step (its size changes with the masked count) makes the rows dynamic once."""
    return torch.compile(softmax_gradient, dynamic=None)


def _accumulate(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc += a @ b, with acc fp32: in place when the operands are fp32 too."""
    if a.dtype == acc.dtype:
        acc.addmm_(a, b)
    else:
        acc += a @ b  # a low-precision product per chunk, summed across chunks in fp32


def _as(grad: torch.Tensor | None, like: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None else grad.to(like.dtype)


def checkpointed_cross_entropy(
    rows: torch.Tensor,
    lm_head: torch.nn.Module,
    targets: torch.Tensor,
    *,
    with_accuracy: bool = False,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The fallback for heads `fusable_head` refuses: calls `lm_head` on `rows` (N, H), `chunk_rows` at a time,
    each chunk checkpointed so its logits are recomputed in the backward rather than kept. Same returns as
    `fused_linear_cross_entropy`."""
    chunk_rows = chunk_rows or FALLBACK_CHUNK_ROWS
    correct = torch.zeros((), dtype=torch.long, device=rows.device)
    if rows.shape[0] == 0:
        # Still call the head once: its parameters get a zero gradient, and ZeRO-3's gather runs on every process.
        return lm_head(rows).float().sum(), correct if with_accuracy else None
    total = torch.zeros((), dtype=torch.float32, device=rows.device)
    for start in range(0, rows.shape[0], chunk_rows):
        chunk, chunk_targets = rows[start : start + chunk_rows], targets[start : start + chunk_rows]
        chunk_loss, chunk_correct = checkpoint(_checkpointed_chunk, chunk, chunk_targets, lm_head, with_accuracy,
                                               use_reentrant=False)
        total = total + chunk_loss
        if with_accuracy:
            correct = correct + chunk_correct
    return total, correct if with_accuracy else None


def _checkpointed_chunk(rows: torch.Tensor, targets: torch.Tensor, lm_head: torch.nn.Module, with_accuracy: bool):
    logits = lm_head(rows).float()  # (chunk, V), in fp32 for a stable softmax
    correct = None
    if with_accuracy:
        with torch.no_grad():
            correct = (logits.argmax(-1) == targets).sum()
    return F.cross_entropy(logits, targets, reduction="sum"), correct
