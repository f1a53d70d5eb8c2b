"""The model card's "Serve it" section: a command per engine that can serve the model, and whether a test runs it.

Design choices:
- Each command is `{engine, language, code, verified, note}`; `verified` is True only for a command a test of
  hf-encoderize runs as the card prints it (tests/test_card.py, tests/test_export.py run every one so marked). The
  engines this project cannot install (optimum-onnx, TEI, vLLM, llama-server) are printed, marked not verified, and
  say why.
- What `export` kept is read from `export_record.json` (a file of each format that passed its check); the pooling
  and the lead token come from the model's own files, so the commands say what the model needs.
"""

from __future__ import annotations

import shlex

from hf_encoderize.publish.card_facts import CardFacts
from hf_encoderize.records.export_record import ExportCheck, ExportPart, ExportRecord

# Pooling names of the serving engines, per sentence-transformers pooling mode (TEI `--pooling`, vLLM `pooling_type`).
TEI_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last-token"}
VLLM_POOLING = {"mean": "MEAN", "cls": "CLS", "lasttoken": "LAST"}


def serve_commands(facts: CardFacts, serve: ExportRecord | None) -> list[dict]:
    """The "Serve it" commands, each {engine, language, code, verified, note}. `verified` is True only for a command
    a test of hf-encoderize runs as the card prints it (tests/test_card.py, tests/test_export.py run every one so
    marked); the engines this project cannot install (optimum-onnx, TEI, vLLM) are marked not verified, with why."""
    ref, pooling = facts.model_ref, pooling_mode(facts)
    lead = (facts.contrastive.stage_facts().lead if facts.contrastive else None) or ""
    onnx, gguf = (serve.onnx, serve.gguf) if serve else (None, None)
    kept = onnx.kept_files() if onnx else []
    commands = [{"engine": "sentence-transformers (PyTorch)", "language": "python", "verified": True, "note": "",
                 "code": 'from sentence_transformers import SentenceTransformer\n\n'
                         f'model = SentenceTransformer("{ref}")\n'
                         'embeddings = model.encode(["A cat sits on the mat.", "Stock markets fell today."])\n'
                         'print(embeddings.shape, model.similarity(embeddings, embeddings))'}]
    if kept:
        commands.append(_onnxruntime_embedding_command(ref, kept[0], onnx.prompt) if onnx.embedding_graph else
                        _onnxruntime_command(ref, kept[0], pooling, lead))  # an export from before the pooled graph
        int8 = (f'\nint8 = SentenceTransformer("{ref}", backend="onnx", model_kwargs={{"file_name": '
                '"model_int8_weight_only.onnx"})' if "model_int8_weight_only.onnx" in kept else "")
        commands.append({"engine": "sentence-transformers (ONNX backend)", "language": "python", "verified": False,
                         "note": "`backend=\"onnx\"` loads through optimum-onnx (`pip install "
                                 "'sentence-transformers[onnx]'`), whose release (0.1.0) pins transformers < 4.58 and "
                                 "fails to import under transformers 5 (installed anyway, it stops at `from "
                                 "transformers.modeling_utils import get_parameter_dtype`), so no test here runs it",
                         "code": 'from sentence_transformers import SentenceTransformer\n\n'
                                 f'model = SentenceTransformer("{ref}", backend="onnx")  # onnx/model.onnx{int8}'})
    gguf_kept = gguf.kept_files() if gguf else []
    if gguf_kept:
        commands += _llama_cpp_commands(ref, gguf_kept[-1], pooling, lead, gguf)  # q8_0 when kept: 1/4 of f32
    prompt = (f" Neither adds this model's lead `{lead}`: put it before every text yourself; both then pool every "
              "token, where sentence-transformers leaves lead tokens out of the pooling." if lead else "")
    commands.append({"engine": "Text Embeddings Inference", "language": "bash", "verified": False,
                     "code": f"text-embeddings-router --model-id {shlex.quote(ref)} "
                             f"--pooling {TEI_POOLING.get(pooling, pooling)}",
                     "note": "TEI has no flag for the attention: it reads it from config.json, and only for some "
                             "architectures (`is_causal` for qwen2, `use_bidirectional_attention` for qwen3); "
                             f"check that TEI runs `{facts.model_type or 'this model type'}` bidirectionally before "
                             "relying on it." + prompt})
    commands.append({"engine": "vLLM", "language": "bash", "verified": False,
                     "code": f"vllm serve {shlex.quote(ref)} --runner pooling --convert embed \\\n  --hf-overrides "
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
    texts = (f"[{prompt!r} + text for text in {texts}]  # the model's lead tokens, as encode() adds them" if prompt
        else texts)
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


# llama.cpp's pooling names (`llama-server --pooling`), per sentence-transformers pooling mode.
LLAMA_CPP_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last"}


def _llama_cpp_commands(ref: str, file: str, pooling: str, lead: str, record: ExportPart) -> list[dict]:
    """llama-cpp-python (what `export`'s check runs, and tests/test_export_gguf.py runs as printed) and llama-server.
    Both read the attention (`attention.causal = false`) and the pooling type from the file. A lead-token model with
    mean pooling gets the client-pooled snippet instead, verified when export's check measured it (`record`)."""
    local = ref.startswith("/")
    path = repr(f"{ref}/{file}") if local else f"hf_hub_download({ref!r}, {file!r})"
    download = "" if local else "from huggingface_hub import hf_hub_download\n"
    checked = record.check(file)
    if lead and pooling == "mean" and record.prompt_length is not None and checked.client_pooled_min_cosine is not None:
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


def _llama_cpp_client_pooled(path: str, download: str, record: ExportPart, checked: ExportCheck) -> dict:
    """llama-cpp-python with the pooling done by the client, as `export`'s check (gguf_check.client_pooled) measured
    it: llama.cpp's poolings cannot leave the lead out, and its `embed` reads the lead as plain text."""
    prompt, skip, normalize = record.prompt, record.prompt_length, record.normalize
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
            "verified": checked.client_pooled_min_cosine >= (0.999 if checked.threshold is None else checked.threshold),
            "note": f"pooled by the client: export's check read cosine {checked.client_pooled_min_cosine:.5f} "
                    "(lowest of its texts) to `SentenceTransformer.encode`; llama.cpp's own pooling would include "
                    "the lead"}


def _llama_cpp_server(ref: str, file: str, pooling: str, lead: str) -> dict:
    """llama-server: a binary this project cannot build here, so never marked verified."""
    local = ref.startswith("/")
    server = ((f"llama-server -m {shlex.quote(f'{ref}/{file}')}" if local
               else f"llama-server -hf {shlex.quote(ref)} --hf-file {file}")
              + f" --embedding --pooling {LLAMA_CPP_POOLING.get(pooling, pooling)} -ctk f32 -ctv f32")
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
    return facts.pooling or (facts.contrastive.stage_facts().pooling if facts.contrastive else None) or "mean"
