#!/usr/bin/env bash
# Record one cuDNN convolution (PyTorch, f16, channels_last, N32 56x56 C64 K64 3x3) in every Nsight Compute
# report form the diagnosis reads: the CLI details page as text and as CSV, the raw page as CSV, and a
# .ncu-rep file, plus whether ncu's Python report interface (ncu_report) loads it. These are the fixtures
# tests/data/ncu/h100_cudnn_conv_* (recorded on an H100 with Nsight Compute 2025.3.1). Needs the GPU, ncu
# and PyTorch.
usage="usage: bash tools/capture_ncu_forms.sh OUT_DIR   (writes the report forms into OUT_DIR)"
case ${1:-} in
  -h|--help) echo "$usage"; exit 0 ;;
  "") echo "$usage" >&2; exit 2 ;;
esac
set -u
out=$1
mkdir -p "$out"
one_conv=$(mktemp --suffix=.py)
trap 'rm -f "$one_conv"' EXIT
cat > "$one_conv" <<'PY'
import torch
x = torch.randn(32, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
for _ in range(3):
    torch.nn.functional.conv2d(x, w, padding=1)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.nn.functional.conv2d(x, w, padding=1)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
PY
sections="--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis"
common="--profile-from-start off --clock-control none -c 1"
ncu $common $sections --page details python3 "$one_conv" > "$out/h100_cudnn_conv_details.txt" 2>&1
ncu $common $sections --csv --page details python3 "$one_conv" > "$out/h100_cudnn_conv_details.csv" 2>&1
ncu $common $sections --csv --page raw python3 "$one_conv" > "$out/h100_cudnn_conv_raw.csv" 2>&1
ncu $common $sections -f -o "$out/h100_cudnn_conv" python3 "$one_conv" > "$out/ncu_rep.log" 2>&1
extras=$(dirname "$(readlink -f "$(command -v ncu)")")/extras/python
[ -f "$extras/ncu_report.py" ] || extras=$(dirname "$(find / -name ncu_report.py -not -path '/proc/*' 2>/dev/null | head -1)")
echo "ncu_report.py in $extras" > "$out/ncu_report_where.txt"
ls -la "$(dirname "$(readlink -f "$(command -v ncu)")")" >> "$out/ncu_report_where.txt" 2>&1
python3 - "$extras" "$out/h100_cudnn_conv.ncu-rep" > "$out/ncu_report_check.txt" 2>&1 <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ncu_report
context = ncu_report.load_report(sys.argv[2])
first_range = context.range_by_idx(0)  # held: an action of a freed range is not safe to read
action = first_range.action_by_idx(0)
print(len(action.metric_names()), "metrics, e.g.", sorted(action.metric_names())[:8])
print("ncu_report from", sys.argv[1], "kernel", action.name())
for name in ("gpu__time_duration.sum", "launch__grid_size", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
             "device__attribute_multiprocessor_count", "device__attribute_display_name"):
    metric = action.metric_by_name(name)
    print(name, metric.value() if metric is not None else None)  # as_string() is None for a number
PY
ls -la "$out"
