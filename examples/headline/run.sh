#!/usr/bin/env bash
# The paper's headline at small scale (section 5): a CLM base and an MLM base on the same data and budget, the same
# MLM CPT on each, full fine-tuning on the four synthetic families, then mean ± CI, Welch and a paired bootstrap.
#   bash examples/headline/run.sh [tiny|reduced|reduced2|cpu|cpu2|gpu] [OUT] [--threads N | --analyse-only]
# Re-running with the same OUT skips the finished arms and fine-tuning runs. See examples/headline/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
budget="${1:-cpu}"
out="${2:-runs/headline-$budget}"
# The finder's progress lines are left out; its one error line (no such PYTHON, no venv module) is not.
found="$(bash scripts/venv_python.sh 2>&1)" || { grep '^error:' <<<"$found" >&2; exit 2; }
py="$(tail -n 1 <<<"$found")"
# OMP_WAIT_POLICY=PASSIVE: on a shared CPU, spin-waiting OpenMP threads make training crawl (see examples/quickstart.sh).
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
"$py" benchmarks/headline.py --budget "$budget" --out "$out" "${@:3}"
