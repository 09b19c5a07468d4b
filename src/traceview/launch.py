"""The `traceview` command's entry point, light on purpose.

A `report` that writes HTML starts the page's renderer process (report/worker.py) before the command line's
own imports: DuckDB and the analysis take 0.13 s on one core, and altair's import in the renderer (0.24 s)
runs beside them on another, where it used to run beside the analysis (the sample report 0.865 -> 0.81 s,
medians of 12 in turns). Which formats a report writes is the command line's to decide; this only guesses
early, and a renderer started for nothing ends when the command does (its stdin closes unread).
"""

from __future__ import annotations

import os
import signal
import sys

# the group's options that take a value (`traceview --cache-dir DIR report ...`); tests/test_launch.py checks the list
GROUP_OPTIONS_WITH_VALUES = ("--memory-limit", "--cache-dir")


def main() -> None:
    # a Ctrl-C before the command line can say it in its own words is noted, not raised: raised inside an
    # extension module's import (DuckDB's), it aborts the interpreter
    interrupts = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupts.append(signum))
    start_renderers(sys.argv[1:])
    from traceview.cli import main as run_command

    if interrupts:
        sys.stderr.write("traceview: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    run_command()  # which handles SIGINT itself from here on


def report_formats(args: list[str]) -> str | None:
    """The `--format` text of a `report` command line (its default when none is given); None for any other
    command and for `--help`."""
    command, rest = _command(args)
    if command != "report":
        return None
    if "--help" in rest or "-h" in rest:
        return None
    from traceview.report import REPORT

    formats = ",".join(REPORT.defaults())
    for i, arg in enumerate(rest):
        if arg == "--format" and i + 1 < len(rest):
            formats = rest[i + 1]
        elif arg.startswith("--format="):
            formats = arg.removeprefix("--format=")
    return formats


def _command(args: list[str]) -> tuple[str | None, list[str]]:
    """The subcommand and the arguments after it: the first argument that is neither an option of the group
    nor an option's value."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in GROUP_OPTIONS_WITH_VALUES else 1
    return (args[i], args[i + 1:]) if i < len(args) else (None, [])


def start_renderers(args: list[str]) -> None:
    """Start the renderer processes of the formats a `report` command line asks for (`Renderer.start_early`)."""
    formats = report_formats(args)
    if formats is None:
        return
    from traceview.errors import TraceviewError
    from traceview.report import REPORT

    try:
        chosen = REPORT.parse(formats)
    except TraceviewError:  # the command line says so in its own words
        return
    for renderer in chosen:
        renderer.start_early()
