#!/usr/bin/env bash
# Device call: the rest of the fused batch-32 tune (same run id: finished layers are skipped; seeds
# compiled for all in one parallel batch first), then every tuned fused layer timed beside PyTorch eager,
# torch.compile (Dynamo reset per layer), cuDNN and its own kernel without the epilogue.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step warm 130 python3 scripts/warm_twin_seeds.py 'r50f_*_b32' --jobs 16
step tune 300 python3 tune.py --layers 'r50f_*_b32' --trials 5 --prior 0 --no-ncu --top 2 --confirm-rounds 2 \
  --run-id fused-twins-2026-11-23
grep -E "^wrote|finished earlier|error" "$OUT/tune.log" | sort | uniq -c | head
left=$(( 575 - ($(date +%s) - t0) ))
step bench_fused "$left" python3 tune.py bench --measure-only --steps tuned --layers 'r50f_*_b32' --jobs 16
grep -E "^  r50f_|^one run" -A1 "$OUT/bench_fused.log" | tail -40
gzip -c results/nvidia-h100-80gb-hbm3/optuna.journal > "$OUT/optuna.journal.gz"
tar czf "$OUT/results.tgz" results/nvidia-h100-80gb-hbm3/best.yaml results/nvidia-h100-80gb-hbm3/history.jsonl \
  results/nvidia-h100-80gb-hbm3/bench.yaml
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
