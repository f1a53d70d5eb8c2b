"""The fused linear + cross-entropy (`loss.fused_linear_cross_entropy`) and its fallback equal the dense loss.

The reference is what plain code does: full logits for the masked rows, fp32 cross-entropy, autograd for the grads.
"""

import pytest
import torch
import torch.nn.functional as F

from hf_encoderize.objectives.loss import (
    IGNORE,
    checkpointed_cross_entropy,
    fusable_head,
    fused_linear_cross_entropy,
    labelled_positions,
    mlm_loss,
)

VOCAB, HIDDEN = 32768, 16


def _batch(seed=0, empty_rows=(1,), vocab=VOCAB, bias=True):
    """hidden (3, 9, H) leaf, a Linear head, and labels with ~40% masked; rows in `empty_rows` have no label."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 9, HIDDEN, generator=generator).requires_grad_()
    head = torch.nn.Linear(HIDDEN, vocab, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, HIDDEN, generator=generator) * 0.5)
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=generator) * 0.1)
    labels = torch.randint(vocab, (3, 9), generator=generator)
    labels[torch.rand(3, 9, generator=generator) >= 0.4] = IGNORE
    labels[list(empty_rows)] = IGNORE
    return hidden, head, labels


def _dense(hidden, head, labels):
    mask = labels != IGNORE
    logits = head(hidden).float()[mask]
    return F.cross_entropy(logits, labels[mask], reduction="sum"), (logits.argmax(-1) == labels[mask]).sum()


def _ours(hidden, head, labels, **kwargs):
    index, targets = labelled_positions(labels)
    return mlm_loss(hidden, head, index, targets, **kwargs)


def _grads(loss, hidden, head):
    params = [hidden] + [p for p in head.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True)


def _close(got, want):
    """Tight, relative to the tensor's magnitude: fp32 sums over 32k classes round differently in another order."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.detach().abs().max().clamp(min=1)))


@pytest.mark.parametrize("empty_rows", [(1,), (0, 1, 2)])
def test_fused_equals_dense_with_gradients(empty_rows):
    hidden, head, labels = _batch(empty_rows=empty_rows)
    assert fusable_head(head)
    want, _ = _dense(hidden, head, labels)
    got, _ = _ours(hidden, head, labels)
    _close(got, want)
    for g, w in zip(_grads(got, hidden, head), _grads(want, hidden, head), strict=True):
        _close(g, w)
    if len(empty_rows) == 3:  # nothing masked: zero loss, zero (not missing) gradients
        assert float(got.detach()) == 0.0
        assert all(float(g.abs().max()) == 0.0 for g in _grads(_ours(hidden, head, labels)[0], hidden, head))


def test_several_chunks_equal_one_chunk():
    hidden, head, labels = _batch()
    one, _ = _ours(hidden, head, labels, with_accuracy=True, chunk_rows=10_000)
    many, _ = _ours(hidden, head, labels, with_accuracy=True, chunk_rows=3)
    _close(many, one)
    for g, w in zip(_grads(many, hidden, head), _grads(one, hidden, head), strict=True):
        _close(g, w)


def test_scaled_backward_accumulates_like_gradient_accumulation():
    hidden, head, labels = _batch()
    dense_head = _clone(head)
    dense_hidden = hidden.detach().clone().requires_grad_()
    for scale in (0.25, 3.0):  # two micro-batches, each loss scaled before backward, grads add up in .grad
        (_ours(hidden, head, labels)[0] * scale).backward()
        (_dense(dense_hidden, dense_head, labels)[0] * scale).backward()
    _close(hidden.grad, dense_hidden.grad)
    _close(head.weight.grad, dense_head.weight.grad)
    _close(head.bias.grad, dense_head.bias.grad)


def _clone(head):
    twin = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
    twin.load_state_dict(head.state_dict())
    return twin


@pytest.mark.parametrize("path", ["fused", "fallback"])
def test_tied_weights_add_both_gradients(path):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(VOCAB, (2, 8), generator=generator)
    labels = torch.where(torch.rand(2, 8, generator=generator) < 0.4, ids, IGNORE)
    grads = []
    for loss_fn in (_dense, _ours):
        torch.manual_seed(0)
        embed = torch.nn.Embedding(VOCAB, HIDDEN)
        head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        head.weight = embed.weight  # tied, as in most small decoders
        hidden = torch.tanh(embed(ids))  # (2, 8, H): the embedding's own gradient flows through here
        wrapped = head if path == "fused" or loss_fn is _dense else torch.nn.Sequential(head)
        loss_fn(hidden, wrapped, labels)[0].backward()
        grads.append(embed.weight.grad)
    _close(grads[1], grads[0])


def test_frozen_head_gets_no_gradient():
    hidden, head, labels = _batch()
    head.requires_grad_(False)
    want = torch.autograd.grad(_dense(hidden, head, labels)[0], hidden)[0]
    loss, _ = _ours(hidden, head, labels)
    loss.backward()
    _close(hidden.grad, want)
    assert head.weight.grad is None and head.bias.grad is None


def test_bf16_autocast_is_close_and_gives_fp32_gradients():
    hidden, head, labels = _batch(vocab=4096)
    want, _ = _dense(hidden, head, labels)
    want_grads = _grads(want, hidden, head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = _ours(hidden, head, labels)
    got_grads = _grads(got, hidden, head)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=0)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert g.dtype == torch.float32  # fp32 parameter and input: fp32 gradient, as autograd under autocast
        assert float((g - w).norm() / w.norm()) < 3e-2


def test_accuracy_counts_arg_max_hits_only_on_request():
    hidden, head, labels = _batch()
    index, targets = labelled_positions(labels)
    with torch.no_grad():
        head.weight[targets[::2]] += 20 * hidden.reshape(-1, HIDDEN)[index[::2]]  # make about half of them right
        _, want = _dense(hidden, head, labels)
    assert 0 < int(want) < len(targets)
    for path in (head, torch.nn.Sequential(head)):
        loss, correct = _ours(hidden, path, labels, with_accuracy=True, chunk_rows=4)
        assert correct.dtype == torch.long and int(correct) == int(want)
        assert _ours(hidden, path, labels)[1] is None


@pytest.mark.parametrize("empty_rows", [(1,), (0, 1, 2)])
def test_fallback_for_other_heads_gives_the_same_numbers(empty_rows):
    hidden, head, labels = _batch(empty_rows=empty_rows)
    wrapped = torch.nn.Sequential(head)
    assert not fusable_head(wrapped)
    want, _ = _dense(hidden, head, labels)
    got, _ = _ours(hidden, wrapped, labels, chunk_rows=4)
    _close(got, want)
    for g, w in zip(_grads(got, hidden, head), _grads(want, hidden, head), strict=True):
        _close(g, w)


def test_heads_with_hooks_or_sharded_weights_fall_back():
    head = torch.nn.Linear(4, 8)
    head.weight.ds_id = 0  # what a DeepSpeed ZeRO-3 partitioned parameter carries
    assert not fusable_head(head)
    hooked = torch.nn.Linear(4, 8)
    hooked.register_forward_pre_hook(lambda module, args: None)
    assert not fusable_head(hooked)


def test_direct_calls_agree():
    hidden, head, labels = _batch(vocab=512)
    index, targets = labelled_positions(labels)
    rows = hidden.reshape(-1, HIDDEN)[index]
    fused, fused_correct = fused_linear_cross_entropy(rows, head.weight, targets, head.bias, with_accuracy=True)
    chunked, chunked_correct = checkpointed_cross_entropy(rows, head, targets, with_accuracy=True, chunk_rows=5)
    _close(fused, chunked)
    assert int(fused_correct) == int(chunked_correct)
    with torch.no_grad():  # evaluation: the loss only, no gradient work
        _close(fused_linear_cross_entropy(rows, head.weight, targets, head.bias)[0], fused.detach())


@pytest.mark.parametrize("empty_rows", [(1,), (0, 1, 2)])
def test_compiled_softmax_gradient_equals_dense_with_gradients(empty_rows):
    """`--loss-implementation compiled`: each chunk's softmax gradient under torch.compile, over chunks of unequal size
    (4 rows, the last shorter: the rows turn dynamic) and with a bias, equals the dense loss, accuracy and gradients."""
    hidden, head, labels = _batch(empty_rows=empty_rows)
    want, want_right = _dense(hidden, head, labels)
    index, targets = labelled_positions(labels)
    rows = hidden.reshape(-1, HIDDEN).index_select(0, index)
    got, right = fused_linear_cross_entropy(rows, head.weight, targets, head.bias, with_accuracy=True, chunk_rows=4,
                                            compiled=True)
    _close(got, want)
    assert int(right) == int(want_right)
    for g, w in zip(_grads(got, hidden, head), _grads(want, hidden, head), strict=True):
        _close(g, w)


@pytest.mark.slow  # a second compilation (bf16), ~5 s
def test_compiled_softmax_gradient_under_bf16_autocast_matches_ours():
    hidden, head, labels = _batch(vocab=4096)
    index, targets = labelled_positions(labels)

    def loss(compiled):  # each its own graph from `hidden`, so each can be differentiated once
        rows = hidden.reshape(-1, HIDDEN).index_select(0, index)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fused_linear_cross_entropy(rows, head.weight, targets, head.bias, compiled=compiled)[0]

    want, got = loss(False), loss(True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-3, atol=0)
    for g, w in zip(_grads(got, hidden, head), _grads(want, hidden, head), strict=True):
        assert g.dtype == torch.float32 and float((g - w).norm() / w.norm()) < 1e-2
