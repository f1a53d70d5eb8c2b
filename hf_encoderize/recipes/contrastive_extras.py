"""The contrastive stage's loss and its two opt-in additions: hard negatives mined with the model, Matryoshka sizes.

Design choices:
- Mining is sentence-transformers' `mine_hard_negatives`, run with the model about to be trained (the positives of the
  other pairs are the corpus). Candidates scoring above 95% of the pair's own positive are dropped as likely false
  negatives: the "TopK-PercPos" filter NV-Retriever found best (Moreira et al., 2024, section 4), which
  sentence-transformers exposes as `relative_margin=0.05`. The K negatives become columns negative_1..negative_K
  (n-tuple rows), so every anchor keeps one row and in-batch negatives stay duplicate-free.
- Matryoshka is sentence-transformers' `MatryoshkaLoss` around the stage's loss: the same loss on the embeddings
  truncated to each dimension, weighted equally (Kusupati et al., 2022). Dimensions above the model's width are
  refused once the model is loaded, before any output is written.
"""

from __future__ import annotations

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.validation import check_number

RELATIVE_MARGIN = 0.05  # NV-Retriever's TopK-PercPos: a negative must score below 95% of the positive


def parse_dims(text: str | None) -> list[int]:
    """'768,512,256' -> [768, 512, 256] (largest first); None -> []. A bad list is one line.

    >>> parse_dims("64, 256,128")
    [256, 128, 64]
    """
    if text is None:
        return []
    try:
        dims = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise EncoderizeError(f"--matryoshka-dims must be comma-separated whole numbers, e.g. 768,512,256 (got "
                              f"{text!r})") from None
    if not dims or min(dims) < 1 or len(set(dims)) != len(dims):
        raise EncoderizeError(f"--matryoshka-dims needs distinct sizes of at least 1, e.g. 768,512,256 (got {text!r})")
    return sorted(dims, reverse=True)


def check_extras(config) -> None:
    """`--hard-negatives` needs (anchor, positive) pairs and no negative column of the user's; the dims must parse."""
    parse_dims(config.matryoshka_dims)
    check_number("--hard-negatives", config.hard_negatives, minimum=0, integer=True)
    if config.hard_negatives and config.objective != "supervised":
        raise EncoderizeError("--hard-negatives mines negatives for (anchor, positive) pairs; add --objective "
                              "supervised and the pair columns")
    if config.hard_negatives and config.negative_column:
        raise EncoderizeError("--hard-negatives mines the negatives itself; drop --negative-column or --hard-negatives")


def mine_negatives(model, rows, config, prompts: dict):
    """Rows (anchor, positive) -> (anchor, positive, negative_1..negative_K), negatives mined with `model`."""
    if not config.hard_negatives:
        return rows
    from sentence_transformers.util import mine_hard_negatives

    mined = mine_hard_negatives(rows, model, anchor_column_name="anchor", positive_column_name="positive",
                                num_negatives=config.hard_negatives, relative_margin=RELATIVE_MARGIN,
                                sampling_strategy="top", output_format="n-tuple", batch_size=config.batch_size,
                                query_prompt=prompts.get("query"), corpus_prompt=prompts.get("document"),
                                verbose=False)
    if len(mined) < 2:
        raise EncoderizeError(f"--hard-negatives {config.hard_negatives}: only {len(mined)} pair(s) have that many "
                              "negatives below 95% of their positive's score; lower it or add pairs")
    return mined


def stage_loss(model, config):
    """The stage's InfoNCE loss (in-batch negatives, gathered across processes when asked), wrapped in `MatryoshkaLoss`
    when `--matryoshka-dims` is given."""
    from sentence_transformers import losses

    gather = config.cross_device_negatives and world_size() > 1  # one process: no gather
    if config.loss == "cached_mnrl":
        loss = losses.CachedMultipleNegativesRankingLoss(model, scale=config.scale,
                                                         mini_batch_size=config.mini_batch_size,
                                                         gather_across_devices=gather)
    else:
        loss = losses.MultipleNegativesRankingLoss(model, scale=config.scale, gather_across_devices=gather)
    return with_matryoshka(loss, model, config)


def with_matryoshka(loss, model, config):
    """`loss`, wrapped in `MatryoshkaLoss` when `--matryoshka-dims` is given."""
    dims = parse_dims(config.matryoshka_dims)
    if not dims:
        return loss
    width = model.get_sentence_embedding_dimension()
    if dims[0] > width:
        raise EncoderizeError(f"--matryoshka-dims {dims[0]} is above the model's embedding width {width}; give sizes "
                              f"up to {width}")
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

    return MatryoshkaLoss(model, loss, matryoshka_dims=dims)
