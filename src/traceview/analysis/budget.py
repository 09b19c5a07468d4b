"""The step budget: each step's wall time cut into disjoint buckets that findings draw their savings from.

Two rules that price the same nanoseconds differently, or savings that add up to more than a step
lasted, make a report no one can act on. So the time a finding could win is claimed from one ledger:
every step's wall time (and each rank's time outside every step) is split exactly, with no overlap,
into what ran there (compute, exposed communication, copies with no kernel beside them), GPU idle by
kind, and time outside GPU work. rules/engine.py grants each finding's claims from these buckets.

Where step windows overlap, the later-starting step owns the overlap (as launches are assigned to
steps), so the windows tile the trace's span. Buckets are measured on the rank's merged timeline (every device and stream): a moment is `compute`
when any non-communication kernel runs, `communication` when only communication kernels run, `copy`
when only memcpys/memsets run. Each piece is the difference of a cumulative busy-time function at the
window's ends (read with ASOF joins on running sums), so the cost is O(n log n) in the activities and
the buckets of a window add up to its wall time to the nanosecond.
"""

from __future__ import annotations

import duckdb

from traceview.analysis.intervals import busy_before_sql, islands_with_time_before_sql, time_before_sql
from traceview.analysis.stage import Relation, Stage

IDLE_KINDS = ("host_wait", "sync_drain", "bubble", "unknown")
BUCKETS = ("compute", "communication", "copy", *(f"idle_{kind}" for kind in IDLE_KINDS), "outside_gpu")

COLUMNS = {
    "rank": "trace rank",
    "step_id": "steps.step_id; NULL for the rank's time outside every step (within the trace's span)",
    "phase": "steps.phase; NULL outside steps",
    "state": "step_states.state (steady, warmup, init); NULL outside steps",
    "priced": "whether findings may claim this time: steady steps, or every window of a rank that has no "
              "steady step; warm-up and initialisation are not priced where a steady state exists",
    "wall_ns": "the time the window owns: the step's wall time less any part a later-starting overlapping step "
               "owns; the sum of the buckets below",
    "compute_ns": "time at least one non-communication kernel ran",
    "communication_ns": "time only communication kernels ran (communication no compute hid)",
    "copy_ns": "time only memcpys or memsets ran",
    "idle_host_wait_ns": "GPU idle inside the window's GPU span, in gaps of idle_kind host_wait (the host issued the "
                         "next work only after the GPU ran dry)",
    "idle_sync_drain_ns": "... of idle_kind sync_drain (the launching thread sat in a synchronizing call)",
    "idle_bubble_ns": "... of idle_kind bubble (the next work was queued before the gap: launch latency)",
    "idle_unknown_ns": "... of idle_kind unknown (no launch call in the trace)",
    "outside_gpu_ns": "wall time before the window's first and after its last GPU work",
}

STAGE = Stage(
    name="step_budget",
    doc="Each step's wall time, and each rank's time outside every step, split into disjoint buckets (compute, "
        "exposed communication, copies, GPU idle by kind, outside GPU work) that add up to it exactly; the "
        "one accounting of recoverable time that the rule engine grants findings' savings from "
        "(docs/rules.md, savings).",
    requires=("steps", "step_states", "gpu_activity", "gpu_idle_gaps", "rank_busy_islands", "trace_info"),
    creates=(Relation("step_budget", "step of a rank, plus one row per rank for its time outside every step",
                      COLUMNS),
             Relation("step_budget_buckets", "(window, bucket) of step_budget: the same figures one bucket a row, "
                      "as rules claim them", {
                          "rank": "trace rank",
                          "step_id": "step_budget.step_id",
                          "phase": "step_budget.phase",
                          "priced": "step_budget.priced",
                          "bucket": "the bucket's name: " + ", ".join(BUCKETS),
                          "ns": "its nanoseconds in the window",
                      }, view=True)),
    run=lambda con, context: build_step_budget(con),
)


def _idle_before(point: str) -> str:
    """Per idle kind, the rank's gap time of that kind before `point` (joined gap row `g`)."""
    return ", ".join(
        f"CASE WHEN g.lo IS NULL THEN 0 ELSE g.before_{kind} + CASE WHEN g.idle_kind = '{kind}' THEN "
        f"(CASE WHEN {point} < g.hi THEN {point} - g.lo ELSE g.hi - g.lo END) ELSE 0 END END AS {kind}"
        for kind in IDLE_KINDS)


def build_step_budget(con: duckdb.DuckDBPyConnection) -> None:
    kernels = "SELECT rank, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel'"
    compute = kernels + " AND category IS DISTINCT FROM 'communication'"
    before_kinds = ", ".join(
        f"coalesce(sum(hi - lo) FILTER (WHERE idle_kind = '{kind}') OVER (PARTITION BY rank ORDER BY lo "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_{kind}" for kind in IDLE_KINDS)
    con.execute(f"""
        CREATE OR REPLACE TABLE step_budget AS
        WITH spans AS (SELECT rank, start_ns, end_ns FROM trace_info WHERE end_ns > start_ns),
        bounds AS (
            SELECT rank, start_ns AS t FROM steps UNION SELECT rank, end_ns FROM steps
            UNION SELECT rank, start_ns FROM spans UNION SELECT rank, end_ns FROM spans
        ),
        segments AS (SELECT rank, t AS lo, lead(t) OVER (PARTITION BY rank ORDER BY t) AS hi FROM bounds),
        windows AS (
            -- each piece of the span between step boundaries belongs to the latest-starting step that covers
            -- it (overlapping windows: the later step owns the overlap, as launches are assigned), or to no
            -- step; so the windows tile the span and no time is budgeted twice
            SELECT g.rank, arg_max(t.step_id, (t.start_ns, -t.step_id)) AS step_id, g.lo AS s, g.hi AS e
            FROM segments g
            LEFT JOIN steps t ON t.rank = g.rank AND t.start_ns <= g.lo AND t.end_ns > g.lo
            WHERE g.hi > g.lo
            GROUP BY g.rank, g.lo, g.hi
        ),
        -- the rank's islands are those of all its work; a rank without memops has the same kernel islands,
        -- and one without communication kernels the same compute islands: each union is built once
        memop_ranks AS (SELECT DISTINCT rank FROM gpu_activity WHERE kind = 'memop'),
        comm_ranks AS (SELECT DISTINCT rank FROM gpu_activity WHERE category = 'communication'),
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
            SELECT r.rank, r.lo, r.hi, coalesce(k.idle_kind, 'unknown') AS idle_kind
            FROM (SELECT rank, lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS lo, start_ns AS hi
                  FROM rank_busy_islands) r
            LEFT JOIN (SELECT rank, end_ns, min(idle_kind) AS idle_kind FROM gpu_idle_gaps GROUP BY rank, end_ns) k
              ON k.rank = r.rank AND k.end_ns = r.hi
            WHERE r.lo IS NOT NULL
        ),
        gaps AS (SELECT *, {before_kinds} FROM rank_gaps),
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
        idle_hi AS (
            SELECT w.rank, w.step_id, w.s, w.span_hi, {_idle_before("w.span_hi")}
            FROM spanned w ASOF LEFT JOIN gaps g ON g.rank = w.rank AND g.lo <= w.span_hi
            WHERE w.has_gpu
        ),
        idle_lo AS (
            SELECT w.rank, w.step_id, w.s, w.span_lo, {_idle_before("w.span_lo")}
            FROM spanned w ASOF LEFT JOIN gaps g ON g.rank = w.rank AND g.lo <= w.span_lo
            WHERE w.has_gpu
        ),
        pieces AS (
            SELECT w.rank, w.step_id, w.e - w.s AS wall_ns,
                   w.compute_e - w.compute_s AS compute_ns,
                   (w.kernel_e - w.kernel_s) - (w.compute_e - w.compute_s) AS communication_ns,
                   (w.all_e - w.all_s) - (w.kernel_e - w.kernel_s) AS copy_ns,
                   {", ".join(f"coalesce(h.{kind} - l.{kind}, 0) AS idle_{kind}_ns" for kind in IDLE_KINDS)}
            FROM spanned w
            LEFT JOIN idle_hi h ON h.rank = w.rank AND h.s = w.s AND h.step_id IS NOT DISTINCT FROM w.step_id
            LEFT JOIN idle_lo l ON l.rank = w.rank AND l.s = w.s AND l.step_id IS NOT DISTINCT FROM w.step_id
        ),
        summed AS (
            SELECT rank, step_id, {", ".join(f"sum({c})::BIGINT AS {c}" for c in (
                "wall_ns", *(f"{b}_ns" for b in BUCKETS[:-1])))}
            FROM pieces GROUP BY rank, step_id
        ),
        steady_ranks AS (SELECT DISTINCT rank FROM step_states WHERE state = 'steady')
        SELECT b.rank, b.step_id, s.phase, t.state,
               coalesce(t.state = 'steady', false) OR b.rank NOT IN (SELECT rank FROM steady_ranks) AS priced,
               b.wall_ns, {", ".join(f"b.{b}_ns" for b in BUCKETS[:-1])},
               b.wall_ns - {" - ".join(f"b.{b}_ns" for b in BUCKETS[:-1])} AS outside_gpu_ns
        FROM summed b
        LEFT JOIN steps s ON s.rank = b.rank AND s.step_id = b.step_id
        LEFT JOIN step_states t ON t.rank = b.rank AND t.step_id = b.step_id
        ORDER BY b.rank, b.step_id NULLS LAST
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW step_budget_buckets AS
        SELECT rank, step_id, phase, priced, bucket, ns FROM (
            UNPIVOT (SELECT rank, step_id, phase, priced, {", ".join(f"{b}_ns AS {b}" for b in BUCKETS)} FROM step_budget)
            ON {", ".join(BUCKETS)} INTO NAME bucket VALUE ns)
    """)
