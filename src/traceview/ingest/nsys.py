"""Nsight Systems SQLite exports (`nsys export --type sqlite`), every schema from pre-2022 to 2026.

The file is opened read-only and immutable with the stdlib sqlite3 module. Tables are created
lazily by nsys, so every table and column is probed before use. The large tables (kernels, runtime
API calls) are read as integers only, by child processes in parallel (see sqlite_dump.py); names
are joined from StringIds in DuckDB.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from traceview import memory
from traceview.errors import TraceviewError
from traceview.ingest.reader import Reader
from traceview.model import db

if TYPE_CHECKING:
    import pyarrow as pa

SQLITE_MAGIC = b"SQLite format 3\x00"
CHUNK_ROWS = 200_000
DUMP_CHUNK_ROWS = 100_000  # rows SQLite formats into one CSV string
DUMP_MIN_ROWS = 200_000  # smaller tables are read in this process: starting children costs more
DUMP_MAX_WORKERS = 8
DUMP_SCRIPT = Path(__file__).with_name("sqlite_dump.py")
MASK_24 = 0xFFFFFF

COPY_KINDS = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD",
}
MEMORY_KINDS = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
NVTX_RANGE_TYPES = (59, 60, 70, 71)
NVTX_MARK_TYPE = 34
NVTX_DOMAIN_CREATE = 75
DIAGNOSTIC_SEVERITIES = {0: "info", 1: "info", 2: "warning", 3: "error", 4: "info"}  # 4 = Verbose
KNOWN_SCHEMA_MAJOR = 3  # EXPORT_SCHEMA_VERSION 3.x: every export up to nsys 2026.3


class LenientText:
    """sqlite3 text_factory: UTF-8, with invalid bytes replaced (and counted) instead of failing the read.

    Truncated or corrupted names in real exports otherwise abort the whole ingest.
    """

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.replaced += 1
            return data.decode("utf-8", "replace")


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open without any chance of writing: read-only mode, immutable (no locks, no journal)."""
    uri = f"file:{path.resolve().as_posix()}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceviewError(f"{path}: not a readable SQLite database ({exc})") from None
    except UnicodeDecodeError:  # sqlite3 cannot decode the error message of a garbled schema
        raise TraceviewError(f"{path}: not a readable SQLite database (garbled schema)") from None
    return conn


class Export:
    """The tables and columns one export has, probed once."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn = conn
        self.path = path
        self.tables = {
            name: {column for (column,) in conn.execute("SELECT name FROM pragma_table_info(?)", [name])}
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }

        self.notes: list[tuple[str, str, str]] = []  # (severity, code, message), written once ranks are known

    def note(self, severity: str, code: str, message: str) -> None:
        self.notes.append((severity, code, message))

    def has(self, table: str, *columns: str) -> bool:
        return table in self.tables and all(c in self.tables[table] for c in columns)

    def col_sql(self, table: str, column: str, alias: str | None = None, default_sql: str = "NULL") -> str:
        """`t.column AS alias` when the column exists, else `default_sql AS alias`."""
        value_sql = f"t.{db.ident(column)}" if column in self.tables.get(table, ()) else default_sql
        return f"{value_sql} AS {db.ident(alias or column)}"

    def metadata(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table, "name", "value"):
                return dict(self.conn.execute(f"SELECT name, value FROM {db.ident(table)}").fetchall())
        return {}


def _batches(cursor: sqlite3.Cursor, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Rows to Arrow in one call per chunk: converting tuples as structs beats one array per column."""
    import pyarrow as pa

    row_type = pa.struct(schema)
    while rows := cursor.fetchmany(CHUNK_ROWS):
        yield pa.RecordBatch.from_struct_array(pa.array(rows, type=row_type))


def _stage(con: duckdb.DuckDBPyConnection, export: Export, name: str, query_sql: str, schema: pa.Schema,
           params: list | None = None) -> None:
    """Stream a SQLite query (with its `?` parameters) into a DuckDB temp table in Arrow chunks (pyarrow is
    imported here, by the one format that needs it: a fiftieth of a small report's wall time)."""
    import pyarrow as pa

    cursor = export.conn.execute(query_sql, params or [])
    reader = pa.RecordBatchReader.from_batches(schema, _batches(cursor, schema))
    con.register("_arrow_chunks", reader)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {db.ident(name)} AS SELECT * FROM _arrow_chunks")
    con.unregister("_arrow_chunks")


def _stage_integers(con: duckdb.DuckDBPyConnection, export: Export, name: str, table: str,
                    columns: dict[str, str]) -> None:
    """Stage integer columns of `table` as `name` (alias -> column; a column the export lacks is NULL).

    A large table is dumped as CSV by child processes and parsed by DuckDB, about 3x faster than
    fetching tuples; anything unexpected there (a non-integer value, no child process) falls back
    to the row-by-row path, which gives the same table or the real error.
    """
    present = export.tables.get(table, set())
    exprs = {alias: f't."{db.ident(column)}"' if column in present else "NULL" for alias, column in columns.items()}
    schema = _schema(**{alias: I64 for alias in columns})
    if not _stage_dumped(con, export, name, table, exprs):
        select_sql = ", ".join(f'{expr_sql} AS "{db.ident(alias)}"' for alias, expr_sql in exprs.items())
        _stage(con, export, name, f"SELECT {select_sql} FROM {db.ident(table)} t", schema)


def _dump_workers() -> int:
    return max(1, min(memory.cores(), DUMP_MAX_WORKERS))


def _stage_dumped(con: duckdb.DuckDBPyConnection, export: Export, name: str, table: str,
                  exprs: dict[str, str]) -> bool:
    """Dump `table` with one child per core over disjoint rowid ranges; False when it did not work."""
    lo, hi, rows = export.conn.execute(f"SELECT min(rowid), max(rowid), count(*) FROM {db.ident(table)}").fetchone()
    if not rows or rows < DUMP_MIN_ROWS:
        return False
    exprs_sql = ", ".join(exprs.values())
    # the printf format is the first parameter, the rowid range the child binds the other two
    sql = (f"SELECT group_concat(printf(?, {exprs_sql}), char(10)) "
           f"FROM {db.ident(table)} t WHERE t.rowid BETWEEN ? AND ?")
    params = [",".join(["%s"] * len(exprs))]
    workers = _dump_workers()
    share = -(-(hi - lo + 1) // workers)
    columns = {alias: "BIGINT" for alias in exprs}
    with tempfile.TemporaryDirectory(prefix="traceview-") as tmp:
        outs = [Path(tmp) / f"{i}.csv" for i in range(workers)]
        jobs = [{"sql": sql, "params": params, "lo": start, "hi": min(start + share - 1, hi), "step": DUMP_CHUNK_ROWS,
                 "out": str(out)}
                for start, out in zip(range(lo, hi + 1, share), outs)]
        children, started = [], True
        for job in jobs:
            try:
                child = subprocess.Popen([sys.executable, "-I", "-S", str(DUMP_SCRIPT), str(export.path)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                started = False
                break
            child.stdin.write(json.dumps(job).encode())
            child.stdin.close()
            children.append(child)
        codes = [child.wait() for child in children]  # all of them: none may outlive its file
        if not started or any(codes):
            return False
        files = [str(out) for out in outs if out.exists() and out.stat().st_size]
        try:
            con.execute(
                f"""CREATE OR REPLACE TEMP TABLE {db.ident(name)} AS SELECT * FROM read_csv($files, header = false,
                    delim = ',', quote = '', escape = '', new_line = '\\n', auto_detect = false, columns = $columns)""",
                {"files": files, "columns": columns},
            )
        except duckdb.Error:
            return False
    return con.execute(f"SELECT count(*) FROM {db.ident(name)}").fetchall()[0][0] == rows


def _stage_strings(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    """StringIds as _nsys_strings(id, value), for names joined in DuckDB."""
    _stage(con, export, "_nsys_strings", "SELECT id, value FROM StringIds", _schema(id=I64, value=STR))


def _schema(**fields: str) -> pa.Schema:
    """An Arrow schema from pyarrow's type names (I64, STR)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in fields.items()])


I64, STR = "int64", "string"


def read(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None = None) -> int:
    """Stage one export's rows, one rank per process that ran GPU work (see `ProcessRanks`).

    `rank` (0 when not given) is the first rank to number inferred ranks from; the export's own MPI
    ranks win over it. Returns the lowest rank used: the one every file-level fact is kept on.
    """
    first = 0 if rank is None else rank
    conn = open_readonly(path)
    conn.text_factory = text = LenientText()
    try:
        export = Export(conn, path)
        if not export.has("StringIds", "id", "value"):
            if "StringTable" in export.tables:
                raise TraceviewError(f"{path}: this is an nvprof database, not an Nsight Systems export")
            raise TraceviewError(f"{path}: SQLite file is not an Nsight Systems export (no StringIds table)")
        _check_schema_version(export, export.metadata().get("EXPORT_SCHEMA_VERSION"))
        if not export.has("TARGET_INFO_GPU", "id"):
            export.note("warning", "no_gpu_info",
                        "export has no TARGET_INFO_GPU table: GPU name and properties unknown (use --gpu)")
        _stage_strings(con, export)
        _read_api_calls(con, export, first)
        _read_kernels(con, export, first)
        _read_memops(con, export, first)
        _read_ranges(con, export, first)
        con.execute("DROP TABLE _nsys_strings")
        ranks = ProcessRanks.assign(con, export, first)
        ranks.apply(con)
        _read_trace_info(path, con, export, ranks)
        _read_devices(con, export, ranks)
        for severity, code, message in export.notes:
            db.add_diagnostic(con, ranks.home, "ingest", severity, code, message)
        _read_diagnostics(con, export, ranks.home)
        if ranks.diagnostic:
            db.add_diagnostic(con, ranks.home, "ingest", "info", "ranks_from_processes", ranks.diagnostic)
        if text.replaced:
            db.add_diagnostic(con, ranks.home, "ingest", "warning", "invalid_utf8",
                              f"{text.replaced} strings hold bytes that are not UTF-8; they were replaced with U+FFFD")
    except sqlite3.DatabaseError as exc:
        raise TraceviewError(f"{path}: damaged SQLite export ({exc})") from None
    except UnicodeDecodeError:  # sqlite3 cannot decode the error message (or a table name) of a garbled file
        raise TraceviewError(f"{path}: damaged SQLite export (garbled, undecodable text)") from None
    except duckdb.Error as exc:  # a SQLite error raised while DuckDB streams the rows, or DuckDB's memory limit
        if memory.is_out_of_memory(exc):
            raise TraceviewError(f"{path}: {memory.out_of_memory_message(exc)}") from None
        message = str(exc).splitlines()[0]
        raise TraceviewError(f"{path}: damaged SQLite export ({message})") from None
    finally:
        conn.close()
    return ranks.home


@dataclass(frozen=True)
class ProcessRanks:
    """Which rank each process of one export is: every process that ran GPU work (a kernel or memop) is one.

    One export can hold a whole job (`nsys profile torchrun ...` traces every child), and pooling its
    processes as one rank hides what differs between them. The export's MPI_RANKS table says which
    process is which rank; where it does not cover every GPU process, ranks are numbered from `first`
    by the lowest GPU ordinal each process used, then pid. Processes without GPU work (a launcher,
    data-loader workers) are no rank: their API calls and ranges stay on the lowest rank (`home`),
    which also keeps the file's own facts (devices are listed on every rank). A single-process
    export is one rank as it always was, with no diagnostic.
    """

    home: int
    by_pid: dict[int, int]  # GPU process -> rank
    devices: dict[int, list[int]]  # GPU process -> GPU ordinals it used
    source: str  # 'MPI_RANKS' or 'processes'
    others: tuple[int, ...]  # pids with host rows but no GPU work
    world_size: int | None
    first: int

    @classmethod
    def assign(cls, con: duckdb.DuckDBPyConnection, export: Export, first: int) -> ProcessRanks:
        gpu = con.execute("""
            SELECT pid, list(DISTINCT device_id ORDER BY device_id) FILTER (WHERE device_id IS NOT NULL)
            FROM (SELECT pid, device_id FROM _stage_kernels UNION ALL SELECT pid, device_id FROM _stage_memops)
            WHERE pid IS NOT NULL GROUP BY pid
            ORDER BY min(device_id) NULLS LAST, pid
        """).fetchall()
        devices = {pid: list(used) for pid, used in gpu}
        mpi = _mpi_ranks(export)
        world_size = None
        if export.has("MPI_RANKS", "rank"):
            world_size = export.conn.execute("SELECT count(DISTINCT rank) FROM MPI_RANKS").fetchall()[0][0] or None
        covered = [mpi.get(pid) for pid in devices]
        if devices and None not in covered and len(set(covered)) == len(covered):
            by_pid, source = dict(zip(devices, covered)), "MPI_RANKS"
        else:
            by_pid, source = {pid: first + i for i, pid in enumerate(devices)}, "processes"
            if len(devices) > 1 and world_size is None:
                world_size = len(devices)
        home = min(by_pid.values(), default=first)
        others = tuple(pid for (pid,) in con.execute("""
            SELECT DISTINCT pid FROM (SELECT pid FROM _stage_api_calls UNION ALL SELECT pid FROM _stage_ranges)
            WHERE pid IS NOT NULL ORDER BY pid
        """).fetchall() if pid not in by_pid)
        return cls(home, by_pid, devices, source, others, world_size, first)

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.by_pid.values())) or [self.home]

    def apply(self, con: duckdb.DuckDBPyConnection) -> None:
        """Give every staged row its process's rank (rows were staged as `first`); nothing to do for one."""
        if all(rank == self.first for rank in self.by_pid.values()):
            return
        with db.values_table(con, "_nsys_process_ranks", {"pid": "BIGINT", "rank": "INTEGER"},
                             list(self.by_pid.items())):
            for table in ("_stage_api_calls", "_stage_kernels", "_stage_memops", "_stage_ranges"):
                if self.home != self.first:
                    con.execute(f"UPDATE {db.ident(table)} SET rank = $home", {"home": self.home})
                con.execute(f"UPDATE {db.ident(table)} SET rank = m.rank FROM _nsys_process_ranks m "
                            f"WHERE m.pid = {db.ident(table)}.pid")

    @property
    def diagnostic(self) -> str | None:
        """The mapping in words, when the export held more than one GPU process."""
        if len(self.by_pid) < 2:
            return None
        how = ("from the export's MPI_RANKS" if self.source == "MPI_RANKS"
               else "inferred: numbered by the lowest GPU ordinal each used, then pid")
        mapping = ", ".join(
            f"pid {pid} -> rank {rank} (GPU {', '.join(map(str, self.devices[pid])) or '?'})"
            for pid, rank in sorted(self.by_pid.items(), key=lambda item: item[1]))
        message = f"{len(self.by_pid)} processes ran GPU work, one rank each ({how}): {mapping}"
        if self.others:
            listed = ", ".join(map(str, self.others[:8])) + (", ..." if len(self.others) > 8 else "")
            one = len(self.others) == 1
            message += (f"; {len(self.others)} {'process' if one else 'processes'} without GPU work (pid {listed}) "
                        f"{'is' if one else 'are'} no rank: {'its' if one else 'their'} API calls and ranges are "
                        f"kept on rank {self.home}")
        return message


def _mpi_ranks(export: Export) -> dict[int, int]:
    """pid -> MPI rank from MPI_RANKS (globalTid, rank); empty when the export has none."""
    if not export.has("MPI_RANKS", "globalTid", "rank"):
        return {}
    rows = export.conn.execute(
        "SELECT DISTINCT (globalTid >> 24) & ?, rank FROM MPI_RANKS WHERE rank IS NOT NULL", [MASK_24]).fetchall()
    by_pid: dict[int, set[int]] = {}
    for pid, rank in rows:
        by_pid.setdefault(pid, set()).add(rank)
    return {pid: ranks.pop() for pid, ranks in by_pid.items() if len(ranks) == 1}


def _read_trace_info(path: Path, con: duckdb.DuckDBPyConnection, export: Export, ranks: ProcessRanks) -> None:
    meta = export.metadata()
    origin = None
    if export.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = export.conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        origin = row[0] if row else None
    db.insert_rows(con, "trace_info", [
        [rank, "nsys", "nsys", meta.get("EXPORT_PRODUCT_VERSION"), meta.get("EXPORT_SCHEMA_VERSION"),
         str(path.resolve()), path.stat().st_size, ranks.world_size, "session", origin, None, None]
        for rank in ranks.ranks
    ])


def _check_schema_version(export: Export, version) -> None:
    """A newer export schema is read as best we can (tables and columns are probed), with a warning."""
    major = str(version or "").split(".")[0]
    if major.isdigit() and int(major) <= KNOWN_SCHEMA_MAJOR or not version:
        return
    export.note("warning", "unknown_schema_version",
                f"export schema {version} is newer than the {KNOWN_SCHEMA_MAJOR}.x this traceview knows: "
                "tables and columns it does not know were skipped; check the results")


def _read_devices(con: duckdb.DuckDBPyConnection, export: Export, ranks: ProcessRanks) -> None:
    """Every rank of the export lists the export's GPUs, as each process could see them all."""
    table = "TARGET_INFO_GPU"
    if not export.has(table, "id"):
        return
    columns_sql = ", ".join(export.col_sql(table, column) for column in (
        "id", "name", "smCount", "totalMemory", "computeMajor", "computeMinor", "memoryBandwidth", "clockRate",
        "l2CacheSize", "threadsPerWarp"))
    rows = export.conn.execute(f"SELECT {columns_sql} FROM {db.ident(table)} t ORDER BY 1").fetchall()
    db.insert_rows(con, "devices", [[rank, row[0], (row[1] or "").strip(), *row[2:]]
                                    for rank in ranks.ranks for row in rows])


def _read_api_calls(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if export.has(table, "start", "end", "nameId"):
        _stage_integers(con, export, "_nsys_runtime", table, {
            "start": "start", "end": "end", "event_class": "eventClass", "global_tid": "globalTid",
            "correlation_id": "correlationId", "name_id": "nameId",
        })
    else:
        con.execute("""CREATE OR REPLACE TEMP TABLE _nsys_runtime (start BIGINT, "end" BIGINT, event_class BIGINT,
                       global_tid BIGINT, correlation_id BIGINT, name_id BIGINT)""")
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _stage_api_calls AS
        SELECT $rank AS rank, (global_tid >> 24) & $mask_24 AS pid, global_tid & $mask_24 AS tid,
               coalesce(s.value, '') AS name, CASE WHEN event_class = 1 THEN 'driver' ELSE 'runtime' END AS api,
               start AS start_ns, "end" AS end_ns, correlation_id, NULL::BIGINT AS external_id
        FROM _nsys_runtime r LEFT JOIN _nsys_strings s ON s.id = r.name_id
        """,
        {"rank": rank, "mask_24": MASK_24},
    )
    con.execute("DROP TABLE _nsys_runtime")


KERNEL_COLUMNS = {
    "start": "start", "end": "end", "device_id": "deviceId", "stream_id": "streamId",
    "correlation_id": "correlationId", "global_pid": "globalPid", "name_id": "demangledName",
    "short_name_id": "shortName", "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
    "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
    "registers_per_thread": "registersPerThread", "static_shared": "staticSharedMemory",
    "dynamic_shared": "dynamicSharedMemory", "graph_node_id": "graphNodeId", "graph_id": "graphId",
}


def _read_kernels(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if export.has(table, "start", "end", "demangledName"):
        _stage_integers(con, export, "_nsys_kernels", table, KERNEL_COLUMNS)
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE _nsys_kernels ("
                    + ", ".join(f'"{db.ident(alias)}" BIGINT' for alias in KERNEL_COLUMNS) + ")")
        export.note("warning", "no_kernels",
                    "export has no CUDA kernel table: CUDA tracing was off or failed during capture")
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _stage_kernels AS
        SELECT $rank AS rank, device_id, stream_id, (global_pid >> 24) & $mask_24 AS pid,
               start AS start_ns, "end" AS end_ns, coalesce(d.value, '') AS name, s.value AS short_name,
               grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread,
               static_shared + dynamic_shared AS shared_memory_bytes, correlation_id,
               graph_node_id IS NOT NULL AND graph_node_id <> 0 AS graph_replay,
               graph_id, graph_node_id, NULL::BIGINT AS external_id
        FROM _nsys_kernels k
        LEFT JOIN _nsys_strings d ON d.id = k.name_id
        LEFT JOIN _nsys_strings s ON s.id = k.short_name_id
        """,
        {"rank": rank, "mask_24": MASK_24},
    )
    con.execute("DROP TABLE _nsys_kernels")
    db.add_short_names(con, "_stage_kernels")


def _common_gpu_columns_sql(export: Export, table: str) -> str:
    return ", ".join(export.col_sql(table, c) for c in ("deviceId", "streamId", "correlationId", "globalPid"))


def _read_memops(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    schema = _schema(
        kind=STR, start=I64, end=I64, device_id=I64, stream_id=I64, correlation_id=I64, global_pid=I64,
        bytes=I64, copy_kind=I64, src_kind=I64, dst_kind=I64,
    )
    parts = []
    memcpy, memset = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
    if export.has(memcpy, "start", "end"):
        parts.append(
            f"""SELECT 'memcpy', t.start, t."end", {_common_gpu_columns_sql(export, memcpy)},
                       {export.col_sql(memcpy, 'bytes')}, {export.col_sql(memcpy, 'copyKind')},
                       {export.col_sql(memcpy, 'srcKind')}, {export.col_sql(memcpy, 'dstKind')}
                FROM {db.ident(memcpy)} t"""
        )
    if export.has(memset, "start", "end"):
        parts.append(
            f"""SELECT 'memset', t.start, t."end", {_common_gpu_columns_sql(export, memset)},
                       {export.col_sql(memset, 'bytes')}, NULL, NULL, {export.col_sql(memset, 'memKind')}
                FROM {db.ident(memset)} t"""
        )
    memops_sql = " UNION ALL ".join(parts) if parts else "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0"
    _stage(con, export, "_nsys_memops", memops_sql, schema)
    labels = {"id": "BIGINT", "label": "VARCHAR"}
    with db.values_table(con, "_copy_kinds", labels, list(COPY_KINDS.items())), \
            db.values_table(con, "_mem_kinds", labels, list(MEMORY_KINDS.items())):
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE _stage_memops AS
            SELECT $rank AS rank, m.kind, ck.label AS copy_kind, m.bytes, sk.label AS src_kind, dk.label AS dst_kind,
                   m.device_id, m.stream_id, (m.global_pid >> 24) & $mask_24 AS pid,
                   m.start AS start_ns, m."end" AS end_ns, m.correlation_id,
                   CASE WHEN m.kind = 'memcpy'
                        THEN 'Memcpy ' || coalesce(ck.label, '?') || ' (' || coalesce(sk.label, '?') || ' -> ' || coalesce(dk.label, '?') || ')'
                        ELSE 'Memset (' || coalesce(dk.label, '?') || ')' END AS name
            FROM _nsys_memops m
            LEFT JOIN _copy_kinds ck ON ck.id = m.copy_kind
            LEFT JOIN _mem_kinds sk ON sk.id = m.src_kind
            LEFT JOIN _mem_kinds dk ON dk.id = m.dst_kind
            """,
            {"rank": rank, "mask_24": MASK_24},
        )
    con.execute("DROP TABLE _nsys_memops")


def _read_ranges(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "NVTX_EVENTS"
    schema = _schema(start=I64, end=I64, event_type=I64, text=STR, global_tid=I64, domain_id=I64)
    types = [*NVTX_RANGE_TYPES, NVTX_MARK_TYPE, NVTX_DOMAIN_CREATE]
    if export.has(table, "start", "eventType"):
        text_sql = "coalesce(t.text, s.value)" if export.has(table, "textId") else "t.text"
        join_sql = "LEFT JOIN StringIds s ON s.id = t.textId" if export.has(table, "textId") else ""
        types_sql = ", ".join("?" for _ in types)
        nvtx_sql = f"""SELECT t.start, {export.col_sql(table, 'end')}, t.eventType, {text_sql}, t.globalTid,
                              {export.col_sql(table, 'domainId')}
                       FROM {db.ident(table)} t {join_sql} WHERE t.eventType IN ({types_sql})"""
        _stage(con, export, "_nsys_nvtx", nvtx_sql, schema, types)
    else:
        _stage(con, export, "_nsys_nvtx", "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0", schema)
    open_ranges = con.execute(
        "SELECT count(*) FROM _nsys_nvtx WHERE list_contains($range_types, event_type) AND \"end\" IS NULL",
        {"range_types": list(NVTX_RANGE_TYPES)},
    ).fetchall()[0][0]
    if open_ranges:
        export.note("info", "open_nvtx_ranges",
                    f"{open_ranges} NVTX ranges were still open when the capture ended; they end at the last event")
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _stage_ranges AS
        WITH nvtx AS (
            SELECT *, (global_tid >> 24) & $mask_24 AS pid, global_tid & $mask_24 AS tid FROM _nsys_nvtx
        ),
        domains AS (
            SELECT pid, domain_id, any_value(text) AS domain FROM nvtx
            WHERE event_type = $domain_create GROUP BY ALL
        ),
        capture_end AS (SELECT max(t) AS t FROM (SELECT start AS t FROM _nsys_nvtx UNION ALL SELECT "end" FROM _nsys_nvtx))
        SELECT $rank AS rank, n.pid, n.tid, coalesce(n.text, '') AS name,
               CASE WHEN n.event_type = $mark_type THEN 'nvtx_mark' ELSE 'nvtx' END AS kind,
               d.domain, n.start AS start_ns,
               CASE WHEN n.event_type = $mark_type THEN n.start
                    ELSE coalesce(n."end", (SELECT t FROM capture_end)) END AS end_ns,
               NULL::BIGINT AS external_id,
               nullif(regexp_extract(n.text, 'sizes = (\\[(\\[[^\\]]*\\](, )?)*\\])', 1), '') AS input_dims,
               NULL::VARCHAR AS input_types, NULL::VARCHAR AS input_values, NULL::DOUBLE AS flops
        FROM nvtx n LEFT JOIN domains d ON d.pid = n.pid AND d.domain_id = n.domain_id AND n.domain_id <> 0
        WHERE n.event_type <> $domain_create
        """,
        {"rank": rank, "mask_24": MASK_24, "mark_type": NVTX_MARK_TYPE, "domain_create": NVTX_DOMAIN_CREATE},
    )
    con.execute("DROP TABLE _nsys_nvtx")


def _read_diagnostics(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "DIAGNOSTIC_EVENT"
    if not export.has(table, "text"):
        return
    severity_sql = "t.severity" if export.has(table, "severity") else "NULL"
    timestamp_sql = "t.timestamp" if export.has(table, "timestamp") else "NULL"
    rows = export.conn.execute(f"SELECT {timestamp_sql}, {severity_sql}, t.text FROM {db.ident(table)} t").fetchall()
    db.insert_rows(con, "diagnostics", [
        [rank, "capture", DIAGNOSTIC_SEVERITIES.get(sev, "info"), "diagnostic_event", " ".join(str(text).split()), ts]
        for ts, sev, text in rows
    ])


EXPORT_HINT = ("this is an Nsight Systems report; export it first: "
               "nsys export --type sqlite --output {stem}.sqlite {name}")

READER = Reader(
    name="nsys",
    title="Nsight Systems export",
    description="an Nsight Systems SQLite export",
    suffixes=(".sqlite",),
    sniff=sniff,
    read=read,
    # correlation ids restart in every process of a capture, so only (pid, correlationId) is unique
    launch_link=db.LaunchLink.PROCESS_AND_CORRELATION,
    sources={
        "trace_info": "META_DATA_EXPORT / EXPORT_META_DATA, TARGET_INFO_SESSION_START_TIME",
        "devices": "TARGET_INFO_GPU",
        "kernels": "CUPTI_ACTIVITY_KIND_KERNEL + StringIds",
        "memops": "CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET",
        "api_calls": "CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver)",
        "ranges": "NVTX_EVENTS (push/pop, start/end, marks; domains from registration rows)",
        "diagnostics": "DIAGNOSTIC_EVENT rows, missing tables",
    },
    export_first={".nsys-rep": EXPORT_HINT, ".qdrep": EXPORT_HINT},
)
