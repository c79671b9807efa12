#!/usr/bin/env bash
# Device call (H100, 2026-11-23): narrow tunes of the two layers off their issue-9 goals (the study per space
# carries the earlier trials over), and 32 trials cold as a new user runs them (empty cache, no results).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step gemm512 200 python3 tune.py --layer r50_s5_1x1_512to2048_b32 --family sm90_gemm --space-file scripts/spaces/gemm_wide_n.yaml --trials 40 --prior 12 --no-ncu --run-id narrow-2026-11-23
step down_s2 120 python3 tune.py --layer r50_s3_down_s2_b32 --family sm90_conv --space-file scripts/spaces/conv_down_s2.yaml --trials 8 --no-ncu --run-id narrow-2026-11-23
step cold3x3 200 python3 tune.py --layer r50_s4_3x3_b32 --trials 32 --no-ncu --run-id cold --cache-dir /tmp/cold --results-dir /tmp/fresh
for f in gemm512 down_s2 cold3x3; do echo "== $f"; grep -E "^wrote|trials in all|carried|finalist|error|Traceback" "$OUT/$f.log" | tail -6; grep -A14 "confirmed\|side by side" "$OUT/$f.log" | head -20; done
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl
gzip -f $OUT/*.log
echo "total $(( $(date +%s) - t0 )) s"
