"""Chrome trace-event JSON (what Perfetto's UI and chrome://tracing open), built from the schema alone.

Every input format lands in the same tables, so an nsys export opens in Perfetto the same way a
Kineto trace does. Processes are host processes and GPUs, threads are host threads and GPU streams;
kernels, copies, API calls and ranges are `X` slices on them, launch calls point at their kernels
with flow events, and steps and findings get a `traceview` process of their own (docs/export.md).

The JSON is written in chunks straight from DuckDB queries: memory stays bounded by one chunk, never
by the number of events. `ts`/`dur` are microseconds since the trace's first event, with three
decimals, so they are exact to the nanosecond; every event's args keep the schema's integer ns too.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import duckdb

from traceview.errors import TraceviewError
from traceview.model.db import dict_rows, ident

CHUNK_EVENTS = 100_000  # events rendered per query: the bound on the writer's memory
GZIP_LEVEL = 6
# host thread tracks by range kind: kinds that nest with API calls share the thread's own track
THREAD_KIND = {"python_function": "python", "nvtx": "nvtx", "nvtx_mark": "nvtx", "gpu_user_annotation": "annotations"}
# tracks on which slices nest (a CPU op holds its launch calls); GPU streams and steps never nest
NESTING_TRACKS = ("thread", "python", "nvtx", "annotations", "findings")

# `ts`/`dur` text: µs with up to three decimals (exact ns), for any sign
_MACROS = r"""
CREATE OR REPLACE TEMP MACRO _ct_abs_us(ns) AS
    CASE WHEN ns % 1000 = 0 THEN (ns // 1000)::VARCHAR
         ELSE (ns // 1000)::VARCHAR || '.' || rtrim(lpad((ns % 1000)::VARCHAR, 3, '0'), '0') END;
CREATE OR REPLACE TEMP MACRO _ct_us(ns) AS
    CASE WHEN ns < 0 THEN '-' || _ct_abs_us(-ns) ELSE _ct_abs_us(ns) END;
CREATE OR REPLACE TEMP MACRO _ct_str(s) AS to_json(regexp_replace(coalesce(s, ''), '[\x00-\x1f]', ' ', 'g'))::VARCHAR;
CREATE OR REPLACE TEMP MACRO _ct_args(obj) AS json_merge_patch('{}', obj)::VARCHAR;
"""


@dataclass(frozen=True)
class ExportSummary:
    """What one export wrote: event counts by kind, and the time zero of its `ts`."""

    events: int
    kernels: int
    memops: int
    flows: int
    findings: int
    origin_ns: int


def write_chrome_trace(con: duckdb.DuckDBPyConnection, findings: Sequence[dict[str, Any]], target: Path,
                       *, version: str) -> ExportSummary:
    """Write the analysed trace in `con` and its findings to `target` (.gz: gzip). The findings are Finding
    dicts with their `window`, as `report.finding_windows` gives them (the report's findings are the same)."""
    con.execute(_MACROS)
    try:
        _stage_findings(con, findings)
        _build_slices(con)
        _assign_lanes(con)
        _build_tracks(con)
        _build_flows(con)
        origin_ns = con.execute("SELECT coalesce(min(start_ns), 0) FROM _ct_slices").fetchall()[0][0]
        with _output(target) as out:
            out.write('{"traceEvents":[\n')
            events = _write_events(con, out, origin_ns)
            out.write("\n],\n" + '"otherData":' + json.dumps(_other_data(con, origin_ns, version), sort_keys=True)
                      + "}\n")
        kernels, memops, drawn = con.execute("""
            SELECT count(*) FILTER (WHERE source = 'kernel'), count(*) FILTER (WHERE source = 'memop'),
                   count(*) FILTER (WHERE source = 'finding')
            FROM _ct_slices""").fetchall()[0]
        flows = con.execute("SELECT count(*) FROM _ct_flows").fetchall()[0][0]
        return ExportSummary(events, kernels, memops, flows, drawn, origin_ns)
    finally:
        for table in ("_ct_raw", "_ct_slices", "_ct_groups", "_ct_tracks", "_ct_findings", "_ct_flows",
                      "_ct_roofline", "_ct_dirty", "_ct_checked", "_ct_flagged", "_ct_depths"):
            con.execute(f"DROP TABLE IF EXISTS {ident(table)}")
        for macro in ("_ct_us", "_ct_abs_us", "_ct_str", "_ct_args"):
            con.execute(f"DROP MACRO IF EXISTS {ident(macro)}")


def _build_slices(con: duckdb.DuckDBPyConnection) -> None:
    """Every timed row as a slice on its track group (a process's thread or stream), ids in start order."""
    thread_kind_sql = " ".join(f"WHEN $kind_{i} THEN $track_{i}" for i in range(len(THREAD_KIND)))
    tracks = {**{f"kind_{i}": kind for i, kind in enumerate(THREAD_KIND)},
              **{f"track_{i}": track for i, track in enumerate(THREAD_KIND.values())}}
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _ct_raw AS
        SELECT 'kernel' AS source, rank, kernel_id AS source_id, 'gpu' AS process_kind, rank AS process_rank,
               coalesce(device_id, -1) AS process_id, 'stream' AS thread_kind, coalesce(stream_id, -1) AS thread_id,
               start_ns, end_ns
        FROM kernels
        UNION ALL
        SELECT 'memop', rank, memop_id, 'gpu', rank, coalesce(device_id, -1), 'stream', coalesce(stream_id, -1),
               start_ns, end_ns
        FROM memops
        UNION ALL
        SELECT 'api_call', rank, call_id, 'host', rank, coalesce(pid, -1), 'thread', coalesce(tid, -1), start_ns, end_ns
        FROM api_calls
        UNION ALL
        SELECT CASE WHEN kind = 'nvtx_mark' THEN 'mark' ELSE 'range' END, rank, range_id,
               CASE WHEN kind = 'gpu_user_annotation' THEN 'gpu' ELSE 'host' END, rank, coalesce(pid, -1),
               CASE kind {thread_kind_sql} ELSE 'thread' END, coalesce(tid, -1), start_ns, end_ns
        FROM ranges
        UNION ALL
        SELECT 'step', rank, step_id, 'traceview', -1, 0, 'steps', rank, start_ns, end_ns
        FROM steps
        UNION ALL
        SELECT 'finding', rank, finding_id, 'traceview', -1, 0, 'findings', -1, start_ns, end_ns
        FROM _ct_findings
    """, tracks)
    # ids in start order, the longer of two slices that start together first (the parent); a negative
    # duration is drawn as zero
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ct_groups AS
        SELECT row_number() OVER (ORDER BY process_kind, process_rank, process_id, thread_kind, thread_id) AS group_id,
               process_kind, process_rank, process_id, thread_kind, thread_id,
               list_contains($nesting_tracks, thread_kind) AS nests
        FROM (SELECT DISTINCT process_kind, process_rank, process_id, thread_kind, thread_id FROM _ct_raw)
    """, {"nesting_tracks": list(NESTING_TRACKS)})
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ct_slices AS
        SELECT row_number() OVER (ORDER BY r.start_ns, CASE WHEN r.end_ns < r.start_ns THEN r.start_ns ELSE r.end_ns END DESC, r.source, r.rank,
                                           r.source_id) AS slice_id,
               r.source, r.rank, r.source_id, g.group_id, g.nests, 0 AS lane,
               r.start_ns, CASE WHEN r.end_ns < r.start_ns THEN r.start_ns ELSE r.end_ns END AS end_ns
        FROM _ct_raw r
        JOIN _ct_groups g USING (process_kind, process_rank, process_id, thread_kind, thread_id)
        WHERE r.start_ns IS NOT NULL AND r.end_ns IS NOT NULL
    """)
    con.execute("DROP TABLE _ct_raw")


def _stage_findings(con: duckdb.DuckDBPyConnection, findings: Sequence[dict[str, Any]]) -> None:
    """Each finding with the span it is drawn over: its window, or its rank's whole capture when it has none."""
    rows = []
    for index, finding in enumerate(findings):
        window = finding.get("window")
        span = window or _rank_span(con, finding)
        args = {key: finding.get(key) for key in ("rule", "name", "severity", "title", "message",
                                                   "estimated_saving_ns", "share_pct", "fix", "doc")}
        args["window"] = window
        rows.append((index, span["rank"] if span else 0, span["start_ns"] if span else None,
                     span["end_ns"] if span else None, f"{finding.get('rule')} {finding.get('title')}",
                     json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)))
    con.execute("CREATE OR REPLACE TEMP TABLE _ct_findings (finding_id BIGINT, rank INTEGER, start_ns BIGINT, "
                "end_ns BIGINT, name VARCHAR, args VARCHAR)")
    if rows:
        con.executemany("INSERT INTO _ct_findings VALUES (?, ?, ?, ?, ?, ?)", rows)


def _rank_span(con: duckdb.DuckDBPyConnection, finding: dict[str, Any]) -> dict[str, Any] | None:
    """A finding without a window covers its rank's whole capture (the lowest rank when it names none)."""
    rank = (finding.get("evidence") or {}).get("rank")
    rows = dict_rows(con, """
        SELECT rank, NULL AS step_id, start_ns, end_ns FROM trace_info
        WHERE start_ns IS NOT NULL AND (rank = ? OR ? IS NULL) ORDER BY rank LIMIT 1""", [rank, rank])
    return rows[0] if rows else None


def _assign_lanes(con: duckdb.DuckDBPyConnection) -> None:
    """Move slices that would break a track's nesting onto extra lanes (tracks of their own).

    The format only draws slices that nest perfectly on a thread; Perfetto drops the rest. On a nesting
    track a slice must end within its parent (the innermost open slice, found from the running count of
    open slices); on a stream or the steps track slices must not overlap at all. Each pass moves the
    offenders of every lane one lane up and rechecks the groups that had any, until none are left.
    Every slice stays in the file.
    """
    con.execute("CREATE OR REPLACE TEMP TABLE _ct_dirty AS SELECT group_id FROM _ct_groups")
    while True:  # ends: a slice only moves up, and a slice alone on its lane is never moved
        # each step materialised: as one statement DuckDB plans the ASOF join over the window badly
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _ct_checked AS
            SELECT slice_id, group_id, lane, nests, start_ns, end_ns FROM _ct_slices
            WHERE group_id IN (SELECT group_id FROM _ct_dirty)
        """)
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _ct_flagged AS
            SELECT slice_id, group_id FROM (
                SELECT slice_id, group_id, start_ns,
                       max(end_ns) OVER (PARTITION BY group_id, lane ORDER BY slice_id
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
                FROM _ct_checked WHERE NOT nests)
            WHERE start_ns < prev_end_ns
        """)
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _ct_depths AS
            WITH edges AS (
                -- ends sort before starts at the same instant (siblings), a zero-length slice closes after it opens
                SELECT slice_id, group_id, lane, start_ns AS t, 1 AS delta, 1 AS ord FROM _ct_checked WHERE nests
                UNION ALL
                SELECT slice_id, group_id, lane, end_ns, -1, CASE WHEN end_ns = start_ns THEN 2 ELSE 0 END
                FROM _ct_checked WHERE nests
            )
            SELECT slice_id, group_id, lane, depth, end_ns FROM (
                SELECT slice_id, sum(delta) OVER (PARTITION BY group_id, lane ORDER BY t, ord, slice_id
                                                  ROWS UNBOUNDED PRECEDING) - 1 AS depth
                FROM edges QUALIFY delta = 1)
            JOIN _ct_checked USING (slice_id)
        """)
        con.execute("""
            INSERT INTO _ct_flagged
            SELECT c.slice_id, c.group_id FROM _ct_depths c
            ASOF JOIN _ct_depths p ON p.group_id = c.group_id AND p.lane = c.lane AND p.depth = c.depth - 1
                                  AND c.slice_id > p.slice_id
            WHERE c.end_ns > p.end_ns
        """)
        if not con.execute("SELECT count(*) FROM _ct_flagged").fetchall()[0][0]:
            return
        con.execute("UPDATE _ct_slices SET lane = lane + 1 WHERE slice_id IN (SELECT slice_id FROM _ct_flagged)")
        con.execute("CREATE OR REPLACE TEMP TABLE _ct_dirty AS SELECT DISTINCT group_id FROM _ct_flagged")


def _build_tracks(con: duckdb.DuckDBPyConnection) -> None:
    """Export pids (one per host process, GPU, and the traceview process) and globally unique tids (one per
    thread, stream or traceview track, and lane), with the names and order the viewers show."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ct_tracks AS
        WITH used AS (
            SELECT DISTINCT s.group_id, s.lane, g.process_kind, g.process_rank, g.process_id, g.thread_kind,
                   g.thread_id
            FROM _ct_slices s JOIN _ct_groups g USING (group_id)
        ),
        processes AS (
            SELECT process_kind, process_rank, process_id,
                   row_number() OVER (ORDER BY process_kind <> 'traceview', process_rank, process_kind = 'gpu',
                                      process_id) AS pid
            FROM (SELECT DISTINCT process_kind, process_rank, process_id FROM used)
        )
        SELECT u.group_id, u.lane, p.pid,
               (SELECT count(*) FROM processes) + row_number() OVER (
                   ORDER BY p.pid, u.thread_id, u.thread_kind <> 'thread', u.thread_kind <> 'steps', u.thread_kind,
                            u.lane) AS tid,
               CASE u.process_kind
                   WHEN 'traceview' THEN 'traceview'
                   WHEN 'host' THEN 'process ' || u.process_id || ' (rank ' || u.process_rank || ')'
                   ELSE 'GPU ' || u.process_id || ' (rank ' || u.process_rank || ')'
                        || coalesce(': ' || nullif(d.name, ''), '')
               END AS process_name,
               CASE u.thread_kind
                   WHEN 'thread' THEN 'thread ' || u.thread_id
                   WHEN 'python' THEN 'thread ' || u.thread_id || ' python'
                   WHEN 'nvtx' THEN 'thread ' || u.thread_id || ' NVTX'
                   WHEN 'stream' THEN 'stream ' || u.thread_id
                   WHEN 'annotations' THEN 'stream ' || u.thread_id || ' annotations'
                   WHEN 'steps' THEN 'steps (rank ' || u.thread_id || ')'
                   ELSE u.thread_kind
               END || CASE WHEN u.lane > 0 THEN ' (overlap ' || u.lane || ')' ELSE '' END AS thread_name
        FROM used u
        JOIN processes p USING (process_kind, process_rank, process_id)
        LEFT JOIN devices d ON u.process_kind = 'gpu' AND d.rank = u.process_rank AND d.device_id = u.process_id
    """)
    con.execute("ALTER TABLE _ct_slices ADD COLUMN pid BIGINT")
    con.execute("ALTER TABLE _ct_slices ADD COLUMN tid BIGINT")
    con.execute("UPDATE _ct_slices SET pid = t.pid, tid = t.tid FROM _ct_tracks t "
                "WHERE t.group_id = _ct_slices.group_id AND t.lane = _ct_slices.lane")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ct_roofline AS
        SELECT rank, kernel_id, achieved_tflops, achieved_tbps, pct_of_roof, bound FROM roofline_kernels
        WHERE achieved_tflops IS NOT NULL OR achieved_tbps IS NOT NULL OR pct_of_roof IS NOT NULL
    """)


def _build_flows(con: duckdb.DuckDBPyConnection) -> None:
    """One flow per launch link the schema records: kernels by launch_call_id (a graph launch reaches every
    kernel it replayed), copies and memsets by their call's (pid, correlation id)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ct_flows AS
        WITH memop_calls AS (
            SELECT m.rank, m.memop_id, min(a.call_id) AS call_id
            FROM memops m JOIN api_calls a ON a.rank = m.rank AND a.pid = m.pid AND a.correlation_id = m.correlation_id
            GROUP BY ALL
        ),
        links AS (
            SELECT rank, 'kernel' AS source, kernel_id AS source_id, launch_call_id AS call_id FROM kernels
            WHERE launch_call_id IS NOT NULL
            UNION ALL
            SELECT rank, 'memop', memop_id, call_id FROM memop_calls
        )
        SELECT row_number() OVER (ORDER BY l.source, l.rank, l.source_id) AS flow_id,
               c.pid AS from_pid, c.tid AS from_tid, c.start_ns AS from_ns,
               g.pid AS to_pid, g.tid AS to_tid, g.start_ns AS to_ns
        FROM links l
        JOIN _ct_slices g ON g.source = l.source AND g.rank = l.rank AND g.source_id = l.source_id
        JOIN _ct_slices c ON c.source = 'api_call' AND c.rank = l.rank AND c.source_id = l.call_id
    """)


def _event_sql(ph: str, cat: str, name: str, args: str) -> str:
    """SQL for one event's JSON text from a slice `s`: `X` with its duration, or a thread-scoped instant."""
    timing = "',\"ts\":' || _ct_us(s.start_ns - $origin)"
    if ph == "X":
        timing += " || ',\"dur\":' || _ct_us(s.end_ns - s.start_ns)"
        head = "'{\"ph\":\"X\",\"cat\":'"
    else:
        head = "'{\"ph\":\"i\",\"s\":\"t\",\"cat\":'"
    return (f"{head} || {cat} || ',\"name\":' || _ct_str({name}) || ',\"pid\":' || s.pid || ',\"tid\":' || s.tid"
            f" || {timing} || ',\"args\":' || _ct_args({args}) || '}}'")


def _slice_events_sql() -> str:
    """One JSON text per slice in a slice_id range ($lo..$hi), in slice_id order."""
    kernel_sql = _event_sql("X", cat="'\"kernel\"'", name="coalesce(k.short_name, k.name)", args="""json_object(
        'kernel', k.name, 'kernel_id', k.kernel_id, 'rank', k.rank, 'device_id', k.device_id, 'stream_id', k.stream_id,
        'category', k.category, 'dtype', k.dtype, 'step_id', k.step_id, 'phase', k.phase,
        'grid', CASE WHEN k.grid_x IS NOT NULL THEN [k.grid_x, k.grid_y, k.grid_z] END,
        'block', CASE WHEN k.block_x IS NOT NULL THEN [k.block_x, k.block_y, k.block_z] END,
        'registers_per_thread', k.registers_per_thread, 'shared_memory_bytes', k.shared_memory_bytes,
        'launch_kind', k.launch_kind, 'launch_api', k.launch_api, 'correlation_id', k.correlation_id,
        'graph_id', k.graph_id, 'external_id', k.external_id, 'flops', k.flops, 'bytes', k.bytes,
        'achieved_tflops', r.achieved_tflops, 'achieved_tbps', r.achieved_tbps, 'pct_of_roof', r.pct_of_roof,
        'bound', r.bound, 'start_ns', k.start_ns, 'dur_ns', k.dur_ns)""")
    memop_sql = _event_sql("X", cat="to_json(m.kind)::VARCHAR", name="m.name", args="""json_object(
        'memop_id', m.memop_id, 'rank', m.rank, 'device_id', m.device_id, 'stream_id', m.stream_id,
        'copy_kind', m.copy_kind, 'bytes', m.bytes, 'src_kind', m.src_kind, 'dst_kind', m.dst_kind,
        'step_id', m.step_id, 'phase', st.phase, 'correlation_id', m.correlation_id,
        'start_ns', m.start_ns, 'dur_ns', m.dur_ns)""")
    call_sql = _event_sql("X", cat="to_json('cuda_' || a.api)::VARCHAR", name="a.name", args="""json_object(
        'call_id', a.call_id, 'rank', a.rank, 'pid', a.pid, 'tid', a.tid, 'correlation_id', a.correlation_id,
        'is_launch', a.is_launch, 'is_sync', a.is_sync, 'external_id', a.external_id,
        'start_ns', a.start_ns, 'dur_ns', a.dur_ns)""")
    range_args_sql = """json_object(
        'range_id', g.range_id, 'rank', g.rank, 'pid', g.pid, 'tid', g.tid, 'domain', g.domain,
        'external_id', g.external_id, 'input_dims', g.input_dims, 'input_types', g.input_types,
        'input_values', g.input_values, 'flops', g.flops, 'start_ns', g.start_ns, 'dur_ns', g.dur_ns)"""
    step_sql = _event_sql("X", cat="'\"step\"'", name="st.phase || ' step ' || st.step_id", args="""json_object(
        'rank', st.rank, 'step_id', st.step_id, 'phase', st.phase, 'phase_source', st.phase_source,
        'confidence', st.confidence, 'name', st.name, 'step_source', st.step_source, 'kernels', st.kernels,
        'graph_kernels', st.graph_kernels, 'memops', st.memops, 'gpu_time_ns', st.gpu_time_ns,
        'prefill_tokens', st.prefill_tokens, 'decode_tokens', st.decode_tokens,
        'prefill_requests', st.prefill_requests, 'decode_requests', st.decode_requests,
        'cpu_start_ns', st.cpu_start_ns, 'cpu_end_ns', st.cpu_end_ns,
        'start_ns', st.start_ns, 'dur_ns', st.end_ns - st.start_ns)""")
    finding_sql = _event_sql("X", cat="'\"finding\"'", name="f.name", args="f.args::JSON")
    in_chunk_sql = "s.slice_id BETWEEN $lo AND $hi"

    def range_event_sql(ph: str) -> str:  # a range is a slice, an NVTX mark a thread instant
        return _event_sql(ph, cat="to_json(g.kind)::VARCHAR", name="g.name", args=range_args_sql)

    return f"""
        SELECT text FROM (
            SELECT s.slice_id, {kernel_sql} AS text
            FROM _ct_slices s JOIN kernels k ON k.rank = s.rank AND k.kernel_id = s.source_id
            LEFT JOIN _ct_roofline r ON r.rank = k.rank AND r.kernel_id = k.kernel_id
            WHERE s.source = 'kernel' AND {in_chunk_sql}
            UNION ALL
            SELECT s.slice_id, {memop_sql}
            FROM _ct_slices s JOIN memops m ON m.rank = s.rank AND m.memop_id = s.source_id
            LEFT JOIN steps st ON st.rank = m.rank AND st.step_id = m.step_id
            WHERE s.source = 'memop' AND {in_chunk_sql}
            UNION ALL
            SELECT s.slice_id, {call_sql}
            FROM _ct_slices s JOIN api_calls a ON a.rank = s.rank AND a.call_id = s.source_id
            WHERE s.source = 'api_call' AND {in_chunk_sql}
            UNION ALL
            SELECT s.slice_id, CASE s.source WHEN 'range' THEN {range_event_sql("X")} ELSE {range_event_sql("i")} END
            FROM _ct_slices s JOIN ranges g ON g.rank = s.rank AND g.range_id = s.source_id
            WHERE s.source IN ('range', 'mark') AND {in_chunk_sql}
            UNION ALL
            SELECT s.slice_id, {step_sql}
            FROM _ct_slices s JOIN steps st ON st.rank = s.rank AND st.step_id = s.source_id
            WHERE s.source = 'step' AND {in_chunk_sql}
            UNION ALL
            SELECT s.slice_id, {finding_sql}
            FROM _ct_slices s JOIN _ct_findings f ON f.finding_id = s.source_id
            WHERE s.source = 'finding' AND {in_chunk_sql}
        ) ORDER BY slice_id
    """


_METADATA_SQL = """
    SELECT text FROM (
        SELECT 0 AS part, pid AS id, '{"ph":"M","name":"process_name","pid":' || pid || ',"tid":' || pid
               || ',"args":{"name":' || _ct_str(process_name) || '}}' AS text
        FROM (SELECT DISTINCT pid, process_name FROM _ct_tracks)
        UNION ALL
        SELECT 1, pid, '{"ph":"M","name":"process_sort_index","pid":' || pid || ',"tid":' || pid
               || ',"args":{"sort_index":' || pid || '}}'
        FROM (SELECT DISTINCT pid FROM _ct_tracks)
        UNION ALL
        SELECT 2, tid, '{"ph":"M","name":"thread_name","pid":' || pid || ',"tid":' || tid
               || ',"args":{"name":' || _ct_str(thread_name) || '}}'
        FROM _ct_tracks
        UNION ALL
        SELECT 3, tid, '{"ph":"M","name":"thread_sort_index","pid":' || pid || ',"tid":' || tid
               || ',"args":{"sort_index":' || tid || '}}'
        FROM _ct_tracks
    ) ORDER BY part, id
"""

# findings also as global instants at their window's start: a line across every track in both viewers
_FINDING_INSTANTS_SQL = """
    SELECT '{"ph":"i","s":"g","cat":"finding","name":' || _ct_str(f.name) || ',"pid":' || s.pid || ',"tid":' || s.tid
           || ',"ts":' || _ct_us(s.start_ns - $origin) || ',"args":' || _ct_args(f.args::JSON) || '}'
    FROM _ct_slices s JOIN _ct_findings f ON f.finding_id = s.source_id
    WHERE s.source = 'finding' ORDER BY s.start_ns, f.finding_id
"""

# flows last: at a tie in time the viewers bind a flow to the slices already read
_FLOWS_SQL = """
    SELECT text FROM (
        SELECT flow_id, 0 AS part, '{"ph":"s","cat":"launch","name":"launch","id":' || flow_id || ',"pid":' || from_pid
               || ',"tid":' || from_tid || ',"ts":' || _ct_us(from_ns - $origin) || '}' AS text
        FROM _ct_flows WHERE flow_id BETWEEN $lo AND $hi
        UNION ALL
        SELECT flow_id, 1, '{"ph":"f","bp":"e","cat":"launch","name":"launch","id":' || flow_id || ',"pid":' || to_pid
               || ',"tid":' || to_tid || ',"ts":' || _ct_us(to_ns - $origin) || '}'
        FROM _ct_flows WHERE flow_id BETWEEN $lo AND $hi
    ) ORDER BY flow_id, part
"""


def _write_events(con: duckdb.DuckDBPyConnection, out: TextIO, origin_ns: int) -> int:
    """Metadata, slices, finding instants and flows, chunk by chunk; returns the number of events written."""
    written = 0

    def emit(texts: list[tuple[str]]) -> None:
        nonlocal written
        if texts:
            out.write((",\n" if written else "") + ",\n".join(t for (t,) in texts))
            written += len(texts)

    emit(con.execute(_METADATA_SQL).fetchall())
    slices_sql = _slice_events_sql()
    last_slice = con.execute("SELECT coalesce(max(slice_id), 0) FROM _ct_slices").fetchall()[0][0]
    for lo in range(1, last_slice + 1, CHUNK_EVENTS):
        emit(con.execute(slices_sql, {"lo": lo, "hi": lo + CHUNK_EVENTS - 1, "origin": origin_ns}).fetchall())
    emit(con.execute(_FINDING_INSTANTS_SQL, {"origin": origin_ns}).fetchall())
    last_flow = con.execute("SELECT coalesce(max(flow_id), 0) FROM _ct_flows").fetchall()[0][0]
    for lo in range(1, last_flow + 1, CHUNK_EVENTS // 2):
        emit(con.execute(_FLOWS_SQL, {"lo": lo, "hi": lo + CHUNK_EVENTS // 2 - 1, "origin": origin_ns}).fetchall())
    return written


def _other_data(con: duckdb.DuckDBPyConnection, origin_ns: int, version: str) -> dict[str, Any]:
    """What the events' numbers mean: the time zero of `ts`, the source files and their time base."""
    files = dict_rows(con, "SELECT rank, file, source_format, time_base, time_origin_ns FROM trace_info ORDER BY rank")
    return {
        "generator": f"traceview {version}",
        "ts_origin_ns": origin_ns,
        "ts_unit": "microseconds since ts_origin_ns (three decimals: exact ns); args.start_ns and args.dur_ns are "
                   "the schema's integer ns on the trace's own time base",
        "traces": files,
    }


@contextmanager
def _output(target: Path) -> Iterator[TextIO]:
    """A text stream into a file beside `target`, renamed over it once complete (gzip for .gz): an interrupted
    export never leaves half a file, and the file gets the permissions a plain open() would give."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise TraceviewError(f"{target}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            binary = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0)
                      if target.name.endswith(".gz") else raw)
            with io.TextIOWrapper(binary, encoding="utf-8", newline="\n", write_through=False) as text:
                yield text
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except OSError as exc:
        raise TraceviewError(f"{target}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
