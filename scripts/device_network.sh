#!/usr/bin/env bash
# Device call: a torchvision network (NET, default vgg11; BATCH, default 32) tuned end to end with
# TRIALS (default 32) trials per distinct convolution under one run id (resumable across calls), then,
# if time is left, its tuned kernels benched beside cuDNN, PyTorch eager and torch.compile, and the
# network reports of NET and of ResNet-50 (batch 32 and 1) written (tables and PNGs). Results under $OUT.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
net=${NET:-vgg11}; batch=${BATCH:-32}; slug=nvidia-h100-80gb-hbm3
layers_file=search_spaces/networks/${net}_b${batch}.yaml
mkdir -p search_spaces/networks
[ -n "${BEFORE:-}" ] && step before 120 bash -c "$BEFORE" && tail -3 "$OUT/before.log"
python3 tune.py --torchvision "$net" --batch "$batch" --write-layers "$layers_file"
python3 tune.py --torchvision "$net" --batch "$batch" --list-layers > "$OUT/${net}_layers.log" 2>&1
left=$(( ${TUNE_S:-420} - ($(date +%s) - t0) ))
step tune "$left" python3 tune.py --torchvision "$net" --batch "$batch" --trials "${TRIALS:-32}" --no-ncu \
  --top 2 --confirm-rounds 2 --run-id "${net}-b${batch}-2026-11-23"
grep -E "^wrote|finished earlier|trials in all|^error" "$OUT/tune.log" | tail -20
left=$(( 540 - ($(date +%s) - t0) ))
[ "$left" -gt 60 ] && step bench "$left" python3 tune.py bench --measure-only --steps tuned --layers-file "$layers_file" \
  --layers '*' --jobs 16
grep -E "^one run" -A1 "$OUT/bench.log" 2>/dev/null | tail -8
for spec in "$net $batch" "resnet50 32" "resnet50 1"; do
  set -- $spec
  python3 tune.py report --torchvision "$1" --batch "$2" --gpu "$slug" > "$OUT/report_${1}_b$2.log" 2>&1
  tail -4 "$OUT/report_${1}_b$2.log"
done
# One archive: the device tool returns only a handful of files a call (a call that left ten lost its
# best.yaml). results.tgz holds the results, the journal, the logs, the layer file and the charts.
cp "$layers_file" "$OUT/" 2>/dev/null
tar czf "$OUT/results.tgz" results/$slug/best.yaml results/$slug/history.jsonl results/$slug/bench.yaml \
  results/$slug/optuna.journal results/$slug/plots/report_*.png -C "$OUT" $(cd "$OUT" && ls *.log *.yaml *.tgz 2>/dev/null)
find "$OUT" -maxdepth 1 -type f ! -name results.tgz -delete
echo "total $(( $(date +%s) - t0 )) s"
