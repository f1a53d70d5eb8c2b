"""The recipe interface: what a training command (`cpt`, `pretrain`) tells the runner, and what it hands back, typed.

Design choices:
- A recipe is a `typing.Protocol`: settings as fields (what differs between the commands is a field, never a test on
  the command's name) and five verbs the runner calls: `check_launch` before any work, `load_tokenizer` once the
  output folder was checked (the data checks run on it before any weight loads), `build` after them, `check_branch`
  when branching, and `final_model` after training, on the main process.
- What goes in and out is a frozen dataclass (`Built`, `Trained`, `FinalModel`), built complete: a recipe that needs
  more at the end (cpt: the patch report and the peft model) subclasses `Built` with typed fields.
- The training phases are data (`phases`, `switches_attention`): the engine walks them (`engine.loop.train_phases`),
  so a run does not call back into the recipe to train. What each phase learns is a component the recipe hands over
  (`Phase.target`, `target`: `objectives.targets`), built from its config; a recipe may bring a target of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import torch

from hf_encoderize.data.sources import DataConfig, data_facts
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.phases import Phase
from hf_encoderize.objectives.targets import Target
from hf_encoderize.records.run_record import PatchFacts
from hf_encoderize.records.run_settings import RunSettings
from hf_encoderize.training.engine.build import Run, Trainable
from hf_encoderize.training.train_config import ADAMW_BETAS, TrainConfig

S = TypeVar("S", bound=RunSettings)


@dataclass(frozen=True, kw_only=True)
class Built(Trainable):
    """What a recipe's `build` returns: the model where it trains and the facts that depend on it (`Trainable`, what
    the engine's `build_run` takes), and the run's settings."""

    settings: RunSettings
    """What the run was asked to do, typed per recipe: the run record's settings, sent to trackers; a resume compares
    `settings.compared()`."""


@dataclass(frozen=True, kw_only=True)
class Trained:
    """What training left: the last step, and the attention switch's patch counts (None: no switch ran)."""

    step: int
    switch_counts: tuple[int, int] | None


@dataclass(frozen=True, kw_only=True)
class FinalModel:
    """The encoder to save, from the recipe's `final_model` (main process)."""

    model: torch.nn.Module
    weights: dict | None
    """The weights as they are to be saved (a sharded run's gathered ones, cast), or None: the model's own."""
    encoderize: PatchFacts
    """What the attention patch and the token set-up did (`EncoderizeReport.facts()`)."""
    saved_dtype: str | None = None
    """The dtype the encoder is saved in, when the recipe casts it (cpt)."""


class Recipe(Protocol):
    """What differs between the training commands; `training.runner` does the rest."""

    command: str
    """`cpt` or `pretrain`: the run record's command, the output folder's marker, the monitor's label."""
    output_dir: Path
    data: DataConfig
    train: TrainConfig
    inputs: list[Path]
    """Local inputs the output folder must never be, hold or sit inside (`common.outputs`)."""
    target: Target
    """What the encoder learns (`objectives.targets.build_target` from its `MaskingConfig`, or the recipe's own): the
    masked phase's target, under which the run ends and is scored."""
    phases: list[Phase]
    """The phases per step range, in order, each with its target (cpt: one masked phase learning `target`)."""
    switches_attention: bool
    """Enter each phase (causal -> bidirectional at MLM) and end bidirectional (pretrain); False: the model arrives
    an encoder (cpt)."""
    scores_starting_model: bool
    """Score the starting model on the held-out rows before step 1 (cpt: the base; pretrain's random weights: no)."""
    extendable: bool
    """A resume may extend --max-steps (cpt); pretrain's phases are fixed by its budget."""
    start_files: dict[str, dict]
    """JSON files (name -> content) written into the output folder when training starts (pretrain: its schedule)."""
    outputs: tuple[str, ...]
    """Top-level names the recipe writes into the run folder beyond the engine's and its `start_files`: listed in the
    folder's marker, so a later --overwrite knows them as ours (`runner.run_entries`)."""
    summary_extra: dict
    """Added to the summary the command returns."""
    curve_title: str
    """The loss curve's title (`loss_curve.png`)."""

    def check_launch(self, accelerator) -> None:
        """Refuse, before any work, what this launch cannot do."""

    def load_tokenizer(self):
        """The tokenizer alone, before any weight loads: the data checks that need only it run then."""

    def build(self, accelerator) -> Built:
        """The model, loaded or built where it trains. Runs after the output folder was checked."""

    def check_branch(self, checkpoint: Path, built: Built) -> None:
        """Refuse a branch point (`--from-checkpoint`) once the model's facts are known."""

    def final_model(self, run: Run, built: Built, trained: Trained, weights: dict | None) -> FinalModel:
        """Main process, after training: the encoder to save, from the trained run and the gathered weights."""


def run_settings(kind: type[S], data: DataConfig, masking: MaskingConfig, train: TrainConfig, **recipe: object) -> S:
    """The recipe's typed settings (`kind`: `CptSettings`, `PretrainSettings`, ...): the fields every run records, from
    its configs, and the recipe's own (`recipe`, which may also replace a shared one: pretrain's `phases`). Made by
    keyword, so a misspelt field is a TypeError here. No secrets: configs hold none.

    >>> from hf_encoderize.records.run_settings import CptSettings
    >>> data = DataConfig(data_files="docs.jsonl", eval_documents=4)
    >>> run_settings(CptSettings, data, MaskingConfig(), TrainConfig(), base_model="m").base_model
    'm'
    >>> run_settings(CptSettings, data, MaskingConfig(), TrainConfig(), base_modle="m")
    Traceback (most recent call last):
    TypeError: CptSettings.__init__() got an unexpected keyword argument 'base_modle'
    """
    shared = dict(phases=masking.masking_target, mask_ratio=masking.mask_ratio, replacement=masking.replacement,
                  data=data_facts(data), steps=train.steps, lr=train.lr, lr_schedule="wsd", warmup_steps=train.warmup,
                  decay_steps=train.decay, weight_decay=train.weight_decay, betas=list(ADAMW_BETAS),
                  adam_eps=train.adam_eps, max_grad_norm=train.max_grad_norm, batch_size=train.batch_size,
                  grad_accum=train.grad_accum, tokens_per_step=train.tokens_per_step, seed=train.seed,
                  gradient_checkpointing=train.gradient_checkpointing, master_weights=train.master_weights,
                  compile=train.compile, prefetch=train.prefetch)
    return kind(**{**shared, **recipe})
