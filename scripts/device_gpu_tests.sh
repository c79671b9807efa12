#!/usr/bin/env bash
# Device call: the GPU test suite (pytest -m gpu, fused epilogues included), then the fused ResNet-50
# stage-4 3x3 layer tuned with 32 trials, results tarred under $OUT.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step pytest_gpu 420 python3 -m pytest -m gpu -q -p no:cacheprovider
tail -25 "$OUT/pytest_gpu.log"
left=$(( 570 - ($(date +%s) - t0) ))
[ "$left" -gt 150 ] && step fused_3x3 "$left" python3 tune.py --layer r50f_s4_3x3_b32 --trials 32 --no-ncu --run-id fused-2026-11-23
grep -E "^wrote|trials in all|error" "$OUT/fused_3x3.log" 2>/dev/null | tail -4
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl
echo "total $(( $(date +%s) - t0 )) s"
