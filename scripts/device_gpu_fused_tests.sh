#!/usr/bin/env bash
# Device call: the GPU tests of the epilogues (every family's fused kernels, the planted wrong epilogues)
# and the short conv_1 study that writes best.yaml.
set -u
source "$(dirname "$0")/device_env.sh"
timeout -s INT 230 python3 -m pytest -m gpu -q -p no:cacheprovider -k "fused or wrong_epilogue or refuses or short_conv_1" \
  > "$OUT/pytest_gpu_fused.log" 2>&1
echo "rc $?"; tail -15 "$OUT/pytest_gpu_fused.log"
