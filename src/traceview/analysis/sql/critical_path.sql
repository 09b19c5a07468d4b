-- stage: critical_path
-- The critical path of every step: the longest dependent chain through host API calls, kernels, copies and
-- collectives that ends at the step's last-ending GPU op, tiled into segments, and whether the step is
-- compute, host, copy or communication bound on it.
-- requires: steps, step_windows, gpu_activity, kernels, memops, api_calls
-- creates: critical_path_segments, step_critical_path, critical_path_by_phase
--
-- The model. Nodes are GPU ops (kernels and memops: gpu_activity) and host API calls (api_calls). An edge runs
-- from a node to what it waited for:
-- - launch: an op to the call that launched it, by correlation id (kernels.launch_call_id, else the first call
--   of the op's correlation id);
-- - stream order: an op to the previous op on its device stream, by start;
-- - device order: an op to the op that ended last on its device before it started (cross-stream event waits
--   are not in the schema; this edge stands for them, and for a GPU too full to start the op);
-- - host order: a call to its thread's previous call, the one that ended last at or before its start;
-- - synchronisation: a host-blocking call (activity.sql's host_blocking_calls(): a synchronize, a synchronous
--   or pageable copy, a synchronous memset) to the GPU work it waited for: the rank's op that ended last while
--   it blocked (a rank is one process; work launched before the capture began has no process of its own).
--
-- The walk goes back from each step's last-ending GPU op (by gpu_activity.step_id; of equal ends the later
-- start, then a kernel before a memop, then the higher id) and at each node takes the binding predecessor,
-- the dependency that finished last before the node started:
-- - a GPU op: its launch was effective when the launch call returned, or, when the call's first op started
--   before the call returned (a synchronous or pageable copy, a kernel starting inside its launch call), at
--   some time after the call began, so at its start. The stream predecessor is binding when it ended at or
--   after that and not after the op itself ended, else the launch call; but an op of the device that ended
--   later than both, before the op started, held the op (an event wait, a full GPU) and is binding. From the
--   binding predecessor's end to the op's start is launch latency. An op with neither a stream predecessor
--   nor a launch call starts the path.
-- - a call, entered at its end: a host-blocking call during which a GPU op of its rank ended goes to the last
--   such op (the call's time after that op's end is host: the return from the wait); any other call goes to
--   its thread's previous call, and the time between the two is host work (Python, the framework, the CPU
--   side of the step).
-- - a launch call entered at the start of its first op, which began before the call returned, goes to its
--   thread's previous call; its time up to that start is host.
-- Every node has one binding predecessor, so the pointers are computed once for all nodes, set-based with
-- ASOF joins, and one recursive CTE follows them for every step at once. Each pointer goes to a node strictly
-- earlier in the rank's order of (entry time, own start, port, id), so no walk cycles; a walk stops at the
-- step's start (steps.start_ns: the earlier of its window and its GPU work), at a node with no predecessor, or
-- after as many nodes as its rank has, or after 20,000 nodes (the walk is one pass per node along the longest
-- path: a window over a whole long run is cut there and says so in step_critical_path.complete). Segments are
-- clipped to tile the path: a predecessor that ends after its successor began is cut at that start, and nothing
-- reaches before the step's start, so the segments of a step add up to its path_ns.

-- The later and the earlier of two times, both known (DuckDB's greatest/least would skip a NULL silently).
CREATE OR REPLACE MACRO _cp_later(a, b) AS CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a >= b THEN a ELSE b END;

CREATE OR REPLACE MACRO _cp_earlier(a, b) AS CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a <= b THEN a ELSE b END;

-- the steps walked: at most 20,000 GPU ops (a longer one, a window over a whole long run with no step marker,
-- would cut its walk at the cap anyway), and the ranks that have one: only their nodes become ports
CREATE OR REPLACE TEMP TABLE _cp_walked AS
SELECT rank, step_id FROM gpu_activity WHERE step_id IS NOT NULL GROUP BY ALL HAVING count(*) <= 20000;

CREATE OR REPLACE TEMP TABLE _cp_ports AS
WITH ops AS (
    SELECT a.rank, a.device_id, a.stream_id, CASE a.kind WHEN 'kernel' THEN 0 ELSE 1 END AS ptype,
           a.activity_id AS id, a.start_ns, a.end_ns, a.pid, a.correlation_id, a.launch_call_id,
           CASE WHEN a.kind = 'kernel' AND a.category = 'communication' THEN 'communication'
                WHEN a.kind = 'kernel' THEN 'compute'
                WHEN m.kind = 'memset' THEN 'memset'
                ELSE 'copy' END AS kind
    FROM gpu_activity a
    LEFT JOIN memops m ON a.kind = 'memop' AND m.rank = a.rank AND m.memop_id = a.activity_id
    WHERE a.rank IN (SELECT rank FROM _cp_walked)
),
first_ids AS (
    -- memops, and kernels with no linked launch: the first call of their correlation id (call ids run in start
    -- order, so the lowest)
    SELECT c.rank, c.pid, c.correlation_id, min(c.call_id) AS call_id
    FROM api_calls c
    SEMI JOIN (SELECT rank, pid, correlation_id FROM ops WHERE launch_call_id IS NULL) o
      ON c.rank = o.rank AND c.pid = o.pid AND c.correlation_id = o.correlation_id
    GROUP BY c.rank, c.pid, c.correlation_id
),
linked AS MATERIALIZED (
    SELECT o.* EXCLUDE (launch_call_id), coalesce(o.launch_call_id, f.call_id) AS call_id
    FROM ops o
    LEFT JOIN first_ids f ON o.launch_call_id IS NULL AND f.rank = o.rank AND f.pid = o.pid
                         AND f.correlation_id = o.correlation_id
),
launches AS MATERIALIZED (
    -- each launching call, when it returned and when the first op it launched started
    SELECT l.rank, l.call_id, min(l.start_ns) AS first_op_start_ns, any_value(c.start_ns) AS call_start_ns,
           any_value(c.end_ns) AS call_end_ns
    FROM linked l JOIN api_calls c ON c.rank = l.rank AND c.call_id = l.call_id
    GROUP BY l.rank, l.call_id
),
streamed AS (
    -- each op's predecessor on its stream: one unpartitioned order, sorted on every core, read by streaming windows
    -- (an empty OVER); a window partitioned by the few hot streams sorted each on one core
    SELECT * EXCLUDE (same_stream, l_end_ns, l_ptype, l_id),
           CASE WHEN same_stream THEN l_end_ns END AS p_end_ns, CASE WHEN same_stream THEN l_ptype END AS p_ptype,
           CASE WHEN same_stream THEN l_id END AS p_id
    FROM (SELECT *,
                 lag(rank) OVER w = rank AND lag(device_id) OVER w IS NOT DISTINCT FROM device_id
                     AND lag(stream_id) OVER w IS NOT DISTINCT FROM stream_id AS same_stream,
                 lag(end_ns) OVER w AS l_end_ns, lag(ptype) OVER w AS l_ptype, lag(id) OVER w AS l_id
          FROM (SELECT * FROM linked ORDER BY rank, device_id, stream_id, start_ns, end_ns, ptype, id)
          WINDOW w AS (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
),
device_ends AS (
    -- per device, the op that ended at each end time (the latest-starting of equals)
    SELECT rank, device_id, end_ns, arg_max(struct_pack(ptype := ptype, id := id), (start_ns, ptype, id)) AS op
    FROM linked GROUP BY rank, device_id, end_ns
),
readied AS (
    SELECT s.*, x.end_ns AS x_end_ns, x.op.ptype AS x_ptype, x.op.id AS x_id, l.call_end_ns, l.first_op_start_ns,
           CASE WHEN s.p_end_ns <= s.end_ns THEN s.p_end_ns END AS stream_ready_ns,
           CASE WHEN l.call_end_ns <= l.first_op_start_ns THEN l.call_end_ns ELSE l.call_start_ns END AS launch_ready_ns
    FROM streamed s
    LEFT JOIN launches l ON l.rank = s.rank AND l.call_id = s.call_id
    ASOF LEFT JOIN device_ends x ON x.rank = s.rank AND x.device_id = s.device_id AND s.start_ns >= x.end_ns
),
ready AS (
    SELECT *,
           CASE WHEN stream_ready_ns IS NULL THEN launch_ready_ns
                WHEN launch_ready_ns IS NULL THEN stream_ready_ns
                ELSE _cp_later(stream_ready_ns, launch_ready_ns) END AS ready_ns
    FROM readied
),
op_ports AS (
    SELECT rank, ptype, id, kind, start_ns AS own_start_ns, end_ns AS entry_ns, 'launch_latency' AS gap_kind,
           CASE WHEN x_end_ns > ready_ns THEN x_ptype
                WHEN ready_ns = stream_ready_ns THEN p_ptype
                WHEN launch_ready_ns IS NOT NULL THEN CASE WHEN call_end_ns <= first_op_start_ns THEN 3 ELSE 2 END
           END AS pred_ptype,
           CASE WHEN x_end_ns > ready_ns THEN x_id
                WHEN ready_ns = stream_ready_ns THEN p_id
                WHEN launch_ready_ns IS NOT NULL THEN call_id
           END AS pred_id
    FROM ready
),
rank_ends AS (
    -- per rank, the op that ended at each end time: what a blocking call waited for
    SELECT rank, end_ns, arg_max(struct_pack(ptype := ptype, id := id), (start_ns, ptype, id)) AS op
    FROM linked WHERE rank IN (SELECT rank FROM host_blocking_calls())
    GROUP BY rank, end_ns
),
timed_calls AS (
    SELECT rank, pid, tid, call_id, end_ns FROM api_calls WHERE dur_ns > 0 AND rank IN (SELECT rank FROM _cp_walked)
),
hosted AS MATERIALIZED (
    -- each call with the thread's previous call
    SELECT c.rank, c.call_id, c.pid, c.start_ns, c.end_ns, p.call_id AS p_id
    FROM (SELECT * FROM api_calls WHERE rank IN (SELECT rank FROM _cp_walked)) c
    ASOF LEFT JOIN timed_calls p ON p.rank = c.rank AND p.pid = c.pid AND p.tid = c.tid AND c.start_ns >= p.end_ns
),
synced AS (
    SELECT b.rank, b.call_id, g.end_ns AS g_end_ns, g.op.ptype AS g_ptype, g.op.id AS g_id
    FROM host_blocking_calls() b
    ASOF JOIN rank_ends g ON g.rank = b.rank AND b.end_ns >= g.end_ns
    WHERE g.end_ns >= b.start_ns
),
call_ports AS (
    SELECT h.rank, 3 AS ptype, h.call_id AS id, 'host' AS kind, coalesce(s.g_end_ns, h.start_ns) AS own_start_ns,
           h.end_ns AS entry_ns, 'host' AS gap_kind,
           CASE WHEN s.call_id IS NOT NULL THEN s.g_ptype WHEN h.p_id IS NOT NULL THEN 3 END AS pred_ptype,
           CASE WHEN s.call_id IS NOT NULL THEN s.g_id ELSE h.p_id END AS pred_id
    FROM hosted h
    LEFT JOIN synced s ON s.rank = h.rank AND s.call_id = h.call_id
),
issue_ports AS (
    SELECT h.rank, 2 AS ptype, h.call_id AS id, 'host' AS kind, h.start_ns AS own_start_ns,
           l.first_op_start_ns AS entry_ns, 'host' AS gap_kind,
           CASE WHEN h.p_id IS NOT NULL THEN 3 END AS pred_ptype, h.p_id AS pred_id
    FROM hosted h
    JOIN launches l ON l.rank = h.rank AND l.call_id = h.call_id
    WHERE l.first_op_start_ns < l.call_end_ns
),
ports AS MATERIALIZED (
    -- numbered in one sorted order by a streaming window (an empty OVER keeps the rows' order): the numbers run
    -- on across ranks, which keeps each rank's order, and the sort runs on every core where a window partitioned
    -- by rank sorted each rank on one (10x vLLM trace: 0.27 s for 251 k ports)
    SELECT *, row_number() OVER () AS ord
    FROM (SELECT * FROM (SELECT * FROM op_ports UNION ALL SELECT * FROM call_ports UNION ALL SELECT * FROM issue_ports)
          ORDER BY rank, entry_ns, own_start_ns, ptype, id)
),
rank_sizes AS (SELECT rank, count(*) AS rank_ports FROM ports GROUP BY rank)
SELECT p.rank, p.ptype, p.id, p.kind, p.own_start_ns, p.entry_ns, p.gap_kind, p.ord, s.rank_ports,
       q.ord AS pred_ord, q.entry_ns AS pred_entry_ns
FROM ports p
JOIN rank_sizes s ON s.rank = p.rank
LEFT JOIN ports q ON q.rank = p.rank AND q.ptype = p.pred_ptype AND q.id = p.pred_id;

CREATE OR REPLACE TEMP TABLE _cp_walk AS
WITH RECURSIVE roots AS (
    SELECT a.rank, a.step_id, s.start_ns AS step_start_ns,
           arg_max(struct_pack(ptype := CASE a.kind WHEN 'kernel' THEN 0 ELSE 1 END, id := a.activity_id),
                   (a.end_ns, a.start_ns, CASE a.kind WHEN 'kernel' THEN 1 ELSE 0 END, a.activity_id)) AS op
    FROM gpu_activity a
    JOIN steps s ON s.rank = a.rank AND s.step_id = a.step_id
    SEMI JOIN _cp_walked w ON w.rank = a.rank AND w.step_id = a.step_id
    GROUP BY a.rank, a.step_id, s.start_ns
),
walk AS (
    -- low_ns: the running minimum of the points entry_0, own_start_0, entry_1, own_start_1, ... along the walk;
    -- before_ns: that minimum before this node (NULL at the root)
    SELECT r.rank, r.step_id, r.step_start_ns, 0 AS seq, p.ptype, p.id, p.ord, p.pred_ord, p.pred_entry_ns,
           p.rank_ports, _cp_earlier(p.entry_ns, p.own_start_ns) AS low_ns, NULL::BIGINT AS before_ns
    FROM roots r JOIN _cp_ports p ON p.rank = r.rank AND p.ptype = r.op.ptype AND p.id = r.op.id
    UNION ALL
    SELECT w.rank, w.step_id, w.step_start_ns, w.seq + 1, p.ptype, p.id, p.ord, p.pred_ord, p.pred_entry_ns,
           p.rank_ports, _cp_earlier(w.low_ns, _cp_earlier(p.entry_ns, p.own_start_ns)), w.low_ns
    FROM walk w
    JOIN _cp_ports p ON p.rank = w.rank AND p.ord = w.pred_ord
    WHERE w.pred_ord < w.ord AND w.pred_entry_ns > w.step_start_ns AND w.seq < w.rank_ports AND w.seq < 19999
)
SELECT rank, step_id, step_start_ns, seq, ptype, id, low_ns, before_ns FROM walk;

-- table critical_path_segments: one row per segment of a step's critical path, in time order (they tile the path)
--   rank: trace rank
--   step_id: steps.step_id
--   seq: position along the path in time order, from 0
--   kind: compute (a kernel other than communication), communication (a communication kernel: NCCL/RCCL, custom
--     all-reduce, ...), copy (a memcpy), memset, host (an API call's own time, or the host work between a call
--     and the thread's previous one), launch_latency (from the end of what an op waited for, its launch call,
--     stream or device predecessor, to the op's start)
--   node: what the segment belongs to: 'kernel', 'memop' or 'call' (a gap belongs to the node it led to)
--   node_id: kernels.kernel_id, memops.memop_id or api_calls.call_id
--   name: the kernel's short name (its full name when it has none), the memop's display name or the API name
--   start_ns: segment start, ns
--   end_ns: segment end, ns
--   dur_ns: end_ns - start_ns, > 0
CREATE OR REPLACE TABLE critical_path_segments AS
WITH nodes AS (
    SELECT w.*, p.kind, p.gap_kind, p.own_start_ns, p.entry_ns, p.pred_ord, p.pred_entry_ns
    FROM _cp_walk w JOIN _cp_ports p ON p.rank = w.rank AND p.ptype = w.ptype AND p.id = w.id
),
bounds AS (
    SELECT rank, step_id, ptype, id, kind, gap_kind,
           _cp_later(CASE WHEN seq = 0 THEN entry_ns ELSE _cp_earlier(entry_ns, before_ns) END, step_start_ns) AS own_hi_ns,
           _cp_later(low_ns, step_start_ns) AS own_lo_ns,
           _cp_later(CASE WHEN pred_ord IS NULL THEN low_ns ELSE _cp_earlier(low_ns, pred_entry_ns) END,
                    step_start_ns) AS gap_lo_ns
    FROM nodes
),
pieces AS (
    SELECT rank, step_id, ptype, id, kind, own_lo_ns AS start_ns, own_hi_ns AS end_ns FROM bounds
    UNION ALL
    SELECT rank, step_id, ptype, id, gap_kind, gap_lo_ns, own_lo_ns FROM bounds
),
numbered AS (  -- numbered before the names join, so the window sorts no strings
    SELECT *, (row_number() OVER (PARTITION BY rank, step_id ORDER BY start_ns) - 1)::BIGINT AS seq
    FROM pieces WHERE end_ns > start_ns
)
SELECT p.rank, p.step_id, p.seq,
       p.kind, CASE WHEN p.ptype = 0 THEN 'kernel' WHEN p.ptype = 1 THEN 'memop' ELSE 'call' END AS node,
       p.id AS node_id,
       CASE WHEN p.ptype = 0 THEN coalesce(k.short_name, k.name) WHEN p.ptype = 1 THEN m.name ELSE c.name END AS name,
       p.start_ns, p.end_ns, p.end_ns - p.start_ns AS dur_ns
FROM numbered p
LEFT JOIN kernels k ON p.ptype = 0 AND k.rank = p.rank AND k.kernel_id = p.id
LEFT JOIN memops m ON p.ptype = 1 AND m.rank = p.rank AND m.memop_id = p.id
LEFT JOIN api_calls c ON p.ptype >= 2 AND c.rank = p.rank AND c.call_id = p.id
ORDER BY p.rank, p.step_id, p.start_ns;

-- the steps whose walk stopped at 20,000 nodes (one window over a whole long run): their path is only its tail
CREATE OR REPLACE TEMP TABLE _cp_cut AS
SELECT rank, step_id FROM _cp_walk GROUP BY ALL HAVING max(seq) >= 19999;

DROP TABLE _cp_walk;

DROP TABLE _cp_ports;

-- the bound of a path's figures: the largest, the first in this order of equals
CREATE OR REPLACE MACRO critical_path_top_ns(compute_ns, communication_ns, copy_ns, host_ns) AS
_cp_later(_cp_later(compute_ns, communication_ns), _cp_later(copy_ns, host_ns));

CREATE OR REPLACE MACRO critical_path_bound(compute_ns, communication_ns, copy_ns, host_ns) AS
CASE WHEN compute_ns >= _cp_later(_cp_later(communication_ns, copy_ns), host_ns) THEN 'compute'
     WHEN communication_ns >= _cp_later(copy_ns, host_ns) THEN 'communication'
     WHEN copy_ns >= host_ns THEN 'copy'
     ELSE 'host' END;

-- table step_critical_path: one row per step with GPU work
--   rank: trace rank
--   step_id: steps.step_id
--   phase: steps.phase
--   priced: whether findings may price the step (step_windows.priced of any piece it owns)
--   complete: the walk reached the path's start; false when the step has more than 20,000 GPU ops (not walked:
--     its path figures are NULL) or its walk stopped after 20,000 nodes (the figures cover only the path's tail):
--     one window over a whole long run with no step markers; bound is NULL then
--   path_start_ns: where the path starts: its first node's start, or the step's start (steps.start_ns) when the
--     chain reaches back past it
--   path_end_ns: the end of the step's last-ending GPU op (steps.gpu_end_ns)
--   path_ns: path_end_ns - path_start_ns = the sum of the step's critical_path_segments; NULL, as the figures
--     below, for a step too long to walk
--   compute_ns: Σ compute segments, ns
--   communication_ns: Σ communication segments, ns
--   copy_ns: Σ copy segments, ns
--   memset_ns: Σ memset segments, ns
--   host_ns: Σ host segments, ns
--   launch_latency_ns: Σ launch_latency segments, ns
--   bound: the largest of compute (compute_ns), communication (communication_ns), copy (copy_ns + memset_ns) and
--     host (host_ns + launch_latency_ns: the GPU waiting for work to be issued), the first in that order of
--     equals; NULL when path_ns is 0
--   bound_pct: that figure over path_ns, percent; NULL when path_ns is 0 or the path is not complete
--   segments: critical_path_segments of the step
CREATE OR REPLACE TABLE step_critical_path AS
WITH sums AS (
    SELECT rank, step_id, min(start_ns) AS path_start_ns, max(end_ns) AS path_end_ns,
           sum(dur_ns) FILTER (WHERE kind = 'compute') AS compute_ns,
           sum(dur_ns) FILTER (WHERE kind = 'communication') AS communication_ns,
           sum(dur_ns) FILTER (WHERE kind = 'copy') AS copy_ns,
           sum(dur_ns) FILTER (WHERE kind = 'memset') AS memset_ns,
           sum(dur_ns) FILTER (WHERE kind = 'host') AS host_ns,
           sum(dur_ns) FILTER (WHERE kind = 'launch_latency') AS launch_latency_ns,
           count(*) AS segments
    FROM critical_path_segments GROUP BY rank, step_id
),
priced AS (SELECT rank, step_id, bool_or(priced) AS priced FROM step_windows WHERE step_id IS NOT NULL GROUP BY ALL),
paths AS (
    -- a step's segments tile its path, so a kind with no segment took none of it: 0, not unknown
    SELECT s.rank, s.step_id, t.phase, coalesce(p.priced, false) AS priced,
           NOT EXISTS (SELECT 1 FROM _cp_cut c WHERE c.rank = s.rank AND c.step_id = s.step_id) AS complete,
           s.path_start_ns, s.path_end_ns, s.path_end_ns - s.path_start_ns AS path_ns,
           coalesce(s.compute_ns, 0)::BIGINT AS compute_ns, coalesce(s.communication_ns, 0)::BIGINT AS communication_ns,
           coalesce(s.copy_ns, 0)::BIGINT AS copy_ns, coalesce(s.memset_ns, 0)::BIGINT AS memset_ns,
           coalesce(s.host_ns, 0)::BIGINT AS host_ns, coalesce(s.launch_latency_ns, 0)::BIGINT AS launch_latency_ns,
           s.segments
    FROM sums s
    JOIN steps t ON t.rank = s.rank AND t.step_id = s.step_id
    LEFT JOIN priced p ON p.rank = s.rank AND p.step_id = s.step_id
    UNION ALL
    -- steps too long to walk: no path, said as unknown
    SELECT g.rank, g.step_id, t.phase, coalesce(p.priced, false), false, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, 0
    FROM (SELECT DISTINCT rank, step_id FROM gpu_activity WHERE step_id IS NOT NULL) g
    JOIN steps t ON t.rank = g.rank AND t.step_id = g.step_id
    LEFT JOIN priced p ON p.rank = g.rank AND p.step_id = g.step_id
    WHERE NOT EXISTS (SELECT 1 FROM _cp_walked w WHERE w.rank = g.rank AND w.step_id = g.step_id)
)
SELECT rank, step_id, phase, priced, complete, path_start_ns, path_end_ns, path_ns, compute_ns, communication_ns,
       copy_ns, memset_ns, host_ns, launch_latency_ns,
       CASE WHEN path_ns > 0 AND complete THEN critical_path_bound(compute_ns, communication_ns, copy_ns + memset_ns,
                                                        host_ns + launch_latency_ns) END AS bound,
       CASE WHEN path_ns > 0 AND complete THEN 100.0 * critical_path_top_ns(compute_ns, communication_ns, copy_ns + memset_ns, host_ns + launch_latency_ns) / path_ns END AS bound_pct,
       segments
FROM paths
ORDER BY rank, step_id;

DROP TABLE _cp_cut;

DROP TABLE _cp_walked;

-- table critical_path_by_phase: one row per rank and phase with a priced step whose critical path is complete
--   rank: trace rank
--   phase: steps.phase
--   steps: priced steps with a complete critical path
--   path_ns: Σ step_critical_path.path_ns over them
--   compute_ns: Σ compute_ns
--   communication_ns: Σ communication_ns
--   copy_ns: Σ copy_ns
--   memset_ns: Σ memset_ns
--   host_ns: Σ host_ns
--   launch_latency_ns: Σ launch_latency_ns
--   bound: the largest of the summed figures, as step_critical_path.bound
--   bound_pct: that figure over path_ns, percent; NULL when path_ns is 0
CREATE OR REPLACE TABLE critical_path_by_phase AS
WITH sums AS (
    SELECT rank, phase, count(*) AS steps, sum(path_ns)::BIGINT AS path_ns, sum(compute_ns)::BIGINT AS compute_ns,
           sum(communication_ns)::BIGINT AS communication_ns, sum(copy_ns)::BIGINT AS copy_ns,
           sum(memset_ns)::BIGINT AS memset_ns, sum(host_ns)::BIGINT AS host_ns,
           sum(launch_latency_ns)::BIGINT AS launch_latency_ns
    FROM step_critical_path WHERE priced AND complete GROUP BY rank, phase
)
SELECT *,
       CASE WHEN path_ns > 0 THEN critical_path_bound(compute_ns, communication_ns, copy_ns + memset_ns,
                                           host_ns + launch_latency_ns) END AS bound,
       CASE WHEN path_ns > 0 THEN 100.0 * critical_path_top_ns(compute_ns, communication_ns, copy_ns + memset_ns, host_ns + launch_latency_ns) / path_ns END AS bound_pct
FROM sums
ORDER BY rank, phase;
