"""The simulator's command line (docs/engine.md section 8): run a scenario file, JSON lines out.

`python -m apps.engine.core.simulator SCENARIO.json [--until S] [--summary-only] [--report F]`
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .budget import US_PER_S
from .scenario import loads
from .scenario_model import ScenarioError
from .simulation import Simulation


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    """Run a scenario; JSON lines on stdout. Returns 0, or 2 for bad input or arguments."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _Parser(prog="simulate", description="Run the engine core on a scenario.")
    parser.add_argument("scenario", help="scenario JSON file, or - for stdin")
    parser.add_argument("--until", type=str, metavar="SECONDS", help="stop the clock at SECONDS")
    parser.add_argument("--summary-only", action="store_true", help="print only the summary line")
    parser.add_argument("--report", metavar="FILE.html", help="write a self-contained plotly report")
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as e:
        print(f"simulate: {e}", file=stderr)
        return 2
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        text = sys.stdin.read() if args.scenario == "-" else _read(args.scenario)
        sc = loads(text)
        end_us = sc.duration_us
        if args.until is not None:
            end_us = min(end_us, _until(args.until))
        if args.report:
            _check_writable(args.report)
    except ScenarioError as e:
        print(f"simulate: {e}", file=stderr)
        return 2
    sim = Simulation(sc, end_us, record=args.report is not None)
    for line in sim.run():
        if not args.summary_only or "summary" in line:
            stdout.write(json.dumps(line) + "\n")
    if args.report:
        from .report import write_report

        try:
            write_report(sim, args.report)
        except OSError as e:
            print(f"simulate: --report: {args.report}: {e.strerror}", file=stderr)
            return 2
    return 0


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit 2, like bad input (not usage plus error)."""

    def error(self, message):
        raise _ArgumentError(message)


def _check_writable(path: str) -> None:
    """Refuse a report path that cannot be written before spending the run on it."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ScenarioError(f"--report: {path} is a directory")
    if not os.path.isdir(folder):
        raise ScenarioError(f"--report: {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ScenarioError(f"--report: {folder} is not writable")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text") from None


def _until(text: str) -> int:
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ScenarioError(f"--until: {text!r} is not a number of seconds") from None
    us = value * US_PER_S
    if not value.is_finite() or value < 0 or us != us.to_integral_value():
        raise ScenarioError("--until: must be >= 0 and a multiple of 1 microsecond")
    return int(us)


if __name__ == "__main__":
    sys.exit(main())
