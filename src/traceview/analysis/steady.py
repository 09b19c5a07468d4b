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
prefill step is not slow next to decode steps). The SQL of init_windows is analysis/sql/steady.sql, which also
documents step_states and steady_state; those two take unions per key through intervals.py, so they are
composed here.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module
from traceview.analysis.intervals import busy_time_sql
from traceview.model import db

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
# One-time host work seen as ranges (RE2 on the names of NVTX ranges, user annotations, CPU ops and Python frames).
INIT_RANGE_FAMILIES: tuple[tuple[str, str], ...] = (
    # JIT compilation and autotuning: a verb, so a compiled region running ("Torch-Compiled Region",
    # CompiledFunction) is not one, nor generated code running (fbgemm's *_codegen_* ops), nor asking the compiler
    # (is_compiling, triton's compiler.py helpers)
    ("compilation", r"(?i)compile([^dr]|$)|autotun|nvrtc"),
    # creating communicators: NCCL/RCCL comm init, torch.distributed process groups
    ("comm_init", r"(?i)^[nr]ccl(Comm)?Init|CommInit(Rank|All)|CommSplit|init_process_group|new_group"),
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

MODULE = sql_module.load("steady")

STAGE = MODULE.stage(run=lambda con, context: build_steady_state(con))


def build_steady_state(con: duckdb.DuckDBPyConnection) -> None:
    MODULE.run(con, "", begin_capture=BEGIN_CAPTURE, end_capture=END_CAPTURE,
               **{f"family_{kind}": pattern for kind, pattern in INIT_FAMILIES + INIT_RANGE_FAMILIES})
    _build_step_states(con)
    _build_steady_state(con)
    MODULE.run(con, "done")


def _top_work_sql(source_sql: str, keys: tuple[str, ...]) -> str:
    """SELECT (keys..., summary): the one-time work of `source` (init_windows rows) by kind and name, the four
    largest by union time, e.g. '3 cuModuleLoadData calls 62.0 ms, 1 one-time ncclKernel_Broadcast kernel 162.0 ms'."""
    key_list_sql = db.idents(keys)
    by_name = (*keys, "kind", "name")
    by_name_sql = db.idents(by_name)
    return f"""
        SELECT {key_list_sql},
               string_agg(printf('%d %s %s %.1f ms', n, CASE WHEN kind = 'collective' THEN 'one-time ' || name ELSE name END,
                                 CASE WHEN kind = 'collective' THEN 'kernel' WHEN name LIKE '%..%' THEN 'capture'
                                      ELSE 'call' END || CASE WHEN n = 1 THEN '' ELSE 's' END, busy_ns / 1e6), ', '
                          ORDER BY busy_ns DESC, name) FILTER (WHERE place <= 4)
               || CASE WHEN count(*) > 4 THEN printf(' and %d more', count(*) - 4) ELSE '' END AS summary
        FROM (
            SELECT u.*, c.n, row_number() OVER (PARTITION BY {db.idents(f"u.{k}" for k in keys)}
                                                ORDER BY u.busy_ns DESC, u.name) AS place
            FROM ({busy_time_sql(f"SELECT {by_name_sql}, start_ns, end_ns FROM ({source_sql})", by_name)}) u
            JOIN (SELECT {by_name_sql}, count(*) AS n FROM ({source_sql}) GROUP BY ALL) c USING ({by_name_sql})
        )
        GROUP BY {key_list_sql}
    """


def _build_step_states(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"""
        CREATE OR REPLACE TABLE step_states AS
        WITH step_init AS ({busy_time_sql("SELECT rank, step_id, start_ns, end_ns FROM _clipped_init", ("rank", "step_id"))}),
        step_alloc AS ({busy_time_sql("SELECT rank, step_id, start_ns, end_ns FROM _clipped_init WHERE kind = 'allocation'",
                                      ("rank", "step_id"))}),
        step_inherent AS ({busy_time_sql("SELECT rank, step_id, start_ns, end_ns FROM _clipped_init WHERE kind <> 'allocation'",
                                         ("rank", "step_id"))}),
        step_work AS ({_top_work_sql("SELECT * FROM _clipped_init", ("rank", "step_id"))}),
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
        inside_init AS ({busy_time_sql("SELECT rank, start_ns, end_ns FROM _clipped_init", ("rank",))}),
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
               CASE WHEN steady < $min_steady_steps THEN 'no_steady_state'
                    -- one-time work outside steps that the trace cannot show (no API calls) weighs nothing here
                    WHEN non_steady_ns + coalesce(outside_ns, 0) >= step_wall_ns - non_steady_ns THEN 'init_dominated'
                    ELSE 'steady' END AS verdict,
               CASE WHEN steady >= $min_steady_steps THEN 0 ELSE $min_steady_steps - steady END AS more_steps_needed
        FROM judged
        ORDER BY rank
        """,
        {"min_steady_steps": MIN_STEADY_STEPS},
    )
