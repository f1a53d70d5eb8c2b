#!/usr/bin/env bash
# The README's test command: install from nothing, then run the whole suite offline on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Run from the environment setup.sh installed into (the active venv, or the project's .venv): python3, ruff,
# lint-imports and pytest below are its own.
py="$(bash scripts/venv_python.sh 2>/dev/null)"
PATH="$(dirname "$py"):$PATH" VIRTUAL_ENV="$("$py" -c 'import sys; print(sys.prefix)')"
export PATH VIRTUAL_ENV HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "test.sh: testing with $py" >&2
# What moved since the last green run (constraints/last-green.txt), named before any test can fail on it; after a
# green run, `python scripts/dependency_drift.py --installed .venv/bin/python --record` makes this the new baseline,
# and `python scripts/dependency_drift.py` alone resolves the newest releases without installing (issue 72).
python3 scripts/dependency_drift.py --installed "$py" >/dev/null || true
python3 -m ruff check hf_encoderize tests
lint-imports  # the layers of pyproject.toml: each stage imports only the stages below it
# tests/ and the package's doctests (pyproject.toml), on two workers (pytest-xdist; a test file stays on one worker, so
# its module fixtures are built once), each with one intra-op thread (tests/conftest.py); the 25 slowest are listed.
# PYTEST_WORKERS=0 runs them in this process.
workers=(-n "${PYTEST_WORKERS:-2}" --dist loadfile)
[ "${PYTEST_WORKERS:-2}" = 0 ] && workers=()
start=$SECONDS
python3 -m pytest -q -p no:cacheprovider "${workers[@]}" --durations=25
echo "main environment: $((SECONDS - start)) s"
# The other end of the supported range: a second environment pinned to constraints/floor.txt (the oldest
# transformers, accelerate, peft, sentence-transformers and huggingface_hub that pyproject.toml allows; the same CPU
# torch), installed by the same setup.sh, kept between runs while the pins are unchanged. It runs the not-slow tests
# of what leans on transformers' internals: the shims and saved-backend pins (test_compat), packed-document isolation,
# the round trip and saving, the patch, tiny cpt / LoRA cpt / contrastive (LoRA included) runs, and doctor.
floor="${HF_ENCODERIZE_FLOOR_VENV:-$HOME/.cache/hf-encoderize/venv-floor}"
pins="$(cat constraints/floor.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$floor/.pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$floor" && python3 -m venv "$floor"
    VIRTUAL_ENV="$floor" PATH="$floor/bin:$PATH" PIP_CONSTRAINT="$PWD/constraints/floor.txt" HF_ENCODERIZE_MPNET=0 \
        bash scripts/setup.sh
    echo "$pins" > "$floor/.pins"
fi
"$floor/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .  # this checkout, wherever it is
start=$SECONDS
"$floor/bin/python" -m pytest -q -p no:cacheprovider "${workers[@]}" -m "not slow" tests/test_compat.py tests/test_isolation.py \
    tests/test_roundtrip.py tests/test_saving.py tests/test_bidirectional.py tests/test_cpt.py \
    tests/test_contrastive_training.py tests/test_doctor.py
echo "floor environment ($(cat constraints/floor.txt | grep -v '^#' | tr '\n' ' ')): $((SECONDS - start)) s"
