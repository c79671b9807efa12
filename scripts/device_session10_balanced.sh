#!/usr/bin/env bash
# Device call (H100, sixth session), issue 9: (1) narrow sm90_gemm tunes of r50_s5_1x1_512to2048_b32 over
# tiles that spread its work over the 132 SMs (scripts/spaces/gemm_balanced_{unswapped,swapped}.yaml; every
# valid candidate queued from the prior, the best.yaml kernel re-measured beside the finalists);
# (2) the one-run figures: every bare layer's best.yaml kernel beside cuDNN (and cuBLAS on 1x1 layers);
# (3) if time is left, a cold 32-trial tune of a 1x1 layer (empty cache, fresh results) for the 2-minute goal.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
layer=r50_s5_1x1_512to2048_b32
step narrow_unswapped 150 python3 tune.py --layers $layer --family sm90_gemm --space-file scripts/spaces/gemm_balanced_unswapped.yaml --trials 8 --prior 8 --no-ncu --confirm-rounds 3 --top 3 --run-id balanced-2026-11-23
step narrow_swapped 200 python3 tune.py --layers $layer --family sm90_gemm --space-file scripts/spaces/gemm_balanced_swapped.yaml --trials 18 --prior 18 --no-ncu --confirm-rounds 3 --top 3 --run-id balanced-swapped-2026-11-23
for f in narrow_unswapped narrow_swapped; do grep -E "trials in all|Traceback|rror|winner|previous|#[123]" "$OUT/$f.log" | tail -12; done
step bench_bare 200 python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
grep -E "^one run" -A2 "$OUT/bench_bare.log"
grep -E "512to2048_b32" "$OUT/bench_bare.log" | head -3
left=$(( 580 - ($(date +%s) - t0) ))
if [ "$left" -gt 140 ]; then
  step cold_1x1 "$left" python3 tune.py --layer r50_s4_1x1_512to256_b32 --trials 32 --no-ncu --run-id cold --cache-dir /tmp/cold_1x1 --results-dir /tmp/fresh_1x1
  tail -5 "$OUT/cold_1x1.log"
else
  echo "cold_1x1 skipped: $left s left"
fi
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log $OUT/optuna.journal.gz
rm -f "$OUT"/*.log "$OUT/optuna.journal.gz"
echo "total $(( $(date +%s) - t0 )) s"
