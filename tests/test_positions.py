"""One position-limit check (`model.positions`) for every command: cpt, pretrain and contrastive read the limit the
same way (max_position_embeddings, n_positions, max_seq_len, through a text_config) and refuse in one wording."""

import json

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model.positions import check_positions, position_limit
from hf_encoderize.recipes.contrastive.model import _check_positions

MESSAGE = "--max-seq-length 100 is above the model's limit of 64 positions; pass --max-seq-length 64 or less"


@pytest.mark.parametrize("config", [{"max_position_embeddings": 64}, {"n_positions": 64}, {"max_seq_len": 64},
                                    {"text_config": {"max_position_embeddings": 64}}])
def test_contrastive_reads_the_limit_as_cpt_and_pretrain_do(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))  # contrastive read max_position_embeddings only
    assert position_limit(config) == 64
    with pytest.raises(EncoderizeError) as refused:
        _check_positions(tmp_path, 100)
    assert str(refused.value) == MESSAGE
    assert _check_positions(tmp_path, None) == 64  # the default (128) capped at the model's positions


def test_one_wording_and_no_limit_means_no_check():
    with pytest.raises(EncoderizeError, match="pass --max-seq-length 64 or less"):
        check_positions(100, 64)
    check_positions(10**6, None)
