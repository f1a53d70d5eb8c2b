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
from hf_encoderize.common.validation import check_number, parse_dims

RELATIVE_MARGIN = 0.05  # NV-Retriever's TopK-PercPos: a negative must score below 95% of the positive


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


def check_distinct(rows, config, after: str = "") -> None:
    """Refuse rows that cannot fill one batch without a repeated text: the sampler would yield no batch, and the run
    would train 0 steps. One greedy pass, stopped as soon as a batch fills. `after`: what made the rows (the line's
    opening words)."""
    needed = config.batch_size if len(rows) >= config.batch_size else 2  # fewer rows: one short batch (no drop_last)
    seen, fitting = set(), 0
    for row in rows:
        texts = set(row.values())
        if texts & seen:
            continue
        seen |= texts
        fitting += 1
        if fitting >= needed:
            return
    what = "distinct text(s)" if config.objective == "simcse" else "row(s) that share no text"
    advice = f"pass --batch-size {fitting} or less, or add texts" if fitting >= 2 else "add distinct texts"
    raise EncoderizeError(f"{after}the training data has {fitting} {what} for a batch of {config.batch_size} (a batch "
                          f"holds no text twice: a repeat would be a false negative), so no step would train; {advice}")


def warn_without_dropout(model, config) -> None:
    """One warning line when SimCSE trains with no dropout anywhere: its two views of each text are then identical."""
    import torch

    if config.objective != "simcse" or not is_main_process():
        return
    transformer = model[0].auto_model
    settings = transformer.config.to_dict()
    dropped = [name for name, value in settings.items() if ("dropout" in name or "pdrop" in name) and
               "classifier" not in name and isinstance(value, (int, float)) and value > 0]
    if dropped or any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in transformer.modules()):
        return
    advice = "pass --dropout 0.1 or more (LLM2Vec uses 0.3)" if config.dropout == 0 else \
        "this model's config has no dropout setting that --dropout turns on; train --objective supervised on pairs"
    print(f"warning: simcse trains with no dropout, so the two views of each text are identical and only the other "
          f"texts of the batch teach the model; {advice}", file=sys.stderr, flush=True)
