-- stage: device_busy
-- The busy unions of the timeline: per device its span, busy and idle time and the communication no compute ran
-- beside; per rank its busy islands over every device; the busiest device. Rule TV203 and the report read these
-- instead of windows of their own.
-- requires: gpu_activity, kernels, memops, devices, gpu_specs
-- creates: device_activity, busiest_device, one_device_ranks, rank_busy_islands
--
-- Every interval fact rests on the one running-max window of analysis/intervals.py, invoked here as its macros
-- (busy_islands, busy_time, islands_from_prev_end; the loader expands each
-- into the helper's text): `prev_end_ns` is the latest end among the intervals of a key that start before this
-- one; an interval starting past it opens a busy island, and an island ends where the next island's opener says
-- the work before it ended (its prev_end_ns), the last at the key's latest end.

-- table device_activity: one row per (rank, device_id) that ran any kernel or memop
--   rank: trace rank
--   device_id: GPU ordinal
--   first_ns: start of its first activity
--   last_ns: end of its last activity
--   span_ns: last_ns - first_ns: the active span
--   busy_ns: length of the union of its kernel and memop intervals (overlaps counted once)
--   kernel_ns: Σ kernel durations (overlapping kernels counted each); NULL on a device that ran no kernel
--   kernel_busy_ns: length of the union of its kernel intervals; NULL on a device that ran no kernel
--   idle_ns: Σ gpu_idle_gaps.dur_ns: span_ns - busy_ns
--   gaps: idle gaps inside the span
--   comm_kernels: communication kernels it ran; NULL when none
--   comm_ns: length of the union of its communication kernels; NULL when none
--   comm_exposed_ns: the part of comm_ns with no non-communication kernel running beside it
--
-- Per device: islands and gaps partition the span, so busy time is the span less its gaps. Each communication
-- island is set against the compute beside it: the union of the device's non-communication kernels, whatever step
-- launched them (only on devices that communicate: elsewhere there is nothing to set the compute against). The
-- overlap of [lo, hi) with those disjoint islands is C(hi) - C(lo), where C(t) is the compute-busy time before t:
-- the `before` of the last compute island starting at or before t, plus the part of that island before t (0 when
-- none starts before t: nothing ran, a true zero, not unknown), read with an ASOF join.
CREATE OR REPLACE TABLE device_activity AS
WITH comm_activity AS NOT MATERIALIZED (
    SELECT * FROM gpu_activity WHERE kind = 'kernel' AND category = 'communication'
),
comm AS (
    SELECT rank, device_id, sum(hi - lo)::BIGINT AS comm_ns, sum(exposed_ns)::BIGINT AS comm_exposed_ns
    FROM (
        -- the communication islands, each with the part no compute kernel of its device ran beside
        exposed_islands!((SELECT rank, device_id, start_ns, end_ns FROM comm_activity), (rank, device_id),
                         (SELECT rank, device_id, start_ns, end_ns FROM gpu_activity
                          WHERE kind = 'kernel' AND category <> 'communication'
                            AND (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM comm_activity)),
                         (rank, device_id))
    ) GROUP BY rank, device_id
),
comm_kernels AS (SELECT rank, device_id, count(*) AS comm_kernels FROM comm_activity GROUP BY rank, device_id),
spans AS (
    SELECT rank, device_id, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
           sum(CASE WHEN start_ns > prev_end_ns THEN start_ns - prev_end_ns ELSE 0 END)::BIGINT AS idle_ns,
           count(*) FILTER (WHERE start_ns > prev_end_ns) AS gaps,
           sum(dur_ns) FILTER (WHERE kind = 'kernel')::BIGINT AS kernel_ns,
           count(*) FILTER (WHERE kind = 'memop') AS memops
    FROM gpu_activity GROUP BY rank, device_id
),
kernel_busy AS (
    -- only where memops share the timeline do kernels alone need a union of their own. No islands needed: in
    -- start order, the part of an interval not covered before it is what lies past prev_end_ns, and those parts
    -- sum to the union
    busy_time!((SELECT rank, device_id, start_ns, end_ns FROM kernels
                WHERE (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM memops)), (rank, device_id))
)
SELECT s.rank, s.device_id, s.first_ns, s.last_ns, s.last_ns - s.first_ns AS span_ns,
       s.last_ns - s.first_ns - s.idle_ns AS busy_ns, s.kernel_ns,
       CASE WHEN s.memops = 0 AND s.device_id IS NOT NULL THEN s.last_ns - s.first_ns - s.idle_ns
            ELSE k.busy_ns END AS kernel_busy_ns,
       s.idle_ns, s.gaps, n.comm_kernels, c.comm_ns, c.comm_exposed_ns
FROM spans s
LEFT JOIN kernel_busy k ON k.rank = s.rank AND k.device_id = s.device_id
LEFT JOIN comm c ON c.rank = s.rank AND c.device_id = s.device_id
LEFT JOIN comm_kernels n ON n.rank = s.rank AND n.device_id = s.device_id
ORDER BY s.rank, s.device_id;

-- view busiest_device: one row per trace at most: the (rank, device_id) that ran the most kernel time (ties: lowest rank, then device_id); none when the trace has no kernels
--   rank: trace rank
--   device_id: GPU ordinal
--   name: devices.name
--   spec_id: devices.spec_id: the matched hardware/ file
--   spec_name: gpu_specs.name of that spec
--   hbm_tbps: the spec's HBM bandwidth, 10¹² bytes/s
--   sm_count: devices.sm_count
--   memory_bytes: devices.memory_bytes
--   kernel_time_ns: Σ kernel durations on this device
--   devices_used: distinct (rank, device_id) that ran kernels
--
-- A view: computed when a rule or report reads it, so a filter on it is pushed down.
CREATE OR REPLACE VIEW busiest_device AS
SELECT d.rank, d.device_id, d.name, d.spec_id, s.name AS spec_name, s.hbm_bytes_per_s / 1e12 AS hbm_tbps,
       d.sm_count, d.memory_bytes, k.kernel_time_ns,
       count(*) OVER () AS devices_used
FROM (SELECT rank, device_id, sum(dur_ns)::BIGINT AS kernel_time_ns FROM kernels GROUP BY rank, device_id) k
JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
ORDER BY k.kernel_time_ns DESC, d.rank, d.device_id
LIMIT 1;

-- view one_device_ranks: one row per rank whose kernels and memops all ran on one known device, so that its busy islands and idle gaps are that device's
--   rank: trace rank
--
-- Read off device_activity's row per device, whose size the planner knows: a count over every activity made it build
-- a hash table of all of them to probe one rank.
CREATE OR REPLACE VIEW one_device_ranks AS
SELECT rank FROM device_activity GROUP BY rank HAVING count(*) = 1 AND count(device_id) = 1;

-- table rank_busy_islands: one row per maximal busy interval of a rank: the union of its kernels and memops over every device
--   rank: trace rank
--   start_ns: the island's first start
--   end_ns: the island's last end
CREATE OR REPLACE TABLE rank_busy_islands AS
-- a rank with one device has that device's islands, read off gpu_activity's own prev_end_ns
SELECT rank, lo AS start_ns, hi AS end_ns FROM (
    islands_from_prev_end!((SELECT * FROM gpu_activity WHERE rank IN (SELECT rank FROM one_device_ranks)),
                           (rank, device_id))
)
UNION ALL
SELECT rank, lo, hi FROM (
    busy_islands!((SELECT rank, start_ns, end_ns FROM gpu_activity
                   WHERE NOT rank IN (SELECT rank FROM one_device_ranks)),
                  (rank))
)
ORDER BY rank, start_ns;
