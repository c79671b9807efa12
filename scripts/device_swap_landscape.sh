#!/usr/bin/env bash
# Device call (H100, 2026-11-23, issue 9): the sm90_gemm landscape again with swap_ab (both operand
# orders, 64 kernels) on the 24 1x1 stride-1 layers, cuDNN and cuBLAS timed in the same call; then the
# batch-32 1x1 layers retuned in the sm90_gemm space (landscape seeds, previous best re-measured beside
# them) until the time limit, the two off the cuBLAS goal first.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step landscape 420 python3 tune.py bench --measure-only --steps landscape,cudnn --family sm90_gemm --layers 'r50_s*_1x1_*' --jobs 16
grep -E "landscape|cuBLAS|within|geometric" "$OUT/landscape.log" | tail -12
left=$(( 570 - ($(date +%s) - t0) ))
layers=r50_s5_1x1_512to2048_b32,r50_s4_1x1_1024to256_b32,r50_s5_1x1_1024to512_b32,r50_s4_1x1_512to256_b32,r50_s3_1x1_256to128_b32,r50_s2_1x1_64to256_b32,r50_s2_1x1_256to64_b32,r50_s3_1x1_128to512_b32,r50_s3_1x1_512to128_b32,r50_s4_1x1_256to1024_b32,r50_s5_1x1_2048to512_b32,r50_s2_1x1_64to64_b32
step retune "$left" python3 tune.py --layers "$layers" --family sm90_gemm --trials 12 --no-ncu --confirm-rounds 2 --top 2 --run-id swap-2026-11-23
grep -E "^wrote|finished earlier|trials in all|Traceback|error" "$OUT/retune.log" | tail -30
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl results/nvidia-h100-80gb-hbm3/bench.yaml results/nvidia-h100-80gb-hbm3/landscape/sm90_gemm $OUT/*.log
echo "total $(( $(date +%s) - t0 )) s"
