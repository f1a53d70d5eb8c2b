"""The Accelerate training engine and its parts: config, schedule, checkpoints, monitor, LoRA, exports."""
