#!/usr/bin/env bash
# The 2-node GPU demo on the GPU machine, in one command (no install of the package):
#   bash kernels/gpu_node_demo.sh [demo args...]
# The node processes need msgspec, aiomqtt, paho-mqtt, h11 and prometheus-client; a
# GPU machine without a registry gets them as wheels in .whl/ (the device tool's
# README says how to download them).  Logs go to $OUT (the device tool's folder)
# or runs/gpu-node-demo (ignored by git; published logs: docs/bench-results/).
set -o pipefail
OUT=${OUT:-runs/gpu-node-demo}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/swarmshake_site .whl/*.whl || exit 1
fi
PP=/tmp/swarmshake_pp
rm -rf "$PP"; mkdir -p "$PP/swarmshake"
cp swarmshake/*.py "$PP/swarmshake/"
for part in reference_node chaos specs verify kernels reports; do
  [ -d "$part" ] && ln -s "$PWD/$part" "$PP/swarmshake/$part"
done
export PYTHONSAFEPATH=1 PYTHONPATH=$PP:/tmp/swarmshake_site PYTHONUNBUFFERED=1
export SWARMSHAKE_KERNELS_BUILD=${SWARMSHAKE_KERNELS_BUILD:-/tmp/swk_build} MAX_JOBS=${MAX_JOBS:-16}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECONDS=0
python3 -c "from swarmshake.kernels import _ext; print('extension:', _ext.get() is not None, _ext.build_error())"
echo "build took ${SECONDS}s"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -m gpu tests/reference_node/training -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest_training_gpu.log" | tail -30
fi
python3 -m swarmshake.chaos.bench.gpu_node_demo "$@" 2>&1 | tee "$OUT/gpu_node_demo.log"
