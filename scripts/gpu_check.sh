#!/usr/bin/env bash
# Every check that needs a GPU, in one command (scripts/gpu_check.py says what each row runs). Prints one markdown
# table and writes it, with a JSON file of the same rows and each command's log, under --out (default gpu_check_out/).
# Exit code 1 when any row failed.
#
#   bash scripts/gpu_check.sh                        # on a machine with one GPU: about 7 minutes on an H100
#   bash scripts/gpu_check.sh --wheels gpu_wheels/   # first install what is missing, offline (scripts/gpu_wheels.sh)
#   bash scripts/gpu_check.sh --smoke --out /tmp/gc  # the plumbing on a tiny model, a CPU allowed
#
# GPU_CHECK_WHEELS=DIR works like --wheels DIR; PYTHON picks the interpreter (default python3).
#
# On a lent H100/H200 through the device tool (no PyPI there, 600 s a command): make the folder here first with
# `bash scripts/gpu_wheels.sh gpu_wheels/` (git-ignored, ~19 MB), then run, with carry ["gpu_wheels"]:
#   bash scripts/gpu_check.sh --wheels gpu_wheels --budget-s 540 --out /tmp/gc; cp -r /tmp/gc/gpu_check.* /tmp/gc/cpt_*.json /tmp/gc/logs "$OUT"/
# (--out outside $OUT: its site/ and work/ need not travel back.)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
