-- stage: python_density
-- How dense with_stack's Python events are on the threads that launched GPU work, and so how much of their host time
-- is the profiler's own; TV201 reads it. Apart from host context, whose gaps it does not read, so that it runs while
-- the steps are still being found.
-- requires: api_calls, ranges
-- creates: python_event_density

-- table python_event_density: one row per rank with a launch call: how densely with_stack's Python function events (ranges.kind 'python_function') were recorded on the threads that launched GPU work. PyTorch's Python tracer runs a hook at every call and return, so a dense trace shows the host slower than it runs unprofiled: every host gap and op duration carries that cost
--   rank: trace rank
--   threads: threads that made a launch call (api_calls.is_launch)
--   host_ns: their recorded host time: per thread, from its first recorded API call or range to its last, summed
--   python_events: Python function events on those threads (0: the trace has none there, with_stack was off)
--   events_per_ms: python_events per ms of host_ns
--   overhead_ns: the estimated profiler cost: python_events * python_event_ns (host_context.py: 1 us per event,
--     the low end of the 1-2 us a call-and-return pair costs PyTorch's Python tracer)
--   overhead_pct: 100 * overhead_ns / host_ns
--   dense: overhead_pct >= dense_overhead_pct (host_context.py, 10): the analysis diagnostic
--     python_events_dense says so
CREATE OR REPLACE TABLE python_event_density AS
WITH threads AS (SELECT DISTINCT rank, pid, tid FROM api_calls WHERE is_launch),
events AS (
    SELECT rank, pid, tid, start_ns, end_ns, kind = 'python_function' AS python FROM ranges
    WHERE (rank, pid, tid) IN (SELECT rank, pid, tid FROM threads)
    UNION ALL
    SELECT rank, pid, tid, start_ns, end_ns, false FROM api_calls
    WHERE (rank, pid, tid) IN (SELECT rank, pid, tid FROM threads)
),
per_thread AS (
    SELECT rank, pid, tid, max(end_ns) - min(start_ns) AS host_ns, count(*) FILTER (WHERE python) AS python_events
    FROM events GROUP BY rank, pid, tid
),
per_rank AS (
    SELECT rank, count(*) AS threads, sum(host_ns)::BIGINT AS host_ns, sum(python_events)::BIGINT AS python_events
    FROM per_thread GROUP BY rank
)
SELECT rank, threads, host_ns, python_events, python_events / (host_ns / 1e6) AS events_per_ms,
       python_events * $python_event_ns AS overhead_ns, 100.0 * python_events * $python_event_ns / host_ns AS overhead_pct,
       100.0 * python_events * $python_event_ns / host_ns >= $dense_overhead_pct AS dense
FROM per_rank WHERE host_ns > 0
ORDER BY rank;

INSERT INTO diagnostics
SELECT rank, 'analysis', 'warning', 'python_events_dense',
       printf('with_stack recorded %d Python function events on the launching threads, %.0f per ms of their '
              || '%.1f ms of host time: at about %.1f us of profiler work each, some %.0f%% of that host time is '
              || 'the profiler''s own, so host gaps and CPU op durations read longer than the program runs; '
              || 'profile again without with_stack to time the host', python_events, events_per_ms, host_ns / 1e6,
              $python_event_ns / 1e3, overhead_pct),
       NULL
FROM python_event_density WHERE dense
ORDER BY rank;
