#!/bin/bash
# Device side of the session-17 (second) mutation run: 2b2cdcb..29eb4e6, both files (carried in .mutcarry, not tracked).
set -u
CARRY=$PWD/.mutcarry
F="reference_node/protocol/node_core.py reference_node/protocol/detector.py"
{
echo "nproc=$(nproc) date=$(date -u +%FT%TZ) tar-commit=$(git get-tar-commit-id < $CARRY/src.tar 2>/dev/null || python3 -c 'import sys,tarfile;print(tarfile.open(sys.argv[1]).pax_headers.get("comment"))' $CARRY/src.tar)"
nvidia-smi -L 2>&1
rm -rf /tmp/src /tmp/site && mkdir -p /tmp/src /tmp/site
tar -xf $CARRY/src.tar -C /tmp/src
pip install --no-index --no-deps --target /tmp/site $CARRY/wheels/*.whl 2>&1 | tail -2
cd /tmp/src
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c 'import sys,torch,numpy,pytest,hypothesis,msgspec,blake3; print("python",sys.version.split()[0],"torch",torch.__version__,"numpy",numpy.__version__,"pytest",pytest.__version__,"hypothesis",hypothesis.__version__,"msgspec",msgspec.__version__)'
python3 -c 'import swarmshake' 2>&1 | tail -1
# Where a scratch copy (as the script makes them) imports the cores from:
python3 - <<'PY'
import os, subprocess, sys, shutil
sys.path.insert(0, "scripts"); import mutation
s = mutation.make_scratch()
env = dict(os.environ, PYTHONPATH=f"{s}:/tmp/site")
print(subprocess.run([sys.executable, "-c", "import swarmshake.reference_node.protocol.node_core as n, swarmshake.reference_node.protocol.detector as d; print(n.__file__); print(d.__file__)"], cwd=s, env=env, capture_output=True, text=True).stdout.strip(), "(scratch", s, ")")
shutil.rmtree(s)
PY
} > $OUT/env.txt 2>&1
cd /tmp/src
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 scripts/mutation.py --all --list $F > $OUT/list.txt
ONLY=$(sed 's/^/--only /' $CARRY/only.txt | tr '\n' ' ')
python3 scripts/mutation.py $ONLY --list $F > $OUT/selected-device.txt
awk 'NR==FNR{w[$1]=1;next} ($2 in w)' $CARRY/only.txt $OUT/list.txt > $OUT/selected-from-list.txt
if cmp -s $OUT/list.txt $CARRY/list-local.txt && cmp -s $OUT/selected-device.txt $CARRY/selected-local.txt && cmp -s $OUT/selected-from-list.txt $CARRY/selected-local.txt; then echo "selection: device --list == local --list ($(wc -l < $OUT/list.txt) lines), selected $(wc -l < $OUT/selected-device.txt) identical"; else echo "SELECTION MISMATCH"; diff $OUT/selected-device.txt $CARRY/selected-local.txt | head; exit 2; fi
JOBS=$(( $(nproc) - 1 < 48 ? $(nproc) - 1 : 48 )); echo "jobs=$JOBS"
echo "START $(date -u +%FT%TZ)"
timeout -s KILL 540 python3 scripts/mutation.py $ONLY --jobs $JOBS --timeout-s 150 --json $OUT/result.json $F > $OUT/log.txt 2>&1
echo "rc=$? END $(date -u +%FT%TZ)"
tail -4 $OUT/log.txt
