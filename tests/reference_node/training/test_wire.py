"""int8 gradients on the wire (``training.wire``): every node aggregates the same bits,
the quantization error is fed back, and training converges like fp32."""

from __future__ import annotations

import statistics

import pytest
import torch

from swarmshake.reference_node.training.config import TrainingConfig, TrainingConfigError
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.reference_node.training.wire import (
    WIRE_BLOCK,
    WireEncoder,
    WireError,
    decode,
    payload_nbytes,
)

INT8 = TrainingConfig(seed=3, hidden=[64, 64], wire_dtype="int8")
FP32 = TrainingConfig(seed=3, hidden=[64, 64])
# Documented tolerance: an int8 run's loss over its last 50 of 200 steps stays within
# 5 % of the fp32 run's (measured: 0.1056 both at 300 steps, mean and median).
CONVERGENCE_TOLERANCE = 0.05


def test_wire_dtype_is_validated() -> None:
    with pytest.raises(TrainingConfigError, match="wire_dtype"):
        TrainingConfig(wire_dtype="int4")  # type: ignore[arg-type]
    with pytest.raises(TrainingConfigError, match="wire_dtype"):
        TrainingConfig.from_dict({"wire_dtype": "bf16"})
    assert TrainingConfig.from_dict({"wire_dtype": "int8"}).wire_dtype == "int8"
    assert TrainingConfig().wire_dtype == "fp32"  # old configs and histories


def test_the_sender_aggregates_exactly_what_every_receiver_decodes() -> None:
    numel = 1001  # not a multiple of the block (a short last block), nor of 4
    encoder = WireEncoder(INT8)
    gradient = torch.randn(numel, generator=torch.Generator().manual_seed(1))
    payload, own = encoder.encode(gradient)
    assert payload.nbytes == numel + 4 * ((numel + WIRE_BLOCK - 1) // WIRE_BLOCK)
    received = decode(INT8, bytearray(payload), numel)  # a copy, as off a socket
    assert torch.equal(received, own)  # same bits: S1 holds over the dequantized values
    assert not torch.equal(own, gradient)  # it was quantized
    assert torch.allclose(own + encoder.residual, gradient, atol=1e-6)  # nothing lost
    with pytest.raises(WireError):
        decode(INT8, bytearray(payload)[:-1], numel)
    with pytest.raises(WireError):
        decode(FP32, bytearray(payload), numel)


def test_error_feedback_carries_the_quantization_error_into_later_steps() -> None:
    # A gradient too small for its block's scale (one large coordinate sets it) is
    # rounded to zero every step; with its error fed back, it goes out eventually.
    encoder = WireEncoder(INT8)
    gradient = torch.zeros(WIRE_BLOCK)
    gradient[0] = 1.0
    gradient[1] = 0.001  # below half a step of 1/127: quantizes to 0 alone
    sent = torch.zeros(WIRE_BLOCK)
    for _ in range(20):
        sent += encoder.encode(gradient)[1]
    assert sent[1] > 0  # without feedback it would stay 0 forever
    assert abs(float(sent[1]) - 20 * 0.001) <= 1.0 / 127  # within one step's error


def test_a_non_finite_gradient_is_sent_as_nan_and_not_fed_back() -> None:
    encoder = WireEncoder(INT8)
    gradient = torch.ones(2 * WIRE_BLOCK)
    gradient[3] = float("inf")
    _, own = encoder.encode(gradient)
    assert torch.isnan(own[:WIRE_BLOCK]).all() and torch.isfinite(own[WIRE_BLOCK:]).all()
    assert encoder.residual is not None and torch.isfinite(encoder.residual).all()
    _, own = encoder.encode(torch.ones(2 * WIRE_BLOCK))
    assert torch.isfinite(own).all()  # the next step is clean


@pytest.mark.parametrize("numel", [1, WIRE_BLOCK, 3 * WIRE_BLOCK + 17])
def test_the_fast_dequantization_is_the_kernels_reference_bit_for_bit(numel: int) -> None:
    from swarmshake.kernels.quant import reference_dequantize_int8, reference_quantize_int8
    from swarmshake.reference_node.training.wire import dequantize_blocks

    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 1e3
    x[0] = float("nan")  # a non-finite block dequantizes to NaN in both
    q, scales = reference_quantize_int8(x, WIRE_BLOCK)
    expected = reference_dequantize_int8(q, scales, numel, WIRE_BLOCK)
    got = dequantize_blocks(q, scales)
    assert torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0))
    assert torch.isnan(got).sum() == torch.isnan(expected).sum()


def test_int8_is_a_quarter_of_the_fp32_bytes() -> None:
    numel = FP32.parameter_count()
    ratio = payload_nbytes(INT8, numel) / payload_nbytes(FP32, numel)
    assert 0.25 < ratio < 0.26


def test_int8_converges_like_fp32_and_every_replica_stays_identical() -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    base = run_local_cluster(FP32, nodes, 200)
    int8 = run_local_cluster(INT8, nodes, 200)
    assert base.failure is None and int8.failure is None
    # The aggregates differ (int8 was used), the replicas of each run do not (S1).
    assert base.records[-1].value_fp != int8.records[-1].value_fp
    for record in int8.records:
        assert len(set(record.param_fps.values())) == 1, record.step
    first = statistics.mean(int8.mean_losses()[:10])
    base_end = statistics.mean(base.mean_losses()[-50:])
    int8_end = statistics.mean(int8.mean_losses()[-50:])
    assert int8_end < first / 2  # it trains
    assert int8_end <= base_end * (1 + CONVERGENCE_TOLERANCE), (int8_end, base_end)


def test_replay_of_an_int8_run_is_unknown_not_invalid() -> None:
    # The residuals that shaped each contribution are in no log: the replay cannot
    # recompute them, and must not call the run's fingerprints wrong.
    from swarmshake.verify.replay import history_of_local_run, replay_history

    run = run_local_cluster(INT8, ["n1", "n2", "n3"], 3)
    result = replay_history(history_of_local_run(run, INT8))
    assert result.status == "unknown" and "wire_dtype='int8'" in result.message
    fp32_run = run_local_cluster(FP32, ["n1", "n2", "n3"], 3)
    assert replay_history(history_of_local_run(fp32_run, FP32)).status == "valid"
