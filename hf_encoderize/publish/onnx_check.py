"""Check one ONNX export where it will run: ONNX Runtime in a fresh process that cannot import hf_encoderize.

Run as `python onnx_check.py ENCODER_DIR MODEL.onnx REFERENCE.json`; prints one JSON object. REFERENCE.json holds the
texts and the PyTorch embeddings `export` computed for them. This file imports nothing from the package (it is run as
a script, with `hf_encoderize` made unimportable), so a model that only works with our code installed fails here.

Checks: (a) bidirectional on token-level outputs: changing the last token moves position 0's output; (b) the pooled
embeddings of the texts, several lengths padded in one batch, match PyTorch's (lowest cosine reported); (c) when the
graph has the pipeline's `sentence_embedding` output, it matches what `encode` returns for the same texts, prompt
(lead tokens) and all; `min_cosine` is then (c), what the graph's user gets, and (b) is reported beside it.
"""

import json
import sys


def pool(hidden, mask, mode: str):
    """hidden (batch, seq, dim), mask (batch, seq) -> (batch, dim), as sentence-transformers' Pooling does."""
    import numpy as np

    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":  # right padding: the last real token of each row
        return hidden[np.arange(len(hidden)), mask.sum(1) - 1]
    weights = mask[..., None].astype(hidden.dtype)
    return (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)


def cosine(a, b):
    """Row-wise cosine of two (batch, dim) arrays."""
    import numpy as np

    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main(encoder: str, model_file: str, reference_file: str) -> dict:
    # Imported here: pytest imports every package module for doctests, and the onnx extra may be absent.
    import numpy as np
    import onnxruntime
    from transformers import AutoTokenizer

    reference = json.loads(open(reference_file).read())
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    session = onnxruntime.InferenceSession(model_file, providers=["CPUExecutionProvider"])

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return session.run(None, {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)})[0]

    ids = np.array([reference["probe_ids"]])
    changed = ids.copy()
    changed[0, -1] = reference["probe_other_id"]
    ones = np.ones_like(ids)
    moved = float(np.abs(run(ids, ones)[0, 0] - run(changed, ones)[0, 0]).max())

    batch = tokenizer(reference["texts"], padding=True, truncation=True, max_length=reference["max_length"],
                      return_tensors="np")
    pooled = pool(run(batch["input_ids"], batch["attention_mask"]), batch["attention_mask"], reference["pooling"])
    torch_side = np.array(reference["embeddings"], dtype=np.float32)
    # A Dense projection after the pooling (a distilled model) changes the width: token states pooled alone are then
    # not comparable with the embeddings, and only (c), the graph's own embedding, can be judged.
    lowest = float(cosine(pooled, torch_side).min()) if pooled.shape == torch_side.shape else None
    result = {}
    if "sentence_embedding" in [output.name for output in session.get_outputs()]:
        # The graph's own embedding, fed prompt + text as `encode` feeds it, against what `encode` returned.
        prompted = tokenizer([reference["prompt"] + text for text in reference["texts"]], padding=True,
                             truncation=True, max_length=reference["encoded_max_length"], return_tensors="np")
        feed = {"input_ids": prompted["input_ids"].astype(np.int64),
                "attention_mask": prompted["attention_mask"].astype(np.int64)}
        embedded = session.run(["sentence_embedding"], feed)[0]
        result["min_cosine_embedding"] = float(cosine(embedded, np.array(reference["encoded"], np.float32)).min())
        # What a user of this graph gets; the token states pooled without the prompt (b) are reported, not judged:
        # a lead-token model never sees its texts without the lead (int8 of a SmolLM2 one: 0.765 there, 0.994 here).
        result["min_cosine_token_states"], lowest = lowest, result["min_cosine_embedding"]
    return {"position_0_moved": moved, "bidirectional": moved > 1e-6, "min_cosine": lowest, **result,
            "padded_lengths": sorted({int(n) for n in batch["attention_mask"].sum(1)}),
            "hf_encoderize_importable": False}


if __name__ == "__main__":
    sys.modules["hf_encoderize"] = None  # any `import hf_encoderize` now raises ImportError
    print(json.dumps(main(*sys.argv[1:4])))
