"""`EvalConfig`: the fine-tuning protocol and the grid it expands to.

Defaults follow the paper (section 2, "Fine-tuning protocol"): learning rates 1e-5, 2e-5, 5e-5, 1e-4, 2e-4 and 5e-4,
five seeds, batch size 32, at most 1,000 steps or one epoch (whichever comes first), 10% warmup then linear decay,
learning rate chosen on validation. Three profiles set the grid; every knob can be overridden by its flag.

Where the paper is silent we follow the authors' evaluation code (EncodEval, branch MLM_vs_CLM): the AdamW settings
(configs/*/*.yaml) and, in the paper profile, the input length: the model's own limit, 0.99 x its positions
(encodeval/eval_tasks/abstract_eval.py: `max_length` unset in every config, then `round(0.99 * max_length)`).
"""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, RESUME, identity
from hf_encoderize.common.run_folder import run_model_results
from hf_encoderize.common.validation import check_choice, check_number
from hf_encoderize.evaluation.loaders import DATASETS, REAL, SYNTHETIC, TASKS, DatasetSource

PAPER_LRS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4)  # section 2, "Fine-tuning protocol"
MODEL_LIMIT_FRACTION = 0.99  # EncodEval abstract_eval.py: `round(0.99 * max_length)`, "Apply 1% buffer"
PROFILES = {
    # max_length None: the model's limit, round(0.99 x positions), for every task (the authors' EncodEval).
    "paper": dict(datasets=tuple(s.name for s in REAL), lrs=PAPER_LRS, seeds=(0, 1, 2, 3, 4), max_steps=1000,
                  batch_size=32, max_length=None, max_eval_examples=None),
    # One mid-grid learning rate, one seed, a fifth of the steps, capped evaluation sets, and a shorter input length
    # than the paper's (512 tokens; 2,048 for MLDR, the long-document set): a quick look, not the paper's protocol.
    "quick": dict(datasets=tuple(s.name for s in REAL), lrs=(5e-5,), seeds=(0,), max_steps=200, batch_size=32,
                  max_length=512, max_eval_examples=2000),
    # Offline synthetic sets sized for CI on two CPU cores (about a minute of CPU for MiniLM, all four families).
    # 2e-4 is in the paper's grid and lets a pretrained encoder adapt within 30 steps.
    "smoke": dict(datasets=tuple(s.name for s in SYNTHETIC if s.name != "syn-qa-v2"), lrs=(2e-4,), seeds=(0,),
                  max_steps=30, batch_size=16, max_length=64, max_eval_examples=None),
}
SMOKE_SIZES = {"train": 640, "test": 200}


@dataclass(frozen=True)
class Grid:
    """The resolved grid: which datasets, learning rates and seeds, and the per-run budget."""

    datasets: tuple[str, ...]
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    max_steps: int
    batch_size: int
    max_length: int | None
    """None: the model's limit, round(0.99 x its positions) (paper profile)."""
    max_eval_examples: int | None

    @property
    def runs(self) -> int:
        return len(self.datasets) * len(self.lrs) * len(self.seeds)


def _split_list(text) -> list[str] | None:
    """"a,b c" (a flag) or [a, b] (a YAML list) -> ["a", "b"]."""
    if text is None:
        return None
    if isinstance(text, list | tuple):
        return [str(item) for item in text]
    return [item.strip() for item in str(text).replace(" ", ",").split(",") if item.strip()]


def protocol(key: str | None = None, kind=RESUME) -> dict:
    """Field metadata: how a setting counts for "same evaluation?" (`common.identity`) and, when it shapes every
    fine-tuning run, the `protocol()` key it is recorded under (several AdamW fields make one `optimizer`). A field
    without a key but counting is an axis of the grid (tasks, datasets, learning rates, seeds): a run's folder says
    where on it the run lies, and `run`'s reuse of a whole evaluation compares it."""
    return {**identity(kind), **({"protocol": key} if key else {})}


@dataclass
class EvalConfig:
    """How to fine-tune and score the model: profile, grid, protocol and where results go."""

    INPUTS = ("data_dir",)  # what an output folder stays apart from (`common.outputs.inputs_of`)

    _: KW_ONLY
    profile: Literal["paper", "quick", "smoke"] = field(default="quick", metadata=protocol("synthetic_sizes"))
    """quick (the 12 datasets with one lr, one seed, 200 steps; `run`'s default too), paper (the full protocol: 6
    learning rates, 5 seeds) or smoke (small synthetic offline sets, no Hub)."""
    tasks: str | None = field(default=None, metadata=protocol())
    """Comma-separated task families to run: sc, tc, qa, ir (default: all of the profile's)."""
    datasets: str | None = field(default=None, metadata=protocol())
    """Comma-separated datasets: sst2, mnli, qqp, conll2003, ontonotes5, uner, squad, squad_v2, record, msmarco, nq,
    mldr, or the synthetic syn-sentiment, syn-entities, syn-qa, syn-qa-v2, syn-retrieval (default: the profile's)."""
    lrs: str | None = field(default=None, metadata=protocol())
    """Comma-separated learning rates (paper: 1e-5,2e-5,5e-5,1e-4,2e-4,5e-4)."""
    seeds: str | None = field(default=None, metadata=protocol())
    """Comma-separated seeds (paper: 0,1,2,3,4)."""
    max_steps: int | None = field(default=None, metadata=protocol("max_steps"))
    """Most optimizer steps per run; a run stops earlier after one epoch (paper: 1000)."""
    batch_size: int | None = field(default=None, metadata=protocol("batch_size"))
    """Examples per step (paper: 32)."""
    warmup_ratio: float = field(default=0.1, metadata=protocol("warmup_ratio"))
    """Fraction of steps with linear warmup, then linear decay to 0 (paper: 10%)."""
    batching: Literal["random", "length"] = field(default="random", metadata=protocol("batching"))
    """How fine-tuning batches are drawn: random (each epoch a fresh seeded shuffle) or length (batches of similar
    lengths, from length-sorted runs of 50 batches, as `group_by_length`: less padding, so faster, but IR's in-batch
    negatives then share a length range). Runs recorded before this option were length-grouped.

    random: the authors' EncodEval configs train through transformers' Trainer without group_by_length."""
    max_length: int | None = field(default=None, metadata=protocol("max_length"))
    """Most tokens per input, capped at the model's positions (paper profile: the model's limit, round(0.99 x its
    positions); quick: 512, 2,048 for MLDR; smoke: 64). QA splits longer contexts into strided windows.

    The paper profile's limit is the authors' EncodEval's."""
    adam_beta1: float = field(default=0.9, metadata=protocol("optimizer"))
    """AdamW beta1.

    0.9: the authors' EncodEval configs; the paper names no optimiser settings."""
    adam_beta2: float = field(default=0.95, metadata=protocol("optimizer"))
    """AdamW beta2.

    0.95: the authors' EncodEval configs."""
    adam_epsilon: float = field(default=1e-5, metadata=protocol("optimizer"))
    """AdamW epsilon.

    1e-5: the authors' EncodEval configs."""
    weight_decay: float = field(default=0.1, metadata=protocol("optimizer"))
    """AdamW weight decay, not applied to biases and norm weights.

    0.1: the authors' EncodEval configs, through transformers' Trainer, which exempts those."""
    qa_stride: int = field(default=128, metadata=protocol("qa_stride"))
    """Tokens shared by consecutive QA windows of a long context."""
    ndcg_gains: Literal["binary", "graded"] = field(default="binary", metadata=protocol("ndcg_gains"))
    """binary (default, the paper profile's: EncodEval counts a qrels score of 1 or more as relevant, gain 1) or graded
    (linear gains, pytrec_eval's): which NDCG@10 is the IR score. Both are reported for sets with graded judgments."""
    max_eval_examples: int | None = field(default=None, metadata=protocol("max_eval_examples"))
    """Cap on validation and test examples (queries for IR) per dataset (quick profile: 2000)."""
    output_dir: str | None = field(default=None, metadata=protocol(kind=HARMLESS))
    """Results go to OUTPUT_DIR/<model name>/<task>/<dataset>/lr<lr>_sd<seed>/results.json, plus the summary.
    Default: RUN/eval for a run's RUN/encoder or RUN/contrastive (as RUN/eval/encoder, where `card RUN` and `push`
    read it), else results."""
    name: str | None = field(default=None, metadata=protocol(kind=HARMLESS))
    """Model name used for the results folder (default: encoder or contrastive for a run's model, else the folder or
    repo name; `-causal` added with --causal)."""
    data_dir: str | None = field(default=None, metadata=protocol(kind=HARMLESS))
    """Local copies of the datasets: DIR/<dataset>/<split>.parquet or .jsonl in the Hub schema, used instead of the
    Hub."""
    dataset_source: DatasetSource = field(default="authors", metadata=protocol("dataset_source"))
    """authors (the Hub copies the authors' EncodEval loads: hgissbkh/conll2003-en, BeIR/msmarco, ...) or original
    (the upstream repos: eriktks/conll2003, microsoft/ms_marco, Tevatron/wikipedia-nq, Shitao/MLDR, ...)."""
    frozen: bool = field(default=False, metadata=protocol("frozen"))
    """Train only the task head on the model's frozen last hidden states (a linear probe; retrieval trains a linear
    map of the pooled embedding), for `--max-steps` steps over as many epochs as that takes. Each input is encoded
    once and shared by every seed and learning rate, so seeds cost almost nothing. Not the paper's protocol (it
    fine-tunes the whole model); the quickstart uses it to afford several seeds on a CPU."""
    causal: bool = field(default=False, metadata=protocol())  # recorded as the fingerprint's `mode`
    """Fine-tune a decoder with its causal mask kept, an ablation outside the paper's protocol (it fine-tunes every
    model, CLM-pretrained ones included, with bidirectional attention).

    The paper's protocol: section 2, "Fine-tuning protocol"."""
    device: str = field(default="auto", metadata=protocol(kind=HARMLESS))
    """auto (GPU when there is one), cpu, cuda or cuda:N."""
    report_to: str = field(default="none", metadata=protocol(kind=HARMLESS))
    """Comma-separated trackers to log each fine-tuning run's validation and test scores to (Accelerate's, as cpt):
    tensorboard, wandb, trackio, mlflow, comet_ml, aim, clearml, dvclive; or none. The step is the run's position in
    the grid; tensorboard writes under OUTPUT_DIR/<model name>/trackers/."""
    mteb: str | None = field(default=None, metadata=protocol(kind=HARMLESS))
    """Comma-separated MTEB tasks: task names (e.g. STS12, STSBenchmark, SciFact, NFCorpus, Banking77Classification;
    any name `mteb.get_tasks()` knows, its data loaded from the Hub) or local BEIR folders (corpus.jsonl,
    queries.jsonl, qrels/<split>.tsv). Scores the model's sentence embeddings zero-shot with the mteb package (the
    `mteb` extra) instead of running the fine-tuning suite. Uses --batch-size (encoding),
    --max-seq-length, --device, --name and --output-dir; results go to OUTPUT_DIR/<name>/mteb/."""

    def __post_init__(self):
        for name in ("profile", "dataset_source", "ndcg_gains", "batching"):  # the Literal's values, declared above
            check_choice(f"--{name.replace('_', '-')}", getattr(self, name), EvalConfig, name)
        check_number("--warmup-ratio", self.warmup_ratio, minimum=0, below=1)
        for name in ("adam_beta1", "adam_beta2"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=0, below=1)
        check_number("--adam-epsilon", self.adam_epsilon, above=0)
        check_number("--weight-decay", self.weight_decay, minimum=0)
        for name in ("max_steps", "batch_size", "max_length", "max_eval_examples", "qa_stride"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)
        if self.name is not None and (self.name in ("", ".", "..") or Path(self.name).name != self.name
                                      or "\\" in self.name):
            raise EncoderizeError(f"--name {self.name!r} must be a plain folder name (no '/', '..' or drive): it names "
                                  "the results folder inside --output-dir")
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", str(self.device)):
            raise EncoderizeError(f"unknown --device {self.device!r}; use auto, cpu, cuda or cuda:N")
        grid = self.grid()  # also refuses an unknown task/dataset or an empty grid before anything loads
        for lr in grid.lrs:
            check_number("--learning-rates", lr, above=0)
        for seed in grid.seeds:
            check_number("--seeds", seed, minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range

    def grid(self) -> Grid:
        """The profile's defaults with the flags applied."""
        defaults = PROFILES[self.profile]
        tasks = _split_list(self.tasks)
        for task in tasks or []:
            if task not in TASKS:
                raise EncoderizeError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")  # `loaders.Task`
        names = _split_list(self.datasets)
        for name in names or []:
            if name not in DATASETS:
                raise EncoderizeError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
        names = names if names is not None else list(defaults["datasets"])
        names = [n for n in dict.fromkeys(names) if tasks is None or DATASETS[n].task in tasks]
        names.sort(key=lambda n: (TASKS.index(DATASETS[n].task), list(DATASETS).index(n)))
        lrs = ([self._number(v, float, "--learning-rates") for v in _split_list(self.lrs)] if self.lrs is not None
            else list(defaults["lrs"]))
        seeds = ([self._number(v, int, "--seeds") for v in _split_list(self.seeds)] if self.seeds is not None
            else list(defaults["seeds"]))
        if not names or not lrs or not seeds:
            empty = "datasets" if not names else "learning rates" if not lrs else "seeds"
            raise EncoderizeError(f"empty grid: no {empty} left to run; check --tasks, --datasets, --learning-rates "
                                  f"and --seeds")
        batch_size = int(self.batch_size or defaults["batch_size"])
        if batch_size < 2 and any(DATASETS[n].task == "ir" for n in names):
            raise EncoderizeError("IR trains on in-batch negatives and needs --batch-size 2 or more")
        cap = self.max_eval_examples or defaults["max_eval_examples"]
        return Grid(datasets=tuple(names), lrs=tuple(sorted(dict.fromkeys(lrs))), seeds=tuple(dict.fromkeys(seeds)),
                    max_steps=int(self.max_steps or defaults["max_steps"]), batch_size=batch_size,
                    max_length=int(self.max_length or defaults["max_length"] or 0) or None,
                    max_eval_examples=int(cap) if cap else None)

    @staticmethod
    def _number(text: str, kind, flag: str):
        try:
            value = kind(text)
        except ValueError:
            raise EncoderizeError(f"{flag} takes comma-separated numbers, got {text!r}") from None
        if kind is float and not value > 0:
            raise EncoderizeError(f"{flag} must be positive, got {text!r}")
        return value

    def protocol(self) -> dict:
        """The protocol as recorded in every results.json and in summary.json."""
        grid = self.grid()
        return {
            "lrs": [lr_key(lr) for lr in grid.lrs], "seeds": list(grid.seeds), "batch_size": grid.batch_size,
            "max_steps": grid.max_steps, "warmup_ratio": float(self.warmup_ratio),
            "selection": "learning rate with the best validation mean over seeds; test mean and 95% CI over seeds",
            "schedule": "linear warmup then linear decay; gradient clipping 1.0", "batching": self.batching,
            "optimizer": {"name": "AdamW", "betas": [float(self.adam_beta1), float(self.adam_beta2)],
                          "eps": float(self.adam_epsilon), "weight_decay": float(self.weight_decay),
                          "no_decay": "biases and norm weights"},
            "dataset_source": self.dataset_source,
            "epochs": "as many as max_steps takes" if self.frozen else "at most one",
            "frozen": bool(self.frozen), "max_length": grid.max_length or "model limit (0.99 x positions)",
            "qa_stride": int(self.qa_stride), "ndcg_gains": self.ndcg_gains,
            "max_eval_examples": grid.max_eval_examples,
            "synthetic_sizes": SMOKE_SIZES if self.profile == "smoke" else None,
        }


    def placed(self, source: str) -> EvalConfig:
        """This config with its results folder decided for the model `source`. A run folder's encoder or embedding
        model (RUN/encoder, RUN/contrastive: RUN holds run_record.json) is scored into RUN/eval/encoder or
        RUN/eval/contrastive, the folders `card`, `push` and `run` read; any other model into results/<model name>.
        An --output-dir given is kept, and so is --name."""
        if self.output_dir is not None:
            return self
        home = None if self.causal else run_model_results(source)  # --causal: not the model the card describes
        if home is not None:
            return replace(self, output_dir=str(home.parent), name=self.name or home.name)
        return replace(self, output_dir="results")

    def adamw(self):
        """The AdamW settings of every fine-tuning run."""
        from hf_encoderize.evaluation.base import AdamWSettings

        return AdamWSettings(betas=(float(self.adam_beta1), float(self.adam_beta2)), eps=float(self.adam_epsilon),
                             weight_decay=float(self.weight_decay))


def model_limit(max_positions: int) -> int:
    """The paper profile's input length: round(0.99 x the model's positions), as EncodEval's abstract_eval.py."""
    return max(1, round(MODEL_LIMIT_FRACTION * max_positions))


def lr_key(lr: float) -> str:
    """The learning rate as written in folder names and summary keys: 1e-05, 0.0001, ..."""
    return f"{float(lr):g}"


def fingerprint_keys() -> tuple[str, ...]:
    """The `protocol()` keys a finished fine-tuning run must share to count as part of a grid: read from the fields
    declared with one (`frozen` is compared as a flag, so runs recorded before it still match).

    >>> "optimizer" in fingerprint_keys() and "lrs" not in fingerprint_keys()
    True
    """
    keys = [f.metadata["protocol"] for f in fields(EvalConfig) if f.metadata.get("identity") == RESUME and
            f.metadata.get("protocol") not in (None, "frozen")]
    return tuple(dict.fromkeys(keys))
