#!/usr/bin/env bash
# Device call (H100, 2026-11-23, issues 9 and 10): (1) narrow swapped sm90_gemm tunes of the batch-32 1x1
# layers off or near the cuBLAS goal (scripts/spaces/gemm_swapped_wide.yaml; the previous best is
# re-measured beside the finalists); (2) the early-residual kernel (early_residual.h) against CUTLASS's,
# interleaved with the bare twin, on the batch-1 residual layers.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step narrow 330 python3 tune.py --layers r50_s5_1x1_512to2048_b32,r50_s5_1x1_1024to512_b32,r50_s4_1x1_1024to256_b32 --family sm90_gemm --space-file scripts/spaces/gemm_swapped_wide.yaml --trials 16 --prior 8 --no-ncu --confirm-rounds 2 --top 2 --run-id swap-narrow-2026-11-23
grep -E "^wrote|trials in all|Traceback|error" "$OUT/narrow.log" | tail -12
grep -E "^winner" "$OUT/narrow.log"
left=$(( 560 - ($(date +%s) - t0) ))
step ab_early_residual "$left" python3 scripts/ab_epilogue_prefetch.py --macro CUTLASS_CONV_TUNER_EARLY_RESIDUAL --rounds 3 r50f_s2_1x1_64to256_b1 r50f_s3_1x1_128to512_b1 r50f_s4_1x1_256to1024_b1 r50f_s5_1x1_512to2048_b1
cat "$OUT/ab_early_residual.log" | tail -8
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl $OUT/*.log
echo "total $(( $(date +%s) - t0 )) s"
