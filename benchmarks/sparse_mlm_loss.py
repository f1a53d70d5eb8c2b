"""Sparse, chunked MLM loss vs the dense loss a user of transformers' MLM example would run.

Both run forward+backward on the same bidirectional tiny Llama with a Llama-3-sized vocabulary (128,256), the same
batch and the same masks (40%, the paper's ratio). The baseline materialises logits for every position
(`AutoModelForMaskedLM`-style `CrossEntropyLoss` over B x T x V); ours runs the LM head on masked positions only,
in chunks. Prints JSON with the median step time of each, their ratio, and the logits memory each materialises.
On CPU only the ratios mean anything.

    python benchmarks/sparse_mlm_loss.py [--vocab 128256] [--seq-len 512] [--batch 4] [--repeats 5]
"""

import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_encoderize.model.bidirectional import encoderize
from hf_encoderize.objectives.masking import MaskingConfig, mask_tokens, sparse_mlm_loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)
    model = LlamaForCausalLM(config).to(device)
    encoderize(model)
    ids = torch.randint(args.vocab, (args.batch, args.seq_len))
    generator = torch.Generator().manual_seed(0)
    masked, labels = mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), mask_token_id=0,
                                 vocab_size=args.vocab, config=MaskingConfig(), generator=generator)
    masked, labels = masked.to(device), labels.to(device)

    def dense():
        logits = model(input_ids=masked).logits  # (B, T, V): every position
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)

    def sparse():
        hidden = model.model(input_ids=masked).last_hidden_state
        return sparse_mlm_loss(hidden, model.lm_head, labels)

    results = {}
    for name, loss_fn in (("dense_baseline", dense), ("sparse_chunked", sparse)):
        times, value = [], None
        for _ in range(args.repeats + 1):
            model.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = loss_fn()
            loss.backward()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            value = float(loss.detach())
        results[name] = {"median_step_s": statistics.median(times[1:]), "loss": value}
    masked_count = int((labels != -100).sum())
    fp32 = 4
    print(json.dumps({
        "device": device, "vocab": args.vocab, "batch": args.batch, "seq_len": args.seq_len,
        **results,
        "speedup_sparse_over_dense": (
            results["dense_baseline"]["median_step_s"] / results["sparse_chunked"]["median_step_s"]
        ),
        "same_loss": abs(results["dense_baseline"]["loss"] - results["sparse_chunked"]["loss"]) < 1e-3,
        "dense_logits_mib": args.batch * args.seq_len * args.vocab * fp32 / 2**20,
        "sparse_logits_mib_per_chunk": min(4096, masked_count) * args.vocab * fp32 / 2**20,
    }, indent=1))


if __name__ == "__main__":
    main()
