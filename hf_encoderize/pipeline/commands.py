"""The training and evaluation commands with their `--push-to-hub`: the stage, then the push it asks for.

The push is checked (offline mode, token) before any training, so a run never ends unable to push. They live here,
above the recipes and the Hub transport, so that `publish.hub` depends on neither training nor evaluation.
"""

from __future__ import annotations

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.log import get_logger
from hf_encoderize.evaluation import evaluate
from hf_encoderize.publish.hub import HubConfig, check_push_ready, eval_push_target, push_eval, push_run
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.recipes.pretrain import pretrain

log = get_logger(__name__)


def cpt_and_push(load, data, masking, train, adapter, hub: HubConfig) -> dict:
    """`hf-encoderize cpt`: `cpt.cpt(load, data, masking, train, adapter)`, then the push `hub` asks for. The push is
    checked (offline mode, token) before training starts. Returns cpt's summary."""
    check_push_ready(hub)
    summary = cpt(load, data, masking, train, adapter)
    push_run(summary["output_dir"], hub)
    return summary


def pretrain_and_push(spec, data, masking, train, hub: HubConfig) -> dict:
    """`hf-encoderize pretrain`: `pretrain.pretrain(spec, data, masking, train)`, then the push `hub` asks for. The
    push is checked (offline mode, token) before training starts. Returns pretrain's summary."""
    check_push_ready(hub)
    summary = pretrain(spec, data, masking, train)
    push_run(summary["output_dir"], hub)
    return summary


def evaluate_and_push(load, config, hub: HubConfig) -> dict:
    """`hf-encoderize eval`: `evaluation.evaluate(load, config)`, then the push `hub` asks for: the evaluated encoder
    with these results on its card. The push is checked, and MODEL must be a local encoder folder, before any
    fine-tuning. Returns the evaluation summary."""
    if config.mteb and hub.push_to_hub:
        raise EncoderizeError("eval --mteb does not push; run it without --push-to-hub (the card carries the "
                              "fine-tuning suite's scores, not MTEB's)")
    check_push_ready(hub)
    config = config.placed(load.source)  # RUN/encoder: RUN/eval/encoder, where the card reads it
    target = eval_push_target(load.source) if hub.push_to_hub else None
    summary = evaluate(load, config)
    if target is not None:
        files = push_eval(target, f"{config.output_dir}/{summary['model_name']}", hub)
        log.info(f"pushed {len(files)} files to {hub.push_to_hub}")
    return summary
