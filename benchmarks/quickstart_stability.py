"""Is the quickstart's CPT stage stable? Its 80 steps re-run under other seeds and thread counts.

The quickstart's table did not reproduce on another machine (issue 43): the base's held-out MLM loss agreed to 4e-8,
then the 80 CPT steps diverged (grad norms 140-260 in the first steps) and the encoder's scores flipped sign against
the base. Another machine rounds differently (other vector units); on one machine the run is deterministic, even
across thread counts (seed 0 gave held-out loss 5.608937771876951 with 1 thread and with 2, every logged step equal),
so threads cannot stand in for another machine. Seeds can: they redraw the masks and the data order, a larger
perturbation than rounding, which 80 chaotic steps amplify the same way. The spread over seeds bounds what another
machine may print; the sign of encoder minus base that holds over seeds is what a reader can rely on.

For each setting (LR:WARMUP: the quickstart's and the candidates), each seed and each thread count,
the quickstart's CPT stage runs exactly as `quickstart` configures it (`pipeline.quickstart.cpt_configs`), each run
in its own process (thread counts cannot change inside one). Printed as JSON: per run the held-out loss before and
after, the largest and the median gradient norm (before clipping) of the first 10 steps, and per setting the spread
of the final held-out loss over seeds and the largest gap between thread counts at the same seed; with --evaluate,
each encoder scored as the quickstart scores it (frozen, its seeds and head rates) and per family the range over runs.

    OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 python benchmarks/quickstart_stability.py \\
        --settings 1e-4:16 5e-5:16 --seeds 0 1 2 --evaluate --out /tmp/qs-stability
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one(out: Path, seed: int, threads: int, lr: float, warmup: int, steps: int, evaluate: bool) -> dict:
    """One CPT run of the quickstart's stage, in this process; returns its figures."""
    import dataclasses

    import torch

    torch.set_num_threads(threads)
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.pipeline.quickstart import QuickstartConfig, cpt_configs, write_corpus
    from hf_encoderize.recipes.cpt import cpt

    corpus = write_corpus(out.parent / "corpus")
    load, data, train = cpt_configs(QuickstartConfig(output_dir=str(out), steps=steps, overwrite=True), corpus)
    # No checkpoint mid-run (model + AdamW state is ~1.6 GB): only the final encoder is saved.
    train = dataclasses.replace(train, seed=seed, lr=lr, warmup_steps=warmup, log_every=1, save_every=10 * steps)
    started = time.time()
    if not (out / "run_record.json").is_file():  # a finished run is reused
        cpt(load, data, MaskingConfig(), train)
    record = json.loads((out / "run_record.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    norms = [r["grad_norm"] for r in rows if r.get("grad_norm") is not None][:10]
    return {"seed": seed, "threads": threads, "lr": lr, "warmup": warmup,
            "initial_eval_loss": record.get("initial_eval_loss"), "eval_loss": record.get("eval_loss"),
            "first10_grad_norm_max": max(norms) if norms else None,
            "first10_grad_norm_median": statistics.median(norms) if norms else None,
            "seconds": round(time.time() - started, 1), **(scores(out) if evaluate else {})}


def scores(out: Path) -> dict:
    """The encoder's quickstart evaluation (frozen, the quickstart's seeds, head steps and learning rates): family
    means, and per family the test scores of every seed at the chosen rate."""
    from hf_encoderize.evaluation import evaluate
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.pipeline.quickstart import QuickstartConfig, eval_settings

    config = eval_settings(QuickstartConfig()).of("encoder", str(out / "eval"))
    summary = evaluate(LoadConfig(str(out / "encoder")), config)
    return {"family_means": summary["family_means"],
            "best_lr": {r["task"]: r["best_lr"] for r in summary["results"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["1e-4:16"],
                        help="LR:WARMUP pairs (the quickstart's is 1e-4:16, a fifth of 80 steps)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--out", default="/tmp/qs-stability")
    parser.add_argument("--evaluate", action="store_true", help="score each encoder as the quickstart does")
    parser.add_argument("--one", nargs=4, metavar=("SEED", "THREADS", "LR", "WARMUP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out)
    if args.one:
        seed, threads, lr, warmup = int(args.one[0]), int(args.one[1]), float(args.one[2]), int(args.one[3])
        print(json.dumps(one(out, seed, threads, lr, warmup, args.steps, args.evaluate)))
        return
    runs = []
    for setting in args.settings:
        lr, warmup = setting.split(":")
        for seed in args.seeds:
            for threads in args.threads:
                folder = out / f"lr{lr}-w{warmup}" / f"seed{seed}-t{threads}"
                env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
                done = subprocess.run([sys.executable, __file__, "--out", str(folder), "--steps", str(args.steps),
                                       *(["--evaluate"] if args.evaluate else []),
                                       "--one", str(seed), str(threads), lr, warmup],
                                      env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"run {folder} failed:\n{done.stderr[-3000:]}")
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    summary = {}
    for setting in args.settings:
        lr, warmup = float(setting.split(":")[0]), int(setting.split(":")[1])
        mine = [r for r in runs if r["lr"] == lr and r["warmup"] == warmup]
        finals = [r["eval_loss"] for r in mine]
        pairs = [(a, b) for a in mine for b in mine if a["seed"] == b["seed"] and a["threads"] < b["threads"]]
        gaps = [abs(a["eval_loss"] - b["eval_loss"]) for a, b in pairs]
        summary[setting] = {"final_eval_loss_mean": statistics.mean(finals),
                            "final_eval_loss_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                            "initial_eval_loss": mine[0]["initial_eval_loss"],
                            "max_thread_gap": max(gaps) if gaps else None,
                            "first10_grad_norm_max": max(r["first10_grad_norm_max"] or 0 for r in mine)}
        if args.evaluate:
            families = mine[0]["family_means"]
            summary[setting]["family_means"] = {
                family: {"mean": statistics.mean(r["family_means"][family] for r in mine),
                         "min": min(r["family_means"][family] for r in mine),
                         "max": max(r["family_means"][family] for r in mine),
                         "max_thread_gap": max((abs(a["family_means"][family] - b["family_means"][family])
                                                for a, b in pairs), default=None)}
                for family in families}
    print(json.dumps({"runs": runs, "settings": summary}, indent=2))


if __name__ == "__main__":
    main()
