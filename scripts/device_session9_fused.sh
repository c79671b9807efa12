#!/usr/bin/env bash
# Device call (H100, 2026-11-23, fifth session), issue 10: (1) the early vector loads now that sm90_conv
# kernels take them (their batch coordinate is cute's Int<0>, which the old check refused), A/B against
# CUTLASS's begin() on five batch-1 conv layers, interleaved with the bare twin; (2) the one-run figures:
# the 48 fused layers beside PyTorch eager, torch.compile and their own kernel bare.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step ab_early_vectors_conv 200 python3 scripts/ab_epilogue_prefetch.py --macro CUTLASS_CONV_TUNER_EARLY_VECTORS --rounds 3 r50f_s2_1x1_64to64_b1 r50f_s3_down_s2_b1 r50f_s4_1x1_512to256_b1 r50f_s5_3x3_b1 r50f_s2_3x3_b1
tail -9 "$OUT/ab_early_vectors_conv.log"
left=$(( 575 - ($(date +%s) - t0) ))
step bench_fused "$left" python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b1,r50f_*_b32' --jobs 16
grep -E "^one run" -A2 "$OUT/bench_fused.log"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log
rm -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
