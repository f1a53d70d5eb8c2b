#!/usr/bin/env bash
# The README's test command: install from nothing, then run the whole suite offline on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m ruff check hf_encoderize tests
lint-imports  # the layers of pyproject.toml: each stage imports only the stages below it
python3 -m pytest -q -p no:cacheprovider  # tests/ and the package's doctests (pyproject.toml)
