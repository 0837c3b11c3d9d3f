"""torchft and TorchElastic on the Docker backend: their own commands in holder containers,
their cluster services in holders of their own, link faults as iptables rules entered in
the holders' namespaces (the rules of ``chaos/netns.py``), and the smoke suites end to end.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from swarmshake.chaos.backends.docker import IMAGE_VENV_BIN, in_image
from swarmshake.chaos.netns import HolderNamespaces, NetnsError, NetnsLink, NetnsNetwork
from swarmshake.chaos.systems import load_system

ROOT = Path(__file__).resolve().parents[2]
PORT = 7912
SERVE = (
    "import socket\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('0.0.0.0', {PORT})); s.listen(16)\n"
    "while True:\n    c,_=s.accept(); c.close()\n"
)
CONNECT = (
    "import socket,sys\n"
    "s=socket.socket(); s.settimeout(1.5)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('ok')\n"
    "except socket.timeout: print('timeout')\n"
    "except OSError as e: print(type(e).__name__)\n"
)


def test_programs_of_the_harness_venv_run_from_the_images_venv():
    venv_bin = Path(sys.executable).parent
    python = f"{IMAGE_VENV_BIN}/{Path(sys.executable).name}"  # python or python3: both there
    assert in_image((sys.executable, "-m", "x")) == (python, "-m", "x")
    torchrun = str(venv_bin / "torchrun")
    assert in_image((torchrun, "--nnodes=2:3")) == (f"{IMAGE_VENV_BIN}/torchrun", "--nnodes=2:3")
    # Anything else is the system's own business: a path in the image, or a name on PATH.
    assert in_image(("/usr/bin/env", "true")) == ("/usr/bin/env", "true")
    assert in_image(("torchrun", "-m", "w")) == ("torchrun", "-m", "w")


def test_holder_namespaces_apply_the_netns_rules_through_a_process_pid(tmp_path):
    """The Docker path without Docker: namespaces held by a process (as a holder
    container holds its node's), entered by pid with nsenter; a cut and a reset act
    there exactly as the local backend's rules do."""
    local = NetnsNetwork(f"test-holders-{tmp_path.name}")
    try:
        asyncio.run(local.create(["n1", "n2"]))
    except NetnsError as error:
        pytest.fail(f"network namespaces unavailable ({error}): the harness needs root here")
    holders = [
        subprocess.Popen([*local.exec_prefix(node), "sleep", "120"]) for node in ("n1", "n2")
    ]
    server = subprocess.Popen([*local.exec_prefix("n2"), sys.executable, "-c", SERVE])
    try:
        net = HolderNamespaces(
            "test-holders", addresses=dict(local.addresses),
            holder_pids={"n1": holders[0].pid, "n2": holders[1].pid},
        )  # fmt: skip
        asyncio.run(net.create(["n1", "n2"]))

        def dial() -> str:
            done = subprocess.run(
                [*net.exec_prefix("n1"), sys.executable, "-c", CONNECT, net.addresses["n2"],
                 str(PORT)],
                capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
            return done.stdout.strip() or done.stderr.strip()

        deadline = time.monotonic() + 10  # the listener binds within milliseconds
        while dial() != "ok":
            assert time.monotonic() < deadline, "n2's listener never answered"
        link = NetnsLink(net, "n1", "n2")
        asyncio.run(link.cut())
        assert dial() == "timeout"
        asyncio.run(link.restore())
        assert dial() == "ok"
        asyncio.run(link.add_toxic("reset_peer", {}))
        assert dial() == "ConnectionRefusedError"
        asyncio.run(net.reset())
        assert dial() == "ok"
        with pytest.raises(NetnsError, match="no hub namespace"):
            net.exec_prefix(None)
        with pytest.raises(NetnsError, match="no holder pid"):
            asyncio.run(HolderNamespaces("x", addresses={"n1": "10.0.0.1"}).create(["n1"]))
    finally:
        for process in (server, *holders):
            process.kill()
            process.wait(timeout=10)
        asyncio.run(local.destroy())


def docker_unavailable() -> str:
    from swarmshake.chaos.backends.docker import docker_available

    status = ROOT / ".cache" / "docker-unavailable"
    return docker_available() or (status.read_text().strip() if status.exists() else "")


def run_smoke_on_docker(tmp_path: Path, suite: str) -> tuple[dict, dict, Path]:
    """``swarmshake run suites/<suite>.yaml --backend docker``: (result, verdict, run dir)."""
    if reason := docker_unavailable():
        pytest.skip(f"Docker unavailable on this machine: {reason}")
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake.chaos.cli", "run", str(ROOT / "suites" / f"{suite}.yaml"),
         "--backend", "docker", "--out", str(tmp_path / "runs"), "--json", "--quiet"],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout)
    run_dir = Path(result["run_dir"])
    verdict = json.loads((run_dir / "verdict.json").read_text())
    return result, verdict, run_dir


def assert_full_run_on_containers(
    result: dict,
    verdict: dict,
    run_dir: Path,
    judged: tuple[str, ...],
    leftovers: Callable[[Path], tuple[list, list]],
) -> None:
    """The run left DESIGN's run directory, the ``judged`` properties were decided (the
    workload's history reached the checkers from the containers), every smoke fault
    was applied, the crashed node came back, and no container or network is left."""
    statuses = {name: r["status"] for name, r in verdict["results"].items()}
    messages = {name: r["message"] for name, r in verdict["results"].items()}
    assert all(statuses[p] in ("valid", "invalid") for p in judged), messages
    assert statuses["S1"] == "valid", messages  # participants of a step agree
    for name in ("scenario.yaml", "report.html", "junit.xml", "summary.md", "system.json"):
        assert (run_dir / name).is_file(), name
    assert {p.stem for p in (run_dir / "events").glob("*.jsonl")} >= {"harness", "n1", "n2", "n3"}
    faults = [
        json.loads(line)
        for line in (run_dir / "events" / "harness.jsonl").read_text().splitlines()
        if '"fault"' in line
    ]
    applied = {(f["op"], f["phase"]) for f in faults if f.get("kind") == "fault"}
    assert {("crash", "inject"), ("partition", "inject"), ("pause", "inject")} <= applied, applied
    # n3 crashed and came back: a second incarnation wrote its start.
    starts = [
        json.loads(line)
        for line in (run_dir / "events" / "n3.jsonl").read_text().splitlines()
        if '"start"' in line
    ]
    assert len({s["incarnation"] for s in starts if s.get("kind") == "start"}) >= 2, starts
    assert leftovers(run_dir) == ([], [])


@pytest.mark.docker
@pytest.mark.slow
def test_torchft_smoke_suite_on_docker(tmp_path, docker_leftovers):
    """3 torchft replica groups in containers, the Lighthouse in a holder of its own:
    crash + restart, one node isolated by iptables in its holder, a pause."""
    if problems := load_system("torchft").check():
        pytest.skip("; ".join(problems))
    result, verdict, run_dir = run_smoke_on_docker(tmp_path, "torchft-smoke")
    assert_full_run_on_containers(
        result, verdict, run_dir, judged=("S1", "L2", "L3"), leftovers=docker_leftovers
    )
    # L1 is decided, or unknown for the one reason timing allows: torchft's survivors
    # drop a killed group after the Lighthouse's 5 s heartbeat timeout, and in some
    # runs the crashed group is back (the crash heals after 10 s) before any quorum
    # without it is logged (side by side, session 5: 1 of 5 crash trials; CI check,
    # session 6: 1 of 3 Docker runs).  Unknown for any other reason fails here.
    l1 = verdict["results"]["L1"]
    assert l1["status"] in ("valid", "invalid") or (
        "no crash lasted long enough (D) or was followed by a new group" in l1["message"]
    ), l1


@pytest.mark.docker
@pytest.mark.slow
def test_torchelastic_smoke_suite_on_docker(tmp_path, docker_leftovers):
    """3 torchrun agents in containers, the rendezvous store in a holder of its own:
    crash + restart, one node isolated by iptables in its holder, a pause."""
    result, verdict, run_dir = run_smoke_on_docker(tmp_path, "torchelastic-smoke")
    # L1 may stay unknown: the suite's crash heals after 10 s, and in the first Docker
    # run TorchElastic's survivors formed their next group 19 s after the crash, so no
    # group left the crashed node out while it was down.
    assert_full_run_on_containers(
        result, verdict, run_dir, judged=("S1", "L2", "L3"), leftovers=docker_leftovers
    )
