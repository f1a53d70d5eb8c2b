"""Does `contrastive --mixed-precision bf16` train faster on this CPU, and to the same place? fp32 (the CPU default)
against bf16 autocast, side by side in one process, on the same encoder, texts and settings.

    python benchmarks/contrastive_precision.py --encoder runs/quickstart/encoder --data-files SENTENCES \
        [--teacher all-mpnet-base-v2] [--steps 40] [--batch-size 32] [--max-seq-length 24] [--threads 2]

With `--teacher` the stage is the quickstart's distillation (its settings: lr 5e-4, 30% warmup, one one-word edit per
text); without, SimCSE on the same texts. Each arm runs `contrastive()` itself, the user's path; a callback times
every optimizer step, and the first 3 steps (allocation, oneDNN kernel choice) are left out of the median. The arms
alternate (fp32, bf16, fp32, bf16 with `--repeats 2`) so a slower stretch of the machine does not land on one arm.
Prints one JSON object: seconds per step of each arm, their ratio (fp32 / bf16: above 1, bf16 is faster), the last
logged training loss of each and, when `benchmarks/topical_paraphrases.py`'s held-out set is there, both models'
figures on it. bf16 needs native CPU support to be fast (`lscpu`: avx512_bf16 or amx_bf16); elsewhere it is emulated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive


class StepClock(TrainerCallback):
    """Wall seconds of each optimizer step (step begin to step end)."""

    def __init__(self):
        self.seconds, self.losses, self._start = [], [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._start)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def run_arm(args, precision: str, out: Path) -> dict:
    """One `contrastive()` run with `--mixed-precision precision`, its step times and last logged loss."""
    import sentence_transformers

    clock, init = StepClock(), sentence_transformers.SentenceTransformerTrainer.__init__

    def with_clock(self, *a, **k):
        init(self, *a, **k)
        self.add_callback(clock)

    sentence_transformers.SentenceTransformerTrainer.__init__ = with_clock
    settings = dict(method="simcse", learning_rate=3e-5)
    if args.teacher:
        settings = dict(method="distill", teacher=args.teacher, learning_rate=5e-4, warmup_ratio=0.3,
                        distill_variants=1)
    try:
        contrastive(ContrastiveConfig(args.encoder, data_files=args.data_files, output_dir=str(out), overwrite=True,
                                      progress=False, steps=args.steps, batch_size=args.batch_size,
                                      max_seq_length=args.max_seq_length, seed=args.seed, mixed_precision=precision,
                                      **settings))
    finally:
        sentence_transformers.SentenceTransformerTrainer.__init__ = init
    timed = clock.seconds[3:] or clock.seconds
    return {"seconds_per_step": round(statistics.median(timed), 3), "steps_timed": len(timed),
            "last_loss": clock.losses[-1] if clock.losses else None}


def held_out_figures(folder: Path) -> dict | None:
    """The model's topical_paraphrases figures, when that benchmark sits beside this one."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from topical_paraphrases import score
    except ImportError:
        return None
    from sentence_transformers import SentenceTransformer

    return score(SentenceTransformer(str(folder), device="cpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", required=True, help="an encoder folder made by cpt")
    parser.add_argument("--data-files", required=True, help="texts (a `text` column), as contrastive reads them")
    parser.add_argument("--teacher", help="distill from this sentence-transformers folder (else SimCSE)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="fp32/bf16 pairs, alternating")
    parser.add_argument("--work", help="where the models go (default: a temporary folder)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="contrastive-precision-"))
    arms = {"no": [], "bf16": []}
    for repeat in range(args.repeats):
        for precision in arms:
            arms[precision].append(run_arm(args, precision, work / f"{precision}-{repeat}"))
    result = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": args.threads,
              "steps": args.steps, "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
              "method": "distill" if args.teacher else "simcse", "arms": arms}
    fp32 = statistics.median(row["seconds_per_step"] for row in arms["no"])
    bf16 = statistics.median(row["seconds_per_step"] for row in arms["bf16"])
    result["fp32_over_bf16_seconds_per_step"] = round(fp32 / bf16, 3)
    result["held_out"] = {precision: held_out_figures(work / f"{precision}-0") for precision in arms}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
