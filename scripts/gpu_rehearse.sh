#!/usr/bin/env bash
# The prepared GPU session (scripts/gpu_session.py) rehearsed on this CPU on the GPU image's own stack, not ours
# (issue 65): run it before any GPU session.
#
#   bash scripts/gpu_rehearse.sh [WORKDIR]     # default ~/.cache/hf-encoderize/gpu-rehearsal; never the project .venv
#
# 1. WORKDIR/image-venv: Python 3.12 (python3.12, else pyenv's 3.12.*) with the versions scripts/gpu_machine.txt pins
#    for the image's stack (torch 2.11, triton 3.6, transformers 5.17, huggingface_hub 1.33, accelerate 1.15,
#    peft 0.21.0, sentence-transformers 6.0.1, tokenizers, safetensors, numpy, ...) and the unpinned packages the image
#    has that our runtime imports, all from the package index. Made once and kept while those lines are unchanged.
#    PyPI's torch 2.11 is its CUDA build (a CPU-only build is not on PyPI): ~5 GB with the CUDA libraries it pulls,
#    9 minutes here the first time; it runs on the CPU.
# 2. WORKDIR/wheels: `scripts/gpu_wheels.sh` against gpu_machine.txt, as for a GPU session (GPU_REHEARSE_WHEELS=DIR:
#    a folder already made).
# 3. `gpu_session.py prepare --shapes smoke`, then `gpu_session.py run --smoke --wheels WORKDIR/wheels` with the
#    image venv's Python: the wheels go into OUT/site with `pip install --no-index --no-deps --target` and first on
#    the path, as on the GPU. The table is WORKDIR/out/session.md.
# Exit 0 only when every row passed or skipped for want of CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(realpath -m "${1:-$HOME/.cache/hf-encoderize/gpu-rehearsal}")
mkdir -p "$work"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

# The image's stack: its pinned lines for these packages, and the unpinned ones it has that our runtime needs (each
# package a resolution of ours reaches that gpu_machine.txt lists without a version, 2026-12-07, CUDA libraries aside;
# without pandas, say, the imports row failed where the image would not: datasets needs it and nothing carries it)
stack=(torch triton transformers huggingface-hub accelerate peft sentence-transformers tokenizers safetensors numpy
       sentencepiece tiktoken)
unpinned=(aiohttp annotated-doc anyio certifi charset-normalizer click cloudpickle contourpy cycler filelock fonttools
          fsspec h11 hf-xet httpcore httpx idna jinja2 joblib kiwisolver markdown-it-py markupsafe matplotlib mdurl
          mpmath narwhals networkx packaging pandas pillow psutil pyarrow pygments pyparsing python-dateutil pyyaml
          regex requests rich scikit-learn scipy setuptools shellingham sympy threadpoolctl tqdm typer
          typing-extensions urllib3 xxhash)
pins=()
for name in "${stack[@]}"; do
    pins+=("$(grep -E "^${name}==" scripts/gpu_machine.txt)")
done
wanted="${pins[*]} ${unpinned[*]}"
venv="$work/image-venv"
if [ "$(cat "$venv/.image-stack" 2>/dev/null)" != "$wanted" ]; then
    python312=""
    for candidate in "$(command -v python3.12 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python; do
        if [ -n "$candidate" ] && "$candidate" -c "import venv" 2>/dev/null; then python312=$candidate; fi
    done
    [ -n "$python312" ] || { echo "gpu_rehearse.sh: no Python 3.12 here (the image's)" >&2; exit 2; }
    [ -x "$venv/bin/python" ] || "$python312" -m venv "$venv"
    echo "gpu_rehearse.sh: installing the image's stack into $venv: ${pins[*]}" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" "${unpinned[@]}"
    echo "$wanted" > "$venv/.image-stack"
fi

wheels=${GPU_REHEARSE_WHEELS:-$work/wheels}
if [ -z "${GPU_REHEARSE_WHEELS:-}" ]; then
    rm -rf "$wheels"
    [ -x .venv/bin/python ] && PATH="$(pwd)/.venv/bin:$PATH"  # packaging, and torch for DeepSpeed's wheel
    bash scripts/gpu_wheels.sh "$wheels"
fi

"$venv/bin/python" scripts/gpu_session.py prepare --inputs "$work/inputs" --shapes smoke > /dev/null
code=0
# Limits far above the GPU's: the rehearsal asks whether every part runs to its end on this stack, not how fast, and a
# loaded CPU compiles slowly (GPU_REHEARSE_LIMIT_S a run of an arm, and for building or launching)
limit=${GPU_REHEARSE_LIMIT_S:-400}
"$venv/bin/python" scripts/gpu_session.py run --smoke --inputs "$work/inputs" --wheels "$wheels" --out "$work/out" \
    --budget-s "${GPU_REHEARSE_BUDGET_S:-3600}" --arm-limit-s "$limit" --stage-limit-s "$limit" \
    --launcher-limit-s "$limit" > /dev/null || code=$?
"$venv/bin/python" - "$work/out/session.jsonl" "$code" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
bad = [r for r in rows if r["status"] == "fail" or (r["status"] == "skipped" and "CUDA" not in r["figure"])]
imports = next((r for r in rows if r["part"] == "imports"), {})
print(f"rehearsal on {imports.get('figure', '?')}: {len(rows)} rows, "
      f"{sum(r['status'] == 'pass' for r in rows)} passed, {sum(r['status'] == 'skipped' for r in rows)} skipped "
      f"for CUDA, {len(bad)} other (session exit {sys.argv[2]})")
for r in bad:
    print(f"  {r['part']}: {r['status']}: {r['figure']}")
sys.exit(1 if bad or sys.argv[2] != "0" else 0)
EOF
