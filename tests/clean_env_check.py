"""Load a saved encoder the way a user without hf_encoderize would, and report what works as JSON.

Run as `python tests/clean_env_check.py OUT_DIR`; `hf_encoderize` is made unimportable first, so anything that
silently depended on it fails here. Prints one JSON object on stdout.
"""

import json
import sys

sys.modules["hf_encoderize"] = None  # any `import hf_encoderize` now raises ImportError

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, pipeline  # noqa: E402


def main(out: str) -> dict:
    report = {}
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModel.from_pretrained(out).eval()
    report["automodel_class"] = type(model).__name__
    report["is_causal"] = model.config.is_causal
    ids = torch.tensor([tokenizer("w1 w2 w3 w4 w5 w6 w7 w8")["input_ids"] if "w1" in tokenizer.get_vocab()
                        else tokenizer("The quick brown fox jumps over the lazy dog")["input_ids"]])
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % len(tokenizer)
    with torch.no_grad():
        first = model(input_ids=ids).last_hidden_state[0, 0]
        first_changed = model(input_ids=changed).last_hidden_state[0, 0]
        report["later_token_changes_first"] = bool((first - first_changed).abs().max() > 1e-6)
        padded = torch.cat([ids, torch.full((1, 3), tokenizer.pad_token_id)], dim=1)
        mask = torch.cat([torch.ones_like(ids), torch.zeros(1, 3, dtype=ids.dtype)], dim=1)
        alone = model(input_ids=ids).last_hidden_state
        with_pad = model(input_ids=padded, attention_mask=mask).last_hidden_state[:, : ids.shape[1]]
        report["right_padding_max_diff"] = float((alone - with_pad).abs().max())

    mlm = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    report["mlm_class"] = type(mlm).__name__
    fill = pipeline("fill-mask", model=mlm, tokenizer=tokenizer)
    text = (f"The capital of France is {tokenizer.mask_token}." if "w1" not in tokenizer.get_vocab() else
        f"w1 w2 {tokenizer.mask_token} w4")
    predictions = fill(text, top_k=3)
    report["fill_mask"] = [p["token_str"] for p in predictions]

    st = SentenceTransformer(out, device="cpu")
    sentences = ["w1 w2 w3", "w4 w5 w6 w7 w8"] if "w1" in tokenizer.get_vocab() else ["Hello world", "A cat sat."]
    embeddings = st.encode(sentences, convert_to_tensor=True)
    report["st_shape"] = list(embeddings.shape)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    manual = (hidden * weights).sum(1) / weights.sum(1)
    report["st_mean_pool_max_diff"] = float((embeddings.cpu() - manual).abs().max())
    report["hf_encoderize_importable"] = False
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
