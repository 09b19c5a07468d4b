"""Host context: what the host was doing under every GPU idle gap and every host-blocking call.

A gap is explained by the host, not by the kernel after it: the runtime or driver call that sat under it
(a 60 ms cuLibraryLoadData, a cudaStreamSynchronize), the CPU op and Python frame the launching thread was
in, and the NVTX or user range around it. Blocking calls are priced here once (the GPU idle each one
exposes), so TV204 and TV206 give one call one price.

Every lookup is an ASOF join, never a range join over all ranges: a range open at a window's start is,
per (thread, kind, nesting depth), the latest-starting one there; a range that starts inside a window
finds it by the latest window starting before it. Windows of one lane (a device's gaps, the blocking
calls of a thread) do not overlap, so each range meets at most one window per lane.
"""

from __future__ import annotations

import duckdb

from traceview.analysis.activity import BLOCKING_CALLS
from traceview.analysis.intervals import busy_islands_sql, with_prev_end_sql
from traceview.analysis.stage import Relation, Stage

_CONTEXT_COLUMNS = {
    "cpu_op": "the CPU op (ranges.kind 'cpu_op') on the thread that overlaps the window the most, the innermost "
              "of equals; NULL when none does",
    "issuing_op": "the op the program called: cpu_op, or when that is a generic copy (aten::copy_, "
                  "aten::_local_scalar_dense, aten::_to_copy, aten::to, ...) the outermost CPU op around it, so "
                  "aten::item > aten::_local_scalar_dense > aten::copy_ gives aten::item",
    "python_frame": "the Python frame (ranges.kind 'python_function') overlapping the window the most, innermost "
                    "of equals; NULL when the trace has none there",
    "user_range": "the NVTX or user annotation range (kinds 'nvtx', 'user_annotation') overlapping the window the "
                  "most, innermost of equals; NULL when none",
}

TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "idle_gap_context": (
        "GPU idle gap (gpu_idle_gaps) of at least 10 us with the host work under it, seen from the thread that "
        "launched the work ending the gap; gaps whose work has no launch call in the trace have NULL context. "
        "Shorter gaps are launch latency (a few us per launch) and are not explained one by one; idle_by_kind "
        "counts them",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "start_ns": "gap start (gpu_idle_gaps.start_ns)",
            "end_ns": "gap end",
            "dur_ns": "end_ns - start_ns",
            "step_id": "gpu_idle_gaps.step_id",
            "idle_kind": "gpu_idle_gaps.idle_kind",
            "next_op": "gpu_idle_gaps.name: the kernel or memop that ended the gap",
            "launch_call_id": "gpu_idle_gaps.call_id: its launch call",
            "launch_call": "that call's name",
            "host_call_id": "api_calls.call_id of the runtime or driver call of the process overlapping the gap the "
                            "most, calls of the launching thread first (the launch call itself when nothing else "
                            "ran there)",
            "host_call": "its name (cuLibraryLoadData, cudaStreamSynchronize, cudaLaunchKernel, ...)",
            "host_call_tid": "its thread",
            "host_call_dur_ns": "its whole duration",
            "host_call_overlap_ns": "the part of it inside the gap",
            "cpu_op_overlap_ns": "the part of cpu_op inside the gap",
            **_CONTEXT_COLUMNS,
        },
    ),
    "blocking_calls": (
        "host call that blocks until the GPU catches up (activity.BLOCKING_CALLS), priced by the GPU idle it "
        "exposes: TV204 and TV206 read this one price",
        {
            "rank": "trace rank",
            "call_id": "api_calls.call_id",
            "pid": "calling process",
            "tid": "calling thread",
            "name": "API name",
            "reason": "'synchronize', 'sync_memcpy' (memcpy without Async), 'pageable_dtoh' (async copy into "
                      "pageable host memory, run synchronously) or 'sync_memset' (memset without Async on pinned "
                      "or managed memory)",
            "memop_kind": "'memcpy' or 'memset' of the call's GPU op; NULL for a synchronize",
            "copy_kind": "the memcpy's direction; NULL otherwise",
            "bytes": "bytes copied or set; NULL when not recorded",
            "src_kind": "the memop's source memory kind",
            "dst_kind": "the memop's destination memory kind",
            "step_id": "the step whose host window holds the call's start (the latest-starting one); NULL outside "
                       "every step",
            "start_ns": "call start",
            "end_ns": "call end",
            "dur_ns": "time the host was blocked",
            "exposed_idle_ns": "GPU idle the call exposes: from when the rank's GPUs drained (or the call start, if "
                               "later) until they are next busy, within the step, less any part an earlier call "
                               "already exposed; 0 when the GPU was still busy as the call returned or, outside "
                               "steps, never ran again",
            "saving_ns": "min(exposed_idle_ns, dur_ns): the host could have spent its blocked time running ahead",
            "saving_in_gpu_span_ns": "saving_ns when the exposed idle lies inside the step window's GPU span (the "
                                     "rank ran work in the window before and after it: the budget's "
                                     "idle_sync_drain), 0 when it lies before the window's first or after its last "
                                     "GPU work (outside_gpu); outside every step: saving_ns",
            **_CONTEXT_COLUMNS,
        },
    ),
}

STAGE = Stage(
    name="host_context",
    doc="The host work under every GPU idle gap (runtime/driver call, CPU op, Python frame, NVTX or user range) "
        "and one price for every host-blocking call; TV201, TV204 and TV206 read these.",
    requires=("gpu_idle_gaps", "rank_busy_islands", "api_calls", "ranges", "memops", "steps"),
    creates=tuple(Relation(name, row, columns) for name, (row, columns) in TABLES.items()),
    run=lambda con, context: build_host_context(con),
)

# ATen ops that only move or convert data: a sync inside one is reported by the op that called it
GENERIC_COPY_OP = r"^aten::(copy_|_copy_from|_copy_from_and_resize|_local_scalar_dense|_to_copy|to|contiguous|clone)$"


# gaps shorter than this are launch latency: a trace of 2 M back-to-back kernels has 2 M of them
CONTEXT_MIN_GAP_NS = 10_000


def build_host_context(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _gaps AS
        SELECT rank, device_id, start_ns, end_ns, dur_ns, step_id, idle_kind, name AS next_op,
               call_id AS launch_call_id, pid, call_tid AS tid
        FROM gpu_idle_gaps WHERE dur_ns >= {CONTEXT_MIN_GAP_NS}
    """)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _blocking AS
        WITH called AS ({BLOCKING_CALLS}
        )
        -- the latest-starting step whose host window holds the call's start
        SELECT c.*, CASE WHEN c.start_ns < s.cpu_end_ns THEN s.step_id END AS step_id,
               CASE WHEN c.start_ns < s.cpu_end_ns THEN s.end_ns END AS step_end_ns,
               CASE WHEN c.start_ns < s.cpu_end_ns THEN s.start_ns END AS step_start_ns
        FROM called c
        ASOF LEFT JOIN steps s ON s.rank = c.rank AND c.start_ns >= s.cpu_start_ns
    """)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _windows AS
        SELECT rank, 'gap ' || device_id AS lane, end_ns AS wid, pid, tid, start_ns, end_ns
        FROM _gaps WHERE tid IS NOT NULL
        UNION ALL
        SELECT rank, 'call', call_id, pid, tid, start_ns, end_ns FROM _blocking
    """)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _range_context AS {_range_context_sql()}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _call_context AS {_host_call_sql()}")
    con.execute("""
        CREATE OR REPLACE TABLE idle_gap_context AS
        SELECT g.rank, g.device_id, g.start_ns, g.end_ns, g.dur_ns, g.step_id, g.idle_kind, g.next_op,
               g.launch_call_id, l.name AS launch_call,
               h.call_id AS host_call_id, h.name AS host_call, h.tid AS host_call_tid, h.dur_ns AS host_call_dur_ns,
               h.overlap_ns AS host_call_overlap_ns, x.cpu_op_overlap_ns,
               x.cpu_op, x.issuing_op, x.python_frame, x.user_range
        FROM _gaps g
        LEFT JOIN api_calls l ON l.rank = g.rank AND l.call_id = g.launch_call_id
        LEFT JOIN _call_context h ON h.rank = g.rank AND h.lane = 'gap ' || g.device_id AND h.wid = g.end_ns
        LEFT JOIN _range_context x ON x.rank = g.rank AND x.lane = 'gap ' || g.device_id AND x.wid = g.end_ns
        ORDER BY g.rank, g.device_id, g.start_ns
    """)
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
    for name in ("_gaps", "_blocking", "_windows", "_range_context", "_call_context"):
        con.execute(f"DROP TABLE {name}")


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
               CASE WHEN regexp_matches(op.b.name, '{GENERIC_COPY_OP}') THEN coalesce(op.top_op, op.b.name)
                    ELSE op.b.name END AS issuing_op,
               py.b.name AS python_frame, ur.b.name AS user_range
        FROM _windows w
        LEFT JOIN op ON op.rank = w.rank AND op.lane = w.lane AND op.wid = w.wid
        LEFT JOIN best py ON py.rank = w.rank AND py.lane = w.lane AND py.wid = w.wid AND py.cls = 'python_frame'
        LEFT JOIN best ur ON ur.rank = w.rank AND ur.lane = w.lane AND ur.wid = w.wid AND ur.cls = 'user_range'
    """


def _host_call_sql() -> str:
    """Per gap window: the API call of the process overlapping it the most, the launching thread's first.

    Runtime calls can enclose driver calls (cudaLaunchKernel around a lazy cuLibraryLoadData), so calls
    are split into outer ones and nested ones, each level looked up by its own ASOF join.
    """
    return """
        WITH w AS (SELECT * FROM _windows WHERE lane <> 'call'),
        c AS (
            SELECT rank, pid, tid, call_id, name, start_ns, end_ns, dur_ns,
                   coalesce(start_ns < max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY start_ns, call_id
                                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                            false) AS nested
            FROM api_calls
            WHERE (rank, pid) IN (SELECT rank, pid FROM w)
        ),
        levels AS (SELECT DISTINCT rank, pid, tid, nested FROM c),
        open_at_start AS (
            SELECT w.rank, w.lane, w.wid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
                   x.call_id, x.name, x.tid, x.start_ns, x.end_ns, x.dur_ns
            FROM (SELECT w.*, l.tid AS call_tid, l.nested FROM w JOIN levels l USING (rank, pid)) w
            ASOF JOIN c x ON x.rank = w.rank AND x.pid = w.pid AND x.tid = w.call_tid AND x.nested = w.nested
                         AND w.start_ns >= x.start_ns
            WHERE x.end_ns > w.start_ns
        ),
        started_inside AS (
            SELECT w.rank, w.lane, w.wid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
                   x.call_id, x.name, x.tid, x.start_ns, x.end_ns, x.dur_ns
            FROM (SELECT c.*, l.lane FROM c JOIN (SELECT DISTINCT rank, pid, lane FROM w) l USING (rank, pid)) x
            ASOF JOIN w ON w.rank = x.rank AND w.pid = x.pid AND w.lane = x.lane AND x.start_ns > w.start_ns
            WHERE x.start_ns < w.end_ns
        )
        SELECT rank, lane, wid, b.call_id, b.name, b.tid, b.dur_ns, b.overlap_ns
        FROM (
            SELECT rank, lane, wid,
                   arg_max(struct_pack(call_id := call_id, name := name, tid := tid, dur_ns := dur_ns,
                                       overlap_ns := (CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END) - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END)),
                           (tid = w_tid, (CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END) - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END), start_ns, -call_id)) AS b
            FROM (SELECT * FROM open_at_start UNION ALL SELECT * FROM started_inside)
            GROUP BY rank, lane, wid
        )
    """
