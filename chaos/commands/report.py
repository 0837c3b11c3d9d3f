"""``swarmshake report RUN_DIR [--compare OTHER] [--json]``: regenerate or compare reports.

- ``report RUN_DIR``: rewrite ``report.html``, ``junit.xml`` and ``summary.md`` (and
  ``verdict.json`` if missing) of a run directory; for a benchmark folder (one with
  ``bench.json``), rewrite ``report.html``, ``summary.md`` and ``junit.xml``.  Exits with the run's
  verdict: 0 valid, 1 violated, 2 unknown.
- ``--compare OTHER``: compare RUN_DIR (new) against OTHER (old) — two runs of the
  same scenario, or two benchmark folders — print a table (regressions first, in red
  on a terminal) and write ``compare.md`` and ``compare.html`` into RUN_DIR.
  Exits 1 when a detection/recovery/rejoin time regressed (≥ ``--tolerance`` and ≥
  ``--floor-ms`` slower) or a property became violated, else 0.
- 64: bad usage or an unreadable run directory (the message names the file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
)

EXIT_BY_STATUS = {"valid": EXIT_VALID, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}


def _regenerate_bench(folder: Path) -> int:
    from swarmshake.reports.bench_report import (
        render_bench_html,
        render_bench_junit,
        render_bench_markdown,
    )
    from swarmshake.reports.compare import read_bench

    document = read_bench(folder)
    (folder / "report.html").write_text(render_bench_html(document), encoding="utf-8")
    (folder / "summary.md").write_text(render_bench_markdown(document), encoding="utf-8")
    (folder / "junit.xml").write_bytes(render_bench_junit(document))
    print(f"wrote report.html, summary.md and junit.xml into {folder}", file=sys.stderr)
    return EXIT_VALID


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake report", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory (or a bench folder)")
    parser.add_argument(
        "--compare", type=Path, metavar="OTHER", help="the older run to compare against"
    )
    parser.add_argument(
        "--tolerance", type=float, default=0.2, help="relative slowdown flagged (0.2 = 20%%)"
    )
    parser.add_argument(
        "--floor-ms", type=float, default=20.0, help="absolute slowdown below which noise rules"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        raise UsageError(f"{args.run_dir}: not a directory (give a run directory, e.g. runs/<id>)")
    if not 0.0 <= args.tolerance <= 100.0 or args.floor_ms < 0:
        raise UsageError("--tolerance must lie in [0, 100] and --floor-ms be ≥ 0")

    from swarmshake.reports import RunDirError, load_run_dir, write_run_reports
    from swarmshake.reports import compare as compare_module

    try:
        is_bench = (args.run_dir / "bench.json").is_file()
        if args.compare is None:
            if is_bench:
                return _regenerate_bench(args.run_dir)
            write_run_reports(args.run_dir)
            run = load_run_dir(args.run_dir)
            print(
                f"wrote reports into {args.run_dir} (run {run.status}, checkers' verdict "
                f"{run.verdict.status})",
                file=sys.stderr,
            )
            return EXIT_BY_STATUS[run.status]
        if not args.compare.is_dir():
            raise UsageError(f"--compare {args.compare}: not a directory")
        if is_bench:
            comparison = compare_module.compare_benches(
                compare_module.read_bench(args.run_dir),
                compare_module.read_bench(args.compare),
                tolerance=args.tolerance,
                floor_ms=args.floor_ms,
            )
        else:
            comparison = compare_module.compare_runs(
                load_run_dir(args.run_dir),
                load_run_dir(args.compare),
                tolerance=args.tolerance,
                floor_ms=args.floor_ms,
            )
    except RunDirError as error:
        # One line: a YAML error's own text spans several (mark, snippet, caret).
        message = " ".join(str(error).split())
        fix = "" if "fix" in message else "; fix: repair or remove the file named"
        raise UsageError(message + fix) from None
    from swarmshake.reports.compare_html import render_comparison_html

    markdown = args.run_dir / "compare.md"
    page = args.run_dir / "compare.html"
    markdown.write_text(compare_module.render_comparison(comparison), encoding="utf-8")
    page.write_text(render_comparison_html(comparison), encoding="utf-8")
    if args.json:
        sys.stdout.write(json.dumps(comparison, indent=2) + "\n")
    else:
        compare_module.print_comparison(comparison, sys.stderr)
        print(f"wrote {markdown} and {page}", file=sys.stderr)
    return EXIT_INVALID if comparison["regressed"] else EXIT_VALID
