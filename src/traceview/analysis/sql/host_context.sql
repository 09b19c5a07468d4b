-- stage: host_context
-- The host work under every GPU idle gap (runtime/driver call, CPU op, Python frame, NVTX or user range), the
-- deepest of it that covers the gap, and one price for every host-blocking call; TV201, TV204 and TV206 read these.
-- requires: gpu_idle_gaps, rank_busy_islands, api_calls, ranges, memops, steps
-- creates: idle_gap_context, blocking_calls
--
-- No lookup is a range join over all ranges. A range open at a window's start is, per (thread, kind, nesting
-- depth), the latest-starting one there (an ASOF join). Windows of one lane (a device's gaps; the blocking calls
-- of a thread) do not overlap, so each range or call meets at most one window per lane: one that starts inside a
-- gap finds it by a hash join on the time bucket it starts in, which lists every gap touching the bucket; one
-- that starts inside a blocking call finds it by the latest call of its thread starting before it (an ASOF join).
-- Before an ASOF join sorts the ranges, time buckets drop those that cannot meet a window: a range can be open at
-- a window's start only if it spans two buckets or starts in a bucket a window starts in, and start inside a
-- thread's blocking call only if it starts in a bucket the thread's calls touch. The windows looked up are the gaps
-- of at least $min_gap_ns (shorter ones are launch latency) and the host-blocking calls (activity.sql's table
-- macro host_blocking_calls). A gap sees the events of every thread of the launching process (its covering
-- cause falls back to them), a blocking call those of its own thread. $generic_copy_op is the regex of the ATen
-- ops that only move or convert data.

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

-- the windows whose host context is looked up: a lane is one device's gaps, or the blocking calls; `win` numbers
-- them, a narrow key for the sort that prunes their candidates
CREATE OR REPLACE TEMP TABLE _windows AS
SELECT *, row_number() OVER (ORDER BY rank, lane, wid) AS win FROM (
    SELECT rank, 'gap ' || device_id AS lane, end_ns AS wid, pid, tid, start_ns, end_ns
    FROM _gaps WHERE tid IS NOT NULL
    UNION ALL
    SELECT rank, 'call', call_id, pid, tid, start_ns, end_ns FROM _blocking
);

-- Every API call of the process overlapping a gap window, with the part of it inside. Runtime calls can
-- enclose driver calls (cudaLaunchKernel around a lazy cuLibraryLoadData), so calls are split into outer ones
-- and nested ones, each level looked up by its own ASOF join.
CREATE OR REPLACE TEMP TABLE _call_candidates AS
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
           x.call_id, x.name, x.tid, x.nested, x.start_ns, x.end_ns, x.dur_ns
    FROM (SELECT w.*, l.tid AS call_tid, l.nested FROM w JOIN levels l USING (rank, pid)) w
    ASOF JOIN c x ON x.rank = w.rank AND x.pid = w.pid AND x.tid = w.call_tid AND x.nested = w.nested
                 AND w.start_ns >= x.start_ns
    WHERE x.end_ns > w.start_ns
),
bucket AS (bucket_width!((SELECT start_ns, end_ns FROM w))),
started_inside AS (  -- a device's gaps do not overlap: a call starting inside one finds it in its start's bucket
    SELECT w.rank, w.lane, w.wid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
           x.call_id, x.name, x.tid, x.nested, x.start_ns, x.end_ns, x.dur_ns
    FROM c x CROSS JOIN bucket z
    JOIN (in_buckets!((SELECT * FROM w), (SELECT ns FROM bucket))) w
      ON w.rank = x.rank AND w.pid = x.pid AND w.b = x.start_ns // z.ns
    WHERE x.start_ns > w.start_ns AND x.start_ns < w.end_ns
)
SELECT *, (CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END)
          - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END) AS overlap_ns
FROM (SELECT * FROM open_at_start UNION ALL SELECT * FROM started_inside);

-- Every CPU op, Python frame and NVTX or user range overlapping a window: of the launching process for a gap,
-- of the calling thread for a blocking call; names stay behind (the chosen ranges look theirs up). The ranges'
-- kind travels through the joins' sorts as a number (0 cpu_op, 1 python_function, 2 nvtx, 3 user_annotation: each
-- nests on its own), named as a class at the end: sorting a million ranges by a string and carrying a second one
-- cost a fifth of the statement.
CREATE OR REPLACE TEMP TABLE _range_candidates AS
WITH r AS (
    SELECT rank, pid, tid,
           CASE kind WHEN 'cpu_op' THEN 0 WHEN 'python_function' THEN 1 WHEN 'nvtx' THEN 2 ELSE 3 END::UTINYINT AS kind,
           depth, range_id, start_ns, end_ns
    FROM ranges
    WHERE kind IN ('cpu_op', 'python_function', 'nvtx', 'user_annotation')
      AND (rank, pid) IN (SELECT rank, pid FROM _windows)
),
bucket AS (bucket_width!((SELECT start_ns, end_ns FROM _windows))),
openers AS (
    -- the ranges that can be open at a window's start: those spanning two buckets or starting in a bucket where a
    -- window starts. Most ranges are short Python frames in buckets no window starts in (10x vLLM trace: 127 k of
    -- 1.28 M ranges kept), so the ASOF join below sorts a tenth of them
    SELECT x.* FROM r x, bucket z
    WHERE (x.end_ns - 1) // z.ns > x.start_ns // z.ns
       OR (x.rank, x.pid, x.start_ns // z.ns) IN (SELECT w.rank, w.pid, w.start_ns // z.ns FROM _windows w, bucket z)
),
levels AS (SELECT DISTINCT rank, pid, tid, kind, depth FROM openers),
open_at_start AS (
    -- at one nesting depth of one kind on a thread only the latest-starting range can be open
    SELECT w.rank, w.lane, w.wid, w.win, w.pid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
           x.tid, x.kind AS cls, x.depth, x.range_id, x.start_ns, x.end_ns
    FROM (SELECT w.*, l.tid AS range_tid, l.kind, l.depth
          FROM _windows w JOIN levels l ON l.rank = w.rank AND l.pid = w.pid AND (w.lane <> 'call' OR l.tid = w.tid)) w
    ASOF JOIN openers x ON x.rank = w.rank AND x.pid = w.pid AND x.tid = w.range_tid AND x.kind = w.kind
                       AND x.depth = w.depth AND w.start_ns >= x.start_ns
    WHERE x.end_ns > w.start_ns
),
gap_buckets AS (  -- each gap window once for every bucket it touches
    in_buckets!((SELECT * FROM _windows WHERE lane <> 'call'), (SELECT ns FROM bucket))
),
inside_gaps AS (
    -- a device's gaps do not overlap, so a range starting inside one finds it alone in its start's bucket: a hash
    -- join on the bucket, where an ASOF join would sort every candidate range
    SELECT w.rank, w.lane, w.wid, w.win, w.pid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
           x.tid, x.kind AS cls, x.depth, x.range_id, x.start_ns, x.end_ns
    FROM r x CROSS JOIN bucket z
    JOIN gap_buckets w ON w.rank = x.rank AND w.pid = x.pid AND w.b = x.start_ns // z.ns
    WHERE x.start_ns > w.start_ns AND x.start_ns < w.end_ns
),
call_buckets AS (
    -- the buckets each thread's blocking calls touch: calls of one thread do not overlap, so a thread touches at
    -- most its calls plus four buckets a call stretch
    SELECT DISTINCT rank, pid, tid, b FROM (
        in_buckets!((SELECT rank, pid, tid, start_ns, end_ns FROM _windows WHERE lane = 'call'), (SELECT ns FROM bucket))
    )
),
starters AS (  -- each range that starts in a bucket its thread's blocking calls touch
    SELECT x.*
    FROM r x CROSS JOIN bucket z
    JOIN call_buckets t ON t.rank = x.rank AND t.pid = x.pid AND t.tid = x.tid AND t.b = x.start_ns // z.ns
),
inside_calls AS (  -- blocking calls of different threads may overlap: a call's window is found on its thread
    SELECT w.rank, w.lane, w.wid, w.win, w.pid, w.tid AS w_tid, w.start_ns AS w_start, w.end_ns AS w_end,
           x.tid, x.kind AS cls, x.depth, x.range_id, x.start_ns, x.end_ns
    FROM starters x
    ASOF JOIN (SELECT * FROM _windows WHERE lane = 'call') w
      ON w.rank = x.rank AND w.pid = x.pid AND w.tid = x.tid AND x.start_ns > w.start_ns
    WHERE x.start_ns < w.end_ns
),
candidates AS (
    SELECT *, (CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END)
              - (CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END) AS overlap_ns
    FROM (SELECT * FROM open_at_start UNION ALL SELECT * FROM inside_gaps UNION ALL SELECT * FROM inside_calls)
),
kept AS (
    -- A range that starts inside a gap, inside another candidate of the gap, thread and class that starts earlier
    -- and ends later (`prev_end_ns` past its end), overlaps the gap less than that one does. Covering less than
    -- $min_cover_pct of the gap, it is then neither the gap's covering event, nor its widest, nor the best of its
    -- class on its thread, and the other one holds all it adds to the traced time: it is dropped (the 10x vLLM
    -- trace: 532 k of 573 k candidates, Python frames inside their callers). Of equal intervals none drops the
    -- other: the deeper one is the innermost of equals
    SELECT * EXCLUDE (prev_end_ns)
    FROM (with_prev_end!((SELECT * FROM candidates WHERE lane <> 'call'), (win, tid, cls), (depth, range_id)))
    WHERE NOT (start_ns > w_start AND prev_end_ns IS NOT NULL AND prev_end_ns > end_ns
               AND overlap_ns < $min_cover_pct / 100 * (w_end - w_start))
    UNION ALL
    SELECT * FROM candidates WHERE lane = 'call'
)
SELECT rank, lane, wid, pid, w_tid, w_start, w_end, tid,
       CASE cls WHEN 0 THEN 'cpu_op' WHEN 1 THEN 'python_frame' ELSE 'user_range' END AS cls,
       depth, range_id, start_ns, end_ns, overlap_ns
FROM kept;

-- Per window: the CPU op, Python frame and user range of its own thread overlapping it the most, innermost of
-- equals, and the outermost CPU op around that op (the depth-0 op open at its start).
CREATE OR REPLACE TEMP TABLE _range_context AS
WITH chosen AS (
    SELECT rank, lane, wid, any_value(pid) AS pid, any_value(w_tid) AS tid, cls,
           arg_max(struct_pack(range_id := range_id, start_ns := start_ns, overlap_ns := overlap_ns),
                   (overlap_ns, start_ns, -end_ns, depth)) AS b
    FROM _range_candidates WHERE tid = w_tid
    GROUP BY rank, lane, wid, cls
),
best AS (
    SELECT c.rank, c.lane, c.wid, c.pid, c.tid, c.cls,
           struct_pack(name := n.name, start_ns := c.b.start_ns, overlap_ns := c.b.overlap_ns) AS b
    FROM chosen c JOIN ranges n ON n.rank = c.rank AND n.range_id = c.b.range_id
),
op AS (
    SELECT b.*, t.name AS top_op
    FROM (SELECT * FROM best WHERE cls = 'cpu_op') b
    ASOF LEFT JOIN (SELECT rank, pid, tid, range_id, start_ns FROM ranges WHERE kind = 'cpu_op' AND depth = 0) o
      ON o.rank = b.rank AND o.pid = b.pid AND o.tid = b.tid AND b.b.start_ns >= o.start_ns
    LEFT JOIN ranges t ON t.rank = o.rank AND t.range_id = o.range_id
)
SELECT w.rank, w.lane, w.wid,
       op.b.name AS cpu_op, op.b.overlap_ns AS cpu_op_overlap_ns,
       CASE WHEN regexp_matches(op.b.name, $generic_copy_op) THEN coalesce(op.top_op, op.b.name)
            ELSE op.b.name END AS issuing_op,
       py.b.name AS python_frame, ur.b.name AS user_range
FROM _windows w
LEFT JOIN op ON op.rank = w.rank AND op.lane = w.lane AND op.wid = w.wid
LEFT JOIN best py ON py.rank = w.rank AND py.lane = w.lane AND py.wid = w.wid AND py.cls = 'python_frame'
LEFT JOIN best ur ON ur.rank = w.rank AND ur.lane = w.lane AND ur.wid = w.wid AND ur.cls = 'user_range';

-- Per gap window: the API call of the process overlapping it the most, the launching thread's first.
CREATE OR REPLACE TEMP TABLE _call_context AS
SELECT rank, lane, wid, b.call_id, b.name, b.tid, b.dur_ns, b.overlap_ns
FROM (
    SELECT rank, lane, wid,
           arg_max(struct_pack(call_id := call_id, name := name, tid := tid, dur_ns := dur_ns, overlap_ns := overlap_ns),
                   (tid = w_tid, overlap_ns, start_ns, -call_id)) AS b
    FROM _call_candidates
    GROUP BY rank, lane, wid
);

-- Per gap window: the covering cause, the deepest event covering at least $min_cover_pct of the gap (the
-- launching thread's first, then the process's); events of one thread covering more than half of one gap
-- overlap each other, so they nest and the deepest is the latest-starting (then the shortest; of identical
-- intervals a call inside an op inside a range inside a frame). Where none covers that much, the event
-- overlapping the gap the most. Untraced: the part of the gap outside every recorded event of the launching
-- thread.
CREATE OR REPLACE TEMP TABLE _cover AS
WITH c AS (
    SELECT rank, lane, wid, w_tid, w_start, w_end, tid, 'host_call' AS kind, 3 AS kind_depth, nested::INTEGER AS depth,
           name, call_id AS id, start_ns, end_ns, overlap_ns
    FROM _call_candidates
    UNION ALL
    SELECT rank, lane, wid, w_tid, w_start, w_end, tid, cls,
           CASE cls WHEN 'cpu_op' THEN 2 WHEN 'user_range' THEN 1 ELSE 0 END, depth, NULL, range_id, start_ns,
           end_ns, overlap_ns
    FROM _range_candidates WHERE lane <> 'call'
),
picked AS (
    SELECT rank, lane, wid,
           arg_max(struct_pack(kind := kind, name := name, id := id, tid := tid, overlap_ns := overlap_ns),
                   (tid = w_tid, start_ns, -end_ns, kind_depth, depth))
               FILTER (WHERE overlap_ns >= $min_cover_pct / 100 * (w_end - w_start)) AS covering,
           arg_max(struct_pack(kind := kind, name := name, id := id, tid := tid, overlap_ns := overlap_ns),
                   (overlap_ns, tid = w_tid, start_ns, -end_ns, kind_depth, depth)) AS widest
    FROM c GROUP BY rank, lane, wid
),
traced AS (
    busy_time!((SELECT rank, lane, wid,
                       CASE WHEN start_ns > w_start THEN start_ns ELSE w_start END AS start_ns,
                       CASE WHEN end_ns < w_end THEN end_ns ELSE w_end END AS end_ns
                FROM c WHERE tid = w_tid), (rank, lane, wid))
),
chosen AS (SELECT *, covering IS NOT NULL AS covered, coalesce(covering, widest) AS e FROM picked)
SELECT w.rank, w.lane, w.wid, coalesce(p.covered, false) AS covered, p.e.kind, p.e.id,
       coalesce(p.e.name, n.name) AS name, p.e.tid, p.e.overlap_ns,
       -- the window's thread is known: no event of it there means all of the window is untraced
       w.end_ns - w.start_ns - coalesce(t.busy_ns, 0) AS untraced_ns
FROM (SELECT * FROM _windows WHERE lane <> 'call') w
LEFT JOIN chosen p ON p.rank = w.rank AND p.lane = w.lane AND p.wid = w.wid
LEFT JOIN traced t ON t.rank = w.rank AND t.lane = w.lane AND t.wid = w.wid
LEFT JOIN ranges n ON p.e.kind <> 'host_call' AND n.rank = w.rank AND n.range_id = p.e.id;

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
--   covered: whether some host event covers at least min_cover_pct (host_context.py, 50) of the gap: then the
--     cover_* columns name the covering cause; false when none does (cover_* then name the event overlapping the
--     gap the most, if any)
--   cover_kind: 'host_call' (runtime or driver call), 'cpu_op', 'python_frame' or 'user_range' (NVTX or user
--     annotation): the covering cause's kind, the deepest event covering at least min_cover_pct of the gap, of
--     the launching thread if one does, else of another thread of its process; NULL when no event of the
--     process overlaps the gap
--   cover_id: its api_calls.call_id (host_call) or ranges.range_id (the others)
--   cover_name: its name
--   cover_tid: its thread (the launching thread unless none of that thread's events covers enough)
--   cover_ns: the part of it inside the gap
--   cover_pct: 100 * cover_ns / dur_ns
--   untraced_ns: the part of the gap the launching thread spent outside every recorded API call, CPU op,
--     Python frame and NVTX or user range of its own (time the trace cannot attribute)
--   untraced_pct: 100 * untraced_ns / dur_ns
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
       h.overlap_ns AS host_call_overlap_ns,
       c.covered, c.kind AS cover_kind, c.id AS cover_id, c.name AS cover_name, c.tid AS cover_tid, c.overlap_ns AS cover_ns,
       100.0 * c.overlap_ns / g.dur_ns AS cover_pct, c.untraced_ns, 100.0 * c.untraced_ns / g.dur_ns AS untraced_pct,
       x.cpu_op_overlap_ns, x.cpu_op, x.issuing_op, x.python_frame, x.user_range
FROM _gaps g
LEFT JOIN api_calls l ON l.rank = g.rank AND l.call_id = g.launch_call_id
LEFT JOIN _call_context h ON h.rank = g.rank AND h.lane = 'gap ' || g.device_id AND h.wid = g.end_ns
LEFT JOIN _cover c ON c.rank = g.rank AND c.lane = 'gap ' || g.device_id AND c.wid = g.end_ns
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
    with_prev_end!((SELECT rank, call_id, idle_start AS start_ns, idle_end AS end_ns FROM windows WHERE exposes),
                   (rank), (call_id))
),
exposed AS (
    SELECT w.*, CASE WHEN NOT coalesce(w.exposes, false) THEN 0
                     WHEN f.prev_end_ns >= w.idle_end THEN 0
                     WHEN f.prev_end_ns > w.idle_start THEN w.idle_end - f.prev_end_ns
                     ELSE w.idle_end - w.idle_start END AS exposed_idle_ns
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
ORDER BY p.rank, p.call_id;

DROP TABLE _gaps;
DROP TABLE _blocking;
DROP TABLE _windows;
DROP TABLE _call_candidates;
DROP TABLE _range_candidates;
DROP TABLE _range_context;
DROP TABLE _call_context;
DROP TABLE _cover;
