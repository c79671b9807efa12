#!/usr/bin/env bash
# Device call (H100, sixth session): (1) CUTLASS 4.2's build of cuBLAS's tiling of r50_s5_1x1_512to2048_b32
# (swapped 128x224, clusters 1x1 and 4x1; scripts/spaces/gemm_nvjet_tiling.yaml) under Nsight Compute beside
# cuBLAS (scripts/profile_vs_baseline.py --params; nothing timed); (2) the GPU test suite (pytest -m gpu),
# with this session's epilogue_n cases. Everything comes back as one archive, $OUT/results.tgz.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
layer=r50_s5_1x1_512to2048_b32
step compile_nvjet_tiling 120 python3 tune.py bench --steps landscape --compile-only --family sm90_gemm --space-file scripts/spaces/gemm_nvjet_tiling.yaml --layers $layer --results-dir /tmp/nvjet_tiling --jobs 16
for c in 1 4; do
  step profile_c${c}x1 60 python3 scripts/profile_vs_baseline.py $layer --warp-states --out "$OUT/profiles_c${c}x1" --params "{\"tile\": \"128x224x64\", \"cluster\": \"${c}x1x1\", \"schedule\": \"cooperative\", \"scheduler\": \"persistent\", \"epilogue\": \"tma\", \"stages\": 0, \"raster\": 0, \"swizzle\": 1, \"split_k\": 1, \"swap_ab\": true, \"epilogue_n\": 0}"
  grep -E '"kernel"|Duration|Grid Size|Cluster Size' "$OUT/profile_c${c}x1.log" | head -10
done
left=$(( 590 - ($(date +%s) - t0) ))
step pytest_gpu "$left" python3 -m pytest -m gpu -q -p no:cacheprovider
tail -15 "$OUT/pytest_gpu.log"
cd "$OUT" && tar czf results.tgz --remove-files *.log profiles_c1x1 profiles_c4x1
echo "total $(( $(date +%s) - t0 )) s"
