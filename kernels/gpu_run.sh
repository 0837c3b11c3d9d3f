#!/usr/bin/env bash
# One command on the GPU machine (no install needed): build the extension, run the
# GPU tests, run the benchmark. Used as:  bash kernels/gpu_run.sh [bench args...]
# Logs and the CSV go to $OUT (the device tool's folder) or runs/bench-kernels.
set -o pipefail
OUT=${OUT:-runs/bench-kernels}
mkdir -p "$OUT"
PP=/tmp/swarmshake_pp
rm -rf "$PP"; mkdir -p "$PP/swarmshake"
cp swarmshake/*.py "$PP/swarmshake/"
for part in reference_node chaos specs verify kernels reports; do
  [ -d "$part" ] && ln -s "$PWD/$part" "$PP/swarmshake/$part"
done
export PYTHONSAFEPATH=1 PYTHONPATH=$PP PYTHONUNBUFFERED=1 SWARMSHAKE_KERNELS_BUILD=${SWARMSHAKE_KERNELS_BUILD:-/tmp/swk_build}
export MAX_JOBS=${MAX_JOBS:-16}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
nvcc --version | tail -2
SECONDS=0
SWARMSHAKE_KERNELS_VERBOSE=${SWARMSHAKE_KERNELS_VERBOSE:-0} python3 - <<'PY' 2>&1 | tee "$OUT/build.log" | tail -60
from swarmshake.kernels import _ext
m = _ext.get()
print("extension:", m, "error:", _ext.build_error())
PY
echo "build took ${SECONDS}s"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  SECONDS=0
  python3 -m pytest -q -m gpu tests/kernels -p no:cacheprovider -x ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
  echo "tests took ${SECONDS}s"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 -m swarmshake.kernels.bench --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
fi
