"""The contrastive stage's loss and its two opt-in additions: hard negatives mined with the model, Matryoshka sizes.

Design choices:
- Mining is sentence-transformers' `mine_hard_negatives`, run with the model about to be trained (the positives of the
  other pairs are the corpus). Candidates scoring above 95% of the pair's own positive are dropped as likely false
  negatives: the "TopK-PercPos" filter NV-Retriever found best (Moreira et al., 2024, section 4), which
  sentence-transformers exposes as `relative_margin=0.05`. The K negatives become columns negative_1..negative_K
  (n-tuple rows), so every anchor keeps one row and in-batch negatives stay duplicate-free.
- Batches hold no text twice (sentence-transformers' no-duplicates sampler: a repeat would be a false negative), so
  data with fewer distinct texts than a batch trains no step at all; `check_distinct` refuses it before the load.
- SimCSE without dropout trains two identical views of every text: `warn_without_dropout` says so in one line (a
  warning, not a refusal: the other texts of a batch still teach the model, and `--dropout 0` is a valid setting).
- Matryoshka is sentence-transformers' `MatryoshkaLoss` around the stage's loss: the same loss on the embeddings
  truncated to each dimension, weighted equally (Kusupati et al., 2022). Dimensions above the model's width are
  refused once the model is loaded, before any output is written.
"""

from __future__ import annotations

import sys

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process, world_size
from hf_encoderize.common.validation import parse_dims
from hf_encoderize.recipes.contrastive.rows import check_distinct

RELATIVE_MARGIN = 0.05  # NV-Retriever's TopK-PercPos: a negative must score below 95% of the positive

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
        # Measured (benchmarks/contrastive_extras_quality.py): straight from an MLM encoder, whose raw embeddings score
        # every passage close to the positive, no pair of 4,000 kept a negative; from a supervised model, 2,157 did.
        raise EncoderizeError(f"--hard-negatives {config.hard_negatives}: only {len(mined)} pair(s) have that many "
                              "negatives below 95% of their positive's score; a model that does not embed yet (an MLM "
                              "encoder) scores every text near the positive: train a stage without --hard-negatives "
                              "first, then mine with its output (contrastive OUT/contrastive --hard-negatives K ...)")
    if len(mined) < len(rows) and is_main_process():
        print(f"warning: --hard-negatives {config.hard_negatives}: {len(mined)} of {len(rows)} pairs have that many "
              "negatives below 95% of their positive's score; only those are trained on", file=sys.stderr, flush=True)
    # The negatives are other rows' positives: rows sharing one can fill no batch (rc 0, "steps: 0" before).
    check_distinct(mined, config, after=f"after mining --hard-negatives {config.hard_negatives}, ")
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
    if dims[0] < width:  # the saved model embeds at full width by default: that size must be trained too
        raise EncoderizeError(f"--matryoshka-dims {','.join(map(str, dims))} leaves out the model's full embedding "
                              f"width {width}, which the saved model embeds at by default; pass "
                              f"{','.join(map(str, [width, *dims]))}")
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

    return MatryoshkaLoss(model, loss, matryoshka_dims=dims)
