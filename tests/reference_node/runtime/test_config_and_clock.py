"""Node config validation (clear errors naming the field), the CLI's exit codes,
the injectable clock, and the durable acceptor/incarnation stores."""

from __future__ import annotations

import pytest

from swarmshake.reference_node.__main__ import main as node_main
from swarmshake.reference_node.config import ConfigError, from_dict, load, to_toml
from swarmshake.reference_node.protocol.commit import AcceptorRecord
from swarmshake.reference_node.protocol.messages import StepValue
from swarmshake.reference_node.runtime import incarnation
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.step_driver import AcceptorStore

KEY = "ab" * 32


def base(**sections):
    raw = {
        "node": {"id": "n1", "members": ["n1", "n2"], "run_dir": "runs/x"},
        "network": {"run_key_hex": KEY},
        "peers": {"n2": {"host": "127.0.0.1", "control_port": 7201, "bulk_port": 7202}},
    }
    for name, fields in sections.items():
        raw.setdefault(name, {}).update(fields)
    return raw


def test_valid_config_and_derived_paths():
    config = from_dict(base())
    assert config.node_id == "n1"
    assert str(config.events_path) == "runs/x/events/n1.jsonl"
    assert str(config.checkpoint_dir) == "runs/x/checkpoints/n1"
    assert config.run_key() == bytes.fromhex(KEY)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (base(node={"id": "n9"}), "must be listed in members"),
        (base(node={"id": "bad id"}), "1-16 characters"),
        (base(network={"run_key_hex": "abcd"}), "at least 16 bytes"),
        (base(network={"run_key_hex": "zz" * 20}), "not hexadecimal"),
        (base(network={"control_port": 70000}), "not a TCP port"),
        (base(links={"connect_seconds": 1.0}), "[links]"),
        (base(worker={"nice": 40}), "nice=40"),
        (base(training={"aggregation": "krum"}), "2f+3"),
        (base(training={"learning_rate": "fast"}), "learning_rate"),
        (base(node={"members": ["n1", "n2", "n3"]}), "no address for peers ['n3']"),
        ({**base(), "surprise": {}}, "surprise"),
        (base(node={"bugs": ["no-such-bug"]}), "unknown bug switch no-such-bug"),
    ],
)
def test_bad_configs_name_the_problem(raw, message):
    with pytest.raises(ConfigError, match=None) as error:
        from_dict(raw, "node.toml")
    assert message in str(error.value)
    assert str(error.value).startswith("node.toml")


def test_toml_round_trip_and_overrides(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text(to_toml(base(training={"hidden": [64, 64]})))
    config = load(path, {"network.http_port": 8123, "step.max_steps": 7})
    assert config.training.hidden == [64, 64]
    assert config.network.http_port == 8123 and config.step.max_steps == 7
    assert config.peers["n2"].bulk_port == 7202


def test_cli_exits_64_on_bad_config_or_usage(tmp_path, capsys):
    assert node_main(["--config", str(tmp_path / "missing.toml")]) == 64
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[node\n")
    assert node_main(["--config", str(bad)]) == 64
    assert "not valid TOML" in capsys.readouterr().err
    assert node_main(["--config", str(bad), "--set", "nodot=1"]) == 64


class FakeHostClock:
    """The host's monotonic clock under test control (the node clock's input)."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_clock_skew_offset_drift_and_monotonic_hold():
    host = FakeHostClock()
    clock = NodeClock(offset_s=5.0, host=host)
    assert clock.now() == 105.0
    host.t = 101.0
    assert clock.now() == 106.0
    clock.set_skew(offset_s=0.0, drift_ppm=100_000)  # 10% fast, offset removed
    assert clock.now() == 106.0  # held: never backwards, though the target is 101
    host.t = 111.0
    assert clock.now() == pytest.approx(112.0)  # 101 + 10 * 1.1 > 106: running again
    assert clock.host_delay_s(1.1) == pytest.approx(1.0)
    assert clock.host_delay_s(-3) == 0.0


def test_acceptor_records_and_incarnations_survive_restart(tmp_path):
    store = AcceptorStore(tmp_path / "acceptor")
    value = StepValue(agg_fp="abc123", contributors=["n1", "n2"])
    store.write(AcceptorRecord(step=3, promised=(1, 0)))
    store.write(
        AcceptorRecord(step=3, promised=(2, 1), accepted_ballot=(2, 1), accepted_value=value)
    )
    store.write(AcceptorRecord(step=4, promised=(0, 0)))
    (tmp_path / "acceptor" / "step-000000000005.json").write_bytes(b'{"step": 5, "prom')  # torn
    records = AcceptorStore(tmp_path / "acceptor").load()
    assert [r.step for r in records] == [3, 4]
    assert records[0].accepted_value == value and tuple(records[0].promised) == (2, 1)

    assert incarnation.next_incarnation(tmp_path) == 1
    assert incarnation.next_incarnation(tmp_path) == 2
    incarnation.store(tmp_path, 7)  # a refutation raised it
    assert incarnation.next_incarnation(tmp_path) == 8


def test_pruned_acceptor_records_leave_a_durable_vote_floor(tmp_path):
    """Only the newest ``records_kept`` records stay on disk (the node core's one
    number); the highest pruned step is kept, so a restarted node whose state rolled
    back never votes on those steps."""
    from swarmshake.reference_node.protocol.node_core import NODE_DEFAULTS

    RECORDS_KEPT = NODE_DEFAULTS.records_kept

    store = AcceptorStore(tmp_path / "acceptor")
    assert store.pruned_through() == -1
    for step in range(RECORDS_KEPT + 5):
        store.write(AcceptorRecord(step=step, promised=(0, 0)))
    reopened = AcceptorStore(tmp_path / "acceptor")
    assert [r.step for r in reopened.load()] == list(range(5, RECORDS_KEPT + 5))
    assert reopened.pruned_through() == 4
    # A record written after a rollback (a low step) never lowers the floor.
    reopened.write(AcceptorRecord(step=2, promised=(1, 0)))
    assert reopened.pruned_through() == 4


def test_no_vote_floor_prunes_the_records_but_leaves_no_floor_on_disk(tmp_path):
    from swarmshake.reference_node.protocol.bugs import BugSet
    from swarmshake.reference_node.protocol.node_core import NODE_DEFAULTS

    store = AcceptorStore(tmp_path / "acceptor", NODE_DEFAULTS, BugSet.parse(["no-vote-floor"]))
    for step in range(NODE_DEFAULTS.records_kept + 5):
        store.write(AcceptorRecord(step=step, promised=(0, 0)))
    reopened = AcceptorStore(tmp_path / "acceptor")
    assert len(reopened.load()) == NODE_DEFAULTS.records_kept
    assert reopened.pruned_through() == -1
