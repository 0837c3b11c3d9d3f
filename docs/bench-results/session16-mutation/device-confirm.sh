#!/bin/bash
# Which test stops on the two timed-out mutants (own tests, per-test timeout 30 s).
CARRY=$PWD/.mutcarry
rm -rf /tmp/src /tmp/site && mkdir -p /tmp/src /tmp/site
tar -xf $CARRY/src.tar -C /tmp/src
pip install -q --no-index --no-deps --target /tmp/site $CARRY/wheels/*.whl 2>/dev/null
cd /tmp/src
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 - <<'PY'
import os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, "scripts"); import mutation
F = "reference_node/protocol/detector.py"
muts = {m.index: m for m in mutation.list_mutants(F)}
def one(i):
    m = muts.get(i); s = mutation.make_scratch(); t = s / F
    if m: t.write_text(mutation.mutated_source(t.read_text(), m))
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m",
           "not slow and not docker and not gpu and not long", "--timeout", "30",
           *mutation.own_tests(F)]
    env = dict(os.environ, PYTHONPATH=f"{s}:/tmp/site", PYTHONDONTWRITEBYTECODE="1")
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=s, env=env, capture_output=True, text=True, timeout=110)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "TIMEOUT110"
    lines = [l for l in out.splitlines() if "Timeout" in l or "FAILED" in l or "passed" in l or "failed" in l or l.startswith("E ")]
    return f"#{i} " + (f"line {m.line} {m.description}" if m else "unmutated") + f": rc={rc} {time.monotonic()-t0:.0f}s\n" + "\n".join(lines[-15:])
with ThreadPoolExecutor(3) as ex:
    for r in ex.map(one, (None, 270, 1289)): print(r, "\n====")
PY
