-- stage: steady
-- One-time work (module loading, graph capture, allocator growth, context creation, collectives that never
-- recur), each step's state (steady, warm-up, initialisation) with the reason, and per rank whether the capture
-- holds a steady state; findings are priced on steady steps only (rules/engine.py reads step_states) and TV104
-- says when there are none.
-- requires: steps, kernels, api_calls, ranges, gpu_activity
-- creates: init_windows, step_states, steady_state
--
-- One-time host work is recognised by API family: each family's RE2 regex ($family_module_load,
-- $family_graph_capture, $family_allocation, $family_context: steady.INIT_FAMILIES) is matched on
-- api_calls.name, which keeps driver suffixes such as _v2; one-time host ranges ($family_compilation,
-- $family_comm_init: steady.INIT_RANGE_FAMILIES) on the names of host ranges (NVTX, user annotations, CPU ops,
-- Python frames); $begin_capture and $end_capture pick the calls
-- that open and close a stream capture. step_states and steady_state take the union of init windows per key
-- (intervals.py's busy_time_sql), so steady.py composes them; their thresholds are parameters there.

-- table init_windows: one row per piece of one-time work: a host API call (a stream capture from begin to end) or a one-time collective kernel
--   rank: trace rank
--   step_id: the step whose window holds it (steps.step_id: a host call by its start within the step's host
--     window, a kernel by its launch); NULL outside every step
--   kind: module_load (cuModuleLoad*, cuLibraryLoad*, hipModuleLoad*, cuLink*), graph_capture (a stream capture
--     from its Begin to its EndCapture call, cudaGraphInstantiate*, GraphUpload), allocation (cudaMalloc*,
--     cuMemAlloc*, cuMemCreate/Map/SetAccess/AddressReserve, pinned host allocations, the hip equivalents),
--     context (cuInit, cuCtxCreate, primary context retain), compilation (a host range that compiles or
--     autotunes: nvFuser compileFusion, Inductor compile_fx, Triton autotuning; not a compiled region running),
--     comm_init (a range creating communicators: ncclCommInitRank, init_process_group); a range name of these two
--     that runs in at least half of the rank's steps, and in two or more, recurs and is left out; collective (a communication kernel that does not
--     recur: its name runs only in the first of several steps of a phase, before the rank's first step, or, a
--     broadcast, before the rank's first non-communication kernel)
--   name: the API call's or range's name ('<Begin>..<EndCapture>' for a capture, e.g.
--     'cudaStreamBeginCapture..cudaStreamEndCapture'), or the kernel's short name
--   side: 'host' (an API call) or 'gpu' (a collective kernel)
--   pid: process
--   tid: calling thread; for a kernel, the thread that launched it (NULL when unknown)
--   start_ns: start
--   end_ns: end
--   dur_ns: end_ns - start_ns
CREATE OR REPLACE TABLE init_windows AS
WITH families AS MATERIALIZED (  -- the regexes run once per distinct API name (stored: the planner moved them onto every call)
    SELECT name, CASE WHEN regexp_matches(name, $family_module_load) THEN 'module_load'
                      WHEN regexp_matches(name, $family_graph_capture) THEN 'graph_capture'
                      WHEN regexp_matches(name, $family_allocation) THEN 'allocation'
                      WHEN regexp_matches(name, $family_context) THEN 'context' END AS kind
    FROM (SELECT DISTINCT name FROM api_calls)
),
calls AS (
    SELECT a.rank, a.pid, a.tid, a.name, f.kind, a.start_ns, a.end_ns
    FROM api_calls a JOIN families f USING (name) WHERE f.kind IS NOT NULL
),
range_families AS (
    -- host ranges of one-time work, matched once per distinct range name; a Python frame by its function only
    -- ('path/compiler.py(88): get_specialization' runs no compiler)
    SELECT name, range_kind, CASE WHEN regexp_matches(subject, $family_compilation) THEN 'compilation'
                                  WHEN regexp_matches(subject, $family_comm_init) THEN 'comm_init' END AS kind
    FROM (SELECT name, range_kind,
                 CASE WHEN range_kind = 'python_function' THEN regexp_extract(name, '\): (.*)$', 1) ELSE name END
                     AS subject
          FROM (SELECT DISTINCT name, kind AS range_kind FROM ranges
                WHERE kind IN ('nvtx', 'user_annotation', 'cpu_op', 'python_function')))
),
one_time_ranges AS (
    SELECT r.rank, r.pid, r.tid, r.name, f.kind, r.start_ns, r.end_ns
    FROM ranges r JOIN range_families f ON f.name = r.name AND f.range_kind = r.kind
    WHERE f.kind IS NOT NULL
),
capture_ends AS (SELECT * FROM calls WHERE regexp_matches(name, $end_capture)),
host AS (
    -- a capture lasts from its BeginCapture call to the thread's next EndCapture call
    SELECT b.rank, b.pid, b.tid, b.name || coalesce('..' || e.name, '') AS name, b.kind, b.start_ns,
           CASE WHEN e.end_ns IS NULL OR e.end_ns < b.end_ns THEN b.end_ns ELSE e.end_ns END AS end_ns
    FROM (SELECT * FROM calls WHERE regexp_matches(name, $begin_capture)) b
    ASOF LEFT JOIN capture_ends e ON e.rank = b.rank AND e.pid = b.pid AND e.tid = b.tid AND e.start_ns >= b.start_ns
    UNION ALL
    SELECT rank, pid, tid, name, kind, start_ns, end_ns FROM calls
    WHERE NOT regexp_matches(name, $begin_capture) AND NOT regexp_matches(name, $end_capture)
    UNION ALL
    SELECT rank, pid, tid, name, kind, start_ns, end_ns FROM one_time_ranges
    UNION ALL  -- an EndCapture with no BeginCapture before it on its thread (capture began before the trace)
    SELECT e.rank, e.pid, e.tid, e.name, e.kind, e.start_ns, e.end_ns FROM capture_ends e
    WHERE NOT EXISTS (SELECT 1 FROM calls b WHERE regexp_matches(b.name, $begin_capture) AND b.rank = e.rank
                      AND b.pid = e.pid AND b.tid = e.tid AND b.start_ns <= e.start_ns)
),
host_steps AS (
    SELECT h.*, s.step_id
    FROM host h ASOF LEFT JOIN (SELECT rank, step_id, cpu_start_ns, cpu_end_ns FROM steps) s
      ON s.rank = h.rank AND h.start_ns >= s.cpu_start_ns
),
recurring_ranges AS (
    -- a compile or communicator range whose name runs in at least half of the rank's steps (and in two or more)
    -- is per-step bookkeeping (a cache's end_compile hook), not one-time work
    SELECT h.rank, h.name FROM host_steps h
    JOIN (SELECT rank, count(*) AS steps FROM steps GROUP BY rank) n USING (rank)
    WHERE h.kind IN ('compilation', 'comm_init') AND h.step_id IS NOT NULL
    GROUP BY h.rank, h.name, n.steps
    HAVING count(DISTINCT h.step_id) >= 2 AND 2 * count(DISTINCT h.step_id) >= n.steps
),
phase_steps AS (  -- each step with work: whether it is the first of several of its phase on the rank
    SELECT rank, step_id, step_id = min(step_id) OVER w AND count(*) OVER w > 1 AS first_of_several
    FROM steps WHERE kernels > 0
    WINDOW w AS (PARTITION BY rank, phase)
),
comm AS (
    SELECT g.rank, g.pid, k.tid, g.step_id, g.start_ns, g.end_ns, g.comm_family, k.name,
           coalesce(k.short_name, k.name) AS label
    FROM gpu_activity g JOIN kernels k ON k.rank = g.rank AND k.kernel_id = g.activity_id
    WHERE g.kind = 'kernel' AND g.comm_family IS NOT NULL
),
first_compute AS (
    SELECT rank, min(start_ns) AS start_ns FROM gpu_activity
    WHERE kind = 'kernel' AND comm_family IS NULL GROUP BY rank
),
one_time_names AS (
    SELECT c.rank, c.name
    FROM comm c
    LEFT JOIN phase_steps w USING (rank, step_id)
    LEFT JOIN (SELECT rank, min(start_ns) AS start_ns FROM steps GROUP BY rank) s USING (rank)
    LEFT JOIN first_compute f USING (rank)
    GROUP BY c.rank, c.name
    -- every occurrence is one-time (a missing step or compute kernel satisfies no condition)
    HAVING bool_and(coalesce((c.step_id IS NULL AND c.end_ns <= s.start_ns)
                             OR w.first_of_several
                             OR (c.comm_family = 'broadcast' AND c.end_ns <= f.start_ns), FALSE))
)
SELECT rank, step_id, kind, name, side, pid, tid, start_ns, end_ns, end_ns - start_ns AS dur_ns
FROM (
    SELECT h.rank, CASE WHEN h.start_ns < s.cpu_end_ns THEN h.step_id END AS step_id, h.kind, h.name,
           'host' AS side, h.pid, h.tid, h.start_ns, h.end_ns
    FROM host_steps h LEFT JOIN steps s ON s.rank = h.rank AND s.step_id = h.step_id
    WHERE NOT EXISTS (SELECT 1 FROM recurring_ranges r WHERE r.rank = h.rank AND r.name = h.name)
    UNION ALL
    SELECT c.rank, c.step_id, 'collective', c.label, 'gpu', c.pid, c.tid, c.start_ns, c.end_ns
    FROM comm c JOIN one_time_names o USING (rank, name)
)
ORDER BY rank, start_ns, kind;

-- init windows inside their step, clipped to it: what step_states and steady_state sum per step
CREATE OR REPLACE TEMP VIEW _clipped_init AS
SELECT w.rank, w.step_id, w.kind, w.name,
       CASE WHEN w.start_ns < s.start_ns THEN s.start_ns ELSE w.start_ns END AS start_ns,
       CASE WHEN w.end_ns > s.end_ns THEN s.end_ns ELSE w.end_ns END AS end_ns
FROM init_windows w JOIN steps s USING (rank, step_id);

-- table step_states: one row per step
--   rank: trace rank
--   step_id: steps.step_id
--   phase: steps.phase
--   state: 'init' (one-time work covers at least 10% of the step's wall, allocations counted only above twice
--     the median of the other steps of its phase; or it runs a one-time collective), 'warmup' (not init, before
--     every steady step of its phase, and at least 1.5x slower than the median of the later steps of its phase)
--     or 'steady'
--   reason: what made it so, with the numbers: the one-time work by call family, or the slowdown against the
--     later steps of the phase
--   wall_ns: steps.end_ns - steps.start_ns
--   init_ns: length of the union of the init_windows inside the step, clipped to it; NULL when the rank has no
--     API calls (one-time host work cannot be seen)
--   slowdown: the step's pace over the median pace of the later steps of its phase (pace: wall time, per new
--     token for prefill and mixed steps whose token counts are known); NULL for the phase's last step
--   later_steps: later steps of the same phase on the rank
-- (built in steady.py: busy_time_sql of _clipped_init per step, with $init_share, $init_above and $slowdown)

-- table steady_state: one row per rank with steps
--   rank: trace rank
--   steps: steps of the rank
--   init_steps: steps whose state is 'init'
--   warmup_steps: steps whose state is 'warmup'
--   steady_steps: steps whose state is 'steady'
--   dominant_phase: the phase with the most step wall time (steps with no GPU work count only when no other
--     phase has any)
--   dominant_steps: steps of the dominant phase
--   dominant_steady_steps: steady steps of the dominant phase
--   first_steady_step: step_id of the first steady step; NULL when none
--   last_steady_step: step_id of the last steady step
--   steady_start_ns: start of the first steady step
--   steady_end_ns: end of the last steady step
--   non_steady_ns: Σ wall of the init and warm-up steps
--   step_wall_ns: Σ wall of every step
--   step_init_ns: Σ step_states.init_ns: one-time work inside steps
--   outside_init_ns: one-time work outside every step (before the first step, between gap-based steps, a
--     capture running past its step): init_ns less the union of the init windows clipped to their steps; NULL
--     when the rank has no API calls and no one-time collective
--   init_ns: length of the union of every init window of the rank, inside steps or not; NULL when the rank has
--     no API calls and no one-time collective
--   init_summary: the rank's one-time work by family and name, largest first, e.g. 'cuLibraryLoadData 1,132
--     calls 1595.6 ms'; NULL when none
--   verdict: 'no_steady_state' when the dominant phase has fewer than 3 steady steps; 'init_dominated' when it
--     has them but the init and warm-up steps plus the one-time work outside steps last at least as long as the
--     steady steps; else 'steady'
--   more_steps_needed: steady steps of the dominant phase still missing for a steady state: 3 -
--     dominant_steady_steps (0 when steady). Profile that many more iterations past warm-up
-- (built in steady.py: busy_time_sql of init_windows and _clipped_init per rank, with $min_steady_steps)

-- section: done
DROP VIEW _clipped_init;
