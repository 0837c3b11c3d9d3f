"""``swarmshake faults [--markdown] [--json]``: the fault catalog, read from the typed ops.

Everything printed comes from ``chaos/faults.py`` itself: each op's tag, docstring,
fields (type and default from the msgspec schema, allowed range from its
``_check_range`` calls), what undoes it (``op.heal()``), and which backends can
inject it (the simulator's ``SIM_SUPPORTED``, each backend's ``supported_ops``).
``--markdown`` writes the reference page, ``docs/faults.md``; a test regenerates it
and fails when the committed page differs, so the page cannot drift from the ops.
Each op's example is loaded through the scenario loader by that test as well.
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
import re
import sys
import textwrap
from typing import Any

import msgspec

from swarmshake.chaos import faults as F
from swarmshake.chaos.commands._args import EXIT_VALID, ArgumentParser

REGENERATE = "swarmshake faults --markdown > docs/faults.md"

# One small, valid entry per op, shown on the page and loaded by the test.
EXAMPLES: dict[str, dict[str, Any]] = {
    "crash": {"nodes": ["n2"]},
    "restart": {"nodes": ["n2"]},
    "pause": {"nodes": ["n3"]},
    "resume": {"nodes": ["n3"]},
    "cpu_throttle": {"nodes": ["n2"], "cpu_fraction": 0.25},
    "disk_full": {"nodes": ["n1"]},
    "checkpoint_corrupt": {"nodes": ["n1"], "mode": "truncate"},
    "clock_skew": {"nodes": ["n2"], "offset_ms": 500, "drift_ppm": 200},
    "byzantine": {"nodes": ["n4"], "mode": "sign_flip", "scale": 10},
    "hold_bulk": {"nodes": ["n1"], "to": ["*"]},
    "churn": {"events_per_min": 6, "down_s": 5},
    "broker_loss": {},
    "partition": {"grouping": "isolate", "nodes": ["n1"]},
    "heal": {"scope": "latency", "src": ["n1"], "dst": ["n2"]},
    "latency": {"src": ["n1"], "dst": ["n2"], "delay_ms": 100, "jitter_ms": 20},
    "bandwidth": {"src": ["n1"], "dst": ["*"], "rate_kbps": 256},
    "blackhole": {"src": ["n1"], "dst": ["n2"], "direction": "one_way"},
    "reset_peer": {"src": ["n1"], "dst": ["n2"], "timeout_ms": 100},
    "slicer": {"src": ["n1"], "dst": ["n2"]},
    "limit_data": {"src": ["n1"], "dst": ["n2"], "limit_bytes": 65536},
    "slow_close": {"src": ["n1"], "dst": ["n2"], "delay_ms": 500},
    "netem": {"src": ["n1"], "dst": ["n2"], "loss_pct": 5, "delay_ms": 20, "reorder_pct": 10},
}

_RANGE = re.compile(r'_check_range\(\s*"(\w+)",\s*[^,]+,\s*([^,]+?),\s*([^)]+?)\s*\)')


def op_classes() -> dict[str, type[F.FaultOp]]:
    return {cls.__struct_config__.tag: cls for cls in F.AnyFault.__args__}  # type: ignore[attr-defined]


def _type_name(info: msgspec.inspect.Type) -> str:
    if isinstance(info, msgspec.inspect.LiteralType):
        return " \\| ".join(f"`{value}`" for value in info.values)
    if isinstance(info, msgspec.inspect.ListType):
        return f"list of {_type_name(info.item_type)}"
    if isinstance(info, msgspec.inspect.UnionType):
        if all(getattr(t, "tag", None) for t in info.types):
            return "a fault op (see below)"
        return " or ".join(_type_name(t) for t in info.types)
    if isinstance(info, msgspec.inspect.StructType):
        return info.cls.__name__
    names = {
        msgspec.inspect.IntType: "int",
        msgspec.inspect.FloatType: "float",
        msgspec.inspect.StrType: "str",
        msgspec.inspect.BoolType: "bool",
        msgspec.inspect.NoneType: "none",
    }
    return names.get(type(info), type(info).__name__.removesuffix("Type").lower())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.12g}"


def _constant(expression: str) -> str:
    """A bound as a number where the source computes one from numbers and the module's
    constants (``MAX_DELAY_MS``, ``30 * 86_400.0``); as written otherwise."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.Name) and isinstance(getattr(F, node.id, None), int | float):
            return getattr(F, node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    try:
        return _number(value(ast.parse(expression.strip(), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError):
        return expression.strip().replace("self.", "")


_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def ranges(cls: type) -> dict[str, str]:
    """``field -> "[low, high]"`` from the ``_check_range`` calls of the op and its bases."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        post_init = klass.__dict__.get("__post_init__")
        if post_init is None:
            continue
        for field, low, high in _RANGE.findall(inspect.getsource(post_init)):
            found[field] = f"[{_constant(low)}, {_constant(high)}]"
    return found


def struct_fields(cls: type) -> list[dict[str, Any]]:
    """Name, type, default and range of each field of a msgspec struct (``op`` aside)."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    bounds = ranges(cls)
    fields = []
    for field in info.fields:
        if field.name == "op" and issubclass(cls, F.FaultOp):
            continue
        if field.default is not msgspec.NODEFAULT:
            default: Any = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        else:
            default = None
        fields.append(
            {
                "name": field.name,
                "type": _type_name(field.type),
                "required": field.required,
                "default": default,
                "range": bounds.get(field.name, ""),
            }
        )
    return fields


def describe(tag: str, cls: type[F.FaultOp]) -> dict[str, Any]:
    fields = struct_fields(cls)
    example = {"op": tag, **EXAMPLES.get(tag, {})}
    op = msgspec.convert(example, F.AnyFault)
    heal = op.heal()
    return {
        "op": tag,
        "doc": inspect.cleandoc(cls.__doc__ or ""),
        "fields": fields,
        "example": example,
        "heal": msgspec.to_builtins(heal) if heal is not None else None,
        "kind": "link"
        if issubclass(cls, F.LinkOp)
        else "node"
        if issubclass(cls, F.NodeOp)
        else "cluster",  # fmt: skip
    }


def supported() -> dict[str, frozenset[str]]:
    from swarmshake.chaos.backends import BACKEND_NAMES, supported_ops

    return {"sim": F.SIM_SUPPORTED, **{name: supported_ops(name) for name in BACKEND_NAMES}}


def catalog() -> list[dict[str, Any]]:
    where = supported()
    entries = []
    for tag, cls in op_classes().items():
        entry = describe(tag, cls)
        entry["backends"] = [name for name, ops in where.items() if tag in ops]
        entries.append(entry)
    return entries


def _flow(data: dict[str, Any]) -> str:
    """``{op: crash, nodes: [n2]}``: the inline form the suites use."""
    return "{" + ", ".join(f"{key}: {_flow_value(value)}" for key, value in data.items()) + "}"


def _flow_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_flow_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return _flow(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and (value == "*" or not re.fullmatch(r"[A-Za-z_][\w-]*", value)):
        return f'"{value}"'
    return str(value)


def _default_text(field: dict[str, Any]) -> str:
    if field["required"]:
        return "required"
    if field["default"] is None:
        return "unset"
    return f"`{_flow_value(field['default'])}`" if field["default"] != "" else '`""`'


def _field_rows(fields: list[dict[str, Any]]) -> list[str]:
    lines = ["| field | type | default | range |", "|---|---|---|---|"]
    for field in fields:
        lines.append(
            f"| `{field['name']}` | {field['type']} | {_default_text(field)} | "
            f"{field['range'] or '—'} |"
        )
    return lines


def _field_table(cls: type, title: str) -> list[str]:
    return [title, "", *_field_rows(struct_fields(cls)), ""]


def markdown(entries: list[dict[str, Any]]) -> str:
    backends = list(supported())
    lines = [
        "# Fault catalog",
        "",
        f"Generated from the typed ops in `chaos/faults.py` by `{REGENERATE}`;",
        "a test (`tests/chaos/test_faults_doc.py`) fails when this page and the ops differ.",
        "",
        "A scenario's `faults:` is a list of entries. Each entry fires at `at_s` seconds",
        "after steady state, or `when` a node logs an event, and is undone",
        "`heal_after_s` seconds later when given (every fault is undone before the",
        "quiesce in any case):",
        "",
        "```yaml",
        "faults:",
        "  - at_s: 5",
        "    op: {op: crash, nodes: [n2]}",
        "    heal_after_s: 10          # restart n2 ten seconds later",
        "  - when: {node: n1, kind: agg_send, step_at_least: 10}",
        "    op: {op: partition, grouping: isolate, nodes: [n1]}",
        "    heal_after_s: 5",
        "```",
        "",
        *_field_table(F.ScheduleEntry, "An entry (`ScheduleEntry`):"),
        *_field_table(F.OnEvent, "A trigger (`when:`, `OnEvent`); `kind` is a history event kind:"),
        'Node lists take names `n1`..`nN` or `"*"` (every node). Link faults act on every',
        "directed link from a node of `src` to a node of `dst`; `direction: both` (the",
        "default) also hits the way back, `one_way` only `src → dst`.",
        "",
        "| op | acts on | undone by | " + " | ".join(backends) + " |",
        "|---|---|---|" + "---|" * len(backends),
    ]
    for entry in entries:
        heal = f"`{entry['heal']['op']}`" if entry["heal"] else "—"
        marks = " | ".join("yes" if name in entry["backends"] else "—" for name in backends)
        lines.append(f"| [`{entry['op']}`](#{entry['op']}) | {entry['kind']} | {heal} | {marks} |")
    for entry in entries:
        lines += ["", f"## {entry['op']}", "", entry["doc"], ""]
        if entry["fields"]:
            lines += [*_field_rows(entry["fields"]), ""]
        heal = f"`{_flow(entry['heal'])}`" if entry["heal"] else "nothing (not undone)"
        lines += [
            f"Example: `{_flow(entry['example'])}`; undone by {heal}.",
            f"Runs on: {', '.join(entry['backends']) or 'no backend yet'}.",
        ]
    return "\n".join(lines) + "\n"


def text(entries: list[dict[str, Any]]) -> str:
    lines = []
    for entry in entries:
        first = entry["doc"].split("\n\n")[0].replace("\n", " ")
        lines.append(f"{entry['op']:<19} {textwrap.shorten(first, 78)}")
        lines.append(f"{'':<19} e.g. {_flow(entry['example'])}  [{', '.join(entry['backends'])}]")
    lines.append(f"\n{len(entries)} ops; the full reference: docs/faults.md ({REGENERATE})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake faults", description=__doc__.splitlines()[0])
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--markdown", action="store_true", help="the reference page (docs/faults.md)")  # fmt: skip
    output.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    entries = catalog()
    if args.markdown:
        sys.stdout.write(markdown(entries))
    elif args.json:
        sys.stdout.write(json.dumps(entries, default=sorted) + "\n")
    else:
        print(text(entries))
    return EXIT_VALID
