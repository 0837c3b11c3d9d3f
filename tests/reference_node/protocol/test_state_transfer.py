"""The node core's state fetch (``state_transfer.StateTransfer``): what a node that
fetches the cluster's state asks, waits for, installs and retries, for both shells."""

from __future__ import annotations

import pytest

from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol import state_transfer as st
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import StateOffer

NAMES = ("n0", "n1", "n2")
STATE_FP = "ab" * 16
CONFIG = nc.NodeConfig()


def _transfer(accepted: dict[int, str] | None = None) -> st.StateTransfer:
    configs = mb.Configurations(mb.initial_configuration(NAMES, "n0", join=False))
    transfer = st.StateTransfer(node="n0", incarnation=2, seed=0, configs=configs, config=CONFIG)
    transfer.accepted = accepted or {}
    return transfer


def _fetch(
    evidence: str | None = "n1",
    *,
    joining: bool = False,
    checkpoint: rj.CheckpointInfo | None = None,
    peer_steps: dict[str, int] | None = None,
) -> st.FetchState:
    return st.FetchState(
        evidence=evidence, own_step=3, alive=NAMES, members=NAMES, newest_members=NAMES,
        peer_steps=peer_steps if peer_steps is not None else {"n1": 9}, at_genesis=False,
        genesis_param_fp="", joining=joining, local_checkpoint=checkpoint,
        local_param_fp="cd", vote_floor=-1,
    )  # fmt: skip


def _offer(sender: str, step: int = 8, **fields) -> StateOffer:
    return StateOffer(sender=sender, step=step, param_fp=STATE_FP, nbytes=10, **fields)


def _kinds(actions: list) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_a_fetch_suspends_the_step_and_asks_the_peer_ahead_once():
    transfer = _transfer()
    actions = transfer.handle(_fetch(), 0.0)
    assert _kinds(actions) == ["SuspendSteps", "RequestState"]
    assert actions[1].source == "n1" and not transfer.steps
    assert transfer.handle(_fetch("n2"), 0.1) == []  # one fetch at a time
    transfer.check_valid()


def test_bytes_that_overtook_their_offer_wait_and_install_under_the_offered_configuration():
    transfer = _transfer(accepted={2: "ee", 7: "ff"})
    transfer.handle(_fetch(), 0.0)
    bytes_in = st.BytesArrived(source="n1", step=8, computed_fp=STATE_FP, nbytes=10)
    assert transfer.handle(bytes_in, 0.1) == []  # no offer yet: they wait
    offer = _offer("n1", voters=["n0", "n1"], learners=["n2"], config_step=5)
    actions = transfer.handle(st.OfferArrived(offer=offer, joining=False), 0.2)
    assert _kinds(actions) == ["RejoinDone", "InstallState"]
    install = actions[1]
    assert (install.source, install.step, install.param_fp) == ("n1", 8, STATE_FP)
    assert install.configuration.voters == ("n0", "n1") and install.configuration.step == 5
    kept = nc.aggregates_to_keep({2: "ee", 7: "ff"}, 8, config=CONFIG)
    assert (install.keep_from_step, install.pinned) == (kept.from_step, kept.pinned)
    assert transfer.handle(st.StateInstalled(), 0.3) == []
    assert transfer.steps and transfer.rejoin is None
    transfer.check_valid()


def test_an_offer_without_a_configuration_installs_under_the_recorded_one():
    transfer = _transfer()
    transfer.handle(_fetch(), 0.0)
    transfer.handle(st.OfferArrived(offer=_offer("n1"), joining=False), 0.1)
    bytes_in = st.BytesArrived(source="n1", step=8, computed_fp=STATE_FP, nbytes=10)
    install = transfer.handle(bytes_in, 0.2)[-1]
    assert install.configuration == transfer.configs.after(8)


def test_a_malformed_offer_is_dropped_and_a_joiners_source_without_its_add_is_left():
    transfer = _transfer()
    transfer.handle(_fetch(), 0.0)
    bad = _offer("n1", voters=["n0", "n1"], learners=["n1"], config_step=5)
    assert transfer.handle(st.OfferArrived(offer=bad, joining=False), 0.1) == [
        st.FrameRefused(peer="n1", reason=nc.BAD_OFFER)
    ]
    joiner = _transfer()
    joiner.handle(_fetch(joining=True), 0.0)  # a joiner asks the member that added it
    without = _offer("n1", voters=["n1", "n2"], config_step=5)
    actions = joiner.handle(st.OfferArrived(offer=without, joining=True), 0.1)
    assert _kinds(actions) == ["RejoinFailed", "FetchRetry"]
    assert actions[1].at is None  # a joiner's enrolment asks again, not a timer


def test_a_failed_install_ends_the_fetch_and_retries_it_later():
    transfer = _transfer()
    transfer.handle(_fetch(), 0.0)
    transfer.handle(st.OfferArrived(offer=_offer("n1"), joining=False), 0.1)
    transfer.handle(st.BytesArrived(source="n1", step=8, computed_fp=STATE_FP, nbytes=10), 0.2)
    actions = transfer.handle(st.StateFailed(source="n1", reason="disk full"), 0.3)
    assert actions == [st.FetchRetry(at=0.3 + CONFIG.rejoin_retry_s)]
    assert transfer.rejoin is None and not transfer.steps
    assert transfer.fetch.retry_at == 0.3 + CONFIG.rejoin_retry_s
    transfer.check_valid()


def test_a_late_transfer_failure_during_a_checkpoint_load_is_not_the_loads():
    """The runtime once took any failure in the checkpoint phase for the load's."""
    checkpoint = rj.CheckpointInfo(path="ckpt", step=2, param_fp="cd")
    transfer = _transfer()
    transfer.handle(_fetch(checkpoint=checkpoint), 0.0)
    actions = transfer.handle(st.SourceDead(peer="n1"), 0.1)  # the one source: fall back
    assert _kinds(actions) == ["LoadCheckpoint"]
    assert transfer.handle(st.StateFailed(source="n1", reason="reset"), 0.2) == []
    assert transfer.rejoin is not None and transfer.rejoin.phase == "checkpoint"
    actions = transfer.handle(st.StateFailed(source="checkpoint", reason="torn"), 0.3)
    assert _kinds(actions) == ["FetchRetry"]


def test_a_dead_source_is_left_at_once_and_another_peer_is_not_a_reason():
    transfer = _transfer()
    transfer.handle(_fetch(None, peer_steps={"n1": 9, "n2": 9}), 0.0)
    asked = transfer.rejoin.source
    other = "n2" if asked == "n1" else "n1"
    assert transfer.handle(st.SourceDead(peer=other), 0.1) == []
    actions = transfer.handle(st.SourceDead(peer=asked), 0.2)
    assert [a.source for a in actions if isinstance(a, rj.RequestState)] == [other]


def test_the_state_transfer_refuses_an_event_it_does_not_take():
    with pytest.raises(LocalProtocolError, match="takes no"):
        _transfer().handle(rj.Begin(live_peers=NAMES), 0.0)  # type: ignore[arg-type]
