"""Do small bases on this corpus ever leave section 3's regime? The probe pre-registered in
examples/headline/predictions_probe.md (issue 71, point 5), committed before this code and before any run.

    python benchmarks/headline_probe.py --budget probe-cpu --out runs/probe --threads 2   # ~2 h on 2 idle cores
    python benchmarks/headline_probe.py --budget probe-tiny --out /tmp/probe             # seconds: the smoke test

Design choices (the registered design; everything not named is `design-cpu`'s):
- `design-cpu`'s model, corpus split and tokenizer per order (`headline.prepare_order` with its preset's sizes and
  CPT share), orders 0-3.
- Per order and objective, one base run to `long_steps` (3,600) with a checkpoint at `branch_at` (960), and a branch
  from that checkpoint (`--from-checkpoint`) that ends at `short_steps` (1,200) decayed: warmup 240 in both, the decay
  each run's default (the last fifth: 240 and 720 steps), so the 1,200-step base has `design-cpu`'s schedule.
- The control: `pretrain` run for 1 step at lr 1e-12 from the same seed, which moves no weight by fp32's resolution
  (an update of ~1e-12 on weights of ~1e-2), so the saved encoder is the bases' own random initialisation, saved by
  the same path.
- Fine-tuning on TC and QA only, the grid one step up from `design-cpu`'s (5e-4, 1.5e-3, 5e-3), 2 seeds.
- Scored as registered: per family, d_o = gap_o(short) - gap_o(long) with gap = CLM base minus MLM base; the paired t
  over the orders (`evaluation.stats.paired_t`) above zero is "match" (the gap shrinks), below "reversed", else null.

Writes OUT/probe.json and OUT/probe.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import headline as hl  # noqa: E402
import headline_design as design  # noqa: E402

FAMILIES = ("tc", "qa")
PRESETS = {
    # Seconds: the chain (long base, branch, control, fine-tuning, scoring) on design-tiny's sizes; says nothing.
    "probe-tiny": dict(design.PRESETS["design-tiny"], long_steps=10, short_steps=6, branch_at=4, warmup=2),
    # The registered probe.
    "probe-cpu": dict(design.PRESETS["design-cpu"], long_steps=3600, short_steps=1200, branch_at=960, warmup=240,
                      ft_lrs=(5e-4, 1.5e-3, 5e-3)),
}
MODELS = ("clm-short", "mlm-short", "clm-long", "mlm-long", "random")


def train_bases(work: Path, arm: str, p: dict, order: int) -> dict:
    """The long base (checkpoint at `branch_at`) and its decayed branch at `short_steps`: {model: encoder folder}."""
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.checkpoints import checkpoint_dir
    from hf_encoderize.training.train_config import TrainConfig

    spec = PretrainConfig(model_config=str(work / "config.json"), tokenizer=str(work / "tokenizer"),
                          schedule=f"{arm}:1.0")
    data = pretrain_data(work, p)
    common = dict(batch_size=p["batch"], eval_every=0, log_every=50, progress=False, overwrite=True, seed=order,
                  lr=p["lr"], warmup_steps=p["warmup"])
    long_dir, short_dir = work / f"probe-{arm}-long", work / f"probe-{arm}-short"
    if not (long_dir / "encoder").is_dir():  # a long run stopped after a checkpoint goes on from it (`--resume`)
        resume = any((long_dir / "checkpoints").glob("step-*"))
        pretrain(spec, data, MaskingConfig(), TrainConfig(output_dir=str(long_dir), steps=p["long_steps"],
                                                          save_every=p["branch_at"], keep_last=10**6,
                                                          **{**common, "overwrite": not resume}, resume=resume))
    if not (short_dir / "encoder").is_dir():
        branch = checkpoint_dir(long_dir, p["branch_at"])
        pretrain(spec, data, MaskingConfig(), TrainConfig(output_dir=str(short_dir), steps=p["short_steps"],
                                                          from_checkpoint=str(branch), save_every=10**9, keep_last=1,
                                                          **common))
    return {f"{arm}-long": str(long_dir / "encoder"), f"{arm}-short": str(short_dir / "encoder")}


def pretrain_data(work: Path, p: dict):
    from hf_encoderize.data.sources import DataConfig

    return DataConfig(data_files=str(work / "pretrain.jsonl"), seq_len=p["seq_len"],
                      eval_documents=p.get("eval_documents", 64))


def random_control(work: Path, p: dict, order: int) -> str:
    """The bases' random initialisation, saved as an encoder: 1 step at lr 1e-12 (no weight moves in fp32)."""
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.train_config import TrainConfig

    folder = work / "probe-random"
    if not (folder / "encoder").is_dir():
        spec = PretrainConfig(model_config=str(work / "config.json"), tokenizer=str(work / "tokenizer"),
                              schedule="mlm:1.0")
        pretrain(spec, pretrain_data(work, p), MaskingConfig(),
                 TrainConfig(output_dir=str(folder), steps=1, lr=1e-12, batch_size=p["batch"], eval_every=0,
                             progress=False, overwrite=True, seed=order, save_every=10**9, keep_last=1))
    return str(folder / "encoder")


def finetune(encoder: str, out: Path, name: str, p: dict) -> None:
    """Full fine-tuning on TC and QA alone, every rate and seed (runs finished earlier are skipped)."""
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    cfg = EvalConfig(profile="smoke", tasks=",".join(FAMILIES), lrs=",".join(map(str, p["ft_lrs"])),
                     seeds=",".join(map(str, p["ft_seeds"])), max_steps=p["ft_steps"], output_dir=str(out), name=name,
                     frozen=False)
    evaluate(LoadConfig(encoder), cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))


def side(out: Path, model: str, family: str, p: dict) -> dict:
    """One model's lr (chosen on validation over orders and seeds; `edge` at the grid's end) and per-order units."""
    runs = {o: hl.read_runs(out, f"{model}-order{o}", family, p) for o in p["orders"]}
    validation = {lr: sum(r["validation"]["score"] for o in runs for r in runs[o][lr]) for lr in p["ft_lrs"]}
    best = max(p["ft_lrs"], key=lambda lr: validation[lr])
    units = hl.unit_scores(family, hl.arm_parts(runs, family, best))
    return {"lr": best, "edge": best in (min(p["ft_lrs"]), max(p["ft_lrs"])), "units": units}


def score_shrink(short_gaps: list[float], long_gaps: list[float]) -> dict:
    """The registered test: d = gap(short) - gap(long) per order; the paired t's 95% interval above zero is a match."""
    from hf_encoderize.evaluation.stats import paired_t

    shrink = [a - b for a, b in zip(short_gaps, long_gaps, strict=True)]
    t = paired_t(shrink)
    scored = ("null" if t["low"] is None or t["low"] <= 0 <= t["high"] else "match" if t["low"] > 0 else "reversed")
    return {"shrink": shrink, "t": t, "scored": scored}


def analyse(out: Path, p: dict) -> dict:
    """Per family: each model's side, the gaps per order at each length, the shrink scored; and the verdict."""
    families = {}
    for family in FAMILIES:
        sides = {m: side(out, m, family, p) for m in MODELS}
        gaps = {n: [a - b for a, b in zip(sides[f"clm-{n}"]["units"], sides[f"mlm-{n}"]["units"], strict=True)]
                for n in ("short", "long")}
        families[family] = {"sides": sides, "gaps": gaps, **score_shrink(gaps["short"], gaps["long"])}
    matches = sum(f["scored"] == "match" for f in families.values())
    verdict = "shrinks" if matches == len(FAMILIES) else "does not shrink" if matches == 0 else "mixed"
    return {"families": families, "verdict": verdict}


def base_facts(folder: Path) -> dict:
    """One base's run, from its metrics.jsonl: the last held-out evaluation (its target and loss, on the pretraining
    part's first held-out documents, the same for every base of the order) and the mean training loss over the last
    tenth of its steps."""
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [line for line in lines if line.get("kind") == "eval"]
    train = [line for line in lines if line.get("kind") == "train" and line.get("loss") is not None]
    last = evals[-1] if evals else {}
    steps = max((line["step"] for line in train), default=0)
    tail = [line["loss"] for line in train if line["step"] > 0.9 * steps]
    target = ("masked" if "eval_masked_accuracy" in last
              else "next token" if "eval_next_token_accuracy" in last else None)
    return {"eval_target": target, "eval_loss": last.get("eval_loss"),
            "train_loss_last_tenth": sum(tail) / len(tail) if tail else None, "steps": steps}


def reported(out: Path, result: dict) -> dict:
    """What predictions_probe.md lists as reported, not scored: the gaps at each length with their intervals, each
    model against the random-init control (paired over orders), the bases' held-out loss and last-tenth training
    loss per order, and the learning-rate picks at the grid's edge."""
    from hf_encoderize.evaluation.stats import paired_t

    orders = result["orders"]
    families = {}
    for family, row in result["families"].items():
        sides, random = row["sides"], row["sides"]["random"]["units"]
        families[family] = {
            "gaps": {n: paired_t(row["gaps"][n]) for n in ("short", "long")},
            "above_random": {m: paired_t([a - b for a, b in zip(sides[m]["units"], random, strict=True)])
                             for m in MODELS if m != "random"},
            "picks": {m: {"lr": sides[m]["lr"], "edge": sides[m]["edge"]} for m in MODELS}}
    bases = {f"{arm}-{n}-order{o}": base_facts(out / f"order{o}" / f"probe-{arm}-{n}")
             for o in orders for arm in ("clm", "mlm") for n in ("short", "long")}
    return {"families": families, "bases": bases}


def power_cells(row: dict, orders: int) -> tuple[str, str]:
    """What a null can mean (issue 71, point 2), from `headline_stats` at the shrinks' own order-to-order spread: the
    smallest true shrink the paired t over `orders` detects with 80% power, and its power at a shrink that closes the
    short bases' whole mean gap (the gap gone at 3,600 steps)."""
    import statistics

    import headline_stats as hs

    sd = statistics.stdev(row["shrink"]) if len(row["shrink"]) > 1 else 0.0
    if not sd:
        return "n/a (no spread)", "n/a"
    closed = abs(statistics.fmean(row["gaps"]["short"]))
    return f"{hs.detectable(sd, orders):.1f}", f"{hs.t_power(closed, sd, orders):.0%} (at {closed:.1f})"


def render(result: dict) -> str:
    tiny = result["budget"] == "probe-tiny"
    smoke = "**probe-tiny: a smoke test of the chain; it says nothing.**\n\n" if tiny else ""
    lines = [f"{smoke}Budget `{result['budget']}`, orders {result['orders']}: the CLM-minus-MLM base gap "
             f"{result['verdict']} from {result['short_steps']} to {result['long_steps']} steps (scored as registered "
             "in examples/headline/predictions_probe.md).", "",
             "| family | gap per order, short | gap per order, long | shrink: p [95% CI] | scored "
             "| detectable, 80% power | power if the gap closed |", "|---" * 7 + "|"]
    for family, row in result["families"].items():
        t = row["t"]
        cell = "not testable" if t["p_value"] is None else f"{t['p_value']:.3f} [{t['low']:+.2f}, {t['high']:+.2f}]"
        gaps = [", ".join(f"{g:+.1f}" for g in row["gaps"][n]) for n in ("short", "long")]
        detectable, power = power_cells(row, len(result["orders"]))
        lines.append(f"| {family.upper()} | {gaps[0]} | {gaps[1]} | {cell} | {row['scored']} | {detectable} "
                     f"| {power} |")
    return "\n".join(lines) + "\n"


def run(budget: str, out: Path, threads: int = 1, orders: tuple[int, ...] | None = None) -> dict | None:
    """Train and fine-tune every order (or `orders` alone: several processes can share the orders, each then
    returns None), then analyse them all once each is done (finished bases and runs are never redone)."""
    import torch

    torch.set_num_threads(threads)
    p, started = PRESETS[budget], time.time()
    for order in orders if orders is not None else p["orders"]:
        work = hl.prepare_order(out, p, order)
        with contextlib.redirect_stdout(sys.stderr):
            encoders = {**train_bases(work, "clm", p, order), **train_bases(work, "mlm", p, order),
                        "random": random_control(work, p, order)}
            for name, encoder in encoders.items():
                finetune(encoder, out / "eval", f"{name}-order{order}", p)
    if orders is not None and set(orders) != set(p["orders"]):
        return None
    result = {"budget": budget, "orders": list(p["orders"]), "short_steps": p["short_steps"],
              "long_steps": p["long_steps"], **analyse(out / "eval", p), "wall_s": round(time.time() - started, 1)}
    result["reported"] = reported(out, result)
    (out / "probe.json").write_text(json.dumps(result, indent=1))
    (out / "probe.md").write_text(render(result))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=sorted(PRESETS), default="probe-cpu")
    parser.add_argument("--out", default="runs/headline-probe")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--render", metavar="PROBE_JSON", help="print a finished probe's table (adding what it "
                        "reports, unscored, where the JSON lacks it); run nothing")
    parser.add_argument("--orders", help="train and fine-tune only these orders (e.g. 0,1), for a process of "
                        "several; run again without it to analyse")
    args = parser.parse_args(argv)
    if args.render:  # a probe written before `reported` existed gains it from its folder (the JSON's parent)
        path = Path(args.render)
        result = json.loads(path.read_text())
        if "reported" not in result:
            result["reported"] = reported(path.parent, result)
            path.write_text(json.dumps(result, indent=1))
        print(render(result), end="")
        return 0
    orders = tuple(int(o) for o in args.orders.split(",")) if args.orders else None
    result = run(args.budget, Path(args.out), args.threads, orders)
    print(render(result) if result else f"orders {args.orders} done; run without --orders to analyse them all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
