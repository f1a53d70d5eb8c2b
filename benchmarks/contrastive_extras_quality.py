"""What do `--hard-negatives` and `--matryoshka-dims` buy? Supervised contrastive training with and without each,
scored at full size and at every Matryoshka size, offline.

    python benchmarks/contrastive_extras_quality.py --encoder runs/quickstart/encoder [--steps 100] [--work /tmp/ceq]

Three arms train from the same MLM encoder on the same (query, passage) pairs (the synthetic retrieval generator's
train half, as in `contrastive_quality.py`) with the same steps, batch, learning rate and seed:
- `supervised`: in-batch negatives only;
- `hard_negatives`: plus K negatives per pair mined with the encoder before training (`--hard-negatives K`: the
  recipe's `mine_hard_negatives` with its false-negative filter, a negative must score below 95% of the pair's
  positive; sentence-transformers' own default is no filter). Its wall time includes the mining;
- `matryoshka`: the same loss wrapped in `MatryoshkaLoss` at `--matryoshka-dims`.

Every model is scored zero-shot with `contrastive_quality.py`'s sets: NDCG@10 on the synthetic retrieval test half
(other words than training) and NDCG@10 / recall@1 on its hand-written paraphrase pairs. Each model is scored at its
full width and at each Matryoshka size: the full embedding is truncated to its first D values and renormalised, which
is what `SentenceTransformer(path, truncate_dim=D)` with `normalize_embeddings=True` gives (the test checks that), so
the texts are encoded once per model. Without `--encoder`, the quickstart's MLM encoder is made first (about 4 min).
`--arms matryoshka` (say) trains and scores only some arms: two processes with other `--work` folders split the run.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch

ARMS = ("supervised", "hard_negatives", "matryoshka", "supervised+plain", "supervised+hard_negatives")


def quality_module():
    """benchmarks/contrastive_quality.py (a script, not a package module): its evaluation sets, NDCG and pairs."""
    spec = importlib.util.spec_from_file_location("contrastive_quality", Path(__file__).with_name(
        "contrastive_quality.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def truncated(embeddings: torch.Tensor, dim: int) -> torch.Tensor:
    """(texts, width) -> (texts, dim): the first `dim` values, renormalised (sentence-transformers' `truncate_dim`)."""
    return torch.nn.functional.normalize(embeddings[:, :dim], dim=-1)


def score_sizes(model_path: str, dims: list[int]) -> dict[str, dict]:
    """{size: figures} for one sentence-transformers folder, at its full width ("full") and at each of `dims`."""
    from sentence_transformers import SentenceTransformer

    quality = quality_module()
    model = SentenceTransformer(model_path, device="cpu")

    def embed(texts):  # full width, not normalised yet: `truncated` normalises at each size
        return model.encode(texts, convert_to_tensor=True, batch_size=64)

    queries, corpus, grades = quality.synthetic_retrieval()
    texts = {"queries": embed(queries), "corpus": embed(corpus), "left": embed([a for a, _ in quality.PARAPHRASES]),
             "right": embed([b for _, b in quality.PARAPHRASES])}
    width, n = model.get_embedding_dimension(), len(quality.PARAPHRASES)
    results = {}
    for dim in [width] + [d for d in dims if d < width]:
        cut = {name: truncated(values, dim) for name, values in texts.items()}
        sims = cut["left"] @ cut["right"].T  # (pairs, pairs): the diagonal holds the paraphrases
        ranks = [(row > row[i]).sum().item() + 1 for i, row in enumerate(sims)]
        results["full" if dim == width else str(dim)] = {
            "dim": dim, "syn_retrieval_ndcg@10": round(quality.ndcg_at_10(cut["queries"] @ cut["corpus"].T, grades), 2),
            "paraphrase_ndcg@10": round(quality.ndcg_at_10(sims, [{i: 1} for i in range(n)]), 2),
            "paraphrase_recall@1": round(sum(r == 1 for r in ranks) / n, 3)}
    return results


def arm_plan(encoder: Path, work: Path, args) -> dict[str, tuple[Path, int, dict]]:
    """{arm: (the model it starts from, its steps, its extra contrastive settings)}."""
    supervised = work / "supervised"
    return {"supervised": (encoder, args.steps, {}),
            "hard_negatives": (encoder, args.steps, {"hard_negatives": args.hard_negatives}),
            "matryoshka": (encoder, args.steps, {"matryoshka_dims": args.matryoshka_dims}),
            "supervised+plain": (supervised, args.continue_steps, {}),
            "supervised+hard_negatives": (supervised, args.continue_steps, {"hard_negatives": args.hard_negatives})}


def train_arms(encoder: Path, pairs: Path, work: Path, args) -> dict[str, dict]:
    """Train the asked arms, in ARMS order; {arm: its output folder, rows trained on, losses, wall time (mining
    included)}, or {arm: {"refused": the one-line error}} when the recipe refuses it (the miner finds no negative)."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive

    common = dict(method="supervised", data_files=str(pairs), batch_size=args.batch_size,
                  max_seq_length=args.max_seq_length, learning_rate=args.learning_rate, seed=args.seed,
                  overwrite=True, progress=False, save_every=10**6)
    plan, asked, arms = arm_plan(encoder, work, args), args.arms.split(","), {}
    for name in (arm for arm in ARMS if arm in asked):
        start, steps, extra = plan[name]
        started = time.time()
        try:
            summary = contrastive(ContrastiveConfig(str(start), output_dir=str(work / name), steps=steps, **common,
                                                    **extra))
        except EncoderizeError as error:
            arms[name] = {"refused": str(error), "wall_time_s": round(time.time() - started, 1)}
            continue
        arms[name] = {**{k: summary[k] for k in ("output_dir", "rows", "first_loss", "final_loss")},
                      "start": "supervised" if start != encoder else "encoder", "steps": steps,
                      "wall_time_s": round(time.time() - started, 1)}
    return arms


def run(encoder: Path, work: Path, args, pairs: Path | None = None) -> dict:
    """The benchmark: train the arms, score each at every size (and the supervised model the continued arms start
    from, when an earlier run in `work` trained it). `pairs` defaults to contrastive_quality's 4,000, written once."""
    from hf_encoderize.common.validation import parse_dims
    from hf_encoderize.recipes.contrastive.losses import RELATIVE_MARGIN

    started = time.time()
    if pairs is None:  # two processes splitting the arms over one `work` read the same file; neither rewrites it
        pairs = work / "pairs.jsonl"
        if not pairs.is_file():
            quality_module().supervised_pairs(pairs, 4000)
    arms = train_arms(encoder, pairs, work, args)
    scored = {name: arm["output_dir"] for name, arm in arms.items() if "output_dir" in arm}
    if any(name.startswith("supervised+") for name in scored) and "supervised" not in scored:
        scored = {"supervised": str(work / "supervised"), **scored}
    dims = parse_dims(args.matryoshka_dims)
    results = {name: score_sizes(path, dims) for name, path in scored.items()}
    return {"encoder": str(encoder), "settings": {**vars(args), "relative_margin": RELATIVE_MARGIN},
            "arms": arms, "results": results, "wall_time_s": round(time.time() - started, 1)}


def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", help="the MLM encoder (default: make the quickstart's)")
    parser.add_argument("--work", default="/tmp/contrastive-extras-quality", help="folder for data and models")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of each arm")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-length", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--continue-steps", type=int, default=50,
                        help="steps of the two arms that continue from the supervised model")
    parser.add_argument("--hard-negatives", type=int, default=1, help="K mined negatives per pair")
    parser.add_argument("--matryoshka-dims", default="576,288,144,64", help="sizes (SmolLM2-135M is 576 wide)")
    parser.add_argument("--arms", default=",".join(ARMS), help="arms to train, comma-separated (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is kind to a shared machine)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.arms or set(args.arms.split(",")) - set(ARMS):
        raise SystemExit(f"--arms takes some of {','.join(ARMS)} (got {args.arms!r})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    encoder = Path(args.encoder) if args.encoder else quality_module().mlm_encoder(work)
    print(json.dumps(run(encoder, work, args), indent=1))


if __name__ == "__main__":
    main()
