#!/usr/bin/env bash
# Continued pretraining (paper, section 5, Figures 8-9): MLM CPT of the decayed 42k CLM and MLM base models for 2k,
# 12k and 22k steps, 610M, 40% masking (paper: 26,000 steps, 4k GPU hours). Each budget is its own WSD run from the
# converged model, so nothing is branched; the base runs come from pfs.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/paper/common.sh

for base in clm-42000 mlm-42000; do
  for steps in 2000 12000 22000; do
    out="$RUNS/$SIZE/cpt-${base}-${steps}"
    [ -f "$out/encoder/config.json" ] && { echo "done: $out"; continue; }
    extra=()
    if [ -d "$out/checkpoints" ]; then extra+=(--resume); elif [ -d "$out" ]; then extra+=(--overwrite); fi
    $LAUNCH cpt "$RUNS/$SIZE/$base/encoder" --seq-len 2048 --batch-size "$BATCH" --grad-accum "$ACCUM" --lr "$LR" \
      --mask-ratio "$MASK" --steps "$steps" --eval-every 1000 --save-every 500 "${DATA[@]}" --output-dir "$out" \
      "${extra[@]}"
  done
done
