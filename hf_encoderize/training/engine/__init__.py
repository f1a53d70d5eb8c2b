"""The training engine on Accelerate, one job per module; `training.runner` walks a recipe through it.

- `accelerator`: the `Accelerator`, the accumulation a token budget implies, a sharded run's weights gathered, the
  end every process reaches together.
- `loss_model`: backbone + LM head -> the summed cross-entropy over labelled positions (what Accelerate wraps).
- `build`: `build_run`, everything the steps need (optimizer, WSD schedule, row stream, masker, loss kernel) as `Run`,
  and where its row stream stopped (`stream_position`).
- `loop`: `train_until` and `train_step`, held-out evaluation, and `enter_phase` between phases.
- `finish`: the saved encoder, loss curve and run record.

The engine knows nothing of the recipes (`cpt`, `pretrain`): an import-linter contract keeps it so.
"""
