-- stage: host_context
-- The host work under every GPU idle gap (runtime/driver call, CPU op, Python frame, NVTX or user range) and
-- one price for every host-blocking call; TV201, TV204 and TV206 read these.
-- requires: gpu_idle_gaps, rank_busy_islands, api_calls, ranges, memops, steps
-- creates: idle_gap_context, blocking_calls
--
-- Every lookup is an ASOF join, never a range join over all ranges. The windows looked up are the gaps of at
-- least $min_gap_ns (shorter ones are launch latency) and the host-blocking calls (activity.sql's table macro
-- host_blocking_calls). host_context.py builds `_range_context` (it composes intervals.py's busy_islands_sql;
-- $generic_copy_op is the regex of the ATen ops that only move or convert data) and `blocking_calls`
-- (with_prev_end_sql) between the sections here.

CREATE OR REPLACE TEMP TABLE _gaps AS
SELECT rank, device_id, start_ns, end_ns, dur_ns, step_id, idle_kind, name AS next_op,
       call_id AS launch_call_id, pid, call_tid AS tid
FROM gpu_idle_gaps WHERE dur_ns >= $min_gap_ns;

CREATE OR REPLACE TEMP TABLE _blocking AS
WITH called AS (SELECT * FROM host_blocking_calls())
-- the latest-starting step whose host window holds the call's start
SELECT c.*, CASE WHEN c.start_ns < s.cpu_end_ns THEN s.step_id END AS step_id,
       CASE WHEN c.start_ns < s.cpu_end_ns THEN s.end_ns END AS step_end_ns,
       CASE WHEN c.start_ns < s.cpu_end_ns THEN s.start_ns END AS step_start_ns
FROM called c
ASOF LEFT JOIN steps s ON s.rank = c.rank AND c.start_ns >= s.cpu_start_ns;

-- the windows whose host context is looked up: a lane is one device's gaps, or the blocking calls
CREATE OR REPLACE TEMP TABLE _windows AS
SELECT rank, 'gap ' || device_id AS lane, end_ns AS wid, pid, tid, start_ns, end_ns
FROM _gaps WHERE tid IS NOT NULL
UNION ALL
SELECT rank, 'call', call_id, pid, tid, start_ns, end_ns FROM _blocking;

-- section: gap_context
-- Per gap window: the API call of the process overlapping it the most, the launching thread's first. Runtime
-- calls can enclose driver calls (cudaLaunchKernel around a lazy cuLibraryLoadData), so calls are split into
-- outer ones and nested ones, each level looked up by its own ASOF join.
CREATE OR REPLACE TEMP TABLE _call_context AS
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
);

-- table idle_gap_context: one row per GPU idle gap (gpu_idle_gaps) of at least 10 us with the host work under it, seen from the thread that launched the work ending the gap; gaps whose work has no launch call in the trace have NULL context. Shorter gaps are launch latency (a few us per launch) and are not explained one by one; idle_by_kind counts them
--   rank: trace rank
--   device_id: GPU ordinal
--   start_ns: gap start (gpu_idle_gaps.start_ns)
--   end_ns: gap end
--   dur_ns: end_ns - start_ns
--   step_id: gpu_idle_gaps.step_id
--   idle_kind: gpu_idle_gaps.idle_kind
--   next_op: gpu_idle_gaps.name: the kernel or memop that ended the gap
--   launch_call_id: gpu_idle_gaps.call_id: its launch call
--   launch_call: that call's name
--   host_call_id: api_calls.call_id of the runtime or driver call of the process overlapping the gap the most,
--     calls of the launching thread first (the launch call itself when nothing else ran there)
--   host_call: its name (cuLibraryLoadData, cudaStreamSynchronize, cudaLaunchKernel, ...)
--   host_call_tid: its thread
--   host_call_dur_ns: its whole duration
--   host_call_overlap_ns: the part of it inside the gap
--   cpu_op_overlap_ns: the part of cpu_op inside the gap
--   cpu_op: the CPU op (ranges.kind 'cpu_op') on the thread that overlaps the window the most, the innermost of
--     equals; NULL when none does
--   issuing_op: the op the program called: cpu_op, or when that is a generic copy (aten::copy_,
--     aten::_local_scalar_dense, aten::_to_copy, aten::to, ...) the outermost CPU op around it, so aten::item >
--     aten::_local_scalar_dense > aten::copy_ gives aten::item
--   python_frame: the Python frame (ranges.kind 'python_function') overlapping the window the most, innermost
--     of equals; NULL when the trace has none there
--   user_range: the NVTX or user annotation range (kinds 'nvtx', 'user_annotation') overlapping the window the
--     most, innermost of equals; NULL when none
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
ORDER BY g.rank, g.device_id, g.start_ns;

-- table blocking_calls: one row per host call that blocks until the GPU catches up (host_blocking_calls() in activity.sql), priced by the GPU idle it exposes: TV204 and TV206 read this one price
--   rank: trace rank
--   call_id: api_calls.call_id
--   pid: calling process
--   tid: calling thread
--   name: API name
--   reason: 'synchronize', 'sync_memcpy' (memcpy without Async), 'pageable_dtoh' (async copy into pageable host
--     memory, run synchronously) or 'sync_memset' (memset without Async on pinned or managed memory)
--   memop_kind: 'memcpy' or 'memset' of the call's GPU op; NULL for a synchronize
--   copy_kind: the memcpy's direction; NULL otherwise
--   bytes: bytes copied or set; NULL when not recorded
--   src_kind: the memop's source memory kind
--   dst_kind: the memop's destination memory kind
--   step_id: the step whose host window holds the call's start (the latest-starting one); NULL outside every
--     step
--   start_ns: call start
--   end_ns: call end
--   dur_ns: time the host was blocked
--   exposed_idle_ns: GPU idle the call exposes: from when the rank's GPUs drained (or the call start, if later)
--     until they are next busy, within the step, less any part an earlier call already exposed; 0 when the GPU
--     was still busy as the call returned or, outside steps, never ran again
--   saving_ns: min(exposed_idle_ns, dur_ns): the host could have spent its blocked time running ahead
--   saving_in_gpu_span_ns: saving_ns when the exposed idle lies inside the step window's GPU span (the rank ran
--     work in the window before and after it: the budget's idle_sync_drain), 0 when it lies before the window's
--     first or after its last GPU work (outside_gpu); outside every step: saving_ns
--   *: the columns of idle_gap_context from cpu_op on
-- (built in host_context.py: it composes intervals.py's with_prev_end_sql)

-- section: done
DROP TABLE _gaps;
DROP TABLE _blocking;
DROP TABLE _windows;
DROP TABLE _range_context;
DROP TABLE _call_context;
