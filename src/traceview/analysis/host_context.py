"""Host context: what the host was doing under every GPU idle gap and every host-blocking call.

A gap is explained by the host, not by the kernel after it: the runtime or driver call that sat under it
(a 60 ms cuLibraryLoadData, a cudaStreamSynchronize), the CPU op and Python frame the launching thread was
in, and the NVTX or user range around it. Blocking calls are priced here once (the GPU idle each one
exposes), so TV204 and TV206 give one call one price.

Every lookup is an ASOF join, never a range join over all ranges: a range open at a window's start is,
per (thread, kind, nesting depth), the latest-starting one there; a range that starts inside a window
finds it by the latest window starting before it. Windows of one lane (a device's gaps, the blocking
calls of a thread) do not overlap, so each range meets at most one window per lane. The SQL is
analysis/sql/host_context.sql, but for the two statements that compose intervals.py's helpers.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module
from traceview.analysis.intervals import busy_islands_sql, with_prev_end_sql

MODULE = sql_module.load("host_context")

STAGE = MODULE.stage(run=lambda con, context: build_host_context(con))

# ATen ops that only move or convert data: a sync inside one is reported by the op that called it
GENERIC_COPY_OP = r"^aten::(copy_|_copy_from|_copy_from_and_resize|_local_scalar_dense|_to_copy|to|contiguous|clone)$"


# gaps shorter than this are launch latency: a trace of 2 M back-to-back kernels has 2 M of them
CONTEXT_MIN_GAP_NS = 10_000


def build_host_context(con: duckdb.DuckDBPyConnection) -> None:
    MODULE.run(con, "", min_gap_ns=CONTEXT_MIN_GAP_NS)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _range_context AS {_range_context_sql()}",
                {"generic_copy_op": GENERIC_COPY_OP})
    MODULE.run(con, "gap_context")
    con.execute(f"""
        CREATE OR REPLACE TABLE blocking_calls AS
        WITH drained AS (
            -- the rank's last busy island starting before the call returned, and the next one after it
            SELECT c.*, p.end_ns AS last_busy_end, n.start_ns AS next_busy
            FROM _blocking c
            ASOF LEFT JOIN rank_busy_islands p ON p.rank = c.rank AND c.end_ns > p.start_ns
            ASOF LEFT JOIN rank_busy_islands n ON n.rank = c.rank AND c.end_ns <= n.start_ns
        ),
        bounded AS (
            SELECT *,
                   -- idle from when the GPU drained, or the call start if later ...
                   CASE WHEN last_busy_end > start_ns THEN last_busy_end ELSE start_ns END AS idle_start,
                   -- ... until it is next busy, never past the end of the call's step
                   CASE WHEN step_id IS NOT NULL AND (next_busy IS NULL OR next_busy >= step_end_ns) THEN step_end_ns
                        ELSE next_busy END AS idle_end
            FROM drained
        ),
        windows AS (
            SELECT *, last_busy_end < end_ns AND idle_end > idle_start AS exposes FROM bounded
        ),
        first_exposed AS (
            -- a drained window already exposed by an earlier call (cudaMemcpyAsync into pageable memory, then
            -- cudaStreamSynchronize) is counted once: each call keeps only the part after the earlier windows
            {with_prev_end_sql("SELECT rank, call_id, idle_start AS start_ns, idle_end AS end_ns "
                               "FROM windows WHERE exposes", ("rank",), tiebreak=("call_id",))}
        ),
        exposed AS (
            SELECT w.*, CASE WHEN NOT coalesce(w.exposes, false) THEN 0
                             WHEN f.prev_end_ns >= w.idle_end THEN 0
                             WHEN f.prev_end_ns > w.idle_start THEN w.idle_end - f.prev_end_ns
                             ELSE w.idle_end - w.idle_start END AS exposed_idle_ns,
                   CASE WHEN f.prev_end_ns > w.idle_start THEN f.prev_end_ns ELSE w.idle_start END AS counted_from
            FROM windows w LEFT JOIN first_exposed f ON f.rank = w.rank AND f.call_id = w.call_id
        ),
        priced AS (
            SELECT *, CASE WHEN exposed_idle_ns < dur_ns THEN exposed_idle_ns ELSE dur_ns END AS saving_ns,
                   -- the exposed window lies in one idle stretch of the rank: inside the step's GPU span when
                   -- the rank ran work in the step window both before and after it
                   CASE WHEN step_id IS NULL THEN NULL
                        WHEN last_busy_end > step_start_ns AND next_busy < step_end_ns THEN exposed_idle_ns
                        ELSE 0 END AS in_span_ns
            FROM exposed
        )
        SELECT p.rank, p.call_id, p.pid, p.tid, p.name, p.reason, p.memop_kind, p.copy_kind, p.bytes, p.src_kind,
               p.dst_kind, p.step_id, p.start_ns, p.end_ns, p.dur_ns, p.exposed_idle_ns, p.saving_ns,
               CASE WHEN p.in_span_ns IS NULL OR p.in_span_ns > p.saving_ns THEN p.saving_ns ELSE p.in_span_ns END
                   AS saving_in_gpu_span_ns,
               x.cpu_op, x.issuing_op, x.python_frame, x.user_range
        FROM priced p
        LEFT JOIN _range_context x ON x.rank = p.rank AND x.lane = 'call' AND x.wid = p.call_id
        ORDER BY p.rank, p.call_id
    """)
    MODULE.run(con, "done")


def _range_context_sql() -> str:
    """Per window of _windows: the CPU op, Python frame and user range overlapping it the most, innermost of equals."""
    return f"""
        WITH r AS (  -- names stay behind: the windows' chosen ranges look theirs up (sorting them is the cost)
            SELECT rank, pid, tid, kind, depth, range_id, start_ns, end_ns,
                   CASE kind WHEN 'cpu_op' THEN 'cpu_op' WHEN 'python_function' THEN 'python_frame'
                             ELSE 'user_range' END AS cls
            FROM ranges
            WHERE kind IN ('cpu_op', 'python_function', 'nvtx', 'user_annotation')
              AND (rank, pid, tid) IN (SELECT rank, pid, tid FROM _windows)
        ),
        levels AS (SELECT DISTINCT rank, pid, tid, kind, depth FROM r),
        open_at_start AS (
            -- at one nesting depth of one kind on a thread only the latest-starting range can be open
            SELECT w.rank, w.lane, w.wid, w.pid, w.tid, w.start_ns AS w_start, w.end_ns AS w_end,
                   x.cls, x.depth, x.range_id, x.start_ns, x.end_ns
            FROM (SELECT w.*, l.kind, l.depth FROM _windows w JOIN levels l USING (rank, pid, tid)) w
            ASOF JOIN r x ON x.rank = w.rank AND x.pid = w.pid AND x.tid = w.tid AND x.kind = w.kind
                         AND x.depth = w.depth AND w.start_ns >= x.start_ns
            WHERE x.end_ns > w.start_ns
        ),
        covered AS (  -- the windows' union per thread: few intervals, which most ranges start outside of
            {busy_islands_sql("SELECT rank, pid, tid, start_ns, end_ns FROM _windows", ("rank", "pid", "tid"))}
        ),
        inside AS (  -- the ranges that start in some window, found once, before they are paired with each lane
            SELECT x.* FROM r x
            ASOF JOIN covered c ON c.rank = x.rank AND c.pid = x.pid AND c.tid = x.tid AND x.start_ns >= c.lo
            WHERE x.start_ns < c.hi
        ),
        started_inside AS (
            SELECT w.rank, w.lane, w.wid, w.pid, w.tid, w.start_ns AS w_start, w.end_ns AS w_end,
                   x.cls, x.depth, x.range_id, x.start_ns, x.end_ns
            FROM (SELECT r.*, l.lane FROM inside r JOIN (SELECT DISTINCT rank, pid, tid, lane FROM _windows) l
                  USING (rank, pid, tid)) x
            ASOF JOIN _windows w ON w.rank = x.rank AND w.pid = x.pid AND w.tid = x.tid AND w.lane = x.lane
                                AND x.start_ns > w.start_ns
            WHERE x.start_ns < w.end_ns
        ),
        chosen AS (
            SELECT rank, lane, wid, any_value(pid) AS pid, any_value(tid) AS tid, cls,
                   arg_max(struct_pack(range_id := range_id, start_ns := start_ns, end_ns := end_ns,
                                       overlap_ns := (CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END) - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END)),
                           ((CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END) - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END), start_ns, -end_ns, depth)) AS b
            FROM (SELECT * FROM open_at_start UNION ALL SELECT * FROM started_inside)
            GROUP BY rank, lane, wid, cls
        ),
        best AS (
            SELECT c.rank, c.lane, c.wid, c.pid, c.tid, c.cls,
                   struct_pack(name := n.name, start_ns := c.b.start_ns, end_ns := c.b.end_ns,
                               overlap_ns := c.b.overlap_ns) AS b
            FROM chosen c JOIN ranges n ON n.rank = c.rank AND n.range_id = c.b.range_id
        ),
        op AS (
            -- the outermost CPU op around the chosen one: the depth-0 op open at its start
            SELECT b.*, t.name AS top_op
            FROM (SELECT * FROM best WHERE cls = 'cpu_op') b
            ASOF LEFT JOIN (SELECT * FROM r WHERE kind = 'cpu_op' AND depth = 0) o
              ON o.rank = b.rank AND o.pid = b.pid AND o.tid = b.tid AND b.b.start_ns >= o.start_ns
            LEFT JOIN ranges t ON t.rank = o.rank AND t.range_id = o.range_id
        )
        SELECT w.rank, w.lane, w.wid,
               op.b.name AS cpu_op, op.b.overlap_ns AS cpu_op_overlap_ns,
               CASE WHEN regexp_matches(op.b.name, $generic_copy_op) THEN coalesce(op.top_op, op.b.name)
                    ELSE op.b.name END AS issuing_op,
               py.b.name AS python_frame, ur.b.name AS user_range
        FROM _windows w
        LEFT JOIN op ON op.rank = w.rank AND op.lane = w.lane AND op.wid = w.wid
        LEFT JOIN best py ON py.rank = w.rank AND py.lane = w.lane AND py.wid = w.wid AND py.cls = 'python_frame'
        LEFT JOIN best ur ON ur.rank = w.rank AND ur.lane = w.lane AND ur.wid = w.wid AND ur.cls = 'user_range'
    """
