-- stage: step_accounting
-- Where each step's wall time went: GPU busy, GPU idle inside the step's GPU span and time outside GPU work;
-- with `--model`, the step's ideal bytes and FLOPs, so that wall = bytes/bandwidth + FLOPs/(peak·utilisation) +
-- overhead.
-- requires: steps, devices
-- creates: step_accounting
--
-- devices is required for the stage that matches the GPU (context.gpu), which the model terms are priced on.
-- Without a model only the trace's split is filled in; with one, accounting.py reads each step's token counts
-- (section model_steps), costs its shape on the on-paper model (estimate.py) and hands the results back in the
-- values table `_costs` (rank, step_id, bytes, flops, memory_ns, compute_ns), which section model joins in.

-- table step_accounting: one row per step
--   rank: trace rank
--   step_id: `steps.step_id`
--   phase: `steps.phase`
--   wall_ns: step duration
--   gpu_busy_ns: union of the step's GPU work
--   gpu_idle_ns: GPU idle between the step's first and last GPU work
--   outside_gpu_ns: wall time before and after the step's GPU work
--   model_bytes: ideal bytes of the step (a mixed step streams weights once)
--   model_flops: ideal FLOPs of the step
--   memory_time_ns: bytes/bandwidth
--   compute_time_ns: FLOPs/peak
--   roofline_floor_ns: max of the two: the step cannot be faster
--   kernel_inefficiency_ns: GPU busy time above the floor; NULL when the floor is above the busy time (the
--     model does not describe the run)
--   overhead_ns: wall − memory time − compute time (negative when they overlap)
--   dominant_term: memory, compute or overhead: the largest of the three
CREATE OR REPLACE TABLE step_accounting AS
SELECT s.rank, s.step_id, s.phase, s.end_ns - s.start_ns AS wall_ns, s.gpu_time_ns AS gpu_busy_ns,
       coalesce(s.gpu_end_ns - s.gpu_start_ns - s.gpu_time_ns, 0) AS gpu_idle_ns,
       (s.end_ns - s.start_ns) - coalesce(s.gpu_end_ns - s.gpu_start_ns, 0) AS outside_gpu_ns,
       NULL::DOUBLE AS model_bytes, NULL::DOUBLE AS model_flops,
       NULL::BIGINT AS memory_time_ns, NULL::BIGINT AS compute_time_ns,
       NULL::BIGINT AS roofline_floor_ns, NULL::BIGINT AS kernel_inefficiency_ns,
       NULL::BIGINT AS overhead_ns, NULL::VARCHAR AS dominant_term
FROM steps s;

-- section: model_steps
-- The token counts of each step with work, which accounting.py turns into a per-request shape (a query: its
-- rows are read, one dict per step by column name).
SELECT rank, step_id, phase, prefill_requests, prefill_tokens, prefill_context_tokens,
       decode_requests, decode_tokens, decode_context_tokens FROM steps WHERE phase <> 'empty';

-- section: model
-- The model terms of each costed step, from the values table `_costs`.
UPDATE step_accounting SET model_bytes = c.bytes, model_flops = c.flops,
       memory_time_ns = c.memory_ns, compute_time_ns = c.compute_ns,
       roofline_floor_ns = c.floor_ns,
       -- a floor above the measured busy time is impossible: left NULL (phase_summary says why)
       kernel_inefficiency_ns = CASE WHEN gpu_busy_ns >= c.floor_ns THEN gpu_busy_ns - c.floor_ns END,
       overhead_ns = wall_ns - c.memory_ns - c.compute_ns,
       dominant_term = CASE
           WHEN wall_ns - c.memory_ns - c.compute_ns >= c.floor_ns THEN 'overhead'
           WHEN c.memory_ns >= c.compute_ns THEN 'memory' ELSE 'compute' END
FROM (SELECT *, CASE WHEN memory_ns >= compute_ns THEN memory_ns ELSE compute_ns END AS floor_ns
      FROM _costs) c
WHERE step_accounting.rank = c.rank AND step_accounting.step_id = c.step_id;
