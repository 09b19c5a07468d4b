"""Steps (engine iterations / forward passes) and their phase: prefill, decode, mixed, empty, unknown.

A step is a host-side window: an engine's step annotation, an `execute_model` Python frame, a
ProfilerStep, a range matching the user's regex, or, with none of these, a burst of GPU work between
idle gaps. The GPU work of a step is what its launches caused (joined on correlation id), not
whatever happens to run on the GPU during the window. Each step's phase comes from the strongest
evidence available, recorded in `phase_source` with a confidence.
"""

from __future__ import annotations

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from importlib import resources

import duckdb
import pyarrow as pa

from traceview.analysis.intervals import busy_time_sql
from traceview.model import db

COUNT_GROUPS = ("prefill_requests", "prefill_tokens", "prefill_context_tokens", "decode_requests", "decode_tokens",
                "decode_context_tokens", "requests", "tokens")
KNOWN_GROUPS = frozenset(COUNT_GROUPS) | {"mode"}
DEFAULT_GAP_NS = 1_000_000
ANNOTATION_KINDS = ("user_annotation", "nvtx")


@dataclass(frozen=True)
class StepGrammar:
    """One engine's step annotation: a regex and what its capture groups count."""

    name: str
    engine: str
    pattern: str
    groups: tuple[str, ...]
    confidence: float
    source: str
    modes: dict[str, str] = field(default_factory=dict)


def load_grammars() -> list[StepGrammar]:
    text = resources.files("traceview.analysis").joinpath("steps.toml").read_text()
    grammars = []
    for index, entry in enumerate(tomllib.loads(text)["grammar"]):
        where = f"steps.toml: grammar[{index}]"
        missing = [key for key in ("name", "engine", "pattern", "groups", "confidence", "source") if key not in entry]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        unknown = set(entry["groups"]) - KNOWN_GROUPS
        if unknown:
            raise ValueError(f"{where}.groups: unknown group names {sorted(unknown)}")
        grammars.append(StepGrammar(
            entry["name"], entry["engine"], entry["pattern"], tuple(entry["groups"]),
            float(entry["confidence"]), entry["source"], dict(entry.get("modes", {})),
        ))
    return grammars


def _create_windows(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _step_windows (
            rank INTEGER, pid BIGINT, tid BIGINT, start_ns BIGINT, end_ns BIGINT, name VARCHAR,
            source VARCHAR, phase VARCHAR, confidence DOUBLE, prefill_requests BIGINT,
            prefill_tokens BIGINT, decode_requests BIGINT, decode_tokens BIGINT,
            prefill_context_tokens BIGINT, decode_context_tokens BIGINT
        )
        """
    )


def _ranks_without_windows() -> str:
    return "rank NOT IN (SELECT DISTINCT rank FROM _step_windows)"


def _add_user_regex_windows(con: duckdb.DuckDBPyConnection, step_regex: str) -> None:
    con.execute(
        f"""
        INSERT INTO _step_windows
        SELECT rank, pid, tid, start_ns, end_ns, name, 'user_regex', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM ranges
        WHERE kind <> 'gpu_user_annotation' AND regexp_matches(name, $regex) AND {_ranks_without_windows()}
        """,
        {"regex": step_regex},
    )


def _grammar_sql(grammar: StepGrammar, source: str) -> str:
    """SELECT over `source` (rank, pid, tid, start_ns, end_ns, name) of the rows whose name matches
    the grammar, with the phase and token counts its capture groups give."""
    captured = {name: f"TRY_CAST(m['{name}'] AS BIGINT)" for name in grammar.groups if name != "mode"}
    count = {name: captured.get(name, "NULL") for name in COUNT_GROUPS}
    mode = "m['mode']" if "mode" in grammar.groups else "NULL"
    return f"""
        WITH matched AS (
            SELECT src.rank, src.pid, src.tid, src.start_ns, src.end_ns, src.name,
                   regexp_extract(src.name, $pattern, $groups) AS m
            FROM ({source}) src
            WHERE regexp_matches(src.name, $pattern)
        ),
        counted AS (
            SELECT matched.*, md.phase AS mode_phase,
                   {count['prefill_requests']} AS pr, {count['prefill_tokens']} AS pt,
                   {count['decode_requests']} AS dr, {count['decode_tokens']} AS dt,
                   {count['prefill_context_tokens']} AS pc, {count['decode_context_tokens']} AS dc,
                   {count['requests']} AS rq, {count['tokens']} AS tk
            FROM matched LEFT JOIN _modes md ON md.mode = {mode}
        ),
        labelled AS (
            SELECT *, coalesce(mode_phase, CASE
                WHEN coalesce(pr, pt, 0) > 0 AND coalesce(dr, dt, 0) > 0 THEN 'mixed'
                WHEN coalesce(pr, pt, 0) > 0 THEN 'prefill'
                WHEN coalesce(dr, dt, 0) > 0 THEN 'decode'
                ELSE 'empty' END) AS phase
            FROM counted
        )
        SELECT rank, pid, tid, start_ns, end_ns, name, 'annotation:' || $grammar AS source, phase,
               $confidence::DOUBLE AS confidence,
               coalesce(pr, CASE WHEN phase = 'prefill' THEN rq END) AS prefill_requests,
               coalesce(pt, CASE WHEN phase = 'prefill' THEN tk END, CASE WHEN phase = 'decode' THEN 0 END) AS prefill_tokens,
               coalesce(dr, CASE WHEN phase = 'decode' THEN rq END) AS decode_requests,
               -- a generation request makes one token per step when the annotation counts only requests
               coalesce(dt, CASE WHEN phase = 'decode' THEN coalesce(tk, dr) END,
                        CASE WHEN phase = 'prefill' THEN 0 END) AS decode_tokens,
               pc AS prefill_context_tokens, dc AS decode_context_tokens
        FROM labelled
    """


def _apply_grammar(con: duckdb.DuckDBPyConnection, grammar: StepGrammar) -> None:
    """Windows from ranges matching the grammar, and phases for user-regex windows whose names match it."""
    con.register("_modes", pa.table({"mode": list(grammar.modes), "phase": list(grammar.modes.values())},
                                    schema=pa.schema([("mode", pa.string()), ("phase", pa.string())])))
    params = {"pattern": grammar.pattern, "groups": list(grammar.groups), "grammar": grammar.name,
              "confidence": grammar.confidence}
    annotations = f"SELECT * FROM ranges WHERE kind IN {ANNOTATION_KINDS} AND {_ranks_without_windows()}"
    con.execute(f"INSERT INTO _step_windows BY NAME {_grammar_sql(grammar, annotations)}", params)
    con.execute(
        f"""
        UPDATE _step_windows w SET phase = g.phase, confidence = g.confidence,
               prefill_requests = g.prefill_requests, prefill_tokens = g.prefill_tokens,
               decode_requests = g.decode_requests, decode_tokens = g.decode_tokens,
               prefill_context_tokens = g.prefill_context_tokens, decode_context_tokens = g.decode_context_tokens
        FROM ({_grammar_sql(grammar, "SELECT * FROM _step_windows WHERE phase IS NULL AND source = 'user_regex'")}) g
        WHERE w.phase IS NULL AND w.source = 'user_regex' AND w.rank = g.rank AND w.pid = g.pid
          AND w.tid = g.tid AND w.start_ns = g.start_ns AND w.end_ns = g.end_ns AND w.name = g.name
        """,
        params,
    )
    con.unregister("_modes")


def _add_range_windows(con: duckdb.DuckDBPyConnection, source: str, condition: str) -> None:
    con.execute(
        f"""
        INSERT INTO _step_windows
        SELECT rank, pid, tid, start_ns, end_ns, name, '{source}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM ranges WHERE ({condition}) AND {_ranks_without_windows()}
        """
    )


def _keep_outermost(con: duckdb.DuckDBPyConnection) -> None:
    """Drop windows nested in another window of the same thread (a step annotated twice)."""
    con.execute(
        """
        DELETE FROM _step_windows w
        WHERE EXISTS (
            SELECT 1 FROM _step_windows o
            WHERE o.rank = w.rank AND o.pid = w.pid AND o.tid = w.tid
              AND o.start_ns <= w.start_ns AND o.end_ns >= w.end_ns
              AND (o.start_ns < w.start_ns OR o.end_ns > w.end_ns OR o.name < w.name)
        )
        """
    )


def _add_gap_windows(con: duckdb.DuckDBPyConnection, gap_ns: int) -> None:
    """Fallback: a step is a burst of GPU work; an idle gap longer than `gap_ns` ends it."""
    con.execute(
        f"""
        INSERT INTO _step_windows
        SELECT rank, NULL, NULL, min(start_ns), max(end_ns), 'gpu burst', 'gpu_gap', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns - prev_end > $gap THEN 1 ELSE 0 END)
                      OVER (PARTITION BY rank ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS burst
            FROM (
                SELECT rank, start_ns, end_ns,
                       max(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, end_ns
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
                FROM kernels WHERE {_ranks_without_windows()}
            )
        )
        GROUP BY rank, burst
        """,
        {"gap": gap_ns},
    )


def _assign_work(con: duckdb.DuckDBPyConnection) -> None:
    """Give each kernel and memop the step whose window holds its launch call (ASOF on the thread).

    A launch from a thread that has no step window of its own (PyTorch runs backward on an autograd
    thread while ProfilerStep#N is recorded on the main one) belongs to the step its process has
    open at that moment.
    """
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _numbered_windows AS
        SELECT *, row_number() OVER (PARTITION BY rank ORDER BY start_ns, end_ns) - 1 AS step_id
        FROM _step_windows
        """
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _step_calls AS
        WITH step_threads AS (SELECT DISTINCT rank, pid, tid FROM _numbered_windows WHERE pid IS NOT NULL),
        own_thread AS (
            SELECT a.rank, a.pid, a.correlation_id, w.step_id
            FROM api_calls a
            ASOF JOIN _numbered_windows w
              ON a.rank = w.rank AND a.pid = w.pid AND a.tid = w.tid AND a.start_ns >= w.start_ns
            WHERE a.correlation_id IS NOT NULL AND a.start_ns < w.end_ns
        ),
        other_thread AS (
            SELECT a.rank, a.pid, a.correlation_id, w.step_id
            FROM (SELECT * FROM api_calls a
                  WHERE correlation_id IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM step_threads t
                                    WHERE t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid)) a
            ASOF JOIN _numbered_windows w
              ON a.rank = w.rank AND a.pid = w.pid AND a.start_ns >= w.start_ns
            WHERE a.start_ns < w.end_ns
        )
        SELECT rank, pid, correlation_id, any_value(step_id) AS step_id
        FROM (SELECT * FROM own_thread UNION ALL SELECT * FROM other_thread)
        GROUP BY ALL
        """
    )
    for table in ("kernels", "memops"):
        con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS step_id BIGINT")
        con.execute(f"UPDATE {table} SET step_id = NULL")
        con.execute(
            f"""
            UPDATE {table} SET step_id = c.step_id FROM _step_calls c
            WHERE {table}.rank = c.rank AND {table}.pid = c.pid AND {table}.correlation_id = c.correlation_id
            """
        )
        con.execute(
            f"""
            UPDATE {table} SET step_id = w.step_id FROM _numbered_windows w
            WHERE w.source = 'gpu_gap' AND {table}.rank = w.rank
              AND {table}.start_ns >= w.start_ns AND {table}.end_ns <= w.end_ns
            """
        )



def _user_mapping_sql(con: duckdb.DuckDBPyConnection, phase_kernels: tuple[tuple[str, str], ...]) -> str:
    """Per step, the phases the user's kernel-name patterns point to (`--phase-kernel decode=REGEX`)."""
    con.register("_phase_map", pa.table({"phase": [p for p, _ in phase_kernels], "pattern": [r for _, r in phase_kernels]},
                                        schema=pa.schema([("phase", pa.string()), ("pattern", pa.string())])))
    return """
        SELECT k.rank, k.step_id,
               CASE WHEN count(DISTINCT m.phase) > 1 THEN 'mixed' ELSE any_value(m.phase) END AS user_phase
        FROM kernels k JOIN _phase_map m ON regexp_matches(k.name, m.pattern)
        WHERE k.step_id IS NOT NULL GROUP BY ALL
    """


def _build_steps(con: duckdb.DuckDBPyConnection, phase_kernels: tuple[tuple[str, str], ...] = ()) -> None:
    """The contract `steps` table: one row per step with its phase, evidence, GPU time and tokens."""
    hint = "attention_phase_hint" if db.has_column(con, "kernels", "attention_phase_hint") else "NULL::VARCHAR"
    shapes = (
        """SELECT w.rank, w.step_id, min(o.seq_len) AS min_seq_len, max(o.seq_len) AS max_seq_len
           FROM _numbered_windows w JOIN op_costs o
             ON o.rank = w.rank AND o.pid = w.pid AND o.tid = w.tid
            AND o.start_ns >= w.start_ns AND o.start_ns < w.end_ns AND o.seq_len IS NOT NULL
           GROUP BY ALL"""
        if db.has_column(con, "op_costs", "seq_len")
        else "SELECT NULL::INTEGER AS rank, NULL::BIGINT AS step_id, NULL::BIGINT AS min_seq_len, NULL::BIGINT AS max_seq_len"
    )
    busy = busy_time_sql(
        "SELECT rank, step_id, start_ns, end_ns FROM kernels WHERE step_id IS NOT NULL "
        "UNION ALL SELECT rank, step_id, start_ns, end_ns FROM memops WHERE step_id IS NOT NULL",
        ("rank", "step_id"),
    )
    con.execute(
        f"""
        CREATE OR REPLACE TABLE steps AS
        WITH work AS (
            SELECT k.rank, k.step_id, count(*) AS kernels, min(k.start_ns) AS gpu_start_ns, max(k.end_ns) AS gpu_end_ns,
                   count(*) FILTER (WHERE launch_kind = 'graph') AS graph_kernels,
                   count(*) FILTER (WHERE {hint} = 'decode') AS decode_attention,
                   count(*) FILTER (WHERE {hint} = 'prefill') AS prefill_attention
            FROM kernels k WHERE step_id IS NOT NULL GROUP BY ALL
        ),
        memwork AS (
            SELECT rank, step_id, count(*) AS memops, min(start_ns) AS lo, max(end_ns) AS hi
            FROM memops WHERE step_id IS NOT NULL GROUP BY ALL
        ),
        busy AS ({busy}),
        shapes AS ({shapes}),
        mapped AS ({_user_mapping_sql(con, phase_kernels)}),
        joined AS (
            SELECT w.*, coalesce(k.kernels, 0) AS kernels, coalesce(m.memops, 0) AS memops,
                   least(k.gpu_start_ns, m.lo) AS gpu_start_ns, greatest(k.gpu_end_ns, m.hi) AS gpu_end_ns,
                   coalesce(k.graph_kernels, 0) AS graph_kernels,
                   coalesce(k.decode_attention, 0) AS decode_attention,
                   coalesce(k.prefill_attention, 0) AS prefill_attention, sh.min_seq_len, sh.max_seq_len,
                   mp.user_phase,
                   coalesce(b.busy_ns, 0) AS gpu_time_ns
            FROM _numbered_windows w
            LEFT JOIN work k USING (rank, step_id)
            LEFT JOIN memwork m USING (rank, step_id)
            LEFT JOIN busy b USING (rank, step_id)
            LEFT JOIN shapes sh USING (rank, step_id)
            LEFT JOIN mapped mp USING (rank, step_id)
        ),
        rank_shape AS (
            SELECT rank,
                   count(*) FILTER (WHERE kernels > 0 AND graph_kernels > 0) AS graph_steps,
                   count(*) FILTER (WHERE kernels > 0 AND graph_kernels = 0) AS eager_steps
            FROM joined WHERE phase IS NULL GROUP BY rank
        ),
        decided AS (
            SELECT j.*,
                CASE
                    WHEN j.phase IS NOT NULL THEN struct_pack(p := j.phase, s := j.source, c := j.confidence)
                    WHEN j.kernels = 0 AND j.memops = 0 THEN struct_pack(p := 'empty', s := 'no_gpu_work', c := 1.0)
                    WHEN j.user_phase IS NOT NULL THEN struct_pack(p := j.user_phase, s := 'user_mapping', c := 0.9)
                    WHEN j.min_seq_len > 1 THEN struct_pack(p := 'prefill', s := 'input_shapes', c := 0.8)
                    WHEN j.max_seq_len = 1 THEN struct_pack(p := 'decode', s := 'input_shapes', c := 0.8)
                    WHEN j.decode_attention > 0 AND j.prefill_attention > 0 THEN struct_pack(p := 'mixed', s := 'attention_kernels', c := 0.6)
                    WHEN j.decode_attention > 0 THEN struct_pack(p := 'decode', s := 'attention_kernels', c := 0.8)
                    WHEN j.prefill_attention > 0 THEN struct_pack(p := 'prefill', s := 'attention_kernels', c := 0.8)
                    WHEN j.graph_kernels > 0 AND r.eager_steps > 0 THEN struct_pack(p := 'decode', s := 'cuda_graph', c := 0.7)
                    WHEN j.graph_kernels > 0 THEN struct_pack(p := 'decode', s := 'cuda_graph', c := 0.6)
                    WHEN j.kernels > 0 AND r.graph_steps > 0 THEN struct_pack(p := 'prefill', s := 'eager_vs_graph', c := 0.7)
                    ELSE struct_pack(p := 'unknown', s := 'no_evidence', c := 0.0)
                END AS verdict
            FROM joined j LEFT JOIN rank_shape r USING (rank)
        )
        SELECT rank, step_id, verdict.p AS phase, verdict.s AS phase_source, verdict.c AS confidence,
               least(start_ns, gpu_start_ns) AS start_ns, greatest(end_ns, gpu_end_ns) AS end_ns,
               gpu_time_ns, kernels, prefill_tokens, decode_tokens, prefill_requests, decode_requests,
               prefill_context_tokens, decode_context_tokens,
               name, source AS step_source, start_ns AS cpu_start_ns, end_ns AS cpu_end_ns,
               gpu_start_ns, gpu_end_ns, graph_kernels, memops
        FROM decided
        ORDER BY rank, step_id
        """
    )


def _label_kernels(con: duckdb.DuckDBPyConnection) -> None:
    """Each kernel takes its step's phase; work launched outside any step is 'other'."""
    con.execute("ALTER TABLE kernels ADD COLUMN IF NOT EXISTS phase VARCHAR")
    con.execute("UPDATE kernels SET phase = 'other'")
    con.execute(
        """
        UPDATE kernels SET phase = s.phase FROM steps s
        WHERE kernels.rank = s.rank AND kernels.step_id = s.step_id
        """
    )


def segment_steps(con: duckdb.DuckDBPyConnection, *, step_regex: str | None = None, gap_ns: int = DEFAULT_GAP_NS,
                  phase_kernels: tuple[tuple[str, str], ...] = ()) -> None:
    """Build `steps` and add kernels.step_id / kernels.phase (and memops.step_id).

    `phase_kernels` maps phases to kernel-name regexes the user knows belong to them.
    """
    _create_windows(con)
    if step_regex:
        _add_user_regex_windows(con, step_regex)
    for grammar in load_grammars():
        _apply_grammar(con, grammar)
    _add_range_windows(con, "execute_model", "kind = 'python_function' AND name GLOB '*: execute_model'")
    _add_range_windows(con, "profiler_step", "kind = 'profiler_step'")
    _keep_outermost(con)
    _add_gap_windows(con, gap_ns)
    _assign_work(con)
    _build_steps(con, phase_kernels)
    _label_kernels(con)
    for table in ("_step_windows", "_numbered_windows", "_step_calls"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.unregister("_phase_map")
