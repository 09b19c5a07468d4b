"""Nsight Systems SQLite exports (`nsys export --type sqlite`), every schema from pre-2022 to 2026.

The file is opened read-only and immutable with the stdlib sqlite3 module. Tables are created
lazily by nsys, so every table and column is probed before use. SQLite only joins the string
table (a primary-key lookup); everything else happens in DuckDB.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from traceview.errors import TraceviewError
from traceview.model import db

SQLITE_MAGIC = b"SQLite format 3\x00"
CHUNK_ROWS = 200_000
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

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.tables = {
            name: {col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')}
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }

    def has(self, table: str, *columns: str) -> bool:
        return table in self.tables and all(c in self.tables[table] for c in columns)

    def col(self, table: str, column: str, alias: str | None = None, default: str = "NULL") -> str:
        """`t.column AS alias` when the column exists, else `default AS alias`."""
        alias = alias or column
        return f"t.{column} AS {alias}" if column in self.tables.get(table, ()) else f"{default} AS {alias}"

    def metadata(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table, "name", "value"):
                return dict(self.conn.execute(f"SELECT name, value FROM {table}").fetchall())
        return {}


def _batches(cursor: sqlite3.Cursor, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Rows to Arrow in one call per chunk: converting tuples as structs beats one array per column."""
    row_type = pa.struct(schema)
    while rows := cursor.fetchmany(CHUNK_ROWS):
        yield pa.RecordBatch.from_struct_array(pa.array(rows, type=row_type))


def _stage(con: duckdb.DuckDBPyConnection, export: Export, name: str, sql: str, schema: pa.Schema) -> None:
    """Stream a SQLite query into a DuckDB temp table in Arrow chunks."""
    cursor = export.conn.execute(sql)
    reader = pa.RecordBatchReader.from_batches(schema, _batches(cursor, schema))
    con.register("_arrow_chunks", reader)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _arrow_chunks")
    con.unregister("_arrow_chunks")


def _schema(**fields: pa.DataType) -> pa.Schema:
    return pa.schema(list(fields.items()))


I64, I32, STR = pa.int64(), pa.int32(), pa.string()


def read(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None = None) -> int:
    """Load one export into the schema as `rank` (0 when not given). Returns the rank used."""
    rank = 0 if rank is None else rank
    conn = open_readonly(path)
    conn.text_factory = text = LenientText()
    try:
        export = Export(conn)
        if not export.has("StringIds", "id", "value"):
            if "StringTable" in export.tables:
                raise TraceviewError(f"{path}: this is an nvprof database, not an Nsight Systems export")
            raise TraceviewError(f"{path}: SQLite file is not an Nsight Systems export (no StringIds table)")
        _read_trace_info(path, con, export, rank)
        _read_devices(con, export, rank)
        _read_api_calls(con, export, rank)
        _read_kernels(con, export, rank)
        _read_memops(con, export, rank)
        _read_ranges(con, export, rank)
        _read_diagnostics(con, export, rank)
        if text.replaced:
            db.add_diagnostic(con, rank, "ingest", "warning", "invalid_utf8",
                              f"{text.replaced} strings hold bytes that are not UTF-8; they were replaced with U+FFFD")
        db.finish_stages(con, rank, match_pid=True)
    except sqlite3.DatabaseError as exc:
        raise TraceviewError(f"{path}: damaged SQLite export ({exc})") from None
    except UnicodeDecodeError:  # sqlite3 cannot decode the error message (or a table name) of a garbled file
        raise TraceviewError(f"{path}: damaged SQLite export (garbled, undecodable text)") from None
    except duckdb.Error as exc:  # a SQLite error raised while DuckDB streams the rows
        message = str(exc).splitlines()[0]
        raise TraceviewError(f"{path}: damaged SQLite export ({message})") from None
    finally:
        conn.close()
    return rank


def _read_trace_info(path: Path, con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    meta = export.metadata()
    origin = None
    if export.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = export.conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        origin = row[0] if row else None
    world_size = None
    if export.has("MPI_RANKS", "rank"):
        world_size = export.conn.execute("SELECT count(DISTINCT rank) FROM MPI_RANKS").fetchall()[0][0] or None
    con.execute(
        "INSERT INTO trace_info VALUES (?, 'nsys', 'nsys', ?, ?, ?, ?, ?, 'session', ?, NULL, NULL)",
        [
            rank,
            meta.get("EXPORT_PRODUCT_VERSION"),
            meta.get("EXPORT_SCHEMA_VERSION"),
            str(path.resolve()),
            path.stat().st_size,
            world_size,
            origin,
        ],
    )
    _check_schema_version(con, rank, meta.get("EXPORT_SCHEMA_VERSION"))


def _check_schema_version(con: duckdb.DuckDBPyConnection, rank: int, version) -> None:
    """A newer export schema is read as best we can (tables and columns are probed), with a warning."""
    major = str(version or "").split(".")[0]
    if major.isdigit() and int(major) <= KNOWN_SCHEMA_MAJOR or not version:
        return
    db.add_diagnostic(con, rank, "ingest", "warning", "unknown_schema_version",
                      f"export schema {version} is newer than the {KNOWN_SCHEMA_MAJOR}.x this traceview knows: "
                      "tables and columns it does not know were skipped; check the results")


def _read_devices(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "TARGET_INFO_GPU"
    if not export.has(table, "id"):
        db.add_diagnostic(con, rank, "ingest", "warning", "no_gpu_info",
                          "export has no TARGET_INFO_GPU table: GPU name and properties unknown (use --gpu)")
        return
    rows = export.conn.execute(
        f"""SELECT {export.col(table, 'id')}, {export.col(table, 'name')}, {export.col(table, 'smCount')},
                   {export.col(table, 'totalMemory')}, {export.col(table, 'computeMajor')},
                   {export.col(table, 'computeMinor')}, {export.col(table, 'memoryBandwidth')},
                   {export.col(table, 'clockRate')}, {export.col(table, 'l2CacheSize')},
                   {export.col(table, 'threadsPerWarp')}
            FROM {table} t ORDER BY 1"""
    ).fetchall()
    db.insert_rows(con, "devices", [[rank, row[0], (row[1] or "").strip(), *row[2:]] for row in rows])


def _read_api_calls(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    schema = _schema(start=I64, end=I64, event_class=I64, global_tid=I64, correlation_id=I64, name=STR)
    if export.has(table, "start", "end", "nameId"):
        sql = f"""SELECT t.start, t."end", {export.col(table, 'eventClass', 'event_class')},
                         {export.col(table, 'globalTid')}, {export.col(table, 'correlationId')}, s.value
                  FROM {table} t LEFT JOIN StringIds s ON s.id = t.nameId"""
    else:
        sql = "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0"
    _stage(con, export, "_nsys_runtime", sql, schema)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_api_calls AS
        SELECT {rank} AS rank, (global_tid >> 24) & {MASK_24} AS pid, global_tid & {MASK_24} AS tid,
               coalesce(name, '') AS name, CASE WHEN event_class = 1 THEN 'driver' ELSE 'runtime' END AS api,
               start AS start_ns, "end" AS end_ns, correlation_id, NULL::BIGINT AS external_id
        FROM _nsys_runtime
        """
    )
    con.execute("DROP TABLE _nsys_runtime")


def _read_kernels(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    schema = _schema(
        start=I64, end=I64, device_id=I64, stream_id=I64, correlation_id=I64, global_pid=I64,
        name=STR, short_name=STR, grid_x=I64, grid_y=I64, grid_z=I64, block_x=I64, block_y=I64,
        block_z=I64, registers_per_thread=I64, static_shared=I64, dynamic_shared=I64,
        graph_node_id=I64, graph_id=I64,
    )
    if export.has(table, "start", "end", "demangledName"):
        sql = f"""
            SELECT t.start, t."end", {', '.join(export.col(table, c) for c in (
                       'deviceId', 'streamId', 'correlationId', 'globalPid'))},
                   d.value, s.value,
                   {', '.join(export.col(table, c) for c in ('gridX', 'gridY', 'gridZ', 'blockX', 'blockY', 'blockZ'))},
                   {export.col(table, 'registersPerThread')}, {export.col(table, 'staticSharedMemory')},
                   {export.col(table, 'dynamicSharedMemory')}, {export.col(table, 'graphNodeId')},
                   {export.col(table, 'graphId')}
            FROM {table} t
            LEFT JOIN StringIds d ON d.id = t.demangledName
            LEFT JOIN StringIds s ON s.id = {'t.shortName' if export.has(table, 'shortName') else 'NULL'}"""
    else:
        sql = "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0"
        db.add_diagnostic(con, rank, "ingest", "warning", "no_kernels",
                          "export has no CUDA kernel table: CUDA tracing was off or failed during capture")
    _stage(con, export, "_nsys_kernels", sql, schema)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_kernels AS
        SELECT {rank} AS rank, device_id, stream_id, (global_pid >> 24) & {MASK_24} AS pid,
               start AS start_ns, "end" AS end_ns, coalesce(name, '') AS name, short_name,
               grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread,
               static_shared + dynamic_shared AS shared_memory_bytes, correlation_id,
               graph_node_id IS NOT NULL AND graph_node_id <> 0 AS graph_replay,
               graph_id, graph_node_id, NULL::BIGINT AS external_id
        FROM _nsys_kernels
        """
    )
    con.execute("DROP TABLE _nsys_kernels")
    db.add_short_names(con, "_stage_kernels")


def _common_gpu_columns(export: Export, table: str) -> str:
    return ", ".join(export.col(table, c) for c in ("deviceId", "streamId", "correlationId", "globalPid"))


def _read_memops(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    schema = _schema(
        kind=STR, start=I64, end=I64, device_id=I64, stream_id=I64, correlation_id=I64, global_pid=I64,
        bytes=I64, copy_kind=I64, src_kind=I64, dst_kind=I64,
    )
    parts = []
    memcpy, memset = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
    if export.has(memcpy, "start", "end"):
        parts.append(
            f"""SELECT 'memcpy', t.start, t."end", {_common_gpu_columns(export, memcpy)},
                       {export.col(memcpy, 'bytes')}, {export.col(memcpy, 'copyKind')},
                       {export.col(memcpy, 'srcKind')}, {export.col(memcpy, 'dstKind')} FROM {memcpy} t"""
        )
    if export.has(memset, "start", "end"):
        parts.append(
            f"""SELECT 'memset', t.start, t."end", {_common_gpu_columns(export, memset)},
                       {export.col(memset, 'bytes')}, NULL, NULL, {export.col(memset, 'memKind')} FROM {memset} t"""
        )
    sql = " UNION ALL ".join(parts) if parts else "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0"
    _stage(con, export, "_nsys_memops", sql, schema)
    con.register("_copy_kinds", pa.table({"id": list(COPY_KINDS), "label": list(COPY_KINDS.values())}))
    con.register("_mem_kinds", pa.table({"id": list(MEMORY_KINDS), "label": list(MEMORY_KINDS.values())}))
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_memops AS
        SELECT {rank} AS rank, m.kind, ck.label AS copy_kind, m.bytes, sk.label AS src_kind, dk.label AS dst_kind,
               m.device_id, m.stream_id, (m.global_pid >> 24) & {MASK_24} AS pid,
               m.start AS start_ns, m."end" AS end_ns, m.correlation_id,
               CASE WHEN m.kind = 'memcpy'
                    THEN 'Memcpy ' || coalesce(ck.label, '?') || ' (' || coalesce(sk.label, '?') || ' -> ' || coalesce(dk.label, '?') || ')'
                    ELSE 'Memset (' || coalesce(dk.label, '?') || ')' END AS name
        FROM _nsys_memops m
        LEFT JOIN _copy_kinds ck ON ck.id = m.copy_kind
        LEFT JOIN _mem_kinds sk ON sk.id = m.src_kind
        LEFT JOIN _mem_kinds dk ON dk.id = m.dst_kind
        """
    )
    con.unregister("_copy_kinds")
    con.unregister("_mem_kinds")
    con.execute("DROP TABLE _nsys_memops")


def _read_ranges(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "NVTX_EVENTS"
    schema = _schema(start=I64, end=I64, event_type=I64, text=STR, global_tid=I64, domain_id=I64)
    if export.has(table, "start", "eventType"):
        text = "coalesce(t.text, s.value)" if export.has(table, "textId") else "t.text"
        join = "LEFT JOIN StringIds s ON s.id = t.textId" if export.has(table, "textId") else ""
        types = ", ".join(str(t) for t in (*NVTX_RANGE_TYPES, NVTX_MARK_TYPE, NVTX_DOMAIN_CREATE))
        sql = f"""SELECT t.start, {export.col(table, 'end')}, t.eventType, {text}, t.globalTid,
                         {export.col(table, 'domainId')}
                  FROM {table} t {join} WHERE t.eventType IN ({types})"""
    else:
        sql = "SELECT " + ", ".join(["NULL"] * len(schema)) + " WHERE 0"
    _stage(con, export, "_nsys_nvtx", sql, schema)
    open_ranges = con.execute(
        f"SELECT count(*) FROM _nsys_nvtx WHERE event_type IN {NVTX_RANGE_TYPES} AND \"end\" IS NULL"
    ).fetchall()[0][0]
    if open_ranges:
        db.add_diagnostic(con, rank, "ingest", "info", "open_nvtx_ranges",
                          f"{open_ranges} NVTX ranges were still open when the capture ended; they end at the last event")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_ranges AS
        WITH nvtx AS (
            SELECT *, (global_tid >> 24) & {MASK_24} AS pid, global_tid & {MASK_24} AS tid FROM _nsys_nvtx
        ),
        domains AS (
            SELECT pid, domain_id, any_value(text) AS domain FROM nvtx
            WHERE event_type = {NVTX_DOMAIN_CREATE} GROUP BY ALL
        ),
        capture_end AS (SELECT greatest(max(start), max("end")) AS t FROM _nsys_nvtx)
        SELECT {rank} AS rank, n.pid, n.tid, coalesce(n.text, '') AS name,
               CASE WHEN n.event_type = {NVTX_MARK_TYPE} THEN 'nvtx_mark' ELSE 'nvtx' END AS kind,
               d.domain, n.start AS start_ns,
               CASE WHEN n.event_type = {NVTX_MARK_TYPE} THEN n.start
                    ELSE coalesce(n."end", (SELECT t FROM capture_end)) END AS end_ns,
               NULL::BIGINT AS external_id,
               nullif(regexp_extract(n.text, 'sizes = (\\[(\\[[^\\]]*\\](, )?)*\\])', 1), '') AS input_dims,
               NULL::VARCHAR AS input_types, NULL::DOUBLE AS flops
        FROM nvtx n LEFT JOIN domains d ON d.pid = n.pid AND d.domain_id = n.domain_id AND n.domain_id <> 0
        WHERE n.event_type <> {NVTX_DOMAIN_CREATE}
        """
    )
    con.execute("DROP TABLE _nsys_nvtx")


def _read_diagnostics(con: duckdb.DuckDBPyConnection, export: Export, rank: int) -> None:
    table = "DIAGNOSTIC_EVENT"
    if not export.has(table, "text"):
        return
    severity = "t.severity" if export.has(table, "severity") else "NULL"
    timestamp = "t.timestamp" if export.has(table, "timestamp") else "NULL"
    rows = export.conn.execute(f"SELECT {timestamp}, {severity}, t.text FROM {table} t").fetchall()
    db.insert_rows(con, "diagnostics", [
        [rank, "capture", DIAGNOSTIC_SEVERITIES.get(sev, "info"), "diagnostic_event", " ".join(str(text).split()), ts]
        for ts, sev, text in rows
    ])
