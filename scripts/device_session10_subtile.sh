#!/usr/bin/env bash
# Device call (H100, sixth session), issue 9: the TMA epilogue's subtile width (sm90_gemm's epilogue_n knob).
# (1) r50_s5_1x1_512to2048_b32 over its 128x256 / 64x256 / 128x208 / 128x224 tiles with explicit subtiles
# (scripts/spaces/gemm_epilogue_subtile.yaml); (2) the swapped 128x96 and 128x192 winners of the two other
# batch-32 1x1 layers nearest cuBLAS (scripts/spaces/gemm_epilogue_subtile_swapped.yaml); each against its
# best.yaml kernel re-measured beside the finalists; (3) the one-run bare bench.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step subtile_512to2048 200 python3 tune.py --layers r50_s5_1x1_512to2048_b32 --family sm90_gemm --space-file scripts/spaces/gemm_epilogue_subtile.yaml --trials 10 --prior 13 --no-ncu --confirm-rounds 3 --top 3 --run-id subtile-2026-11-23
step subtile_swapped 180 python3 tune.py --layers r50_s4_1x1_1024to256_b32,r50_s5_1x1_1024to512_b32 --family sm90_gemm --space-file scripts/spaces/gemm_epilogue_subtile_swapped.yaml --trials 6 --prior 8 --no-ncu --confirm-rounds 3 --top 3 --run-id subtile-swapped-2026-11-23
for f in subtile_512to2048 subtile_swapped; do grep -E "trials in all|Traceback|rror|compile_failed|#[123] |previous|faster|slower|same" "$OUT/$f.log" | tail -16; done
left=$(( 585 - ($(date +%s) - t0) ))
step bench_bare "$left" python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
grep -E "^one run" -A2 "$OUT/bench_bare.log" | head -6
grep -E "1x1_(512to2048|1024to256|1024to512)_b32" "$OUT/bench_bare.log" | head -3
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl results/nvidia-h100-80gb-hbm3/bench.yaml $OUT/*.log $OUT/optuna.journal.gz
rm -f "$OUT"/*.log "$OUT/optuna.journal.gz"
echo "total $(( $(date +%s) - t0 )) s"
