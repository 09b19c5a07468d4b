-- stage: step_roles
-- The steps' kernels with what the phase evidence reads (category, the GEMM tile its name states), and every kernel
-- and memop of a step with its training role. Apart from `step_work`, whose windows and work need no kernel labels,
-- so that those run beside the categories and only this waits for them.
-- requires: labelled_kernels, kernel_steps, step_work_windows, step_work_memops, range_roles, api_calls, ranges
-- creates: step_work_kernels, step_work_roles
--
-- The training-role islands are analysis/intervals.py's busy_islands_sql, invoked as the busy_islands macro that
-- the loader expands into that helper's text.

-- section: gemm_tiles
-- (name, tile) over the distinct GEMM kernel names: 'small', 'large' or NULL, the token-side tile the name
-- states (the smaller side of the first of $tile_patterns that matches; a pattern out of a list is no constant,
-- so it is compiled once per name, and there are few GEMM names). Python stores the rows in `_gemm_tiles`.
SELECT name, CASE WHEN skinny THEN 'small'
                  WHEN high <= $small_max OR low <= $skinny_max THEN 'small'
                  WHEN low >= $large_min THEN 'large' END AS tile
FROM (
    -- the smaller and larger side; NULL when the name states no tile
    SELECT name, skinny,
           CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a < b THEN a ELSE b END AS low,
           CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a < b THEN b ELSE a END AS high
    FROM (SELECT name, skinny, TRY_CAST(regexp_extract(name, tile_pattern, 1) AS INTEGER) AS a,
                 TRY_CAST(regexp_extract(name, tile_pattern, 2) AS INTEGER) AS b
          FROM (SELECT name, regexp_matches(name, $skinny) AS skinny,
                       list_filter($tile_patterns, lambda p: regexp_matches(name, p))[1] AS tile_pattern
                FROM (SELECT DISTINCT name FROM labelled_kernels WHERE category = 'gemm')))
);

-- section: kernels
-- the kernels of steps with what phase evidence needs, names left behind (the GEMM tile is read once per
-- distinct name instead)
-- transient table step_work_kernels: one row per kernel launched in a step
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   step_id: `steps.step_id`
--   start_ns: copied from `kernels`
--   end_ns: copied from `kernels`
--   dur_ns: copied from `kernels`
--   launch_kind: copied from `kernels`
--   launch_call_id: copied from `kernels`
--   category: the kernel's category (`kernels.category`)
--   attention_phase_hint: the phase its attention kernel's name implies (`kernels.attention_phase_hint`)
--   tile: the token-side tile its GEMM name states: 'small', 'large' or NULL
CREATE OR REPLACE TABLE step_work_kernels AS
SELECT k.rank, k.kernel_id, s.step_id, k.start_ns, k.end_ns, k.dur_ns, k.launch_kind,
       k.launch_call_id, k.category, k.attention_phase_hint, t.tile
FROM labelled_kernels k JOIN kernel_steps s USING (rank, kernel_id)
LEFT JOIN _gemm_tiles t USING (name)  -- the token-side tile, read once per distinct GEMM kernel name
WHERE s.step_id IS NOT NULL;

-- Every kernel and memop of a step with its training role: backward, optimizer or other. A launch is backward,
-- optimizer or forward work when its call runs inside such a range on the same thread (`range_roles`: the autograd
-- engine records each node it runs, torch.optim records step and zero_grad, a training loop's NVTX ranges name its
-- phases). A strong optimizer range wins over backward (optimizer-in-backward hooks), and backward over forward
-- (a checkpointed forward recomputed in backward). Weak optimizer evidence, a multi-tensor or fused optimizer op
-- or an optimizer kernel, is optimizer work outside forward ranges, and only in a step that has backward work or a
-- strong optimizer range (on any thread of the rank: work inside one, or an island of such ranges starting in the
-- step's window); elsewhere it is ordinary work (a serving engine's `aten::_foreach_copy_` of graph inputs). A
-- thread most of whose launches are backward work is the autograd engine's device thread, so its remaining
-- launches outside forward ranges (a 2021-era trace's adds with no enclosing node range) are backward too.
-- transient table step_work_roles: one row per kernel or memop launched in a step
--   rank: trace rank
--   step_id: `steps.step_id`
--   work: 'kernel' or 'memop'
--   start_ns: start on the GPU
--   end_ns: end on the GPU
--   train_role: 'backward', 'optimizer' or 'other'
CREATE OR REPLACE TABLE step_work_roles AS
WITH marks AS (
    SELECT r.rank, r.pid, r.tid, r.start_ns, r.end_ns, n.backward, n.optimizer, n.optimizer_weak, n.forward
    FROM ranges r JOIN range_roles n USING (name, kind)
),
memop_calls AS (  -- the calls of the steps' memops only: grouping every API call costs as much as the rest
    SELECT a.rank, a.pid, a.correlation_id, any_value(a.tid) AS tid, min(a.start_ns) AS call_ns
    FROM api_calls a
    SEMI JOIN step_work_memops m ON m.rank = a.rank AND m.pid = a.pid AND m.correlation_id = a.correlation_id
    GROUP BY ALL
),
work AS (
    SELECT k.rank, k.step_id, 'kernel' AS work, k.kernel_id AS work_id, k.start_ns, k.end_ns,
           k.category = 'optimizer' AS optimizer_kernel, a.pid, a.tid, a.start_ns AS call_ns
    FROM step_work_kernels k LEFT JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
    UNION ALL
    SELECT m.rank, m.step_id, 'memop', m.memop_id, m.start_ns, m.end_ns, FALSE, c.pid, c.tid, c.call_ns
    FROM step_work_memops m LEFT JOIN memop_calls c
      ON c.rank = m.rank AND c.pid = m.pid AND c.correlation_id = m.correlation_id
),
-- a call is inside some backward (optimizer, weak optimizer, forward) range iff it is inside the union of those
-- ranges on its thread: the union's islands are disjoint, so an ASOF join finds the only candidate
-- (busy_islands_sql of the marks keyed by thread)
backward_islands AS (
    busy_islands!((SELECT rank, pid, tid, start_ns, end_ns FROM marks WHERE backward), (rank, pid, tid))
),
optimizer_islands AS (
    busy_islands!((SELECT rank, pid, tid, start_ns, end_ns FROM marks WHERE optimizer), (rank, pid, tid))
),
weak_islands AS (
    busy_islands!((SELECT rank, pid, tid, start_ns, end_ns FROM marks WHERE optimizer_weak), (rank, pid, tid))
),
forward_islands AS (
    busy_islands!((SELECT rank, pid, tid, start_ns, end_ns FROM marks WHERE forward), (rank, pid, tid))
),
marked_threads AS (SELECT DISTINCT rank, pid, tid FROM marks),
enclosed AS (
    -- only work launched from a thread with such ranges is looked up (an inference trace has few)
    SELECT w.*, coalesce(b.hi >= w.call_ns, FALSE) AS in_backward, coalesce(o.hi >= w.call_ns, FALSE) AS in_optimizer,
           coalesce(p.hi >= w.call_ns, FALSE) AS in_weak, coalesce(f.hi >= w.call_ns, FALSE) AS in_forward
    FROM (SELECT * FROM work SEMI JOIN marked_threads USING (rank, pid, tid)) w
    ASOF LEFT JOIN backward_islands b ON b.rank = w.rank AND b.pid = w.pid AND b.tid = w.tid AND b.lo <= w.call_ns
    ASOF LEFT JOIN optimizer_islands o ON o.rank = w.rank AND o.pid = w.pid AND o.tid = w.tid AND o.lo <= w.call_ns
    ASOF LEFT JOIN weak_islands p ON p.rank = w.rank AND p.pid = w.pid AND p.tid = w.tid AND p.lo <= w.call_ns
    ASOF LEFT JOIN forward_islands f ON f.rank = w.rank AND f.pid = w.pid AND f.tid = w.tid AND f.lo <= w.call_ns
    UNION ALL
    SELECT *, FALSE, FALSE, FALSE, FALSE FROM work ANTI JOIN marked_threads USING (rank, pid, tid)
),
training_steps AS (  -- steps where weak optimizer evidence counts
    SELECT DISTINCT rank, step_id FROM enclosed WHERE in_backward OR in_optimizer
    UNION
    SELECT w.rank, w.step_id
    FROM (SELECT rank, lo FROM backward_islands UNION ALL SELECT rank, lo FROM optimizer_islands) i
    ASOF JOIN step_work_windows w ON w.rank = i.rank AND i.lo >= w.start_ns
    WHERE i.lo < w.end_ns
),
autograd_threads AS (
    SELECT rank, pid, tid FROM enclosed WHERE tid IS NOT NULL
    GROUP BY ALL HAVING 2 * count(*) FILTER (WHERE in_backward) > count(*)
)
SELECT e.rank, e.step_id, e.work, e.start_ns, e.end_ns,
       CASE WHEN e.in_optimizer THEN 'optimizer'
            WHEN (e.in_weak OR e.optimizer_kernel) AND NOT e.in_forward AND s.step_id IS NOT NULL THEN 'optimizer'
            WHEN e.in_backward THEN 'backward'
            WHEN e.in_forward THEN 'other'
            WHEN t.tid IS NOT NULL THEN 'backward'
            ELSE 'other' END AS train_role
FROM enclosed e
LEFT JOIN autograd_threads t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid
LEFT JOIN training_steps s ON s.rank = e.rank AND s.step_id = e.step_id;
