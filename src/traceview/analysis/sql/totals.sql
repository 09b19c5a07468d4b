-- stage: totals
-- The figures the report, `traceview diff` and `traceview info` show, each computed once: phases pooled
-- across ranks with the one decision of their wall, busy time per phase, where priced step time went,
-- kernel families, categories, copies, and the diagnosis tables summed over steps. Outputs only select
-- from these relations, so no two of them can disagree.
-- requires: phase_summary, roofline_by_phase, roofline_by_category, roofline_kernels, step_accounting, devices,
--     gpu_specs, kernels, memops, steps, device_activity, step_budget, idle_by_kind, launch_queue_depth,
--     rank_steps, critical_path_by_phase, trace_info, copy_directions, device_engines
-- creates: trace_files, rank_spans, phase_rank_times, copy_direction_shares, critical_path_phase_totals, phase_busy, phase_totals, phase_time_split, kernel_families, kernel_family_rates, category_time,
--     roofline_category_totals, roofline_phase_totals, memop_totals, memop_kind_totals, priced_time_by_phase,
--     idle_totals, queue_depth_totals, rank_step_skew

-- view trace_files: one row per trace file, in the order of its first rank
--   file: trace_info.file
--   ranks: the ranks it holds, in order (one nsys export can hold every rank of a job)
CREATE OR REPLACE VIEW trace_files AS
SELECT file, list(rank ORDER BY rank) AS ranks FROM trace_info GROUP BY file ORDER BY min(rank);

-- view rank_spans: one row per rank: its own span and steps (ranks run side by side; their times never add up)
--   rank: trace rank
--   file: trace_info.file
--   start_ns: trace_info.start_ns
--   end_ns: trace_info.end_ns
--   span_ns: end_ns - start_ns
--   steps: steps of the rank
--   step_ns: Σ step_budget.wall_ns: the time its steps own on its timeline
CREATE OR REPLACE VIEW rank_spans AS
SELECT t.rank, t.file, t.start_ns, t.end_ns, t.end_ns - t.start_ns AS span_ns, count(s.step_id) AS steps,
       sum(b.wall_ns)::BIGINT AS step_ns
FROM trace_info t
LEFT JOIN steps s ON s.rank = t.rank
LEFT JOIN step_budget b ON b.rank = s.rank AND b.step_id = s.step_id
GROUP BY t.rank, t.file, t.start_ns, t.end_ns ORDER BY t.rank;

-- view phase_rank_times: one row per phase of `phase_summary`, its time per rank
--   phase: steps.phase (time summed over ranks that ran side by side is no wall time, hence these)
--   ranks: ranks with steps of the phase
--   rank_steps_min: the fewest steps of the phase on one rank
--   rank_steps_max: the most
--   rank_time_mean_ns: mean over those ranks of the phase's wall time (phase_summary.wall_ns)
--   rank_time_max_ns: the slowest rank's: what bounds the job
--   slowest_rank: that rank (the lowest of equals)
CREATE OR REPLACE VIEW phase_rank_times AS
SELECT phase, count(*) AS ranks, min(steps) AS rank_steps_min, max(steps) AS rank_steps_max,
       avg(wall_ns) AS rank_time_mean_ns, max(wall_ns) AS rank_time_max_ns,
       arg_max(rank, [wall_ns, -rank]) AS slowest_rank
FROM phase_summary GROUP BY phase;

-- view copy_direction_shares: one row per `copy_directions` row, with its share of its GPU's span
--   rank: trace rank (the copy KPI is per GPU and direction: H2D, D2H and D2D cross different links, and GPUs run
--     side by side)
--   device_id: GPU ordinal
--   direction: copy_directions.direction
--   copies: copy_directions.copies
--   bytes: copy_directions.bytes
--   busy_ns: copy_directions.busy_ns
--   busy_pct: 100 * busy_ns / the GPU's span (device_engines.span_ns)
--   gbps: copy_directions.achieved_bytes_per_s / 1e9
--   pct_of_link: copy_directions.pct_of_link
--   link: copy_directions.link
--   pinned_pct: copy_directions.pinned_pct
CREATE OR REPLACE VIEW copy_direction_shares AS
SELECT c.rank, c.device_id, c.direction, c.copies, c.bytes, c.busy_ns,
       100.0 * c.busy_ns / nullif(e.span_ns, 0) AS busy_pct, c.achieved_bytes_per_s / 1e9 AS gbps,
       c.pct_of_link, c.link, c.pinned_pct
FROM copy_directions c JOIN device_engines e ON e.rank = c.rank AND e.device_id = c.device_id;

-- view critical_path_phase_totals: one row per phase with a complete critical path in a priced step
--   phase: steps.phase
--   steps: priced steps with a complete critical path, over all ranks (each rank walks its own path; they sum)
--   path_ns: Σ critical_path_by_phase.path_ns
--   compute_ns: Σ compute_ns
--   communication_ns: Σ communication_ns
--   copy_ns: Σ copy_ns + memset_ns
--   host_ns: Σ host_ns + launch_latency_ns (the GPU waiting for work to be issued)
--   bound: the largest of the four (critical_path_bound)
--   bound_pct: that figure over path_ns, percent
--   compute_pct: 100 * compute_ns / path_ns
--   communication_pct: 100 * communication_ns / path_ns
--   copy_pct: 100 * copy_ns / path_ns
--   host_pct: 100 * host_ns / path_ns
CREATE OR REPLACE VIEW critical_path_phase_totals AS
WITH sums AS (
    SELECT phase, sum(steps)::BIGINT AS steps, sum(path_ns)::BIGINT AS path_ns, sum(compute_ns)::BIGINT AS compute_ns,
           sum(communication_ns)::BIGINT AS communication_ns, sum(copy_ns + memset_ns)::BIGINT AS copy_ns,
           sum(host_ns + launch_latency_ns)::BIGINT AS host_ns
    FROM critical_path_by_phase GROUP BY phase
)
SELECT *, critical_path_bound(compute_ns, communication_ns, copy_ns, host_ns) AS bound,
       100.0 * critical_path_top_ns(compute_ns, communication_ns, copy_ns, host_ns) / path_ns AS bound_pct,
       100.0 * compute_ns / path_ns AS compute_pct, 100.0 * communication_ns / path_ns AS communication_pct,
       100.0 * copy_ns / path_ns AS copy_pct, 100.0 * host_ns / path_ns AS host_pct
FROM sums WHERE path_ns > 0 ORDER BY phase;

-- view phase_busy: one row per phase any kernel or memop ran in
--   phase: `kernels.phase`, or the phase of a memop's step (`other` outside steps)
--   kernel_busy_ns: the union of its kernels' intervals per device, summed over devices, ns
--   copy_busy_ns: the union of its memcpys' and memsets' intervals per device, summed over devices, ns
CREATE OR REPLACE VIEW phase_busy AS
WITH one_phase AS (
    -- a device whose kernels are all of one phase has that phase's busy time already (device_activity): only
    -- devices that ran several phases need a union per phase
    SELECT rank, device_id, any_value(phase) AS phase FROM kernels WHERE device_id IS NOT NULL
    GROUP BY rank, device_id HAVING count(DISTINCT phase) = 1
),
intervals AS (
    -- the one-phase devices as a list, read once: an anti join built a hash table of every kernel to probe them
    SELECT 'kernel' AS kind, rank, device_id, phase, start_ns, end_ns FROM kernels k
    WHERE k.device_id IS NULL
       OR NOT list_contains((SELECT coalesce(list({'rank': rank, 'device_id': device_id}), []) FROM one_phase),
                            {'rank': k.rank, 'device_id': k.device_id})
    UNION ALL
    SELECT 'copy', m.rank, m.device_id, coalesce(s.phase, 'other'), m.start_ns, m.end_ns FROM memops m
    LEFT JOIN steps s ON s.rank = m.rank AND s.step_id = m.step_id
),
ordered AS (
    -- in start order, the part of an interval past the latest end before it is what it adds to the union
    with_prev_end!((SELECT * FROM intervals), (kind, rank, device_id, phase))
),
unions AS (
    SELECT kind, phase,
           sum(CASE WHEN prev_end_ns IS NULL OR start_ns >= prev_end_ns THEN end_ns - start_ns
                    WHEN end_ns > prev_end_ns THEN end_ns - prev_end_ns ELSE 0 END)::BIGINT AS busy_ns
    FROM ordered GROUP BY kind, phase
    UNION ALL
    SELECT 'kernel', o.phase, sum(d.kernel_busy_ns)::BIGINT FROM one_phase o
    JOIN device_activity d ON d.rank = o.rank AND d.device_id = o.device_id GROUP BY o.phase
)
SELECT phase, coalesce(sum(busy_ns) FILTER (WHERE kind = 'kernel'), 0)::BIGINT AS kernel_busy_ns,
       coalesce(sum(busy_ns) FILTER (WHERE kind = 'copy'), 0)::BIGINT AS copy_busy_ns
FROM unions GROUP BY phase ORDER BY phase;

-- view phase_totals: one row per phase of `phase_summary`, over all ranks
--   phase: the phase
--   steps: steps of the phase, ranks summed
--   time_ns: Σ step wall time, ns
--   gpu_busy_ns: Σ step GPU busy time, ns
--   kernel_time_ns: Σ kernel time, ns
--   costed_time_ns: Σ time of the costed kernels, ns
--   coverage_pct: costed time / kernel time, percent
--   flops: ΣFLOPs of the costed kernels
--   bytes: Σbytes of the costed kernels
--   achieved_tflops: ΣFLOPs / Σ time of the kernels that have FLOPs (each rank's: its FLOPs / its rate),
--     10¹² FLOP/s
--   achieved_tbps: Σbytes / Σ time of the kernels that have bytes, TB/s
--   arithmetic_intensity: ΣFLOPs / Σbytes over the ranks that have both, FLOP per byte
--   ridge: ΣFLOPs / Σ compute floor over bandwidth, FLOP per byte
--   bound: the phase's wall, decided once here: where any rank's % of roof is measured, `roof_bound()` over
--     the floors summed across those ranks (so it is `roofline_by_phase.bound` for one rank); else where the
--     model prices it, the larger of the summed model terms; else the bound most ranks have
--     (`phase_summary.bound`)
--   bound_source: the evidence the bound comes from: `measured`, `model`, `tokens_per_step` or `phase_rule`
--     (`phase_summary.bound_source`)
--   costed_bound: the wall of the costed kernels alone, pooled, shown as evidence where the bound comes from
--     another source; NULL when nothing was costed
--   roofline_floor_ns: Σ measured kernel floors of the ranks whose % of roof is measured, ns
--   pct_of_roof: Σ floors / Σ basis over the ranks whose `bound_source` is the pooled one, percent; NULL
--     when no rank has a % of roof
--   roofline_ns: Σ model step floors (`step_accounting`), ns
--   kernel_inefficiency_ns: Σ model kernel inefficiency, ns
--   idle_ns: Σ model GPU idle, ns
--   outside_gpu_ns: Σ model time outside GPU work, ns
--   dominant_term: the model's dominant term (any rank's most frequent)
--   no_roof_reason: `phase_summary.no_roof_reason` most ranks have
--   kernel_busy_ns: `phase_busy.kernel_busy_ns` (0 when none ran)
--   copy_busy_ns: `phase_busy.copy_busy_ns` (0 when none ran)
CREATE OR REPLACE VIEW phase_totals AS
WITH model AS (
    SELECT rank, phase, sum(roofline_floor_ns) AS roofline_floor_ns,
           sum(kernel_inefficiency_ns) AS kernel_inefficiency_ns, sum(gpu_idle_ns) AS gpu_idle_ns,
           sum(outside_gpu_ns) AS outside_gpu_ns, mode(dominant_term) AS dominant_term,
           sum(memory_time_ns) AS memory_time_ns, sum(compute_time_ns) AS compute_time_ns
    FROM step_accounting GROUP BY ALL
),
-- the evidence a phase's % of roof comes from: measured costs where any rank has them, else the model,
-- so ranks are pooled only over figures of one kind
roof_sources AS (
    SELECT phase, CASE WHEN bool_or(bound_source = 'measured' AND pct_of_roof IS NOT NULL) THEN 'measured'
                       WHEN bool_or(bound_source = 'model' AND pct_of_roof IS NOT NULL) THEN 'model' END AS roof_source
    FROM phase_summary GROUP BY phase
),
pooled AS (
    SELECT p.phase, sum(p.steps)::BIGINT AS steps, sum(p.wall_ns)::BIGINT AS time_ns,
           sum(p.gpu_busy_ns)::BIGINT AS gpu_busy_ns, sum(p.kernel_time_ns)::BIGINT AS kernel_time_ns,
           sum(p.costed_time_ns)::BIGINT AS costed_time_ns,
           100.0 * sum(p.costed_time_ns) / nullif(sum(p.kernel_time_ns), 0) AS coverage_pct,
           sum(p.flops) AS flops, sum(p.bytes) AS bytes,
           sum(p.flops) / nullif(sum(p.flops / (p.achieved_tflops * 1e3)), 0) / 1e3 AS achieved_tflops,
           sum(p.bytes) / nullif(sum(p.bytes / (p.achieved_tbps * 1e3)), 0) / 1e3 AS achieved_tbps,
           sum(p.flops) FILTER (WHERE p.arithmetic_intensity IS NOT NULL)
               / nullif(sum(p.bytes) FILTER (WHERE p.arithmetic_intensity IS NOT NULL), 0) AS arithmetic_intensity,
           sum(p.flops) FILTER (WHERE r.compute_floor_ns > 0) / nullif(sum(r.compute_floor_ns) / 1e9, 0)
               / any_value(g.hbm_bytes_per_s) AS ridge,
           any_value(c.roof_source) AS roof_source,
           roof_bound(sum(r.costed_time_ns) FILTER (WHERE p.bound_source = 'measured'),
                      sum(r.time_ns) FILTER (WHERE p.bound_source = 'measured'),
                      sum(r.compute_floor_ns) FILTER (WHERE p.bound_source = 'measured'),
                      sum(r.memory_floor_ns) FILTER (WHERE p.bound_source = 'measured')) AS measured_bound,
           CASE WHEN sum(a.memory_time_ns) FILTER (WHERE p.bound_source = 'model')
                     >= sum(a.compute_time_ns) FILTER (WHERE p.bound_source = 'model') THEN 'memory'
                ELSE 'compute' END AS model_bound,
           roof_bound(sum(r.costed_time_ns), sum(r.costed_time_ns), sum(r.compute_floor_ns),
                      sum(r.memory_floor_ns)) AS costed_bound,
           mode(p.bound) AS usual_bound, mode(p.bound_source) AS usual_bound_source,
           sum(p.roofline_floor_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = 'measured')::BIGINT
               AS roofline_floor_ns,
           100.0 * sum(p.roofline_floor_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = c.roof_source)
               / nullif(sum(p.roof_basis_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = c.roof_source), 0)
               AS pct_of_roof,
           sum(a.roofline_floor_ns)::BIGINT AS roofline_ns, sum(a.kernel_inefficiency_ns)::BIGINT AS kernel_inefficiency_ns,
           sum(a.gpu_idle_ns)::BIGINT AS idle_ns, sum(a.outside_gpu_ns)::BIGINT AS outside_gpu_ns,
           any_value(a.dominant_term) AS dominant_term,
           mode(p.no_roof_reason) AS no_roof_reason
    FROM phase_summary p
    LEFT JOIN roofline_by_phase r USING (rank, phase)
    LEFT JOIN model a USING (rank, phase)
    LEFT JOIN roof_sources c USING (phase)
    LEFT JOIN (SELECT d.rank, any_value(s.hbm_bytes_per_s) AS hbm_bytes_per_s FROM devices d
               JOIN gpu_specs s USING (spec_id) GROUP BY d.rank) g USING (rank)
    GROUP BY p.phase
)
SELECT p.phase, steps, time_ns, gpu_busy_ns, kernel_time_ns, costed_time_ns, coverage_pct, flops, bytes,
       achieved_tflops, achieved_tbps, arithmetic_intensity, ridge,
       CASE roof_source WHEN 'measured' THEN measured_bound WHEN 'model' THEN model_bound ELSE usual_bound END
           AS bound,
       coalesce(roof_source, usual_bound_source) AS bound_source, costed_bound, roofline_floor_ns, pct_of_roof,
       roofline_ns, kernel_inefficiency_ns, idle_ns, outside_gpu_ns, dominant_term, no_roof_reason,
       coalesce(b.kernel_busy_ns, 0)::BIGINT AS kernel_busy_ns, coalesce(b.copy_busy_ns, 0)::BIGINT AS copy_busy_ns
FROM pooled p LEFT JOIN phase_busy b USING (phase)
ORDER BY p.phase;

-- view phase_time_split: one row per phase (NULL: time outside steps) of the priced step windows
--   phase: `step_budget.phase`
--   steps: priced steps
--   wall_ns: their owned wall time, ns
--   kernel_ns: compute and exposed communication time, ns
--   copy_ns: time only copies ran, ns
--   idle_host_wait_ns: GPU idle of kind host_wait, ns
--   idle_sync_drain_ns: GPU idle of kind sync_drain, ns
--   idle_bubble_ns: GPU idle of kind bubble, ns
--   idle_unknown_ns: GPU idle of kind unknown, ns
--   idle_ns: the four idle kinds together, ns
--   outside_gpu_ns: time outside GPU work, ns
--   categories: list of {category, ns}: `kernel_ns` apportioned to kernel categories by their kernel time in
--     each step (compute time to non-communication kernels, exposed communication to communication kernels),
--     largest first
--   families: list of {short_name, category, ns}: the same apportioned to kernel families
--   unattributed_kernel_ns: kernel time of a bucket with no kernel of its kind in the step (work of a
--     neighbour step ran there), ns
CREATE OR REPLACE VIEW phase_time_split AS
WITH priced AS (SELECT * FROM step_budget WHERE step_id IS NOT NULL AND priced),
family AS (
    SELECT k.rank, k.step_id, k.category, k.short_name, sum(k.dur_ns) AS dur_ns,
           k.category IS NOT DISTINCT FROM 'communication' AS communication
    FROM kernels k JOIN priced b ON b.rank = k.rank AND b.step_id = k.step_id GROUP BY ALL
),
shares AS (  -- a family's share of the bucket its kind of kernel fills in its step
    SELECT f.rank, f.step_id, f.category, f.short_name,
           CASE WHEN f.communication THEN b.communication_ns ELSE b.compute_ns END * f.dur_ns
               / sum(f.dur_ns) OVER (PARTITION BY f.rank, f.step_id, f.communication) AS ns
    FROM family f JOIN priced b ON b.rank = f.rank AND b.step_id = f.step_id
),
families AS (  -- sums of doubles in a stated order: a parallel sum's last digits follow thread timing
    SELECT s.phase, f.category, f.short_name, sum(f.ns ORDER BY f.rank, f.step_id) AS ns
    FROM shares f JOIN priced s ON s.rank = f.rank AND s.step_id = f.step_id GROUP BY ALL
),
totals AS (
    SELECT b.phase, count(*) AS steps, sum(b.wall_ns)::BIGINT AS wall_ns,
           sum(b.compute_ns + b.communication_ns)::BIGINT AS kernel_ns, sum(b.copy_ns)::BIGINT AS copy_ns,
           sum(b.idle_host_wait_ns)::BIGINT AS idle_host_wait_ns, sum(b.idle_sync_drain_ns)::BIGINT AS idle_sync_drain_ns,
           sum(b.idle_bubble_ns)::BIGINT AS idle_bubble_ns, sum(b.idle_unknown_ns)::BIGINT AS idle_unknown_ns,
           sum(b.idle_host_wait_ns + b.idle_sync_drain_ns + b.idle_bubble_ns + b.idle_unknown_ns)::BIGINT AS idle_ns,
           sum(b.outside_gpu_ns)::BIGINT AS outside_gpu_ns
    FROM priced b GROUP BY b.phase
),
split AS (
    SELECT t.*,
           coalesce((SELECT list(struct_pack(category := category, ns := ns) ORDER BY ns DESC, category)
                     FROM (SELECT category, sum(ns ORDER BY short_name) AS ns FROM families f
                           WHERE f.phase IS NOT DISTINCT FROM t.phase GROUP BY category)), []) AS categories,
           coalesce((SELECT list(struct_pack(short_name := short_name, category := category, ns := ns)
                                 ORDER BY ns DESC, short_name, category)
                     FROM families f WHERE f.phase IS NOT DISTINCT FROM t.phase), []) AS families
    FROM totals t
)
SELECT *, kernel_ns - coalesce(list_sum(list_transform(categories, lambda c: c.ns)), 0) AS unattributed_kernel_ns
FROM split ORDER BY phase;

-- view kernel_families: one row per kernel family (short name and category): what `traceview diff` compares
--   short_name: `kernels.short_name`
--   category: `kernels.category`
--   count: kernels (launches) of the family
--   time_ns: their summed time, ns
--   phases: the phases they ran in, comma-separated
--   median_ns: median launch time, ns (interpolated between the middle two, as the diff's quantiles are)
--   p90_ns: 90th percentile launch time, ns (interpolated)
--   launch_sample_ns: the family's launch times, ns, shortest first: every launch when it has 256 or fewer, else
--     256 evenly spaced quantiles (at (i + 0.5) / 256), so a report of a 2-million-kernel trace stays small and the
--     sample has the launches' distribution whatever their order (a stride over start order would alias with a
--     step's repeating mix of shapes). `traceview diff` bootstraps per-launch time over them
CREATE OR REPLACE VIEW kernel_families AS
WITH sizes AS (SELECT short_name, category, count(*) AS n FROM kernels GROUP BY short_name, category)
SELECT k.short_name, k.category, count(*) AS count, sum(k.dur_ns)::BIGINT AS time_ns,
       string_agg(DISTINCT k.phase, ', ' ORDER BY k.phase) AS phases,
       quantile_cont(k.dur_ns, 0.5)::DOUBLE AS median_ns, quantile_cont(k.dur_ns, 0.9)::DOUBLE AS p90_ns,
       -- each family's rows feed one of the two (a CASE over the aggregates computed both for every family: on
       -- the 2 M-kernel export, an ordered list of every launch that no family showed)
       coalesce(list(k.dur_ns::BIGINT ORDER BY k.dur_ns) FILTER (WHERE s.n <= 256),
                quantile_disc(k.dur_ns::BIGINT, list_transform(range(256), lambda i: (i + 0.5) / 256))
                    FILTER (WHERE s.n > 256)) AS launch_sample_ns
FROM kernels k
JOIN sizes s ON s.short_name IS NOT DISTINCT FROM k.short_name AND s.category IS NOT DISTINCT FROM k.category
GROUP BY k.short_name, k.category ORDER BY time_ns DESC, k.short_name, k.category;

-- view kernel_family_rates: one row per kernel short name, longest first: the top-kernels table
--   short_name: `kernels.short_name`
--   name: the full name of its variant with the most time
--   category: that variant's category
--   dtype: that variant's dtype
--   count: kernels of the short name
--   time_ns: their summed time, ns
--   share_pct: their share of all kernel time, percent
--   median_ns: median kernel time, ns
--   achieved_tflops: ΣFLOPs / Σtime over the kernels with accepted costs (an L2-resident kernel's bytes/s are
--     not HBM bandwidth), 10¹² FLOP/s
--   achieved_tbps: Σbytes / Σtime over the same, TB/s
--   phases: the phases they ran in, comma-separated
CREATE OR REPLACE VIEW kernel_family_rates AS
WITH variants AS (  -- a family's name, category and dtype are those of its variant with the most time
    SELECT short_name, arg_max(struct_pack(name := name, category := category, dtype := dtype),
                               (variant_ns, name)) AS top
    FROM (SELECT short_name, name, category, dtype, sum(dur_ns) AS variant_ns FROM kernels GROUP BY ALL)
    GROUP BY short_name
)
SELECT k.short_name, any_value(v.top.name) AS name, any_value(v.top.category) AS category,
       any_value(v.top.dtype) AS dtype,
       count(*) AS count, sum(k.dur_ns)::BIGINT AS time_ns,
       100.0 * sum(k.dur_ns) / (SELECT sum(dur_ns) FROM kernels) AS share_pct,
       median(k.dur_ns)::BIGINT AS median_ns,
       sum(k.flops) FILTER (WHERE k.cost_status = 'accepted')
           / nullif(sum(k.dur_ns) FILTER (WHERE k.cost_status = 'accepted' AND k.flops IS NOT NULL), 0) / 1e3
           AS achieved_tflops,
       sum(k.bytes) FILTER (WHERE k.cost_status = 'accepted')
           / nullif(sum(k.dur_ns) FILTER (WHERE k.cost_status = 'accepted' AND k.bytes IS NOT NULL), 0) / 1e3
           AS achieved_tbps,
       string_agg(DISTINCT k.phase, ', ' ORDER BY k.phase) AS phases
FROM kernels k JOIN variants v ON v.short_name IS NOT DISTINCT FROM k.short_name
GROUP BY k.short_name ORDER BY time_ns DESC, k.short_name;

-- view category_time: one row per (phase, category) with kernels
--   phase: `kernels.phase`
--   category: `kernels.category`
--   kernels: kernels of the category in the phase
--   time_ns: their summed time, ns
--   share_of_phase_pct: their share of the phase's kernel time, percent
CREATE OR REPLACE VIEW category_time AS
SELECT phase, category, kernels, time_ns, 100.0 * time_ns / sum(time_ns) OVER (PARTITION BY phase) AS share_of_phase_pct
FROM (SELECT phase, category, count(*) AS kernels, sum(dur_ns)::BIGINT AS time_ns FROM kernels GROUP BY ALL)
ORDER BY phase, time_ns DESC, category;

-- view roofline_category_totals: one row per category with costed FLOPs and bytes, over all ranks
--   category: `kernels.category`
--   time_ns: Σ kernel time, ns
--   arithmetic_intensity: ΣFLOPs / Σbytes, FLOP per byte
--   achieved_tflops: ΣFLOPs / Σ time of the kernels with FLOPs, 10¹² FLOP/s
--   pct_of_roof: Σ floors / Σ costed time over the ranks with a % of roof, percent
CREATE OR REPLACE VIEW roofline_category_totals AS
SELECT category, sum(time_ns)::BIGINT AS time_ns, sum(flops) / sum(bytes) AS arithmetic_intensity,
       sum(flops) / sum(flops / (achieved_tflops * 1e3)) / 1e3 AS achieved_tflops,
       100.0 * sum(roofline_floor_ns) FILTER (WHERE pct_of_roof IS NOT NULL)
           / nullif(sum(costed_time_ns) FILTER (WHERE pct_of_roof IS NOT NULL), 0) AS pct_of_roof
FROM roofline_by_category WHERE flops > 0 AND bytes > 0 GROUP BY category ORDER BY category;

-- view roofline_phase_totals: one row per phase with costed FLOPs and bytes, over all ranks
--   phase: `kernels.phase`
--   arithmetic_intensity: ΣFLOPs / Σbytes, FLOP per byte
--   achieved_tflops: ΣFLOPs / Σ time of the kernels with FLOPs, 10¹² FLOP/s
--   pct_of_roof: Σ floors / Σ costed time over the ranks with a % of roof, percent
CREATE OR REPLACE VIEW roofline_phase_totals AS
SELECT phase, sum(flops) / sum(bytes) AS arithmetic_intensity,
       sum(flops) / sum(flops / (achieved_tflops * 1e3)) / 1e3 AS achieved_tflops,
       100.0 * sum(roofline_floor_ns) FILTER (WHERE pct_of_roof IS NOT NULL)
           / nullif(sum(costed_time_ns) FILTER (WHERE pct_of_roof IS NOT NULL), 0) AS pct_of_roof
FROM roofline_by_phase WHERE flops > 0 AND bytes > 0 GROUP BY phase ORDER BY phase;

-- view memop_totals: one row per memop kind (`memcpy`, `memset`), present or not
--   kind: `memops.kind`
--   count: operations of the kind
--   busy_ns: the union of their intervals per device, summed over devices, ns (0 when none)
--   time_ns: Σ duration, ns (0 when none)
--   bytes: Σ bytes, where known: 0 when no operation of the kind ran, NULL when none records its bytes
--   gbps: Σbytes / Σduration over the operations whose bytes are known, GB/s (1 byte/ns)
CREATE OR REPLACE VIEW memop_totals AS
WITH kinds(kind) AS (VALUES ('memcpy'), ('memset')),
ordered AS (
    with_prev_end!((SELECT kind, dur_ns, bytes, start_ns, end_ns, rank, device_id FROM memops), (kind, rank, device_id))
),
sums AS (
    SELECT kind, count(*) AS count,
           sum(CASE WHEN prev_end_ns IS NULL OR start_ns >= prev_end_ns THEN end_ns - start_ns
                    WHEN end_ns > prev_end_ns THEN end_ns - prev_end_ns ELSE 0 END)::BIGINT AS busy_ns,
           sum(dur_ns)::BIGINT AS time_ns, sum(bytes)::BIGINT AS bytes,
           sum(bytes) / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL), 0) AS gbps
    FROM ordered GROUP BY kind
)
SELECT k.kind, coalesce(s.count, 0) AS count, coalesce(s.busy_ns, 0)::BIGINT AS busy_ns,
       coalesce(s.time_ns, 0)::BIGINT AS time_ns,
       CASE WHEN s.count IS NULL THEN 0 ELSE s.bytes END::BIGINT AS bytes, s.gbps
FROM kinds k LEFT JOIN sums s USING (kind);

-- view memop_kind_totals: one row per (memop kind, copy kind)
--   kind: `memops.kind`
--   copy_kind: `memops.copy_kind`, else `memops.dst_kind`, else `unknown`
--   count: operations
--   time_ns: Σ duration, ns
--   bytes: Σ bytes
--   gbps: Σbytes / Σduration over the operations whose bytes are known, GB/s
CREATE OR REPLACE VIEW memop_kind_totals AS
SELECT kind, coalesce(copy_kind, dst_kind, 'unknown') AS copy_kind, count(*) AS count, sum(dur_ns)::BIGINT AS time_ns,
       sum(bytes)::BIGINT AS bytes, sum(bytes) / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL), 0) AS gbps
FROM memops GROUP BY ALL ORDER BY kind, time_ns DESC, copy_kind;

-- view priced_time_by_phase: one row per phase (`outside steps` for time outside every step) of the priced windows
--   phase: `step_budget.phase`, or `outside steps`
--   steps: priced steps
--   wall_ns: their owned wall time, ns
--   compute_ns: Σ `step_budget.compute_ns`
--   communication_ns: Σ `step_budget.communication_ns`
--   copy_ns: Σ `step_budget.copy_ns`
--   idle_host_wait_ns: Σ `step_budget.idle_host_wait_ns`
--   idle_sync_drain_ns: Σ `step_budget.idle_sync_drain_ns`
--   idle_bubble_ns: Σ `step_budget.idle_bubble_ns`
--   idle_unknown_ns: Σ `step_budget.idle_unknown_ns`
--   outside_gpu_ns: Σ `step_budget.outside_gpu_ns`
CREATE OR REPLACE VIEW priced_time_by_phase AS
SELECT coalesce(phase, 'outside steps') AS phase, count(*) FILTER (WHERE step_id IS NOT NULL) AS steps,
       sum(wall_ns)::BIGINT AS wall_ns, sum(compute_ns)::BIGINT AS compute_ns,
       sum(communication_ns)::BIGINT AS communication_ns, sum(copy_ns)::BIGINT AS copy_ns,
       sum(idle_host_wait_ns)::BIGINT AS idle_host_wait_ns, sum(idle_sync_drain_ns)::BIGINT AS idle_sync_drain_ns,
       sum(idle_bubble_ns)::BIGINT AS idle_bubble_ns, sum(idle_unknown_ns)::BIGINT AS idle_unknown_ns,
       sum(outside_gpu_ns)::BIGINT AS outside_gpu_ns
FROM step_budget WHERE priced GROUP BY ALL ORDER BY wall_ns DESC, phase;

-- view idle_totals: one row per (rank, device, idle kind), steps summed
--   rank: trace rank
--   device_id: GPU ordinal
--   idle_kind: `gpu_idle_gaps.idle_kind`
--   gaps: idle gaps of the kind
--   idle_ns: their summed length, ns
--   largest_gap_ns: the longest, ns
CREATE OR REPLACE VIEW idle_totals AS
SELECT rank, device_id, idle_kind, sum(gaps)::BIGINT AS gaps, sum(idle_ns)::BIGINT AS idle_ns,
       max(largest_gap_ns) AS largest_gap_ns
FROM idle_by_kind GROUP BY ALL ORDER BY rank, device_id, idle_ns DESC, idle_kind;

-- view queue_depth_totals: one row per (rank, device, stream) with launches, steps summed, most launches first
--   rank: trace rank
--   device_id: GPU ordinal
--   stream_id: stream
--   launches: launch calls on the stream
--   depth_at_launch_mean: mean launches pending at each launch
--   depth_max: most launches pending at once
--   empty_launch_pct: share of launches that found the stream's queue empty, percent
CREATE OR REPLACE VIEW queue_depth_totals AS
SELECT rank, device_id, stream_id, sum(launches)::BIGINT AS launches,
       sum(depth_at_launch_mean * launches) / nullif(sum(launches), 0) AS depth_at_launch_mean,
       max(depth_max) AS depth_max,
       100.0 * sum(empty_launches) / nullif(sum(launches), 0) AS empty_launch_pct
FROM launch_queue_depth GROUP BY ALL ORDER BY launches DESC, rank, device_id, stream_id;

-- view rank_step_skew: one row per (phase, ordinal) step set beside the other ranks' with a skew, largest first
--   phase: `rank_steps.phase`
--   ordinal: `rank_steps.ordinal`
--   slowest_rank: the rank whose step took longest
--   skew_ns: GPU time of the slowest rank's step less the fastest's, ns
--   wall_skew_ns: the same for wall time, ns
--   ranks: ranks that ran the step
CREATE OR REPLACE VIEW rank_step_skew AS
SELECT phase, ordinal, any_value(slowest_rank) AS slowest_rank, any_value(skew_ns) AS skew_ns,
       any_value(wall_skew_ns) AS wall_skew_ns, any_value(ranks) AS ranks
FROM rank_steps WHERE skew_ns IS NOT NULL GROUP BY phase, ordinal
ORDER BY skew_ns DESC, phase, ordinal;
