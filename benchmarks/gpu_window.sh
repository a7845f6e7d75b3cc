#!/usr/bin/env bash
# One GPU window (issue 46), as the device machine runs it: install the carried wheels (.whl/, from
# `bash ../shared/gpu/wheels.sh`), run every GPU check of benchmarks/gpu_check.py within DEADLINE seconds (default
# 480), then bring back the artifact and a tarball of the checks' logs, phase marks and run folders (no
# checkpoints, TensorBoard files or model caches) in $OUT. Rehearsed on a CPU by `--dry-run-cpu` (second argument):
#   bash benchmarks/gpu_window.sh 480                 # on the GPU machine (RLINF_COMMIT names the commit)
#   OUT=/tmp/window bash benchmarks/gpu_window.sh 1200 --dry-run-cpu
set -uo pipefail
cd "$(dirname "$0")/.."
deadline=${1:-480}
shift || true
out=${OUT:-/tmp/gpu_window}
mkdir -p "$out"
began=$(date +%s)
if [ -d .whl ] && [ "${1:-}" != "--dry-run-cpu" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_window: the wheels did not install" >&2; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
echo "gpu_window: ready in $(($(date +%s) - began)) s"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 benchmarks/gpu_check.py --deadline "$deadline" --out "$out/gpu_check.json" "$@"
code=$?
tar -czf "$out/runs.tgz" --exclude=checkpoints --exclude=tensorboard --exclude='*.safetensors' runs/gpu_check
ls -la "$out"
echo "gpu_window: done in $(($(date +%s) - began)) s (exit $code)"
exit $code
