#!/usr/bin/env bash
# Device call (H100, 2026-11-23, issue 10): the vectors loaded into registers at kernel start
# (CUTLASS_CONV_TUNER_EARLY_VECTORS, prefetch_fusion.h) against CUTLASS's begin(), interleaved with the
# bare twin, on ten batch-1 fused layers (all their kernels are one tile per CTA).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step ab_early_vectors 540 python3 scripts/ab_epilogue_prefetch.py --macro CUTLASS_CONV_TUNER_EARLY_VECTORS --rounds 3 r50f_s2_1x1_64to64_b1 r50f_s2_1x1_256to64_b1 r50f_s2_3x3_b1 r50f_s2_down_b1 r50f_s3_1x1_256to128_b1 r50f_s3_down_s2_b1 r50f_s4_1x1_512to256_b1 r50f_s5_1x1_2048to512_b1 r50f_s3_1x1_128to512_b1 r50f_s5_3x3_b1
tail -14 "$OUT/ab_early_vectors.log"
echo "total $(( $(date +%s) - t0 )) s"
