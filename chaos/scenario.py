"""Chaos scenarios: YAML files validated against a msgspec schema, errors with file and line.

A scenario names a cluster (nodes, model, aggregation, backend, bug switches), the
steady-state condition the run waits for, a fault schedule (timed or on-event
entries, ``chaos/faults.py``) and/or a seeded random generator, how long faults run
and how long the cluster quiesces afterwards, and the checker bounds (D, R, J …).

Loading is safe and bounded (``chaos/yaml_input.py``): a safe loader only (no tags
that build objects), YAML 1.2 numbers (``1e12`` is a number; ``1e309``, infinity, is
refused), at most ``MAX_SCENARIO_BYTES`` of text, ``MAX_DEPTH`` levels (checked before
anything is built) and ``MAX_YAML_NODES`` nodes counting alias expansions (a "billion
laughs" file is refused, not expanded), and a key written twice is an error naming
both lines.
A validation error names the file, the line (msgspec's ``$.path`` mapped back to the
YAML node's mark), the field and the fix.

``resolve`` turns a scenario into what a run executes: command-line overrides
applied, the seed fixed, the generator's draws written out as plain schedule
entries.  The resolved scenario is saved in the run directory, so ``swarmshake run
runs/<id>/scenario.yaml`` repeats the run.
"""

from __future__ import annotations

import difflib
import random
import re
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from swarmshake.chaos import faults as F
from swarmshake.chaos import yaml_input
from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.reference_node.training.config import TrainingConfig, TrainingConfigError
from swarmshake.verify.checkers import Bounds

MAX_SCENARIO_BYTES = 256 * 1024  # the largest suite is a few KB; a schedule of 10k entries fits
MAX_DEPTH = yaml_input.MAX_DEPTH
MAX_YAML_NODES = yaml_input.MAX_YAML_NODES
MAX_NODES = 64  # chaos/backends/base.MAX_NODES
MODEL_SIZES: dict[str, list[int]] = {
    # Hidden widths of the student MLP; CI-sized by default (DESIGN: ~1M params in CI).
    "tiny": [64, 64],
    "small": [256, 256],
    "medium": [512, 512, 512, 512],
    # ~100.8M parameters: the GPU chaos run (scripts/gpu_chaos_run.sh); on a CPU a
    # step of it takes seconds, so no CI suite uses it.
    "large": [4096] * 7,
}
# Load bounds mirror chaos/bench/load.py (the node's HTTP API takes 64 connections,
# http_api.MAX_CONNECTIONS, and 256 rows per request, http_api.MAX_INFER_BATCH).
MAX_LOAD_USERS = 64
MAX_LOAD_RATE_PER_USER = 50.0
MAX_LOAD_BATCH = 256
GENERATOR_OPS = (
    "crash", "pause", "partition", "latency", "blackhole", "clock_skew", "cpu_throttle",
    "reset_peer", "bandwidth", "slicer", "broker_loss",
)  # fmt: skip


# Generator ops that need a proxy on every link.
LINK_GENERATOR_OPS = {"partition", "latency", "blackhole", "reset_peer", "bandwidth", "slicer"}


class ScenarioError(ValueError):
    """A scenario that cannot run; ``str()`` is ``file:line: field: problem; fix: …``."""


class Cluster(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    nodes: int = 4
    # "sim": the simulator's shell of the node core (``swarmshake run --backend sim``).
    backend: Literal["local", "docker", "sim"] = "local"
    model: Literal["tiny", "small", "medium", "large"] = "tiny"
    aggregation: Literal["mean", "median", "trimmed_mean", "krum", "multi_krum"] | None = None
    training: dict[str, Any] = {}  # extra TrainingConfig fields (lr, optimizer, byzantine_f …)
    detector: dict[str, Any] = {}  # DetectorConfig fields, passed to every node
    step: dict[str, Any] = {}  # StepSection fields (contribution_wait_s, checkpoint_every …)
    bugs: list[str] = []
    # ``proxied``: every directed link through its own Toxiproxy proxy (link faults
    # work); ``direct``: nodes dial each other's listeners, local backend only, no
    # link faults (what the node costs without the harness's proxy hop).
    links: Literal["proxied", "direct"] = "proxied"

    def __post_init__(self) -> None:
        if self.links == "direct" and self.backend != "local":
            raise ValueError("links: direct runs on the local backend only")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes = {self.nodes} must lie in [1, {MAX_NODES}]")
        unknown = sorted(set(self.bugs) - set(BUGS))
        if unknown:
            raise ValueError(f"unknown bug {unknown}; known: {', '.join(sorted(BUGS))}")

    def training_section(self, seed: int) -> dict[str, Any]:
        section: dict[str, Any] = {"hidden": MODEL_SIZES[self.model], "seed": seed}
        if self.aggregation:
            section["aggregation"] = self.aggregation
        section.update(self.training)
        return section


class SteadyState(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The cluster is steady once every node has committed a step ≥ ``min_commit_step``
    (``-1``: once every node has logged ``ready``, for clusters that do not train)."""

    min_commit_step: int = 2
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not -1 <= self.min_commit_step <= 1_000_000:
            raise ValueError("min_commit_step must lie in [-1, 1000000]")
        if not 1.0 <= self.timeout_s <= 3600.0:
            raise ValueError("timeout_s must lie in [1, 3600]")


class Generator(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Seeded random faults: ``rate_per_min`` draws from ``ops``, each healed after
    ``fault_duration_s``, never more than ``max_concurrent`` at once."""

    ops: list[str]
    rate_per_min: float = 6.0
    fault_duration_s: float = 5.0
    max_concurrent: int = 1

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ops) - set(GENERATOR_OPS))
        if not self.ops or unknown:
            raise ValueError(f"ops {unknown or '[]'}: choose from {', '.join(GENERATOR_OPS)}")
        if not 0.0 < self.rate_per_min <= 600.0:
            raise ValueError("rate_per_min must lie in (0, 600]")
        if not 0.0 < self.fault_duration_s <= 3600.0:
            raise ValueError("fault_duration_s must lie in (0, 3600]")
        if not 1 <= self.max_concurrent <= 16:
            raise ValueError("max_concurrent must lie in [1, 16]")


class Load(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Load under chaos: Locust users posting ``/infer`` to the nodes from steady state
    to the end of the quiesce (``chaos/bench/load.py``).  Off unless a scenario asks:
    the users cost CPU on the machine the nodes share, which a suite that measures
    detection times alone should not pay for."""

    users: int = 4
    spawn_rate: float = 4.0  # users started per second (Locust's --spawn-rate)
    rate_per_user: float = 5.0  # requests per second per user, at most
    batch: int = 4  # rows per /infer request

    def __post_init__(self) -> None:
        if not 1 <= self.users <= MAX_LOAD_USERS:
            raise ValueError(f"users = {self.users} must lie in [1, {MAX_LOAD_USERS}]")
        if not 0.0 < self.spawn_rate <= MAX_LOAD_USERS:
            raise ValueError(f"spawn_rate = {self.spawn_rate} must lie in (0, {MAX_LOAD_USERS}]")
        if not 0.1 <= self.rate_per_user <= MAX_LOAD_RATE_PER_USER:
            raise ValueError(
                f"rate_per_user = {self.rate_per_user} must lie in [0.1, {MAX_LOAD_RATE_PER_USER}]"
            )
        if not 1 <= self.batch <= MAX_LOAD_BATCH:
            raise ValueError(f"batch = {self.batch} must lie in [1, {MAX_LOAD_BATCH}]")


class Scenario(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    name: str
    description: str = ""
    seed: int = 0
    cluster: Cluster = Cluster()
    steady_state: SteadyState = SteadyState()
    # Fault phase: ``at_s`` of every entry counts from the moment steady state is reached
    # (with ``load``, from the moment its requests flow, a few seconds later).
    duration_s: float = 30.0
    # After the fault phase every fault is healed; the cluster then runs this long so
    # liveness properties (L2, L3) can be observed.
    quiesce_s: float = 15.0
    faults: list[F.ScheduleEntry] = []
    generator: Generator | None = None
    bounds: Bounds = Bounds()
    load: Load | None = None  # off by default (see Load)
    # The system under test (chaos/systems/): a registered name or pkg.module:Class,
    # and the options its class accepts.
    system: str = "reference"
    system_options: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.name):
            raise ValueError("name must be 1-64 characters of [A-Za-z0-9_.-] (it names the run)")
        if not 0 <= self.seed < 2**63:
            raise ValueError("seed must lie in [0, 2**63)")
        if not 0.0 <= self.duration_s <= 86_400.0:
            raise ValueError("duration_s must lie in [0, 86400]")
        if not 0.0 <= self.quiesce_s <= 3600.0:
            raise ValueError("quiesce_s must lie in [0, 3600]")
        for index, entry in enumerate(self.faults):
            if entry.at_s is not None and entry.at_s > self.duration_s:
                raise ValueError(
                    f"faults[{index}].at_s = {entry.at_s} is after duration_s = {self.duration_s}"
                )
        names = set(self.node_names) | {F.ALL}
        for index, entry in enumerate(self.faults):
            named = set(entry.op.targets()) | ({entry.when.node} if entry.when else set())
            if isinstance(entry.op, F.Partition):
                named |= {n for group in entry.op.groups for n in group}
            unknown = sorted(named - names)
            if unknown:
                raise ValueError(
                    f"faults[{index}] names node(s) {unknown}, but the cluster has "
                    f"{self.node_names[0]}..{self.node_names[-1]}"
                )
        if self.cluster.links == "direct":
            self._check_no_link_faults()
        try:
            TrainingConfig(**self.cluster.training_section(self.seed))
        except (TrainingConfigError, TypeError, ValueError) as error:
            raise ValueError(f"cluster.training: {error}") from None
        self._check_node_sections()
        self._check_system()

    def _check_node_sections(self) -> None:
        """``cluster.step`` and ``cluster.detector`` (with the training section) as the
        node reads them from its node.toml, so a bad value stops the suite here (exit 64) rather than every
        node at its start (a run that never reaches steady state)."""
        from swarmshake.chaos.systems.reference import node_settings

        node_settings(
            self.cluster.step, self.cluster.detector, self.cluster.training_section(self.seed)
        )

    def _check_system(self) -> None:
        """The system exists, takes these options, and can take every fault asked for."""
        from swarmshake.chaos.systems import SystemConfigError, load_system

        try:
            system = load_system(self.system, self.system_options)
        except SystemConfigError as error:
            raise ValueError(str(error)) from None
        foreign = sorted(set(self.cluster.bugs) - system.planted_bugs)
        if foreign:
            raise ValueError(
                f"cluster.bugs {foreign}: system {self.system} has no such planted-bug switch "
                f"(it has: {', '.join(sorted(system.planted_bugs)) or 'none'})"
            )
        if self.load is not None and not system.serves_load:
            raise ValueError(
                f"load: system {self.system} serves no inference API for load to drive"
            )
        ops = system.supported_ops()
        for index, entry in enumerate(self.faults):
            names = {entry.op.name}
            heal = entry.op.heal()
            if isinstance(heal, F.Heal) and heal.scope not in ("all", "partition", "churn"):
                names.add(heal.scope)
            missing = sorted(names - ops)
            if missing:
                raise ValueError(f"faults[{index}]: {system.unsupported_reason(missing[0])}")
        missing = sorted(set(self.generator.ops) - ops) if self.generator else []
        if missing:
            raise ValueError(f"generator.ops: {system.unsupported_reason(missing[0])}")

    def _check_no_link_faults(self) -> None:
        for index, entry in enumerate(self.faults):
            if isinstance(entry.op, F.LinkOp | F.Partition | F.Heal):
                raise ValueError(
                    f"faults[{index}]: {entry.op.name} acts on links, and cluster.links is "
                    "direct (no proxies); set cluster.links: proxied"
                )
        link_ops = sorted(set(self.generator.ops) & LINK_GENERATOR_OPS) if self.generator else []
        if link_ops:
            raise ValueError(
                f"generator.ops {link_ops} act on links, and cluster.links is direct (no "
                "proxies); set cluster.links: proxied"
            )

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.cluster.nodes + 1)]

    def schedule(self) -> F.FaultSchedule:
        return F.FaultSchedule(entries=list(self.faults), seed=self.seed)


# --- loading ------------------------------------------------------------------------------


_HINTS = {
    "nodes": "a whole number of nodes, 1..64 (e.g. nodes: 4)",
    "backend": "local or docker",
    "op": f"one of {', '.join(F.FAULT_OPS)}",
    "at_s": "seconds after steady state, e.g. at_s: 5",
    "seed": "a non-negative integer",
    "users": "a whole number of Locust users, 1..64 (e.g. users: 4)",
}


def _fields_at(path: str, data: Any) -> tuple[str, ...]:
    """The field names the schema allows at ``path`` (for "did you mean" hints)."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(Scenario)
    for key, index in _TOKEN.findall(path[1:]):
        if isinstance(info, msgspec.inspect.UnionType):  # the tagged fault union
            tag = data.get("op") if isinstance(data, dict) else None
            info = next((t for t in info.types if getattr(t, "tag", None) == tag), info.types[0])
        if isinstance(info, msgspec.inspect.StructType) and key:
            field = next((f for f in info.fields if f.name == key), None)
            if field is None:
                break
            info = field.type
            data = data.get(key) if isinstance(data, dict) else None
        elif isinstance(info, msgspec.inspect.ListType) and index:
            info = info.item_type
            data = data[int(index)] if isinstance(data, list) and int(index) < len(data) else None
        else:
            break
    if isinstance(info, msgspec.inspect.UnionType):
        tag = data.get("op") if isinstance(data, dict) else None
        info = next((t for t in info.types if getattr(t, "tag", None) == tag), info.types[0])
    if isinstance(info, msgspec.inspect.StructType):
        return tuple(f.name for f in info.fields)
    return ()


_PATH = re.compile(r"at `(\$[^`]*)`")
_NUMBERISH = re.compile(r"[-+]?[0-9][0-9_,.]*(?:[eE][-+]?[0-9_]+)?")
_NAMED = re.compile(r"([A-Za-z_]+(?:\[\d+\])*(?:\.[A-Za-z_]+(?:\[\d+\])*)*)\b")
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _node_at(root: yaml.Node, path: str) -> tuple[yaml.Node, str]:
    """The deepest YAML node on ``path`` (``$.a.b[2].c``) and the last field name met."""
    node, field = root, ""
    for key, index in _TOKEN.findall(path[1:]):
        if key and isinstance(node, yaml.MappingNode):
            field = key
            found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
            if found is None:
                return node, field
            node = found
        elif index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        else:
            return node, field
    return node, field


def _key_node(mapping: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(mapping, yaml.MappingNode):
        for k, _ in mapping.value:
            if getattr(k, "value", None) == key:
                return k
    return None


def _explain(message: str, root: yaml.Node, source: str, data: Any) -> ScenarioError:
    match = _PATH.search(message)
    path = match.group(1) if match else "$"
    problem = _PATH.sub("", message).rstrip(" -")
    node, field = _node_at(root, path)
    unknown = re.search(r"unknown field `([^`]+)`", problem)
    missing = re.search(r"missing required field `([^`]+)`", problem)
    if unknown:
        field = unknown.group(1)
        node = _key_node(node, field) or node
        allowed = _fields_at(path, data)
        close = difflib.get_close_matches(field, allowed, n=1)
        fix = (
            f"did you mean `{close[0]}`?"
            if close
            else (f"remove it; allowed here: {', '.join(allowed)}" if allowed else "remove it")
        )
    elif missing:
        field = missing.group(1)
        fix = f"add `{field}:` here" + (f" ({_HINTS[field]})" if field in _HINTS else "")
    elif "Invalid enum value" in problem or "Expected" in problem:
        fix = _HINTS.get(field, "write a value of the type named")
        if "got `str`" in problem and isinstance(node, yaml.ScalarNode):
            if node.style in ("'", '"') and _NUMBERISH.fullmatch(node.value):
                fix = "remove the quotes: a quoted number is text"
            elif _NUMBERISH.fullmatch(node.value):
                fix = "write the number plainly, e.g. 1000, 2.5 or 1e3 (no underscores or commas)"
    else:
        # A check in ``__post_init__`` names its field first ("duration_s must lie in
        # …", "faults[0].at_s = 40 is after …"): point at that field's own line.
        named = _NAMED.match(problem)
        if named:
            deeper = f"{path}.{named.group(1)}"
            found, _ = _node_at(root, deeper)
            if found is not node:
                node, path = found, deeper
        fix = (
            "write a value in that range"
            if "must lie in" in problem
            else "change the value as the message says"
        )
    line = node.start_mark.line + 1
    where = path[2:] if path.startswith("$.") else (field or "(top level)")
    message = f"{source}:{line}: {where or field}: {problem}; fix: {fix}"
    return ScenarioError(yaml_input.one_line(message))


def loads(text: str | bytes, source: str = "<scenario>") -> Scenario:
    """Parse and validate scenario text; raises :class:`ScenarioError`."""
    try:
        root = yaml_input.compose(yaml_input.decode_text(text, source, MAX_SCENARIO_BYTES), source)
        if root is None:
            raise ScenarioError(f"{source}:1: the file is empty; fix: start with `name: my-suite`")
        data = yaml_input.construct(root, source)
    except yaml_input.YamlInputError as error:
        raise ScenarioError(str(error)) from None
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{source}:{root.start_mark.line + 1}: a scenario is a mapping, not "
            f"{_kind(data)}; fix: start with `name: my-suite`"
        )
    try:
        return msgspec.convert(data, Scenario)
    except msgspec.ValidationError as error:
        raise _explain(str(error), root, source, data) from None


def _kind(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    return f"a single value ({type(data).__name__})"


def load(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SCENARIO_BYTES:
            raise ScenarioError(
                f"{path}: {size} bytes is more than {MAX_SCENARIO_BYTES}; fix: split the suite"
            )
        data = path.read_bytes()
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read: {error.strerror}; fix: check the path") from None
    return loads(data, str(path))


def dumps(scenario: Scenario) -> str:
    return yaml_input.dump(msgspec.to_builtins(scenario))


# --- resolving ------------------------------------------------------------------------------


def resolve(
    scenario: Scenario,
    *,
    seed: int | None = None,
    nodes: int | None = None,
    backend: str | None = None,
    bugs: list[str] | None = None,
    system: str | None = None,
) -> Scenario:
    """Apply overrides and write the generator's draws out as schedule entries."""
    data = msgspec.to_builtins(scenario)
    if nodes is not None:
        data["cluster"]["nodes"] = nodes
    if backend is not None:
        data["cluster"]["backend"] = backend
    if bugs:
        data["cluster"]["bugs"] = sorted(set(scenario.cluster.bugs) | set(bugs))
    if seed is not None:
        data["seed"] = seed
    if system is not None:
        data["system"] = system
    try:
        resolved = msgspec.convert(data, Scenario)
    except msgspec.ValidationError as error:
        raise ScenarioError(f"after overrides: {error}; fix: change the override") from None
    if resolved.generator is not None:
        drawn = draw(resolved.generator, resolved.node_names, resolved.duration_s, resolved.seed)
        entries = sorted([*resolved.faults, *drawn], key=lambda e: (e.at_s is None, e.at_s or 0.0))
        resolved = msgspec.structs.replace(resolved, faults=entries, generator=None)
    # Re-validate: overrides (e.g. fewer nodes) may break what the file asked for.
    try:
        return msgspec.convert(msgspec.to_builtins(resolved), Scenario)
    except msgspec.ValidationError as error:
        raise ScenarioError(f"after overrides: {error}; fix: change the override") from None


def draw(
    generator: Generator, nodes: list[str], duration_s: float, seed: int
) -> list[F.ScheduleEntry]:
    """The generator's faults, drawn from ``seed`` (pure: the same inputs, the same list)."""
    rng = random.Random(seed)
    entries: list[F.ScheduleEntry] = []
    busy_until: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(generator.rate_per_min / 60.0)
        if t + generator.fault_duration_s > duration_s:
            return entries
        busy_until = [end for end in busy_until if end > t]
        if len(busy_until) >= generator.max_concurrent:
            continue
        op = _draw_op(rng.choice(generator.ops), nodes, rng)
        entries.append(
            F.ScheduleEntry(op=op, at_s=round(t, 3), heal_after_s=generator.fault_duration_s)
        )
        busy_until.append(t + generator.fault_duration_s)


def _draw_op(name: str, nodes: list[str], rng: random.Random) -> F.FaultOp:
    one = [rng.choice(nodes)]
    a, b = rng.sample(nodes, 2) if len(nodes) > 1 else (nodes[0], nodes[0])
    match name:
        case "crash":
            return F.Crash(nodes=one)
        case "pause":
            return F.Pause(nodes=one)
        case "partition":
            return F.Partition(
                grouping=rng.choice(["halves", "random_halves", "isolate"]), nodes=one
            )
        case "latency":
            return F.Latency(
                src=[a], dst=[b], delay_ms=rng.choice([50.0, 100.0, 250.0]), jitter_ms=25.0
            )
        case "blackhole":
            return F.Blackhole(src=[a], dst=[b])
        case "clock_skew":
            return F.ClockSkew(
                nodes=one, offset_ms=rng.choice([-500.0, 500.0]), drift_ppm=rng.choice([0.0, 200.0])
            )
        case "cpu_throttle":
            return F.CpuThrottle(nodes=one, cpu_fraction=rng.choice([0.25, 0.5]))
        case "reset_peer":
            return F.ResetPeer(src=[a], dst=[b])
        case "bandwidth":
            return F.Bandwidth(src=[a], dst=[b], rate_kbps=rng.choice([64.0, 256.0]))
        case "slicer":
            return F.Slicer(src=[a], dst=[b])
        case _:
            return F.BrokerLoss()
