#!/usr/bin/env bash
# Pretraining from scratch (paper, section 4, Figure 6): CLM share 0/25/50/75/100% at 12k, 22k and 42k steps, 610M,
# 40% masking. First the two 42k base runs of section 3 (CLM and MLM), then every other cell branches from their
# undecayed checkpoints, as the paper did: 2 x 42k base steps + about 122k new steps (paper: "120,000 additional
# training steps", 16k GPU hours on top of the base runs). See README.md for the compute this needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/paper/common.sh

# The base runs also export the intermediate encoders of the data-efficiency result (section 3, Figure 4).
pretrain clm-42000 clm:1.0 42000 "" "$EXPORTS"
pretrain mlm-42000 mlm:1.0 42000 "" "$EXPORTS"
for steps in 12000 22000 42000; do
  for clm in 0.25 0.5 0.75; do
    mlm=$(python3 -c "print(round(1 - $clm, 2))")
    # Appendix C.3 gives the split points in whole thousands: 22k is 5K+17K / 11K+11K / 17K+5K and 42k is
    # 10K+32K / 21K+21K / 32K+10K (the minority phase rounded down), not 5.5K/16.5K or 10.5K/31.5K.
    switch=$(python3 -c "s, c = $steps, $clm; m = min(c, 1 - c) * s // 1000 * 1000; print(int(m if c <= 0.5 else s - m))")
    shares=$(python3 -c "f = $switch / $steps; print(f'clm:{f!r},mlm:{1 - f!r}')")  # the switch falls exactly there
    pretrain "clm${clm}-mlm${mlm}-${steps}" "$shares" "$steps" "$(checkpoint clm-42000 "$switch")"
  done
  if [ "$steps" != 42000 ]; then  # 100% cells of the shorter budgets: the base run's prefix plus 2,000 decay steps
    pretrain "clm-${steps}" clm:1.0 "$steps" "$(checkpoint clm-42000 $((steps - 2000)))"
    pretrain "mlm-${steps}" mlm:1.0 "$steps" "$(checkpoint mlm-42000 $((steps - 2000)))"
  fi
done
