"""The position limit: how many tokens a model takes, and the one check that a sequence length fits it.

Design choices:
- One reader for every command (cpt, pretrain, contrastive): the text config's `max_position_embeddings`, else the
  older names `n_positions` (GPT-2) and `max_seq_len`; a multimodal config's `text_config` is what the text goes
  through. A config dict (a folder's config.json, read before any weight loads) is read the same way.
- Longer inputs than a model has positions for fail deep in the forward pass (an index error in the position
  embedding, or RoPE past its cache), so the check runs before the load, in one wording.
"""

from __future__ import annotations

from hf_encoderize.common.errors import EncoderizeError

POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len")


def position_limit(config) -> int | None:
    """The most positions `config` (a transformers config or a config.json dict) takes; None when it does not say.

    >>> position_limit({"max_position_embeddings": 2048}), position_limit({"text_config": {"n_positions": 1024}})
    (2048, 1024)
    >>> position_limit({"hidden_size": 64}) is None
    True
    """
    if isinstance(config, dict):
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        values = [text.get(name) for name in POSITION_FIELDS]
    else:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        values = [getattr(text, name, None) for name in POSITION_FIELDS]
    return next((value for value in values if isinstance(value, int) and not isinstance(value, bool)), None)


def check_positions(seq_len: int, limit: int | None, flag: str = "--max-seq-length") -> None:
    """Refuse `seq_len` above `limit` (None: nothing to check) in one line that names the value to pass.

    >>> check_positions(128, 64)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    hf_encoderize.common.errors.EncoderizeError: --max-seq-length 128 is above the model's limit of 64 positions; ...
    """
    if limit is not None and seq_len > limit:
        raise EncoderizeError(f"{flag} {seq_len} is above the model's limit of {limit} positions; pass {flag} {limit} "
                              "or less")
