#!/usr/bin/env bash
# Device calls (H100, 2026-11-23, fourth session): the one-run figures after swap_ab, the early-residual
# kernel, the early vector loads and the pipelined study, and the cold start as a new user meets it.
# PART=bare: every bare layer's best.yaml kernel beside cuDNN/cuBLAS, then 32 trials cold on a 1x1 layer.
# PART=fused: the 48 fused layers beside eager, torch.compile and their own kernel bare, then 32 trials
# cold on a 3x3 layer.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
cold() {  # NAME LAYER: an empty compile cache and no results, as a new user
  step "cold_$1" 170 python3 tune.py --layer "$2" --trials 32 --no-ncu --run-id cold --cache-dir "/tmp/cold_$1" --results-dir "/tmp/fresh_$1"
  grep -E "^(compile|validate)|trials in all|^winner" "$OUT/cold_$1.log" | head -6
}
if [ "${PART:-bare}" = bare ]; then
  step bench_bare 360 python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
  grep -E "^one run" -A2 "$OUT/bench_bare.log"
  cold 1x1 r50_s4_1x1_512to256_b32
else
  step bench_fused 330 python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b1,r50f_*_b32' --jobs 16
  grep -E "^one run" -A2 "$OUT/bench_fused.log"
  cold 3x3 r50_s4_3x3_b32
fi
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log
echo "total $(( $(date +%s) - t0 )) s"
