"""Training: the Accelerate engine (`engine/`), the recipe interface and its runner, config, schedule, checkpoints,
monitor, LoRA."""
