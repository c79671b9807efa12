#!/usr/bin/env bash
# Device call: the 24 fused batch-1 layers benched (tuned vs PyTorch eager, torch.compile, cuDNN, the same
# kernel bare); then Nsight Compute on the fused layers furthest from their bare kernel (fused, bare and
# cuDNN/cuBLAS), while every torchvision classification model is imported on the CPU (timings).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step bench_fused_b1 300 python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b1' --jobs 16
grep -E "^one run" -A1 "$OUT/bench_fused_b1.log" | tail -12
python3 scripts/import_torchvision_all.py --batch 32 > "$OUT/import_torchvision.log" 2>&1 &
imports=$!
left=$(( 560 - ($(date +%s) - t0) ))
step profiles "$left" python3 scripts/profile_vs_baseline.py r50f_s2_1x1_64to64_b32 r50f_s2_1x1_64to256_b32 \
  r50f_s5_1x1_512to2048_b32 --out "$OUT/profiles"
wait $imports; echo "imports: rc $?"; tail -4 "$OUT/import_torchvision.log"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
