#!/usr/bin/env bash
# The chaos run on GPUs, in one script, two halves:
#
#   bash scripts/gpu_chaos_run.sh prepare
#       here (with network): fills .gpu-carry/ (ignored through .git/info/exclude)
#       with what a bare GPU machine lacks: the node's wheels for CPython 3.12
#       (aiomqtt, paho-mqtt, msgspec, blake3), the static Toxiproxy build
#       (.tools/bin/toxiproxy-server) and the mosquitto broker with its shared
#       libraries (not glibc's own: the machine's newer glibc runs them).
#       Name .gpu-carry in the device tool's `carry`.
#
#   bash scripts/gpu_chaos_run.sh run [SUITE] [PYTHON]
#       on the GPU machine (or here, with SUITE on the CPU, as a check of the
#       setup): installs the wheels into a scratch site folder, puts the broker and
#       Toxiproxy on PATH, builds the CUDA extension once (nodes then load it),
#       gives each node a GPU of its own (SWARMSHAKE_NODE_GPUS, round robin when
#       there are fewer GPUs than nodes), runs `swarmshake run SUITE`
#       (default suites/gpu-smoke.yaml), then the kernel profile
#       (chaos/bench/gpu_profile.py).  Results go to $OUT (the device tool's folder)
#       or runs/gpu-chaos: verdict.json, summary.md, the recovery figures, the
#       profiler table, nvidia-smi samples, a tarball of the run directory.
#       PROFILE=0 skips the profile; PROFILE_MODEL (default large) sizes it,
#       PROFILE_ARGS adds gpu_profile options (e.g. "--rules median --nodes 4");
#       BUILD_TIMEOUT_S (240), PROFILE_TIMEOUT_S (150) and RUN_TIMEOUT_S (420) bound
#       the three parts; CALL_BUDGET_S (e.g. 570, the device call's limit less a
#       margin) shortens the run's bound to what is left of it once the build and
#       the profile are done, keeping ARCHIVE_MARGIN_S (30) for the results.
#       CHAOS=0 stops after the profile (no chaos run).
#       GPU_TESTS="tests/..." runs those files' gpu-marked tests first (pytest_gpu.log,
#       bounded by GPU_TESTS_TIMEOUT_S, 120).
#       The device tool brings back at most 8 files from $OUT: the small side
#       files (gpus.csv, nvidia_smi.csv, run.json, run.stderr, figures.json,
#       gpu_profile.json, pytest_gpu.log) travel in extras.tgz; figures.md holds run_figures' tables.
#
#   bash scripts/gpu_chaos_run.sh cpu-bench overhead --params 100M ...
#       on the device machine: `swarmshake bench ...` on its CPUs, no GPU visible
#       ($OUT/bench.json, bench.log, cpu.txt).
set -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/.gpu-carry
WHEELS="aiomqtt==2.5.1 paho-mqtt==2.2.0 msgspec==0.22.0 blake3==1.0.11"

prepare() {
  grep -qx '/.gpu-carry/' "$ROOT/.git/info/exclude" 2>/dev/null \
    || { mkdir -p "$ROOT/.git/info"; echo '/.gpu-carry/' >>"$ROOT/.git/info/exclude"; }
  rm -rf "$CARRY"; mkdir -p "$CARRY/whl" "$CARRY/bin" "$CARRY/lib"
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$CARRY/whl" $WHEELS || return 1
  cp "$ROOT/.tools/bin/toxiproxy-server" "$CARRY/bin/" || return 1
  local real
  for tool in /usr/sbin/mosquitto /usr/bin/mosquitto_passwd; do
    [ -x "$tool" ] || { echo "$tool missing: apt-get install mosquitto" >&2; return 1; }
    real=$CARRY/bin/$(basename "$tool").real
    cp "$tool" "$real"
    ldd "$tool" | awk '/=> \//{print $3}' | while read -r lib; do
      case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*) ;;
        *) cp -L "$lib" "$CARRY/lib/" ;;
      esac
    done
    # A wrapper, so only the broker sees the carried libraries (not Python or CUDA).
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' \
      '"$(dirname "$0")/../lib"' "\"\$(dirname \"\$0\")/$(basename "$real")\"" \
      >"$CARRY/bin/$(basename "$tool")"
    chmod +x "$CARRY/bin/$(basename "$tool")"
  done
  du -sh "$CARRY"
}

# At most 8 files come back from the device tool: the small side files go as one.
pack_side_files() {
  local out=$1 side=() f
  for f in gpus.csv nvidia_smi.csv run.json run.stderr figures.json gpu_profile.json \
    pytest_gpu.log; do [ -f "$out/$f" ] && side+=("$f"); done
  if [ ${#side[@]} -gt 0 ] && tar -czf "$out/extras.tgz" -C "$out" "${side[@]}"; then
    (cd "$out" && rm -f "${side[@]}")
  fi
}

# The carried wheels, broker and Toxiproxy on the paths, and the package importable
# without installing it (gpu_run.sh does the same): swarmshake/ holds the top-level
# modules, the parts are linked in.
use_carry() {
  local python=$1 site=/tmp/swarmshake_site pp=/tmp/swarmshake_pp
  cd "$ROOT" || return 1
  if ! "$python" -c 'import aiomqtt, msgspec, blake3' 2>/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$CARRY"/whl/*.whl || return 1
  fi
  rm -rf "$pp"; mkdir -p "$pp/swarmshake"
  cp swarmshake/*.py "$pp/swarmshake/"
  for part in reference_node chaos specs verify kernels reports; do
    [ -d "$part" ] && ln -s "$ROOT/$part" "$pp/swarmshake/$part"
  done
  export PATH=$CARRY/bin:$PATH PYTHONPATH=$pp:$site PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
  export SWARMSHAKE_TOXIPROXY=$CARRY/bin/toxiproxy-server
}

run() {
  local suite=${1:-suites/gpu-smoke.yaml} python=${2:-python3}
  local out=${OUT:-$ROOT/runs/gpu-chaos}
  mkdir -p "$out"
  [ -f "$suite" ] || { echo "no suite $suite" >&2; return 64; }
  [ -d "$CARRY/bin" ] || { echo "$CARRY missing: run '$0 prepare' and carry .gpu-carry" >&2; return 64; }
  local limit
  for limit in "${RUN_TIMEOUT_S:-420}" "${CALL_BUDGET_S:-0}" "${ARCHIVE_MARGIN_S:-0}" \
    "${BUILD_TIMEOUT_S:-0}" "${PROFILE_TIMEOUT_S:-0}" "${GPU_TESTS_TIMEOUT_S:-0}"; do
    case $limit in ''|*[!0-9]*)
      echo "RUN_TIMEOUT_S, CALL_BUDGET_S, ARCHIVE_MARGIN_S, BUILD_TIMEOUT_S, PROFILE_TIMEOUT_S, GPU_TESTS_TIMEOUT_S: whole seconds, got '$limit'" >&2
      return 64 ;;
    esac
  done
  use_carry "$python" || return 1
  export SWARMSHAKE_KERNELS_BUILD=${SWARMSHAKE_KERNELS_BUILD:-/tmp/swk_build} MAX_JOBS=${MAX_JOBS:-16}
  # Multicast stays off (the device tool's KINDS.md: it can take a shared host's GPUs down).
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  mosquitto -h 2>&1 | head -1
  toxiproxy-server --version 2>&1 | head -1
  local gpus=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$out/gpus.csv"
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
    [ -n "$gpus" ] && export SWARMSHAKE_NODE_GPUS=$gpus
    local build_started=$SECONDS
    # Bounded: a build that hangs must not eat the call (nodes then fall back to torch).
    timeout "${BUILD_TIMEOUT_S:-240}" "$python" -c "from swarmshake.kernels import _ext; m = _ext.get(); print('extension:', m is not None, _ext.build_error())" \
      2>&1 | tail -5
    echo "extension build took $((SECONDS - build_started))s"
    # GPU use during the run, every 2 s, bounded by the run (killed below).
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 2 \
      >"$out/nvidia_smi.csv" 2>/dev/null &
    local smi=$!
  fi
  # GPU_TESTS (test paths, optional): their gpu-marked tests, on this machine's GPU.
  if [ -n "${GPU_TESTS:-}" ] && [ -n "$gpus" ]; then
    # shellcheck disable=SC2086
    timeout "${GPU_TESTS_TIMEOUT_S:-120}" "$python" -m pytest -q -m gpu -p no:cacheprovider \
      $GPU_TESTS >"$out/pytest_gpu.log" 2>&1
    echo "GPU tests exit $?"; tail -15 "$out/pytest_gpu.log"
  fi
  # The profile first: it is short, and a chaos run that overruns its limit must not
  # take the profile down with it.
  if [ "${PROFILE:-1}" = 1 ] && [ -n "$gpus" ]; then
    timeout "${PROFILE_TIMEOUT_S:-150}" "$python" -m swarmshake.chaos.bench.gpu_profile \
      --model "${PROFILE_MODEL:-large}" ${PROFILE_ARGS:-} --out "$out" 2>&1 | tail -80
  fi
  if [ "${CHAOS:-1}" = 0 ]; then  # the build, GPU tests and profile only
    [ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
    pack_side_files "$out"
    echo "call took ${SECONDS}s"
    return 0
  fi
  echo "nodes' GPUs: ${SWARMSHAKE_NODE_GPUS:-none (CPU)}"
  local runs=/tmp/swarmshake-gpu-runs
  rm -rf "$runs"; mkdir -p "$runs"
  # Bounded so the results still come back inside the device tool's 10-minute call.
  local run_limit_s=${RUN_TIMEOUT_S:-420}
  if [ -n "${CALL_BUDGET_S:-}" ]; then
    local left_s=$((CALL_BUDGET_S - SECONDS - ${ARCHIVE_MARGIN_S:-30}))
    [ "$left_s" -lt "$run_limit_s" ] && run_limit_s=$left_s
    [ "$run_limit_s" -lt 60 ] && { echo "only ${run_limit_s}s left of CALL_BUDGET_S for the run" >&2; run_limit_s=60; }
  fi
  echo "run bound ${run_limit_s}s (${SECONDS}s into the call)"
  local run_started=$SECONDS
  timeout -s INT "$run_limit_s" "$python" -m swarmshake.chaos.cli run "$suite" --out "$runs" --quiet --json >"$out/run.json" \
    2>"$out/run.stderr"
  local rc=$?
  echo "swarmshake run exit $rc after $((SECONDS - run_started))s"
  [ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
  local dir
  dir=$(find "$runs" -mindepth 1 -maxdepth 1 -type d | head -1)
  if [ -n "$dir" ]; then
    for f in verdict.json summary.md; do [ -f "$dir/$f" ] && cp "$dir/$f" "$out/"; done
    cat "$dir/summary.md" 2>/dev/null | head -150
    # Throughput kept per fault and the state transfers' rate (not in summary.md).
    "$python" -m swarmshake.chaos.bench.run_figures "$dir" --json "$out/figures.json" \
      >"$out/figures.md" 2>&1
    cat "$out/figures.md"
    # Everything else of the run, without checkpoints (hundreds of MB at 100M).
    # Logs, histories and the report only: a node's checkpoints are GBs at 100M.
    (cd "$runs" && find "$(basename "$dir")" -maxdepth 3 \( -name '*.log' -o -name '*.jsonl' \
      -o -name '*.json' -o -name '*.md' -o -name '*.yaml' -o -name '*.toml' -o -name '*.html' \
      -o -name '*.svg' -o -name '*.png' \) -size -50M -print0 \
      | tar -czf "$out/run_dir.tgz" --null -T -) 2>/dev/null
  fi
  tail -20 "$out/run.stderr"
  rm -rf "$runs"
  pack_side_files "$out"
  echo "call took ${SECONDS}s"
  return $rc
}

# `cpu-bench ARGS...`: `swarmshake bench ARGS` on the device machine's CPUs (16 cores:
# the 100M-parameter overhead bench does not reach steady state on the 2-core dev
# machine), with the carried wheels and tools, no GPU visible; the JSON report and
# the progress log go to $OUT.
cpu_bench() {
  local out=${OUT:-$ROOT/runs/cpu-bench} python=${PYTHON:-python3}
  mkdir -p "$out"
  [ -d "$CARRY/bin" ] || { echo "$CARRY missing: run '$0 prepare' and carry .gpu-carry" >&2; return 64; }
  use_carry "$python" || return 1
  export CUDA_VISIBLE_DEVICES=""
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread)' | tee "$out/cpu.txt"
  "$python" -c 'import torch; print("torch", torch.__version__, "threads", torch.get_num_threads())'
  "$python" -m swarmshake.chaos.cli bench "$@" --json >"$out/bench.json" 2>"$out/bench.log"
  local rc=$?
  tail -40 "$out/bench.log"
  echo "bench exit $rc after ${SECONDS}s"
  return $rc
}

case ${1:-} in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  cpu-bench) shift; cpu_bench "$@" ;;
  *) echo "usage: $0 prepare | run [SUITE] [PYTHON] | cpu-bench BENCH-ARGS..." >&2; exit 64 ;;
esac
