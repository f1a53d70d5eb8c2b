# Shared settings of the paper recipes (sourced by pfs.sh, cpt.sh, masking.sh). Every value can be overridden from
# the environment, e.g. `SIZE=210M LAUNCH="hf-encoderize" bash examples/paper/pfs.sh`.
#
# Paper, Appendix A: context 2,048, Llama-3 tokenizer, AdamW (0.9, 0.95), weight decay 0.1, clipping 1.0 (the
# defaults of `pretrain`), WSD with 2,000 warmup steps, 2,359,296 tokens per step = 1,152 rows of 2,048. Rows per
# step here = BATCH x processes x ACCUM: the default 12 x 8 GPUs x 12 = 1,152.
SIZE="${SIZE:-610M}"                           # 210M, 610M or 1B (examples/configs/)
TOKENIZER="${TOKENIZER:-meta-llama/Meta-Llama-3-8B}"   # the paper's Llama-3 tokenizer (gated on the Hub)
RUNS="${RUNS:-runs/paper}"
BATCH="${BATCH:-12}"                           # per GPU (Appendix A)
ACCUM="${ACCUM:-12}"
MASK="${MASK:-0.4}"                            # section 3: the 40% compromise used for PFS and CPT
# NOT the paper's value: our copy of the text lost it (it was chosen by a sweep on 10% of the data, section 2,
# footnote 7). Sweep it at your scale before spending the grid's compute.
LR="${LR:-3e-4}"
LAUNCH="${LAUNCH:-accelerate launch --config_file examples/accelerate/multi_gpu_ddp.yaml -m hf_encoderize.cli}"
DATA=(${DATA:---dataset HuggingFaceFW/fineweb-edu --dataset-config sample-100BT})  # section 2: FineWeb-Edu

common_flags() {
  echo --tokenizer "$TOKENIZER" --seq-len 2048 --batch-size "$BATCH" --grad-accum "$ACCUM" --lr "$LR" \
    --warmup-steps 2000 --mask-ratio "$MASK" --eval-every 1000 --save-every 500 --keep-last 100 "${DATA[@]}"
}

# pretrain NAME SCHEDULE STEPS [CHECKPOINT]: one PFS cell. The decay always spans the final 2,000 steps (section 2,
# "Experimental scale": decay only during the final 2,000 steps), so --decay-fraction is 2000/STEPS. With CHECKPOINT the
# run branches from an undecayed checkpoint instead of redoing the shared prefix; `pretrain` refuses a checkpoint
# whose schedule, data or learning rate differ. A finished cell (encoder/ present) is skipped; a killed one resumes.
pretrain() {
  local name="$1" schedule="$2" steps="$3" from="${4:-}" out="$RUNS/$SIZE/$1"
  [ -f "$out/encoder/config.json" ] && { echo "done: $out"; return; }
  local extra=()
  if [ -d "$out/checkpoints" ]; then extra+=(--resume); elif [ -d "$out" ]; then extra+=(--overwrite); fi
  # A run killed before its first checkpoint starts over; a branch keeps its branch point either way.
  [ -n "$from" ] && [ ! -d "$out/checkpoints" ] && extra+=(--from-checkpoint "$from")
  # shellcheck disable=SC2046
  $LAUNCH pretrain --model-config "$SIZE" $(common_flags) --schedule "$schedule" --steps "$steps" \
    --decay-fraction "$(python3 -c "print(2000 / $steps)")" --output-dir "$out" "${extra[@]}"
}

checkpoint() {  # checkpoint RUN STEP -> the folder of that run's checkpoint at STEP
  printf '%s/%s/%s/checkpoints/step-%07d' "$RUNS" "$SIZE" "$1" "$2"
}
