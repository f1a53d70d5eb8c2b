"""The paper's PFS grid in miniature (section 4): one step budget, five CLM/MLM splits, one tiny model, on CPU.

    python benchmarks/biphasic_small.py --steps 240 [--smoke-eval] [--out runs/biphasic-small]

Everything is local: the corpus is the paper's own text plus the docstrings of Python's standard library, and a
byte-level BPE tokenizer (with EOS, pad and mask tokens) is trained on it in-process. As in the paper, the CLM-first
splits branch from the CLM-only run's undecayed checkpoints instead of redoing the shared prefix
(`--from-checkpoint`), so the five splits cost about three and a half runs.

Prints one JSON object: per split, the final held-out MLM loss and masked-token accuracy (every split is scored as a
bidirectional encoder, CLM-only included), the last training loss, where it branched from, and, with --smoke-eval,
the `hf-encoderize eval --profile smoke` primary score per task family. This is a smoke-scale check that the grid
runs end to end, not a reproduction of the paper's numbers: a 2-layer model and a few hundred steps.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SPLITS = ("clm:1.0", "clm:0.75,mlm:0.25", "clm:0.5,mlm:0.5", "clm:0.25,mlm:0.75", "mlm:1.0")
PAPER_FILE = Path(__file__).resolve().parents[1] / "shared" / "paper" / "should-we-still-pretrain-encoders-with-mlm.txt"


def build_corpus(path: Path, documents: int) -> int:
    """Paragraphs of the paper (when present) and standard-library docstrings, one JSON line each."""
    texts = []
    for candidate in (PAPER_FILE, Path("/work/shared/paper/should-we-still-pretrain-encoders-with-mlm.txt")):
        if candidate.is_file():
            texts += [line.strip() for line in candidate.read_text().splitlines() if len(line.strip()) > 200]
            break
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(source.read_text(errors="ignore"))
        except SyntaxError:
            continue
        docstrings = [ast.get_docstring(node) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)]
        texts += [" ".join(d.split()) for d in docstrings if d and len(d) > 120]
        if len(texts) >= documents:
            break
    texts = texts[:documents]
    random.Random(0).shuffle(texts)  # the held-out slice (the first documents) then looks like the training data
    with path.open("w") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}) + "\n")
    return min(len(texts), documents)


def train_tokenizer(corpus: Path, folder: Path, vocab_size: int):
    """A byte-level BPE on the corpus, saved as a transformers tokenizer with EOS, pad and mask tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<pad>", "<mask>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=specials[0], pad_token=specials[1],
                                        mask_token=specials[2])
    tokenizer.save_pretrained(folder)
    return tokenizer


def write_model_config(path: Path, vocab_size: int, seq_len: int) -> None:
    """The paper's block (Llama: RMSNorm, SwiGLU, RoPE theta 10,000, tied embeddings), shrunk to 2 layers."""
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=seq_len, rope_theta=10000.0,
                tie_word_embeddings=True).to_json_file(path)


def run_split(args, work: Path, schedule: str, from_checkpoint: str | None) -> dict:
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.train_config import TrainConfig

    out = work / schedule.replace(":", "").replace(",", "_")
    spec = PretrainConfig(model_config=str(work / "config.json"), tokenizer=str(work / "tokenizer"),
                          schedule=schedule, from_checkpoint=from_checkpoint)
    data = DataConfig(data_files=str(work / "corpus.jsonl"), seq_len=args.seq_len, eval_documents=args.eval_documents)
    # Checkpoints at every quarter of the CLM-only run are the branch points of the other splits.
    train = TrainConfig(output_dir=str(out), steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                        save_every=args.steps // 4, keep_last=4, eval_every=0, log_every=10**9, progress=False,
                        overwrite=True, seed=0)
    started = time.time()
    summary = pretrain(spec, data, MaskingConfig(), train)
    return {"final_mlm_loss": round(summary["eval_loss"], 4),
            "final_masked_accuracy": round(summary["eval_masked_accuracy"], 4),
            "last_train_loss": round(summary["losses"][-1], 4), "steps_trained": len(summary["losses"]),
            "branched_from_step": int(from_checkpoint.rsplit("-", 1)[1]) if from_checkpoint else None,
            "wall_time_s": round(time.time() - started, 1), "encoder": str(out / "encoder")}


def smoke_eval(encoder: str, out: Path) -> dict:
    """Family means (0-100) of `hf-encoderize eval --profile smoke`: one fine-tuning per synthetic offline set (SC,
    TC, QA, IR), about 20 s per encoder here."""
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    summary = evaluate(LoadConfig(encoder), EvalConfig(profile="smoke", output_dir=str(out)), progress=lambda _: None)
    return {task: round(score, 2) for task, score in summary["family_means"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=240, help="the one budget every split shares")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--documents", type=int, default=2000, help="corpus size (documents)")
    parser.add_argument("--eval-documents", type=int, default=64, help="held out for the MLM score")
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--out", default="runs/biphasic-small")
    parser.add_argument("--smoke-eval", action="store_true", help="also fine-tune each encoder on the smoke suite")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one avoids thrashing a shared CPU)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    documents = build_corpus(work / "corpus.jsonl", args.documents)
    tokenizer = train_tokenizer(work / "corpus.jsonl", work / "tokenizer", args.vocab_size)
    write_model_config(work / "config.json", len(tokenizer), args.seq_len)
    results, clm_run = {}, work / "clm1.0" / "checkpoints"
    for schedule in SPLITS:
        clm_share = float(schedule.split(",")[0].split(":")[1]) if schedule.startswith("clm") else 0.0
        branch = None
        if 0 < clm_share < 1:  # the CLM prefix is the CLM-only run's first clm_share of steps: branch from it
            branch = str(clm_run / f"step-{round(clm_share * args.steps):07d}")
        with contextlib.redirect_stdout(sys.stderr):  # progress lines to stderr: stdout is the JSON alone
            results[schedule] = run_split(args, work, schedule, branch)
            if args.smoke_eval:
                encoder = Path(results[schedule]["encoder"])
                results[schedule]["smoke_eval"] = smoke_eval(str(encoder), work / "eval" / encoder.parent.name)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    print(json.dumps({"settings": {**settings, "corpus_documents": documents, "vocab": len(tokenizer)},
                      "splits": results}, indent=1))


if __name__ == "__main__":
    main()
