#!/usr/bin/env bash
# Continued pretraining (paper, section 5, Figures 8-9): MLM CPT of the decayed 42k CLM and MLM base models for 2k,
# 12k and 22k steps, 610M, 40% masking. Section 2 reports "6 new models, totaling 26,000 training steps" (4k GPU
# hours); reading that as per base is ours: one 22k run, the 12k budget branched from its undecayed step 10,000 (+2,000 decay steps), and the 2k
# budget, which shares no undecayed step with it (+2,000): 22,000 + 2,000 + 2,000. Every budget decays over its final
# 2,000 steps (section 2). The paper does not say how the 2k budget warms up; here its 2,000-step warmup and decay
# overlap (the LR rises to half the peak and falls back: our choice). The data continue the stream after the tokens
# the base run read (its run record's data_position), so CPT sees new tokens while the source lasts. The paper gives
# no CPT learning rate: the CPT runs use the pretraining peak $LR (common.sh), our choice.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/paper/common.sh

# cpt_run NAME BASE STEPS [CHECKPOINT]: one CPT budget of BASE; with CHECKPOINT it branches from that checkpoint of
# another budget's run (`cpt` refuses one whose settings differ or that lies inside a decay).
cpt_run() {
  local name="$1" base="$2" steps="$3" from="${4:-}" out="$RUNS/$SIZE/$1"
  [ -f "$out/encoder/config.json" ] && { echo "done: $out"; return; }
  local skip extra=()
  skip=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['data_position']['next_document'])" \
    "$RUNS/$SIZE/$base/run_record.json")
  if [ -d "$out/checkpoints" ]; then extra+=(--resume); elif [ -d "$out" ]; then extra+=(--overwrite); fi
  [ -n "$from" ] && [ ! -d "$out/checkpoints" ] && extra+=(--from-checkpoint "$from")
  $LAUNCH cpt "$RUNS/$SIZE/$base/encoder" --max-seq-length 2048 --batch-size "$BATCH" --gradient-accumulation-steps "$ACCUM" --learning-rate "$LR" \
    --warmup-steps 2000 --decay-steps 2000 --mlm-probability "$MASK" --max-steps "$steps" --eval-steps 1000 --save-steps 500 \
    --save-total-limit 100 --skip-documents "$skip" "${DATA[@]}" --output-dir "$out" "${extra[@]}"
}

for base in clm-42000 mlm-42000; do
  cpt_run "cpt-${base}-22000" "$base" 22000
  cpt_run "cpt-${base}-12000" "$base" 12000 "$(checkpoint "cpt-${base}-22000" 10000)"
  cpt_run "cpt-${base}-2000" "$base" 2000
done
