"""The run-history schema: what every writer and checker of a run relies on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import msgspec
import pytest

from swarmshake.reference_node.protocol import history as h


def make(kind: type[h.EventBase], t: float, node: str = "n1", **fields) -> h.EventBase:
    return kind(t_wall=1_700_000_000.0 + t, t_mono=t, node=node, **fields)


SAMPLES = [
    make(h.Start, 0.0, seed=7, torch_version="2.15.0", threads=1),
    make(h.Suspect, 1.0, peer="n2", peer_incarnation=0, reason="phi=9.1"),
    make(h.DeclareDead, 1.2, peer="n2", peer_incarnation=0, suspicions=2),
    make(h.Accept, 1.3, step=4, ballot=[1, 0], value_fp="ab" * 8, contributors=["n1", "n3"]),
    make(h.Commit, 1.4, step=4, value_fp="ab" * 8, contributors=["n1", "n3"], param_fp="cd" * 8),
    make(h.Fault, 0.5, node=h.HARNESS, op="crash", target=["n2"], phase="inject"),
]


def test_every_kind_has_a_unique_tag():
    assert len(set(h.EVENT_KINDS)) == len(h.EVENT_KINDS)
    assert {"fault", "commit", "declare_dead", "start"} <= set(h.EVENT_KINDS)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip_is_exact(event):
    line = h.encode_event(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert h.decode_event(line) == event


def test_fault_event_has_the_design_fields():
    fault = msgspec.json.decode(h.encode_event(SAMPLES[-1]))
    assert {
        "t_wall",
        "t_mono",
        "node",
        "incarnation",
        "epoch",
        "step",
        "lamport",
        "kind",
    } <= fault.keys()
    assert (fault["kind"], fault["op"], fault["target"], fault["phase"]) == (
        "fault",
        "crash",
        ["n2"],
        "inject",
    )


def test_writer_and_reader_agree_and_history_is_ordered(tmp_path):
    events_dir = tmp_path / "events"
    with h.EventWriter(events_dir / "n1.jsonl") as writer:
        for event in SAMPLES[:-1]:
            writer.write(event)
    h.write_history(events_dir / "harness.jsonl", [SAMPLES[-1]])
    history = h.History.load(tmp_path)
    assert [e.t_mono for e in history.events] == sorted(e.t_mono for e in SAMPLES)
    assert history.nodes() == ["n1"]
    assert list(history.of_kind(h.Fault)) == [SAMPLES[-1]]


def test_a_torn_last_line_is_skipped_and_counted(tmp_path):
    path = tmp_path / "n1.jsonl"
    path.write_bytes(h.encode_event(SAMPLES[0]) + h.encode_event(SAMPLES[1])[:25])
    result = h.read_events(path)
    assert result.events == [SAMPLES[0]] and result.torn_lines == 1


def test_a_malformed_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "n1.jsonl"
    bad = b'{"kind":"commit","t_wall":1,"t_mono":1,"node":"n1"}\n'  # fields missing
    path.write_bytes(h.encode_event(SAMPLES[0]) + bad + h.encode_event(SAMPLES[1]))
    with pytest.raises(h.HistoryError) as error:
        h.read_events(path)
    assert error.value.line_no == 2 and "n1.jsonl:2" in str(error.value)


def test_an_unknown_kind_is_rejected(tmp_path):
    path = tmp_path / "n1.jsonl"
    path.write_bytes(b'{"kind":"teleport","t_wall":1,"t_mono":1,"node":"n1"}\n')
    with pytest.raises(h.HistoryError, match="teleport|kind"):
        h.read_events(path)


def test_a_sigkilled_writer_loses_at_most_its_last_line(tmp_path):
    """A node killed mid-run leaves a history the reader accepts."""
    path = tmp_path / "n1.jsonl"
    script = (
        "import sys\n"
        "from swarmshake.reference_node.protocol import history as h\n"
        "w = h.EventWriter(sys.argv[1])\n"
        "i = 0\n"
        "while True:\n"
        "    w.write(h.TrainStep(t_wall=0.0, t_mono=float(i), node='n1', step=i, loss=1.0)); i += 1\n"
        "    if i == 2000: print('ready', flush=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    result = h.read_events(path)
    assert len(result.events) >= 2000 and result.torn_lines <= 1
    assert [e.step for e in result.events] == list(range(len(result.events)))
