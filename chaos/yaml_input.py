"""Reading a user's YAML safely: YAML 1.2 numbers, bounded depth and size, no duplicate keys.

Every YAML file the harness takes from a user (a scenario, a fault schedule) goes
through :func:`compose` and :func:`construct`, so each is read the same way:

- **YAML 1.2 core schema** for plain scalars.  PyYAML alone is YAML 1.1, which reads
  ``1e12`` as a string (its float pattern wants a dot), ``012`` as octal 10, ``on``
  and ``no`` as booleans and ``1:30`` as 90.  Here ``1e12``, ``1.5e-3``, ``.5`` and
  ``+7`` are numbers, ``012`` is twelve, and only ``true``/``false`` are booleans.
- **Finite numbers only**: ``1e309`` reads as infinity and ``.nan`` as not-a-number;
  neither is a duration, a delay or a rate, so both are refused with their line.
- **Bounded**: depth is checked on the event stream before anything is built (a
  file of 10,000 ``[`` is refused at once; PyYAML's composer recurses and would hit
  Python's recursion limit), and nodes are counted with aliases expanded (a
  "billion laughs" file is refused, never expanded).
- **Duplicate keys are errors** naming both lines (YAML says keys are unique; PyYAML
  keeps the last one silently).
- Only plain YAML: the safe constructor builds no objects from tags.

Errors are :class:`YamlInputError`; ``str()`` is ``file:line: problem; fix: …``.
libyaml's parser (PyYAML's C extension, in every PyYAML wheel) is used when present:
the pure-Python scanner is quadratic on deeply nested flow collections.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

MAX_DEPTH = 32  # a scenario nests five levels; deeper input is not a scenario
MAX_YAML_NODES = 200_000  # counts alias expansions: bounds what a validator will walk
MAX_INT_DIGITS = 40  # a seed is < 2**63 (19 digits); longer is a typo, and int() of 4,300+ raises

_BASE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"


class YamlInputError(ValueError):
    """A YAML file that cannot be read; ``str()`` names the file, the line and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader with the YAML 1.2 core schema's implicit types."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}


# YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2), in the order they must be tried:
# an int pattern before the float pattern, which also matches digits alone.
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)
Loader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
# Merge keys (``<<: *defaults``) are YAML 1.1, but suites use anchors to share settings.
Loader.add_implicit_resolver(_MERGE, re.compile(r"^(?:<<)$"), ["<"])


def _int_value(text: str) -> int:
    """A core-schema int: decimal (``012`` is twelve, not octal ten), ``0o17``, ``0x1f``."""
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _float_value(text: str) -> float:
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    return _int_value(loader.construct_scalar(node))


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return _float_value(loader.construct_scalar(node))


Loader.add_constructor(_INT, _construct_int)
Loader.add_constructor(_FLOAT, _construct_float)


def one_line(text: str) -> str:
    """``text`` with control characters escaped: a key or value quoted in an error
    message must not break the message's one line."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _check_depth(text: str, source: str) -> None:
    """Refuse deep nesting on the event stream, before the (recursive) composer runs."""
    depth = 0
    events = 0
    try:
        for event in yaml.parse(text, Loader=Loader):
            events += 1
            if events > MAX_YAML_NODES:
                raise YamlInputError(
                    f"{source}: more than {MAX_YAML_NODES} YAML nodes; fix: split the file"
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlInputError(
                        f"{source}:{event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} "
                        "levels; fix: flatten it (a scenario nests about five levels)"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as error:
        raise _syntax_error(error, source) from None


def _syntax_error(error: yaml.YAMLError, source: str) -> YamlInputError:
    mark = getattr(error, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if "nesting depth" in problem:  # libyaml's own limit (1,000 levels) met first
        return YamlInputError(
            f"{source}{line}: nested deeper than {MAX_DEPTH} levels; fix: flatten it "
            "(a scenario nests about five levels)"
        )
    return YamlInputError(
        f"{source}{line}: not valid YAML: {problem}; fix: check indentation and quoting"
    )


def _check_tree(root: yaml.Node, source: str) -> None:
    """Count nodes with aliases expanded; refuse duplicate keys and non-finite numbers."""
    count = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    checked: set[int] = set()  # an aliased mapping is checked once, counted every time
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise YamlInputError(
                f"{source}: more than {MAX_YAML_NODES} YAML nodes (aliases expanded); "
                "fix: write the schedule out, without nested aliases"
            )
        if depth > MAX_DEPTH:
            raise YamlInputError(
                f"{source}:{_line(node)}: nested deeper than {MAX_DEPTH} levels "
                "(aliases expanded); fix: flatten it"
            )
        first_visit = id(node) not in checked
        checked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            if first_visit:
                _check_unique_keys(node, source)
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)
        elif first_visit and isinstance(node, yaml.ScalarNode) and node.tag == _FLOAT:
            _check_finite(node, source)
        elif first_visit and isinstance(node, yaml.ScalarNode) and node.tag == _INT:
            if len(node.value) > MAX_INT_DIGITS:
                raise YamlInputError(
                    f"{source}:{_line(node)}: a whole number of {len(node.value)} digits; "
                    "no setting takes one that large; fix: write a number within the field's range"
                )


def _key_identity(key: yaml.Node) -> tuple[str, Any] | None:
    if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE:
        return None
    try:
        if key.tag == _INT:
            return key.tag, _int_value(key.value)
        if key.tag == _FLOAT:
            return key.tag, _float_value(key.value)
    except ValueError:
        return None  # the constructor reports it with its line
    return key.tag, key.value


def _check_unique_keys(mapping: yaml.MappingNode, source: str) -> None:
    seen: dict[tuple[str, Any], yaml.Node] = {}
    for key, _ in mapping.value:
        identity = _key_identity(key)
        if identity is None:
            continue
        if identity in seen:
            first = seen[identity]
            raise YamlInputError(
                f"{source}:{_line(key)}: key `{key.value}` is written twice (lines "
                f"{_line(first)} and {_line(key)}); YAML keys are unique; fix: keep one of them"
            )
        seen[identity] = key


def _check_finite(node: yaml.ScalarNode, source: str) -> None:
    try:
        value = _float_value(node.value)
    except ValueError:
        return  # the constructor reports it with its line
    if not math.isfinite(value):
        reading = "not a number" if math.isnan(value) else "infinity"
        raise YamlInputError(
            f"{source}:{_line(node)}: `{node.value}` reads as {reading}, which no setting "
            "takes; fix: write a finite number within the field's range"
        )


def decode_text(data: str | bytes, source: str, max_bytes: int) -> str:
    """The file's text: at most ``max_bytes``, UTF-8."""
    if len(data) > max_bytes:
        raise YamlInputError(f"{source}: {len(data)} bytes is more than {max_bytes}; fix: split it")
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise YamlInputError(
                f"{source}: not UTF-8 text ({error}); fix: save the file as UTF-8"
            ) from None
    return data


def compose(text: str, source: str) -> yaml.Node | None:
    """The checked node tree of ``text`` (``None`` for an empty document)."""
    _check_depth(text, source)
    try:
        root = yaml.compose(text, Loader=Loader)
    except yaml.YAMLError as error:
        raise _syntax_error(error, source) from None
    if root is not None:
        _check_tree(root, source)
    return root


def construct(root: yaml.Node, source: str) -> Any:
    """Plain Python data (dict, list, str, int, float, bool, None) from a checked tree."""
    loader = Loader("")
    try:
        return loader.construct_document(root)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise YamlInputError(
            f"{source}{line}: {problem}; fix: only plain YAML (no tags, no complex keys)"
        ) from None
    except (ValueError, TypeError) as error:  # e.g. an int too long for int()
        raise YamlInputError(f"{source}: {error}; fix: write plain values") from None
    finally:
        loader.dispose()


def load(data: str | bytes, source: str, max_bytes: int) -> Any:
    """Decode, check and construct a YAML document; ``None`` when it is empty."""
    root = compose(decode_text(data, source, max_bytes), source)
    return None if root is None else construct(root, source)


_BASE_DUMPER: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_STR = "tag:yaml.org,2002:str"


class Dumper(_BASE_DUMPER):  # type: ignore[misc, valid-type]
    """Writes YAML that :class:`Loader` and a YAML 1.1 reader read back alike: a string
    either schema would take for something else (``1e5``, ``yes``, ``012``) is quoted."""

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        older = super().resolve(kind, value, implicit)  # YAML 1.1's reading
        if kind is yaml.ScalarNode and implicit and implicit[0] and older == _STR:
            return _resolve_plain(value)
        return older


def _resolve_plain(value: str) -> str:
    """The tag :class:`Loader` gives the plain scalar ``value``."""
    for tag, pattern in Loader.yaml_implicit_resolvers.get(value[:1], []):
        if pattern.match(value):
            return tag
    return _STR


def dump(data: Any) -> str:
    """``data`` (plain Python values) as YAML that :func:`load` reads back unchanged."""
    return yaml.dump(data, Dumper=Dumper, allow_unicode=True, sort_keys=False)


_PATH_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def node_at(root: yaml.Node, path: str) -> yaml.Node:
    """The deepest YAML node on a msgspec error path (``$.a.b[2].c``): its line is the
    line to name when that path does not validate."""
    node = root
    for key, index in _PATH_TOKEN.findall(path[1:]):
        if key and isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
            if found is None:
                return node
            node = found
        elif index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        else:
            return node
    return node
