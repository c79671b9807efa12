#!/usr/bin/env bash
# Device call: the one-run figures. Every bare layer's best.yaml kernel beside cuDNN/cuBLAS
# ('conv_1,r50_*'), then the tuned fused layers beside PyTorch eager, torch.compile and their own
# kernel without the epilogue ('r50f_*_b32'). bench.yaml keeps each layer as it is timed.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step bench_bare 330 python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
grep -E "^one run" -A1 "$OUT/bench_bare.log"
left=$(( 570 - ($(date +%s) - t0) ))
step bench_fused "$left" python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b32' --jobs 16
grep -E "r50f_|^one run" -A1 "$OUT/bench_fused.log" | tail -40
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml
echo "total $(( $(date +%s) - t0 )) s"
