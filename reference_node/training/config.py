"""The training configuration: one msgspec struct, validated when built.

Everything that changes the bits of a step lives here (seed, model shape, batch,
optimizer, aggregation rule), so a run's config plus its environment facts
(``environment.py``) are what bit-exact replay needs.  The model is sized either
by explicit hidden widths or by a target parameter count (``sized_for``), so the
same code trains a ~1M-parameter model in CI and a >=100M one in benchmarks.
"""

from __future__ import annotations

import math
import re
from typing import Literal

import msgspec

AggregationRule = Literal["mean", "median", "trimmed_mean", "krum", "multi_krum"]
OptimizerKind = Literal["sgd", "adam"]
# How a contribution travels: fp32 as computed, or int8 blocks with error feedback
# (``training.wire``; every node aggregates the dequantized values).
WireDtype = Literal["fp32", "int8"]
# How a step's contributions reach the aggregate (protocol.sharding): every node
# sends its whole gradient to every peer ("all_to_all", the reference), or one shard
# of it to each shard owner, which aggregates that shard for everyone ("sharded":
# about 2G(n-1)/n bytes a node per step instead of 2G(n-1)).  Krum stays all-to-all.
# Default all_to_all for now: sharded measured 2.06x the step rate at 1M parameters
# (BENCHMARKS.md, session 5) and passes its kill and hold_bulk tests; one 4-node
# crash/restart/broker-loss run with it left the restarted node stuck at step 1, and
# after 0c3cfb7 (a rejoining owner keeps aggregating) the same run passed once.  It
# has not yet run under partitions, pauses or the recovery benchmark: switch the
# default once it has.
AggregationPath = Literal["sharded", "all_to_all"]

# A bound on a configured model: 2**31 float32 parameters is 8 GiB, beyond what a
# node on these machines holds, and flat-buffer offsets stay within int32 kernels.
MAX_PARAMETERS = 2**31 - 1
MAX_DIM = 1 << 20  # one layer wider than this is a typo, not a model
# "cpu", "cuda" (the current CUDA device) or "cuda:N"; torch accepts more spellings
# (mps, xla, ...) that the kernels and the determinism settings do not cover.
DEVICE_PATTERN = re.compile(r"cpu|cuda(:[0-9]{1,3})?")


class TrainingConfigError(ValueError):
    """A training configuration that cannot run; the message names the field and the fix."""


class TrainingConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What a node trains and how its gradients are combined.

    ``hidden`` lists the student MLP's hidden widths; the teacher that labels the
    synthetic data is a fixed small network (``teacher_hidden``) independent of the
    student's size, so the task stays the same when the model grows.
    """

    seed: int = 0
    input_dim: int = 32
    output_dim: int = 8
    hidden: list[int] = msgspec.field(default_factory=lambda: [512, 512, 512, 512])
    teacher_hidden: int = 64
    batch_per_node: int = 32
    optimizer: OptimizerKind = "sgd"
    learning_rate: float = 0.05
    momentum: float = 0.9
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    aggregation: AggregationRule = "mean"
    # Robust rules tolerate up to ``byzantine_f`` bad contributions per step:
    # trimmed mean drops ``byzantine_f`` values at each end of every coordinate;
    # Krum needs n >= 2f + 3 contributors (checked by ``check_cluster``).
    byzantine_f: int = 1
    multi_krum_m: int = 2
    threads: int = 1
    # Where parameters, optimizer state, data and aggregation live ("cpu", "cuda",
    # "cuda:N").  Bits are the same only on the same device kind and model: a CPU
    # replay of a GPU run is not promised bit-exact (environment.py, verify.replay).
    device: str = "cpu"
    wire_dtype: WireDtype = "fp32"
    aggregation_path: AggregationPath = "all_to_all"

    def __post_init__(self) -> None:
        _require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        for name in ("input_dim", "output_dim", "teacher_hidden", "batch_per_node"):
            value = getattr(self, name)
            _require(1 <= value <= MAX_DIM, name, f"must be in 1..{MAX_DIM}, got {value}")
        _require(len(self.hidden) >= 1, "hidden", "needs at least one hidden layer width")
        for width in self.hidden:
            _require(
                1 <= width <= MAX_DIM, "hidden", f"widths must be in 1..{MAX_DIM}, got {width}"
            )
        _require(
            self.parameter_count() <= MAX_PARAMETERS,
            "hidden",
            f"{self.parameter_count()} parameters exceed {MAX_PARAMETERS}",
        )
        _require(
            math.isfinite(self.learning_rate) and self.learning_rate > 0,
            "learning_rate",
            f"must be a finite number > 0, got {self.learning_rate}",
        )
        _require(0.0 <= self.momentum < 1.0, "momentum", f"must be in [0, 1), got {self.momentum}")
        _require(0.0 <= self.adam_beta1 < 1.0, "adam_beta1", "must be in [0, 1)")
        _require(0.0 <= self.adam_beta2 < 1.0, "adam_beta2", "must be in [0, 1)")
        _require(self.adam_eps > 0, "adam_eps", "must be > 0")
        _require(self.byzantine_f >= 0, "byzantine_f", f"must be >= 0, got {self.byzantine_f}")
        _require(self.multi_krum_m >= 1, "multi_krum_m", f"must be >= 1, got {self.multi_krum_m}")
        _require(1 <= self.threads <= 1024, "threads", f"must be in 1..1024, got {self.threads}")
        _require(
            DEVICE_PATTERN.fullmatch(self.device) is not None,
            "device",
            f'must be "cpu", "cuda" or "cuda:N", got {self.device!r}',
        )
        # Literal fields are checked by msgspec.convert; a struct built in Python is not.
        _require(
            self.wire_dtype in ("fp32", "int8"),
            "wire_dtype",
            f'must be "fp32" or "int8", got {self.wire_dtype!r}',
        )
        _require(
            self.aggregation_path in ("sharded", "all_to_all"),
            "aggregation_path",
            f'must be "sharded" or "all_to_all", got {self.aggregation_path!r}',
        )

    def layer_dims(self) -> list[tuple[int, int]]:
        """``(fan_in, fan_out)`` of every linear layer, input to output."""
        widths = [self.input_dim, *self.hidden, self.output_dim]
        return list(zip(widths[:-1], widths[1:], strict=True))

    def parameter_count(self) -> int:
        return sum(fan_in * fan_out + fan_out for fan_in, fan_out in self.layer_dims())

    def global_batch(self, n_contributors: int) -> int:
        return self.batch_per_node * n_contributors

    def check_cluster(self, n_nodes: int) -> None:
        """Raise ``TrainingConfigError`` if the rule cannot tolerate ``byzantine_f`` of ``n_nodes``."""
        _require(n_nodes >= 1, "nodes", f"need at least one node, got {n_nodes}")
        f = self.byzantine_f
        if self.aggregation in ("krum", "multi_krum") and n_nodes < 2 * f + 3:
            raise TrainingConfigError(
                f"aggregation={self.aggregation!r} with byzantine_f={f} needs at least "
                f"2f+3={2 * f + 3} nodes, the cluster has {n_nodes}; lower byzantine_f "
                f"or add nodes"
            )
        if self.aggregation == "multi_krum" and self.multi_krum_m > n_nodes - f:
            raise TrainingConfigError(
                f"multi_krum_m={self.multi_krum_m} must be <= n - f = {n_nodes - f}"
            )
        if self.aggregation == "trimmed_mean" and n_nodes <= 2 * f:
            raise TrainingConfigError(
                f"trimmed_mean with byzantine_f={f} drops {2 * f} values per coordinate "
                f"and needs more than {2 * f} nodes, the cluster has {n_nodes}"
            )
        if self.aggregation == "median" and n_nodes <= 2 * f:
            raise TrainingConfigError(
                f"median tolerates fewer than half bad nodes: byzantine_f={f} needs more "
                f"than {2 * f} nodes, the cluster has {n_nodes}"
            )

    def min_contributors(self) -> int:
        """The fewest contributions the rule aggregates (``check_cluster`` is the one
        definition: mean 1, median and trimmed mean 2f + 1, Krum 2f + 3, multi-Krum
        also m + f).  A step leader that proposed from fewer had its build refused and
        waited a retry (the GPU run: 1.4 s of a step); it waits for this many instead
        (node_core.NodeConfig.min_contributors)."""
        # The bound: every rule's minimum is at most 2f + 3 + m.
        for count in range(1, 2 * self.byzantine_f + self.multi_krum_m + 4):
            try:
                self.check_cluster(count)
            except TrainingConfigError:
                continue
            return count
        raise TrainingConfigError(
            f"aggregation={self.aggregation!r} with byzantine_f={self.byzantine_f} admits "
            "no number of contributors"
        )

    def to_dict(self) -> dict[str, object]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> TrainingConfig:
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as error:
            raise TrainingConfigError(f"training config: {error}") from None


def sized_for(target_parameters: int, *, depth: int = 4, **fields: object) -> TrainingConfig:
    """A config whose student MLP has ``depth`` equal hidden layers and about
    ``target_parameters`` parameters (within one width step of the target).

    Solves ``(d-1) w^2 + (in + out + d) w + out = target`` for the width ``w``.
    """
    if target_parameters < 1:
        raise TrainingConfigError(f"target_parameters must be >= 1, got {target_parameters}")
    if not 1 <= depth <= 64:
        raise TrainingConfigError(f"depth must be in 1..64, got {depth}")
    input_dim = int(fields.get("input_dim", 32))  # type: ignore[arg-type]
    output_dim = int(fields.get("output_dim", 8))  # type: ignore[arg-type]
    a = depth - 1
    b = input_dim + output_dim + depth
    c = output_dim - target_parameters
    width = -c / b if a == 0 else (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    width = max(1, round(width))
    return TrainingConfig(hidden=[width] * depth, **fields)  # type: ignore[arg-type]


def parse_parameter_count(text: str) -> int:
    """``1M``, ``100M``, ``2.5k``, ``1G`` or a plain integer (for CLI flags)."""
    scales = {"k": 10**3, "m": 10**6, "g": 10**9}
    stripped = text.strip().lower()
    scale = scales.get(stripped[-1:], 1)
    number = stripped[:-1] if stripped[-1:] in scales else stripped
    try:
        value = round(float(number) * scale)
    except ValueError:
        raise TrainingConfigError(
            f"{text!r} is not a parameter count; write e.g. 1M, 100M or 250000"
        ) from None
    if value < 1:
        raise TrainingConfigError(f"{text!r}: a parameter count must be >= 1")
    return value


def _require(condition: bool, field: str, problem: str) -> None:
    if not condition:
        raise TrainingConfigError(f"training config field {field!r}: {problem}")
