"""Ranks side by side: the same collective on every rank, who waited in it for whom, and stragglers per step.

In a collective every participant spins until the last one arrives, so a rank that reaches it early
shows a longer communication kernel, and a data-parallel job runs at the pace of its slowest rank.
The n-th communication kernel of one family and name on each participant (a (rank, device) pair) is
one collective: the schema keeps no NCCL sequence number, so order of occurrence is the match, and a
(family, name) is matched only where every participant that ran it ran it equally often (otherwise
the order cannot be trusted, and an `unmatched_collectives` diagnostic says which were left out).

Separate per-rank files may be on clocks that are offset from each other, so the wait is measured by
duration: a participant's duration minus the shortest duration of that collective, which is the
transfer itself with no waiting (this assumes the transfer takes equally long everywhere; an
asymmetric collective - a broadcast root, a pipeline send - shows its asymmetry as wait). Start
skew, which needs one clock, is given only where every participant comes from the same trace file.
"""

from __future__ import annotations

import duckdb

from traceview.analysis.stage import Relation, Stage
from traceview.model import db

PARTICIPANT = "a (rank, device_id) that ran the collective"

TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "collective_waits": (
        "participant in a collective matched across participants: the n-th communication kernel of one family and "
        "name on each (rank, device_id), where at least two participants ran that (family, name), all equally often",
        {
            "rank": "trace rank",
            "device_id": "GPU ordinal",
            "family": "gpu_activity.comm_family",
            "name": "kernels.name (the full name: the same on every rank)",
            "occurrence": "n: this is the participant's n-th kernel of that family and name, from 0 in start order",
            "kernel_id": "kernels.kernel_id",
            "step_id": "the step that launched it (steps.step_id); NULL outside every step",
            "start_ns": "kernel start on the participant's clock",
            "dur_ns": "kernel duration",
            "participants": "participants that ran this collective",
            "min_dur_ns": "the shortest duration of this collective over its participants: the transfer with no wait",
            "wait_ns": "dur_ns - min_dur_ns: how long this participant waited in it for the last to arrive "
                       "(duration-based, so offset clocks of separate files do not matter)",
            "last_to_arrive": "this participant has the shortest duration (ties: lowest rank, then device): the one "
                              "the others waited for; false for every participant where nobody waited",
            "shared_clock": "every participant comes from the same trace file, so their starts share one clock",
            "arrival_lag_ns": "shared clock only: the last participant's start minus this one's; NULL otherwise",
        },
    ),
    "collectives": (
        "collective matched across participants (family, name, occurrence)",
        {
            "family": "gpu_activity.comm_family",
            "name": "kernels.name",
            "occurrence": "collective_waits.occurrence",
            "participants": "participants that ran it",
            "ranks": "distinct ranks among them",
            "min_dur_ns": "shortest duration over the participants",
            "max_dur_ns": "longest duration over the participants",
            "wait_ns": "Σ collective_waits.wait_ns: time the participants spent waiting for the last to arrive",
            "last_rank": "rank of the participant that arrived last (collective_waits.last_to_arrive); NULL where "
                         "nobody waited",
            "last_device_id": "its GPU ordinal; NULL where nobody waited",
            "shared_clock": "every participant comes from the same trace file",
            "start_skew_ns": "shared clock only: latest start minus earliest start; NULL otherwise",
        },
    ),
    "rank_summary": (
        "rank that ran any kernel or memop",
        {
            "rank": "trace rank",
            "devices": "GPU ordinals it ran work on",
            "span_ns": "first start to last end of its GPU work, over its devices",
            "busy_ns": "length of the union of its kernels and memops over every device (rank_busy_islands)",
            "busy_pct": "100 * busy_ns / span_ns",
            "comm_ns": "Σ device_activity.comm_ns over its devices; NULL when it ran no communication kernel",
            "comm_exposed_ns": "Σ device_activity.comm_exposed_ns; NULL when it ran no communication kernel",
            "collectives": "its participations in matched collectives (collective_waits rows)",
            "wait_ns": "Σ collective_waits.wait_ns: time it waited for other ranks; NULL when it took part in no "
                       "matched collective",
            "last_arrivals": "matched collectives in which it arrived last; NULL as wait_ns",
            "caused_wait_ns": "Σ collectives.wait_ns of the collectives in which it arrived last: the waiting it "
                              "made the others do; NULL as wait_ns",
        },
    ),
    "rank_steps": (
        "step of a rank, set beside the same step of the other ranks: the n-th step of the same phase",
        {
            "rank": "trace rank",
            "step_id": "steps.step_id",
            "phase": "steps.phase",
            "ordinal": "n: the rank's n-th step of this phase, from 0 in time order",
            "wall_ns": "steps.end_ns - steps.start_ns",
            "gpu_time_ns": "steps.gpu_time_ns",
            "wait_ns": "Σ collective_waits.wait_ns of the collectives the step launched (0 when it launched none)",
            "work_ns": "gpu_time_ns - wait_ns: the GPU time the step needed for its own work",
            "ranks": "ranks that have this (phase, ordinal)",
            "slowest_rank": "the rank with the most work_ns at this (phase, ordinal) (ties: lowest rank); NULL when "
                            "only one rank has it",
            "skew_ns": "most minus least work_ns over those ranks; NULL when only one rank has it",
            "wall_skew_ns": "longest minus shortest wall_ns over those ranks; NULL when only one rank has it",
        },
    ),
}

STAGE = Stage(
    name="ranks",
    doc="Ranks side by side: communication kernels matched across ranks and devices as collectives (the n-th of "
        "one family and name), how long each participant waited in each for the last to arrive (duration-based, "
        "so offset clocks do not matter; start skew only within one trace file), a summary per rank, and the "
        "n-th step of each phase across ranks with its slowest rank; rule TV402 reads these.",
    requires=("gpu_activity", "kernels", "steps", "trace_info", "device_activity", "rank_busy_islands"),
    creates=tuple(Relation(name, row, columns) for name, (row, columns) in TABLES.items()),
    run=lambda con, context: build_ranks(con),
)


def build_ranks(con: duckdb.DuckDBPyConnection) -> None:
    """Create every relation in TABLES."""
    _build_collective_waits(con)
    _build_collectives(con)
    _build_rank_summary(con)
    _build_rank_steps(con)


def _build_collective_waits(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _rank_comm AS
        SELECT a.rank, a.device_id, a.comm_family AS family, k.name, a.activity_id AS kernel_id, a.step_id,
               a.start_ns, a.dur_ns,
               row_number() OVER (PARTITION BY a.rank, a.device_id, a.comm_family, k.name
                                  ORDER BY a.start_ns, a.activity_id) - 1 AS occurrence,
               count(*) OVER (PARTITION BY a.rank, a.device_id, a.comm_family, k.name) AS runs
        FROM gpu_activity a JOIN kernels k ON k.rank = a.rank AND k.kernel_id = a.activity_id
        WHERE a.kind = 'kernel' AND a.comm_family IS NOT NULL
    """)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _rank_comm_names AS
        SELECT family, name, count(DISTINCT (rank, device_id)) AS participants, min(runs) = max(runs) AS matched,
               min(runs) AS fewest, max(runs) AS most
        FROM _rank_comm GROUP BY family, name HAVING count(DISTINCT (rank, device_id)) >= 2
    """)
    con.execute("""
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
        ORDER BY m.family, m.name, m.occurrence, m.rank, m.device_id
    """)
    _say_unmatched(con)
    con.execute("DROP TABLE _rank_comm")
    con.execute("DROP TABLE _rank_comm_names")


def _say_unmatched(con: duckdb.DuckDBPyConnection) -> None:
    """Communication kernels that several participants ran unequally often cannot be paired by order."""
    rows = con.execute("""
        SELECT family, name, participants, fewest, most FROM _rank_comm_names WHERE NOT matched
        ORDER BY most - fewest DESC, family, name
    """).fetchall()
    if not rows:
        return
    listed = "; ".join(f"{family} {name[:60]} ({participants} participants, {fewest} to {most} runs)"
                       for family, name, participants, fewest, most in rows[:3])
    more = f"; and {len(rows) - 3} more" if len(rows) > 3 else ""
    rank = con.execute("SELECT min(rank) FROM trace_info").fetchall()[0][0]
    db.add_diagnostic(con, rank, "analysis", "info", "unmatched_collectives",
                      f"{len(rows)} communication kernel name{'' if len(rows) == 1 else 's'} ran on several ranks "
                      "or devices but not equally often, so their n-th runs cannot be paired and no wait is measured "
                      f"for them: {listed}{more}")


def _build_collectives(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
        CREATE OR REPLACE TABLE collectives AS
        SELECT family, name, occurrence, count(*) AS participants, count(DISTINCT rank) AS ranks,
               min(dur_ns) AS min_dur_ns, max(dur_ns) AS max_dur_ns, sum(wait_ns)::BIGINT AS wait_ns,
               any_value(rank) FILTER (WHERE last_to_arrive) AS last_rank,
               any_value(device_id) FILTER (WHERE last_to_arrive) AS last_device_id,
               bool_and(shared_clock) AS shared_clock,
               CASE WHEN bool_and(shared_clock) THEN max(start_ns) - min(start_ns) END AS start_skew_ns
        FROM collective_waits
        GROUP BY family, name, occurrence
        ORDER BY family, name, occurrence
    """)


def _build_rank_summary(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
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
        ORDER BY d.rank
    """)


def _build_rank_steps(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
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
        ORDER BY w.rank, w.step_id
    """)
