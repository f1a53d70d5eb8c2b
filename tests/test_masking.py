"""MLM/MNTP masking rates and the sparse chunked loss (groundwork for `cpt`)."""

import doctest

import pytest
import torch

import hf_encoderize.model.isolation
import hf_encoderize.objectives.masking
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.objectives.masking import IGNORE, MaskingConfig, mask_tokens, sparse_mlm_loss
from hf_encoderize.objectives.targets import MaskedNextToken, MaskTokens


def test_docstring_examples_run():
    for module in (hf_encoderize.objectives.masking, hf_encoderize.model.isolation):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize("ratio", [0.15, 0.4, 0.5])
def test_masking_rate_and_never_special(ratio):
    ids = torch.randint(10, 1000, (64, 256))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = False  # a BOS-like special token
    maskable[:, -20:] = False  # padding
    config = MaskingConfig(mask_ratio=ratio)
    masked, labels = mask_tokens(ids, maskable, mask_token_id=3, vocab_size=1000, config=config,
                                 generator=torch.Generator().manual_seed(0))
    chosen = labels != IGNORE
    assert abs(chosen[maskable].float().mean().item() - ratio) < 0.01
    assert not chosen[~maskable].any() and torch.equal(masked[~maskable], ids[~maskable])
    assert (masked[chosen] == 3).all() and torch.equal(labels[chosen], ids[chosen])


def test_bert_replacement_split():
    ids = torch.randint(10, 1000, (64, 512))
    masked, labels = mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), mask_token_id=3, vocab_size=1000,
                                 config=MaskingConfig(replacement="bert"), generator=torch.Generator().manual_seed(0))
    chosen = labels != IGNORE
    as_mask = (masked[chosen] == 3).float().mean().item()
    kept = (masked[chosen] == ids[chosen]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02  # (random may hit the same id: ~0.1%)


def test_mntp_shifts_labels_left():
    ids = torch.arange(10, 30).reshape(1, 20)
    config = MaskingConfig(mask_ratio=0.5, masking_target="mntp")
    _, labels = MaskedNextToken(config).mask_row(ids, torch.ones_like(ids, dtype=torch.bool), MaskTokens.of(
        mask_token_id=3, vocab_size=100, special_ids=[], seed=0), torch.Generator().manual_seed(1))
    _, plain = mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), mask_token_id=3, vocab_size=100,
                           config=MaskingConfig(mask_ratio=0.5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(labels[:, :-1], plain[:, 1:]) and labels[0, -1] == IGNORE


@pytest.mark.parametrize("ratio", [0, 1, 1.5, -0.1])
def test_impossible_ratio_is_refused(ratio):
    with pytest.raises(EncoderizeError, match="mlm-probability"):
        MaskingConfig(mask_ratio=ratio)


@pytest.mark.parametrize("chunk_size", [1, 7, 4096])
def test_sparse_loss_equals_dense(chunk_size):
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, 16, requires_grad=True)
    head = torch.nn.Linear(16, 50, bias=False)
    labels = torch.full((3, 11), IGNORE)
    labels[torch.rand(3, 11) < 0.4] = 7
    labels[0, 0] = 49
    dense = torch.nn.functional.cross_entropy(head(hidden).reshape(-1, 50), labels.reshape(-1), ignore_index=IGNORE)
    dense_grads = torch.autograd.grad(dense, [hidden, head.weight])
    sparse = sparse_mlm_loss(hidden, head, labels, chunk_size=chunk_size)
    sparse_grads = torch.autograd.grad(sparse, [hidden, head.weight])
    torch.testing.assert_close(sparse, dense)
    for got, want in zip(sparse_grads, dense_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_masked_accuracy_counts_only_labelled_positions():
    head = torch.nn.Linear(4, 3, bias=False)
    head.weight.data = torch.eye(3, 4)
    hidden = torch.tensor([[[5.0, 0, 0, 0], [0, 5.0, 0, 0], [0, 0, 5.0, 0]]])  # predicts 0, 1, 2
    labels = torch.tensor([[0, 2, IGNORE]])
    for chunk_size in (1, 2, 4096):
        _, correct = sparse_mlm_loss(hidden, head, labels, chunk_size=chunk_size, return_correct=True)
        assert int(correct) == 1  # position 0 right, position 1 wrong, position 2 unlabelled
