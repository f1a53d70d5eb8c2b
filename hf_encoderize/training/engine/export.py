"""Intermediate encoders (`--export-steps`): the paper's data-efficiency result (section 3, Figure 4) and its
Appendix C tables fine-tune checkpoints taken during pretraining (12 intermediate ones, section 2), so `pretrain` and
`cpt` can save a full encoder at chosen steps, next to the final one.

Design choices:
- An export is a plain encoder folder, `OUT/exports/step-0005000/`, written by the same `save_encoder` as the final
  one: it loads bidirectional with plain transformers and sentence-transformers, and `eval` takes it as is. A
  CLM-phase export is saved bidirectional too: the paper fine-tunes every checkpoint with bidirectional attention.
- Weights go out in the dtype the model was loaded in (training may hold fp32 master weights), gathered first under
  FSDP2/ZeRO-3 (a collective: every process calls `export_encoder`).
- The live model's config is never changed by the save (`save_encoder` marks the config it writes as bidirectional
  and puts the live one back: a CLM phase must stay causal).
- Exports are training outputs, not checkpoints: `--save-total-limit` never prunes them, and a resumed run that passes
an
  export step again rewrites that folder with the same weights.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hf_encoderize.training.engine.accelerator import gather_weights
from hf_encoderize.training.engine.build import Run

EXPORTS = "exports"


def export_dir(output_dir: Path, step: int) -> Path:
    return Path(output_dir) / EXPORTS / f"step-{step:07d}"


def export_encoder(run: Run, step: int) -> Path:
    """Save the model as it is at `step` into `OUT/exports/step-N` (every process calls this; the main one writes),
    with the run's `export_facts(step)` in its config and its weights in `run.export_dtype`."""
    from hf_encoderize.model.saving import save_encoder

    run.rows.close()  # the prefetching thread tokenizes with the tokenizer being saved; the next step restarts it
    weights = gather_weights(run.accelerator, run.model)
    folder = export_dir(run.output_dir, step)
    if run.accelerator.is_main_process:
        model = run.accelerator.unwrap_model(run.model).model
        state = weights if weights is not None else model.state_dict()
        dtype = run.export_dtype or model.dtype
        state = {name: t.detach().to(dtype) if t.is_floating_point() else t for name, t in state.items()}
        save_encoder(model, run.tokenizer, folder, overwrite=True, state_dict=state,  # leaves the live config be
                     metadata=replace(run.export_facts(step), export_step=step, steps=step))
    run.accelerator.wait_for_everyone()
    return folder


def exported(output_dir: Path) -> list[Path]:
    """The export folders of a run, by step."""
    return sorted(p for p in (Path(output_dir) / EXPORTS).glob("step-*") if (p / "config.json").is_file())
