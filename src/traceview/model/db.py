"""The DuckDB database behind a trace: schema creation and the format-independent load steps.

Readers stage their rows in temporary tables named `_stage_<table>`, with the columns STAGING_TABLES declares
(the contract columns less ids, durations, depth and launch links); the functions here finish them the
same way for every format, so ids, range nesting and kernel-to-launch links never differ between formats.
"""

from __future__ import annotations

import contextvars
import enum
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Iterator

import duckdb

from traceview import memory

CONTRACT_TABLES = ("trace_info", "devices", "kernels", "memops", "api_calls", "ranges", "diagnostics")


class LaunchLink(enum.Enum):
    """What a kernel shares with the API call that launched it, besides the rank; each reader declares one."""

    PROCESS_AND_CORRELATION = "(pid, correlation id)"
    CORRELATION = "correlation id"


def schema_sql() -> str:
    return resources.files("traceview.model").joinpath("schema.sql").read_text()


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(schema_sql())


def plain(value: Any) -> Any:
    """JSON-ready values: DuckDB hands back Decimals for sums and nested lists/dicts for structs."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


def dict_rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    """Run a query and return its rows as JSON-ready dicts (what reports and audits hand around)."""
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [{n: plain(v) for n, v in zip(names, values)} for values in cursor.fetchall()]


Submit = Callable[..., Future]
ROW_GROUP_ROWS = 122_880  # DuckDB's row group: a scan is split into one task per row group


def side_by_side(con: duckdb.DuckDBPyConnection, *, stages: bool = False) -> int:
    """How many independent statements to run at once (report sections, the rules beside the report; with
    `stages`, analysis stages). DuckDB splits a statement's work by row group, so the per-kernel tables set how
    many cores one statement can use:
    - no event table fills one row group (the sample trace): each statement runs on one core, so every core
      runs one;
    - kernels and memops fill fewer than two row groups per core (the 10x vLLM trace's 138 k, the real vLLM
      H100 trace's 13.5 k beside 128 k host ranges): a statement over them leaves cores idle, and two at
      once fill them (the 10x trace's analysis, rules and report sections 4.45 -> 3.70 s, the real one's
      1.42 -> 0.98 s on two cores, each statement then on both);
    - more (the 2 M-kernel export's 17 row groups): a rule or report section is one statement that uses every
      core, and two at once contend for them and for the memory limit (its rules and report 6.46 -> 7.37 s),
      so one; but an analysis stage is a chain of statements, many of which leave a core idle (windows
      partitioned by rank or stream, ASOF joins on few keys), so stages still run two at a time (its analysis
      6.83 -> 6.26 s).
    Under a memory limit below what the analysis is estimated to hold (`memory.below_working_set`: a small
    container's, or the user's), one at a time whatever the size: two statements at once contend for the
    limit, and DuckDB then stops where one at a time completes (the 10x trace in a 400 MiB container, 144 MiB
    for DuckDB: out of memory once in three runs with two stages at a time). `fit_to_size` sizes DuckDB's
    threads for them."""
    cores = memory.cores()
    counts = EventCounts.of(con)
    limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    if memory.below_working_set(memory.setting_bytes(limit), counts.device_rows, counts.host_rows):
        return 1
    if counts.fit_row_group:
        return cores
    return min(2, cores) if stages or counts.device_rows < 2 * cores * ROW_GROUP_ROWS else 1


# Optimizers whose work pays only where there are rows to save work on (statistics to prune, compress and pick
# joins with, late materialization, partitioned execution, filters pushed between joins, plans rewritten to share
# or drop columns): on a trace that fits one row group each statement is planned in more time than it runs, and
# without these the sample trace's analysis takes 0.37 s instead of 0.42 s (one thread, medians of 7)
SMALL_TRACE_SKIPPED_OPTIMIZERS = (
    "aggregate_function_rewriter", "aggregate_reuse", "common_aggregate", "common_subexpressions",
    "common_subplan", "cte_filter_pusher", "duplicate_groups", "filter_pullup", "join_elimination",
    "join_filter_pushdown", "late_materialization", "partial_aggregate_pushdown", "partitioned_execution",
    "projection_placement", "projection_pullup", "regex_range", "reorder_filter", "row_group_pruner",
    "sampling_pushdown", "scalar_fn_pushdown", "self_join_aggregate", "statistics_propagation",
    "top_n_window_elimination", "type_pushdown", "window_self_join",
)


def fit_to_size(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB's threads and optimizers for the trace's size. A statement over fewer row groups than it has threads
    hands its work around more than it splits it (DuckDB parallelises by row group), so:
    - no event table fills one row group (the sample trace): one thread, every core one statement (its analysis
      0.35 -> 0.31 s), and the optimizers that pay only on many rows are skipped
      (SMALL_TRACE_SKIPPED_OPTIMIZERS; those this DuckDB does not have are left out);
    - the statements at once share the cores (`shares_cores`: the 10x vLLM trace): the cores over their number
      (`share_cores`);
    - one statement at a time (the 2 M-kernel export's rules and sections, a small memory limit): every core."""
    if EventCounts.of(con).fit_row_group:
        con.execute("SET threads = 1")
        known = {name for (name,) in con.execute("SELECT name FROM duckdb_optimizers()").fetchall()}
        skipped = [name for name in SMALL_TRACE_SKIPPED_OPTIMIZERS if name in known]
        con.execute("SET disabled_optimizers = $names", {"names": ",".join(skipped)})
    elif (at_once := side_by_side(con)) > 1:  # shares_cores, its counts read once
        share_cores(con, at_once)


def shares_cores(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the statements that run side by side share the cores, each on the cores over their number rather
    than every statement on every core: where a statement can split (some event table fills a row group) but
    kernels and memops fill fewer than two row groups per core, so two run at a time (`side_by_side`). On two
    cores, the 10x vLLM trace's analysis, rules and sections in-process took 3.52 -> 3.24 s and 6.38 -> 5.68 CPU s
    with one thread each, the real vLLM H100 trace's 1.26 -> 1.10 s (medians of 6 in turns). The 2 M-kernel
    export's stages, two at a time over 17 row groups, were slower on one thread each (7.15 -> 8.43 s), so
    where one rule or section runs at a time the statements keep every core."""
    return not EventCounts.of(con).fit_row_group and side_by_side(con) > 1


def share_cores(con: duckdb.DuckDBPyConnection, statements: int) -> None:
    """Give DuckDB the cores over the statements running at once as threads (at least one)."""
    con.execute("SET threads = $threads", {"threads": max(1, memory.cores() // statements)})


def table_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """The bytes DuckDB holds for its tables, in memory and spilled to disk."""
    return con.execute("""SELECT coalesce(sum(memory_usage_bytes + temporary_storage_bytes), 0)::BIGINT
                          FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'""").fetchall()[0][0]


@dataclass(frozen=True)
class EventCounts:
    """The rows of the event tables, which size the memory limit and how many statements run at once."""

    kernels: int
    memops: int
    api_calls: int
    ranges: int

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> EventCounts:
        return cls(*con.execute("""
            SELECT (SELECT count(*) FROM kernels), (SELECT count(*) FROM memops),
                   (SELECT count(*) FROM api_calls), (SELECT count(*) FROM ranges)""").fetchall()[0])

    @property
    def device_rows(self) -> int:
        return self.kernels + self.memops

    @property
    def host_rows(self) -> int:
        return self.api_calls + self.ranges

    @property
    def fit_row_group(self) -> bool:
        """No event table fills one of DuckDB's row groups: a statement has nothing to split across threads."""
        return max(self.kernels, self.api_calls, self.ranges) < ROW_GROUP_ROWS


@contextmanager
def cursor_pool(con: duckdb.DuckDBPyConnection, threads: int) -> Iterator[Submit]:
    """`submit(fn, *args)` runs `fn(cursor, *args)` on one of `threads` threads, each with a cursor of its own
    (a connection serves one thread at a time), in a copy of the submitter's context so that --profile sees
    its steps. DuckDB releases the GIL while it works, so small statements, which DuckDB runs on one core,
    run side by side. With one thread the jobs run here, on `con`, as they are submitted. Leaving the block
    waits for every job; leaving it on an error or a Ctrl-C first interrupts the running statements and
    drops the jobs not started, so no thread is still inside DuckDB when the process exits."""
    if threads <= 1:
        def inline(fn: Callable, *args: Any) -> Future:
            future: Future = Future()
            future.set_result(fn(con, *args))
            return future

        yield inline
        return
    local = threading.local()
    cursors: list[duckdb.DuckDBPyConnection] = []

    def call(fn: Callable, scope: contextvars.Context, args: tuple) -> Any:
        if not hasattr(local, "cursor"):
            local.cursor = con.cursor()
            cursors.append(local.cursor)
        return scope.run(fn, local.cursor, *args)

    pool = ThreadPoolExecutor(threads)
    try:
        yield lambda fn, *args: pool.submit(call, fn, contextvars.copy_context(), args)
        pool.shutdown(wait=True)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for cursor in list(cursors):
            cursor.interrupt()
        pool.shutdown(wait=True)
        raise
    finally:
        for cursor in cursors:
            cursor.close()


_scratch_lock = threading.Lock()


@lru_cache(maxsize=1)
def _scratch_database() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def scratch() -> duckdb.DuckDBPyConnection:
    """A new connection (its own temp objects) to one private in-memory database, for checking SQL and
    regexes before a trace runs them: opening a database costs 12-18 ms, connecting to an open one nothing.
    Stages that start together ask at once: the lock opens it once."""
    with _scratch_lock:
        return _scratch_database().cursor()


def columns_of(con: duckdb.DuckDBPyConnection, table: str) -> list[str] | None:
    """The columns of a table or view on the search path, or None where there is none of that name.

    A catalog lookup, not a query of information_schema: that view lists every column of every
    relation, about 1 ms a call, and the rules and stages ask some sixty times a report."""
    try:
        return con.table(table).columns
    except duckdb.CatalogException:
        return None


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?")


def ident(name: str) -> str:
    """A table or column name for SQL text, checked to be one: the only thing Python may splice into a
    statement besides SQL fragments (`*_sql`); every value is a bound parameter (tests/test_sql_text.py)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"not an SQL identifier: {name!r}")
    return name


def idents(names) -> str:
    """Several names, comma-separated, each checked by `ident`."""
    return ", ".join(ident(name) for name in names)


def has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether a table or view of that name exists (analysis relations exist only after analysis)."""
    return columns_of(con, table) is not None


def has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """Whether an analysis step already added `column` (analyses run in any subset)."""
    return column in (columns_of(con, table) or ())


@lru_cache(maxsize=None)
def contract_columns(table: str) -> tuple[str, ...]:
    """The columns schema.sql gives `table`: what ingest writes, before any analysis joins facts on."""
    body = schema_sql().split(f"CREATE TABLE {ident(table)} (", 1)[1].split("\n);", 1)[0]
    return tuple(line.split()[0] for line in body.splitlines() if line.strip() and not line.strip().startswith("--"))


SCHEMA_COLUMN = re.compile(r"^\s+(\w+) (\w+(?:\(\d+(?:,\d+)?\))?),?\s*--\s*(.+)$")


@lru_cache(maxsize=None)
def contract_column_specs(table: str) -> dict[str, tuple[str, str]]:
    """Each column of `table` with the DuckDB type and meaning schema.sql gives it, so that the staging
    contract and docs/schema.md state them once."""
    body = schema_sql().split(f"CREATE TABLE {ident(table)} (", 1)[1].split("\n);", 1)[0]
    return {m.group(1): (m.group(2), m.group(3)) for line in body.splitlines() if (m := SCHEMA_COLUMN.match(line))}


INSERT_BATCH = 1000


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[list]) -> None:
    """Insert small metadata rows (devices, diagnostics, patterns); never used for events. One statement per
    thousand rows, with their parameters: executemany runs a statement per row (1 ms each)."""
    for start in range(0, len(rows), INSERT_BATCH):
        batch = rows[start:start + INSERT_BATCH]
        row_sql = f"({', '.join('?' * len(batch[0]))})"
        rows_sql = ", ".join([row_sql] * len(batch))
        con.execute(f"INSERT INTO {ident(table)} VALUES {rows_sql}", [v for r in batch for v in r])


def values_sql(columns: dict[str, str], rows: list[tuple]) -> tuple[str, dict[str, list]]:
    """A SELECT of Python values (a name map, the hardware specs) and its parameters: rows as tuples in the
    order of `columns` (name -> DuckDB type), one list parameter a column, so no pyarrow: importing it is a
    fiftieth of a small report's wall time."""
    lists = [list(column) for column in zip(*rows)] if rows else [[] for _ in columns]
    selects_sql = ", ".join(f"unnest($c{i}::{kind}[]) AS {ident(column)}"
                            for i, (column, kind) in enumerate(columns.items()))
    return f"SELECT {selects_sql}", {f"c{i}": values for i, values in enumerate(lists)}


def create_values_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, str], rows: list[tuple],
                        temporary: bool = False) -> None:
    """values_sql stored as the table `name` (the hardware spec tables)."""
    select_sql, params = values_sql(columns, rows)
    temp_sql = "TEMP " if temporary else ""
    con.execute(f"CREATE OR REPLACE {temp_sql}TABLE {ident(name)} AS {select_sql}", params)


@contextmanager
def values_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, str],
                 rows: list[tuple]) -> Iterator[str]:
    """values_sql as the TEMP table `name`, dropped on leaving (for statements that join it)."""
    create_values_table(con, name, columns, rows, temporary=True)
    try:
        yield name
    finally:
        con.execute(f"DROP TABLE IF EXISTS {ident(name)}")


def add_diagnostic(
    con: duckdb.DuckDBPyConnection, rank: int, source: str, severity: str, code: str, message: str
) -> None:
    con.execute(
        "INSERT INTO diagnostics VALUES (?, ?, ?, ?, ?, NULL)", [rank, source, severity, code, message]
    )


@dataclass(frozen=True)
class StagedColumn:
    name: str
    type: str  # a schema.sql type; a staged column of any type it takes passes (see TAKES)
    meaning: str


@dataclass(frozen=True)
class StagingTable:
    """One table a reader must create, `_stage_<table>`: what finish_stages reads to fill `table`."""

    table: str
    columns: tuple[StagedColumn, ...]

    @property
    def name(self) -> str:
        return f"_stage_{self.table}"

    def finished(self) -> tuple[str, ...]:
        """The contract columns no reader stages: finishing fills them (ids, durations, depth, launch links)."""
        staged = {column.name for column in self.columns}
        return tuple(column for column in contract_column_specs(self.table) if column not in staged)


def _staging(table: str, columns: str, **own: str | tuple[str, str]) -> StagingTable:
    """A staging table of `columns`, each typed and explained by its contract column in schema.sql; `own` gives a
    column's meaning where the staged value differs from the finished one, or (type, meaning) for a column
    that only staging has."""
    specs = contract_column_specs(table)
    staged = []
    for name in columns.split():
        given = own.get(name)
        kind, meaning = given if isinstance(given, tuple) else specs[name]
        staged.append(StagedColumn(name, kind, given if isinstance(given, str) else meaning))
    return StagingTable(table, tuple(staged))


# What every reader must stage: a test drops each column in turn and sees finish_stages fail without it.
STAGING_TABLES = (
    _staging("api_calls", "rank pid tid name api start_ns end_ns correlation_id external_id",
           name="API name as the trace spells it; finishing drops an nsys '_vNNNN' version suffix"),
    _staging("kernels", "rank device_id stream_id pid start_ns end_ns name short_name grid_x grid_y grid_z block_x "
                      "block_y block_z registers_per_thread shared_memory_bytes correlation_id graph_replay graph_id "
                      "graph_node_id external_id",
           pid="process the trace files it under, or NULL (a Kineto kernel's row is the GPU's); finishing takes "
               "the launch call's pid where one matches",
           short_name="base name as in `kernels`, or NULL for add_short_names(con, '_stage_kernels') to fill from "
                      "name before read returns (finishing does not)",
           graph_replay=("BOOLEAN", ("the trace marks it replayed from a graph (a graph node id, ROCm 'Dispatch "
                                     "Task'); finishing makes its launch_kind 'graph', as it does for a graph launch "
                                     "call's"))),
    _staging("memops", "rank kind copy_kind bytes src_kind dst_kind device_id stream_id pid start_ns end_ns "
                     "correlation_id name"),
    _staging("ranges", "rank pid tid name kind domain start_ns end_ns external_id input_dims input_types input_values "
                     "flops"),
)
INTEGERS = frozenset({"tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger",
                      "ubigint", "uhugeint"})
# the DuckDB type ids a declared type takes: finishing inserts with implicit casts, so any integer fills an
# INTEGER column (a value out of range fails there, as a value); an all-NULL column ("NULL") fits any
TAKES = {"INTEGER": INTEGERS, "BIGINT": INTEGERS, "DOUBLE": INTEGERS | {"float", "double", "decimal"},
         "VARCHAR": frozenset({"varchar"}), "BOOLEAN": frozenset({"boolean"})}


def create_staging_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Every staging table, empty: a reader whose format has no rows of some tables (a kernel list has no API
    calls) creates them all and fills those it has."""
    for stage in STAGING_TABLES:
        columns_sql = ", ".join(f"{ident(column.name)} {column.type}" for column in stage.columns)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {ident(stage.name)} ({columns_sql})")


def staging_problems(con: duckdb.DuckDBPyConnection) -> list[str]:
    """How the staged tables break STAGING_TABLES: a missing table or column, or a column of a type its declared
    one cannot take. Catalog lookups only (no scan), so every file is checked. Extra columns are ignored."""
    problems = []
    for stage in STAGING_TABLES:
        try:
            relation = con.table(stage.name)
        except duckdb.CatalogException:
            problems.append(f"no table {stage.name}")
            continue
        staged = dict(zip(relation.columns, relation.types))
        for column in stage.columns:
            kind = staged.get(column.name)
            if kind is None:
                problems.append(f"{stage.name} has no column {column.name} ({column.type})")
            elif kind.id != "null" and kind.id not in TAKES[column.type]:
                problems.append(f"{stage.name}.{column.name} is {kind}, not {column.type}")
    return problems


def numbered_rows_sql(table: str, order_sql: str) -> str:
    """SQL: each row of `table` (`row`, its rowid) with its number (`id`, from 0) in `order_sql`. Only the rowids
    are sorted, so long names are compared but not carried (sorting whole rows doubled peak memory), and the
    numbers stream over the sort's output (an empty OVER): a window ordered by the same keys sorts and then walks
    again (the 10x vLLM trace's 1.3 M ranges: 0.19 -> 0.09 s)."""
    return (f"SELECT row, row_number() OVER () - 1 AS id "
            f"FROM (SELECT rowid AS row FROM {ident(table)} ORDER BY {order_sql})")


def finish_api_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Move staged API calls into api_calls, naming them without the nsys `_vNNNN` suffix.

    Only suffixes of four or more digits are CUDA-version tags; `cudaStreamGetCaptureInfo_v2` is
    the API's own name and keeps its `_v2`.
    """
    con.execute(
        rf"""
        INSERT INTO api_calls
        WITH names AS (
            -- name rules run once per distinct API name, not once per call
            SELECT name, clean_name,
                   (clean_name GLOB '*Launch*' AND NOT clean_name GLOB '*LaunchHostFunc*') AS is_launch,
                   (clean_name GLOB '*Synchronize*'
                     OR (clean_name GLOB '*Memcpy*' AND NOT clean_name GLOB '*Async*')) AS is_sync
            FROM (SELECT name, regexp_replace(name, '_v[0-9]{{4,}}$', '') AS clean_name
                  FROM (SELECT DISTINCT name FROM _stage_api_calls))
        ),
        ids AS ({numbered_rows_sql("_stage_api_calls", "start_ns, end_ns, pid, tid, correlation_id, name")})
        SELECT rank, ids.id, pid, tid, clean_name, api, start_ns, end_ns, end_ns - start_ns, correlation_id,
               is_launch, is_sync, external_id
        FROM _stage_api_calls a
        JOIN ids ON ids.row = a.rowid
        JOIN names n ON n.name IS NOT DISTINCT FROM a.name
        """
    )


def finish_kernels(con: duckdb.DuckDBPyConnection, link: LaunchLink) -> None:
    """Move staged kernels into kernels, each linked to its launch call as the reader's `link` says.

    A kernel's pid becomes the launching call's pid where one is found (a reader may stage the GPU's).
    """
    pid_match_sql = "AND a.pid = k.pid" if link is LaunchLink.PROCESS_AND_CORRELATION else ""
    con.execute(
        f"""
        INSERT INTO kernels
        WITH launches AS (
            -- the first launch call of each correlation id (an aggregate: cheaper than a window), its thread and
            -- name joined back by id: carrying them through the aggregate as a struct cost more than the join
            SELECT l.rank, l.pid, l.correlation_id, a.tid, a.name, l.call_id
            FROM (SELECT rank, pid, correlation_id, arg_min(call_id, start_ns) AS call_id
                  FROM api_calls WHERE correlation_id IS NOT NULL AND is_launch
                  GROUP BY rank, pid, correlation_id) l
            JOIN api_calls a ON a.rank = l.rank AND a.call_id = l.call_id
        ),
        ids AS (
            {numbered_rows_sql("_stage_kernels", "start_ns, end_ns, device_id, stream_id, correlation_id, name")}
        )
        SELECT k.rank, ids.id,
               k.device_id, k.stream_id, coalesce(a.pid, k.pid), a.tid,
               k.start_ns, k.end_ns, k.end_ns - k.start_ns, k.name, k.short_name,
               k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
               k.registers_per_thread, k.shared_memory_bytes, k.correlation_id,
               CASE WHEN a.name GLOB '*GraphLaunch*' OR k.graph_replay THEN 'graph' ELSE 'eager' END,
               a.name, a.call_id, k.graph_id, k.graph_node_id, k.external_id
        FROM _stage_kernels k
        JOIN ids ON ids.row = k.rowid
        LEFT JOIN launches a
          ON a.rank = k.rank AND a.correlation_id = k.correlation_id {pid_match_sql}
        """
    )


def finish_memops(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """
        INSERT INTO memops
        SELECT rank,
               row_number() OVER (ORDER BY start_ns, end_ns, device_id, stream_id, correlation_id, kind) - 1,
               kind, copy_kind, bytes, src_kind, dst_kind, device_id, stream_id, pid,
               start_ns, end_ns, end_ns - start_ns, correlation_id, name
        FROM _stage_memops
        """
    )


def finish_ranges(con: duckdb.DuckDBPyConnection) -> None:
    """Move staged ranges into ranges with their nesting depth, computed as a running count.

    Each range opens (+1) at its start and closes (-1) at its end; the depth of a range is the
    number of ranges of its kind open on its thread just before it opens. Ends sort before
    starts at the same instant (back-to-back ranges are siblings), a zero-length range closes
    after it opens, and of two ranges opening together the longer one is the parent.
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _range_ids AS
        SELECT row, id AS range_id
        FROM ({numbered_rows_sql("_stage_ranges", "start_ns, end_ns DESC, kind, name, pid, tid")})
        """
    )
    con.execute(
        """
        INSERT INTO ranges
        WITH kinds AS (SELECT list(DISTINCT kind) AS kinds FROM _stage_ranges),
        numbered AS (
            -- ids and the nesting keys only: the names and shapes join back at the end; the kind as its
            -- place in the trace's list of kinds, so that the sort below compares integers, not strings
            SELECT i.row, r.rank, i.range_id, r.pid, r.tid, list_position(k.kinds, r.kind) AS kind, r.start_ns, r.end_ns
            FROM _stage_ranges r JOIN _range_ids i ON i.row = r.rowid, kinds k
        ),
        lanes AS (  -- each (rank, pid, tid, kind) numbered, so that one integer sorts as the four would
            SELECT rank, pid, tid, kind, row_number() OVER () AS lane
            FROM (SELECT DISTINCT rank, pid, tid, kind FROM numbered)
        ),
        edges AS (
            -- the sort key packed in one HUGEINT: the lane, the instant (shifted to be unsigned) and `ord` (ends
            -- before starts at one instant, a zero-length range's end after them); among starts at one instant
            -- the range id orders the longer first, as it is numbered by (start, end descending)
            SELECT n.row, n.range_id, (l.lane::HUGEINT << 66) AS lane_key, n.start_ns, n.end_ns
            FROM numbered n JOIN lanes l
              ON l.rank = n.rank AND l.pid IS NOT DISTINCT FROM n.pid AND l.tid IS NOT DISTINCT FROM n.tid
             AND l.kind = n.kind
        ),
        depths AS (
            -- every range opens and closes on its own lane, so the deltas of each lane sum to zero and one
            -- running sum over all lanes in order equals the per-lane one. The sort runs on every core and the
            -- sum streams over its order (an empty OVER): a sorted window over eight keys took half as long again.
            -- Each edge carries its staged row, so the names and shapes join back once, by row, with the depth
            SELECT row, range_id, depth
            FROM (SELECT row, range_id, delta, sum(delta) OVER (ROWS UNBOUNDED PRECEDING) - 1 AS depth
                  FROM (SELECT row, range_id,
                               lane_key + ((start_ns::HUGEINT + 9223372036854775808) << 2) + 1 AS edge, 1 AS delta
                        FROM edges
                        UNION ALL
                        SELECT row, range_id, lane_key + ((end_ns::HUGEINT + 9223372036854775808) << 2)
                                             + CASE WHEN end_ns = start_ns THEN 2 ELSE 0 END, -1
                        FROM edges
                        ORDER BY edge, range_id))
            WHERE delta = 1
        )
        SELECT r.rank, d.range_id, r.pid, r.tid, r.name, r.kind, r.domain, r.start_ns, r.end_ns,
               r.end_ns - r.start_ns, d.depth, r.external_id, r.input_dims, r.input_types, r.input_values, r.flops
        FROM _stage_ranges r
        JOIN depths d ON d.row = r.rowid
        """
    )
    con.execute("DROP TABLE _range_ids")


def finish_trace_span(con: duckdb.DuckDBPyConnection, rank: int) -> None:
    """Record the rank's time span over every timed table."""
    con.execute(
        """
        UPDATE trace_info SET start_ns = s.lo, end_ns = s.hi
        FROM (
            SELECT min(lo) AS lo, max(hi) AS hi FROM (
                SELECT min(start_ns) lo, max(end_ns) hi FROM kernels WHERE rank = $rank
                UNION ALL SELECT min(start_ns), max(end_ns) FROM memops WHERE rank = $rank
                UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls WHERE rank = $rank
                UNION ALL SELECT min(start_ns), max(end_ns) FROM ranges WHERE rank = $rank
            )
        ) s
        WHERE trace_info.rank = $rank
        """,
        {"rank": rank},
    )


def drop_stages(con: duckdb.DuckDBPyConnection) -> None:
    for stage in STAGING_TABLES:
        con.execute(f"DROP TABLE IF EXISTS {ident(stage.name)}")


# No real event lasts 11 days or ends after 2096 (epoch ns); such values are corrupt and would overflow sums.
MAX_EVENT_NS = 10**15
MAX_TIMESTAMP_NS = 4 * 10**18


def drop_implausible_times(con: duckdb.DuckDBPyConnection, rank: int) -> None:
    """Drop staged events whose times cannot be real, and say how many in diagnostics."""
    dropped = 0
    condition_sql = "abs(start_ns) > $max_timestamp OR abs(end_ns) > $max_timestamp OR end_ns - start_ns > $max_event"
    limits = {"max_timestamp": MAX_TIMESTAMP_NS, "max_event": MAX_EVENT_NS}
    for stage in STAGING_TABLES:
        dropped += con.execute(f"SELECT count(*) FROM {ident(stage.name)} WHERE {condition_sql}",
                               limits).fetchall()[0][0]
        con.execute(f"DELETE FROM {ident(stage.name)} WHERE {condition_sql}", limits)
    if dropped:
        add_diagnostic(con, rank, "ingest", "warning", "implausible_times",
                       f"{dropped} events with impossible timestamps or durations (over 11 days, or past year 2096) were dropped")


def finish_stages(con: duckdb.DuckDBPyConnection, rank: int, link: LaunchLink) -> None:
    """Run every format-independent load step for one rank, then drop the stages.

    The stages hold one rank, so ids are numbered with a plain ORDER BY: a window partitioned by
    a single rank sorts on one thread, the unpartitioned one in parallel (2.8 s -> 1.3 s, 2M kernels)."""
    drop_implausible_times(con, rank)
    finish_api_calls(con)
    finish_kernels(con, link)
    finish_memops(con)
    finish_ranges(con)
    unmatched = con.execute(
        "SELECT count(*) FROM kernels WHERE rank = ? AND launch_api IS NULL", [rank]
    ).fetchall()[0][0]
    if unmatched:
        add_diagnostic(
            con, rank, "ingest", "warning", "unmatched_kernels",
            f"{unmatched} kernels have no matching launch call in the trace (tid and launch_api are NULL)",
        )
    finish_trace_span(con, rank)
    drop_stages(con)


_TEMPLATE_OR_PARAMS = {")": "(", ">": "<"}


def _strip_balanced_suffix(name: str, close: str) -> str:
    """Drop a trailing balanced `(...)` or `<...>` group."""
    if not name.endswith(close):
        return name
    opener, depth = _TEMPLATE_OR_PARAMS[close], 0
    for i in range(len(name) - 1, -1, -1):
        if name[i] == close:
            depth += 1
        elif name[i] == opener:
            depth -= 1
            if depth == 0:
                return name[:i].rstrip()
    return name


def _split_top_level(name: str, sep: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(name):
        ch = name[i]
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif depth == 0 and name.startswith(sep, i):
            parts.append(name[start:i])
            start = i + len(sep)
            i += len(sep)
            continue
        i += 1
    parts.append(name[start:])
    return parts


def short_kernel_name(name: str) -> str:
    """The base function name of a demangled kernel name, as nsys's shortName gives it.

    `void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)` becomes
    `vectorized_elementwise_kernel`; names that are already short stay as they are.
    """
    if not name:
        return name
    base = name.strip()
    for close in (")", ">", ")", ">"):
        base = _strip_balanced_suffix(base, close)
    base = _split_top_level(base, "::")[-1].strip()
    words = _split_top_level(base, " ")
    base = words[-1] if words else base
    return base or name


def add_short_names(con: duckdb.DuckDBPyConnection, stage: str) -> None:
    """Fill short_name of a staged kernel table from its distinct names (one Python call per name, not per event)."""
    names = [row[0] for row in
             con.execute(f"SELECT DISTINCT name FROM {ident(stage)} WHERE short_name IS NULL").fetchall()]
    if not names:
        return
    with values_table(con, "_short_names", {"name": "VARCHAR", "short_name": "VARCHAR"},
                      [(name, short_kernel_name(name or "")) for name in names]):
        con.execute(
            f"UPDATE {ident(stage)} SET short_name = s.short_name FROM _short_names s "
            f"WHERE {ident(stage)}.short_name IS NULL AND {ident(stage)}.name = s.name"
        )
