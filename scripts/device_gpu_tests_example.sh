#!/usr/bin/env bash
# Device call: the whole GPU test suite (pytest -m gpu: every family's kernels and fused epilogues, the
# planted wrong kernels and epilogues, faults, ncu, a short study), and meanwhile, on one spare core, the
# C++ example built against a header of one fused layer per family (EXAMPLE_LAYERS), then run: each
# kernel given its scale, bias and residual, checked against CUTLASS's device reference with the epilogue
# applied, and timed. Last, on an idle machine, every torchvision classification model imported (timings).
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
slug=nvidia-h100-80gb-hbm3
layers=${EXAMPLE_LAYERS:-r50f_stem_b32,r50f_s3_down_s2_b32,r50f_s2_3x3_b32,r50f_s2_1x1_64to256_b32,r50f_s2_1x1_64to256_b1}
python3 - "$layers" "$slug" <<'PY'
import sys, yaml, pathlib
names, slug = sys.argv[1].split(","), sys.argv[2]
document = yaml.safe_load(open(f"results/{slug}/best.yaml"))
document["layers"] = {name: document["layers"][name] for name in names}
document["layer_count"] = len(names)
folder = pathlib.Path(f"/tmp/example/results/{slug}")
folder.mkdir(parents=True, exist_ok=True)
(folder / "best.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
PY
python3 tune.py export --results-dir /tmp/example/results > "$OUT/example_export.log" 2>&1
( cmake -S examples/cpp -B /tmp/example/build -DTUNED_HEADER=/tmp/example/results/$slug/best_configs.h \
    -DPython3_EXECUTABLE="$(command -v python3)" && cmake --build /tmp/example/build -j 2 ) > "$OUT/example_build.log" 2>&1 &
build=$!
step pytest_gpu 440 python3 -m pytest -m gpu -q -p no:cacheprovider
tail -15 "$OUT/pytest_gpu.log"
left=$(( 540 - ($(date +%s) - t0) ))
timeout "$left" tail --pid=$build -f /dev/null; wait $build; echo "example build: rc $? at $(( $(date +%s) - t0 )) s"
tail -3 "$OUT/example_build.log"
[ -x /tmp/example/build/tuned_convs ] && step example_run 40 /tmp/example/build/tuned_convs --max-deviation 0.10
tail -12 "$OUT/example_run.log" 2>/dev/null
left=$(( 580 - ($(date +%s) - t0) ))
step import_torchvision "$left" python3 scripts/import_torchvision_all.py --batch 32
tail -3 "$OUT/import_torchvision.log"
gzip -f "$OUT"/*.log
echo "total $(( $(date +%s) - t0 )) s"
