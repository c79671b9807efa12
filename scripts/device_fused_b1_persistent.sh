#!/usr/bin/env bash
# Device call: the batch-1 fused layers with a residual tuned in sm90_gemm's persistent schedules only
# (scripts/spaces/gemm_persistent_b1.yaml; each layer's previous best re-measured beside the finalists),
# then every fused batch-1 layer benched in one run. Results under $OUT as one archive.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
slug=nvidia-h100-80gb-hbm3
step tune 330 python3 tune.py --layers r50f_s2_1x1_64to256_b1,r50f_s3_1x1_128to512_b1,r50f_s4_1x1_256to1024_b1,r50f_s5_1x1_512to2048_b1 \
  --family sm90_gemm --space-file scripts/spaces/gemm_persistent_b1.yaml --trials 8 --prior 8 --no-ncu --top 2 \
  --confirm-rounds 2 --run-id fused-b1-persistent-2026-11-23
grep -E "^wrote|winner|trials in all|^error" "$OUT/tune.log" | tail -12
left=$(( 570 - ($(date +%s) - t0) ))
step bench_fused_b1 "$left" python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b1' --jobs 16
grep -E "^one run" -A1 "$OUT/bench_fused_b1.log" | tail -12
tar czf "$OUT/results.tgz" results/$slug/best.yaml results/$slug/history.jsonl results/$slug/bench.yaml \
  results/$slug/optuna.journal -C "$OUT" tune.log bench_fused_b1.log
rm -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
