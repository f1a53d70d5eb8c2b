"""Document isolation for packed rows."""

import torch
from conftest import make_decoder

from hf_encoderize.bidirectional import encoderize
from hf_encoderize.isolation import (
    cu_seqlens_from_document_ids,
    document_ids_from_lengths,
    packed_forward,
    position_ids_from_document_ids,
)


def test_positions_restart_at_every_document():
    ids = document_ids_from_lengths([[3, 2], [4]], 6)
    assert ids.tolist() == [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, -1, -1]]
    assert position_ids_from_document_ids(ids).tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    cu, longest = cu_seqlens_from_document_ids(ids)
    assert cu.tolist() == [0, 3, 5, 6, 10, 12] and longest == 4 and cu.dtype == torch.int32


def _packed_vs_alone(model):
    a, b = torch.randint(0, 100, (1, 5)), torch.randint(0, 100, (1, 4))
    row = torch.cat([a, b, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    with torch.no_grad():
        packed = packed_forward(model.model, row, document_ids_from_lengths([[5, 4]], 11)).last_hidden_state
        alone_a = model.model(input_ids=a).last_hidden_state
        alone_b = model.model(input_ids=b).last_hidden_state
    return (packed[:, :5] - alone_a).abs().max(), (packed[:, 5:9] - alone_b).abs().max()


def test_packed_documents_do_not_see_each_other():
    for backend in ("eager", "sdpa", "flex_attention"):
        model = make_decoder("llama", backend)
        encoderize(model)
        diff_a, diff_b = _packed_vs_alone(model)
        assert diff_a < 1e-4 and diff_b < 1e-4, backend


def test_without_isolation_documents_leak():
    # The control: the same packed row run with restarting positions but no isolation leaks across documents.
    model = make_decoder("llama", "sdpa")
    encoderize(model)
    a, b = torch.randint(0, 100, (1, 5)), torch.randint(0, 100, (1, 4))
    row = torch.cat([a, b], dim=1)
    positions = position_ids_from_document_ids(document_ids_from_lengths([[5, 4]], 9))
    with torch.no_grad():
        leaky = model.model(input_ids=row, position_ids=positions).last_hidden_state
        alone_a = model.model(input_ids=a).last_hidden_state
    assert (leaky[:, :5] - alone_a).abs().max() > 1e-3


def test_isolation_is_a_pass_through_outside_packing(decoder):
    encoderize(decoder)
    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        plain = decoder.model(input_ids=ids).last_hidden_state
        packed = packed_forward(decoder.model, ids, torch.zeros(2, 7, dtype=torch.long)).last_hidden_state
    torch.testing.assert_close(plain, packed, atol=1e-5, rtol=1e-5)
