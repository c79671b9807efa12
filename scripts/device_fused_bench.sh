#!/usr/bin/env bash
# Device call: every tuned fused layer matching LAYERS (default r50f_*_b32) timed beside PyTorch eager,
# torch.compile (Dynamo reset per layer), cuDNN and its own kernel without the epilogue; bench.yaml keeps
# other layers' figures. BEFORE: an optional command run first (e.g. the torchvision import check).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
[ -n "${BEFORE:-}" ] && step before "${BEFORE_S:-150}" bash -c "$BEFORE" && tail -3 "$OUT/before.log"
left=$(( 575 - ($(date +%s) - t0) ))
step bench_fused "$left" python3 tune.py bench --measure-only --steps tuned --layers "${LAYERS:-r50f_*_b32}" --jobs 16
grep -E "^  r50f_|^one run" -A1 "$OUT/bench_fused.log" | tail -40
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/bench.yaml
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
