-- stage: ranks
-- Ranks side by side: communication kernels matched across ranks and devices as collectives (the n-th of one
-- family and name), how long each participant waited in each for the last to arrive (duration-based, so offset
-- clocks do not matter; start skew only within one trace file), a summary per rank, and the n-th step of each
-- phase across ranks with its slowest rank; rule TV402 reads these.
-- requires: gpu_activity, kernels, steps, trace_info, device_activity, rank_busy_islands
-- creates: collective_waits, collectives, rank_summary, rank_steps
--
-- A participant is a (rank, device_id) that ran the collective. The first section matches the communication
-- kernels; ranks.py then reads the (family, name)s that several participants ran unequally often (section
-- unmatched) and says so in one `unmatched_collectives` diagnostic, before section summaries drops the temporary
-- tables and sums the matches per collective, rank and step.

CREATE OR REPLACE TEMP TABLE _rank_comm AS
SELECT a.rank, a.device_id, a.comm_family AS family, k.name, a.activity_id AS kernel_id, a.step_id,
       a.start_ns, a.dur_ns,
       row_number() OVER (PARTITION BY a.rank, a.device_id, a.comm_family, k.name
                          ORDER BY a.start_ns, a.activity_id) - 1 AS occurrence,
       count(*) OVER (PARTITION BY a.rank, a.device_id, a.comm_family, k.name) AS runs
FROM gpu_activity a JOIN kernels k ON k.rank = a.rank AND k.kernel_id = a.activity_id
WHERE a.kind = 'kernel' AND a.comm_family IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _rank_comm_names AS
SELECT family, name, count(DISTINCT (rank, device_id)) AS participants, min(runs) = max(runs) AS matched,
       min(runs) AS fewest, max(runs) AS most
FROM _rank_comm GROUP BY family, name HAVING count(DISTINCT (rank, device_id)) >= 2;

-- table collective_waits: one row per participant in a collective matched across participants: the n-th communication kernel of one family and name on each (rank, device_id), where at least two participants ran that (family, name), all equally often
--   rank: trace rank
--   device_id: GPU ordinal
--   family: gpu_activity.comm_family
--   name: kernels.name (the full name: the same on every rank)
--   occurrence: n: this is the participant's n-th kernel of that family and name, from 0 in start order
--   kernel_id: kernels.kernel_id
--   step_id: the step that launched it (steps.step_id); NULL outside every step
--   start_ns: kernel start on the participant's clock
--   dur_ns: kernel duration
--   participants: participants that ran this collective
--   min_dur_ns: the shortest duration of this collective over its participants: the transfer with no wait
--   wait_ns: dur_ns - min_dur_ns: how long this participant waited in it for the last to arrive
--     (duration-based, so offset clocks of separate files do not matter)
--   last_to_arrive: this participant has the shortest duration (ties: lowest rank, then device): the one the
--     others waited for; false for every participant where nobody waited
--   shared_clock: every participant comes from the same trace file, so their starts share one clock
--   arrival_lag_ns: shared clock only: the last participant's start minus this one's; NULL otherwise
CREATE OR REPLACE TABLE collective_waits AS
WITH matched AS (
    SELECT c.*, t.file
    FROM _rank_comm c
    JOIN _rank_comm_names n ON n.family = c.family AND n.name = c.name AND n.matched
    JOIN trace_info t ON t.rank = c.rank
),
per_collective AS (
    SELECT family, name, occurrence, count(*) AS participants, min(dur_ns) AS min_dur_ns,
           arg_min(struct_pack(rank := rank, device_id := device_id), (dur_ns, rank, device_id)) AS last,
           max(dur_ns) > min(dur_ns) AS waited,
           count(DISTINCT file) = 1 AS shared_clock, max(start_ns) AS last_start_ns
    FROM matched GROUP BY family, name, occurrence
)
SELECT m.rank, m.device_id, m.family, m.name, m.occurrence, m.kernel_id, m.step_id, m.start_ns, m.dur_ns,
       p.participants, p.min_dur_ns, m.dur_ns - p.min_dur_ns AS wait_ns,
       p.waited AND p.last.rank = m.rank AND p.last.device_id = m.device_id AS last_to_arrive, p.shared_clock,
       CASE WHEN p.shared_clock THEN p.last_start_ns - m.start_ns END AS arrival_lag_ns
FROM matched m JOIN per_collective p USING (family, name, occurrence)
ORDER BY m.family, m.name, m.occurrence, m.rank, m.device_id;

-- section: unmatched
-- Queries ranks.py reads: communication kernels that several participants ran unequally often cannot be paired
-- by order; and the rank the diagnostic about them goes to.
SELECT family, name, participants, fewest, most FROM _rank_comm_names WHERE NOT matched
ORDER BY most - fewest DESC, family, name;

-- section: diagnostic_rank
SELECT min(rank) FROM trace_info;

-- section: summaries
DROP TABLE _rank_comm;
DROP TABLE _rank_comm_names;

-- table collectives: one row per collective matched across participants (family, name, occurrence)
--   family: gpu_activity.comm_family
--   name: kernels.name
--   occurrence: collective_waits.occurrence
--   participants: participants that ran it
--   ranks: distinct ranks among them
--   min_dur_ns: shortest duration over the participants
--   max_dur_ns: longest duration over the participants
--   wait_ns: Σ collective_waits.wait_ns: time the participants spent waiting for the last to arrive
--   last_rank: rank of the participant that arrived last (collective_waits.last_to_arrive); NULL where nobody
--     waited
--   last_device_id: its GPU ordinal; NULL where nobody waited
--   shared_clock: every participant comes from the same trace file
--   start_skew_ns: shared clock only: latest start minus earliest start; NULL otherwise
CREATE OR REPLACE TABLE collectives AS
SELECT family, name, occurrence, count(*) AS participants, count(DISTINCT rank) AS ranks,
       min(dur_ns) AS min_dur_ns, max(dur_ns) AS max_dur_ns, sum(wait_ns)::BIGINT AS wait_ns,
       any_value(rank) FILTER (WHERE last_to_arrive) AS last_rank,
       any_value(device_id) FILTER (WHERE last_to_arrive) AS last_device_id,
       bool_and(shared_clock) AS shared_clock,
       CASE WHEN bool_and(shared_clock) THEN max(start_ns) - min(start_ns) END AS start_skew_ns
FROM collective_waits
GROUP BY family, name, occurrence
ORDER BY family, name, occurrence;

-- table rank_summary: one row per rank that ran any kernel or memop
--   rank: trace rank
--   devices: GPU ordinals it ran work on
--   span_ns: first start to last end of its GPU work, over its devices
--   busy_ns: length of the union of its kernels and memops over every device (rank_busy_islands)
--   busy_pct: 100 * busy_ns / span_ns
--   comm_ns: Σ device_activity.comm_ns over its devices; NULL when it ran no communication kernel
--   comm_exposed_ns: Σ device_activity.comm_exposed_ns; NULL when it ran no communication kernel
--   collectives: its participations in matched collectives (collective_waits rows)
--   wait_ns: Σ collective_waits.wait_ns: time it waited for other ranks; NULL when it took part in no matched
--     collective
--   last_arrivals: matched collectives in which it arrived last; NULL as wait_ns
--   caused_wait_ns: Σ collectives.wait_ns of the collectives in which it arrived last: the waiting it made the
--     others do; NULL as wait_ns
CREATE OR REPLACE TABLE rank_summary AS
WITH devices AS (
    SELECT rank, list(device_id ORDER BY device_id) AS devices, min(first_ns) AS first_ns,
           max(last_ns) AS last_ns, sum(comm_ns)::BIGINT AS comm_ns,
           sum(comm_exposed_ns)::BIGINT AS comm_exposed_ns
    FROM device_activity GROUP BY rank
),
busy AS (SELECT rank, sum(end_ns - start_ns)::BIGINT AS busy_ns FROM rank_busy_islands GROUP BY rank),
waits AS (
    SELECT rank, count(*) AS collectives, sum(wait_ns)::BIGINT AS wait_ns,
           count(*) FILTER (WHERE last_to_arrive) AS last_arrivals
    FROM collective_waits GROUP BY rank
),
caused AS (SELECT last_rank AS rank, sum(wait_ns)::BIGINT AS caused_wait_ns FROM collectives GROUP BY ALL)
SELECT d.rank, d.devices, d.last_ns - d.first_ns AS span_ns, b.busy_ns,
       100.0 * b.busy_ns / nullif(d.last_ns - d.first_ns, 0) AS busy_pct, d.comm_ns, d.comm_exposed_ns,
       coalesce(w.collectives, 0) AS collectives, w.wait_ns, w.last_arrivals,
       CASE WHEN w.rank IS NOT NULL THEN coalesce(c.caused_wait_ns, 0) END AS caused_wait_ns
FROM devices d
JOIN busy b USING (rank)
LEFT JOIN waits w USING (rank)
LEFT JOIN caused c USING (rank)
ORDER BY d.rank;

-- table rank_steps: one row per step of a rank, set beside the same step of the other ranks: the n-th step of the same phase
--   rank: trace rank
--   step_id: steps.step_id
--   phase: steps.phase
--   ordinal: n: the rank's n-th step of this phase, from 0 in time order
--   wall_ns: steps.end_ns - steps.start_ns
--   gpu_time_ns: steps.gpu_time_ns
--   wait_ns: Σ collective_waits.wait_ns of the collectives the step launched (0 when it launched none)
--   work_ns: gpu_time_ns - wait_ns: the GPU time the step needed for its own work
--   ranks: ranks that have this (phase, ordinal)
--   slowest_rank: the rank with the most work_ns at this (phase, ordinal) (ties: lowest rank); NULL when only
--     one rank has it
--   skew_ns: most minus least work_ns over those ranks; NULL when only one rank has it
--   wall_skew_ns: longest minus shortest wall_ns over those ranks; NULL when only one rank has it
CREATE OR REPLACE TABLE rank_steps AS
WITH waits AS (
    SELECT rank, step_id, sum(wait_ns)::BIGINT AS wait_ns FROM collective_waits
    WHERE step_id IS NOT NULL GROUP BY rank, step_id
),
per_step AS (
    SELECT s.rank, s.step_id, s.phase,
           row_number() OVER (PARTITION BY s.rank, s.phase ORDER BY s.step_id) - 1 AS ordinal,
           s.end_ns - s.start_ns AS wall_ns, s.gpu_time_ns, coalesce(w.wait_ns, 0) AS wait_ns
    FROM steps s LEFT JOIN waits w ON w.rank = s.rank AND w.step_id = s.step_id
),
worked AS (SELECT *, gpu_time_ns - wait_ns AS work_ns FROM per_step),
across AS (
    SELECT phase, ordinal, count(*) AS ranks, arg_max(rank, (work_ns, -rank)) AS slowest_rank,
           max(work_ns) - min(work_ns) AS skew_ns, max(wall_ns) - min(wall_ns) AS wall_skew_ns
    FROM worked GROUP BY phase, ordinal
)
SELECT w.rank, w.step_id, w.phase, w.ordinal, w.wall_ns, w.gpu_time_ns, w.wait_ns, w.work_ns, a.ranks,
       CASE WHEN a.ranks > 1 THEN a.slowest_rank END AS slowest_rank,
       CASE WHEN a.ranks > 1 THEN a.skew_ns END AS skew_ns,
       CASE WHEN a.ranks > 1 THEN a.wall_skew_ns END AS wall_skew_ns
FROM worked w JOIN across a USING (phase, ordinal)
ORDER BY w.rank, w.step_id;
