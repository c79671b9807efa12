#!/usr/bin/env bash
# Device call: the GPU test suite (pytest -m gpu), then one cuDNN conv recorded in every ncu report form
# (scripts/capture_ncu_forms.sh, .ncu-rep included) and that .ncu-rep diagnosed through ncu_report.
# Everything comes back as one archive, $OUT/results.tgz (the device tool returns only a few files).
# FORMS=0: the test suite alone, with the whole call's time.
set -u
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
step pytest_gpu "$([ "${FORMS:-1}" = 0 ] && echo 560 || echo 440)" python3 -m pytest -m gpu -q -p no:cacheprovider
tail -15 "$OUT/pytest_gpu.log"
if [ "${FORMS:-1}" = 0 ]; then
  cd "$OUT" && tar czf results.tgz --remove-files *.log
  echo "total $(( $(date +%s) - t0 )) s"; exit 0
fi
step forms 90 bash scripts/capture_ncu_forms.sh "$OUT/forms"
cat "$OUT/forms/ncu_report_where.txt" "$OUT/forms/ncu_report_check.txt" 2>/dev/null | head -8
step diagnose_rep 30 python3 tune.py diagnose "$OUT/forms/h100_cudnn_conv.ncu-rep"
tail -8 "$OUT/diagnose_rep.log"
rm -f "$OUT/forms/h100_cudnn_conv.ncu-rep"  # 6 MB, and the tests keep the text forms
cd "$OUT" && tar czf results.tgz --remove-files *.log forms
echo "total $(( $(date +%s) - t0 )) s"
