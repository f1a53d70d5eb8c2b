"""The model card's "What was done" table, and the number formats every card table uses.

Each row is computed from the run's files (`run_record.json`, the `hf_encoderize` block of config.json,
`contrastive_run.json`); `card` lays them out through its template.
"""

from __future__ import annotations

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish.card_facts import CardFacts


def done_rows(facts: CardFacts) -> list[tuple[str, str]]:
    """The "what was done" table, in numbers: base model, patch, tokens, then the training run where there was one."""
    enc, tokens = facts.encoderize, facts.encoderize.get("tokens") or {}
    base = f"[{facts.base_model_id}](https://huggingface.co/{facts.base_model_id})" if facts.base_model_id \
        else f"`{facts.base_model}`"
    if facts.pretrained:
        run = facts.run
        rows = [("Base model", f"none: pretrained from random weights (model config `{run.get('model_config')}`, "
                               f"tokenizer `{run.get('tokenizer')}`)")]
    else:
        rows = [("Base model", base + (f" at revision `{facts.base_revision}`" if facts.base_revision else "")
                 + (f", GGUF file `{facts.gguf_file}` (de-quantised)" if facts.gguf_file else ""))]
    rows.append(("Parameters", f"{thousands(facts.num_parameters)} ({facts.model_type}, "
                               f"hidden size {facts.hidden_size})"))
    if facts.pretrained:
        switch = facts.run.get("switch_step")
        rows.append(("Attention", "bidirectional from the first step (MLM only)" if facts.run.get("objective") == "mlm"
                     else f"causal during CLM, switched to bidirectional at step {thousands(switch)} "
                          f"({enc.get('modules_patched', 0)} attention modules patched, checked by the probe)"
                     if switch is not None else "causal throughout training (CLM only), made bidirectional for "
                     "the saved encoder"))
    elif facts.native_encoder:
        rows.append(("Attention", "already bidirectional (a native encoder): no patch"))
    else:
        rows.append(("Attention patch", f"causal mask removed under `{enc.get('attn_implementation')}`: config "
                     f"`is_causal=False`, {enc.get('modules_patched', 0)} attention modules patched, "
                     f"{enc.get('causal_buffers_replaced', 0)} hard-coded causal buffers replaced"))
    plain = plain_loading(enc.get("plain_attention") or {})
    if plain:
        rows.append(("Plain transformers", plain))
    mask = enc.get("mask_token") or tokens.get("mask_token")
    rows.append(("Mask token", f"`{mask}` ({enc.get('mask_token_path') or tokens.get('mask_token_path')})"))
    rows += (_training_rows(facts.run) if facts.run else
             [("Training", "none: converted with `hf-encoderize convert` (weights as in the base model)")])
    return rows + ([("Contrastive stage", contrastive_text(facts.contrastive))] if facts.contrastive else [])


def contrastive_text(record: dict) -> str:
    """The second stage in one cell, from `contrastive_run.json`."""
    stage, config = record.get("stage") or {}, record.get("config") or {}
    source = config.get("data_files") or config.get("dataset") or "?"
    dropout = max((stage.get("training_dropout") or {}).values(), default=0)
    how = (f"SimCSE (unsupervised: each text twice, dropout {dropout} making the two views)"
           if stage.get("objective") == "simcse" else "supervised pairs (in-batch and given hard negatives)")
    return (f"{how}; `{stage.get('loss')}` loss with scale {stage.get('scale')}, `{stage.get('pooling')}` pooling, "
            f"{thousands(stage.get('steps'))} steps at batch {stage.get('batch_size')}, "
            f"lr {stage.get('learning_rate')}, on {thousands(stage.get('rows'))} rows of `{source}`; "
            f"final loss {score(stage.get('final_loss'))}")


def plain_loading(verdicts: dict) -> str | None:
    """What a user with plain transformers gets (`roundtrip.plain_attention`, recorded by `save_encoder`)."""
    causal = [b for b, verdict in verdicts.items() if verdict is False]
    default, version = verdicts.get("saved_default"), verdicts.get("transformers")
    verified = f" (verified with transformers {version})" if version else ""
    if not causal:
        bidirectional = ", ".join(f"`{b}`" for b, verdict in verdicts.items() if verdict is True)
        if not version or not bidirectional:
            return None
        chosen = f"config.json selects `{default}`; " if default else ""
        return f"{chosen}bidirectional under {bidirectional}{verified}"
    named = ", ".join(f"`{b}`" for b in causal)
    remote = ("`AutoModel` / `AutoModelForMaskedLM.from_pretrained(..., trust_remote_code=True)` load the shipped "
              "patch, bidirectional under every backend")
    if default and verdicts.get(default) is True:
        return (f"config.json selects `{default}`, so `AutoModel.from_pretrained(...)` is bidirectional; named "
                f"explicitly, {named} (and flash attention) stay causal in this architecture's transformers code; "
                f"{remote}{verified}")
    return (f"a plain `AutoModel` stays causal ({named}: causal in this architecture's transformers code); {remote}"
            f"{verified}")


def _training_rows(run: dict) -> list[tuple[str, str]]:
    data, lora, hardware = run.get("data") or {}, run.get("lora"), run.get("hardware") or {}
    source = data.get("data_files") or " ".join(filter(None, [data.get("dataset"), data.get("dataset_config")]))
    objective = {"mlm": "MLM", "mntp": "MNTP (masked next-token prediction, LLM2Vec)"}.get(run.get("objective")) \
        or _phases_text(run)
    replacement = "BERT 80/10/10" if run.get("replacement") == "bert" else "every masked token becomes the mask token"
    adapters = "none (all weights trained)" if not lora else \
        f"LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, targets {lora.get('targets')}, merged into the weights"
    processes = run.get("num_processes") or hardware.get("num_processes") or 1
    accuracy = run.get("eval_masked_accuracy")
    return [
        ("Objective", f"{objective}, mask ratio {run.get('mask_ratio', 0):.0%}, {replacement}"),
        ("Data", f"`{source}`, rows of {data.get('seq_len')} tokens, {'packed' if data.get('pack') else 'padded'}"),
        ("Steps", f"{thousands(run.get('steps'))} optimizer steps, {thousands(run.get('tokens_seen'))} tokens seen"),
        ("Schedule", f"{(run.get('schedule') or 'wsd').upper()}: peak lr {run.get('lr', 0):.1e}, "
                     f"{thousands(run.get('warmup_steps'))} warmup steps, "
                     f"linear decay over the final {_decay(run)}"),
        ("Optimizer", f"AdamW, betas {tuple(run.get('betas') or (0.9, 0.95))}, eps "
                      + (f"{run['adam_eps']:.0e}" if "adam_eps" in run else "1e-08 (torch's default: recorded before "
                         "--adam-eps existed)")
                      + f", weight decay {run.get('weight_decay')}, gradient clipping {run.get('max_grad_norm')}"),
        ("Batch", f"{run.get('batch_size')} rows x {run.get('grad_accum')} accumulation x {processes} process(es)"),
        ("Adapters", adapters + (" on a 4-bit NF4 base (QLoRA)" if run.get("load_in_4bit") else "")),
        ("Hardware", f"{hardware.get('gpu_name') or hardware.get('device', '?')}, {processes} process(es), mixed "
                     f"precision {hardware.get('mixed_precision')}; torch {hardware.get('torch')}, "
                     f"transformers {hardware.get('transformers')}"),
        ("Wall time", f"{duration(run.get('wall_time_s'))} ({run.get('started_at')} to {run.get('finished_at')})"),
        ("Final training loss", score(run.get("final_train_loss"))),
        ("Held-out MLM loss / masked-token accuracy", f"{score(run.get('eval_loss'))} / "
         + ("n/a" if accuracy is None else f"{accuracy:.1%}")),
    ]


def _phases_text(run: dict) -> str:
    """A pretrain run's schedule in words, e.g. "CLM for steps 0-750, then MLM for steps 750-1,000" (from
    `run_record.json`'s `phases`, the schedule string `clm:0.75,mlm:0.25`); the raw objective string otherwise."""
    schedule, steps = run.get("phases"), run.get("steps")
    if not isinstance(schedule, str) or not isinstance(steps, int):
        return str(run.get("objective") or "unknown")
    from hf_encoderize.objectives.phases import parse_schedule

    try:
        phases = parse_schedule(schedule, steps)
    except EncoderizeError:
        return schedule
    return ", then ".join(f"{p.objective.upper()} for steps {thousands(p.start)}-{thousands(p.end)}" for p in phases)


def score(value, ci=None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} ± {ci:.2f}" if ci is not None else f"{value:.2f}"


def signed(value) -> str:
    return "" if value is None else f"{value:+.2f}"


def thousands(value) -> str:
    return "n/a" if value is None else f"{int(value):,}"


def duration(seconds) -> str:
    if seconds is None:
        return "n/a"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _decay(run: dict) -> str:
    if run.get("decay_steps") is not None:
        return f"{thousands(run['decay_steps'])} steps"
    return f"{run.get('decay_fraction', 0):.0%} of steps"  # runs recorded before decay_steps existed
