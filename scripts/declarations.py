"""Every death verdict of a real run, each with the S4 checker's own judgement.

    .venv/bin/python scripts/declarations.py RUN_DIR [RUN_DIR ...] [--json]

``verdict.json`` lists S4 evidence only when S4 is not valid; this prints, for each
run directory, every ``declare_dead`` of a peer and every forced restart (a node's
own "declared dead by X"), judged by ``judge_declarations`` (the checker's code, not
a copy), and says which of them came after the heal of a partition and named a node
on the majority side of it: issue 13's "healthy node declared dead after the heal".
Suspicions of majority-side nodes in the ``SUSPECT_AFTER_HEAL_S`` after a heal are
counted too (a suspicion is no verdict, but it is the first step of one).

Exit status: 0 when no run has a post-heal declaration of a majority-side node or an
``invalid`` judgement, 1 when one has, 64 for bad input (no such run directory).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swarmshake.reference_node.protocol.history import DeclareDead, Fault, History, Suspect
from swarmshake.verify.checkers import Bounds, build_timeline
from swarmshake.verify.checkers.detector import declared_by, judge_declarations

EXIT_USAGE = 64
# How long after a heal a suspicion of a majority-side node is reported: the detector's
# suspicion timeout (1 s) plus D (2 s) covers any verdict the heal could still cause.
SUSPECT_AFTER_HEAL_S = 3.0
# Only a partition splits the nodes into sides; a black hole cuts directed links and
# names no minority, so its heals are not looked at.
SPLIT_OPS = ("partition",)


def minority_of(fault: Fault) -> set[str]:
    """The nodes on the cut-off side of a partition inject: ``isolate`` names them;
    ``groups`` leaves every group but the largest out."""
    params = fault.params or {}
    if params.get("grouping") == "isolate":
        return set(params.get("nodes") or [])
    groups = [set(g) for g in params.get("groups") or []]
    if groups:
        largest = max(groups, key=len)
        return set().union(*(g for g in groups if g is not largest))
    return set(params.get("nodes") or fault.target or [])


def heals_of_cuts(history: History) -> list[tuple[float, set[str]]]:
    """``(heal t, minority)`` for each partition, paired inject to heal in order."""
    open_minorities: list[set[str]] = []
    heals: list[tuple[float, set[str]]] = []
    for event in history.events:
        if not isinstance(event, Fault) or event.op not in SPLIT_OPS:
            continue
        if event.phase == "inject":
            open_minorities.append(minority_of(event))
        elif open_minorities:
            heals.append((event.t_mono, open_minorities.pop(0)))
    return heals


def run_start(history: History) -> float:
    marks = [e.t_mono for e in history.events if getattr(e, "mark", None) == "run_start"]
    return marks[0] if marks else history.events[0].t_mono


def analyse(run_dir: Path) -> dict:
    bounds_file = run_dir / "bounds.json"
    bounds = Bounds(**json.loads(bounds_file.read_text())) if bounds_file.is_file() else Bounds()
    history = History.load(run_dir)
    timeline = build_timeline(history, bounds)
    t0 = run_start(history)
    heals = heals_of_cuts(history)
    verdict_file = run_dir / "verdict.json"
    statuses = {}
    if verdict_file.is_file():
        verdict = json.loads(verdict_file.read_text())
        statuses = {name: r["status"] for name, r in verdict["results"].items()}

    def after_heal(t: float, peer: str, within_s: float | None = None) -> float | None:
        """The heal (relative s) this event follows with ``peer`` on the majority side."""
        for heal_t, minority in heals:
            if (
                t >= heal_t
                and peer not in minority
                and (within_s is None or t - heal_t <= within_s)
            ):
                return round(heal_t - t0, 3)
        return None

    verdicts = []
    for judgement in judge_declarations(history, timeline, bounds):
        event = history.events[judgement.index]
        assert isinstance(event, DeclareDead)
        restart = event.peer == event.node
        declarer = declared_by(event.reason) if restart else event.node
        subject = event.node if restart else event.peer
        heal_t = None if restart else after_heal(event.t_mono, subject)
        verdicts.append(
            {
                "t_s": round(event.t_mono - t0, 3),
                "what": "forced_restart" if restart else "declare_dead",
                "declarer": declarer,
                "peer": subject,
                "peer_incarnation": event.peer_incarnation,
                "reason": event.reason,
                "judgement": judgement.status,
                "explanation": judgement.explanation,
                "forced_restarts": len(judgement.forced_restarts),
                "after_heal_of_majority_node": heal_t,
            }
        )
    suspicions_after_heal = [
        {
            "t_s": round(e.t_mono - t0, 3),
            "node": e.node,
            "peer": e.peer,
            "reason": e.reason,
            "heal_t_s": heal_t,
        }
        for e in history.events
        if isinstance(e, Suspect)
        and (heal_t := after_heal(e.t_mono, e.peer, SUSPECT_AFTER_HEAL_S)) is not None
    ]
    restarts = [e for e in history.events if isinstance(e, DeclareDead) and e.peer == e.node]
    return {
        "run_dir": str(run_dir),
        "statuses": statuses,
        "heals_s": [(round(t - t0, 3), sorted(m)) for t, m in heals],
        "declarations": sum(v["what"] == "declare_dead" for v in verdicts),
        "forced_restarts": [
            {"t_s": round(e.t_mono - t0, 3), "node": e.node, "reason": e.reason} for e in restarts
        ],
        "healthy_declared_after_heal": [v for v in verdicts if v["after_heal_of_majority_node"]],
        "invalid_judgements": [v for v in verdicts if v["judgement"] == "invalid"],
        "unknown_judgements": [v for v in verdicts if v["judgement"] == "unknown"],
        "suspicions_after_heal": suspicions_after_heal,
        "verdicts": verdicts,
    }


def render(report: dict) -> str:
    lines = [f"{report['run_dir']}"]
    lines.append("  verdict: " + " ".join(f"{k}={v}" for k, v in report["statuses"].items()))
    lines.append(f"  cut heals (s, minority): {report['heals_s']}")
    lines.append(
        f"  declarations: {report['declarations']}; forced restarts: "
        + (
            ", ".join(f"{r['node']}@{r['t_s']}s ({r['reason']})" for r in report["forced_restarts"])
            or "none"
        )
    )
    for key in ("healthy_declared_after_heal", "invalid_judgements", "unknown_judgements"):
        lines.append(f"  {key}: {len(report[key])}")
        for v in report[key]:
            lines.append(
                f"    t={v['t_s']}s {v['what']} {v['declarer']} -> {v['peer']}"
                f" (inc {v['peer_incarnation']}) reason={v['reason']!r} judged {v['judgement']}"
                + (f": {v['explanation']}" if v["explanation"] else "")
            )
    lines.append(
        f"  suspicions of majority-side nodes within {SUSPECT_AFTER_HEAL_S} s after a heal: "
        f"{len(report['suspicions_after_heal'])}"
    )
    for s in report["suspicions_after_heal"]:
        lines.append(f"    t={s['t_s']}s {s['node']} suspects {s['peer']} ({s['reason']})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories (events/*.jsonl)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document per run, a line each"
    )
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        if not (run_dir / "events").is_dir():
            print(
                f"declarations: {run_dir}: no events/ folder (is this a run directory?)",
                file=sys.stderr,
            )
            return EXIT_USAGE
    bad = False
    for run_dir in args.run_dirs:
        report = analyse(run_dir)
        bad |= bool(report["healthy_declared_after_heal"] or report["invalid_judgements"])
        print(json.dumps(report) if args.json else render(report))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
