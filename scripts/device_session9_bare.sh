#!/usr/bin/env bash
# Device call (H100, 2026-11-23, fifth session), issue 9: (1) a narrow swapped sm90_gemm tune of
# r50_s5_1x1_512to2048_b32, the one batch-32 1x1 layer still 7 % off cuBLAS, with tile N dividing its 1568
# pixels (scripts/spaces/gemm_swapped_pixels.yaml; the previous best re-measured beside the finalists);
# (2) the one-run figures: every bare layer's best.yaml kernel beside cuDNN (and cuBLAS on 1x1 layers).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step narrow 180 python3 tune.py --layers r50_s5_1x1_512to2048_b32 --family sm90_gemm --space-file scripts/spaces/gemm_swapped_pixels.yaml --trials 12 --prior 8 --no-ncu --confirm-rounds 2 --top 2 --run-id swap-pixels-2026-11-23
grep -E "trials in all|Traceback|rror" "$OUT/narrow.log" | tail -8
grep -E "^winner|previous|#1|#2" "$OUT/narrow.log" | head -12
left=$(( 575 - ($(date +%s) - t0) ))
step bench_bare "$left" python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
grep -E "^one run" -A2 "$OUT/bench_bare.log"
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log $OUT/optuna.journal.gz
rm -f "$OUT"/*.log "$OUT/optuna.journal.gz"
echo "total $(( $(date +%s) - t0 )) s"
