-- stage: step_budget
-- Each step's wall time, and each rank's time outside every step, split into disjoint buckets (compute, exposed
-- communication, copies, GPU idle by kind, outside GPU work) that add up to it exactly; the one accounting of
-- recoverable time that the rule engine grants findings' savings from (docs/rules.md, savings).
-- requires: steps, step_states, step_windows, gpu_activity, gpu_idle_gaps, rank_busy_islands, device_activity,
--     one_device_ranks
-- creates: step_budget, step_budget_buckets
--
-- The buckets are step_budget's columns after wall_ns, each `<bucket>_ns` (budget.BUCKETS and budget.IDLE_KINDS
-- are read from them); step_budget_buckets lists the same figures one bucket a row.

-- table step_budget: one row per step of a rank, plus one row per rank for its time outside every step
--   rank: trace rank
--   step_id: steps.step_id; NULL for the rank's time outside every step (within the trace's span)
--   phase: steps.phase; NULL outside steps
--   state: step_states.state (steady, warmup, init); NULL outside steps
--   priced: whether findings may claim this time (`step_windows.priced`: steady steps; warm-up where no step is
--     steady; never initialisation)
--   wall_ns: the time the window owns: the step's wall time less any part a later-starting overlapping step
--     owns; the sum of the buckets below
--   compute_ns: time at least one non-communication kernel ran
--   communication_ns: time only communication kernels ran (communication no compute hid)
--   copy_ns: time only memcpys or memsets ran
--   idle_host_wait_ns: GPU idle inside the window's GPU span, in gaps of idle_kind host_wait (the host issued
--     the next work only after the GPU ran dry)
--   idle_sync_drain_ns: ... of idle_kind sync_drain (the launching thread sat in a synchronizing call)
--   idle_bubble_ns: ... of idle_kind bubble (the next work was queued before the gap: launch latency)
--   idle_unknown_ns: ... of idle_kind unknown (no launch call in the trace)
--   outside_gpu_ns: wall time before the window's first and after its last GPU work
-- (built in budget.py: it composes intervals.py's islands_with_time_before_sql, time_before_sql and
-- busy_before_sql)

-- view step_budget_buckets: one row per (window, bucket) of step_budget: the same figures one bucket a row, as rules claim them
--   rank: trace rank
--   step_id: step_budget.step_id
--   phase: step_budget.phase
--   priced: step_budget.priced
--   bucket: the bucket's name: compute, communication, copy, idle_host_wait, idle_sync_drain, idle_bubble,
--     idle_unknown, outside_gpu
--   ns: its nanoseconds in the window
CREATE OR REPLACE VIEW step_budget_buckets AS
SELECT rank, step_id, phase, priced, bucket, ns FROM (
    UNPIVOT (SELECT rank, step_id, phase, priced, compute_ns AS compute, communication_ns AS communication,
                    copy_ns AS copy, idle_host_wait_ns AS idle_host_wait, idle_sync_drain_ns AS idle_sync_drain,
                    idle_bubble_ns AS idle_bubble, idle_unknown_ns AS idle_unknown, outside_gpu_ns AS outside_gpu
             FROM step_budget)
    ON compute, communication, copy, idle_host_wait, idle_sync_drain, idle_bubble, idle_unknown, outside_gpu
    INTO NAME bucket VALUE ns);
