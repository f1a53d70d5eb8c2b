#!/usr/bin/env bash
# Masking ratios (paper, section 3, Figure 3; section 4, Figure 7): MLM-only base runs at 20/30/40/50% masking for
# each size, and the CLM+MLM 25-75 split at 42k steps with the same ratios (610M), branched from the CLM base run.
# The 40% cells are shared with pfs.sh (same folder names), so they are not trained twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/paper/common.sh

for size in ${SIZES:-210M 610M 1B}; do
  exports=""; [ "$size" = 610M ] && exports="$EXPORTS"  # the shared 610M base runs export Figure 4's encoders
  SIZE=$size pretrain clm-42000 clm:1.0 42000 "" "$exports"
  for mask in 0.2 0.3 0.4 0.5; do
    name=mlm-42000; [ "$mask" != 0.4 ] && name="mlm-42000-mask${mask}"
    [ "$mask" = 0.4 ] && export_steps="$exports" || export_steps=""
    SIZE=$size MASK=$mask pretrain "$name" mlm:1.0 42000 "" "$export_steps"
  done
done
for mask in 0.2 0.3 0.5; do
  # Appendix C.3's 25/75 split of 42k is 10K CLM + 32K MLM (whole thousands), as in pfs.sh
  SIZE=610M MASK=$mask pretrain "clm0.25-mlm0.75-42000-mask${mask}" "clm:$(python3 -c 'print(10000 / 42000)'),mlm:$(python3 -c 'print(32000 / 42000)')" 42000 \
    "$(SIZE=610M checkpoint clm-42000 10000)"
done
