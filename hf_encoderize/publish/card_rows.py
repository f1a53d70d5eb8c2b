"""The model card's "What was done" table, and the number formats every card table uses.

Each row is computed from the run's files (`run_record.json`, the `hf_encoderize` block of config.json,
`contrastive_run.json`); `card` lays them out through its template.
"""

from __future__ import annotations

import os

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import parse_dims
from hf_encoderize.publish.card_facts import CardFacts
from hf_encoderize.records.contrastive_record import ContrastiveRecord
from hf_encoderize.records.run_record import RunRecord


def done_rows(facts: CardFacts) -> list[tuple[str, str]]:
    """The "what was done" table, in numbers: base model, patch, tokens, then the training run where there was one."""
    enc, tokens = facts.encoderize, facts.encoderize.get("tokens") or {}
    base = f"[{facts.base_model_id}](https://huggingface.co/{facts.base_model_id})" if facts.base_model_id \
        else f"`{facts.base_model}`"
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
        switch = facts.run.switch_step
        rows.append(("Attention", "bidirectional from the first step (MLM only)" if facts.run.objective == "mlm"
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


def contrastive_text(record: ContrastiveRecord) -> str:
    """The second stage in one cell, from `contrastive_run.json`."""
    stage, config = record.stage or {}, record.config or {}
    source = local_data(config["data_files"], config.get("data_name")) if config.get("data_files") else \
        f"`{config.get('dataset') or '?'}`"
    dropout = max((stage.get("training_dropout") or {}).values(), default=0)
    how = (f"SimCSE (unsupervised: each text twice, dropout {dropout} making the two views)"
           if stage.get("objective") == "simcse" else distilled_text(stage) if stage.get("objective") == "distill"
           else "supervised pairs (in-batch and given hard negatives)")
    return (f"{how}; `{stage.get('loss')}` loss with scale {stage.get('scale')}, `{stage.get('pooling')}` pooling, "
            f"{thousands(stage.get('steps'))} steps at batch {stage.get('batch_size')}, "
            f"lr {stage.get('learning_rate')}, on {thousands(stage.get('rows'))} rows of {source}; "
            f"final loss {score(stage.get('final_loss'))}")


def distilled_text(stage: dict) -> str:
    """What a distilled embedding model learned from: the teacher, its license, the projection."""
    projection = stage.get("projection")
    weight = stage.get("distill_contrastive_weight")
    return (f"distilled from {stage.get('teacher_name')} (`{stage.get('teacher')}`, license "
            f"{stage.get('teacher_license') or 'unknown'}): MSE to the teacher's embedding of each text"
            + (f" plus {weight} x the in-batch contrastive loss" if weight else "")
            + (f", through a Dense projection {projection[0]} -> {projection[1]}" if projection else ""))


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
    kind = FORMATS.get(os.path.splitext(spec.rstrip("/"))[1].lower())
    described = f"a local {kind} file" if kind and not any(c in spec for c in "*?[") else "local files"
    return f"`{name}` ({described})" if name else described


def _text_unit(data: dict) -> str:
    """How a .txt corpus was cut into documents (`--text-unit`; records before it was recorded say nothing)."""
    unit = data.get("text_unit")
    return f" (one document per {unit})" if unit else ""


def _training_rows(run: RunRecord) -> list[tuple[str, str]]:
    data, lora, hardware = run.data or {}, run.lora, run.hardware or {}
    source = local_data(data["data_files"], data.get("data_name")) if data.get("data_files") else \
        f"`{' '.join(filter(None, [data.get('dataset'), data.get('dataset_config')]))}`"
    objective = {"mlm": "MLM", "mntp": "MNTP (masked next-token prediction, LLM2Vec)"}.get(run.objective) \
        or _phases_text(run)
    replacement = "BERT 80/10/10" if run.replacement == "bert" else "every masked token becomes the mask token"
    adapters = "none (all weights trained)" if not lora else \
        f"LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, targets {lora.get('targets')}, merged into the weights"
    processes = run.num_processes or hardware.get("num_processes") or 1
    accuracy = run.eval_masked_accuracy
    return [
        ("Objective", f"{objective}, mask ratio {run.mask_ratio or 0:.0%}, {replacement}"),
        ("Data", f"{source}{_text_unit(data)}, rows of {data.get('seq_len')} tokens, "
                 f"{'packed' if data.get('pack') else 'padded'}"),
        ("Steps", f"{thousands(run.steps)} optimizer steps, {thousands(run.tokens_seen)} tokens seen"),
        ("Schedule", f"{(run.schedule or 'wsd').upper()}: peak lr {run.lr or 0:.1e}, "
                     f"{thousands(run.warmup_steps)} warmup steps, "
                     f"linear decay over the final {_decay(run)}"),
        ("Optimizer", f"AdamW, betas {tuple(run.betas or (0.9, 0.95))}, eps "
                      + (f"{run.adam_eps:.0e}" if run.adam_eps is not None
                         else "1e-08 (torch's default: recorded before --adam-epsilon existed)")
                      + f", weight decay {run.weight_decay}, gradient clipping {run.max_grad_norm}"),
        ("Batch", f"{run.batch_size} rows x {run.grad_accum} accumulation x {processes} process(es)"),
        ("Adapters", adapters + (" on a 4-bit NF4 base (QLoRA)" if run.load_in_4bit else "")),
        ("Hardware", f"{hardware.get('gpu_name') or hardware.get('device', '?')}, {processes} process(es), mixed "
                     f"precision {hardware.get('mixed_precision')}; torch {hardware.get('torch')}, "
                     f"transformers {hardware.get('transformers')}"),
        ("Wall time", f"{duration(run.wall_time_s)} ({run.started_at} to {run.finished_at})"),
        ("Final training loss", score(run.final_train_loss)),
        ("Held-out MLM loss / masked-token accuracy", f"{score(run.eval_loss)} / "
         + ("n/a" if accuracy is None else f"{accuracy:.1%}")),
    ]


def _phases_text(run: RunRecord) -> str:
    """A pretrain run's schedule in words, e.g. "CLM for steps 0-750, then MLM for steps 750-1,000" (from
    `run_record.json`'s `phases`, the schedule string `clm:0.75,mlm:0.25`); the raw objective string otherwise."""
    schedule, steps = run.phases, run.steps
    if not isinstance(schedule, str) or not isinstance(steps, int):
        return str(run.objective or "unknown")
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


def _decay(run: RunRecord) -> str:
    if run.decay_steps is not None:
        return f"{thousands(run.decay_steps)} steps"
    return f"{run.decay_fraction or 0:.0%} of steps"  # runs recorded before decay_steps existed


# ------------------------------------------------------------------------------------------------ serving

# Pooling names of the serving engines, per sentence-transformers pooling mode (TEI `--pooling`, vLLM `pooling_type`).
TEI_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last-token"}
VLLM_POOLING = {"mean": "MEAN", "cls": "CLS", "lasttoken": "LAST"}


def serve_commands(facts: CardFacts, serve: dict | None) -> list[dict]:
    """The "Serve it" commands, each {engine, language, code, verified, note}. `verified` is True only for a command
    a test of hf-encoderize runs as the card prints it (tests/test_card.py, tests/test_export.py run every one so
    marked); the engines this project cannot install (optimum-onnx, TEI, vLLM) are marked not verified, with why."""
    ref, pooling = facts.model_ref, pooling_mode(facts)
    lead = (facts.contrastive.stage.get("lead") if facts.contrastive else None) or ""
    kept = _kept((serve or {}).get("onnx"))
    commands = [{"engine": "sentence-transformers (PyTorch)", "language": "python", "verified": True, "note": "",
                 "code": 'from sentence_transformers import SentenceTransformer\n\n'
                         f'model = SentenceTransformer("{ref}")\n'
                         'embeddings = model.encode(["A cat sits on the mat.", "Stock markets fell today."])\n'
                         'print(embeddings.shape, model.similarity(embeddings, embeddings))'}]
    if kept:
        onnx = serve["onnx"]
        commands.append(_onnxruntime_embedding_command(ref, kept[0], onnx["prompt"]) if "prompt" in onnx else
                        _onnxruntime_command(ref, kept[0], pooling, lead))  # an export from before the pooled graph
        int8 = (f'\nint8 = SentenceTransformer("{ref}", backend="onnx", model_kwargs={{"file_name": '
                '"model_qint8.onnx"})' if "model_qint8.onnx" in kept else "")
        commands.append({"engine": "sentence-transformers (ONNX backend)", "language": "python", "verified": False,
                         "note": "`backend=\"onnx\"` loads through optimum-onnx (`pip install "
                                 "'sentence-transformers[onnx]'`), whose release (0.1.0) pins transformers < 4.58 and "
                                 "fails to import under transformers 5 (installed anyway, it stops at `from "
                                 "transformers.modeling_utils import get_parameter_dtype`), so no test here runs it",
                         "code": 'from sentence_transformers import SentenceTransformer\n\n'
                                 f'model = SentenceTransformer("{ref}", backend="onnx")  # onnx/model.onnx{int8}'})
    gguf = _kept((serve or {}).get("gguf"))
    if gguf:
        commands += _llama_cpp_commands(ref, gguf[-1], pooling, lead, serve["gguf"])  # q8_0 when kept: 1/4 of f32
    prompt = (f" Neither adds this model's lead `{lead}`: put it before every text yourself; both then pool every "
              "token, where sentence-transformers leaves lead tokens out of the pooling." if lead else "")
    commands.append({"engine": "Text Embeddings Inference", "language": "bash", "verified": False,
                     "code": f"text-embeddings-router --model-id {ref} --pooling {TEI_POOLING.get(pooling, pooling)}",
                     "note": "TEI has no flag for the attention: it reads it from config.json, and only for some "
                             "architectures (`is_causal` for qwen2, `use_bidirectional_attention` for qwen3); "
                             f"check that TEI runs `{facts.model_type or 'this model type'}` bidirectionally before "
                             "relying on it." + prompt})
    commands.append({"engine": "vLLM", "language": "bash", "verified": False,
                     "code": f"vllm serve {ref} --runner pooling --convert embed \\\n  --hf-overrides "
                             f"'{{\"is_causal\": false}}' --pooler-config "
                             f"'{{\"pooling_type\": \"{VLLM_POOLING.get(pooling, pooling)}\"}}'",
                     "note": "vLLM >= 0.10 (older releases: `--task embed`, `--override-pooler-config`); "
                             "`is_causal: false` switches to bidirectional attention only in the architectures whose "
                             "vLLM code reads it (Llama, Qwen2/Qwen3 among them)." + prompt})
    return commands


def _onnxruntime_embedding_command(ref: str, file: str, prompt: str) -> dict:
    """ONNX Runtime alone (no sentence-transformers, no optimum): the graph's `sentence_embedding` output is the model's
    own pooling and normalisation, so the snippet only puts the default prompt (lead tokens) before each text."""
    local = ref.startswith("/")  # the local folder (no --model-id): no download
    download = "" if local else "from huggingface_hub import snapshot_download\n"
    texts = '["A cat sits on the mat.", "Stock markets fell today."]'
    texts = f"[{prompt!r} + text for text in {texts}]  # the model's lead tokens, as encode() adds them" if prompt \
        else texts
    code = (f'import numpy as np, onnxruntime\n{download}from transformers import AutoTokenizer\n\n'
            f'folder = {repr(ref) if local else f"snapshot_download({ref!r})"}\n'
            f'tokenizer = AutoTokenizer.from_pretrained(folder)\n'
            f'session = onnxruntime.InferenceSession(f"{{folder}}/onnx/{file}", providers=["CPUExecutionProvider"])\n'
            f'texts = {texts}\n'
            f'batch = tokenizer(texts, padding=True, return_tensors="np")\n'
            'embeddings = session.run(["sentence_embedding"], {"input_ids": batch["input_ids"], '
            '"attention_mask": batch["attention_mask"]})[0]  # as SentenceTransformer(folder).encode(texts)\n'
            'print(embeddings.shape)')
    return {"engine": "ONNX Runtime", "language": "python", "verified": True, "note": "", "code": code}


def _onnxruntime_command(ref: str, file: str, pooling: str, lead: str) -> dict:
    """ONNX Runtime alone (no sentence-transformers, no optimum): tokenizer, session, the model's pooling in numpy."""
    pools = {"mean": "(hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)", "cls": "hidden[:, 0]",
             "lasttoken": "hidden[np.arange(len(hidden)), mask.sum(1) - 1]"}
    local = ref.startswith("/")  # the local folder (no --model-id): no download
    download = "" if local else "from huggingface_hub import snapshot_download\n"
    code = (f'import numpy as np, onnxruntime\n{download}from transformers import AutoTokenizer\n\n'
            f'folder = {repr(ref) if local else f"snapshot_download({ref!r})"}\n'
            f'tokenizer = AutoTokenizer.from_pretrained(folder)\n'
            f'session = onnxruntime.InferenceSession(f"{{folder}}/onnx/{file}", providers=["CPUExecutionProvider"])\n'
            f'batch = tokenizer(["A cat sits on the mat.", "Stock markets fell today."], padding=True, '
            f'return_tensors="np")\nhidden = session.run(None, {{"input_ids": batch["input_ids"], '
            f'"attention_mask": batch["attention_mask"]}})[0]  # (batch, tokens, hidden)\n'
            f'mask = batch["attention_mask"]\nembeddings = {pools[pooling]}  # {pooling} pooling\n'
            f'print(embeddings.shape)')
    note = (f"prepend `{lead}` to every text as sentence-transformers does; it also leaves lead tokens out of the "
            "pooling, which this snippet does not, so no test runs it on this model" if lead else "")
    return {"engine": "ONNX Runtime", "language": "python", "verified": not lead, "note": note, "code": code}


def _kept(part: dict | None) -> list[str]:
    """The files of one export format that passed their check, in the record's order."""
    return [name for name, v in ((part or {}).get("variants") or {}).items() if v.get("verdict") == "verified"]


# llama.cpp's pooling names (`llama-server --pooling`), per sentence-transformers pooling mode.
LLAMA_CPP_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last"}


def _llama_cpp_commands(ref: str, file: str, pooling: str, lead: str, record: dict) -> list[dict]:
    """llama-cpp-python (what `export`'s check runs, and tests/test_export_gguf.py runs as printed) and llama-server.
    Both read the attention (`attention.causal = false`) and the pooling type from the file. A lead-token model with
    mean pooling gets the client-pooled snippet instead, verified when export's check measured it (`record`)."""
    local = ref.startswith("/")
    path = repr(f"{ref}/{file}") if local else f"hf_hub_download({ref!r}, {file!r})"
    download = "" if local else "from huggingface_hub import hf_hub_download\n"
    checked = (record.get("variants") or {}).get(file, {})
    if lead and pooling == "mean" and "prompt_length" in record and "client_pooled_min_cosine" in checked:
        return [_llama_cpp_client_pooled(path, download, record, checked), _llama_cpp_server(ref, file, pooling, lead)]
    code = (f"{download}from llama_cpp import GGML_TYPE_F32, Llama\n\n"
            f"# {pooling} pooling and bidirectional attention come from the file; the f32 KV cache keeps short texts "
            "exact\n"
            f"model = Llama({path}, embedding=True, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, verbose=False)\n"
            'embeddings = model.embed(["A cat sits on the mat.", "Stock markets fell today."])\n'
            "print((len(embeddings), len(embeddings[0])))")
    note = f"prepend `{lead}` to every text yourself, so no test runs it on this model" if lead else ""
    return [{"engine": "llama.cpp (llama-cpp-python)", "language": "python", "verified": not lead, "note": note,
             "code": code}, _llama_cpp_server(ref, file, pooling, lead)]


def _llama_cpp_client_pooled(path: str, download: str, record: dict, checked: dict) -> dict:
    """llama-cpp-python with the pooling done by the client, as `export`'s check (gguf_check.client_pooled) measured
    it: llama.cpp's poolings cannot leave the lead out, and its `embed` reads the lead as plain text."""
    prompt, skip, normalize = record["prompt"], record["prompt_length"], record["normalize"]
    finish = "return vector / np.linalg.norm(vector)  # the model ends in Normalize" if normalize else "return vector"
    code = (f"import numpy as np\n{download}from llama_cpp import GGML_TYPE_F32, LLAMA_POOLING_TYPE_NONE, Llama\n\n"
            "# Bidirectional attention comes from the file. Pooling none: one state per token, pooled below as\n"
            "# sentence-transformers pools (the lead's first token left out); the f32 KV cache keeps short texts\n"
            "# exact\n"
            f"model = Llama({path}, embedding=True, pooling_type=LLAMA_POOLING_TYPE_NONE, type_k=GGML_TYPE_F32,\n"
            "              type_v=GGML_TYPE_F32, verbose=False)\n"
            "# the lead is special tokens, not text: embed() would otherwise tokenize it as plain text\n"
            "model.tokenize = lambda text, add_bos=True, special=False: Llama.tokenize(model, text, add_bos, True)"
            "\n\n\n"
            f"def embed(text: str, lead: str = {prompt!r}, skip: int = {skip}) -> np.ndarray:\n"
            "    vector = np.asarray(model.embed(lead + text))[skip:].mean(0)  # one text per call\n"
            f"    {finish}\n\n\n"
            'embeddings = np.stack([embed(text) for text in ["A cat sits on the mat.", "Stock markets fell today."]])\n'
            "print(embeddings.shape)")
    return {"engine": "llama.cpp (llama-cpp-python)", "language": "python", "code": code,
            "verified": checked["client_pooled_min_cosine"] >= checked.get("threshold", 0.999),
            "note": f"pooled by the client: export's check read cosine {checked['client_pooled_min_cosine']:.5f} "
                    "(lowest of its texts) to `SentenceTransformer.encode`; llama.cpp's own pooling would include "
                    "the lead"}


def _llama_cpp_server(ref: str, file: str, pooling: str, lead: str) -> dict:
    """llama-server: a binary this project cannot build here, so never marked verified."""
    local = ref.startswith("/")
    server = (f"llama-server -m {ref}/{file}" if local else f"llama-server -hf {ref} --hf-file {file}") + \
        f" --embedding --pooling {LLAMA_CPP_POOLING.get(pooling, pooling)} -ctk f32 -ctv f32"
    return {"engine": "llama.cpp server", "language": "bash", "verified": False, "code": server,
            "note": "llama-server is a binary of the llama.cpp release llama-cpp-python vendors; the package "
                    "installed here builds the library only, so no test runs the server (`--pooling` repeats what "
                    "the file says; `-ctk f32 -ctv f32` is the f32 KV cache the check ran with: the default f16 "
                    "cache moved a short text of the SmolLM2-135M encoder to cosine 0.996; `curl "
                    "localhost:8080/v1/embeddings -d '{\"input\": \"...\"}'` queries it)" +
                    (f". Its pooling cannot leave out this model's lead `{lead}`: use `--pooling none` and pool as the "
                     "llama-cpp-python snippet does" if lead else "")}


def pooling_mode(facts: CardFacts) -> str:
    """The model's sentence-transformers pooling (what the serving engines must be told), mean when unknown."""
    return facts.pooling or (facts.contrastive.stage.get("pooling") if facts.contrastive else None) or "mean"


def matryoshka(facts: CardFacts) -> dict | None:
    """The Matryoshka sizes a contrastive stage trained (`--matryoshka-dims`), largest first, and a size to show."""
    dims = parse_dims(facts.contrastive.config.get("matryoshka_dims") if facts.contrastive else None)
    return {"dims": dims, "example": dims[1] if len(dims) > 1 else dims[0]} if dims else None
