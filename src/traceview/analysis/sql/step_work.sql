-- stage: step_work
-- The host windows that make steps, numbered, and the work each one launched: every kernel and memop with its
-- step, and each host range name's training role. Apart from `steps` (which reads these) so that it does not wait
-- for `op_costs`, which only the phase evidence reads (input shapes), and apart from `step_roles` so that it does not
-- wait for the kernels' categories: it reads no label, so it runs beside both.
-- requires: kernels, memops, api_calls, ranges
-- creates: range_roles, step_work_windows, kernel_steps, memop_steps, step_work_memops
--
-- A step is a host-side window (`_step_windows`), taken from the first source that gives a rank any: the user's
-- --step-regex (section user_regex), an engine's step annotation (section grammar, run once per grammar of
-- analysis/steps.toml in file order), an `execute_model` Python frame, a ProfilerStep, a training loop's NVTX/user
-- ranges (each outermost forward range opens one); nested windows keep the outermost; with none of these, a burst of
-- GPU work between idle gaps where such bursts repeat a kernel pattern (else the rank's GPU work is one window). The
-- GPU work of a step is what its launches caused (joined on correlation id). The interval facts (bursts, the
-- outermost forward ranges) are analysis/intervals.py's busy_islands_sql, invoked here as the busy_islands macro
-- that the loader expands into that helper's text: `prev_end_ns` is the latest end among the intervals of a key
-- that start before this one.

-- section: windows
CREATE OR REPLACE TEMP TABLE _step_windows (
    rank INTEGER, pid BIGINT, tid BIGINT, start_ns BIGINT, end_ns BIGINT, name VARCHAR,
    source VARCHAR, phase VARCHAR, confidence DOUBLE, prefill_requests BIGINT,
    prefill_tokens BIGINT, decode_requests BIGINT, decode_tokens BIGINT,
    prefill_context_tokens BIGINT, decode_context_tokens BIGINT, counts_tokens BOOLEAN
);

-- The rows of the relation `source_name` (rank, pid, tid, start_ns, end_ns, name) whose name matches a step
-- grammar, with the phase and token counts its capture groups give: `grammar_groups` names the pattern's
-- capture groups in order (a count the grammar does not capture is NULL), `_modes` maps a captured mode to
-- its phase; `counts_tokens` says whether the name states token counts. The caller binds the grammar's values, so
-- its pattern is a constant (compiled once).
CREATE OR REPLACE TEMP MACRO _grammar_windows(source_name, grammar_pattern, grammar_groups, grammar_name,
                                              grammar_confidence) AS TABLE
WITH matched AS (
    SELECT src.rank, src.pid, src.tid, src.start_ns, src.end_ns, src.name,
           regexp_extract(src.name, grammar_pattern, grammar_groups)::MAP(VARCHAR, VARCHAR) AS m
    FROM query_table(source_name) src
    WHERE regexp_matches(src.name, grammar_pattern)
),
counted AS (
    SELECT matched.*, md.phase AS mode_phase,
           TRY_CAST(m['prefill_requests'] AS BIGINT) AS pr, TRY_CAST(m['prefill_tokens'] AS BIGINT) AS pt,
           TRY_CAST(m['decode_requests'] AS BIGINT) AS dr, TRY_CAST(m['decode_tokens'] AS BIGINT) AS dt,
           TRY_CAST(m['prefill_context_tokens'] AS BIGINT) AS pc, TRY_CAST(m['decode_context_tokens'] AS BIGINT) AS dc,
           TRY_CAST(m['requests'] AS BIGINT) AS rq, TRY_CAST(m['tokens'] AS BIGINT) AS tk
    FROM matched LEFT JOIN _modes md ON md.mode = m['mode']
),
labelled AS (
    SELECT *, coalesce(mode_phase, CASE
        WHEN coalesce(pr, pt, 0) > 0 AND coalesce(dr, dt, 0) > 0 THEN 'mixed'
        WHEN coalesce(pr, pt, 0) > 0 THEN 'prefill'
        WHEN coalesce(dr, dt, 0) > 0 THEN 'decode'
        ELSE 'empty' END) AS phase
    FROM counted
)
SELECT rank, pid, tid, start_ns, end_ns, name, 'annotation:' || grammar_name AS source, phase,
       grammar_confidence::DOUBLE AS confidence,
       coalesce(pr, CASE WHEN phase = 'prefill' THEN rq END) AS prefill_requests,
       coalesce(pt, CASE WHEN phase = 'prefill' THEN tk END, CASE WHEN phase = 'decode' THEN 0 END) AS prefill_tokens,
       coalesce(dr, CASE WHEN phase = 'decode' THEN rq END) AS decode_requests,
       -- a generation request makes one token per step when the annotation counts only requests
       coalesce(dt, CASE WHEN phase = 'decode' THEN coalesce(tk, dr) END,
                CASE WHEN phase = 'prefill' THEN 0 END) AS decode_tokens,
       pc AS prefill_context_tokens, dc AS decode_context_tokens,
       pt IS NOT NULL OR dt IS NOT NULL OR tk IS NOT NULL AS counts_tokens
FROM labelled;

-- The annotation ranges ($annotation_kinds), the only ranges a grammar reads, picked out of all ranges once: every
-- grammar tried reads these few (the 10x vLLM trace: 100 of 1.3 M ranges, four grammars)
CREATE OR REPLACE TEMP TABLE _annotations AS
SELECT rank, pid, tid, start_ns, end_ns, name FROM ranges WHERE list_contains($annotation_kinds, kind);

-- section: user_regex
INSERT INTO _step_windows
SELECT rank, pid, tid, start_ns, end_ns, name, 'user_regex', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM ranges
WHERE kind <> 'gpu_user_annotation' AND regexp_matches(name, $regex)
  AND rank NOT IN (SELECT DISTINCT rank FROM _step_windows);

-- section: annotated_ranks
-- The ranks with annotation ranges: the only ranks a grammar can give windows
SELECT DISTINCT rank FROM _annotations;

-- section: windowed_ranks
-- The ranks that have windows so far: a grammar reads only the others
SELECT DISTINCT rank FROM _step_windows;

-- section: grammar
-- One grammar ($pattern, $groups, $grammar, $confidence; its modes in `_modes`): windows from the annotation
-- ranges matching it, on ranks that have none yet ...
INSERT INTO _step_windows BY NAME
WITH grammar_input AS (SELECT * FROM _annotations WHERE rank NOT IN (SELECT DISTINCT rank FROM _step_windows))
SELECT * FROM _grammar_windows('grammar_input', $pattern, $groups, $grammar, $confidence);

-- section: user_regex_phases
-- ... and phases for user-regex windows whose names match it (run only with --step-regex: no other source
-- makes user_regex windows)
UPDATE _step_windows w SET phase = g.phase, confidence = g.confidence,
       prefill_requests = g.prefill_requests, prefill_tokens = g.prefill_tokens,
       decode_requests = g.decode_requests, decode_tokens = g.decode_tokens,
       prefill_context_tokens = g.prefill_context_tokens, decode_context_tokens = g.decode_context_tokens,
       counts_tokens = g.counts_tokens
FROM (
    WITH grammar_input AS (SELECT * FROM _step_windows WHERE phase IS NULL AND source = 'user_regex')
    SELECT * FROM _grammar_windows('grammar_input', $pattern, $groups, $grammar, $confidence)
) g
WHERE w.phase IS NULL AND w.source = 'user_regex' AND w.rank = g.rank AND w.pid = g.pid
  AND w.tid = g.tid AND w.start_ns = g.start_ns AND w.end_ns = g.end_ns AND w.name = g.name;

-- section: range_roles
-- The training role of each distinct host range name and kind (the regexes run once per name, not once per range):
-- $backward, $optimizer (strong) and $optimizer_weak (steps.toml [training]) on every host range, and the training
-- loop's phase words (steps.toml [training_loop]: $loop_forward, $loop_loss, $loop_backward for backward words and
-- gradient all-reduces, $loop_optimizer for optimizer and zero_grad words) on annotations ($annotation_kinds) only.
-- A name that names two of the loop's roles (forward, backward, optimizer: "forward-backward") names none; a loss
-- word beside a backward word is the backward call ("loss.backward").
-- transient table range_roles: one row per distinct host range (name, kind) with a training role
--   name: ranges.name
--   kind: ranges.kind: cpu_op, user_annotation, nvtx or python_function
--   backward: backward work: an autograd node ($backward), or an annotation naming the loop's backward role
--     ($loop_backward: backward words, gradient all-reduces)
--   optimizer: optimizer work: torch.optim's step or zero_grad ($optimizer), or an annotation naming the loop's
--     optimizer role ($loop_optimizer)
--   optimizer_weak: weak optimizer evidence: a multi-tensor or fused optimizer op ($optimizer_weak)
--   forward: an annotation naming the loop's forward role (forward or loss words) and no backward or optimizer op
--   iteration_start: forward, and named with a forward word: a range that opens a training-loop step
CREATE OR REPLACE TABLE range_roles AS
WITH matched AS (
    SELECT name, kind, regexp_matches(name, $backward) AS op_backward, regexp_matches(name, $optimizer) AS op_optimizer,
           regexp_matches(name, $optimizer_weak) AS optimizer_weak,
           list_contains($annotation_kinds, kind) AND regexp_matches(name, $loop_forward) AS w_forward,
           list_contains($annotation_kinds, kind) AND regexp_matches(name, $loop_loss) AS w_loss,
           list_contains($annotation_kinds, kind) AND regexp_matches(name, $loop_backward) AS w_backward,
           list_contains($annotation_kinds, kind) AND regexp_matches(name, $loop_optimizer) AS w_optimizer
    FROM (SELECT DISTINCT name, kind FROM ranges WHERE kind IN ('cpu_op', 'user_annotation', 'nvtx', 'python_function'))
),
looped AS (  -- the one loop role the name's words name, NULL for none or several
    SELECT *, CASE WHEN (w_forward OR (w_loss AND NOT w_backward))::INT + w_backward::INT + w_optimizer::INT = 1
                   THEN CASE WHEN w_backward THEN 'backward' WHEN w_optimizer THEN 'optimizer' ELSE 'forward' END
              END AS loop_role
    FROM matched
)
SELECT name, kind,
       op_backward OR loop_role IS NOT DISTINCT FROM 'backward' AS backward,
       op_optimizer OR loop_role IS NOT DISTINCT FROM 'optimizer' AS optimizer,
       optimizer_weak,
       NOT op_backward AND NOT op_optimizer AND loop_role IS NOT DISTINCT FROM 'forward' AS forward,
       NOT op_backward AND NOT op_optimizer AND loop_role IS NOT DISTINCT FROM 'forward' AND w_forward AS iteration_start
FROM looped
WHERE op_backward OR op_optimizer OR optimizer_weak OR loop_role IS NOT NULL;

-- section: work
INSERT INTO _step_windows
SELECT rank, pid, tid, start_ns, end_ns, name, 'execute_model', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM ranges WHERE (kind = 'python_function' AND name GLOB '*: execute_model')
  AND rank NOT IN (SELECT DISTINCT rank FROM _step_windows);

INSERT INTO _step_windows
SELECT rank, pid, tid, start_ns, end_ns, name, 'profiler_step', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM ranges WHERE (kind = 'profiler_step') AND rank NOT IN (SELECT DISTINCT rank FROM _step_windows);

-- A training loop with no step marker: on a rank with no window yet, each outermost forward range of a thread
-- (a name with a forward word: `range_roles.iteration_start`) opens a step that runs to the next one's start, the
-- last to the latest end among its process's training ranges that start in it. Only on a thread with at least
-- two, in a process that also has backward or optimizer ranges: forward ranges alone are an inference loop, left
-- to the fallback below. Gradient accumulation's micro-batches are a step each (each runs a forward).
INSERT INTO _step_windows
WITH role_ranges AS (
    SELECT r.rank, r.pid, r.tid, r.start_ns, r.end_ns, r.name, n.backward, n.optimizer, n.iteration_start
    FROM (SELECT * FROM ranges WHERE rank NOT IN (SELECT DISTINCT rank FROM _step_windows)) r
    JOIN range_roles n USING (name, kind)
),
forwards AS (SELECT rank, pid, tid, start_ns, end_ns, name FROM role_ranges WHERE iteration_start),
training_processes AS (SELECT DISTINCT rank, pid FROM role_ranges WHERE backward OR optimizer),
opened AS (  -- the outermost forward ranges: busy_islands_sql of them keyed by thread
    busy_islands!((SELECT rank, pid, tid, start_ns, end_ns FROM forwards), (rank, pid, tid))
),
cycles AS (
    SELECT o.rank, o.pid, o.tid, o.lo, lead(o.lo) OVER (PARTITION BY o.rank, o.pid, o.tid ORDER BY o.lo) AS next_lo,
           count(*) OVER (PARTITION BY o.rank, o.pid, o.tid) AS cycles
    FROM opened o SEMI JOIN training_processes USING (rank, pid)
),
named AS (  -- the outermost range's name (the longest of those that open the island)
    SELECT c.rank, c.pid, c.tid, c.lo, any_value(c.next_lo) AS next_lo, arg_max(f.name, f.end_ns) AS name
    FROM cycles c JOIN forwards f ON f.rank = c.rank AND f.pid = c.pid AND f.tid = c.tid AND f.start_ns = c.lo
    WHERE c.cycles > 1
    GROUP BY ALL
),
last_ends AS (
    SELECT n.rank, n.pid, n.tid, max(r.end_ns) AS hi
    FROM named n JOIN role_ranges r ON r.rank = n.rank AND r.pid = n.pid AND r.start_ns >= n.lo
    WHERE n.next_lo IS NULL
    GROUP BY ALL
)
SELECT n.rank, n.pid, n.tid, n.lo, coalesce(n.next_lo, l.hi), n.name, 'training_loop',
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM named n LEFT JOIN last_ends l USING (rank, pid, tid);

-- Drop windows nested in another window of the same thread (a step annotated twice). A window holding another
-- holds its start, so each window is listed in the time buckets it touches and meets, by a hash join on the
-- thread and the bucket, only the windows starting in them: a join on the thread alone compared every pair
-- (50 k windows of one thread: 5.3 s)
CREATE OR REPLACE TEMP TABLE _nested_windows AS
WITH z AS (bucket_width!((SELECT start_ns, end_ns FROM _step_windows))),
listed AS (in_buckets!((SELECT * FROM _step_windows), (SELECT ns FROM z)))
SELECT DISTINCT w.rank, w.pid, w.tid, w.start_ns, w.end_ns, w.name
FROM (SELECT w.*, w.start_ns // z.ns AS b FROM _step_windows w, z) w
JOIN listed o ON o.rank = w.rank AND o.pid = w.pid AND o.tid = w.tid AND o.b = w.b
WHERE o.start_ns <= w.start_ns AND o.end_ns >= w.end_ns
  AND (o.start_ns < w.start_ns OR o.end_ns > w.end_ns OR o.name < w.name);

DELETE FROM _step_windows w USING _nested_windows n
WHERE w.rank = n.rank AND w.pid = n.pid AND w.tid = n.tid AND w.start_ns = n.start_ns AND w.end_ns = n.end_ns
  AND w.name IS NOT DISTINCT FROM n.name;

DROP TABLE _nested_windows;

-- Fallback: a step is a burst of GPU work ended by an idle gap longer than $gap ns, with that gap, but only on
-- a rank whose bursts repeat a kernel pattern; elsewhere the rank's GPU work is one window. A burst's pattern is
-- the names of its first $head kernels, so iterations that differ only in their tail (a logging reduction, an
-- optimizer on every other step) still match. The bursts split into steps when at least half of them share
-- their pattern with another burst: 50 launches of one solver kernel are 50 steps, a test binary's sequence of
-- different matmuls is one window (with a `gap_steps_not_repeating` diagnostic saying why), not a "step" per test.
CREATE OR REPLACE TEMP TABLE _gap_bursts AS
WITH bursts AS (SELECT *, row_number() OVER (PARTITION BY rank ORDER BY lo) AS burst FROM (
    -- the bursts of all GPU work of ranks without windows, copies included: a copy-bound run's copies belong to
    -- its iterations (busy_islands_sql keyed by rank, merging gaps up to $gap)
    busy_islands!((SELECT rank, start_ns, end_ns
                   FROM (SELECT rank, start_ns, end_ns FROM kernels UNION ALL SELECT rank, start_ns, end_ns FROM memops)
                   WHERE rank NOT IN (SELECT DISTINCT rank FROM _step_windows)), (rank), $gap)
)),
heads AS (
    -- the first $head kernels of each burst: one stream of the bursts' starts and the kernels in start order (a
    -- burst before a kernel of the same start; the kernels nearly in that order already), each kernel reading the
    -- latest burst before it and its place after it; an ASOF join of every kernel cost three times the sort
    SELECT rank, b.burst, kernel_id, start_ns
    FROM (
        SELECT *, last_value(CASE WHEN kernel_id IS NULL THEN struct_pack(rank := rank, burst := burst, place := place) END
                             IGNORE NULLS) OVER (ROWS UNBOUNDED PRECEDING) AS b
        FROM (SELECT *, row_number() OVER () AS place
              FROM (SELECT * FROM (SELECT rank, lo AS start_ns, NULL::BIGINT AS kernel_id, burst, 0 AS ord FROM bursts
                                   UNION ALL
                                   SELECT rank, start_ns, kernel_id, NULL, 1 FROM kernels
                                   WHERE rank IN (SELECT rank FROM bursts))
                    ORDER BY rank, start_ns, ord, kernel_id))
    )
    WHERE kernel_id IS NOT NULL AND b.rank = rank AND place - b.place <= $head
),
patterns AS (  -- the names of the first kernels of each burst, in start order: a top-n, not a sort
    -- (wrapped, so an unnamed kernel keeps its place)
    SELECT h.rank, h.burst, hash(list_transform(min_by(struct_pack(name := k.name), (h.start_ns, h.kernel_id), $head), lambda x: x.name)) AS pattern
    FROM heads h JOIN kernels k ON k.rank = h.rank AND k.kernel_id = h.kernel_id
    GROUP BY ALL
)
-- a copy-only burst has no kernel pattern: it is GPU work of the run, but repeats nothing
SELECT b.rank, b.burst, b.lo, b.hi, p.pattern,
       CASE WHEN p.pattern IS NULL THEN 1 ELSE count(*) OVER (PARTITION BY b.rank, p.pattern) END AS occurrences
FROM bursts b LEFT JOIN patterns p USING (rank, burst);

CREATE OR REPLACE TEMP TABLE _gap_ranks AS
SELECT rank, count(*) AS bursts, count(DISTINCT pattern) AS patterns,
       count(*) FILTER (WHERE occurrences > 1) AS repeating, min(lo) AS lo, max(hi) AS hi,
       2 * count(*) FILTER (WHERE occurrences > 1) >= count(*) AS split
FROM _gap_bursts GROUP BY rank;

INSERT INTO _step_windows
-- an iteration is its burst and the idle gap after it, up to the next burst: the host time between
-- bursts is part of every iteration's cycle (the last burst ends with its work)
SELECT b.rank, NULL, NULL, b.lo, coalesce(lead(b.lo) OVER (PARTITION BY b.rank ORDER BY b.lo), b.hi),
       'gpu burst', 'gpu_gap', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM _gap_bursts b JOIN _gap_ranks r USING (rank) WHERE r.split
UNION ALL
SELECT rank, NULL, NULL, lo, hi, 'gpu span', 'gpu_gap', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM _gap_ranks WHERE NOT split;

INSERT INTO diagnostics
SELECT rank, 'analysis', 'info', 'gap_steps_not_repeating',
       printf('%d GPU bursts between idle gaps over %.3f ms, with %d distinct kernel patterns (%d bursts share '
              || 'theirs with another): fewer than half repeat, so they are one window, not %d steps; a step '
              || 'marker (ProfilerStep, an NVTX range per iteration, --step-regex) would split it',
              bursts, $gap / 1e6, patterns, repeating, bursts),
       NULL
FROM _gap_ranks WHERE NOT split AND bursts > 1
ORDER BY rank;

DROP TABLE _gap_bursts;

DROP TABLE _gap_ranks;

-- Each kernel and memop gets the step whose window holds its launch call (ASOF on the thread). A launch from a
-- thread that has no step window of its own (PyTorch runs backward on an autograd thread while ProfilerStep#N is
-- recorded on the main one) belongs to the step its process has open at that moment.
-- transient table step_work_windows: one row per step window
--   rank: trace rank
--   pid: process of the window's range; NULL for a window of GPU work (gpu_gap)
--   tid: thread of the window's range; NULL for a window of GPU work
--   start_ns: window start
--   end_ns: window end
--   name: the window's range name (`gpu burst`, `gpu span` for GPU work)
--   source: where the window came from (steps.step_source)
--   phase: the phase its annotation states; NULL when none does
--   confidence: the annotation grammar's confidence; NULL without one
--   prefill_requests: from the annotation, NULL when unknown
--   prefill_tokens: from the annotation, NULL when unknown
--   decode_requests: from the annotation, NULL when unknown
--   decode_tokens: from the annotation, NULL when unknown
--   prefill_context_tokens: from the annotation, NULL when unknown
--   decode_context_tokens: from the annotation, NULL when unknown
--   counts_tokens: whether the annotation states token counts
--   step_id: the step's number within the rank, in time order from 0 (`steps.step_id`)
CREATE OR REPLACE TABLE step_work_windows AS
SELECT *, row_number() OVER (PARTITION BY rank ORDER BY start_ns, end_ns) - 1 AS step_id
FROM _step_windows;

CREATE OR REPLACE TEMP TABLE _step_calls AS
WITH step_threads AS (SELECT DISTINCT rank, pid, tid FROM step_work_windows WHERE pid IS NOT NULL),
step_processes AS (SELECT DISTINCT rank, pid FROM step_threads),
-- only calls of processes with a thread's window are matched (windows of GPU bursts have no thread)
calls AS (
    SELECT a.* FROM api_calls a SEMI JOIN step_processes p ON p.rank = a.rank AND p.pid = a.pid
    WHERE a.correlation_id IS NOT NULL
),
own_thread AS (
    SELECT a.rank, a.pid, a.correlation_id, w.step_id
    FROM calls a
    ASOF JOIN step_work_windows w
      ON a.rank = w.rank AND a.pid = w.pid AND a.tid = w.tid AND a.start_ns >= w.start_ns
    WHERE a.start_ns < w.end_ns
),
other_thread AS (
    SELECT a.rank, a.pid, a.correlation_id, w.step_id
    FROM (SELECT * FROM calls a
          WHERE NOT EXISTS (SELECT 1 FROM step_threads t
                            WHERE t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid)) a
    ASOF JOIN step_work_windows w
      ON a.rank = w.rank AND a.pid = w.pid AND a.start_ns >= w.start_ns
    WHERE a.start_ns < w.end_ns
)
SELECT rank, pid, correlation_id, any_value(step_id) AS step_id
FROM (SELECT * FROM own_thread UNION ALL SELECT * FROM other_thread)
GROUP BY ALL;

-- The step whose window holds the launch call; a burst window (gpu_gap) holds the work itself; work whose launch
-- call the trace lacks (issued before the capture began) goes by where it ran.
-- transient table kernel_steps: one row per kernel
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   step_id: the step whose launch call started this work (`steps.step_id`); work with no launch call in the trace
--     (issued before the capture began): the latest-starting step whose window holds its start; NULL when launched
--     outside every step
CREATE OR REPLACE TABLE kernel_steps AS
WITH by_call AS (
    SELECT t.rank, t.kernel_id, c.step_id FROM kernels t
    JOIN _step_calls c ON t.rank = c.rank AND t.pid = c.pid AND t.correlation_id = c.correlation_id
),
by_burst AS (
    SELECT t.rank, t.kernel_id, w.step_id
    FROM kernels t ASOF JOIN (SELECT * FROM step_work_windows WHERE source = 'gpu_gap') w
      ON t.rank = w.rank AND t.start_ns >= w.start_ns
    WHERE t.end_ns <= w.end_ns
),
by_start AS (
    -- a kernel linked to its launch call has that call's pid and correlation id, so only the unlinked ones (and
    -- those of no known pid) are looked up among the calls: on the 2 M-kernel export the lookup hashed 2 M calls
    -- for no kernel
    SELECT t.rank, t.kernel_id, w.step_id
    FROM (SELECT * FROM kernels t WHERE (t.launch_call_id IS NULL OR t.pid IS NULL) AND NOT EXISTS (
              SELECT 1 FROM api_calls a
              WHERE a.rank = t.rank AND a.pid = t.pid AND a.correlation_id = t.correlation_id)) t
    ASOF JOIN step_work_windows w ON t.rank = w.rank AND t.start_ns >= w.start_ns
    WHERE t.start_ns < w.end_ns
)
SELECT rank, kernel_id, coalesce(b.step_id, c.step_id, u.step_id) AS step_id
FROM by_call c FULL JOIN by_burst b USING (rank, kernel_id) FULL JOIN by_start u USING (rank, kernel_id);

-- transient table memop_steps: one row per memop
--   rank: trace rank
--   memop_id: `memops.memop_id`
--   step_id: the step whose launch call started this work (`steps.step_id`); work with no launch call in the trace
--     (issued before the capture began): the latest-starting step whose window holds its start; NULL when launched
--     outside every step
CREATE OR REPLACE TABLE memop_steps AS
WITH by_call AS (
    SELECT t.rank, t.memop_id, c.step_id FROM memops t
    JOIN _step_calls c ON t.rank = c.rank AND t.pid = c.pid AND t.correlation_id = c.correlation_id
),
by_burst AS (
    SELECT t.rank, t.memop_id, w.step_id
    FROM memops t ASOF JOIN (SELECT * FROM step_work_windows WHERE source = 'gpu_gap') w
      ON t.rank = w.rank AND t.start_ns >= w.start_ns
    WHERE t.end_ns <= w.end_ns
),
by_start AS (
    SELECT t.rank, t.memop_id, w.step_id
    FROM (SELECT * FROM memops t WHERE NOT EXISTS (
              SELECT 1 FROM api_calls a
              WHERE a.rank = t.rank AND a.pid = t.pid AND a.correlation_id = t.correlation_id)) t
    ASOF JOIN step_work_windows w ON t.rank = w.rank AND t.start_ns >= w.start_ns
    WHERE t.start_ns < w.end_ns
)
SELECT rank, memop_id, coalesce(b.step_id, c.step_id, u.step_id) AS step_id
FROM by_call c FULL JOIN by_burst b USING (rank, memop_id) FULL JOIN by_start u USING (rank, memop_id);

-- the memops of steps: their ingested columns ($memop_columns, the contract's: a second analysis finds
-- step_id already on memops) and their step
-- transient table step_work_memops: one row per memop launched in a step
--   rank: trace rank
--   memop_id: copied from `memops`
--   kind: copied from `memops`
--   copy_kind: copied from `memops`
--   bytes: copied from `memops`
--   src_kind: copied from `memops`
--   dst_kind: copied from `memops`
--   device_id: copied from `memops`
--   stream_id: copied from `memops`
--   pid: copied from `memops`
--   start_ns: copied from `memops`
--   end_ns: copied from `memops`
--   dur_ns: copied from `memops`
--   correlation_id: copied from `memops`
--   name: copied from `memops`
--   step_id: `steps.step_id`
CREATE OR REPLACE TABLE step_work_memops AS
SELECT m.*, s.step_id
FROM (SELECT COLUMNS(lambda c: list_contains($memop_columns, c)) FROM memops) m
JOIN memop_steps s USING (rank, memop_id) WHERE s.step_id IS NOT NULL;

-- section: cleanup
DROP TABLE IF EXISTS _step_windows;

DROP TABLE IF EXISTS _annotations;

DROP TABLE IF EXISTS _step_calls;

DROP MACRO TABLE IF EXISTS _grammar_windows;
