#!/usr/bin/env bash
# Record one cuDNN convolution (PyTorch, f16, channels_last) in every Nsight Compute report form the
# diagnosis reads or should read: the CLI details page as text and as CSV, the raw page as CSV, and a
# .ncu-rep file, plus whether ncu's Python report interface (ncu_report) loads it. Fixtures for
# tests/data/ncu. usage: bash scripts/capture_ncu_forms.sh OUT_DIR
set -u
out=${1:?OUT_DIR}
mkdir -p "$out"
cat > /tmp/one_conv.py <<'PY'
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
ncu $common $sections --page details python3 /tmp/one_conv.py > "$out/h100_cudnn_conv_details.txt" 2>&1
ncu $common $sections --csv --page details python3 /tmp/one_conv.py > "$out/h100_cudnn_conv_details.csv" 2>&1
ncu $common $sections --csv --page raw python3 /tmp/one_conv.py > "$out/h100_cudnn_conv_raw.csv" 2>&1
ncu $common $sections -f -o "$out/h100_cudnn_conv" python3 /tmp/one_conv.py > "$out/ncu_rep.log" 2>&1
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
