-- stage: comm_islands
-- The communication of each device, step and family as islands, each with the part no compute kernel ran beside:
-- the exposed communication TV401 reports and TV402 caps a straggler's claim by. A table, so its two readers do not
-- compute it twice, in a stage of its own, so that it fills a free core instead of delaying a longer chain.
-- requires: gpu_activity
-- creates: comm_islands
--
-- The islands and their overlap with the device's compute are analysis/intervals.py's exposed_islands_sql, invoked
-- as the exposed_islands macro that the loader expands into that helper's text.

-- table comm_islands: one row per maximal interval of communication kernels per device, step and family, with the part no compute kernel ran beside
--   rank: trace rank
--   device_id: GPU ordinal
--   step_id: the step that launched the kernels; NULL outside every step
--   family: gpu_activity.comm_family, or 'all': every family of the step merged
--   start_ns: the island's first start
--   end_ns: the island's last end
--   comm_ns: end_ns - start_ns
--   exposed_ns: comm_ns minus its overlap with the union of the device's non-communication kernels (any step)
--
-- Per step and family, and per step across families ('all'), as TV401 reports them; the compute beside each
-- island as in device_activity.
CREATE OR REPLACE TABLE comm_islands AS
WITH comm_activity AS NOT MATERIALIZED (
    SELECT * FROM gpu_activity WHERE kind = 'kernel' AND category = 'communication'
)
SELECT rank, device_id, step_id, family, lo AS start_ns, hi AS end_ns, hi - lo AS comm_ns, exposed_ns
FROM (
    -- the communication islands per step and family, each with the part no compute kernel of its device ran beside
    exposed_islands!((SELECT rank, device_id, step_id, comm_family AS family, start_ns, end_ns FROM comm_activity
                      UNION ALL
                      SELECT rank, device_id, step_id, 'all', start_ns, end_ns FROM comm_activity),
                     (rank, device_id, step_id, family),
                     (SELECT rank, device_id, start_ns, end_ns FROM gpu_activity
                      WHERE kind = 'kernel' AND category <> 'communication'
                        AND (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM comm_activity)),
                     (rank, device_id))
)
ORDER BY rank, device_id, step_id, family, start_ns;
