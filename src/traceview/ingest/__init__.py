"""Input formats: each reader module declares one (a `Reader`, see reader.py); READERS registers them.

Adding a format is one module and one line in READERS: the accepted suffixes, the "not a trace" error,
describe_formats() for the CLI help, the schema docs' mapping table and format list, the report schema's
`format` enum (checked by a test) and the report's fix labels all come from the declarations. What a
reader must stage is db.STAGING_TABLES; _load checks it after every read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import duckdb

from traceview.errors import TraceviewError
from traceview.ingest import kineto, nsys
from traceview.ingest.reader import Reader
from traceview.model import db

READERS: tuple[Reader, ...] = (nsys.READER, kineto.READER)
HEAD_BYTES = 64
RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def trace_suffixes() -> tuple[str, ...]:
    """The file names a directory of per-rank traces is scanned for: every format's suffixes."""
    return tuple(suffix for reader in READERS for suffix in reader.suffixes)


def report_suffixes() -> tuple[str, ...]:
    """Suffixes of the profilers' own files, which must be exported before they can be read."""
    return tuple(suffix for reader in READERS for suffix in reader.export_first)


def describe_formats() -> str:
    """The formats read, with their suffixes, as one phrase (for the CLI help)."""
    return _either(f"{reader.description} ({', '.join(reader.suffixes)})" for reader in READERS)


def not_a_trace(path: Path) -> str:
    """The error for a file no reader recognises: it names every format read."""
    return f"{path}: not a trace (expected {_either(reader.description for reader in READERS)})"


def _either(phrases: Iterable[str]) -> str:
    phrases = list(phrases)
    return phrases[0] if len(phrases) == 1 else f"{', '.join(phrases[:-1])} or {phrases[-1]}"


# what other modules import; derived from READERS once it is complete
TRACE_SUFFIXES = trace_suffixes()
REPORT_SUFFIXES = report_suffixes()


def reader_for(path: Path) -> Reader:
    """The reader that recognises the file by its content (never by its extension alone)."""
    for reader in READERS:
        for suffix, hint in reader.export_first.items():
            if path.name.endswith(suffix):
                raise TraceviewError(f"{path}: {hint.format(name=path.name, stem=path.name[:-len(suffix)])}")
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
    raise TraceviewError(not_a_trace(path))


def trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside a directory of per-rank traces, in name order."""
    suffixes = trace_suffixes()
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(suffixes))
    if not files:
        listed = ", ".join(f"*{suffix}" for suffix in suffixes)
        raise TraceviewError(f"{directory}: directory holds no trace files ({listed})")
    return files


def _rank_from_name(path: Path) -> int | None:
    match = RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def ingest(path: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Create the schema in `con` and load a trace file, or a directory of per-rank traces.

    In a directory, a file's rank is the one its name says (`rank3`, `worker_3`), else its place in
    name order, moved past the extra ranks of earlier files that held several processes; a rank the
    file itself states (Kineto distributedInfo, nsys MPI_RANKS) wins. Two files claiming one rank is
    an error.
    """
    db.create_schema(con)
    if path.is_dir():
        extra = 0  # ranks beyond the first that earlier files held
        for index, file in enumerate(trace_files(path)):
            named = _rank_from_name(file)
            ranks = _load(file, con, index + extra if named is None else named)
            extra += len(ranks) - 1
            for rank in ranks:
                _check_duplicates(con, rank)
                taken = con.execute("SELECT count(*) FROM trace_info WHERE rank = ?", [rank]).fetchall()[0][0]
                if taken > 1:
                    raise TraceviewError(f"{file}: rank {rank} is claimed by two traces in {path}")
    else:
        for rank in _load(path, con, None):
            _check_duplicates(con, rank)


def _load(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None) -> list[int]:
    """Stage one file with its format's reader, then finish the stages the same way for every format.

    Returns the ranks the file held: one per trace_info row the reader added (an nsys export holds
    one per process that ran GPU work).
    """
    reader = reader_for(path)
    before = con.execute("SELECT count(*) FROM trace_info").fetchall()[0][0]
    reader.read(path, con, rank)
    added = con.execute("SELECT rank, source_format FROM trace_info WHERE rowid >= ? ORDER BY rank",
                        [before]).fetchall()
    _check_contract(path, con, reader, {source for _, source in added})
    ranks = [r for r, _ in added]
    if len(ranks) == 1:
        db.finish_stages(con, ranks[0], reader.launch_link)
    else:
        _finish_each_rank(con, ranks, reader.launch_link)
    return ranks


def _check_contract(path: Path, con: duckdb.DuckDBPyConnection, reader: Reader, sources: set[str]) -> None:
    """Fail on a reader that broke the staging contract (db.STAGING_TABLES) before finishing reads its tables: a
    reader bug, named as one, rather than a binder error from deep inside a finishing statement."""
    problems = db.staging_problems(con)
    if not sources:
        problems.append("no trace_info row")
    problems += [f"trace_info.source_format is {source}, not {reader.name!r}"
                 for source in sorted(map(repr, sources - {reader.name}))]
    if problems:
        raise TraceviewError(f"{path}: the {reader.name!r} reader broke the staging contract (docs/schema.md, "
                             f"What a reader must produce): {'; '.join(problems)}")


def _finish_each_rank(con: duckdb.DuckDBPyConnection, ranks: list[int], link: db.LaunchLink) -> None:
    """Finish a file's stages one rank at a time, so ids are numbered from 0 within each rank."""
    for stage in db.STAGING_TABLES:
        con.execute(f"ALTER TABLE {db.ident(stage.name)} RENAME TO {db.ident('_file' + stage.name)}")
    for rank in ranks:
        for stage in db.STAGING_TABLES:
            con.execute(f"CREATE TEMP TABLE {db.ident(stage.name)} AS "
                        f"SELECT * FROM {db.ident('_file' + stage.name)} WHERE rank = ?", [rank])
        db.finish_stages(con, rank, link)
    for stage in db.STAGING_TABLES:
        con.execute(f"DROP TABLE {db.ident('_file' + stage.name)}")


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
