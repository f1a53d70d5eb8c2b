"""The model card's "What was done" table, and the number formats every card table uses.

Each row is computed from the run's files (`run_record.json`, the `hf_encoderize` block of config.json,
`contrastive_run.json`); `card` lays them out through its template.
"""

from __future__ import annotations

import os

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import parse_dims
from hf_encoderize.publish.card_facts import CardFacts
from hf_encoderize.records.contrastive_record import ContrastiveRecord, ContrastiveStage
from hf_encoderize.records.encoder_facts import PlainAttention
from hf_encoderize.records.learnt import learnt, recorded_sequence
from hf_encoderize.records.run_record import HardwareFacts, RunRecord, TokenFacts
from hf_encoderize.records.run_settings import DataFacts


def done_rows(facts: CardFacts) -> list[tuple[str, str]]:
    """The "what was done" table, in numbers: base model, patch, tokens, then the training run where there was one."""
    enc, tokens = facts.encoderize, facts.encoderize.tokens or TokenFacts()
    base = (f"[{facts.base_model_id}](https://huggingface.co/{facts.base_model_id})" if facts.base_model_id
        else f"`{facts.base_model}`")
    if facts.pretrained:
        run = facts.run
        rows = [("Base model", f"none: pretrained from random weights (model config `{run.model_config}`, "
                               f"tokenizer `{run.tokenizer}`)")]
    else:
        rows = [("Base model", base + (f" at revision `{facts.base_revision}`" if facts.base_revision else "")
                 + (f", GGUF file `{facts.gguf_file}` (de-quantised)" if facts.gguf_file else ""))]
    rows.append(("Parameters", f"{thousands(facts.num_parameters)} ({facts.model_type}, "
                               f"hidden size {facts.hidden_size})"))
    if facts.pretrained:
        switch, first = facts.run.switch_step, next(iter(recorded_sequence(facts.run.phases).phases), None)
        only = f"bidirectional from the first step ({first.card_label} only)" if first and first.bidirectional else None
        rows.append(("Attention", only if only
                     else f"causal during CLM, switched to bidirectional at step {thousands(switch)} "
                          f"({enc.modules_patched or 0} attention modules patched, checked by the probe)"
                     if switch is not None else "causal throughout training (CLM only), made bidirectional for "
                     "the saved encoder"))
    elif facts.native_encoder:
        rows.append(("Attention", "already bidirectional (a native encoder): no patch"))
    else:
        rows.append(("Attention patch", f"causal mask removed under `{enc.attn_implementation}`: config "
                     f"`is_causal=False`, {enc.modules_patched or 0} attention modules patched, "
                     f"{enc.causal_buffers_replaced or 0} hard-coded causal buffers replaced"))
    plain = plain_loading(facts.plain_attention or PlainAttention())
    if plain:
        rows.append(("Plain transformers", plain))
    rows.append(("Mask token", f"`{tokens.mask_token}` ({tokens.mask_token_path})"))
    rows += (_training_rows(facts.run) if facts.run else
             [("Training", "none: converted with `hf-encoderize convert` (weights as in the base model)")])
    return rows + ([("Contrastive stage", contrastive_text(facts.contrastive))] if facts.contrastive else [])


def contrastive_text(record: ContrastiveRecord) -> str:
    """The second stage in one cell, from `contrastive_run.json`."""
    stage, config = record.stage_facts(), record.source_facts()
    source = local_data(config.data_files, config.data_name) if config.data_files else f"`{config.dataset or '?'}`"
    dropout = max((stage.training_dropout or {}).values(), default=0)
    how = distilled_text(stage) if stage.teacher else learnt(stage.method).phrase  # the method that ran
    if dropout:
        how += f" at dropout {dropout}"
    return (f"{how}; {loss_text(stage)}, `{stage.pooling}` pooling, "
            f"{thousands(stage.steps)} steps at batch {stage.batch_size}, "
            f"lr {stage.learning_rate}, on {thousands(stage.rows)} rows of {source}; "
            f"final loss {loss_value(stage.final_loss)}")


def loss_text(stage: ContrastiveStage) -> str:
    """The loss in words, with its similarity scale only where a term uses one: MSE to a teacher has none.

    >>> loss_text(ContrastiveStage(loss="mse", scale=20.0)), loss_text(ContrastiveStage(loss="mnrl", scale=20.0))
    ('`mse` loss', '`mnrl` loss with scale 20.0')
    >>> loss_text(ContrastiveStage(loss="mse+mnrl", scale=20.0))
    '`mse+mnrl` loss (scale 20.0 in its in-batch term)'
    """
    terms = (stage.loss or "?").split("+")
    scaled = stage.scale is not None and any(term != "mse" for term in terms)
    if not scaled:
        return f"`{stage.loss}` loss"
    return f"`{stage.loss}` loss " + (f"(scale {stage.scale} in its in-batch term)" if "mse" in terms
                                      else f"with scale {stage.scale}")


def distilled_text(stage: ContrastiveStage) -> str:
    """What a distilled embedding model learned from: the teacher, its license, the projection."""
    projection, weight = stage.projection, stage.distill_contrastive_weight
    return (f"distilled from {stage.teacher_name} (`{stage.teacher}`, license "
            f"{stage.teacher_license or 'unknown'}): MSE to the teacher's embedding of each text"
            + edits_text(stage.distill_variants, stage.distill_variant_edits, "one-word")
            + edits_text(stage.distill_synonyms, stage.distill_synonym_edits, "near-synonym")
            + (f" plus {weight} x the in-batch contrastive loss" if weight else "")
            + (f", through a Dense projection {projection[0]} -> {projection[1]}" if projection else ""))


def edits_text(asked: int | None, made: int | None, kind: str) -> str:
    """The edits the teacher labelled too, as made (issue 68: the card claimed 3 near-synonym edits of each text when
    none was made); a record from before the count says what was asked.

    >>> edits_text(3, 0, "near-synonym"), edits_text(1, 96, "one-word"), edits_text(2, None, "one-word")
    ('', ', and of 96 one-word edit(s) (up to 1 of each text)', ', and of 2 one-word edit(s) of each')
    """
    if not asked or made == 0:
        return ""
    if made is None:
        return f", and of {asked} {kind} edit(s) of each"
    return f", and of {thousands(made)} {kind} edit(s) (up to {asked} of each text)"


def plain_loading(plain: PlainAttention | dict) -> str | None:
    """What a user with plain transformers gets (`roundtrip.plain_attention`, recorded by `save_encoder`)."""
    plain = PlainAttention.from_dict(plain)
    verdicts = plain.verdicts()
    causal = [b for b, verdict in verdicts.items() if verdict is False]
    default, version = plain.saved_default, plain.transformers
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
    if default and plain.verdict(default) is True:
        return (f"config.json selects `{default}`, so `AutoModel.from_pretrained(...)` is bidirectional; named "
                f"explicitly, {named} (and flash attention) stay causal in this architecture's transformers code; "
                f"{remote}{verified}")
    return (f"a plain `AutoModel` stays causal ({named}: causal in this architecture's transformers code); {remote}"
            f"{verified}")


FORMATS = {".jsonl": "JSONL", ".json": "JSON", ".txt": "text", ".parquet": "Parquet", ".csv": "CSV",
           ".gz": "compressed"}


def local_data(spec: str, name: str | None = None) -> str:
    """A local --data-files source as the card says it: described, never named by its path (a card is pushed, and a
    path or file name such as `customer-emails.jsonl` says what a private corpus holds), unless the user named it for
    the card (`--data-name`, recorded). A Hub dataset is named by its id.

    >>> local_data("home/alice/secret-project/customer-emails.jsonl"), local_data("corpora/")
    ('a local JSONL file', 'local files')
    >>> local_data("home/alice/docs.jsonl", "Python 3.11 docs")
    '`Python 3.11 docs` (a local JSONL file)'
    """
    suffix = os.path.splitext(spec.rstrip("/"))[1].lower()
    one_file = suffix in FORMATS and not any(c in spec for c in "*?[")
    described = f"a local {FORMATS[suffix]} file" if one_file else "local files"
    return f"`{name}` ({described})" if name else described


def _text_unit(data: DataFacts) -> str:
    """How a .txt corpus was cut into documents (`--text-unit`; records before it was recorded say nothing)."""
    unit = data.text_unit
    return f" (one document per {unit})" if unit else ""


def _training_rows(run: RunRecord) -> list[tuple[str, str]]:
    data, lora, hardware = run.data or DataFacts(), run.lora, run.hardware or HardwareFacts()
    source = (local_data(data.data_files, data.data_name) if data.data_files else
        f"`{' '.join(filter(None, [data.dataset, data.dataset_config]))}`")
    sequence = recorded_sequence(run.phases)
    learnt_text = _phases_text(run) if run.schedule else sequence.card_label or "unknown"
    masked = (sequence.masking_target or learnt("mlm")).name.upper()  # what the held-out loss measures
    replacement = "BERT 80/10/10" if run.replacement == "bert" else "every masked token becomes the mask token"
    adapters = ("none (all weights trained)" if not lora else
        f"LoRA r={lora.r}, alpha={lora.alpha}, targets {lora.targets}, merged into the weights")
    processes = run.num_processes or hardware.num_processes or 1
    accuracy = run.eval_masked_accuracy
    return [
        ("Objective", f"{learnt_text}, mask ratio {run.mask_ratio or 0:.0%}, {replacement}"),
        ("Data", f"{source}{_text_unit(data)}, rows of {data.seq_len} tokens, "
                 f"{'packed' if data.pack else 'padded'}"),
        ("Steps", f"{thousands(run.steps)} optimizer steps, {thousands(run.tokens_seen)} tokens seen"),
        ("Schedule", f"{(run.lr_schedule or 'wsd').upper()}: peak lr {run.lr or 0:.1e}, "
                     f"{thousands(run.warmup_steps)} warmup steps, "
                     f"linear decay over the final {_decay(run)}"),
        ("Optimizer", f"AdamW, betas {tuple(run.betas or (0.9, 0.95))}, eps "
                      + (f"{run.adam_eps:.0e}" if run.adam_eps is not None
                         else "1e-08 (torch's default: recorded before --adam-epsilon existed)")
                      + f", weight decay {run.weight_decay}, gradient clipping {run.max_grad_norm}"),
        ("Batch", f"{run.batch_size} rows x {run.grad_accum} accumulation x {processes} process(es)"),
        ("Adapters", adapters + (" on a 4-bit NF4 base (QLoRA)" if run.load_in_4bit else "")),
        ("Hardware", f"{hardware.gpu_name or hardware.device or '?'}, {processes} process(es), mixed "
                     f"precision {hardware.mixed_precision}; torch {hardware.torch}, "
                     f"transformers {hardware.transformers}"),
        ("Wall time", f"{duration(run.wall_time_s)} ({run.started_at} to {run.finished_at})"),
        ("Final training loss", loss_value(run.final_train_loss)),
        (f"Held-out {masked} loss / masked-token accuracy", f"{loss_value(run.eval_loss)} / "
         + ("n/a" if accuracy is None else f"{accuracy:.1%}")),
    ]


def _phases_text(run: RunRecord) -> str:
    """A pretrain run's phases in words, e.g. "CLM for steps 0-750, then MNTP (...) for steps 750-1,000": the step
    ranges from `run_record.json`'s `schedule` (`clm:0.75,mlm:0.25`), each named for what it learnt (its `phases`,
    `clm+mntp`); the recorded phases' label otherwise."""
    schedule, steps = run.schedule, run.steps
    learnt_phases = recorded_sequence(run.phases).phases
    if not isinstance(schedule, str) or not isinstance(steps, int):
        return recorded_sequence(run.phases).card_label or str(run.phases or "unknown")
    from hf_encoderize.objectives.phases import parse_schedule

    try:
        ranges = parse_schedule(schedule, steps)
    except EncoderizeError:
        return schedule
    if len(ranges) != len(learnt_phases):  # no record of what each learnt (or a disagreeing one): the schedule's words
        learnt_phases = tuple(learnt(at.name) for at in ranges)
    return ", then ".join(f"{phase.card_label} for steps {thousands(at.start)}-{thousands(at.end)}"
                          for phase, at in zip(learnt_phases, ranges, strict=True))


def score(value, ci=None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} ± {ci:.2f}" if ci is not None else f"{value:.2f}"


def loss_value(value) -> str:
    """A loss with four significant digits: 0.0016 stays 0.0016 (a fixed two decimals would print 0.00).

    >>> loss_value(0.0016), loss_value(3.14159), loss_value(None)
    ('0.0016', '3.142', 'n/a')
    """
    return "n/a" if value is None else f"{value:.4g}"


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


def _decay(run: RunRecord) -> str:
    if run.decay_steps is not None:
        return f"{thousands(run.decay_steps)} steps"
    return f"{run.decay_fraction or 0:.0%} of steps"  # runs recorded before decay_steps existed


def matryoshka(facts: CardFacts) -> dict | None:
    """The Matryoshka sizes a contrastive stage trained (`--matryoshka-dims`), largest first, and a size to show."""
    dims = parse_dims(facts.contrastive.source_facts().matryoshka_dims if facts.contrastive else None)
    return {"dims": dims, "example": dims[1] if len(dims) > 1 else dims[0]} if dims else None
