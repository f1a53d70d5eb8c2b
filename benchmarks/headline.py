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
  about code, a long way from the reviews, places and facts the synthetic tests probe (`headline_corpus`: read once
  into OUT/texts.jsonl.gz, each data order's split made from it).
- A byte-level BPE (8k for the real presets) is trained in-process on the pretraining split.
- The CPT reads a held-apart slice of the corpus (documents the bases never saw), the same slice for both arms.
- The learning rate is chosen per arm and family on validation (mean over seeds), as the paper does; the test scores
  at that rate give the mean ± 95% CI over the top-level unit (seeds for one data order, the orders' means for two
  or more) and the library's test of the difference (`evaluation.bootstrap.difference_test`): a t-test over that unit
  and a bootstrap that redraws orders, seeds and test examples must both exclude zero. Its false-alarm rate under
  three nulls is simulated in `headline_stats.py` (docs/headline.md, "What the statistics are").
- The predictions (examples/headline/predictions.md, written before any run) come from Tables 14-17; this script
  measures, then scores each as written: match, null or reversed (`score_prediction`).

Writes OUT/headline.json and OUT/headline.md, and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import headline_corpus as hc  # noqa: E402
import headline_folder  # noqa: E402
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
    # Never run, so no time is measured; superseded by headline_design.py's GPU presets: ~11M tokens per arm from
    # the ~12M the environment holds, 5 seeds, a second data order per arm.
    "gpu": dict(corpus_tokens=12_000_000, **ELEVEN_M, seq_len=256, batch=64, pretrain_steps=500, cpt_steps=170,
                lr=1e-3, cpt_lr=5e-4, ft_lrs=(2e-4, 5e-4), ft_seeds=(0, 1, 2, 3, 4), ft_steps=30, orders=(0, 1)),
}


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


CHANCE = {"sc": 50.0}  # the synthetic SC test set is balanced binary; the other families have no fixed chance level


def arm_parts(runs: dict, family: str, lr: float):
    """(orders, seeds, examples, k) per-example parts of one arm at one learning rate (`bootstrap.order_parts`)."""
    from hf_encoderize.evaluation.bootstrap import order_parts

    parts = order_parts(family, [runs[order][lr] for order in sorted(runs)])
    if parts is None:
        raise SystemExit(f"error: the {family} runs lack per-example test scores the bootstrap needs; re-run them")
    return parts


def unit_scores(family: str, parts) -> list[float]:
    """The top-level unit's scores: each seed's for one order, each order's seed mean for two or more."""
    from hf_encoderize.evaluation.bootstrap import run_scores

    runs = run_scores(family, parts)  # (O, S): each run's test score
    return [float(x) for x in (runs[0] if runs.shape[0] == 1 else runs.mean(axis=1))]


def above_chance(family: str, scores: list[float]) -> bool:
    """Whether the arm is above its family's chance level (its 95% t interval over the units excludes it)."""
    if family not in CHANCE:
        return True
    mean, half = hs.mean_ci(scores)
    return len(scores) > 1 and mean - half > CHANCE[family]


def score_prediction(predicted: str, observed: str, leader_above_chance: bool = True) -> str:
    """match / null / reversed (or contradicted, for a predicted ≈) as pre-registered (examples/headline/
    predictions.md): > or < needs the test's difference on that side; ≤ is met by < or no difference; ≈ cannot be
    confirmed without an equivalence margin, so no difference scores null. A difference whose leading arm is at
    chance is null: neither arm learnt the task."""
    if observed == "not testable":
        return "not testable"
    if observed in (">", "<") and not leader_above_chance:
        return "null (at chance)"
    if predicted == "~":
        return "null (no margin)" if observed == "~" else "contradicted"
    if predicted == "<=":
        return {"<": "match", "~": "match (no difference, which ≤ allows)"}.get(observed, "reversed")
    return "match" if observed == predicted else "null" if observed == "~" else "reversed"


def analyse(out: Path, p: dict) -> dict:
    """Per family: the lr each arm picks on validation (mean over orders and seeds), the test scores there, the
    library's test of the difference (`bootstrap.difference_test`: orders as the unit when there are two or more)
    and the prediction scored."""
    from hf_encoderize.evaluation.bootstrap import difference_test, run_scores

    table = {}
    for family in FAMILIES:
        arms, parts = {}, {}
        for arm in ("clm", "mlm"):
            runs = {order: read_runs(out, f"{arm}-order{order}", family, p) for order in p["orders"]}
            validation = {lr: sum(r["validation"]["score"] for o in runs for r in runs[o][lr]) for lr in p["ft_lrs"]}
            best = max(p["ft_lrs"], key=lambda lr: validation[lr])
            parts[arm] = arm_parts(runs, family, best)
            units = unit_scores(family, parts[arm])
            mean, half = hs.mean_ci(units)
            arms[arm] = {"lr": best, "mean": mean, "ci": half, "units": units,
                         "scores": [float(x) for x in run_scores(family, parts[arm]).ravel()]}
        test = difference_test(family, parts["clm"], parts["mlm"])
        leader = "clm" if test["difference"] > 0 else "mlm"
        scored = score_prediction(PREDICTED[family], test["direction"], above_chance(family, arms[leader]["units"]))
        table[family] = {**arms, "test": test, "predicted": PREDICTED[family], "observed": test["direction"],
                         "scored": scored}
    return table


def verdict(table: dict, orders: int, tokens_per_parameter: float) -> str:
    """The summary line: each prediction scored as written, the count, and what this run can and cannot show."""
    matches = [f.upper() for f, row in table.items() if row["scored"].startswith("match")]
    scored = "; ".join(f"{f.upper()} {row['scored']}" for f, row in table.items())
    where = (f"at {tokens_per_parameter:.2f} pretraining tokens per parameter, which cannot show whether Tables 14-17 "
             "hold (the paper's bases are converged, 610M)")
    scope = (f"One data order per arm: a comparison of two checkpoints {where}, nor which recipe is better "
             "(pretraining variance is outside every test)." if orders == 1 else
             f"{orders} data orders per arm, the order as the unit: a test of the two recipes {where}, only how "
             "they compare this early in pretraining.")
    return (f"Scored as pre-registered: {len(matches)} of {len(table)} predictions match"
            f"{' (' + ', '.join(matches) + ')' if matches else ''}: {scored}. {scope}")


def render(table: dict, budget: str, seeds: list[int], orders: int = 1, tokens_per_parameter: float = 0.0) -> str:
    unit = "seeds" if orders == 1 else "data orders"
    redrawn = "seeds and test examples" if orders == 1 else "orders, seeds within them and test examples"
    lines = [verdict(table, orders, tokens_per_parameter), "",
             f"Budget `{budget}`, {orders} data order(s) x seeds {seeds}: CLM+MLM CPT vs MLM+MLM CPT, full "
             "fine-tuning, test scores (0-100), mean ± 95% CI over the " + unit + " at the lr chosen on validation; "
             "diff = CLM+MLM - MLM+MLM. A difference (> or <) needs both the t-test over the " + unit +
             " and the bootstrap (" + redrawn + " redrawn) to exclude zero; ~ means at least one "
             "does not, which is not equivalence.", ""]
    if budget == "tiny":
        lines += ["**tiny: a smoke test of the chain. These scores say nothing about the paper's claim.**", ""]
    lines += [f"| family | CLM+MLM (lr) | MLM+MLM (lr) | diff | t over {unit}: p [95% CI] | bootstrap [95% CI] | "
              "observed | predicted | scored |", "|---|---|---|---|---|---|---|---|---|"]
    for family, row in table.items():
        t, boot = row["test"]["t"], row["test"]["bootstrap"]
        cells = [f"{row[arm]['mean']:.2f} ± {row[arm]['ci']:.2f} ({row[arm]['lr']:g})" for arm in ("clm", "mlm")]
        t_cell = f"{t['p_value']:.3f}" if t["p_value"] is not None else f"not testable ({t['reason']})"
        if t.get("low") is not None:
            t_cell += f" [{t['low']:+.2f}, {t['high']:+.2f}]"
        lines.append(f"| {family.upper()} | {cells[0]} | {cells[1]} | {row['test']['difference']:+.2f} | {t_cell} | "
                     f"[{boot['low']:+.2f}, {boot['high']:+.2f}] | {row['observed']} | {row['predicted']} | "
                     f"{row['scored']} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------- main


def cpt_share(p: dict) -> float:
    """The share of the documents held apart for the CPT: the longest CPT's share of the steps."""
    longest = max(p["cpt_steps"]) if isinstance(p["cpt_steps"], tuple) else p["cpt_steps"]
    return longest / (p["pretrain_steps"] + longest)


def prepare_order(out: Path, p: dict, order: int) -> Path:
    """OUT/orderN: the corpus split, the BPE and the model config of one data order (CPU work, done once; the texts
    are read once for every order into OUT/texts.jsonl.gz). A split left out of a compact carry is re-made here."""
    from biphasic_small import train_tokenizer

    work, texts = out / f"order{order}", out / hc.TEXTS
    if not (work / "config.json").is_file():
        if not texts.is_file():
            hc.write_texts(texts, hc.collect_texts(p["corpus_tokens"]))
        corpus = hc.split_order(hc.read_texts(texts), work, order, cpt_share(p))
        (work / "corpus.json").write_text(json.dumps(corpus))
        tokenizer = train_tokenizer(work / "pretrain.jsonl", work / "tokenizer", p["vocab"])
        write_model_config(work / "config.json", p, len(tokenizer))
    hc.ensure_split(work, texts, order, cpt_share(p))
    return work


def run(budget: str, out: Path, threads: int = 1) -> dict:
    """The whole chain for one preset; returns what headline.json holds."""
    import torch

    torch.set_num_threads(threads)
    p, started, arms = PRESETS[budget], time.time(), {}
    if refused := headline_folder.check(out, budget, PRESETS):
        raise SystemExit(refused)
    out.mkdir(parents=True, exist_ok=True)
    headline_folder.record(out, budget, p)
    facts = {"budget": budget, "preset": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}}
    for order in p["orders"]:
        work = prepare_order(out, p, order)
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
    facts["base_tokens_per_parameter"] = p["pretrain_steps"] * p["batch"] * p["seq_len"] / facts["parameters"]
    table = analyse(out / "eval", p)
    result = {**facts, "orders": len(p["orders"]), "table": table,
              "wall_time_s": round(time.time() - started, 1) if started else None}
    (out / "headline.json").write_text(json.dumps(result, indent=1))
    (out / "headline.md").write_text(rendered(result))
    return result


def rendered(result: dict) -> str:
    return render(result["table"], result["budget"], result["seeds_analysed"], result["orders"],
                  result["base_tokens_per_parameter"])


def finished(out: Path, seed: int, p: dict) -> bool:
    from hf_encoderize.evaluation.config import lr_key

    return all((out / f"{arm}-order{order}" / family / FAMILIES[family] / f"lr{lr_key(lr)}_sd{seed}" /
                "results.json").is_file() for arm in ("clm", "mlm") for order in p["orders"] for family in FAMILIES
               for lr in p["ft_lrs"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=sorted(PRESETS), default="cpu",
                        help="tiny (seconds, a test), reduced[2], cpu (38 min measured on 2 cores), cpu2 (cpu + a "
                             "second data order), gpu (never run; superseded by headline_design.py)")
    parser.add_argument("--out", default="runs/headline")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--analyse-only", action="store_true",
                        help="tabulate the fine-tuning runs already in --out (seeds finished for both arms)")
    args = parser.parse_args(argv)
    if refused := headline_folder.check(Path(args.out), args.budget, PRESETS):
        print(refused, file=sys.stderr)
        return 2
    if args.analyse_only:
        result = report(Path(args.out), args.budget, {"budget": args.budget})
    else:
        result = run(args.budget, Path(args.out), args.threads)
    print(rendered(result))
    wall = f", {result['wall_time_s']:.0f} s" if result.get("wall_time_s") else ""
    print(f"{result['parameters'] / 1e6:.1f}M parameters, {result['tokens_per_arm']:,} tokens per arm, "
          f"{result['base_tokens_per_parameter']:.3f} pretraining tokens per parameter per base{wall}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
