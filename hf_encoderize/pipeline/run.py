"""`hf-encoderize run MODEL`: continued pretraining, evaluation, model card and Hub push, in one output folder.

Design choices:
- Each stage is the library function its own command calls (`cpt`, `evaluation.evaluate`, `card.write_card`,
  `hub.push`), run in order with a banner; the folder is the state, so a re-run skips every stage whose output is
  already there and resumes the one that was interrupted (cpt from its newest checkpoint, eval from its finished
  fine-tuning runs).
- A finished cpt is only reused when it was made with the same settings; otherwise the run stops and says so rather
  than mixing two runs in one folder.
- The base model is evaluated with the same protocol so the card and the final table show what continued
  pretraining changed. The paper fine-tunes every model, CLM ones included, with bidirectional attention (section 2,
  "Fine-tuning protocol"), so that is the default mode for the base model too.
- The push is recorded (repo, revision, a fingerprint of the files, never the token) so an unchanged folder is not
  pushed twice.

Layout of OUT: encoder/ (the model and its README.md card), checkpoints/, run_record.json, metrics.jsonl,
loss_curve.png, eval/encoder/ and eval/base/ (summary.json, summary.md, plots), eval/comparison.md, push_record.json.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.validation import check_number

# Settings a finished cpt must share with this invocation to be reused (run_record key -> how to read the config).
CPT_IDENTITY = ("base_model", "gguf_file", "revision", "objective", "mask_ratio", "steps", "lr", "batch_size")


@dataclass
class RunConfig:
    """What `run` does after continued pretraining."""

    _: KW_ONLY
    eval_profile: str = "quick"
    """Evaluation after training: paper (the full protocol), quick (one lr, one seed), smoke (offline synthetic
    sets) or none."""
    eval_base: str = "bidirectional"
    """Also evaluate the base model, for the comparison: bidirectional (how the paper fine-tunes CLM models, section
    2), causal, or none."""
    eval_tasks: str | None = None
    """Comma-separated task families to evaluate: sc, tc, qa, ir (default: all of the profile's)."""
    eval_datasets: str | None = None
    """Comma-separated datasets to evaluate (default: the profile's)."""
    eval_max_steps: int | None = None
    """Most fine-tuning steps per evaluation run (default: the profile's)."""
    eval_data_dir: str | None = None
    """Local copies of the evaluation datasets (see `eval --data-dir`)."""
    base_model_id: str | None = None
    """Hub id of the base model for the card's metadata, when MODEL is a local folder or GGUF file."""
    contrastive: str = "none"
    """After cpt, make the encoder an embedding model in OUT/contrastive: simcse (on cpt's own text source),
    supervised (on `contrastive_data_files`), or none."""
    contrastive_data_files: str | None = None
    """supervised: JSON/JSONL/CSV/Parquet pairs or triplets with anchor, positive[, negative] columns."""
    contrastive_steps: int = 1000
    """Optimizer steps of the contrastive stage."""
    contrastive_batch_size: int = 64
    """Rows per step of the contrastive stage (in-batch negatives: larger is better; lower it on a CPU)."""
    contrastive_max_seq_length: int = 128
    """Tokens per text in the contrastive stage."""

    def __post_init__(self):
        if self.contrastive not in ("simcse", "supervised", "none"):
            raise EncoderizeError(f"--contrastive must be simcse, supervised or none, got {self.contrastive!r}")
        if self.contrastive == "supervised" and not self.contrastive_data_files:
            raise EncoderizeError("--contrastive supervised needs --contrastive-data-files (anchor, positive columns)")
        check_number("--contrastive-steps", self.contrastive_steps, minimum=1, integer=True)
        check_number("--contrastive-batch-size", self.contrastive_batch_size, minimum=2, integer=True)
        check_number("--contrastive-max-seq-length", self.contrastive_max_seq_length, minimum=1, integer=True)
        if self.eval_profile not in ("paper", "quick", "smoke", "none"):
            raise EncoderizeError(f"--eval-profile must be paper, quick, smoke or none, got {self.eval_profile!r}")
        if self.eval_base not in ("bidirectional", "causal", "none"):
            raise EncoderizeError(f"--eval-base must be bidirectional, causal or none, got {self.eval_base!r}")
        check_number("--eval-max-steps", self.eval_max_steps, minimum=1, integer=True)
        if self.eval_profile != "none":
            self.eval_config("encoder", "results")  # unknown tasks/datasets fail now, not after training

    def eval_config(self, name: str, output_dir: str, causal: bool = False):
        from hf_encoderize.evaluation import EvalConfig

        return EvalConfig(profile=self.eval_profile, tasks=self.eval_tasks, datasets=self.eval_datasets,
                          max_steps=self.eval_max_steps, data_dir=self.eval_data_dir, output_dir=output_dir,
                          name=name, causal=causal)


def banner(index: int, total: int, title: str, note: str = "") -> None:
    line = f"[{index}/{total}] {title}" + (f" -- {note}" if note else "")
    print(f"\n{'=' * 8} {line} {'=' * max(4, 100 - len(line))}", flush=True)


def cpt_done(out: Path, load, masking, train) -> bool:
    """True when OUT holds a finished cpt made with these settings; a one-line error when it was made otherwise."""
    record_path = out / "run_record.json"
    if not record_path.is_file() or not (out / "encoder" / "config.json").is_file():
        return False
    record = json.loads(record_path.read_text())
    wanted = {"base_model": load.source, "gguf_file": load.gguf_file, "revision": load.revision,
              "objective": masking.objective, "mask_ratio": masking.mask_ratio, "steps": train.steps, "lr": train.lr,
              "batch_size": train.batch_size}
    differs = [key for key in CPT_IDENTITY if record.get(key) != wanted[key]]
    if differs:
        raise EncoderizeError(f"{str(out)!r} holds a finished cpt with other settings ({', '.join(differs)}); "
                              "pass --overwrite to start over or pick a new --output-dir")
    return True


def stage_cpt(load, data, masking, train, adapter, out: Path) -> str:
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.checkpoints import list_checkpoints

    resume = not train.overwrite and bool(list_checkpoints(out))  # an interrupted cpt continues
    summary = cpt(load, data, masking, dataclasses.replace(train, resume=resume or train.resume), adapter)
    gc.collect()  # the trained model is not needed any more; free it before evaluation loads another
    return f"{summary['steps']} steps in {summary['wall_time_s']:.0f} s"


def stage_contrastive(data, run_cfg: RunConfig, out: Path) -> str:
    """`contrastive` on OUT/encoder into OUT/contrastive: SimCSE reads cpt's own text source."""
    from hf_encoderize.recipes.contrastive import ContrastiveConfig, contrastive, work_dir

    if run_cfg.contrastive == "supervised":
        source = {"data_files": run_cfg.contrastive_data_files}
    elif data.data_files:
        source = {"data_files": data.data_files, "text_column": data.text_column}
    else:
        source = {"dataset": data.dataset, "dataset_config": data.dataset_config, "split": data.split,
                  "text_column": data.text_column}
    resume = any(work_dir(out / "contrastive").glob("trainer/checkpoint-*"))  # an interrupted stage continues
    summary = contrastive(ContrastiveConfig(str(out / "encoder"), output_dir=str(out / "contrastive"),
                                            overwrite=not resume, resume=resume, objective=run_cfg.contrastive,
                                            steps=run_cfg.contrastive_steps,
                                            batch_size=run_cfg.contrastive_batch_size,
                                            max_seq_length=run_cfg.contrastive_max_seq_length, **source))
    return (f"{summary['steps']} steps on {summary['rows']} rows, "
            f"loss {summary['first_loss']} -> {summary['final_loss']}")


def eval_done(results: Path, profile: str) -> bool:
    summary = results / "summary.json"
    return summary.is_file() and json.loads(summary.read_text()).get("profile") == profile


def stage_eval(load, run_cfg: RunConfig, out: Path, name: str, causal: bool = False) -> dict:
    from hf_encoderize.evaluation import evaluate

    summary = evaluate(load, run_cfg.eval_config(name, str(out / "eval"), causal=causal))
    gc.collect()
    means = ", ".join(f"{task} {mean:.2f}" for task, mean in summary.get("family_means", {}).items())
    return f"{name}: {means} -> {out / 'eval' / name / 'summary.md'}"


def card_kept(out: Path) -> str | None:
    from hf_encoderize.model.saving import encoder_dir
    from hf_encoderize.publish.card import is_generated_card

    readme = encoder_dir(out) / "README.md"
    return None if is_generated_card(readme) else f"{readme} was written by hand, kept"


def stage_card(out: Path, run_cfg: RunConfig) -> str:
    """The encoder-vs-base comparison (eval/comparison.md and .png, pushed as plots), then the card."""
    from hf_encoderize.publish.card import CardConfig, write_card

    if run_cfg.eval_profile != "none":
        comparison(out)
    cards = [write_card(CardConfig(str(out), base_model_id=run_cfg.base_model_id))]
    if (out / "contrastive" / "contrastive_run.json").is_file():  # the embedding model gets its own card
        cards.append(write_card(CardConfig(str(out / "contrastive"), base_model_id=run_cfg.base_model_id)))
    return f"card: {', '.join(str(c) for c in cards)}"


def files_fingerprint(files: list[Path]) -> str:
    """Changes when a pushed file changes: content for small files (a regenerated but identical card counts as
    unchanged), size and modification time for weights."""
    digest = hashlib.sha256()
    for path in sorted(files):
        stat = path.stat()
        if stat.st_size < 10_000_000:
            digest.update(f"{path}:".encode() + hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _pushed_files(out: Path) -> list[Path]:
    from hf_encoderize.model.saving import encoder_dir
    from hf_encoderize.publish.card import plot_files

    return [p for p in encoder_dir(out).rglob("*") if p.is_file()] + [out / p for p in plot_files(out)]


def push_done(out: Path, hub) -> str | None:
    """Why the push can be skipped: the same files already went to the same repo and revision."""
    record_path = out / "push_record.json"
    if not record_path.is_file():
        return None
    record = json.loads(record_path.read_text())
    same_target = (record.get("repo_id"), record.get("revision")) == (hub.push_to_hub, hub.hub_revision or "main")
    unchanged = record.get("fingerprint") == files_fingerprint(_pushed_files(out))
    return f"{hub.push_to_hub} already has these files" if same_target and unchanged else None


def stage_push(out: Path, hub) -> str:
    from hf_encoderize.publish.hub import push_after

    files = push_after(out, hub)
    record = {"repo_id": hub.push_to_hub, "revision": hub.hub_revision or "main", "create_pr": hub.hub_create_pr,
              "files": files, "fingerprint": files_fingerprint(_pushed_files(out)),  # after the card was rewritten
              "pushed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "push_record.json").write_text(json.dumps(record, indent=2) + "\n")
    return f"pushed {len(files)} files to {hub.push_to_hub}"


def _hub_url() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def comparison(out: Path) -> str | None:
    """The encoder-vs-base table (Markdown) from the eval summaries, also written to OUT/eval/comparison.md."""
    from hf_encoderize.evaluation.compare import compare

    names = ("base", "encoder", "contrastive")  # base decoder, MLM encoder, embedding model: side by side
    folders = [str(out / "eval" / n) for n in names if (out / "eval" / n / "summary.json").is_file()]
    if not folders:
        return None
    return compare(folders, output_dir=str(out / "eval"))["table"]


@dataclass
class Stage:
    """One step of the pipeline: `done()` says why it can be skipped (or None), `action()` does it."""

    title: str
    done: Callable[[], str | None]
    action: Callable[[], str | None]


def plan(load, data, masking, train, adapter, run_cfg: RunConfig, hub, out: Path) -> list[Stage]:
    """The stages of this invocation, in order."""
    from hf_encoderize.model.loading import LoadConfig

    source = load.source + (f" ({load.gguf_file})" if load.gguf_file else "")
    stages = [Stage(f"cpt {source}: {train.steps} steps",
                    lambda: None if train.overwrite or not cpt_done(out, load, masking, train) else "finished earlier",
                    lambda: stage_cpt(load, data, masking, train, adapter, out))]
    if run_cfg.contrastive != "none":
        stages.append(Stage(f"contrastive {run_cfg.contrastive}: {run_cfg.contrastive_steps} steps",
                            lambda: "finished earlier" if (out / "contrastive" / "config.json").is_file() else None,
                            lambda: stage_contrastive(data, run_cfg, out)))
    if run_cfg.eval_profile != "none":
        stages.append(eval_stage(LoadConfig(str(out / "encoder")), "encoder", False, run_cfg, out))
        if run_cfg.contrastive != "none":
            stages.append(eval_stage(LoadConfig(str(out / "contrastive")), "contrastive", False, run_cfg, out))
        if run_cfg.eval_base != "none":
            stages.append(eval_stage(load, "base", run_cfg.eval_base == "causal", run_cfg, out))
    stages.append(Stage("model card", lambda: card_kept(out), lambda: stage_card(out, run_cfg)))
    if hub.push_to_hub:
        stages.append(Stage(f"push to {hub.push_to_hub}", lambda: push_done(out, hub), lambda: stage_push(out, hub)))
    return stages


def eval_stage(load, name: str, causal: bool, run_cfg: RunConfig, out: Path) -> Stage:
    results = out / "eval" / name
    return Stage(f"eval {name} ({run_cfg.eval_profile} profile, {'causal' if causal else 'bidirectional'} attention)",
                 lambda: "finished earlier" if eval_done(results, run_cfg.eval_profile) else None,
                 lambda: stage_eval(load, run_cfg, out, name, causal))


def run(load, data, masking, train, adapter, run_cfg: RunConfig, hub) -> dict:
    """cpt -> eval (encoder, then base) -> card -> push in one folder, skipping finished stages; returns where
    everything is."""
    if world_size() > 1:  # the eval and push stages would run once per process
        raise EncoderizeError("run is single-process: launch `cpt` with accelerate/torchrun, then the same `run` "
                              "command picks up the finished cpt")
    from hf_encoderize.publish.hub import check_push_ready
    from hf_encoderize.recipes.cpt import default_output_dir

    check_push_ready(hub)  # no token or offline mode fails now, not after hours of work
    out, started = Path(train.output_dir) if train.output_dir else default_output_dir(load), time.time()
    train = dataclasses.replace(train, output_dir=str(out))  # the caller's config is left as it was
    stages = plan(load, data, masking, train, adapter, run_cfg, hub, out)
    for index, stage in enumerate(stages, 1):
        skipped = stage.done()
        banner(index, len(stages), stage.title, f"{skipped}, skipped" if skipped else "")
        if not skipped and (note := stage.action()):
            print(note, flush=True)
    table_file = out / "eval" / "comparison.md"
    table = table_file.read_text().split("\n\n", 2)[-1] if table_file.is_file() else None  # after its header
    return report(out, table, hub.push_to_hub, time.time() - started)


def report(out: Path, table: str | None, repo_id: str | None, seconds: float) -> dict:
    """Print and return where everything is."""
    encoder = out / "encoder"
    places = {
        "encoder": str(encoder), "model card": str(encoder / "README.md"),
        "run record": str(out / "run_record.json"), "metrics": str(out / "metrics.jsonl"),
        "loss curve": str(out / "loss_curve.png"),
        "embedding model": str(out / "contrastive"),
        "eval (encoder)": str(out / "eval" / "encoder" / "summary.md"),
        "eval (embedding model)": str(out / "eval" / "contrastive" / "summary.md"),
        "eval (base)": str(out / "eval" / "base" / "summary.md"),
        "comparison": str(out / "eval" / "comparison.md"),
    }
    places = {k: v for k, v in places.items() if Path(v).exists()}
    if repo_id and (out / "push_record.json").is_file():
        places["hub"] = f"{_hub_url()}/{repo_id}"
    print(f"\n{'=' * 8} done in {seconds / 60:.1f} min {'=' * 80}", flush=True)
    if table:
        print(table)
    width = max(len(k) for k in places)
    for key, value in places.items():
        print(f"{key:<{width}}  {value}")
    print(f'\nLoad it: AutoModel.from_pretrained("{encoder}") or SentenceTransformer("{encoder}")', flush=True)
    sys.stdout.flush()
    return {"output_dir": str(out), "places": places, "table": table, "wall_time_s": seconds}
