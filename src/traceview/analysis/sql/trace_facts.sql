-- stage: trace_facts
-- What is true of each rank's run that decides which fix applies: the workload (training or serving), the
-- GPU vendor, the profiler, the parallelism its collectives imply, CUDA/HIP graph replays and whether host
-- copies use pinned memory. A rule's fix variants name these facts (`when = ["workload:serving"]`); the
-- engine picks the first variant whose facts hold, and the finding carries the evidence (docs/rule-format.md).
-- requires: trace_info, steps, devices, gpu_specs, kernels, copy_directions, api_calls, parallelism
-- creates: trace_facts
--
-- A fact is present only where the trace shows it: a rank with no steps has no workload fact, a trace with no
-- host copies no copies fact, so a variant never rests on a default.

-- table trace_facts: one row per (rank, fact) that holds, with the evidence
--   rank: trace rank
--   fact: `workload:train` (a training step: backward or optimizer work), `workload:serving` (prefill, decode
--     or mixed steps), `vendor:nvidia` / `vendor:amd` (the matched GPU spec's vendor, else the architecture class
--     the device was placed in, else the runtime's API names: cuda* or hip*), `format:<reader>` (`format:nsys`,
--     `format:kineto`), `parallelism:<kind>` (tensor, data, expert, embedding, pipeline: `parallelism`), `cuda_graphs`
--     (kernels replayed from CUDA or HIP graphs), `copies:pinned` (at least 99% of the bytes copied between host
--     and device use pinned host memory), `copies:pageable` (some of them use pageable memory)
--   evidence: why it holds, with the counts
CREATE OR REPLACE TABLE trace_facts AS
WITH workloads AS (
    SELECT rank,
           count(*) FILTER (WHERE phase = 'train') AS train_steps,
           count(*) FILTER (WHERE phase IN ('prefill', 'decode', 'mixed')) AS serving_steps,
           string_agg(DISTINCT phase, ', ' ORDER BY phase) FILTER (WHERE phase IN ('prefill', 'decode', 'mixed'))
               AS serving_phases
    FROM steps GROUP BY rank
),
used_devices AS (SELECT DISTINCT rank, device_id FROM kernels),
device_vendors AS (
    SELECT d.rank,
           coalesce(g.vendor,
                    CASE WHEN regexp_matches(d.architecture, '^(cdna|rdna|gcn|gfx)') THEN 'amd'
                         WHEN regexp_matches(d.architecture, '^(sm[0-9]|ampere|hopper|blackwell|ada|turing|volta|pascal)')
                             THEN 'nvidia' END) AS vendor,
           CASE WHEN g.vendor IS NOT NULL THEN 'the GPU spec ' || g.spec_id
                ELSE 'the device class ' || d.architecture END AS basis
    FROM devices d SEMI JOIN used_devices u USING (rank, device_id)
    LEFT JOIN gpu_specs g USING (spec_id)
),
api_names AS MATERIALIZED (  -- counted per name first, so the grammar runs once a name (stored: the planner
    -- moves a filter on a grouping column below the grouping, onto every call)
    SELECT rank, name, count(*) AS calls FROM api_calls GROUP BY rank, name
),
api_vendors AS (
    SELECT rank, CASE WHEN regexp_matches(name, '^hip') THEN 'amd' ELSE 'nvidia' END AS vendor,
           sum(calls)::BIGINT AS calls
    FROM api_names WHERE regexp_matches(name, '^(cuda|cu[A-Z]|hip)')
    GROUP BY ALL
),
vendors AS (
    SELECT rank, vendor, any_value(basis ORDER BY basis) AS basis FROM device_vendors
    WHERE vendor IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT a.rank, a.vendor, printf('%d %s runtime calls', a.calls, CASE WHEN a.vendor = 'amd' THEN 'HIP' ELSE 'CUDA' END)
    FROM api_vendors a
    WHERE a.rank NOT IN (SELECT rank FROM device_vendors WHERE vendor IS NOT NULL)
      AND a.calls = (SELECT max(b.calls) FROM api_vendors b WHERE b.rank = a.rank)
),
graphs AS (
    SELECT rank, count(*) AS graph_kernels FROM kernels WHERE launch_kind = 'graph' GROUP BY rank
),
host_copies AS (
    -- the bytes between host and device by the host side's memory kind (copy_directions: NULL where a copy's kind
    -- or size is unknown, so those directions say nothing)
    SELECT rank, sum(pinned_bytes) AS pinned_bytes, sum(pageable_bytes) AS pageable_bytes, sum(bytes) AS host_bytes
    FROM copy_directions WHERE pinned_bytes IS NOT NULL AND bytes > 0
    GROUP BY rank
)
SELECT rank, 'workload:train' AS fact,
       printf('%d training step%s (backward or optimizer work)', train_steps,
              CASE WHEN train_steps = 1 THEN '' ELSE 's' END) AS evidence
FROM workloads WHERE train_steps > 0
UNION ALL
SELECT rank, 'workload:serving',
       printf('%d serving step%s (%s)', serving_steps, CASE WHEN serving_steps = 1 THEN '' ELSE 's' END, serving_phases)
FROM workloads WHERE serving_steps > 0
UNION ALL
SELECT rank, 'vendor:' || vendor, 'from ' || basis FROM vendors
UNION ALL
SELECT rank, 'format:' || source_format, 'read as a ' || source_format || ' trace' FROM trace_info
WHERE source_format IS NOT NULL
UNION ALL
SELECT p.rank, 'parallelism:' || p.kind, any_value(p.evidence ORDER BY p.evidence) FROM parallelism p GROUP BY ALL
UNION ALL
SELECT rank, 'cuda_graphs', printf('%d kernels replayed from graphs', graph_kernels) FROM graphs
UNION ALL
SELECT rank, 'copies:pinned', printf('%.2f%% of the %d bytes copied to or from the host are pinned',
                                     100.0 * pinned_bytes / host_bytes, host_bytes)
FROM host_copies WHERE pinned_bytes >= 0.99 * host_bytes
UNION ALL
SELECT rank, 'copies:pageable', printf('%d of the %d bytes copied to or from the host are pageable',
                                       pageable_bytes, host_bytes)
FROM host_copies WHERE pageable_bytes > 0
ORDER BY rank, fact;
