"""Mask and pad tokens: existing, reserved, or added with a sensible embedding row."""

import torch
from conftest import make_decoder, make_tokenizer

from hf_encoderize.model.tokens import ensure_special_tokens


def test_added_mask_token_grows_embeddings_with_mean_row():
    model, tokenizer = make_decoder(), make_tokenizer()
    old = model.get_input_embeddings().weight.detach().clone()
    report = ensure_special_tokens(model, tokenizer)
    assert report.mask_token_path == "added" and report.mask_token == "<mask>"
    assert report.pad_token_path == "eos" and report.pad_token_id == tokenizer.eos_token_id
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == len(tokenizer) == old.shape[0] + 1
    new_row = weight[report.mask_token_id].detach()
    # mean-resizing samples around the mean of the old rows: much closer to it than a typical row is
    assert (new_row - old.mean(0)).norm() < (old - old.mean(0)).norm(dim=1).mean()


def test_untied_head_grows_too():
    model, tokenizer = make_decoder(tie_word_embeddings=False), make_tokenizer()
    ensure_special_tokens(model, tokenizer)
    assert model.get_output_embeddings().weight.shape[0] == len(tokenizer)
    assert model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_reserved_token_is_reused_without_resizing():
    model, tokenizer = make_decoder(vocab_size=130), make_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|reserved_special_token_0|>",
                                                                "<|reserved_special_token_1|>"]})
    rows = model.get_input_embeddings().weight.shape[0]
    report = ensure_special_tokens(model, tokenizer)
    assert report.mask_token_path == "reserved" and report.mask_token == "<|reserved_special_token_0|>"
    assert report.pad_token_path == "reserved" and report.pad_token == "<|reserved_special_token_1|>"
    assert model.get_input_embeddings().weight.shape[0] == rows


def test_existing_mask_token_is_kept():
    model, tokenizer = make_decoder(), make_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "w7", "pad_token": "w8"})
    report = ensure_special_tokens(model, tokenizer)
    assert (report.mask_token_path, report.pad_token_path) == ("existing", "existing")
    assert torch.equal(torch.tensor(report.mask_token_id), torch.tensor(7))
