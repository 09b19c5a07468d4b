"""Device activity: one ordered timeline of every kernel and memop per GPU, its idle gaps and their cause.

Rules and reports ask the same questions of a GPU's timeline (when was it busy, where did it sit idle,
who ended each gap, was communication hidden behind compute), so the answers are built once, here,
after kernels carry their category and step. Every interval fact rests on the one running-max window
of analysis/intervals.py; nothing below writes it again.
"""

from __future__ import annotations

import duckdb

from traceview.analysis.intervals import busy_islands_sql, busy_time_sql, with_prev_end_sql
from traceview.analysis.stage import Relation, Stage

TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "gpu_activity": (
        "kernel or memop (prev_end_ns orders them per (rank, device_id) by start)",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "stream_id": "stream it ran on",
            "kind": "'kernel' or 'memop'",
            "activity_id": "kernels.kernel_id or memops.memop_id",
            "start_ns": "start on the GPU",
            "end_ns": "end on the GPU",
            "dur_ns": "end_ns - start_ns",
            "pid": "process that issued it",
            "correlation_id": "id linking it to its launch or API call, unique per (rank, pid)",
            "step_id": "the step whose launch call issued it (steps.step_id); NULL outside every step",
            "launch_call_id": "kernels: api_calls.call_id of the launch call; NULL for memops",
            "launch_kind": "kernels: 'graph' or 'eager'; NULL for memops",
            "category": "kernels: kernels.category; NULL for memops",
            "comm_family": "communication kernels: custom_all_reduce, nccl_all_reduce, all_gather, reduce_scatter, "
                           "all_to_all (collective and expert-parallel dispatch/combine), send_recv, broadcast or "
                           "other_comm; NULL otherwise",
            "prev_end_ns": "latest end among the device's activities that started before this one (all streams); "
                           "NULL for the first. start_ns > prev_end_ns: this activity ended an idle gap",
        },
    ),
    "gpu_idle_gaps": (
        "idle gap inside a device's active span: no kernel or memop on any of its streams",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "start_ns": "when the device went idle (the end of all earlier work)",
            "end_ns": "when the activity that ended the gap started",
            "dur_ns": "end_ns - start_ns",
            "kind": "the ending activity's kind ('kernel' or 'memop')",
            "activity_id": "the ending activity's kernel_id or memop_id",
            "name": "the ending activity's name: a kernel's short_name (the full name when it has none), a memop's "
                    "display name",
            "step_id": "the ending activity's step",
            "pid": "the ending activity's process",
            "correlation_id": "the ending activity's correlation id",
            "call_id": "its launch call (api_calls.call_id, the earliest if the correlation id repeats); "
                       "NULL when the trace has none",
            "call_start_ns": "when that launch call started on the host",
            "call_tid": "the thread that made the launch call",
            "cause": "unknown (no launch call in the trace), launch_overhead (the call started before the gap: "
                     "queued work started late), sync_wait (the launching thread sat in a synchronizing call "
                     "during the gap), host_launch_late (the host issued the work only after the GPU ran dry)",
        },
    ),
    "device_activity": (
        "(rank, device_id) that ran any kernel or memop",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "first_ns": "start of its first activity",
            "last_ns": "end of its last activity",
            "span_ns": "last_ns - first_ns: the active span",
            "busy_ns": "length of the union of its kernel and memop intervals (overlaps counted once)",
            "kernel_ns": "Σ kernel durations (overlapping kernels counted each); NULL on a device that ran no kernel",
            "kernel_busy_ns": "length of the union of its kernel intervals; NULL on a device that ran no kernel",
            "idle_ns": "Σ gpu_idle_gaps.dur_ns: span_ns - busy_ns",
            "gaps": "idle gaps inside the span",
            "comm_kernels": "communication kernels it ran; NULL when none",
            "comm_ns": "length of the union of its communication kernels; NULL when none",
            "comm_exposed_ns": "the part of comm_ns with no non-communication kernel running beside it",
        },
    ),
    "busiest_device": (
        "trace at most: the (rank, device_id) that ran the most kernel time (ties: lowest rank, then "
        "device_id); none when the trace has no kernels",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "name": "devices.name",
            "spec_id": "devices.spec_id: the matched hardware/ file",
            "spec_name": "gpu_specs.name of that spec",
            "hbm_tbps": "the spec's HBM bandwidth, 10¹² bytes/s",
            "sm_count": "devices.sm_count",
            "memory_bytes": "devices.memory_bytes",
            "kernel_time_ns": "Σ kernel durations on this device",
            "devices_used": "distinct (rank, device_id) that ran kernels",
        },
    ),
    "rank_busy_islands": (
        "maximal busy interval of a rank: the union of its kernels and memops over every device",
        {
            "rank": "trace rank",
            "start_ns": "the island's first start",
            "end_ns": "the island's last end",
        },
    ),
    "comm_islands": (
        "maximal interval of communication kernels per device, step and family, with the part no compute "
        "kernel ran beside",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "step_id": "the step that launched the kernels; NULL outside every step",
            "family": "gpu_activity.comm_family, or 'all': every family of the step merged",
            "start_ns": "the island's first start",
            "end_ns": "the island's last end",
            "comm_ns": "end_ns - start_ns",
            "exposed_ns": "comm_ns minus its overlap with the union of the device's non-communication kernels "
                          "(any step)",
        },
    ),
}

# computed when a rule or report reads them, so a filter on them (TV201: long gaps only) is pushed down
VIEWS = ("gpu_idle_gaps", "busiest_device", "comm_islands")

STAGE = Stage(
    name="activity",
    doc="Every kernel and memop on one timeline per GPU: idle gaps with their cause, busy unions, the busiest "
        "device, and communication less the compute beside it; rules TV201, TV203, TV204, TV401 and the "
        "report read these instead of windows of their own.",
    requires=("kernels", "memops", "api_calls", "devices", "gpu_specs"),
    creates=tuple(Relation(name, row, columns, view=name in VIEWS)
                  for name, (row, columns) in TABLES.items()),
    run=lambda con, context: build_activity(con),
)

# Communication families by kernel name (`n.name`), matched once per distinct communication kernel name.
_COMM_FAMILY = r"""
    CASE
        -- one-shot/two-shot kernels of vLLM/SGLang/TRT-LLM custom all-reduce (peer-to-peer buffers, not NCCL)
        WHEN regexp_matches(n.name, '(?i)cross_device_reduce|one_?shot|two_?shot|quick_?reduce|custom_?ar([^a-z]|$)|lamport|allreduce_fusion')
            THEN 'custom_all_reduce'
        WHEN regexp_matches(n.name, '(?i)all_?reduce') THEN 'nccl_all_reduce'
        WHEN regexp_matches(n.name, '(?i)all_?gather') THEN 'all_gather'
        WHEN regexp_matches(n.name, '(?i)reduce_?scatter') THEN 'reduce_scatter'
        -- collective all-to-all, and expert-parallel dispatch/combine (DeepEP and its forks' <lib>_ep /
        -- intranode / internode_ll namespaces, pplx, mori, TRT-LLM moeA2A, a2a_* kernels)
        WHEN regexp_matches(n.name, '(?i)all_?to_?all|deep_?ep|(^|[^a-z])(([a-z0-9]+_)?ep|pplx|uccl|mori)::|(intra|inter)_?node(_ll[a-z0-9_]*)?::|moe_?a2a|(^|[^a-z])a2a_|_token_(intra|inter)_?node')
            THEN 'all_to_all'
        WHEN regexp_matches(n.name, '(?i)send|recv') THEN 'send_recv'
        WHEN regexp_matches(n.name, '(?i)broadcast') THEN 'broadcast'
        ELSE 'other_comm'
    END
"""

_COMM = "SELECT * FROM gpu_activity WHERE kind = 'kernel' AND category = 'communication'"


def build_activity(con: duckdb.DuckDBPyConnection) -> None:
    """Create every relation in TABLES; needs kernels.category/step_id and memops.step_id."""
    _build_gpu_activity(con)
    _build_idle_gaps(con)
    _build_device_activity(con)
    _build_busiest_device(con)
    con.execute(f"""
        CREATE OR REPLACE TABLE rank_busy_islands AS
        SELECT rank, lo AS start_ns, hi AS end_ns
        FROM ({busy_islands_sql("SELECT rank, start_ns, end_ns FROM gpu_activity", ("rank",))})
        ORDER BY rank, start_ns
    """)
    _build_comm_islands(con)


def _build_gpu_activity(con: duckdb.DuckDBPyConnection) -> None:
    activity = f"""
        WITH families AS (
            SELECT n.name, {_COMM_FAMILY} AS comm_family
            FROM (SELECT DISTINCT name FROM kernels WHERE category = 'communication') n
        )
        SELECT k.rank, k.device_id, k.stream_id, 'kernel' AS kind, k.kernel_id AS activity_id,
               k.start_ns, k.end_ns, k.dur_ns, k.pid, k.correlation_id, k.step_id,
               k.launch_call_id, k.launch_kind, k.category, f.comm_family
        FROM kernels k LEFT JOIN families f ON k.category = 'communication' AND f.name IS NOT DISTINCT FROM k.name
        UNION ALL
        SELECT rank, device_id, stream_id, 'memop', memop_id, start_ns, end_ns, dur_ns, pid, correlation_id,
               step_id, NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR
        FROM memops
    """
    con.execute(f"""
        CREATE OR REPLACE TABLE gpu_activity AS
        SELECT * FROM ({with_prev_end_sql(activity, ("rank", "device_id"))})
    """)


def _build_idle_gaps(con: duckdb.DuckDBPyConnection) -> None:
    """Each gap with the launch call of the work that ended it, and why the GPU waited for it."""
    con.execute("""
        CREATE OR REPLACE VIEW gpu_idle_gaps AS
        WITH ended AS NOT MATERIALIZED (
            SELECT rank, device_id, prev_end_ns AS start_ns, start_ns AS end_ns, start_ns - prev_end_ns AS dur_ns,
                   kind, activity_id, step_id, pid, correlation_id
            FROM gpu_activity WHERE start_ns > prev_end_ns
        ),
        gaps AS NOT MATERIALIZED (
            -- the name is looked up per gap (after any filter on the gaps), not carried on every activity
            SELECT g.rank, g.device_id, g.start_ns, g.end_ns, g.dur_ns, g.kind, g.activity_id,
                   CASE g.kind WHEN 'kernel' THEN coalesce(k.short_name, k.name) ELSE m.name END AS name,
                   g.step_id, g.pid, g.correlation_id
            FROM ended g
            LEFT JOIN kernels k ON g.kind = 'kernel' AND k.rank = g.rank AND k.kernel_id = g.activity_id
            LEFT JOIN memops m ON g.kind = 'memop' AND m.rank = g.rank AND m.memop_id = g.activity_id
        ),
        launched AS NOT MATERIALIZED (
            -- the first call of the work's correlation id; the gap's columns are the group, so a filter on
            -- them (TV201 reads only long gaps) runs before the join
            SELECT g.rank, g.device_id, g.start_ns, g.end_ns, g.dur_ns, g.kind, g.activity_id, g.name, g.step_id,
                   g.pid, g.correlation_id,
                   arg_min(struct_pack(call_id := a.call_id, start_ns := a.start_ns, tid := a.tid),
                           (a.start_ns, a.call_id)) AS c
            FROM gaps g
            LEFT JOIN api_calls a ON a.rank = g.rank AND a.pid = g.pid AND a.correlation_id = g.correlation_id
            GROUP BY ALL
        ),
        called AS NOT MATERIALIZED (
            SELECT * EXCLUDE (c), c.call_id, c.start_ns AS call_start_ns, c.tid AS call_tid FROM launched
        ),
        waited AS NOT MATERIALIZED (
            -- whether the launching thread sat in a synchronize / blocking memcpy during the gap
            SELECT g.*, count(s.call_id) > 0 AS in_sync
            FROM called g
            LEFT JOIN api_calls s
              ON s.rank = g.rank AND s.pid = g.pid AND s.tid = g.call_tid AND s.is_sync AND s.call_id <> g.call_id
             AND s.start_ns < g.end_ns AND s.end_ns > g.start_ns
            GROUP BY ALL
        )
        SELECT * EXCLUDE (in_sync),
               CASE
                   WHEN call_start_ns IS NULL THEN 'unknown'
                   -- issued before the GPU went idle: launch/queue latency (a slow launch call, a
                   -- cross-stream wait, a graph upload), not a late host
                   WHEN call_start_ns < start_ns THEN 'launch_overhead'
                   WHEN in_sync THEN 'sync_wait'
                   ELSE 'host_launch_late'
               END AS cause
        FROM waited
    """)


def _build_device_activity(con: duckdb.DuckDBPyConnection) -> None:
    """Per device: islands and gaps partition the span, so busy time is the span less its gaps."""
    device = ("rank", "device_id")
    kernel_busy = busy_time_sql("SELECT rank, device_id, start_ns, end_ns FROM kernels", device)
    comm_islands = busy_islands_sql(f"SELECT rank, device_id, start_ns, end_ns FROM ({_COMM})", device)
    con.execute(f"""
        CREATE OR REPLACE TABLE device_activity AS
        WITH comm AS (
            SELECT rank, device_id, sum(hi - lo)::BIGINT AS comm_ns, sum(exposed_ns)::BIGINT AS comm_exposed_ns
            FROM ({_comm_exposure_sql(comm_islands, device)}) GROUP BY rank, device_id
        ),
        comm_kernels AS (SELECT rank, device_id, count(*) AS comm_kernels FROM ({_COMM}) GROUP BY rank, device_id),
        spans AS (
            SELECT rank, device_id, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
                   sum(CASE WHEN start_ns > prev_end_ns THEN start_ns - prev_end_ns ELSE 0 END)::BIGINT AS idle_ns,
                   count(*) FILTER (WHERE start_ns > prev_end_ns) AS gaps,
                   sum(dur_ns) FILTER (WHERE kind = 'kernel')::BIGINT AS kernel_ns
            FROM gpu_activity GROUP BY rank, device_id
        )
        SELECT s.rank, s.device_id, s.first_ns, s.last_ns, s.last_ns - s.first_ns AS span_ns,
               s.last_ns - s.first_ns - s.idle_ns AS busy_ns, s.kernel_ns, k.busy_ns AS kernel_busy_ns,
               s.idle_ns, s.gaps, n.comm_kernels, c.comm_ns, c.comm_exposed_ns
        FROM spans s
        LEFT JOIN ({kernel_busy}) k ON k.rank = s.rank AND k.device_id = s.device_id
        LEFT JOIN comm c ON c.rank = s.rank AND c.device_id = s.device_id
        LEFT JOIN comm_kernels n ON n.rank = s.rank AND n.device_id = s.device_id
        ORDER BY s.rank, s.device_id
    """)


def _build_busiest_device(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
        CREATE OR REPLACE VIEW busiest_device AS
        SELECT d.rank, d.device_id, d.name, d.spec_id, s.name AS spec_name, s.hbm_bytes_per_s / 1e12 AS hbm_tbps,
               d.sm_count, d.memory_bytes, k.kernel_time_ns,
               count(*) OVER () AS devices_used
        FROM (SELECT rank, device_id, sum(dur_ns)::BIGINT AS kernel_time_ns FROM kernels GROUP BY rank, device_id) k
        JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
        ORDER BY k.kernel_time_ns DESC, d.rank, d.device_id
        LIMIT 1
    """)


def _comm_exposure_sql(comm_islands: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., lo, hi, exposed_ns): each communication island less the compute beside it.

    Compute is the union of the device's non-communication kernels, whatever step launched them. The
    overlap of [lo, hi) with those disjoint islands is C(hi) - C(lo), where C(t) is the compute-busy
    time before t, read with ASOF joins on the islands' running sum: O(n log n), where a range join
    would compare every pair.
    """
    # only on devices that communicate: elsewhere there is nothing to set the compute against
    compute = ("SELECT rank, device_id, start_ns, end_ns FROM gpu_activity "
               "WHERE kind = 'kernel' AND category <> 'communication' AND (rank, device_id) IN "
               f"(SELECT DISTINCT rank, device_id FROM ({_COMM}))")
    key_list = ", ".join(keys)
    return f"""
        WITH compute_cum AS (
            -- compute-busy time before each island (0 before the first: nothing ran)
            SELECT rank, device_id, lo, hi,
                   coalesce(sum(hi - lo) OVER (PARTITION BY rank, device_id ORDER BY lo
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
            FROM ({busy_islands_sql(compute, ("rank", "device_id"))})
        ),
        busy_before_hi AS (
            SELECT c.*, CASE WHEN k.lo IS NULL THEN 0  -- no compute island starts before hi
                         ELSE k.before + CASE WHEN c.hi >= k.hi THEN k.hi - k.lo ELSE c.hi - k.lo END END AS c_hi
            FROM ({comm_islands}) c
            ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.hi
        ),
        busy_before_lo AS (
            SELECT c.*, CASE WHEN k.lo IS NULL THEN 0  -- no compute island starts before lo
                         ELSE k.before + CASE WHEN c.lo >= k.hi THEN k.hi - k.lo ELSE c.lo - k.lo END END AS c_lo
            FROM busy_before_hi c
            ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.lo
        )
        SELECT {key_list}, lo, hi, hi - lo - (c_hi - c_lo) AS exposed_ns FROM busy_before_lo
    """



def _build_comm_islands(con: duckdb.DuckDBPyConnection) -> None:
    """Per step and family, and per step across families ('all'), as TV401 reports them."""
    comm = f"""
        SELECT rank, device_id, step_id, comm_family AS family, start_ns, end_ns FROM ({_COMM})
        UNION ALL
        SELECT rank, device_id, step_id, 'all', start_ns, end_ns FROM ({_COMM})
    """
    keys = ("rank", "device_id", "step_id", "family")
    con.execute(f"""
        CREATE OR REPLACE VIEW comm_islands AS
        SELECT rank, device_id, step_id, family, lo AS start_ns, hi AS end_ns, hi - lo AS comm_ns, exposed_ns
        FROM ({_comm_exposure_sql(busy_islands_sql(comm, keys), keys)})
    """)
