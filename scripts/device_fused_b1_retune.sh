#!/usr/bin/env bash
# Device call: why a fused batch-1 kernel costs ~20 % over the same kernel bare (ncu: fused, bare and
# cuDNN/cuBLAS of three layers), then a wider search on the four furthest (16 trials each, the cost model's
# picks first, beside the bare twins' seeds already measured) and those four benched again.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
layers=r50f_s2_1x1_64to256_b1,r50f_s3_1x1_128to512_b1,r50f_s4_1x1_256to1024_b1,r50f_s3_down_s2_b1
step profiles 150 python3 scripts/profile_vs_baseline.py r50f_s2_1x1_64to256_b1 r50f_s3_1x1_128to512_b1 \
  r50f_s2_3x3_b1 --out /tmp/profiles
cp /tmp/profiles/profiles.json "$OUT/profiles_b1.json" 2>/dev/null
step tune 300 python3 tune.py --layers "$layers" --trials 16 --prior 12 --no-ncu --top 2 --confirm-rounds 2 \
  --run-id fused-b1-wide-2026-11-23
grep -E "^winner|^wrote|trials in all" "$OUT/tune.log" | tail -12
left=$(( 570 - ($(date +%s) - t0) ))
step bench "$left" python3 tune.py bench --measure-only --steps tuned --layers "$layers" --jobs 16
grep -E "^  r50f_" "$OUT/bench.log" | tail -4
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl \
  results/nvidia-h100-80gb-hbm3/bench.yaml
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
