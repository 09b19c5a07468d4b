"""What an input format declares, in its own module, so that adding one is that module and a line in READERS.

The registry (ingest/__init__.py) builds the accepted suffixes, the "not a trace" error, the CLI's list of
formats, the schema docs' mapping table and format list (model/docs.py) and the report's fix labels from
these declarations alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from traceview.model.db import LaunchLink


@dataclass(frozen=True)
class Reader:
    """One input format.

    `read` inserts one file's trace_info rows (source_format = `name`), devices and diagnostics, stages its
    events in the tables db.STAGING_TABLES declares (docs/schema.md, "What a reader must produce") and returns the
    lowest rank it used (an nsys export of several processes holds several ranks); the registry checks the
    stages, then finishes each rank the file added to trace_info with `launch_link`, the same way for every
    format.
    """

    name: str  # short id: "nsys", "kineto"
    title: str  # the column heading in docs/schema.md
    description: str  # one line, read in "not a trace (expected ...)" and in the CLI help
    suffixes: tuple[str, ...]  # file names a directory of per-rank traces is scanned for
    sniff: Callable[[Path, bytes], bool]  # whether the file (first bytes given) is this format
    read: Callable[[Path, duckdb.DuckDBPyConnection, int | None], int]
    launch_link: LaunchLink  # how a kernel finds the API call that launched it
    sources: Mapping[str, str]  # contract table -> what its rows are read from (docs/schema.md)
    export_first: Mapping[str, str] = field(default_factory=dict)  # suffix of the tool's own file -> hint
