#!/usr/bin/env bash
# Device call: the fused ResNet-50 batch-32 layers (r50f_*_b32) tuned from their bare twins' fastest
# configurations: those compiled for all layers in one parallel batch first (scripts/warm_twin_seeds.py),
# then each layer's study (the twins' seeds, then TPE) under one run id, resumable. Results tarred under $OUT.
# LAYERS: comma-separated layer patterns (default r50f_*_b32); TRIALS: trials per layer (default 5).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
IFS=, read -r -a patterns <<< "${LAYERS:-r50f_*_b32}"
step warm 330 python3 scripts/warm_twin_seeds.py "${patterns[@]}" --jobs 16 --first "${TRIALS:-5}"
tail -2 "$OUT/warm.log"
left=$(( 560 - ($(date +%s) - t0) ))
step tune "$left" python3 tune.py --layers "${LAYERS:-r50f_*_b32}" --trials "${TRIALS:-5}" --prior 0 --no-ncu --top 2 \
  --confirm-rounds 2 --run-id fused-twins-2026-11-23
grep -E "^wrote|finished earlier|trials in all|error" "$OUT/tune.log" | tail -30
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
