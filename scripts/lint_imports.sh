#!/usr/bin/env bash
# DESIGN.md's import table, checked by import-linter (contracts in .importlinter).
#   scripts/lint_imports.sh [ROOT]     (ROOT: a checkout, default this one)
# The parts are installed as swarmshake.<part> through setuptools' package-dir, so
# on disk swarmshake/ holds only __init__.py and __main__.py and grimp, which walks
# the root package's folder, would see none of them.  This builds the namespace as
# it is installed (swarmshake/<part> -> ROOT/<part> links) in a scratch folder and
# runs lint-imports from there, so that folder's swarmshake is the one imported.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "${1:-$HERE}" && pwd)"
LINT="$HERE/.venv/bin/lint-imports"
[[ -x $LINT ]] || { echo "lint_imports: $LINT missing; run scripts/setup.sh venv" >&2; exit 2; }
shadow="$(mktemp -d "${TMPDIR:-/tmp}/swarmshake-lint-imports.XXXXXX")"
trap 'rm -rf "$shadow"' EXIT
mkdir "$shadow/swarmshake"
cp "$ROOT"/swarmshake/*.py "$shadow/swarmshake/"
for part in reference_node chaos specs verify kernels reports; do
  ln -s "$ROOT/$part" "$shadow/swarmshake/$part"
done
cd "$shadow"
# --no-cache: the cache would be written into the scratch folder and thrown away.
"$LINT" --config "$ROOT/.importlinter" --no-cache
