-- stage: phase_summary
-- Per rank and phase (empty steps left out): which wall each phase hits and how far from it, from the
-- strongest evidence available.
-- requires: steps, step_accounting, roofline_by_phase, kernels, devices, gpu_specs, gpu_peaks
-- creates: phase_summary
--
-- The bound comes from the strongest evidence available (`bound_source`): measured kernel costs when they
-- cover at least half of the phase's kernel time (`roofline_by_phase.bound` is set); else the model
-- accounting (`--model`); else tokens per step, since a step's arithmetic intensity is about its tokens
-- when weights dominate (MATH.md §3.3) and is compared with the GPU's bf16 ridge; else the textbook rule
-- (decode is memory-bound, prefill compute-bound). `pct_of_roof` comes only from measured costs or the
-- model, and where neither gives one, `no_roof_reason` says why. A model floor above the measured GPU
-- time is physically impossible: the model does not describe the run, so its figures are dropped and a
-- diagnostic says so.

-- table phase_summary: one row per (rank, phase)
--   rank: trace rank
--   phase: the phase
--   steps: steps of the phase
--   wall_ns: Σ step wall time, ns
--   gpu_busy_ns: Σ step GPU busy time, ns
--   kernels: from `roofline_by_phase`
--   kernel_time_ns: `roofline_by_phase.time_ns`
--   costed_time_ns: from `roofline_by_phase`
--   coverage_pct: from `roofline_by_phase`
--   rejected_time_ns: from `roofline_by_phase`
--   flops: from `roofline_by_phase`
--   bytes: from `roofline_by_phase`
--   achieved_tflops: from `roofline_by_phase`
--   achieved_tbps: from `roofline_by_phase`
--   arithmetic_intensity: from `roofline_by_phase`
--   ridge: the phase's effective ridge, else the GPU's bf16 ridge, FLOP per byte
--   tokens_per_step: median new tokens per step, when annotations count them
--   bound: memory or compute
--   bound_source: `measured` (kernel costs cover half the phase's kernel time or more: `roofline_by_phase.bound`),
--     `model` (step accounting), `tokens_per_step` (a step's intensity is about its tokens when weights
--     dominate, MATH.md §3.3, compared with the bf16 ridge), `phase_rule` (decode memory-bound, prefill
--     compute-bound)
--   costed_bound: `roofline_by_phase.costed_bound`: the wall of the costed kernels alone, shown as evidence
--     beside a bound from another source
--   pct_of_roof: measured: roofline floor / costed time; model: Σ step floors / Σ GPU busy; else NULL; percent
--   roofline_floor_ns: the floor `pct_of_roof` divides: measured Σ kernel floors, or the model's Σ step
--     floors, ns
--   roof_basis_ns: what the floor is divided by: the costed kernel time (measured) or the GPU busy time of
--     the modelled steps (model), so `pct_of_roof` = 100 · `roofline_floor_ns` / `roof_basis_ns` and pools
--     across ranks as a ratio of sums, ns
--   no_roof_reason: why `pct_of_roof` is NULL: `no_gpu_spec`, `no_shapes` (no op shapes recorded: profile
--     with `torch.profiler.profile(record_shapes=True)`, or under nsys with
--     `torch.autograd.profiler.emit_nvtx(record_shapes=True)`), `costs_rejected` (every modelled cost was
--     physically impossible), `low_coverage` (costs cover under half the kernel time), `model_exceeds_measured`
--     (the `--model` floor is above the measured GPU time: the options do not describe the run; a
--     diagnostic says so)
CREATE OR REPLACE TABLE phase_summary AS
WITH step_totals AS (
    SELECT s.rank, s.phase, count(*) AS steps, sum(s.end_ns - s.start_ns)::BIGINT AS wall_ns,
           sum(s.gpu_time_ns)::BIGINT AS gpu_busy_ns,
           median(coalesce(s.prefill_tokens, 0) + coalesce(s.decode_tokens, 0))
               FILTER (WHERE s.prefill_tokens IS NOT NULL OR s.decode_tokens IS NOT NULL) AS tokens_per_step,
           sum(a.memory_time_ns) AS model_memory_ns, sum(a.compute_time_ns) AS model_compute_ns,
           sum(a.roofline_floor_ns) AS model_floor_ns,
           sum(s.gpu_time_ns) FILTER (WHERE a.roofline_floor_ns IS NOT NULL) AS model_busy_ns
    FROM steps s LEFT JOIN step_accounting a USING (rank, step_id)
    WHERE s.phase <> 'empty'
    GROUP BY ALL
),
ridges AS (
    SELECT d.rank, any_value(p.peak_flops / g.hbm_bytes_per_s) AS ridge_bf16
    FROM devices d JOIN gpu_specs g USING (spec_id) JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = 'bf16'
    GROUP BY d.rank
),
specs AS (
    SELECT k.rank, k.phase, count(d.spec_id) AS kernels_with_spec
    FROM kernels k LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
    GROUP BY ALL
),
evidence AS (
    SELECT t.*, r.kernels, r.time_ns AS kernel_time_ns, r.costed_time_ns, r.coverage_pct, r.rejected_time_ns,
           r.flops, r.bytes, r.achieved_tflops, r.achieved_tbps, r.arithmetic_intensity,
           coalesce(r.ridge, g.ridge_bf16) AS ridge, g.ridge_bf16, sp.kernels_with_spec,
           r.bound AS measured_bound, r.costed_bound, r.pct_of_roof AS measured_pct,
           r.roofline_floor_ns AS measured_floor_ns,
           100.0 * t.model_floor_ns / nullif(t.model_busy_ns, 0) AS model_pct
    FROM step_totals t
    LEFT JOIN roofline_by_phase r USING (rank, phase)
    LEFT JOIN ridges g USING (rank)
    LEFT JOIN specs sp USING (rank, phase)
),
decided AS (
    SELECT *,
           CASE WHEN measured_bound IS NOT NULL THEN 'measured'
                WHEN model_pct <= 100 THEN 'model'
                WHEN tokens_per_step IS NOT NULL AND ridge_bf16 IS NOT NULL THEN 'tokens_per_step'
                WHEN phase IN ('decode', 'prefill') THEN 'phase_rule'
           END AS bound_source
    FROM evidence
)
SELECT rank, phase, steps, wall_ns, gpu_busy_ns, kernels, kernel_time_ns, costed_time_ns, coverage_pct,
       rejected_time_ns, flops, bytes, achieved_tflops, achieved_tbps, arithmetic_intensity, ridge,
       tokens_per_step,
       CASE bound_source
           WHEN 'measured' THEN measured_bound
           WHEN 'model' THEN CASE WHEN model_memory_ns >= model_compute_ns THEN 'memory' ELSE 'compute' END
           WHEN 'tokens_per_step' THEN CASE WHEN tokens_per_step < ridge_bf16 THEN 'memory' ELSE 'compute' END
           WHEN 'phase_rule' THEN CASE phase WHEN 'decode' THEN 'memory' ELSE 'compute' END
       END AS bound,
       bound_source, costed_bound,
       CASE bound_source WHEN 'measured' THEN measured_pct WHEN 'model' THEN model_pct END AS pct_of_roof,
       CASE bound_source WHEN 'measured' THEN measured_floor_ns WHEN 'model' THEN model_floor_ns END
           AS roofline_floor_ns,
       CASE bound_source WHEN 'measured' THEN costed_time_ns WHEN 'model' THEN model_busy_ns END AS roof_basis_ns,
       CASE WHEN bound_source IN ('measured', 'model') THEN NULL
            WHEN model_pct > 100 THEN 'model_exceeds_measured'
            WHEN kernels_with_spec = 0 OR kernels_with_spec IS NULL THEN 'no_gpu_spec'
            WHEN costed_time_ns IS NULL AND rejected_time_ns IS NOT NULL THEN 'costs_rejected'
            WHEN costed_time_ns IS NOT NULL THEN 'low_coverage'
            ELSE 'no_shapes'
       END AS no_roof_reason
FROM decided
ORDER BY rank, phase;

INSERT INTO diagnostics
SELECT rank, 'analysis', 'warning', 'model_exceeds_measured',
       printf('%s: the model''s floor (%.3f ms) is above the measured GPU time (%.3f ms), which no GPU can do: '
              || 'the --model options do not describe this run, so its roofline figures are dropped',
              phase, t.model_floor_ns / 1e6, t.model_busy_ns / 1e6), NULL
FROM (
    SELECT s.rank, s.phase, sum(a.roofline_floor_ns) AS model_floor_ns,
           sum(s.gpu_time_ns) FILTER (WHERE a.roofline_floor_ns IS NOT NULL) AS model_busy_ns
    FROM steps s JOIN step_accounting a USING (rank, step_id) GROUP BY ALL
) t
WHERE t.model_floor_ns > t.model_busy_ns;
