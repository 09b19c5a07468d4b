-- stage: launch_queue
-- How far the host ran ahead of the GPU on each stream, per step: pending launches at each launch and over time;
-- TV203 and the report read it. A stage apart from activity, whose timeline it does not read, so that the two run
-- side by side (on the 2 M-kernel export, 0.8 s of the analysis).
-- requires: kernels, memops, api_calls
-- creates: launch_queue_depth
--
-- Needs kernels.step_id/launch_kind and memops.step_id.

-- table launch_queue_depth: one row per (rank, device_id, stream_id, step_id) with any launch: how far the host ran ahead of the GPU on a stream. A pending launch is one launch call (a CUDA-graph replay counts once, on each stream it runs on) from the start of the call until the last of its kernels or memops on the stream ends
--   rank: trace rank
--   device_id: GPU ordinal
--   stream_id: stream
--   step_id: the step whose launch calls these are; NULL outside every step
--   launches: launch calls (kernel, graph, memcpy or memset) whose work ran on the stream
--   graph_launches: of them, CUDA/HIP graph launches
--   depth_at_launch_mean: mean number of the stream's earlier launches still pending as each call starts
--   depth_mean: time-weighted mean of pending launches, from this step's first launch on the stream to the next
--     launch of another step (or the stream's last event)
--   depth_max: most launches pending at once (counting the new one)
--   empty_launches: launches that found nothing pending: the GPU had drained and waited for the host
--   empty_launch_pct: 100 * empty_launches / launches
--   unordered_launches: launches whose work ended before the call started (clock skew between host and GPU
--     timestamps): left out of every depth figure
--
-- Pending launches per stream as a running sum: +1 when a launch call starts, -1 when its work ends. HTA's queue
-- length counts -1 at the GPU op's start and every kernel of a graph as a launch; here a launch is pending until
-- its work has finished, and a graph replay is one launch per stream, pending until its last kernel there ends.
-- Kernels with no launch call in the trace were not launched in it and are not counted. At one instant an ending
-- launch is counted before a starting one.
CREATE OR REPLACE TABLE launch_queue_depth AS
WITH items AS (
    SELECT rank, device_id, stream_id, launch_call_id AS call_id, any_value(step_id) AS step_id,
           max(end_ns) AS done_ns, bool_or(launch_kind = 'graph') AS graph
    FROM kernels WHERE launch_call_id IS NOT NULL
    GROUP BY rank, device_id, stream_id, launch_call_id
    UNION ALL
    SELECT m.rank, m.device_id, m.stream_id, min(a.call_id), m.step_id, m.end_ns, false
    FROM memops m
    JOIN api_calls a ON a.rank = m.rank AND a.pid = m.pid AND a.correlation_id = m.correlation_id
    GROUP BY m.rank, m.memop_id, m.device_id, m.stream_id, m.step_id, m.end_ns
),
queued AS (
    SELECT i.*, a.start_ns AS call_ns, i.done_ns > a.start_ns AS ordered
    FROM items i JOIN api_calls a ON a.rank = i.rank AND a.call_id = i.call_id
),
events AS (
    SELECT rank, device_id, stream_id, call_ns AS t, CASE WHEN ordered THEN 1 ELSE 0 END AS delta,
           step_id, graph, ordered
    FROM queued
    UNION ALL
    SELECT rank, device_id, stream_id, done_ns, -1, NULL, NULL, NULL FROM queued WHERE ordered
),
swept AS (
    -- one order, sorted on every core, then read in that order by a streaming window (an empty OVER
    -- keeps the rows' order): half the time of an ordered window, which sorts and then evaluates each
    -- function over the sorted partition. A stream's deltas sum to zero, so the running sum restarts on
    -- its own at every stream, and a stream's first event is a launch, which owns itself
    SELECT *,
           (sum(delta) OVER w)::BIGINT AS depth,
           CASE WHEN lead(rank) OVER w = rank AND lead(device_id) OVER w IS NOT DISTINCT FROM device_id
                     AND lead(stream_id) OVER w IS NOT DISTINCT FROM stream_id
                THEN lead(t) OVER w - t END AS held_ns,
           -- the step of the latest launch so far owns the time until the next event
           last_value(CASE WHEN delta >= 0 THEN struct_pack(step_id := step_id) END IGNORE NULLS) OVER w
               AS owner
    FROM (SELECT * FROM events ORDER BY rank, device_id, stream_id, t, delta)
    WINDOW w AS (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT rank, device_id, stream_id, owner.step_id AS step_id,
       count(*) FILTER (WHERE delta = 1) AS launches,
       count(*) FILTER (WHERE delta = 1 AND graph) AS graph_launches,
       avg(depth - 1) FILTER (WHERE delta = 1) AS depth_at_launch_mean,
       sum(depth * held_ns) / nullif(sum(held_ns), 0) AS depth_mean,
       max(depth) FILTER (WHERE delta = 1) AS depth_max,
       count(*) FILTER (WHERE delta = 1 AND depth = 1) AS empty_launches,
       100.0 * count(*) FILTER (WHERE delta = 1 AND depth = 1)
             / nullif(count(*) FILTER (WHERE delta = 1), 0) AS empty_launch_pct,
       count(*) FILTER (WHERE delta = 0) AS unordered_launches
FROM swept
GROUP BY ALL
ORDER BY rank, device_id, stream_id, step_id NULLS LAST;
