-- stage: activity
-- Every kernel and memop on one timeline per GPU, each with the latest end of the device's work before it
-- (`gpu_activity`); the idle gaps (idle_gaps) and the busy unions (device_busy) are read off it, as are the
-- steady state, the critical path and the collectives. Also the one definition of a host-blocking call.
-- requires: kernels, memops, api_calls
-- creates: gpu_activity
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
