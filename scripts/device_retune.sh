#!/usr/bin/env bash
# One device call of the H100 retune (through the device tool): install the carried wheels, optionally
# warm the compile cache with the sm90 landscapes' kernels, retune the given layers under one run id
# until the time limit, and leave results/<gpu>/ (best.yaml, history, journal) tarred under $OUT.
# usage: scripts/device_retune.sh SECONDS LAYERS [warm] [extra tune.py options...]
set -u
limit=$1; layers=$2; shift 2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
if [ "${1:-}" = warm ]; then
  shift
  python3 tune.py bench --steps landscape --compile-only --family sm90_conv,sm90_gemm --layers 'conv_1,r50_*' \
    > "$OUT/warm.log" 2>&1
  echo "warm: rc $? $(( $(date +%s) - start )) s"; grep -E "kernels (to compile|compiled)" "$OUT/warm.log"
fi
left=$(( limit - ($(date +%s) - start) ))
timeout -s INT -k 60 "$left" python3 tune.py --layers "$layers" --run-id retune-joint-2026-11-22 --no-ncu \
  --confirm-rounds 2 --top 2 "$@" > "$OUT/retune.log" 2>&1
echo "retune: rc $? $(( $(date +%s) - start )) s"
grep -E "^wrote|finished earlier|study .* trials in all" "$OUT/retune.log" | tail -30
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl
gzip -f "$OUT/retune.log"
