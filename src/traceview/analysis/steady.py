"""Steady state: which steps are one-time work (initialisation, warm-up) and which repeat.

A profile that starts the process captures the first iteration: CUDA modules load lazily at the first
launch of each kernel, the caching allocator grows with cudaMalloc, CUDA graphs are captured and
instantiated, and distributed jobs broadcast their initial state once. None of that recurs, so a finding
priced on such a step prices a cold iteration. This stage finds that work (`init_windows`), says per step
whether it is steady, warm-up or initialisation and why (`step_states`), and per rank whether the capture
holds a steady state at all (`steady_state`).

One-time host work is recognised by API family (driver, runtime and HIP names alike), not by a list of
names one trace showed; a one-time collective by structure: a communication kernel whose name never
recurs after the rank's first step. Steps are compared only with later steps of the same phase (a
prefill step is not slow next to decode steps).
"""

from __future__ import annotations

import duckdb

from traceview.analysis.intervals import busy_time_sql
from traceview.analysis.stage import Relation, Stage

# One-time host API families (RE2, matched on api_calls.name, which keeps driver suffixes such as _v2).
INIT_FAMILIES: tuple[tuple[str, str], ...] = (
    # lazy module loading (CUDA_MODULE_LOADING=LAZY loads at a kernel's first launch), JIT linking
    ("module_load", r"^(cu|hip)(Module|Library)Load\w*$|^(cu|hip)Link(Create|AddData|AddFile|Complete)\w*$"),
    # stream capture into a graph, and making the graph executable
    ("graph_capture", r"^(cuda|cu|hip)(StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphUpload)\w*$"),
    # allocator growth: device, managed and pinned host allocations, virtual memory mapping
    ("allocation", r"^(cuda|hip)(Ext)?Malloc\w*$|^(cuda|hip)HostAlloc$|^hipHostMalloc$|^cuMem(Alloc\w*|HostAlloc\w*)$"
                   r"|^(cu|hip)Mem(Create|Map|SetAccess|AddressReserve)\w*$"),
    # driver and context initialisation
    ("context", r"^(cu|hip)(Init|CtxCreate\w*|DevicePrimaryCtxRetain(_v[0-9]+)?)$"),
)
BEGIN_CAPTURE = r"StreamBeginCapture"
END_CAPTURE = r"StreamEndCapture"

# a step is initialisation when its one-time work covers at least this share of its wall time; allocations
# count only where they are more than INIT_ABOVE_OTHERS times the median of the other steps of the phase
INIT_SHARE = 0.10
INIT_ABOVE_OTHERS = 2.0
# a leading step is warm-up when it is this many times slower than the median of the later steps of its phase
WARMUP_SLOWDOWN = 1.5
# steady steps of the dominant phase a rank needs before its profile has a steady state
MIN_STEADY_STEPS = 3

INIT_WINDOW_COLUMNS = {
    "rank": "trace rank",
    "step_id": "the step whose window holds it (steps.step_id: a host call by its start within the step's host "
               "window, a kernel by its launch); NULL outside every step",
    "kind": "module_load (cuModuleLoad*, cuLibraryLoad*, hipModuleLoad*, cuLink*), graph_capture (a stream "
            "capture from its Begin to its EndCapture call, cudaGraphInstantiate*, GraphUpload), allocation "
            "(cudaMalloc*, cuMemAlloc*, cuMemCreate/Map/SetAccess/AddressReserve, pinned host allocations, the "
            "hip equivalents), context (cuInit, cuCtxCreate, primary context retain), collective (a "
            "communication kernel that does not recur: its name runs only in the first of several steps of a phase, "
            "before the rank's first step, or, a broadcast, before the rank's first non-communication kernel)",
    "name": "the API call's name ('<Begin>..<EndCapture>' for a capture, e.g. "
            "'cudaStreamBeginCapture..cudaStreamEndCapture'), or the kernel's short name",
    "side": "'host' (an API call) or 'gpu' (a collective kernel)",
    "pid": "process",
    "tid": "calling thread; for a kernel, the thread that launched it (NULL when unknown)",
    "start_ns": "start",
    "end_ns": "end",
    "dur_ns": "end_ns - start_ns",
}

STEP_STATE_COLUMNS = {
    "rank": "trace rank",
    "step_id": "steps.step_id",
    "phase": "steps.phase",
    "state": "'init' (one-time work covers at least 10% of the step's wall, allocations counted only above twice "
             "the median of the other steps of its phase; or it runs a one-time collective), 'warmup' (not init, "
             "before every steady step "
             "of its phase, and at least 1.5x slower than the median of the later steps of its phase) or "
             "'steady'",
    "reason": "what made it so, with the numbers: the one-time work by call family, or the slowdown against the "
              "later steps of the phase",
    "wall_ns": "steps.end_ns - steps.start_ns",
    "init_ns": "length of the union of the init_windows inside the step, clipped to it; NULL when the rank has "
               "no API calls (one-time host work cannot be seen)",
    "slowdown": "the step's pace over the median pace of the later steps of its phase (pace: wall time, per new "
                "token for prefill and mixed steps whose token counts are known); NULL for the phase's last step",
    "later_steps": "later steps of the same phase on the rank",
}

STEADY_STATE_COLUMNS = {
    "rank": "trace rank",
    "steps": "steps of the rank",
    "init_steps": "steps whose state is 'init'",
    "warmup_steps": "steps whose state is 'warmup'",
    "steady_steps": "steps whose state is 'steady'",
    "dominant_phase": "the phase with the most step wall time (steps with no GPU work count only when no other "
                      "phase has any)",
    "dominant_steps": "steps of the dominant phase",
    "dominant_steady_steps": "steady steps of the dominant phase",
    "first_steady_step": "step_id of the first steady step; NULL when none",
    "last_steady_step": "step_id of the last steady step",
    "steady_start_ns": "start of the first steady step",
    "steady_end_ns": "end of the last steady step",
    "non_steady_ns": "Σ wall of the init and warm-up steps",
    "step_wall_ns": "Σ wall of every step",
    "step_init_ns": "Σ step_states.init_ns: one-time work inside steps",
    "outside_init_ns": "one-time work outside every step (before the first step, between gap-based steps, a "
                       "capture running past its step): init_ns less the union of the init windows clipped to their "
                       "steps; NULL when the rank has no API calls and no one-time collective",
    "init_ns": "length of the union of every init window of the rank, inside steps or not; NULL when the rank "
               "has no API calls and no one-time collective",
    "init_summary": "the rank's one-time work by family and name, largest first, e.g. "
                    "'cuLibraryLoadData 1,132 calls 1595.6 ms'; NULL when none",
    "verdict": "'no_steady_state' when the dominant phase has fewer than 3 steady steps; 'init_dominated' when it "
               "has them but the init and warm-up steps plus the one-time work outside steps last at least as long "
               "as the steady steps; else 'steady'",
    "more_steps_needed": "steady steps of the dominant phase still missing for a steady state: 3 - "
                         "dominant_steady_steps (0 when steady). Profile that many more iterations past warm-up",
}

STAGE = Stage(
    name="steady",
    doc="One-time work (module loading, graph capture, allocator growth, context creation, collectives that "
        "never recur), each step's state (steady, warm-up, initialisation) with the reason, and per rank "
        "whether the capture holds a steady state; findings are priced on steady steps only "
        "(rules/engine.py reads step_states) and TV104 says when there are none.",
    requires=("steps", "kernels", "api_calls", "gpu_activity"),
    creates=(Relation("init_windows", "piece of one-time work: a host API call (a stream capture from begin to end) "
                      "or a one-time collective kernel", INIT_WINDOW_COLUMNS),
             Relation("step_states", "step", STEP_STATE_COLUMNS),
             Relation("steady_state", "rank with steps", STEADY_STATE_COLUMNS)),
    run=lambda con, context: build_steady_state(con),
)


def build_steady_state(con: duckdb.DuckDBPyConnection) -> None:
    _build_init_windows(con)
    _build_step_states(con)
    _build_steady_state(con)


def _family_sql() -> tuple[str, dict[str, str]]:
    arms = " ".join(f"WHEN regexp_matches(name, $family_{kind}) THEN '{kind}'" for kind, _ in INIT_FAMILIES)
    return f"CASE {arms} END", {f"family_{kind}": pattern for kind, pattern in INIT_FAMILIES}


def _build_init_windows(con: duckdb.DuckDBPyConnection) -> None:
    family, params = _family_sql()
    con.execute(
        f"""
        CREATE OR REPLACE TABLE init_windows AS
        WITH families AS (  -- the regexes run once per distinct API name
            SELECT name, {family} AS kind FROM (SELECT DISTINCT name FROM api_calls)
        ),
        calls AS (
            SELECT a.rank, a.pid, a.tid, a.name, f.kind, a.start_ns, a.end_ns
            FROM api_calls a JOIN families f USING (name) WHERE f.kind IS NOT NULL
        ),
        capture_ends AS (SELECT * FROM calls WHERE regexp_matches(name, $end_capture)),
        host AS (
            -- a capture lasts from its BeginCapture call to the thread's next EndCapture call
            SELECT b.rank, b.pid, b.tid, b.name || coalesce('..' || e.name, '') AS name, b.kind, b.start_ns,
                   CASE WHEN e.end_ns IS NULL OR e.end_ns < b.end_ns THEN b.end_ns ELSE e.end_ns END AS end_ns
            FROM (SELECT * FROM calls WHERE regexp_matches(name, $begin_capture)) b
            ASOF LEFT JOIN capture_ends e ON e.rank = b.rank AND e.pid = b.pid AND e.tid = b.tid AND e.start_ns >= b.start_ns
            UNION ALL
            SELECT rank, pid, tid, name, kind, start_ns, end_ns FROM calls
            WHERE NOT regexp_matches(name, $begin_capture) AND NOT regexp_matches(name, $end_capture)
            UNION ALL  -- an EndCapture with no BeginCapture before it on its thread (capture began before the trace)
            SELECT e.rank, e.pid, e.tid, e.name, e.kind, e.start_ns, e.end_ns FROM capture_ends e
            WHERE NOT EXISTS (SELECT 1 FROM calls b WHERE regexp_matches(b.name, $begin_capture) AND b.rank = e.rank
                              AND b.pid = e.pid AND b.tid = e.tid AND b.start_ns <= e.start_ns)
        ),
        host_steps AS (
            SELECT h.*, s.step_id
            FROM host h ASOF LEFT JOIN (SELECT rank, step_id, cpu_start_ns, cpu_end_ns FROM steps) s
              ON s.rank = h.rank AND h.start_ns >= s.cpu_start_ns
        ),
        phase_steps AS (  -- each step with work: whether it is the first of several of its phase on the rank
            SELECT rank, step_id, step_id = min(step_id) OVER w AND count(*) OVER w > 1 AS first_of_several
            FROM steps WHERE kernels > 0
            WINDOW w AS (PARTITION BY rank, phase)
        ),
        comm AS (
            SELECT g.rank, g.pid, k.tid, g.step_id, g.start_ns, g.end_ns, g.comm_family, k.name,
                   coalesce(k.short_name, k.name) AS label
            FROM gpu_activity g JOIN kernels k ON k.rank = g.rank AND k.kernel_id = g.activity_id
            WHERE g.kind = 'kernel' AND g.comm_family IS NOT NULL
        ),
        first_compute AS (
            SELECT rank, min(start_ns) AS start_ns FROM gpu_activity
            WHERE kind = 'kernel' AND comm_family IS NULL GROUP BY rank
        ),
        one_time_names AS (
            SELECT c.rank, c.name
            FROM comm c
            LEFT JOIN phase_steps w USING (rank, step_id)
            LEFT JOIN (SELECT rank, min(start_ns) AS start_ns FROM steps GROUP BY rank) s USING (rank)
            LEFT JOIN first_compute f USING (rank)
            GROUP BY c.rank, c.name
            -- every occurrence is one-time (a missing step or compute kernel satisfies no condition)
            HAVING bool_and(coalesce((c.step_id IS NULL AND c.end_ns <= s.start_ns)
                                     OR w.first_of_several
                                     OR (c.comm_family = 'broadcast' AND c.end_ns <= f.start_ns), FALSE))
        )
        SELECT rank, step_id, kind, name, side, pid, tid, start_ns, end_ns, end_ns - start_ns AS dur_ns
        FROM (
            SELECT h.rank, CASE WHEN h.start_ns < s.cpu_end_ns THEN h.step_id END AS step_id, h.kind, h.name,
                   'host' AS side, h.pid, h.tid, h.start_ns, h.end_ns
            FROM host_steps h LEFT JOIN steps s ON s.rank = h.rank AND s.step_id = h.step_id
            UNION ALL
            SELECT c.rank, c.step_id, 'collective', c.label, 'gpu', c.pid, c.tid, c.start_ns, c.end_ns
            FROM comm c JOIN one_time_names o USING (rank, name)
        )
        ORDER BY rank, start_ns, kind
        """,
        {**params, "begin_capture": BEGIN_CAPTURE, "end_capture": END_CAPTURE},
    )


def _top_work_sql(source: str, keys: tuple[str, ...]) -> str:
    """SELECT (keys..., summary): the one-time work of `source` (init_windows rows) by kind and name, the four
    largest by union time, e.g. '3 cuModuleLoadData calls 62.0 ms, 1 one-time ncclKernel_Broadcast kernel 162.0 ms'."""
    key_list = ", ".join(keys)
    by_name = (*keys, "kind", "name")
    return f"""
        SELECT {key_list},
               string_agg(printf('%d %s %s %.1f ms', n, CASE WHEN kind = 'collective' THEN 'one-time ' || name ELSE name END,
                                 CASE WHEN kind = 'collective' THEN 'kernel' WHEN name LIKE '%..%' THEN 'capture'
                                      ELSE 'call' END || CASE WHEN n = 1 THEN '' ELSE 's' END, busy_ns / 1e6), ', '
                          ORDER BY busy_ns DESC, name) FILTER (WHERE place <= 4)
               || CASE WHEN count(*) > 4 THEN printf(' and %d more', count(*) - 4) ELSE '' END AS summary
        FROM (
            SELECT u.*, c.n, row_number() OVER (PARTITION BY {", ".join(f"u.{k}" for k in keys)}
                                                ORDER BY u.busy_ns DESC, u.name) AS place
            FROM ({busy_time_sql(f"SELECT {', '.join(by_name)}, start_ns, end_ns FROM ({source})", by_name)}) u
            JOIN (SELECT {", ".join(by_name)}, count(*) AS n FROM ({source}) GROUP BY ALL) c USING ({", ".join(by_name)})
        )
        GROUP BY {key_list}
    """


# init windows inside their step, clipped to it
CLIPPED_INIT = """
    SELECT w.rank, w.step_id, w.kind, w.name,
           CASE WHEN w.start_ns < s.start_ns THEN s.start_ns ELSE w.start_ns END AS start_ns,
           CASE WHEN w.end_ns > s.end_ns THEN s.end_ns ELSE w.end_ns END AS end_ns
    FROM init_windows w JOIN steps s USING (rank, step_id)
"""


def _build_step_states(con: duckdb.DuckDBPyConnection) -> None:
    clipped = CLIPPED_INIT
    con.execute(
        f"""
        CREATE OR REPLACE TABLE step_states AS
        WITH step_init AS ({busy_time_sql(f"SELECT rank, step_id, start_ns, end_ns FROM ({clipped})", ("rank", "step_id"))}),
        step_alloc AS ({busy_time_sql(f"SELECT rank, step_id, start_ns, end_ns FROM ({clipped}) WHERE kind = 'allocation'",
                                      ("rank", "step_id"))}),
        step_inherent AS ({busy_time_sql(f"SELECT rank, step_id, start_ns, end_ns FROM ({clipped}) WHERE kind <> 'allocation'",
                                         ("rank", "step_id"))}),
        step_work AS ({_top_work_sql(clipped, ("rank", "step_id"))}),
        collectives AS (SELECT DISTINCT rank, step_id FROM init_windows WHERE kind = 'collective' AND step_id IS NOT NULL),
        with_calls AS (SELECT DISTINCT rank FROM api_calls),
        paced AS (
            SELECT s.rank, s.step_id, s.phase, s.end_ns - s.start_ns AS wall_ns,
                   -- a rank with API calls and no one-time call in the step did none there: a measured zero
                   CASE WHEN c.rank IS NOT NULL THEN coalesce(i.busy_ns, 0) END AS init_ns,
                   coalesce(a.busy_ns, 0) AS alloc_ns, coalesce(h.busy_ns, 0) AS inherent_ns,
                   o.rank IS NOT NULL AS one_time_collective, w.summary,
                   CASE WHEN s.phase IN ('prefill', 'mixed') AND s.prefill_tokens + s.decode_tokens > 0
                        THEN (s.end_ns - s.start_ns) / (s.prefill_tokens + s.decode_tokens)
                        ELSE s.end_ns - s.start_ns END::DOUBLE AS pace,
                   CASE WHEN s.phase IN ('prefill', 'mixed') AND s.prefill_tokens + s.decode_tokens > 0
                        THEN 'time per token' ELSE 'wall' END AS pace_basis
            FROM steps s
            LEFT JOIN step_init i USING (rank, step_id)
            LEFT JOIN step_alloc a USING (rank, step_id)
            LEFT JOIN step_inherent h USING (rank, step_id)
            LEFT JOIN step_work w USING (rank, step_id)
            LEFT JOIN collectives o USING (rank, step_id)
            LEFT JOIN with_calls c USING (rank)
        ),
        compared AS (
            SELECT *, count(*) OVER later AS later_steps, count(*) OVER (PARTITION BY rank, phase) AS phase_steps,
                   median(pace) OVER later AS later_pace,
                   median(alloc_ns) OVER others AS others_alloc
            FROM paced
            WINDOW later AS (PARTITION BY rank, phase ORDER BY step_id ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING),
                   others AS (PARTITION BY rank, phase ORDER BY step_id
                              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING EXCLUDE CURRENT ROW)
        ),
        flagged AS (
            SELECT *, CASE WHEN later_pace > 0 THEN pace / later_pace END AS slowdown,
                   CASE WHEN phase = 'unknown' THEN '' ELSE phase || ' ' END AS phase_word,
                   -- module loads, captures, context creation and one-time collectives never recur, so they
                   -- count wherever they are; allocations count only above what the later steps allocate (an
                   -- allocator without a cache, or cudaMallocAsync from a pool, allocates every step)
                   one_time_collective
                   OR inherent_ns + CASE WHEN others_alloc IS NULL OR alloc_ns > $init_above * others_alloc
                                         THEN alloc_ns ELSE 0 END >= $init_share * wall_ns AND init_ns > 0 AS is_init,
                   coalesce(later_pace > 0 AND pace >= $slowdown * later_pace, FALSE) AS is_slow
            FROM compared
        ),
        led AS (
            SELECT *, min(step_id) FILTER (WHERE NOT is_init AND NOT is_slow)
                          OVER (PARTITION BY rank, phase) AS first_steady,
                   printf('%d later %sstep%s', later_steps, phase_word, CASE WHEN later_steps = 1 THEN '' ELSE 's' END) AS later,
                   CASE WHEN phase_steps = 1 THEN printf('the only %sstep: nothing to compare it with', phase_word)
                        ELSE printf('the last %sstep: no later one to compare it with', phase_word) END AS unmatched
            FROM flagged
        )
        SELECT rank, step_id, phase,
               CASE WHEN is_init THEN 'init'
                    WHEN is_slow AND (first_steady IS NULL OR step_id < first_steady) THEN 'warmup'
                    ELSE 'steady' END AS state,
               CASE WHEN is_init THEN summary || printf('; one-time work %.1f ms of the step''s %.1f ms wall',
                                                        init_ns / 1e6, wall_ns / 1e6)
                    WHEN later_steps = 0 THEN unmatched
                    WHEN is_slow AND (first_steady IS NULL OR step_id < first_steady)
                        THEN printf('%s %.1fx the median of %s', pace_basis, slowdown, later)
                    WHEN is_slow THEN printf('%s %.1fx the median of %s, after steady ones: a slow step, not warm-up',
                                             pace_basis, slowdown, later)
                    ELSE printf('%s %.2fx the median of %s', pace_basis, slowdown, later)
               END AS reason,
               wall_ns, init_ns, slowdown, later_steps
        FROM led
        ORDER BY rank, step_id
        """,
        {"init_share": INIT_SHARE, "init_above": INIT_ABOVE_OTHERS, "slowdown": WARMUP_SLOWDOWN},
    )


def _build_steady_state(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"""
        CREATE OR REPLACE TABLE steady_state AS
        WITH st AS (SELECT t.*, s.start_ns, s.end_ns, s.kernels FROM step_states t JOIN steps s USING (rank, step_id)),
        phases AS (
            SELECT rank, phase, count(*) AS steps, count(*) FILTER (WHERE state = 'steady') AS steady,
                   row_number() OVER (PARTITION BY rank ORDER BY bool_and(kernels = 0), sum(wall_ns) DESC, phase) AS place
            FROM st GROUP BY rank, phase
        ),
        rank_init AS ({busy_time_sql("SELECT rank, start_ns, end_ns FROM init_windows", ("rank",))}),
        inside_init AS ({busy_time_sql(f"SELECT rank, start_ns, end_ns FROM ({CLIPPED_INIT})", ("rank",))}),
        rank_work AS ({_top_work_sql("SELECT * FROM init_windows", ("rank",))}),
        per_rank AS (
            SELECT rank, count(*) AS steps,
                   count(*) FILTER (WHERE state = 'init') AS init_steps,
                   count(*) FILTER (WHERE state = 'warmup') AS warmup_steps,
                   count(*) FILTER (WHERE state = 'steady') AS steady_steps,
                   min(step_id) FILTER (WHERE state = 'steady') AS first_steady_step,
                   max(step_id) FILTER (WHERE state = 'steady') AS last_steady_step,
                   min(start_ns) FILTER (WHERE state = 'steady') AS steady_start_ns,
                   max(end_ns) FILTER (WHERE state = 'steady') AS steady_end_ns,
                   coalesce(sum(wall_ns) FILTER (WHERE state <> 'steady'), 0)::BIGINT AS non_steady_ns,
                   sum(wall_ns)::BIGINT AS step_wall_ns, sum(init_ns)::BIGINT AS step_init_ns
            FROM st GROUP BY rank
        ),
        judged AS (
            SELECT r.*, p.phase, p.steps AS phase_steps, p.steady, c.rank IS NOT NULL AS has_calls,
                   i.busy_ns AS all_init_ns, w.summary,
                   -- one-time work outside the steps: all of it less the part inside them
                   CASE WHEN c.rank IS NOT NULL OR i.rank IS NOT NULL
                        THEN coalesce(i.busy_ns, 0) - coalesce(o.busy_ns, 0) END AS outside_ns
            FROM per_rank r
            JOIN phases p ON p.rank = r.rank AND p.place = 1
            LEFT JOIN rank_init i ON i.rank = r.rank
            LEFT JOIN inside_init o ON o.rank = r.rank
            LEFT JOIN rank_work w ON w.rank = r.rank
            LEFT JOIN (SELECT DISTINCT rank FROM api_calls) c ON c.rank = r.rank
        )
        SELECT rank, steps, init_steps, warmup_steps, steady_steps,
               phase AS dominant_phase, phase_steps AS dominant_steps, steady AS dominant_steady_steps,
               first_steady_step, last_steady_step, steady_start_ns, steady_end_ns,
               non_steady_ns, step_wall_ns, step_init_ns, outside_ns AS outside_init_ns,
               -- a rank with API calls whose calls hold no one-time work did none: a measured zero
               CASE WHEN has_calls THEN coalesce(all_init_ns, 0) ELSE all_init_ns END::BIGINT AS init_ns,
               summary AS init_summary,
               CASE WHEN steady < {MIN_STEADY_STEPS} THEN 'no_steady_state'
                    -- one-time work outside steps that the trace cannot show (no API calls) weighs nothing here
                    WHEN non_steady_ns + coalesce(outside_ns, 0) >= step_wall_ns - non_steady_ns THEN 'init_dominated'
                    ELSE 'steady' END AS verdict,
               CASE WHEN steady >= {MIN_STEADY_STEPS} THEN 0 ELSE {MIN_STEADY_STEPS} - steady END AS more_steps_needed
        FROM judged
        ORDER BY rank
        """
    )
