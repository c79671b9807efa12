#!/usr/bin/env bash
# Device call: the GPU tests of the epilogues (every family's fused kernels, the planted wrong epilogues)
# and the short conv_1 study that writes best.yaml.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site CUTLASS_TUNER_CACHE=$PWD/.cache/tuner PYTHONUNBUFFERED=1
timeout -s INT 230 python3 -m pytest -m gpu -q -p no:cacheprovider -k "fused or wrong_epilogue or refuses or short_conv_1" \
  > "$OUT/pytest_gpu_fused.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest_gpu_fused.log"
