"""``python -m swarmshake.reference_node --config node.toml [flags]``: run one node.

Flags override single config fields, so a launcher can reuse one file per node:
``--node-id``, ``--control-port``, ``--bulk-port``, ``--http-port``, ``--run-dir``,
``--max-steps``, ``--clock-offset-s``, ``--clock-drift-ppm``, and the generic
``--set SECTION.FIELD=JSON`` (e.g. ``--set training.aggregation='"median"'``).
Exit codes: 0 clean stop, 3 the worker died, 64 bad usage or bad config.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

FLAG_FIELDS = {
    "node_id": "node.id",
    "control_port": "network.control_port",
    "bulk_port": "network.bulk_port",
    "http_port": "network.http_port",
    "run_dir": "node.run_dir",
    "max_steps": "step.max_steps",
    "clock_offset_s": "clock.offset_s",
    "clock_drift_ppm": "clock.drift_ppm",
}


def parse_args(argv: list[str]) -> tuple[Path, dict[str, object]]:
    parser = argparse.ArgumentParser(
        prog="python -m swarmshake.reference_node", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", required=True, type=Path, help="node.toml")
    parser.add_argument("--node-id")
    parser.add_argument("--control-port", type=int)
    parser.add_argument("--bulk-port", type=int)
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--run-dir")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--clock-offset-s", type=float)
    parser.add_argument("--clock-drift-ppm", type=float)
    parser.add_argument(
        "--bug", action="append", default=[], metavar="NAME", help="switch on a known protocol bug"
    )
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=JSON")
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    for name, dotted in FLAG_FIELDS.items():
        value = getattr(args, name)
        if value is not None:
            overrides[dotted] = value
    if args.bug:
        overrides["node.bugs"] = args.bug
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            parser.error(f"--set {item!r}: write SECTION.FIELD=JSON, e.g. step.max_steps=20")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            parser.error(
                f"--set {item!r}: the value is not JSON (strings need quotes: '\"median\"')"
            )
    return args.config, overrides


# A node declared dead (or told it was removed while it ran as a member) restarts its
# control process with a new incarnation; one that keeps having to is not going to
# converge, and stops.
MAX_REJOINS_PER_PROCESS = 20


def main(argv: list[str] | None = None) -> int:
    from swarmshake.reference_node.config import ConfigError, load

    argv = sys.argv[1:] if argv is None else argv
    try:
        config_path, overrides = parse_args(argv)
    except SystemExit as exit_:
        return 64 if exit_.code else 0
    try:
        config = load(config_path, overrides)
        config.run_key(config_path.parent)
    except (ConfigError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 64
    from swarmshake.reference_node.runtime import worker_start
    from swarmshake.reference_node.runtime.node import EXIT_REJOIN, ControlProcess

    for _ in range(MAX_REJOINS_PER_PROCESS):
        forked = None
        if worker_start.fork_preferred(config.worker.start):
            # Before the event loop and its threads exist (worker_start says why).
            forked = worker_start.fork_worker(config.worker.nice)
        code = asyncio.run(ControlProcess(config, config_path, overrides, forked).run())
        if code != EXIT_REJOIN:
            return code
        # Declared dead by peers, or removed while running as a member (the reason
        # was printed as the process exited): a new incarnation starts.
        print(f"node {config.node.id}: restarting as a new incarnation", file=sys.stderr)
    print(
        f"node {config.node.id}: restarted {MAX_REJOINS_PER_PROCESS} times; giving up",
        file=sys.stderr,
    )
    return EXIT_REJOIN


if __name__ == "__main__":
    sys.exit(main())
