-- stage: idle_gaps
-- The idle gaps inside each device's active span, read off the timeline (`gpu_activity.prev_end_ns`), with the
-- launch call of the work that ended each and why the GPU waited for it; TV201, the step budget and the host
-- context read them.
-- requires: gpu_activity, kernels, memops, api_calls
-- creates: gpu_idle_gaps, idle_by_kind

-- table gpu_idle_gaps: one row per idle gap inside a device's active span: no kernel or memop on any of its streams
--   rank: trace rank
--   device_id: GPU ordinal
--   start_ns: when the device went idle (the end of all earlier work)
--   end_ns: when the activity that ended the gap started
--   dur_ns: end_ns - start_ns
--   kind: the ending activity's kind ('kernel' or 'memop')
--   activity_id: the ending activity's kernel_id or memop_id
--   name: the ending activity's name: a kernel's short_name (the full name when it has none), a memop's display
--     name
--   step_id: the ending activity's step
--   pid: the ending activity's process
--   correlation_id: the ending activity's correlation id
--   call_id: its launch call: a kernel's kernels.launch_call_id; a memop's (or a kernel's with none linked) the
--     earliest api_calls row of its correlation id; NULL when the trace has none
--   call_start_ns: when that launch call started on the host
--   call_tid: the thread that made the launch call
--   cause: unknown (no launch call in the trace), launch_overhead (the call started before the gap: queued work
--     started late), sync_wait (the launching thread sat in a host-blocking call, host_blocking_calls(), during the gap),
--     host_launch_late (the host issued the work only after the GPU ran dry)
--   idle_kind: the budget's name for the cause: 'host_wait' (host_launch_late), 'bubble' (launch_overhead: a
--     kernel-to-kernel bubble, the work was already queued), 'sync_drain' (sync_wait), 'unknown'
--
-- Each gap with the launch call of the work that ended it, and why the GPU waited for it. gpu_idle_gaps is a
-- table: the budget, the host context and idle_by_kind read every gap, so it is computed once.
-- The launch calls first, in a narrow temporary table of ids and times; the names and causes after. In one
-- statement DuckDB 2.0.1 joined the 2 M calls of the 2 M-kernel export against gaps carrying their names
-- while a materialized copy was held, and under a tight memory limit (400-700 MiB) it stopped, at random,
-- with "failed to pin block"; split, the statement completes at every limit and is no slower.
CREATE OR REPLACE TEMP TABLE _gap_calls AS
WITH ended AS NOT MATERIALIZED (
    SELECT rank, device_id, prev_end_ns AS start_ns, start_ns AS end_ns, start_ns - prev_end_ns AS dur_ns,
           kind, activity_id, step_id, pid, correlation_id, launch_call_id
    FROM gpu_activity WHERE start_ns > prev_end_ns
),
first_ids AS (
    -- work with no linked launch (memops, a kernel whose correlation id holds no launch call): the first
    -- call of its correlation id, found once per id: call ids run in start order (docs/schema.md), so
    -- the first is the lowest id
    SELECT a.rank, a.pid, a.correlation_id, min(a.call_id) AS call_id
    FROM api_calls a
    SEMI JOIN (SELECT rank, pid, correlation_id FROM ended WHERE kind = 'memop'
               UNION ALL
               SELECT rank, pid, correlation_id FROM kernels WHERE launch_call_id IS NULL) g
      ON a.rank = g.rank AND a.pid = g.pid AND a.correlation_id = g.correlation_id
    GROUP BY a.rank, a.pid, a.correlation_id
)
-- a kernel brings the launch call ingest linked it to (gpu_activity.launch_call_id)
SELECT g.* EXCLUDE (launch_call_id), a.call_id, a.start_ns AS call_start_ns, a.tid AS call_tid
FROM ended g
LEFT JOIN first_ids f ON g.launch_call_id IS NULL AND f.rank = g.rank AND f.pid = g.pid
                     AND f.correlation_id = g.correlation_id
LEFT JOIN api_calls a ON a.rank = g.rank AND a.call_id = coalesce(g.launch_call_id, f.call_id);

CREATE OR REPLACE TABLE gpu_idle_gaps AS
WITH blocking AS (SELECT rank, pid, tid, call_id, start_ns, end_ns FROM host_blocking_calls()),
reach AS (
    -- per thread, at each blocking call's start: the latest end of the thread's blocking calls starting then or
    -- before (RANGE: calls starting together are one point)
    SELECT rank, pid, tid, start_ns,
           max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY start_ns
                             RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS reach_ns
    FROM blocking
),
late AS (  -- only a gap whose launch came after the GPU went idle can be a sync wait (`caused` below)
    SELECT rank, device_id, kind, activity_id, pid, call_tid, call_id, start_ns, end_ns
    FROM _gap_calls WHERE call_start_ns >= start_ns
),
own AS (  -- the gaps whose own launch call blocks and overlaps them (a pageable copy issued in the gap)
    SELECT g.* FROM late g JOIN blocking b ON b.rank = g.rank AND b.call_id = g.call_id
    WHERE b.start_ns < g.end_ns AND b.end_ns > g.start_ns
),
synced AS (
    -- the gaps during which the launching thread sat in a host-blocking call other than the gap's own launch
    -- (a synchronize, a blocking memcpy). A blocking call overlaps a gap when it starts before the gap ends and
    -- ends after it starts: the calls starting before the gap's end reach past its start. An ASOF join reads that
    -- reach, O(n log n) where a join on the thread compared every gap with every blocking call of its thread;
    -- the few gaps whose own launch is such a call are checked call by call, that call left out
    SELECT g.rank, g.device_id, g.kind, g.activity_id
    FROM late g
    ASOF JOIN reach r ON r.rank = g.rank AND r.pid = g.pid AND r.tid = g.call_tid AND g.end_ns > r.start_ns
    WHERE r.reach_ns > g.start_ns
      AND (g.rank, g.device_id, g.kind, g.activity_id) NOT IN (SELECT rank, device_id, kind, activity_id FROM own)
    UNION ALL
    SELECT DISTINCT g.rank, g.device_id, g.kind, g.activity_id
    FROM own g
    JOIN blocking s ON s.rank = g.rank AND s.pid = g.pid AND s.tid = g.call_tid AND s.call_id <> g.call_id
     AND s.start_ns < g.end_ns AND s.end_ns > g.start_ns
),
named AS NOT MATERIALIZED (
    -- the name is looked up per gap, not carried on every activity; a kernel's one name is chosen
    -- before the join, which then carries one string a kernel, not two
    SELECT g.rank, g.device_id, g.start_ns, g.end_ns, g.dur_ns, g.kind, g.activity_id,
           CASE g.kind WHEN 'kernel' THEN k.name ELSE m.name END AS name,
           g.step_id, g.pid, g.correlation_id, g.call_id, g.call_start_ns, g.call_tid,
           y.activity_id IS NOT NULL AS in_sync
    FROM _gap_calls g
    LEFT JOIN (SELECT rank, kernel_id, coalesce(short_name, name) AS name FROM kernels) k
      ON g.kind = 'kernel' AND k.rank = g.rank AND k.kernel_id = g.activity_id
    LEFT JOIN memops m ON g.kind = 'memop' AND m.rank = g.rank AND m.memop_id = g.activity_id
    LEFT JOIN synced y ON y.rank = g.rank AND y.device_id = g.device_id AND y.kind = g.kind
                      AND y.activity_id = g.activity_id
),
caused AS NOT MATERIALIZED (
    SELECT * EXCLUDE (in_sync),
           CASE
               WHEN call_start_ns IS NULL THEN 'unknown'
               -- issued before the GPU went idle: launch/queue latency (a slow launch call, a
               -- cross-stream wait, a graph upload), not a late host
               WHEN call_start_ns < start_ns THEN 'launch_overhead'
               WHEN in_sync THEN 'sync_wait'
               ELSE 'host_launch_late'
           END AS cause
    FROM named
)
SELECT *, CASE cause WHEN 'host_launch_late' THEN 'host_wait' WHEN 'launch_overhead' THEN 'bubble'
                     WHEN 'sync_wait' THEN 'sync_drain' ELSE 'unknown' END AS idle_kind
FROM caused;
DROP TABLE _gap_calls;

-- table idle_by_kind: one row per (rank, device_id, step_id, idle_kind) with any idle gap: the device's idle split by what kept it idle
--   rank: trace rank
--   device_id: GPU ordinal
--   step_id: the step of the activity that ended the gaps (gpu_idle_gaps.step_id); NULL outside every step
--   idle_kind: gpu_idle_gaps.idle_kind
--   gaps: idle gaps of this kind
--   idle_ns: Σ their dur_ns
--   largest_gap_ns: the longest of them
CREATE OR REPLACE TABLE idle_by_kind AS
SELECT rank, device_id, step_id, idle_kind, count(*) AS gaps, sum(dur_ns)::BIGINT AS idle_ns,
       max(dur_ns) AS largest_gap_ns
FROM gpu_idle_gaps
GROUP BY ALL
ORDER BY rank, device_id, step_id NULLS LAST, idle_kind;
