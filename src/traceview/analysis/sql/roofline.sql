-- stage: roofline
-- Achieved FLOP/s and bandwidth against the matched GPU's roof, per kernel and summed per category,
-- phase and step (ΣFLOPs/Σtime over accepted costs, never a mean of percentages).
-- requires: kernels, devices, gpu_specs, gpu_peaks
-- creates: _roofline_input, roofline_kernels, _roofline_groups, roofline_by_category, roofline_by_phase,
--     roofline_by_step
--
-- A kernel counts towards an aggregate (`costed`) when its cost was accepted and every term it has can be
-- turned into time (its dtype has a peak, its GPU a bandwidth). L2-resident kernels keep their per-kernel
-- figures, against the L2 bandwidth where it is published, but stay out of the aggregates, whose bandwidth
-- is HBM bandwidth. t_compute = Σ F/P(dtype) and t_memory = Σ B/BW over the costed kernels, each kernel's
-- floor the larger of its two terms; a group's effective peak is ΣF / Σ(F/P), so mixed dtypes weigh by
-- their own peaks. Every sum is over costed kernels only, so a group with none has NULL figures, and since
-- no accepted kernel runs above its roof, no group can exceed 100% (MATH.md §1).

-- The one rule for which wall a set of kernels hits, for every grain here and for the phases pooled
-- across ranks (phase_totals): measured floors decide only when the costed kernels hold at least half
-- of the kernel time.
CREATE OR REPLACE MACRO roof_bound(costed_ns, time_ns, compute_floor_ns, memory_floor_ns) AS
    CASE WHEN costed_ns IS NULL OR costed_ns < 0.5 * time_ns THEN NULL
         WHEN compute_floor_ns IS NULL THEN 'memory'
         WHEN memory_floor_ns IS NULL OR compute_floor_ns >= memory_floor_ns THEN 'compute'
         ELSE 'memory' END;

-- view _roofline_input: one row per kernel, with the terms the roofline views sum
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   step_id: `kernels.step_id`
--   phase: `kernels.phase`
--   category: `kernels.category`
--   name: `kernels.name`
--   dur_ns: `kernels.dur_ns`
--   cost_status: `kernels.cost_status`
--   flops: `kernels.flops` of gemm and attention kernels (the rest run no tensor-core math and are judged
--     against bandwidth only)
--   bytes: `kernels.bytes`
--   cost_dtype: `kernels.cost_dtype`
--   peak_flops: dense peak of that dtype on the kernel's GPU, FLOP/s
--   hbm_bytes_per_s: its HBM bandwidth, bytes/s
--   l2_bytes_per_s: its L2 bandwidth where published, bytes/s
--   compute_s: flops / peak_flops, seconds
--   memory_s: bytes / hbm_bytes_per_s, seconds
--   costed: accepted cost whose every term can be turned into time: counts towards aggregates
--   floor_s: the larger of compute_s and memory_s, seconds
CREATE OR REPLACE VIEW _roofline_input AS
WITH terms AS (
    SELECT k.rank, k.kernel_id, k.step_id, k.phase, k.category, k.name, k.dur_ns, k.cost_status,
           CASE WHEN k.category IN ('gemm', 'attention') THEN k.flops END AS flops, k.bytes, k.cost_dtype,
           p.peak_flops, s.hbm_bytes_per_s, s.l2_bytes_per_s
    FROM kernels k
    LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
    LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
    LEFT JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = k.cost_dtype
),
seconds AS (
    SELECT *, flops / peak_flops AS compute_s, bytes / hbm_bytes_per_s AS memory_s,
           cost_status = 'accepted' AND (flops IS NOT NULL OR bytes IS NOT NULL)
               AND (flops IS NULL OR peak_flops IS NOT NULL)
               AND (bytes IS NULL OR hbm_bytes_per_s IS NOT NULL) AS costed
    FROM terms
)
SELECT *, CASE WHEN compute_s IS NULL THEN memory_s WHEN memory_s IS NULL THEN compute_s
               WHEN compute_s >= memory_s THEN compute_s ELSE memory_s END AS floor_s
FROM seconds;

-- view roofline_kernels: one row per kernel with an accepted or L2-resident cost
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   step_id: `kernels.step_id`
--   phase: `kernels.phase`
--   category: `kernels.category`
--   name: `kernels.name`
--   dur_ns: `kernels.dur_ns`
--   flops: `kernels.flops`
--   bytes: `kernels.bytes`
--   dtype: the dtype whose peak applies (`kernels.cost_dtype`)
--   cost_status: `accepted` or `l2_resident` (rejected kernels are not in this view)
--   achieved_tflops: FLOPs / time, 10¹² FLOP/s
--   achieved_tbps: bytes / time, TB/s
--   arithmetic_intensity: FLOPs / bytes, FLOP per byte
--   ridge: peak FLOP/s of the dtype / memory bandwidth, FLOP per byte
--   bound: 'compute' when FLOPs/peak ≥ bytes/bandwidth, else 'memory'
--   pct_of_roof: max(FLOPs/peak, bytes/bandwidth) / time, percent; for an L2-resident kernel bytes/L2
--     bandwidth / time; NULL when a term has no peak
--   l2_resident: achieved bandwidth above the HBM peak by a working set that fits L2: the data came from cache
CREATE OR REPLACE VIEW roofline_kernels AS
SELECT rank, kernel_id, step_id, phase, category, name, dur_ns, flops, bytes, cost_dtype AS dtype, cost_status,
       flops / nullif(dur_ns, 0) / 1e3 AS achieved_tflops,
       bytes / nullif(dur_ns, 0) / 1e3 AS achieved_tbps,
       flops / nullif(bytes, 0) AS arithmetic_intensity,
       peak_flops / hbm_bytes_per_s AS ridge,
       CASE WHEN cost_status = 'l2_resident' OR (flops IS NULL AND bytes IS NOT NULL) THEN 'memory'
            WHEN compute_s >= memory_s OR (memory_s IS NULL AND compute_s IS NOT NULL) THEN 'compute'
            WHEN memory_s IS NOT NULL THEN 'memory' END AS bound,
       CASE WHEN costed THEN 100.0 * floor_s * 1e9 / dur_ns
            WHEN cost_status = 'l2_resident' THEN 100.0 * bytes / l2_bytes_per_s * 1e9 / dur_ns
       END AS pct_of_roof,
       cost_status = 'l2_resident' AS l2_resident
FROM _roofline_input
WHERE cost_status IN ('accepted', 'l2_resident') AND dur_ns > 0;

-- table _roofline_groups: one row per (rank, category), (rank, phase) and (rank, step), in one pass
--   grain: `category`, `phase` or `step`: which of the views below the row belongs to
--   rank: trace rank
--   category: `kernels.category` (grain `category`)
--   phase: `kernels.phase` (grains `phase` and `step`)
--   step_id: `kernels.step_id` (grain `step`)
--   kernels: kernels in the group
--   time_ns: their summed time, ns
--   costed_time_ns: time of the *costed* kernels: accepted costs whose every term has a peak, ns; NULL when none
--   rejected_time_ns: time of the kernels whose costs were rejected, ns; NULL when none
--   l2_resident_time_ns: time of the L2-resident kernels, ns; NULL when none
--   flops: ΣFLOPs over the costed kernels
--   bytes: Σbytes over the costed kernels
--   achieved_tflops: ΣFLOPs / Σtime over the costed kernels that have FLOPs, 10¹² FLOP/s; NULL when none
--   achieved_tbps: Σbytes / Σtime over the costed kernels that have bytes, TB/s; NULL when none
--   arithmetic_intensity: ΣFLOPs / Σbytes, FLOP per byte
--   ridge: effective ridge: ΣF / Σ(F/peak) over bandwidth, so mixed dtypes weigh by their own peaks
--   compute_floor_ns: Σ F/peak, ns
--   memory_floor_ns: Σ B/bandwidth, ns
--   roofline_floor_ns: Σ max(F/peak, B/bandwidth), kernel by kernel, ns
--   coverage_pct: costed time / time, percent
--   bound: the wall the group hits, `roof_bound()`: 'compute' when the compute floor is the larger, else
--     'memory'; NULL when the costed kernels hold under half the group's kernel time (they are then a sample
--     of what had shapes, not the group: `costed_bound` keeps their wall as evidence)
--   costed_bound: the wall of the costed kernels alone, at any coverage; NULL when nothing was costed
--   pct_of_roof: roofline floor / costed time, percent; NULL when nothing was costed (never 0 or 100 from
--     no data)
CREATE OR REPLACE TABLE _roofline_groups AS
WITH sums AS (
    SELECT CASE WHEN grouping(step_id) = 0 THEN 'step' WHEN grouping(phase) = 0 THEN 'phase' ELSE 'category' END
               AS grain,
           rank, category, phase, step_id,
           count(*) AS kernels,
           sum(dur_ns)::BIGINT AS time_ns,
           sum(dur_ns) FILTER (WHERE costed)::BIGINT AS costed_time_ns,
           sum(dur_ns) FILTER (WHERE cost_status LIKE 'rejected%')::BIGINT AS rejected_time_ns,
           sum(dur_ns) FILTER (WHERE cost_status = 'l2_resident')::BIGINT AS l2_resident_time_ns,
           sum(flops) FILTER (WHERE costed) AS flops,
           sum(bytes) FILTER (WHERE costed) AS bytes,
           sum(flops) FILTER (WHERE costed)
               / nullif(sum(dur_ns) FILTER (WHERE costed AND flops IS NOT NULL), 0) / 1e3 AS achieved_tflops,
           sum(bytes) FILTER (WHERE costed)
               / nullif(sum(dur_ns) FILTER (WHERE costed AND bytes IS NOT NULL), 0) / 1e3 AS achieved_tbps,
           sum(flops) FILTER (WHERE costed AND bytes IS NOT NULL)
               / nullif(sum(bytes) FILTER (WHERE costed AND flops IS NOT NULL), 0) AS arithmetic_intensity,
           sum(flops) FILTER (WHERE costed) / nullif(sum(compute_s) FILTER (WHERE costed), 0)
               / any_value(hbm_bytes_per_s) AS ridge,
           sum(compute_s) FILTER (WHERE costed) * 1e9 AS compute_floor_ns,
           sum(memory_s) FILTER (WHERE costed) * 1e9 AS memory_floor_ns,
           sum(floor_s) FILTER (WHERE costed) * 1e9 AS roofline_floor_ns
    FROM _roofline_input
    GROUP BY GROUPING SETS ((rank, category), (rank, phase), (rank, step_id, phase))
)
SELECT *,
       100.0 * costed_time_ns / nullif(time_ns, 0) AS coverage_pct,
       roof_bound(costed_time_ns, time_ns, compute_floor_ns, memory_floor_ns) AS bound,
       roof_bound(costed_time_ns, costed_time_ns, compute_floor_ns, memory_floor_ns) AS costed_bound,
       100.0 * roofline_floor_ns / nullif(costed_time_ns, 0) AS pct_of_roof
FROM sums;

-- view roofline_by_category: one row per (rank, category)
--   rank: trace rank
--   category: `kernels.category`
--   *: the columns of _roofline_groups from kernels on
CREATE OR REPLACE VIEW roofline_by_category AS
SELECT rank, category, * EXCLUDE (grain, rank, category, phase, step_id) FROM _roofline_groups WHERE grain = 'category';

-- view roofline_by_phase: one row per (rank, phase)
--   rank: trace rank
--   phase: `kernels.phase`
--   *: the columns of _roofline_groups from kernels on
CREATE OR REPLACE VIEW roofline_by_phase AS
SELECT rank, phase, * EXCLUDE (grain, rank, category, phase, step_id) FROM _roofline_groups WHERE grain = 'phase';

-- view roofline_by_step: one row per (rank, step)
--   rank: trace rank
--   step_id: `kernels.step_id`
--   phase: `kernels.phase`
--   *: the columns of _roofline_groups from kernels on
CREATE OR REPLACE VIEW roofline_by_step AS
SELECT rank, step_id, phase, * EXCLUDE (grain, rank, category, phase, step_id) FROM _roofline_groups WHERE grain = 'step';
