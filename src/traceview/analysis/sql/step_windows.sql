-- stage: step_windows
-- Who owns each moment of a rank's timeline: the step windows tiled into pieces, each owned by one step
-- (or by none), with the step's state and whether findings may price it. The step budget, the rules and
-- the report's steps read ownership and pricing here and nowhere else.
-- requires: steps, step_states, trace_info
-- creates: step_windows, rank_pricing
--
-- Each piece of the span between step boundaries belongs to the latest-starting step that covers it
-- (overlapping windows: the later step owns the overlap, as launches are assigned to steps), or to no
-- step; so the windows tile the span and no time is counted twice. Start-up is never steady state:
-- an initialisation step is never priced, a warm-up step only on a rank with no steady step, and a
-- rank's time outside its steps only when it has no steady step and not every step it has is
-- initialisation (a capture that holds only start-up prices nothing).

-- table step_windows: one row per piece of a rank's timeline between step boundaries, in time order
--   rank: trace rank
--   step_id: the step that owns the piece (`steps.step_id`); NULL outside every step
--   phase: `steps.phase`; NULL outside steps
--   state: `step_states.state` (steady, warmup, init); NULL outside steps
--   priced: whether findings may claim time in the piece: a steady step; a warm-up step of a rank with no
--     steady step; time outside steps of a rank with no steady step whose steps are not all initialisation.
--     An initialisation step never is
--   start_ns: the piece's start, ns
--   end_ns: its end, ns
CREATE OR REPLACE TABLE step_windows AS
WITH spans AS (SELECT rank, start_ns, end_ns FROM trace_info WHERE end_ns > start_ns),
bounds AS (
    SELECT rank, start_ns AS t FROM steps UNION SELECT rank, end_ns FROM steps
    UNION SELECT rank, start_ns FROM spans UNION SELECT rank, end_ns FROM spans
),
segments AS (SELECT rank, t AS lo, lead(t) OVER (PARTITION BY rank ORDER BY t) AS hi FROM bounds),
z AS (bucket_width!((SELECT start_ns, end_ns FROM steps))),
listed AS (  -- each step in the time buckets it covers, so a piece meets only the steps of its own bucket
    in_buckets!((SELECT rank, step_id, start_ns, end_ns FROM steps), (SELECT ns FROM z))
),
pieces AS (
    SELECT g.rank, arg_max(t.step_id, (t.start_ns, -t.step_id)) AS step_id, g.lo AS start_ns, g.hi AS end_ns
    FROM (SELECT g.*, g.lo // z.ns AS b FROM segments g, z) g
    LEFT JOIN listed t ON t.rank = g.rank AND t.b = g.b AND t.start_ns <= g.lo AND t.end_ns > g.lo
    WHERE g.hi > g.lo
    GROUP BY g.rank, g.lo, g.hi
),
ranks AS (
    SELECT rank, bool_or(state = 'steady') AS has_steady, bool_and(state = 'init') AS all_init
    FROM step_states GROUP BY rank
)
SELECT p.rank, p.step_id, s.phase, st.state,
       CASE WHEN p.step_id IS NULL THEN NOT coalesce(r.has_steady, false) AND NOT coalesce(r.all_init, false)
            ELSE coalesce(st.state = 'steady' OR (st.state = 'warmup' AND NOT coalesce(r.has_steady, false)), false)
       END AS priced,
       p.start_ns, p.end_ns
FROM pieces p
LEFT JOIN steps s ON s.rank = p.rank AND s.step_id = p.step_id
LEFT JOIN step_states st ON st.rank = p.rank AND st.step_id = p.step_id
LEFT JOIN ranks r ON r.rank = p.rank
ORDER BY p.rank, p.start_ns;

-- view rank_pricing: one row per rank with steps: which of its steps findings may price
--   rank: trace rank
--   priced_steps: steps owning priced time
--   unpriced_steps: steps owning no priced time (initialisation, or warm-up beside a steady state)
--   unpriced_ns: the time those steps own, ns
CREATE OR REPLACE VIEW rank_pricing AS
SELECT rank, count(*) FILTER (WHERE priced)::BIGINT AS priced_steps,
       count(*) FILTER (WHERE NOT priced)::BIGINT AS unpriced_steps,
       coalesce(sum(owned_ns) FILTER (WHERE NOT priced), 0)::BIGINT AS unpriced_ns
FROM (SELECT rank, step_id, bool_or(priced) AS priced, sum(end_ns - start_ns) AS owned_ns
      FROM step_windows WHERE step_id IS NOT NULL GROUP BY rank, step_id)
GROUP BY rank ORDER BY rank;
