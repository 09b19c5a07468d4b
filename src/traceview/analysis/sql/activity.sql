-- stage: activity
-- Every kernel and memop on one timeline per GPU: idle gaps with their cause, busy unions, the busiest device, and
-- communication less the compute beside it; rules TV201, TV203, TV204, TV401 and the report read these instead of
-- windows of their own. How far the host ran ahead of each stream is the launch_queue stage's.
-- requires: kernels, memops, api_calls, devices, gpu_specs
-- creates: gpu_activity, gpu_idle_gaps, idle_by_kind, device_activity, busiest_device, one_device_ranks,
--     rank_busy_islands, comm_islands
--
-- Needs kernels.category/step_id and memops.step_id. Every interval fact rests on the one running-max window of
-- analysis/intervals.py, invoked here as its macros (with_prev_end, busy_islands, busy_time, ...; the loader
-- expands each into the helper's text): `prev_end_ns` is the latest end among the intervals of a key that start
-- before this one (max(end_ns) over the rows before it in start_ns, end_ns order); an interval starting past it
-- opens a busy island (and ends an idle gap), and an island ends where the next island's opener says the work
-- before it ended (its prev_end_ns), the last at the key's latest end.

-- Host calls that block the host until the GPU catches up, one row per call (rank, call_id, pid, tid, name,
-- start_ns, end_ns, dur_ns, reason, memop columns). The one definition: idle-gap causes (sync_wait) and
-- analysis/host_context.py's blocking_calls (TV204, TV206) read it.
--   'synchronize'   device/stream/event/context synchronize (api_calls.is_sync, not a memcpy)
--   'sync_memcpy'   a memcpy API without Async (api_calls.is_sync): it waits for the stream, then the copy
--   'pageable_dtoh' an async copy from the device into pageable host memory, which CUDA runs synchronously
--                   (torch .item(), .cpu(), .tolist())
--   'sync_memset'   a memset without Async on pinned host or managed memory
CREATE OR REPLACE MACRO host_blocking_calls() AS TABLE
WITH issued AS (
    -- each call's memop (the first if its correlation id repeats)
    SELECT a.rank, a.call_id, a.pid, a.tid, a.name, a.start_ns, a.end_ns, a.dur_ns, a.is_sync,
           arg_min(struct_pack(kind := m.kind, copy_kind := m.copy_kind, bytes := m.bytes,
                               src_kind := m.src_kind, dst_kind := m.dst_kind), m.memop_id) AS m
    FROM api_calls a
    LEFT JOIN memops m ON m.rank = a.rank AND m.pid = a.pid AND m.correlation_id = a.correlation_id
    WHERE a.is_sync OR m.memop_id IS NOT NULL
    GROUP BY ALL
)
SELECT rank, call_id, pid, tid, name, start_ns, end_ns, dur_ns,
       CASE WHEN is_sync AND m.kind = 'memcpy' THEN 'sync_memcpy'
            WHEN is_sync THEN 'synchronize'
            WHEN m.kind = 'memcpy' THEN 'pageable_dtoh'
            ELSE 'sync_memset' END AS reason,
       m.kind AS memop_kind, m.copy_kind, m.bytes, m.src_kind, m.dst_kind
FROM issued
WHERE is_sync
   OR (m.kind = 'memcpy' AND m.copy_kind = 'DtoH' AND m.dst_kind = 'Pageable')
   OR (m.kind = 'memset' AND NOT regexp_matches(name, '(?i)async') AND m.dst_kind IN ('Pinned', 'Managed'));

-- table gpu_activity: one row per kernel or memop (prev_end_ns orders them per (rank, device_id) by start, end, kind and id)
--   rank: trace rank
--   device_id: GPU ordinal
--   stream_id: stream it ran on
--   kind: 'kernel' or 'memop'
--   activity_id: kernels.kernel_id or memops.memop_id
--   start_ns: start on the GPU
--   end_ns: end on the GPU
--   dur_ns: end_ns - start_ns
--   pid: process that issued it
--   correlation_id: id linking it to its launch or API call, unique per (rank, pid)
--   step_id: the step whose launch call issued it (steps.step_id); NULL outside every step
--   launch_call_id: kernels: api_calls.call_id of the launch call; NULL for memops
--   launch_kind: kernels: 'graph' or 'eager'; NULL for memops
--   category: kernels: kernels.category; NULL for memops
--   comm_family: communication kernels: custom_all_reduce, nccl_all_reduce, all_gather, reduce_scatter, all_to_all
--     (collective and expert-parallel dispatch/combine), send_recv, broadcast or other_comm; NULL otherwise
--   prev_end_ns: latest end among the device's activities before this one (all streams) in the order start_ns,
--     end_ns, kind, activity_id; NULL for the first. start_ns > prev_end_ns: this activity ended an idle gap (of
--     work that starts and ends together, the kernel before a memop, the lower id first, so every run names the
--     same one)
CREATE OR REPLACE TABLE gpu_activity AS
WITH a AS (
    WITH families AS (
        -- communication families by kernel name, matched once per distinct communication kernel name
        SELECT n.name,
               CASE
                   -- one-shot/two-shot kernels of vLLM/SGLang/TRT-LLM custom all-reduce (peer-to-peer buffers,
                   -- not NCCL)
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
               END AS comm_family
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
),
w AS (
    -- the window sorts only what it orders by (a window carries every column it is given, the kernels' strings
    -- too) and the rest joins on the activity's id: 2 M-kernel export 0.73 -> 0.55 s
    with_prev_end!((
        SELECT rank, device_id, 'kernel' AS kind, kernel_id AS activity_id, start_ns, end_ns FROM kernels
        UNION ALL
        SELECT rank, device_id, 'memop', memop_id, start_ns, end_ns FROM memops
    ), (rank, device_id), (kind, activity_id))
)
SELECT a.*, w.prev_end_ns FROM a JOIN w USING (rank, kind, activity_id);

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
WITH synced AS (
    -- the gaps during which the launching thread sat in a host-blocking call (a synchronize, a
    -- blocking memcpy): few, so found by an inner join and marked on the rest by key
    SELECT DISTINCT g.rank, g.device_id, g.kind, g.activity_id
    FROM _gap_calls g
    JOIN host_blocking_calls() s
      ON s.rank = g.rank AND s.pid = g.pid AND s.tid = g.call_tid AND s.call_id <> g.call_id
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

-- table device_activity: one row per (rank, device_id) that ran any kernel or memop
--   rank: trace rank
--   device_id: GPU ordinal
--   first_ns: start of its first activity
--   last_ns: end of its last activity
--   span_ns: last_ns - first_ns: the active span
--   busy_ns: length of the union of its kernel and memop intervals (overlaps counted once)
--   kernel_ns: Σ kernel durations (overlapping kernels counted each); NULL on a device that ran no kernel
--   kernel_busy_ns: length of the union of its kernel intervals; NULL on a device that ran no kernel
--   idle_ns: Σ gpu_idle_gaps.dur_ns: span_ns - busy_ns
--   gaps: idle gaps inside the span
--   comm_kernels: communication kernels it ran; NULL when none
--   comm_ns: length of the union of its communication kernels; NULL when none
--   comm_exposed_ns: the part of comm_ns with no non-communication kernel running beside it
--
-- Per device: islands and gaps partition the span, so busy time is the span less its gaps. Each communication
-- island is set against the compute beside it: the union of the device's non-communication kernels, whatever step
-- launched them (only on devices that communicate: elsewhere there is nothing to set the compute against). The
-- overlap of [lo, hi) with those disjoint islands is C(hi) - C(lo), where C(t) is the compute-busy time before t:
-- the `before` of the last compute island starting at or before t, plus the part of that island before t (0 when
-- none starts before t: nothing ran, a true zero, not unknown), read with an ASOF join.
CREATE OR REPLACE TABLE device_activity AS
WITH comm_activity AS NOT MATERIALIZED (
    SELECT * FROM gpu_activity WHERE kind = 'kernel' AND category = 'communication'
),
comm AS (
    SELECT rank, device_id, sum(hi - lo)::BIGINT AS comm_ns, sum(exposed_ns)::BIGINT AS comm_exposed_ns
    FROM (
        WITH compute_cum AS (
            -- the compute islands, each with the compute-busy time of the islands before it
            islands_with_time_before!((SELECT rank, device_id, start_ns, end_ns FROM gpu_activity
                                       WHERE kind = 'kernel' AND category <> 'communication'
                                         AND (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM comm_activity)),
                                      (rank, device_id))
        ),
        busy_before_hi AS (
            SELECT c.*, busy_before!(k, c.hi) AS c_hi
            FROM (
                -- the communication islands
                busy_islands!((SELECT rank, device_id, start_ns, end_ns FROM comm_activity), (rank, device_id))
            ) c
            ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.hi
        ),
        busy_before_lo AS (
            SELECT c.*, busy_before!(k, c.lo) AS c_lo
            FROM busy_before_hi c
            ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.lo
        )
        SELECT rank, device_id, lo, hi, hi - lo - (c_hi - c_lo) AS exposed_ns FROM busy_before_lo
    ) GROUP BY rank, device_id
),
comm_kernels AS (SELECT rank, device_id, count(*) AS comm_kernels FROM comm_activity GROUP BY rank, device_id),
spans AS (
    SELECT rank, device_id, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
           sum(CASE WHEN start_ns > prev_end_ns THEN start_ns - prev_end_ns ELSE 0 END)::BIGINT AS idle_ns,
           count(*) FILTER (WHERE start_ns > prev_end_ns) AS gaps,
           sum(dur_ns) FILTER (WHERE kind = 'kernel')::BIGINT AS kernel_ns,
           count(*) FILTER (WHERE kind = 'memop') AS memops
    FROM gpu_activity GROUP BY rank, device_id
),
kernel_busy AS (
    -- only where memops share the timeline do kernels alone need a union of their own. No islands needed: in
    -- start order, the part of an interval not covered before it is what lies past prev_end_ns, and those parts
    -- sum to the union
    busy_time!((SELECT rank, device_id, start_ns, end_ns FROM kernels
                WHERE (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM memops)), (rank, device_id))
)
SELECT s.rank, s.device_id, s.first_ns, s.last_ns, s.last_ns - s.first_ns AS span_ns,
       s.last_ns - s.first_ns - s.idle_ns AS busy_ns, s.kernel_ns,
       CASE WHEN s.memops = 0 AND s.device_id IS NOT NULL THEN s.last_ns - s.first_ns - s.idle_ns
            ELSE k.busy_ns END AS kernel_busy_ns,
       s.idle_ns, s.gaps, n.comm_kernels, c.comm_ns, c.comm_exposed_ns
FROM spans s
LEFT JOIN kernel_busy k ON k.rank = s.rank AND k.device_id = s.device_id
LEFT JOIN comm c ON c.rank = s.rank AND c.device_id = s.device_id
LEFT JOIN comm_kernels n ON n.rank = s.rank AND n.device_id = s.device_id
ORDER BY s.rank, s.device_id;

-- view busiest_device: one row per trace at most: the (rank, device_id) that ran the most kernel time (ties: lowest rank, then device_id); none when the trace has no kernels
--   rank: trace rank
--   device_id: GPU ordinal
--   name: devices.name
--   spec_id: devices.spec_id: the matched hardware/ file
--   spec_name: gpu_specs.name of that spec
--   hbm_tbps: the spec's HBM bandwidth, 10¹² bytes/s
--   sm_count: devices.sm_count
--   memory_bytes: devices.memory_bytes
--   kernel_time_ns: Σ kernel durations on this device
--   devices_used: distinct (rank, device_id) that ran kernels
--
-- A view (as comm_islands): computed when a rule or report reads it, so a filter on it is pushed down.
CREATE OR REPLACE VIEW busiest_device AS
SELECT d.rank, d.device_id, d.name, d.spec_id, s.name AS spec_name, s.hbm_bytes_per_s / 1e12 AS hbm_tbps,
       d.sm_count, d.memory_bytes, k.kernel_time_ns,
       count(*) OVER () AS devices_used
FROM (SELECT rank, device_id, sum(dur_ns)::BIGINT AS kernel_time_ns FROM kernels GROUP BY rank, device_id) k
JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
ORDER BY k.kernel_time_ns DESC, d.rank, d.device_id
LIMIT 1;

-- view one_device_ranks: one row per rank whose kernels and memops all ran on one known device, so that its busy islands and idle gaps are that device's
--   rank: trace rank
--
-- Read off device_activity's row per device, whose size the planner knows: a count over every activity made it build
-- a hash table of all of them to probe one rank.
CREATE OR REPLACE VIEW one_device_ranks AS
SELECT rank FROM device_activity GROUP BY rank HAVING count(*) = 1 AND count(device_id) = 1;

-- table rank_busy_islands: one row per maximal busy interval of a rank: the union of its kernels and memops over every device
--   rank: trace rank
--   start_ns: the island's first start
--   end_ns: the island's last end
CREATE OR REPLACE TABLE rank_busy_islands AS
-- a rank with one device has that device's islands, read off gpu_activity's own prev_end_ns
SELECT rank, lo AS start_ns, hi AS end_ns FROM (
    islands_from_prev_end!((SELECT * FROM gpu_activity WHERE rank IN (SELECT rank FROM one_device_ranks)),
                           (rank, device_id))
)
UNION ALL
SELECT rank, lo, hi FROM (
    busy_islands!((SELECT rank, start_ns, end_ns FROM gpu_activity
                   WHERE NOT rank IN (SELECT rank FROM one_device_ranks)),
                  (rank))
)
ORDER BY rank, start_ns;

-- view comm_islands: one row per maximal interval of communication kernels per device, step and family, with the part no compute kernel ran beside
--   rank: trace rank
--   device_id: GPU ordinal
--   step_id: the step that launched the kernels; NULL outside every step
--   family: gpu_activity.comm_family, or 'all': every family of the step merged
--   start_ns: the island's first start
--   end_ns: the island's last end
--   comm_ns: end_ns - start_ns
--   exposed_ns: comm_ns minus its overlap with the union of the device's non-communication kernels (any step)
--
-- Per step and family, and per step across families ('all'), as TV401 reports them; the compute beside each
-- island as in device_activity.
CREATE OR REPLACE VIEW comm_islands AS
WITH comm_activity AS NOT MATERIALIZED (
    SELECT * FROM gpu_activity WHERE kind = 'kernel' AND category = 'communication'
)
SELECT rank, device_id, step_id, family, lo AS start_ns, hi AS end_ns, hi - lo AS comm_ns, exposed_ns
FROM (
    WITH compute_cum AS (
        islands_with_time_before!((SELECT rank, device_id, start_ns, end_ns FROM gpu_activity
                                   WHERE kind = 'kernel' AND category <> 'communication'
                                     AND (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM comm_activity)),
                                  (rank, device_id))
    ),
    busy_before_hi AS (
        SELECT c.*, busy_before!(k, c.hi) AS c_hi
        FROM (
            -- the communication islands per step and family
            busy_islands!((
                SELECT rank, device_id, step_id, comm_family AS family, start_ns, end_ns FROM comm_activity
                UNION ALL
                SELECT rank, device_id, step_id, 'all', start_ns, end_ns FROM comm_activity
            ), (rank, device_id, step_id, family))
        ) c
        ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.hi
    ),
    busy_before_lo AS (
        SELECT c.*, busy_before!(k, c.lo) AS c_lo
        FROM busy_before_hi c
        ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.lo
    )
    SELECT rank, device_id, step_id, family, lo, hi, hi - lo - (c_hi - c_lo) AS exposed_ns FROM busy_before_lo
);
