"""The paper's headline at small scale (section 5, Tables 14-17): does MLM continued pretraining (CPT) of a CLM base
beat the same CPT of an MLM base, at an equal token budget, under full fine-tuning?

    python benchmarks/headline.py --budget cpu [--out runs/headline] [--threads 2]

Every stage is the toolkit's own function: `recipes.pretrain.pretrain` builds two bases from the same random
initialisation, on the same documents in the same order and for the same number of tokens, one with `clm:1.0` and
one with `mlm:1.0` (both end decayed, as the paper's CPT bases do); `recipes.cpt.cpt` runs the same MLM CPT on each
(40% masking, the paper's CPT ratio); `evaluation.evaluate` then fine-tunes the whole encoder (not frozen) on the four
synthetic offline families (SC, TC, QA, IR; `evaluation.synthetic`), seeds x learning rates.

Design choices:
- The corpus is English text that ships with Python and the installed packages (pydoc topics, docstrings of the
  standard library and of site-packages, package descriptions). It is NOT FineWeb-Edu: technical prose, much of it
  about code, a long way from the reviews, places and facts the synthetic tests probe.
- A byte-level BPE (8k for the real presets) is trained in-process on the pretraining split.
- The CPT reads a held-apart slice of the corpus (documents the bases never saw), the same slice for both arms.
- The learning rate is chosen per arm and family on validation (mean over seeds), as the paper does; the test scores
  at that rate give the mean ± 95% CI (Student t over seeds and data orders), Welch's test and a paired bootstrap over
  the test examples (`headline_stats`).
- The predictions (docs/headline.md, written before any run) come from Tables 14-17; this script only measures.

Writes OUT/headline.json and OUT/headline.md, and prints the table.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import headline_stats as hs  # noqa: E402

FAMILIES = {"sc": "syn-sentiment", "tc": "syn-entities", "qa": "syn-qa", "ir": "syn-retrieval"}
# Tables 14-17, 610M, 22K CPT steps (CLM+MLM vs MLM+MLM averages): SC 88.40 vs 87.47, TC 92.70 vs 92.11,
# QA 66.62 vs 67.66, IR 80.70 vs 80.45. Written down before the first run (docs/headline.md).
PREDICTED = {"sc": ">", "tc": ">", "qa": "<=", "ir": "~"}
ELEVEN_M = dict(vocab=8192, hidden=256, layers=6, heads=4, intermediate=1152)  # untied: ~11.1M parameters
PRESETS = {
    # A few seconds of CPU: checks that the chain runs and the table is whole; says nothing about the claim.
    "tiny": dict(corpus_tokens=60_000, vocab=384, hidden=32, layers=2, heads=2, intermediate=64, seq_len=32, batch=4,
                 pretrain_steps=6, cpt_steps=4, lr=3e-3, cpt_lr=1e-3, ft_lrs=(5e-4,), ft_seeds=(0, 1), ft_steps=3,
                 orders=(0,), eval_documents=8),
    # The fallback when even `cpu` cannot finish (what ran on a loaded, shared 2-core machine: ~2.5 s a pretraining
    # step there): the same corpus and CPT share as `cpu`, 40% of its steps, shorter fine-tuning.
    "reduced": dict(corpus_tokens=2_000_000, **ELEVEN_M, seq_len=128, batch=16, pretrain_steps=200, cpt_steps=68,
                    lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2), ft_steps=24, orders=(0,)),
    # `reduced` with a second data order (corpus shuffle, tokenizer, initialisation) per arm: pretraining variance.
    "reduced2": dict(corpus_tokens=2_000_000, **ELEVEN_M, seq_len=128, batch=16, pretrain_steps=200, cpt_steps=68,
                     lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2), ft_steps=24, orders=(0, 1)),
    # Sized for about 50 minutes on two idle cores; measured: 38 min (2,276 s) with 1 torch thread on 2 cores shared
    # with two other jobs (docs/headline.md). 3 fine-tuning seeds, not 5.
    "cpu": dict(corpus_tokens=2_000_000, **ELEVEN_M, seq_len=128, batch=16, pretrain_steps=500, cpt_steps=170,
                lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2), ft_steps=30, orders=(0,)),
    # `cpu` with a second data order (corpus shuffle, tokenizer, initialisation) per arm: pretraining variance. Give it
    # the `cpu` run's folder and order 0 is reused: the second order costs what the first did (38 min, 1 thread).
    "cpu2": dict(corpus_tokens=2_000_000, **ELEVEN_M, seq_len=128, batch=16, pretrain_steps=500, cpt_steps=170,
                 lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2), ft_steps=30, orders=(0, 1)),
    # About 10 minutes on one H100 (not run yet): ~11M tokens per arm from the ~12M the environment holds, 5 seeds,
    # a second data order per arm.
    "gpu": dict(corpus_tokens=12_000_000, **ELEVEN_M, seq_len=256, batch=64, pretrain_steps=500, cpt_steps=170,
                lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2, 3, 4), ft_steps=30, orders=(0, 1)),
}
CHARS_PER_TOKEN = 3.65  # measured with the 8k BPE on this corpus; the size is a target, the real count is reported


# ------------------------------------------------------------------------------------------------------- corpus


def _docstrings(source: Path) -> list[str]:
    try:
        tree = ast.parse(source.read_text(errors="ignore"))
    except (SyntaxError, ValueError, OSError):
        return []
    nodes = (n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef
                                                    | ast.AsyncFunctionDef))
    return [d for d in (ast.get_docstring(n) for n in nodes) if d]


def _shipped_texts():
    """Texts in a fixed order: pydoc topics, the standard library's docstrings, package descriptions, then
    site-packages docstrings (the largest source, read last and only as far as needed)."""
    from pydoc_data.topics import topics

    yield from (topics[key] for key in sorted(topics))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for source in sorted(stdlib.rglob("*.py")):
        if "site-packages" not in source.parts and "test" not in source.parts:
            yield from _docstrings(source)
    purelib = Path(sysconfig.get_paths()["purelib"])
    for metadata in sorted(purelib.glob("*.dist-info/METADATA")):
        yield metadata.read_text(errors="ignore").partition("\n\n")[2]
    for source in sorted(purelib.rglob("*.py")):
        if "tests" not in source.parts and "test" not in source.parts:
            yield from _docstrings(source)


def build_corpus(folder: Path, tokens: int, order: int, cpt_share: float) -> dict:
    """pretrain.jsonl and cpt.jsonl (disjoint): texts over 200 characters, deduplicated, shuffled by `order`."""
    seen, texts, chars = set(), [], 0
    for text in _shipped_texts():
        text = " ".join(text.split())  # one docstring or topic is one document, on one line
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        if len(text) < 200 or digest in seen:
            continue
        seen.add(digest)
        texts.append(text)
        chars += len(text)
        if chars >= tokens * CHARS_PER_TOKEN:
            break
    random.Random(order).shuffle(texts)
    cut = round(len(texts) * (1 - cpt_share))
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("pretrain", texts[:cut]), ("cpt", texts[cut:])):
        with (folder / f"{name}.jsonl").open("w") as handle:
            handle.writelines(json.dumps({"text": t}) + "\n" for t in part)
    return {"documents": len(texts), "characters": chars, "pretrain_documents": cut, "cpt_documents": len(texts) - cut}


def write_model_config(path: Path, p: dict, vocab_size: int) -> None:
    """The paper's Llama block (RMSNorm, SwiGLU, RoPE 10,000) with untied embeddings (EuroBERT's, Appendix A), shrunk.
    128 positions at least, so that fine-tuning's 64-token inputs fit the tiny preset too."""
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=vocab_size, hidden_size=p["hidden"], intermediate_size=p["intermediate"],
                num_hidden_layers=p["layers"], num_attention_heads=p["heads"], num_key_value_heads=p["heads"],
                max_position_embeddings=max(p["seq_len"], 128), rope_theta=10000.0,
                tie_word_embeddings=False).to_json_file(path)


def count_parameters(path: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(t.numel() for t in model.parameters())


# ------------------------------------------------------------------------------------------------------- stages


def run_arm(work: Path, arm: str, p: dict, order: int, threads: int) -> dict:
    """Pretrain one base (`clm:1.0` or `mlm:1.0`), then MLM CPT on the held-apart slice; returns both summaries."""
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.train_config import TrainConfig

    common = dict(batch_size=p["batch"], eval_every=0, log_every=50, progress=False, overwrite=True, seed=order,
                  save_every=10**9, keep_last=1)
    base_dir, cpt_dir = work / f"{arm}-base", work / f"{arm}-cpt"
    if (work / f"{arm}-arm.json").is_file():  # finished earlier: a rerun goes on with the fine-tuning
        return json.loads((work / f"{arm}-arm.json").read_text())
    spec = PretrainConfig(model_config=str(work / "config.json"), tokenizer=str(work / "tokenizer"),
                          schedule=f"{arm}:1.0")
    held_out = p.get("eval_documents", 64)
    data = DataConfig(data_files=str(work / "pretrain.jsonl"), seq_len=p["seq_len"], eval_documents=held_out)
    base = pretrain(spec, data, MaskingConfig(), TrainConfig(output_dir=str(base_dir), steps=p["pretrain_steps"],
                                                             lr=p["lr"], **common))
    cpt_data = DataConfig(data_files=str(work / "cpt.jsonl"), seq_len=p["seq_len"], eval_documents=held_out)
    after = cpt(LoadConfig(str(base_dir / "encoder")), cpt_data, MaskingConfig(mask_ratio=0.4),
                TrainConfig(output_dir=str(cpt_dir), steps=p["cpt_steps"], lr=p["cpt_lr"], **common))
    keep = ("eval_loss", "eval_masked_accuracy", "wall_time_s")
    summary = {"base": {k: base.get(k) for k in keep}, "cpt": {k: after.get(k) for k in keep},
               "encoder": str(cpt_dir / "encoder")}
    (work / f"{arm}-arm.json").write_text(json.dumps(summary))
    return summary


def finetune(encoder: str, out: Path, name: str, p: dict, seeds: tuple[int, ...]) -> None:
    """Full fine-tuning on the four synthetic families (the smoke sets' sizes), `seeds` x every learning rate; runs
    finished earlier are skipped (`evaluate` resumes)."""
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    cfg = EvalConfig(profile="smoke", lrs=",".join(map(str, p["ft_lrs"])), seeds=",".join(map(str, seeds)),
                     max_steps=p["ft_steps"], output_dir=str(out), name=name, frozen=False)
    evaluate(LoadConfig(encoder), cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))


# ------------------------------------------------------------------------------------------------------- analysis


def read_runs(out: Path, name: str, family: str, p: dict) -> dict:
    """{lr: [results.json records over seeds]} for one model and family."""
    from hf_encoderize.evaluation.config import lr_key

    folder = out / name / family / FAMILIES[family]
    return {lr: [json.loads((folder / f"lr{lr_key(lr)}_sd{seed}" / "results.json").read_text())
                 for seed in p["ft_seeds"]] for lr in p["ft_lrs"]}


def example_counts(family: str, record: dict, gold: dict) -> list[tuple]:
    rows = sorted(record["per_example"]["test"], key=lambda e: e["id"])
    if family == "tc":
        return [hs.counts_tc(e["prediction"], gold[e["id"]]) for e in rows]
    return [{"sc": hs.counts_sc, "qa": hs.counts_qa, "ir": hs.counts_ir}[family](e) for e in rows]


def tc_gold() -> dict:
    from hf_encoderize.evaluation.config import SMOKE_SIZES
    from hf_encoderize.evaluation.loaders import dataset_spec, load_splits

    spec = dataset_spec(FAMILIES["tc"], "authors")
    rows = load_splits(spec, sizes=SMOKE_SIZES)["test"]
    return {row["id"]: [spec.label_names[t] for t in row["tags"]] for row in rows}


def observed_direction(boot: dict) -> str:
    return ">" if boot["low"] > 0 else "<" if boot["high"] < 0 else "~"


def agrees(predicted: str, observed: str) -> str:
    if predicted == "~":
        return "not distinguished (no equivalence test)" if observed == "~" else "no"
    if predicted == "<=":
        return "yes" if observed in ("<", "~") else "no"
    return "yes" if observed == predicted else "no"


def analyse(out: Path, p: dict) -> dict:
    """Per family: the lr each arm picks on validation, test mean ± CI, Welch and the paired bootstrap."""
    gold, table = tc_gold(), {}
    for family in FAMILIES:
        arms = {}
        for arm in ("clm", "mlm"):
            runs = {order: read_runs(out, f"{arm}-order{order}", family, p) for order in p["orders"]}
            validation = {lr: sum(r["validation"]["score"] for o in runs for r in runs[o][lr]) for lr in p["ft_lrs"]}
            best = max(p["ft_lrs"], key=lambda lr: validation[lr])
            chosen = [r for o in runs for r in runs[o][best]]
            mean, half = hs.mean_ci([r["test"]["score"] for r in chosen])
            arms[arm] = {"lr": best, "mean": mean, "ci": half, "scores": [r["test"]["score"] for r in chosen],
                         "counts": hs.pooled(family, [example_counts(family, r, gold) for r in chosen])}
        boot = hs.paired_bootstrap(family, arms["clm"].pop("counts"), arms["mlm"].pop("counts"))
        direction = observed_direction(boot)
        table[family] = {**{arm: arms[arm] for arm in arms}, "welch": hs.welch(arms["clm"]["scores"],
                                                                               arms["mlm"]["scores"]),
                         "bootstrap": boot, "predicted": PREDICTED[family], "observed": direction,
                         "agrees": agrees(PREDICTED[family], direction)}
    return table


def render(table: dict, budget: str, seeds: list[int]) -> str:
    lines = [f"Budget `{budget}`, seeds {seeds}: CLM+MLM CPT vs MLM+MLM CPT, full fine-tuning, test scores (0-100), "
             "mean ± 95% CI over seeds at the lr chosen on validation; diff = CLM+MLM - MLM+MLM on the test examples "
             "pooled over those seeds. Observed: the bootstrap interval's side of zero (~: it holds zero; that is not "
             "equivalence).", ""]
    if budget == "tiny":
        lines += ["**tiny: a smoke test of the chain. These scores say nothing about the paper's claim.**", ""]
    lines += ["| family | CLM+MLM (lr) | MLM+MLM (lr) | diff [95% bootstrap CI] | bootstrap p | Welch p | predicted |"
              " observed | matches prediction |", "|---|---|---|---|---|---|---|---|---|"]
    for family, row in table.items():
        boot, cells = row["bootstrap"], []
        for arm in ("clm", "mlm"):
            cells.append(f"{row[arm]['mean']:.2f} ± {row[arm]['ci']:.2f} ({row[arm]['lr']:g})")
        lines.append(f"| {family.upper()} | {cells[0]} | {cells[1]} | {boot['diff']:+.2f} [{boot['low']:+.2f}, "
                     f"{boot['high']:+.2f}] | {boot['p']:.3f} | {row['welch']['p']:.3f} | {row['predicted']} | "
                     f"{row['observed']} | {row['agrees']} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------- main


def run(budget: str, out: Path, threads: int = 1) -> dict:
    """The whole chain for one preset; returns what headline.json holds."""
    import torch
    from biphasic_small import train_tokenizer

    torch.set_num_threads(threads)
    p, started, arms = PRESETS[budget], time.time(), {}
    out.mkdir(parents=True, exist_ok=True)
    cpt_share = p["cpt_steps"] / (p["pretrain_steps"] + p["cpt_steps"])
    facts = {"budget": budget, "preset": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}}
    for order in p["orders"]:
        work = out / f"order{order}"
        if not (work / "config.json").is_file():
            (work / "corpus.json").parent.mkdir(parents=True, exist_ok=True)
            (work / "corpus.json").write_text(json.dumps(build_corpus(work, p["corpus_tokens"], order, cpt_share)))
            tokenizer = train_tokenizer(work / "pretrain.jsonl", work / "tokenizer", p["vocab"])
            write_model_config(work / "config.json", p, len(tokenizer))
        with contextlib.redirect_stdout(sys.stderr):
            for arm in ("clm", "mlm"):
                arms[f"{arm}-order{order}"] = run_arm(work, arm, p, order, threads)
    # Seed by seed, both arms each time: a run cut short still holds matched seeds for the two arms.
    for seed in p["ft_seeds"]:
        for name, arm in arms.items():
            with contextlib.redirect_stdout(sys.stderr):
                finetune(arm["encoder"], out / "eval", name, p, (seed,))
    return report(out, budget, {**facts, "arms": arms}, started)


def report(out: Path, budget: str, facts: dict, started: float | None = None) -> dict:
    """Analyse the fine-tuning runs there are (seeds finished for both arms at every lr) and write headline.*."""
    p = dict(PRESETS[budget])
    p["ft_seeds"] = tuple(seed for seed in p["ft_seeds"] if finished(out / "eval", seed, p))
    if not p["ft_seeds"]:
        raise SystemExit(f"error: no seed finished for both arms under {out / 'eval'}; run without --analyse-only")
    facts["seeds_analysed"] = list(p["ft_seeds"])
    for order in p["orders"]:
        corpus = out / f"order{order}" / "corpus.json"
        facts[f"corpus_order{order}"] = json.loads(corpus.read_text()) if corpus.is_file() else None
    facts["parameters"] = count_parameters(out / f"order{p['orders'][0]}" / "config.json")
    facts["tokens_per_arm"] = (p["pretrain_steps"] + p["cpt_steps"]) * p["batch"] * p["seq_len"]
    table = analyse(out / "eval", p)
    result = {**facts, "table": table, "wall_time_s": round(time.time() - started, 1) if started else None}
    (out / "headline.json").write_text(json.dumps(result, indent=1))
    (out / "headline.md").write_text(render(table, budget, facts["seeds_analysed"]))
    return result


def finished(out: Path, seed: int, p: dict) -> bool:
    from hf_encoderize.evaluation.config import lr_key

    return all((out / f"{arm}-order{order}" / family / FAMILIES[family] / f"lr{lr_key(lr)}_sd{seed}" /
                "results.json").is_file() for arm in ("clm", "mlm") for order in p["orders"] for family in FAMILIES
               for lr in p["ft_lrs"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=sorted(PRESETS), default="cpu",
                        help="tiny (seconds, a test), reduced[2], cpu (38 min measured on 2 cores), cpu2 (cpu + a "
                             "second data order), gpu (~10 min, H100, not run)")
    parser.add_argument("--out", default="runs/headline")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--analyse-only", action="store_true",
                        help="tabulate the fine-tuning runs already in --out (seeds finished for both arms)")
    args = parser.parse_args(argv)
    if args.analyse_only:
        result = report(Path(args.out), args.budget, {"budget": args.budget})
    else:
        result = run(args.budget, Path(args.out), args.threads)
    print(render(result["table"], args.budget, result["seeds_analysed"]))
    print(f"{result['parameters'] / 1e6:.1f}M parameters, {result['tokens_per_arm']:,} tokens per arm, "
          f"{result['wall_time_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
