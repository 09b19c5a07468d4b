"""The step budget: each step's wall time cut into disjoint buckets that findings draw their savings from.

Two rules that price the same nanoseconds differently, or savings that add up to more than a step
lasted, make a report no one can act on. So the time a finding could win is claimed from one ledger:
every step's wall time (and each rank's time outside every step) is split exactly, with no overlap,
into what ran there (compute, exposed communication, copies with no kernel beside them), GPU idle by
kind, and time outside GPU work. rules/engine.py grants each finding's claims from these buckets.

Which step owns each piece of the timeline, and whether it is priced, is `step_windows`'s (the later-starting
of two overlapping steps owns the overlap, so the windows tile the trace's span). Buckets are measured on the rank's merged timeline (every device and stream): a moment is `compute`
when any non-communication kernel runs, `communication` when only communication kernels run, `copy`
when only memcpys/memsets run. Each piece is the difference of a cumulative busy-time function at the
window's ends (read with ASOF joins on running sums), so the cost is O(n log n) in the activities and
the buckets of a window add up to its wall time to the nanosecond. analysis/sql/step_budget.sql declares
the relations and holds the view; step_budget itself composes intervals.py's helpers, so it is built here.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module
from traceview.analysis.intervals import busy_before_sql, islands_with_time_before_sql, time_before_sql
from traceview.model.db import ident

MODULE = sql_module.load("step_budget")

# the buckets are step_budget's columns after wall_ns, each `<bucket>_ns`; the idle ones are `idle_<idle_kind>_ns`
_COLUMNS = list(MODULE.creates[0].columns)
BUCKETS = tuple(name.removesuffix("_ns") for name in _COLUMNS[_COLUMNS.index("wall_ns") + 1:])
IDLE_KINDS = tuple(bucket.removeprefix("idle_") for bucket in BUCKETS if bucket.startswith("idle_"))

STAGE = MODULE.stage(run=lambda con, context: build_step_budget(con))


def build_step_budget(con: duckdb.DuckDBPyConnection) -> None:
    """The step budget's one statement. Its ASOF joins look up few windows, or the two ends of each window's GPU
    span, among many islands and gaps: DuckDB loops over the islands where it thinks the left side small, and it
    takes the span ends for a fifth of their number (the 10x vLLM trace's 442 for 88, a 200-window trace's for
    under 64: 13.5 M joined rows, 0.57 s against 0.19 s sorted). The windows are counted here, so where the span
    ends reach the loop's bound every join is sorted; below it the loops stay (2 windows of the 2 M-kernel export
    against its 2 M gaps: 0.6 s looped, 1.4 s sorted)."""
    span_ends, loop_rows = con.execute("SELECT 2 * count(*), current_setting('asof_loop_join_threshold') "
                                       "FROM step_windows").fetchall()[0]
    if span_ends < loop_rows:
        _build(con)
        return
    con.execute("SET asof_loop_join_threshold = 0")  # this cursor's session only
    try:
        _build(con)
    finally:
        con.execute("RESET asof_loop_join_threshold")


def _build(con: duckdb.DuckDBPyConnection) -> None:
    kernels = "SELECT rank, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel'"
    compute = kernels + " AND category IS DISTINCT FROM 'communication'"
    idle_kinds_sql = ", ".join(
        f"CASE WHEN {ident(kind)}.lo IS NULL THEN 0 ELSE {ident(kind)}.before + (CASE WHEN w.point < {ident(kind)}.hi "
        f"THEN w.point - {ident(kind)}.lo ELSE {ident(kind)}.hi - {ident(kind)}.lo END) END AS {ident(kind)}"
        for kind in IDLE_KINDS)
    idle_joins_sql = "\n".join(
        f"ASOF LEFT JOIN (SELECT * FROM gaps WHERE idle_kind = $kind_{ident(kind)}) {ident(kind)} "
        f"ON {ident(kind)}.rank = w.rank AND {ident(kind)}.lo <= w.point" for kind in IDLE_KINDS)
    con.execute(f"""
        CREATE OR REPLACE TABLE step_budget AS
        WITH windows AS (  -- who owns each piece of the timeline: step_windows, the one home of ownership
            SELECT rank, step_id, start_ns AS s, end_ns AS e FROM step_windows
        ),
        -- the rank's islands are those of all its work; a rank without memops has the same kernel islands,
        -- and one without communication kernels the same compute islands: each union is built once
        memop_ranks AS (SELECT DISTINCT rank FROM gpu_activity WHERE kind = 'memop'),
        comm_ranks AS (SELECT DISTINCT rank FROM device_activity WHERE comm_kernels IS NOT NULL),
        all_busy AS ({time_before_sql("SELECT rank, start_ns AS lo, end_ns AS hi FROM rank_busy_islands", ("rank",))}),
        kernel_busy AS (
            SELECT * FROM all_busy WHERE rank NOT IN (SELECT rank FROM memop_ranks)
            UNION ALL
            {islands_with_time_before_sql(kernels + " AND rank IN (SELECT rank FROM memop_ranks)", ("rank",))}
        ),
        compute_busy AS (
            SELECT * FROM kernel_busy WHERE rank NOT IN (SELECT rank FROM comm_ranks)
            UNION ALL
            {islands_with_time_before_sql(compute + " AND rank IN (SELECT rank FROM comm_ranks)", ("rank",))}
        ),
        rank_gaps AS (
            -- gaps between the rank's busy islands; the kind is that of the device gap the next island's
            -- first activity ended (unknown when that activity was its device's first)
            SELECT rank, start_ns AS lo, end_ns AS hi, idle_kind FROM gpu_idle_gaps
            WHERE rank IN (SELECT rank FROM one_device_ranks)
            UNION ALL
            SELECT r.rank, r.lo, r.hi, coalesce(k.idle_kind, 'unknown') AS idle_kind
            FROM (SELECT rank, lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS lo, start_ns AS hi
                  FROM rank_busy_islands WHERE rank NOT IN (SELECT rank FROM one_device_ranks)) r
            LEFT JOIN (SELECT rank, end_ns, min(idle_kind) AS idle_kind FROM gpu_idle_gaps
                       WHERE rank NOT IN (SELECT rank FROM one_device_ranks) GROUP BY rank, end_ns) k
              ON k.rank = r.rank AND k.end_ns = r.hi
            WHERE r.lo IS NOT NULL
        ),
        gaps AS (  -- per idle kind, each gap with the gap time of that kind before it
            {time_before_sql("SELECT * FROM rank_gaps", ("rank", "idle_kind"))}
        ),
        ends AS (
            -- busy time before each end of the window, for all work, any kernel and compute kernels
            SELECT w.*, {busy_before_sql("a", "w.e")} AS all_e, {busy_before_sql("k", "w.e")} AS kernel_e,
                   {busy_before_sql("c", "w.e")} AS compute_e, a.hi AS last_hi
            FROM windows w
            ASOF LEFT JOIN all_busy a ON a.rank = w.rank AND a.lo < w.e
            ASOF LEFT JOIN kernel_busy k ON k.rank = w.rank AND k.lo <= w.e
            ASOF LEFT JOIN compute_busy c ON c.rank = w.rank AND c.lo <= w.e
        ),
        starts AS (
            SELECT w.*, {busy_before_sql("a", "w.s")} AS all_s, {busy_before_sql("k", "w.s")} AS kernel_s,
                   {busy_before_sql("c", "w.s")} AS compute_s,
                   -- the window's GPU span: from its first busy moment to its last
                   CASE WHEN a.hi > w.s THEN w.s ELSE n.lo END AS span_lo,
                   CASE WHEN w.last_hi >= w.e THEN w.e ELSE w.last_hi END AS span_hi
            FROM ends w
            ASOF LEFT JOIN all_busy a ON a.rank = w.rank AND a.lo <= w.s
            ASOF LEFT JOIN kernel_busy k ON k.rank = w.rank AND k.lo <= w.s
            ASOF LEFT JOIN compute_busy c ON c.rank = w.rank AND c.lo <= w.s
            ASOF LEFT JOIN all_busy n ON n.rank = w.rank AND n.lo >= w.s
        ),
        spanned AS (
            SELECT *, span_lo < e AND span_hi > s AND span_hi > span_lo AS has_gpu FROM starts
        ),
        points AS MATERIALIZED (  -- the ends of every window's GPU span
            SELECT rank, step_id, s, 'hi' AS side, span_hi AS point FROM spanned WHERE has_gpu
            UNION ALL
            SELECT rank, step_id, s, 'lo', span_lo FROM spanned WHERE has_gpu
        ),
        idle_at AS (
            -- per idle kind, the rank's gap time of that kind before each end of the window's GPU span: the last
            -- gap of the kind starting before it, with that gap's share up to the point
            SELECT w.rank, w.step_id, w.s, w.side, {idle_kinds_sql}
            FROM points w
            {idle_joins_sql}
        ),
        idle_hi AS (SELECT * FROM idle_at WHERE side = 'hi'),
        idle_lo AS (SELECT * FROM idle_at WHERE side = 'lo'),
        pieces AS (
            SELECT w.rank, w.step_id, w.e - w.s AS wall_ns,
                   w.compute_e - w.compute_s AS compute_ns,
                   (w.kernel_e - w.kernel_s) - (w.compute_e - w.compute_s) AS communication_ns,
                   (w.all_e - w.all_s) - (w.kernel_e - w.kernel_s) AS copy_ns,
                   coalesce(h.host_wait - l.host_wait, 0) AS idle_host_wait_ns,
                   coalesce(h.sync_drain - l.sync_drain, 0) AS idle_sync_drain_ns,
                   coalesce(h.bubble - l.bubble, 0) AS idle_bubble_ns,
                   coalesce(h.unknown - l.unknown, 0) AS idle_unknown_ns
            FROM spanned w
            LEFT JOIN idle_hi h ON h.rank = w.rank AND h.s = w.s AND h.step_id IS NOT DISTINCT FROM w.step_id
            LEFT JOIN idle_lo l ON l.rank = w.rank AND l.s = w.s AND l.step_id IS NOT DISTINCT FROM w.step_id
        ),
        summed AS (
            SELECT rank, step_id, sum(wall_ns)::BIGINT AS wall_ns, sum(compute_ns)::BIGINT AS compute_ns,
                   sum(communication_ns)::BIGINT AS communication_ns, sum(copy_ns)::BIGINT AS copy_ns,
                   sum(idle_host_wait_ns)::BIGINT AS idle_host_wait_ns,
                   sum(idle_sync_drain_ns)::BIGINT AS idle_sync_drain_ns,
                   sum(idle_bubble_ns)::BIGINT AS idle_bubble_ns, sum(idle_unknown_ns)::BIGINT AS idle_unknown_ns
            FROM pieces GROUP BY rank, step_id
        ),
        pricing AS (SELECT rank, step_id, bool_or(priced) AS priced FROM step_windows GROUP BY ALL)
        SELECT b.rank, b.step_id, s.phase, t.state, p.priced,
               b.wall_ns, b.compute_ns, b.communication_ns, b.copy_ns, b.idle_host_wait_ns, b.idle_sync_drain_ns,
               b.idle_bubble_ns, b.idle_unknown_ns,
               b.wall_ns - b.compute_ns - b.communication_ns - b.copy_ns - b.idle_host_wait_ns - b.idle_sync_drain_ns
                   - b.idle_bubble_ns - b.idle_unknown_ns AS outside_gpu_ns
        FROM summed b
        LEFT JOIN steps s ON s.rank = b.rank AND s.step_id = b.step_id
        LEFT JOIN step_states t ON t.rank = b.rank AND t.step_id = b.step_id
        JOIN pricing p ON p.rank = b.rank AND p.step_id IS NOT DISTINCT FROM b.step_id
        ORDER BY b.rank, b.step_id NULLS LAST
    """, {f"kind_{kind}": kind for kind in IDLE_KINDS})
    MODULE.run(con)
