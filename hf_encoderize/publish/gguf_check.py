"""Check one GGUF export where it will run: llama.cpp (llama-cpp-python) in a fresh process without hf_encoderize.

Run as `python gguf_check.py MODEL.gguf REFERENCE.json`; prints one JSON object. REFERENCE.json holds the texts, the
PyTorch embeddings `export` computed for them and two probe texts that differ only after their first word. This file
imports nothing from the package (it is run as a script, with `hf_encoderize` made unimportable), and it feeds
llama.cpp text, not token ids: the GGUF's own tokenizer, its pooling type and its attention flag are what is checked.

Checks: (a) bidirectional on token-level outputs: with pooling "none", changing a later word moves position 0's
output (in a causal model it cannot); (b) the texts, embedded in one batch with the pooling the GGUF names, match
PyTorch's embeddings (lowest cosine reported). The GGUF must name the model's pooling: llama.cpp pools as it says.
(c) For a model with a default prompt (a contrastive model's lead tokens) and mean pooling: the card's client-pooled
snippet, done here the same way (pooling none, the prompt read as special tokens, the mean after its first
`prompt_length` tokens, normalised when the model normalises), against what `encode` returns, prompt and all:
llama.cpp's own pooling cannot leave the prompt out, and its `embed` reads the prompt as plain text.
"""

import json
import sys

POOLING = {0: "none", 1: "mean", 2: "cls", 3: "lasttoken", 4: "rank"}  # llama.h's enum llama_pooling_type


def main(model_file: str, reference_file: str) -> dict:
    # Imported here: pytest imports every package module for doctests, and the gguf-export extra may be absent.
    import llama_cpp
    import numpy as np

    reference = json.loads(open(reference_file).read())

    def load(pooling: int):
        # An f32 KV cache, as the card's commands set it: llama.cpp's default f16 cache rounds K and V, and a decoder's
        # massive activations then move short texts (SmolLM2-135M, "questions on banjo": cosine 0.996 even from f32
        # weights; 1.00000 with the f32 cache).
        return llama_cpp.Llama(model_file, embedding=True, pooling_type=pooling, n_ctx=reference["n_ctx"],
                               n_batch=reference["n_ctx"], n_ubatch=reference["n_ctx"], n_threads=2,
                               type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, verbose=False)

    tokens = load(llama_cpp.LLAMA_POOLING_TYPE_NONE)
    # embed(text) with pooling none: one row per token; [0] is position 0's output, (dim,)
    first, changed = (np.array(tokens.embed(text)[0]) for text in reference["probe_texts"])
    moved = float(np.abs(first - changed).max() / max(np.abs(first).max(), 1e-12))
    client = (client_pooled(tokens, reference, np) if reference.get("prompt") and reference["pooling"] == "mean"
        else {})
    del tokens

    pooled_model = load(llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED)  # the pooling type the GGUF names
    named = POOLING.get(int(pooled_model.pooling_type()), "unknown")
    result = {"position_0_moved": moved, "bidirectional": moved > 1e-4, "gguf_pooling": named,
              "token_counts": sorted({len(pooled_model.tokenize(t.encode())) for t in reference["texts"]}),
              "llama_cpp_python": llama_cpp.__version__, "hf_encoderize_importable": False, **client}
    if named != reference["pooling"]:
        return {**result, "min_cosine": None}
    # All texts in one call, as a server batches them: one sequence each, which must not see the others.
    pooled = np.array(pooled_model.embed(reference["texts"]), dtype=np.float32)  # (texts, dim)
    torch_side = np.array(reference["embeddings"], dtype=np.float32)
    cosines = (pooled * torch_side).sum(1) / (np.linalg.norm(pooled, axis=1) * np.linalg.norm(torch_side, axis=1))
    return {**result, "min_cosine": float(cosines.min())}


def client_pooled(model, reference: dict, np) -> dict:
    """(c): the lowest cosine of the client-pooled embeddings of prompt + text to `encode`'s, one text per call (with
    pooling none, llama-cpp-python 0.3.36's `embed` of a list returned states that were not the texts')."""
    import llama_cpp

    # embed() tokenizes with special=False: the lead `<|im_end|><|im_end|>` would be plain text, not two EOS tokens
    model.tokenize = lambda text, add_bos=True, special=False: llama_cpp.Llama.tokenize(model, text, add_bos, True)
    rows = []
    for text in reference["texts"]:
        vector = np.asarray(model.embed(reference["prompt"] + text), dtype=np.float32)[reference["prompt_length"]:]
        vector = vector.mean(0)
        rows.append(vector / np.linalg.norm(vector) if reference["normalize"] else vector)
    pooled, encoded = np.stack(rows), np.array(reference["encoded"], dtype=np.float32)
    cosines = (pooled * encoded).sum(1) / (np.linalg.norm(pooled, axis=1) * np.linalg.norm(encoded, axis=1))
    return {"client_pooled_min_cosine": float(cosines.min())}


if __name__ == "__main__":
    sys.modules["hf_encoderize"] = None  # any `import hf_encoderize` now raises ImportError
    print(json.dumps(main(*sys.argv[1:3])))
