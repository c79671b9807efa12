#!/usr/bin/env bash
# Device call (H100, sixth session), issue 9, r50_s5_1x1_512to2048_b32 (the one batch-32 1x1 layer off
# cuBLAS by more than 5 %): (1) tile K 32 in both orders (scripts/spaces/gemm_k32.yaml) against best.yaml's
# kernel re-measured beside the finalists; (2) best.yaml's kernel and cuBLAS under Nsight Compute with the
# warp-state sections (scripts/profile_vs_baseline.py; nothing timed there); (3) the one-run bare bench.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
layer=r50_s5_1x1_512to2048_b32
step k32 200 python3 tune.py --layers $layer --family sm90_gemm --space-file scripts/spaces/gemm_k32.yaml --trials 6 --prior 6 --no-ncu --confirm-rounds 3 --top 3 --run-id k32-2026-11-23
grep -E "trials in all|Traceback|rror|compile_failed|#[123] |previous|faster|slower|same" "$OUT/k32.log" | tail -12
step profile 150 python3 scripts/profile_vs_baseline.py $layer --warp-states --out "$OUT/profiles"
grep -E '"kernel"|Duration|Grid Size|Compute \(SM\) Throughput|Memory Throughput|"Function Name"|Kernel Name' "$OUT/profile.log" | head -24
left=$(( 585 - ($(date +%s) - t0) ))
if [ "$left" -gt 125 ]; then
  step bench_bare "$left" python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
  grep -E "^one run" -A2 "$OUT/bench_bare.log" | head -4
  grep -E "1x1_512to2048_b32" "$OUT/bench_bare.log" | head -1
else
  echo "bench_bare skipped: $left s left"
fi
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log $OUT/optuna.journal.gz $OUT/profiles
rm -rf "$OUT"/*.log "$OUT/optuna.journal.gz" "$OUT/profiles"
echo "total $(( $(date +%s) - t0 )) s"
