"""Input formats. Each reader module exposes `sniff(path, head) -> bool` and `read(path, con, rank) -> rank`.

Adding a format is one module and one line in READERS.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import duckdb

from traceview.errors import TraceviewError
from traceview.ingest import kineto, nsys
from traceview.model import db

READERS: tuple[ModuleType, ...] = (nsys, kineto)
HEAD_BYTES = 64
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz", ".gz")
RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def reader_for(path: Path) -> ModuleType:
    """The reader that recognises the file by its first bytes (never by its extension alone)."""
    if path.name.endswith(REPORT_SUFFIXES):
        raise TraceviewError(
            f"{path}: this is an Nsight Systems report; export it first: "
            f"nsys export --type sqlite --output {path.with_suffix('.sqlite').name} {path.name}"
        )
    try:
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except FileNotFoundError:
        raise TraceviewError(f"{path}: no such file") from None
    except PermissionError:
        raise TraceviewError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise TraceviewError(f"{path}: is a directory") from None
    if not head:
        raise TraceviewError(f"{path}: empty file")
    for reader in READERS:
        if reader.sniff(path, head):
            return reader
    raise TraceviewError(f"{path}: not a trace (expected an Nsight Systems SQLite export or a PyTorch profiler JSON)")


def trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside a directory of per-rank traces, in name order."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise TraceviewError(f"{directory}: directory holds no trace files (*.sqlite, *.json, *.json.gz)")
    return files


def _rank_from_name(path: Path) -> int | None:
    match = RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def ingest(path: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Create the schema in `con` and load a trace file, or a directory of per-rank traces."""
    db.create_schema(con)
    if path.is_dir():
        files = trace_files(path)
        for index, file in enumerate(files):
            default = _rank_from_name(file)
            rank = reader_for(file).read(file, con, index if default is None else default)
            _check_duplicates(con, rank)
            taken = con.execute("SELECT count(*) FROM trace_info WHERE rank = ?", [rank]).fetchall()[0][0]
            if taken > 1:
                raise TraceviewError(f"{file}: rank {rank} is claimed by two traces in {path}")
    else:
        _check_duplicates(con, reader_for(path).read(path, con, None))


def _check_duplicates(con: duckdb.DuckDBPyConnection, rank: int) -> None:
    """Flag kernels recorded twice (same device, stream, start, end and name): a GPU cannot run them.

    They are kept, so nothing in the file is lost and counts match the file; busy time merges
    overlapping intervals, so they do not inflate it. The diagnostic says how many there are.
    """
    # names are only compared among kernels that share device, stream, start and end: hashing two
    # million long names costs more than finding the few (usually no) candidates by integers first
    extra = con.execute(
        """WITH candidates AS (
               SELECT device_id, stream_id, start_ns, end_ns FROM kernels WHERE rank = $rank
               GROUP BY ALL HAVING count(*) > 1
           )
           SELECT coalesce(sum(n - 1), 0) FROM (
               SELECT count(*) AS n FROM kernels k SEMI JOIN candidates c
                 ON c.device_id IS NOT DISTINCT FROM k.device_id AND c.stream_id IS NOT DISTINCT FROM k.stream_id
                AND c.start_ns = k.start_ns AND c.end_ns = k.end_ns
               WHERE k.rank = $rank
               GROUP BY k.device_id, k.stream_id, k.start_ns, k.end_ns, k.name HAVING count(*) > 1)""",
        {"rank": rank},
    ).fetchall()[0][0]
    if extra:
        db.add_diagnostic(con, rank, "ingest", "warning", "duplicate_events",
                          f"{extra} kernel executions appear more than once (same device, stream, start, end and "
                          "name); they are kept as recorded")
