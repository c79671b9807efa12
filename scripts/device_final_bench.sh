#!/usr/bin/env bash
# Device call: the one-run figures. Every bare layer's best.yaml kernel beside cuDNN/cuBLAS
# ('conv_1,r50_*'), then the tuned fused layers beside PyTorch eager, torch.compile and their own
# kernel without the epilogue ('r50f_*_b32'). bench.yaml keeps each layer as it is timed.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site CUTLASS_TUNER_CACHE=$PWD/.cache/tuner PYTHONUNBUFFERED=1
t0=$(date +%s)
step() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout -s INT -k 30 "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "$name: rc $? $(( $(date +%s) - s )) s"; }
step bench_bare 330 python3 tune.py bench --measure-only --steps tuned --layers 'conv_1,r50_*' --jobs 16
grep -E "^one run" -A1 "$OUT/bench_bare.log"
left=$(( 570 - ($(date +%s) - t0) ))
step bench_fused "$left" python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b32' --jobs 16
grep -E "r50f_|^one run" -A1 "$OUT/bench_fused.log" | tail -40
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml
echo "total $(( $(date +%s) - t0 )) s"
