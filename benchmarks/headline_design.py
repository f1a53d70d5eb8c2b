"""The headline's next design (issue 50): what `headline.py`'s cpu presets lacked to show section 5.

    python benchmarks/headline_design.py --budget gpu-pilot --prepare-only --out runs/design   # on the CPU
    python benchmarks/headline_design.py --budget gpu-pilot --out runs/design                  # on the GPU
    python benchmarks/headline_design.py --budget design-cpu --out runs/design-cpu             # 1 h 47 min, 2 cores

Design choices (each answers a limit docs/headline.md lists for the cpu runs):
- Base rows: every base is fine-tuned before any CPT too, so the table shows what each CPT added.
- Two CPT lengths from the same base (`cpt_steps`, separate runs, each ending decayed), since the paper's sign
  changes with the CPT length (Tables 14-17: the CLM base is behind on SC, QA and IR after 2K steps, ahead after 22K).
- A learning-rate grid of three rates, a factor ~3 apart, around the cpu runs' choice (5e-4 won 7 of 8 picks at the
  top of a 2-rate grid); a choice at the grid's edge is flagged in the table.
- 4 data orders per arm, analysed with the order as the unit (`bootstrap.difference_test`, calibrated in
  `headline_stats.py`); 1 fine-tuning seed per order in the pilot (the orders carry the variance that matters).
- Longer bases: the tokens per parameter each base saw is printed (the cpu runs: 0.09).
- The predictions (examples/headline/predictions_design.md) were committed before any run of this module.
- `gpu-pilot` is a pilot: at `deadline_s` (540 s after it starts, for one 15-minute GPU window) it stops a base or
  CPT under way at a step boundary (`headline_deadline`; the phase is recorded as PARTIAL) and starts no further
  fine-tuning run, then analyses the whole orders that finished; its output says PILOT. The report after the deadline
  is not bounded by it. `--prepare-only` builds the texts, tokenizers and configs on the CPU and leaves a compact
  carry (`headline_corpus`: the texts gzipped once, each order's split re-made where training runs), so the GPU's
  minutes go to training and what it receives stays under 64 MiB.

Writes OUT/design.json and OUT/design.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import headline as hl  # noqa: E402
import headline_corpus as hc  # noqa: E402
import headline_deadline as hd  # noqa: E402

TINY = dict(corpus_tokens=60_000, vocab=384, hidden=32, layers=2, heads=2, intermediate=64, seq_len=32, batch=4,
            lr=3e-3, cpt_lr=1e-3, eval_documents=8)
PRESETS = {
    # Seconds of CPU: the chain with base rows, two CPT lengths and two orders; says nothing about the claim.
    "design-tiny": dict(**TINY, pretrain_steps=6, cpt_steps=(2, 4), ft_lrs=(5e-4,), ft_seeds=(0,), ft_steps=3,
                        orders=(0, 1), deadline_s=None, pilot=False),
    # The design on two CPU cores (sized for an hour from a probe's ~0.15 s a step and ~1.6 s a fine-tuning run; it
    # took 1 h 47 min: ~1,605 s an order for 3,360 training steps and 144 fine-tuning runs, so about (1,605 - 3,360 x
    # 0.15) / 144 = 7.6 s a fine-tuning run if the steps took the probe's time): a
    # 2.1M-parameter model so the bases see ~1.2 tokens per parameter (cpu2: 0.09), 1,200 base steps, CPT at 10% and
    # 30% of them, 4 orders, 2 fine-tuning seeds per order.
    "design-cpu": dict(corpus_tokens=3_000_000, vocab=4096, hidden=128, layers=4, heads=4, intermediate=512,
                       seq_len=128, batch=16, pretrain_steps=1200, cpt_steps=(120, 360), lr=1e-3, cpt_lr=5e-4,
                       ft_lrs=(1.5e-4, 5e-4, 1.5e-3), ft_seeds=(0, 1), ft_steps=60, orders=(0, 1, 2, 3),
                       deadline_s=None, pilot=False),
    # One 15-minute GPU window: 4 orders x 2 arms x (base + 2 CPT lengths) = 24 encoders, 3 rates, 1 seed, 96 fine-
    # tuning calls of 3 rates; not measured: the deadline stops it (training at a step boundary) and the report says
    # how far it got.
    "gpu-pilot": dict(corpus_tokens=12_000_000, **hl.ELEVEN_M, seq_len=256, batch=64, pretrain_steps=1000,
                      cpt_steps=(100, 300), lr=1e-3, cpt_lr=5e-4, ft_lrs=(1.5e-4, 5e-4, 1.5e-3), ft_seeds=(0,),
                      ft_steps=60, orders=(0, 1, 2, 3), deadline_s=540, pilot=True),
    # The full design, costed in docs/headline.md from the pilot once it runs: 3 seeds, bases of 3,000 steps.
    "gpu-design": dict(corpus_tokens=12_000_000, **hl.ELEVEN_M, seq_len=256, batch=64, pretrain_steps=3000,
                       cpt_steps=(300, 1000), lr=1e-3, cpt_lr=5e-4, ft_lrs=(1.5e-4, 5e-4, 1.5e-3), ft_seeds=(0, 1, 2),
                       ft_steps=60, orders=(0, 1, 2, 3), deadline_s=None, pilot=False),
}
# examples/headline/predictions_design.md, committed before any run: per CPT length, CLM+MLM minus MLM+MLM.
# short: the paper's 2K column (5% of the base's steps); long: its 12K column (29%), the nearest to our 30-33%.
PREDICTED = {"short": {"sc": "<", "tc": ">", "qa": "<", "ir": "<"},
             "long": {"sc": "~", "tc": ">", "qa": "<", "ir": "~"}}
# The paper's figures the predictions came from (CLM+MLM, MLM+MLM; Tables 14-17, 610M, as predictions_design.md lists
# them): the 2K CPT column for the short CPT, the 12K column for the long one. Their differences are the effects the
# power columns ask about.
PAPER = {"short": {"sc": (85.39, 87.08), "tc": (92.88, 92.16), "qa": (47.85, 63.56), "ir": (78.57, 80.42)},
         "long": {"sc": (87.84, 87.61), "tc": (92.77, 92.27), "qa": (63.21, 66.57), "ir": (80.27, 79.92)}}
MARGIN = 2.0  # score points: "≈" matches only when the 90% interval over orders lies within ±2 (TOST at 5%)


def models(p: dict) -> list[str]:
    """Model names per order: each arm's base, then its CPT at each length."""
    return [f"{arm}-{stage}" for arm in ("clm", "mlm") for stage in ("base", *(f"cpt{n}" for n in p["cpt_steps"]))]


def train_phase(name: str, folder: Path, planned: int, train, deadline: float | None, built: dict) -> bool:
    """Run one training phase (`train()`, a `pretrain` or `cpt` call) under the deadline; True when it finished.
    Its held-out loss and seconds go into `built`; a phase the deadline cut is recorded there as PARTIAL instead."""
    started = time.time()
    try:
        with hd.phase_deadline(deadline):
            done = train()
    except hd.DeadlineReached as stopped:
        built["partial"] = hd.partial_record(folder, name, stopped, planned, time.time() - started)
        return False
    built["eval_loss"][name] = done.get("eval_loss")
    built["seconds"][name] = round(time.time() - started, 1)
    return True


def base_on_cpt_documents(folder: Path) -> float | None:
    """The base's held-out MLM loss on the CPT's held-out documents, scored by `cpt` before its first step (its run
    record's `initial_eval_loss`): the base's figure on the same documents as the CPT's own `eval_loss`."""
    from hf_encoderize.common.run_folder import RunFolder

    record = RunFolder(folder).run_record
    return json.loads(record.read_text()).get("initial_eval_loss") if record.is_file() else None


def design_arm(work: Path, arm: str, p: dict, order: int, deadline: float | None = None) -> dict:
    """One base (`clm:1.0` or `mlm:1.0`), then MLM CPT of it at each length: {"encoders": {model: folder}, "eval_loss",
    "base_on_cpt_documents", "seconds": per model trained now; "partial": the phase a deadline cut, if one was}."""
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain
    from hf_encoderize.training.train_config import TrainConfig

    common = dict(batch_size=p["batch"], eval_every=0, log_every=50, progress=False, overwrite=True, seed=order,
                  save_every=10**9, keep_last=1)
    data = {name: DataConfig(data_files=str(work / f"{name}.jsonl"), seq_len=p["seq_len"],
                             eval_documents=p.get("eval_documents", 64)) for name in ("pretrain", "cpt")}
    base_dir = work / f"{arm}-base"
    built = {"encoders": {}, "eval_loss": {}, "base_on_cpt_documents": {}, "seconds": {}, "partial": None}
    if not (base_dir / "encoder").is_dir():
        spec = PretrainConfig(model_config=str(work / "config.json"), tokenizer=str(work / "tokenizer"),
                              schedule=f"{arm}:1.0")
        config = TrainConfig(output_dir=str(base_dir), steps=p["pretrain_steps"], lr=p["lr"], **common)
        if not train_phase(f"{arm}-base", base_dir, p["pretrain_steps"], deadline=deadline, built=built,
                           train=lambda: pretrain(spec, data["pretrain"], MaskingConfig(), config)):
            return built
    built["encoders"][f"{arm}-base"] = str(base_dir / "encoder")
    for steps in p["cpt_steps"]:
        folder, name = work / f"{arm}-cpt{steps}", f"{arm}-cpt{steps}"
        if not (folder / "encoder").is_dir():
            config = TrainConfig(output_dir=str(folder), steps=steps, lr=p["cpt_lr"], **common)
            if not train_phase(name, folder, steps, deadline=deadline, built=built, train=lambda c=config: cpt(
                    LoadConfig(str(base_dir / "encoder")), data["cpt"], MaskingConfig(mask_ratio=0.4), c)):
                return built
        built["encoders"][name] = str(folder / "encoder")
        built["base_on_cpt_documents"][name] = base_on_cpt_documents(folder)
    return built


def comparisons(p: dict) -> list[tuple[str, str, str]]:
    """(label, CLM side, MLM side): the bases, then CLM+MLM against MLM+MLM at each CPT length."""
    short, long = min(p["cpt_steps"]), max(p["cpt_steps"])
    rows = [("bases, no CPT", "clm-base", "mlm-base")]
    return rows + [(f"CPT {n} steps ({'short' if n == short else 'long' if n == long else n})", f"clm-cpt{n}",
                    f"mlm-cpt{n}") for n in p["cpt_steps"]]


def score_row(predicted: str, test: dict, family: str, units: list[float], differences: list[float]) -> str:
    """`headline.score_prediction`, except that "≈" is tested: TOST within ±MARGIN over the orders."""
    from hf_encoderize.evaluation.stats import paired_t

    if predicted == "~" and test["direction"] == "~":
        interval = paired_t(differences, alpha=0.10)
        if interval["low"] is not None and -MARGIN < interval["low"] and interval["high"] < MARGIN:
            return f"match (within ±{MARGIN:g})"
        return f"null (not shown within ±{MARGIN:g})"
    return hl.score_prediction(predicted, test["direction"], hl.above_chance(family, units))


def analyse(out: Path, p: dict) -> list[dict]:
    """Per comparison and family: each side's lr (chosen on validation; `edge` when at the grid's end), test mean ±
    CI over the orders, the library's test of the difference and, for the CPT rows, the prediction scored."""
    from hf_encoderize.evaluation.bootstrap import difference_test

    rows = []
    for label, a, b in comparisons(p):
        length = length_of(label)
        for family in hl.FAMILIES:
            sides, parts = {}, {}
            for side in (a, b):
                runs = {o: hl.read_runs(out, f"{side}-order{o}", family, p) for o in p["orders"]}
                validation = {lr: sum(r["validation"]["score"] for o in runs for r in runs[o][lr])
                              for lr in p["ft_lrs"]}
                best = max(p["ft_lrs"], key=lambda lr: validation[lr])
                parts[side] = hl.arm_parts(runs, family, best)
                units = hl.unit_scores(family, parts[side])
                mean, half = hl.hs.mean_ci(units)
                edge = len(p["ft_lrs"]) > 1 and best in (min(p["ft_lrs"]), max(p["ft_lrs"]))
                sides[side] = {"lr": best, "edge": edge, "mean": mean, "ci": half, "units": units}
            test = difference_test(family, parts[a], parts[b])
            differences = [x - y for x, y in zip(sides[a]["units"], sides[b]["units"], strict=True)]
            predicted = PREDICTED[length][family] if length else None
            leader = sides[a] if test["difference"] > 0 else sides[b]
            scored = score_row(predicted, test, family, leader["units"], differences) if predicted else "-"
            rows.append({"comparison": label, "family": family, "clm": sides[a], "mlm": sides[b], "test": test,
                         "predicted": predicted, "scored": scored})
    return rows


def plateau_lines(result: dict) -> list[str]:
    """One line: each base's training loss over its last tenth of steps and how much it fell from the tenth before."""
    cells = [f"{name} {v['loss_last']:.3f} ({-v['drop']:+.3f})" for name, v in result.get("base_plateau", {}).items()
             if v]
    return [f"Bases' training loss over their last tenth of steps (change from the tenth before): {', '.join(cells)}."
            ] if cells else []


def length_of(label: str) -> str | None:
    return "short" if "short" in label else "long" if "long" in label else None


def power_cells(row: dict) -> tuple[str, str]:
    """The row's smallest difference the paired t over its orders detects with 80% power, and its power at the paper's
    effect (for "≈", the TOST's chance to confirm ≈ if the paper's effect were exactly true), at the orders' observed
    spread of the differences (`headline_stats.t_power`, `tost_power`); "-" where there is no prediction."""
    differences = [a - b for a, b in zip(row["clm"]["units"], row["mlm"]["units"], strict=True)]
    if len(differences) < 2 or statistics.stdev(differences) == 0:
        return "not testable", "-"
    sd, n = statistics.stdev(differences), len(differences)
    smallest = f"±{hl.hs.detectable(sd, n):.1f}"
    if not row["predicted"]:
        return smallest, "-"
    a, b = PAPER[length_of(row["comparison"])][row["family"]]
    if row["predicted"] == "~":
        return smallest, f"{hl.hs.tost_power(a - b, sd, n, MARGIN):.1%} (≈ at {a - b:+.2f})"
    return smallest, f"{hl.hs.t_power(a - b, sd, n):.1%} at {a - b:+.2f}"


def render_row(row: dict) -> str:
    """One table line of a comparison and family (docs/headline.md's table is these lines)."""
    t = row["test"]["t"]
    t_cell = f"not testable ({t['reason']})" if t["p_value"] is None else f"{t['p_value']:.3f}"
    if t.get("low") is not None:
        t_cell += f" [{t['low']:+.2f}, {t['high']:+.2f}]"
    cells = [f"{s['mean']:.2f} ± {s['ci']:.2f} ({s['lr']:g}{'*' if s['edge'] else ''})"
             for s in (row["clm"], row["mlm"])]
    smallest, power = power_cells(row)
    return (f"| {row['comparison']} | {row['family'].upper()} | {cells[0]} | {cells[1]} | "
            f"{row['test']['difference']:+.2f} | {t_cell} | {row['predicted'] or '-'} | {row['scored']} | {smallest} | "
            f"{power} |")


TABLE_HEAD = ("| comparison | family | CLM side (lr) | MLM side (lr) | diff | t over orders: p [95% CI] | predicted | "
              "scored | detectable, 80% power | power at the paper's effect |\n" + "|---" * 10 + "|")


def render(result: dict) -> str:
    rows, p = result["rows"], PRESETS[result["budget"]]
    scored = [r for r in rows if r["predicted"]]
    matches = sum(r["scored"].startswith("match") for r in scored)
    head = ("**PILOT: sized for one GPU window, 1 seed; a check of the design and its costs, not a result.**\n\n"
            if p["pilot"] else "**design-tiny: a smoke test of the chain. These scores say nothing about the paper's "
            "claim.**\n\n" if result["budget"] == "design-tiny" else "")
    stopped = result.get("stopped_at_deadline")
    lines = [f"{head}Budget `{result['budget']}`: {len(result['orders_analysed'])} data orders analysed "
             f"{result['orders_analysed']}, {result['base_tokens_per_parameter']:.2f} pretraining tokens per parameter "
             f"per base. Scored as pre-registered (examples/headline/predictions_design.md): {matches} of "
             f"{len(scored)} predictions match. A difference needs the t-test over the orders and the bootstrap to "
             "exclude zero; * marks a learning rate at the grid's edge.", "",
             *([f"Stopped at the deadline: {json.dumps(stopped)}", ""] if stopped else []),
             *plateau_lines(result), "", TABLE_HEAD, *map(render_row, rows)]
    return "\n".join(lines) + "\n"


def complete_orders(out: Path, p: dict) -> list[int]:
    """The orders whose every model finished every family, rate and seed (a pilot cut short keeps whole orders)."""
    from hf_encoderize.evaluation.config import lr_key

    return [o for o in p["orders"] if all(
        (out / f"{m}-order{o}" / f / hl.FAMILIES[f] / f"lr{lr_key(lr)}_sd{s}" / "results.json").is_file()
        for m in models(p) for f in hl.FAMILIES for lr in p["ft_lrs"] for s in p["ft_seeds"])]


def plateau(metrics: Path) -> dict | None:
    """How flat a base's training loss ends: the mean over the last tenth of its steps against the tenth before (a
    drop near 0 is a plateau; the cpu runs' bases were still falling steeply)."""
    if not metrics.is_file():
        return None
    losses = [row["loss"] for row in map(json.loads, metrics.read_text().splitlines()) if row.get("kind") == "train"]
    tenth = len(losses) // 10 or (1 if len(losses) >= 2 else 0)
    if tenth < 1:
        return None
    before, last = losses[-2 * tenth:-tenth], losses[-tenth:]
    return {"loss_before": sum(before) / len(before), "loss_last": sum(last) / len(last),
            "drop": sum(before) / len(before) - sum(last) / len(last)}


def report(out: Path, budget: str, facts: dict) -> dict:
    """Analyse the orders that finished every model; a pilot that finished none still writes its facts (its costs)."""
    p = dict(PRESETS[budget])
    p["orders"] = tuple(complete_orders(out / "eval", p))
    if not p["orders"] and not facts.get("stopped_at_deadline"):
        raise SystemExit(f"error: no data order finished under {out / 'eval'}")
    parameters = hl.count_parameters(out / f"order{PRESETS[budget]['orders'][0]}" / "config.json")
    result = {**facts, "budget": budget, "orders_analysed": list(p["orders"]), "parameters": parameters,
              "base_tokens_per_parameter": p["pretrain_steps"] * p["batch"] * p["seq_len"] / parameters,
              "base_plateau": {f"{arm}-order{o}": plateau(out / f"order{o}" / f"{arm}-base" / "metrics.jsonl")
                               for o in p["orders"] for arm in ("clm", "mlm")},
              "rows": analyse(out / "eval", p) if p["orders"] else []}
    (out / "design.json").write_text(json.dumps(result, indent=1))
    (out / "design.md").write_text(render(result))
    return result


def run(budget: str, out: Path, threads: int = 1, prepare_only: bool = False, started: float | None = None,
        ) -> dict | None:
    """Prepare every order (with `prepare_only`: that alone, leaving a compact carry); else train and fine-tune order
    by order until the deadline (`deadline_s` after `started`, default now), which stops a training phase at a step
    boundary (`headline_deadline`)."""
    import torch

    torch.set_num_threads(threads)
    p, started = PRESETS[budget], started or time.time()
    facts = {"losses": {}, "base_on_cpt_documents": {}, "train_s": {}, "wall_s": {}}
    works = [hl.prepare_order(out, p, order) for order in p["orders"]]
    if prepare_only:
        hc.compact(out)
        return None
    deadline = started + p["deadline_s"] if p["deadline_s"] else None
    for order, work in zip(p["orders"], works, strict=True):
        for arm in ("clm", "mlm"):
            with contextlib.redirect_stdout(sys.stderr):
                built = design_arm(work, arm, p, order, deadline)
            facts["losses"][f"{arm}-order{order}"] = built["eval_loss"]
            facts["base_on_cpt_documents"][f"{arm}-order{order}"] = built["base_on_cpt_documents"]
            facts["train_s"][f"{arm}-order{order}"] = built["seconds"]
            if built["partial"]:
                facts["stopped_at_deadline"] = {**built["partial"], "order": order}
            (out / "facts.json").write_text(json.dumps(facts, indent=1))  # kept for --report-only
            for name, encoder in built["encoders"].items():
                if deadline and time.time() > deadline:
                    facts.setdefault("stopped_at_deadline", {"model": f"{name}-order{order}", "status":
                                                             "fine-tuning not started at the deadline"})
                    return report(out, budget, facts)
                with contextlib.redirect_stdout(sys.stderr):
                    hl.finetune(encoder, out / "eval", f"{name}-order{order}", p, p["ft_seeds"])
            if built["partial"]:
                return report(out, budget, facts)
        facts["wall_s"][f"order{order}"] = round(time.time() - started, 1)
        (out / "facts.json").write_text(json.dumps(facts, indent=1))
    return report(out, budget, facts)


def install_wheels(folder: str, site_parent: Path) -> str:
    """Install the carried wheels (scripts/gpu_wheels.sh) the way the prepared GPU session does
    (`gpu_check.check_wheels`: into SITE_PARENT/site, first on the path, every requirement then checked), so a GPU image
    without a package index runs the pilot; this checkout's hf_encoderize stays first."""
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "scripts"))
    import gpu_check

    context = gpu_check.Context(site_parent, False, timeout_s=300.0, deadline=time.time() + 300.0, baselines="")
    context.logs.mkdir(parents=True, exist_ok=True)
    try:
        said, _ = gpu_check.check_wheels(context, folder)
    except (gpu_check.CheckFailed, gpu_check.Skip) as failed:
        raise SystemExit(f"error: --wheels {folder}: {failed}") from None
    sys.path.insert(0, str(repo))
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=sorted(PRESETS), default="gpu-pilot")
    parser.add_argument("--out", default="runs/headline-design")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--prepare-only", action="store_true", help="corpora, tokenizers, configs; no training")
    parser.add_argument("--report-only", action="store_true",
                        help="analyse the orders that finished under OUT (a run stopped early); no training")
    parser.add_argument("--wheels", help="install this folder's wheels first (a GPU machine without a package index)")
    args = parser.parse_args(argv)
    started = time.time()  # the deadline counts the wheels' install too: the GPU window does
    if args.wheels:
        print(install_wheels(args.wheels, Path("/tmp/headline-wheels")), file=sys.stderr)
    if args.report_only:
        facts_file = Path(args.out) / "facts.json"
        facts = json.loads(facts_file.read_text()) if facts_file.is_file() else {"losses": {}, "wall_s": {}}
        result = report(Path(args.out), args.budget, facts)
    else:
        result = run(args.budget, Path(args.out), args.threads, args.prepare_only, started)
    if result is not None:
        print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
