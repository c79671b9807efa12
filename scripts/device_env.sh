# Sourced by scripts/device_*.sh (device tool calls): installs the carried wheels, sets the tuner's
# environment, and defines `step NAME SECONDS COMMAND...`, which runs COMMAND under a time limit
# (SIGINT, so the tuner records what it measured) with its output in $OUT/NAME.log, and prints its
# exit status and seconds.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site CUTLASS_TUNER_CACHE=$PWD/.cache/tuner PYTHONUNBUFFERED=1
step() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout -s INT -k 30 "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "$name: rc $? $(( $(date +%s) - s )) s"; }
