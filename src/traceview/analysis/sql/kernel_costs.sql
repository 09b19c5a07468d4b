-- stage: kernel_costs
-- Each kernel's share of its launching op's modelled cost, judged against its GPU: a cost the
-- hardware could not have run is rejected, never clamped (*Physics* above).
-- requires: kernels, labelled_kernels, op_costs, api_calls, devices, gpu_specs, gpu_peaks
-- creates: kernel_costs, rejected_costs
--
-- A kernel's costs come from the op that launched it (`op_costs`): a Kineto cpu_op joined on External
-- id, or the nsys `emit_nvtx` range enclosing the launch call. An op's cost is shared among its kernels
-- in proportion to their time. FLOP/s above the dtype's dense peak is never plausible; bytes/s above the
-- HBM peak is plausible only when the bytes fit the GPU's L2 (and, where the L2 bandwidth is published,
-- stay under it), and such a kernel is `l2_resident`. A kernel whose GPU has no spec is judged against
-- the fastest GPU in hardware/, so no number leaves that no GPU could produce.

CREATE OR REPLACE TEMP TABLE _kernel_ops AS
WITH by_external AS (
    SELECT k.rank, k.kernel_id, o.range_id
    FROM kernels k JOIN op_costs o
      ON o.rank = k.rank AND o.external_id = k.external_id AND o.kind = 'cpu_op'
    WHERE k.external_id IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY k.rank, k.kernel_id ORDER BY o.start_ns DESC) = 1
),
launches AS (
    SELECT k.rank, k.kernel_id, a.pid, a.tid, a.start_ns, a.end_ns
    FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
    WHERE k.external_id IS NULL
),
by_nvtx AS (
    SELECT l.rank, l.kernel_id, o.range_id
    FROM launches l ASOF JOIN (SELECT * FROM op_costs WHERE kind = 'nvtx') o
      ON o.rank = l.rank AND o.pid = l.pid AND o.tid = l.tid AND o.start_ns <= l.start_ns
    WHERE o.end_ns >= l.end_ns
)
SELECT * FROM by_external UNION ALL SELECT * FROM by_nvtx;

CREATE OR REPLACE TEMP TABLE _judged_costs AS
WITH dtype_bytes(dtype, size) AS (
    VALUES ('fp64', 8.0), ('fp32', 4.0), ('tf32', 4.0), ('bf16', 2.0), ('fp16', 2.0), ('fp8', 1.0), ('int8', 1.0),
           ('fp4', 0.5)
),
modelled AS (
    SELECT ko.rank, ko.kernel_id, ko.range_id, o.op, k.device_id, k.dur_ns,
           coalesce(k.dtype, o.input_dtype) AS cost_dtype,
           o.flops * k.dur_ns / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS flops,
           -- moved elements become bytes only where the element size is known (no fp32 guess)
           coalesce(o.bytes, o.elements * ds.size) * k.dur_ns
               / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS bytes
    FROM _kernel_ops ko
    JOIN op_costs o USING (rank, range_id)
    JOIN labelled_kernels k ON k.rank = ko.rank AND k.kernel_id = ko.kernel_id
    LEFT JOIN dtype_bytes ds ON ds.dtype = coalesce(k.dtype, o.input_dtype)
    WHERE k.dur_ns > 0
),
fastest AS (
    SELECT (SELECT max(hbm_bytes_per_s) FROM gpu_specs) AS hbm_bytes_per_s,
           (SELECT max(peak_flops) FROM gpu_peaks) AS peak_flops
),
roofs AS (
    SELECT m.*, d.spec_id, s.l2_bytes, s.l2_bytes_per_s,
           CASE WHEN s.spec_id IS NULL THEN f.hbm_bytes_per_s ELSE s.hbm_bytes_per_s END AS memory_roof,
           CASE WHEN s.spec_id IS NULL THEN f.peak_flops
                WHEN p.peak_flops IS NULL THEN (SELECT max(peak_flops) FROM gpu_peaks q WHERE q.spec_id = s.spec_id)
                ELSE p.peak_flops END AS compute_roof,
           m.flops / m.dur_ns * 1e9 AS flops_per_s, m.bytes / m.dur_ns * 1e9 AS bytes_per_s
    FROM modelled m
    CROSS JOIN fastest f
    LEFT JOIN devices d ON d.rank = m.rank AND d.device_id = m.device_id
    LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
    LEFT JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = m.cost_dtype
    WHERE m.flops IS NOT NULL OR m.bytes IS NOT NULL
)
SELECT *,
       CASE WHEN flops_per_s > compute_roof THEN 'rejected_compute'
            WHEN bytes_per_s > memory_roof AND bytes <= l2_bytes
                 AND (l2_bytes_per_s IS NULL OR bytes_per_s <= l2_bytes_per_s) THEN 'l2_resident'
            WHEN bytes_per_s > memory_roof THEN 'rejected_memory'
            ELSE 'accepted' END AS cost_status
FROM roofs;

-- transient table kernel_costs: one row per kernel a cost model applied to
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   flops: useful FLOPs of the kernel: its launching op's FLOPs shared among the op's kernels by time; NULL
--     without shapes, and NULL when the cost was rejected as physically impossible
--   bytes: ideal DRAM bytes, shared the same way (inputs read once, output written once); NULL as for `flops`
--   cost_op: the op the costs come from (`aten::addmm`, ...)
--   cost_dtype: dtype whose peak judges the kernel: the name's dtype, else the op's first input type
--   op_range_id: `ranges.range_id` of that op
--   cost_status: the physics check of the modelled cost (docs/analysis.md, *Physics*): `accepted`,
--     `l2_resident`, `rejected_compute`, `rejected_memory`; NULL when no cost model applied
CREATE OR REPLACE TABLE kernel_costs AS
SELECT rank, kernel_id,
       CASE WHEN cost_status IN ('accepted', 'l2_resident') THEN flops END AS flops,
       CASE WHEN cost_status IN ('accepted', 'l2_resident') THEN bytes END AS bytes,
       op AS cost_op, cost_dtype, range_id AS op_range_id, cost_status
FROM _judged_costs;

-- adds to kernels:
--   *: the columns of kernel_costs from flops on

-- table rejected_costs: one row per kernel whose modelled cost was physically impossible
--   rank: trace rank
--   kernel_id: `kernels.kernel_id`
--   op_range_id: `ranges.range_id` of the op
--   op: the op
--   reason: `rejected_compute` (FLOP/s above the dense peak) or `rejected_memory` (bytes/s above HBM with a
--     working set above L2)
--   dur_ns: kernel time, ns
--   flops: the modelled FLOPs
--   bytes: the modelled bytes
--   implied_tflops: modelled FLOPs / time, 10¹² FLOP/s
--   implied_tbps: modelled bytes / time, TB/s
--   roof_tflops: the dense peak it was judged against, 10¹² FLOP/s
--   roof_tbps: the HBM bandwidth it was judged against, TB/s
--   l2_bytes: the GPU's L2 size, bytes; NULL when not published
CREATE OR REPLACE TABLE rejected_costs AS
SELECT rank, kernel_id, range_id AS op_range_id, op, cost_status AS reason, dur_ns, flops, bytes,
       flops_per_s / 1e12 AS implied_tflops, bytes_per_s / 1e12 AS implied_tbps,
       compute_roof / 1e12 AS roof_tflops, memory_roof / 1e12 AS roof_tbps, l2_bytes
FROM _judged_costs WHERE cost_status LIKE 'rejected%'
ORDER BY rank, kernel_id;

-- One diagnostic per (rank, op, reason): the implied rate against the roof and the time left uncosted.
INSERT INTO diagnostics
SELECT r.rank, 'analysis', 'warning', 'cost_rejected',
       printf('%d kernels of %s: modelled cost implies %s against the roof of %s; cost rejected, '
              || '%.3f ms (%.1f%% of kernel time) left uncosted',
              count(*), r.op,
              CASE WHEN r.reason = 'rejected_compute' THEN printf('%.1f TFLOP/s', max(r.implied_tflops))
                   ELSE printf('%.2f TB/s', max(r.implied_tbps)) END,
              CASE WHEN r.reason = 'rejected_compute' THEN printf('%.1f TFLOP/s dense', any_value(r.roof_tflops))
                   WHEN any_value(r.l2_bytes) IS NULL THEN printf('%.2f TB/s HBM', any_value(r.roof_tbps))
                   ELSE printf('%.2f TB/s HBM (working set above the %d MiB L2)', any_value(r.roof_tbps),
                               any_value(r.l2_bytes) // 1048576) END,
              sum(r.dur_ns) / 1e6, 100.0 * sum(r.dur_ns) / any_value(t.kernel_ns)),
       NULL
FROM rejected_costs r
JOIN (SELECT rank, sum(dur_ns) AS kernel_ns FROM kernels GROUP BY rank) t USING (rank)
GROUP BY r.rank, r.op, r.reason
ORDER BY r.rank, sum(r.dur_ns) DESC, r.op;

DROP TABLE _kernel_ops;
DROP TABLE _judged_costs;
