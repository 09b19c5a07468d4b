"""`op_costs`: ideal DRAM bytes and useful FLOPs of every op range whose inputs the trace records.

How each op's cost follows from its input shapes, dtypes and scalar arguments is data, one entry per
op in `op_costs.toml`, so that adding an op is one entry. Entries are SQL expressions that DuckDB
evaluates for all ops at once. An op no entry matches stays uncosted: a guess ("inputs plus the
largest input") would put ops that are handed a whole buffer but touch a slice of it (KV-cache
writes, rotary with a cos/sin table, paged attention) far above the memory roof.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.analysis.stage import Relation, Stage
from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.model import db


COST_MODELS_FILE = Path(__file__).with_name("op_costs.toml")
MAX_INPUTS = 12
ELEMENT_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "int": 4,
    "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
TYPE_DTYPES = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8",
}
ENTRY_KEYS = {"id", "ops", "pattern", "when", "flops", "bytes"}


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _case(column: str, mapping: dict[str, object]) -> str:
    arms = " ".join(f"WHEN {_sql_text(k)} THEN {_sql_text(v) if isinstance(v, str) else v}" for k, v in mapping.items())
    return f"CASE {column} {arms} END"


MACROS = {
    "numel(d)": "CASE WHEN len(d) = 0 THEN 1 ELSE list_aggregate(d, 'product') END",
    "dim_size(d, k)": "d[CASE WHEN k >= 0 THEN k + 1 ELSE len(d) + k + 1 END]",
    "larger(x, y)": "CASE WHEN x >= y THEN x ELSE y END",
    # aligned from the last dim; each argument is written out few times, because a macro pastes its
    # argument wherever it appears and where() nests broadcast_dims (the old form took 0.13 s to plan)
    "broadcast_dims(a, b)": """list_reverse(list_transform(range(1, larger(len(a), len(b)) + 1), lambda r: larger(
        CASE WHEN r <= len(a) THEN list_reverse(a)[r] ELSE 1 END,
        CASE WHEN r <= len(b) THEN list_reverse(b)[r] ELSE 1 END)))""",
    "broadcast_numel(a, b)": "numel(broadcast_dims(a, b))",
    "reduced_dims(t)": "coalesce(TRY_CAST(t AS INTEGER[]), [TRY_CAST(t AS INTEGER)])",
    "reduced_numel(d, t)": """CASE WHEN t IS NULL OR len(reduced_dims(t)) = 0 THEN 1
        ELSE numel(d) / list_aggregate(list_transform(reduced_dims(t), lambda k: dim_size(d, k)), 'product') END""",
    "element_size(t)": _case("t", ELEMENT_BYTES),
    "type_dtype(t)": _case("t", TYPE_DTYPES),
}


@dataclass(frozen=True)
class CostModel:
    """One op_costs.toml entry: which ops it costs and the SQL for their bytes and FLOPs."""

    id: str
    match: str
    bytes: str
    flops: str | None


def _input_columns(i: int) -> str:
    d = f"coalesce(dims[{i}], [])"
    tensor = f"(len({d}) > 0 OR sizes[{i}] IS NOT NULL)"
    return f"""{d} AS d{i},
               CASE WHEN len({d}) > 0 THEN list_aggregate({d}, 'product')
                    WHEN sizes[{i}] IS NOT NULL THEN 1 ELSE 0 END AS n{i},
               CASE WHEN {tensor} THEN sizes[{i}] ELSE 0 END AS s{i},
               CASE WHEN {tensor} THEN 1 ELSE 0 END AS u{i},
               nullif(vals[{i}], '') AS v{i}"""


# `sizes` (element_size of each input type, computed once: pasting the macro into every column took
# 0.03 s to plan) must be a column of the relation the variables are selected from
SIZES = "list_transform(types, lambda t: element_size(t)) AS sizes"
VARIABLES = ",\n".join(_input_columns(i) for i in range(1, MAX_INPUTS + 1))
UNIT_SIZES = ", ".join(f"u{i} AS s{i}" for i in range(1, MAX_INPUTS + 1))


def _create_macros(con: duckdb.DuckDBPyConnection) -> None:
    for signature, body in MACROS.items():
        con.execute(f"CREATE OR REPLACE TEMP MACRO {signature} AS ({body})")


def _check_sql(con: duckdb.DuckDBPyConnection, entry_id: str, field: str, expression: str) -> None:
    try:
        con.execute(f"SELECT ({expression}) FROM _op_inputs LIMIT 0")
    except duckdb.Error as exc:
        message = str(exc).splitlines()[0]
        raise TraceviewError(f"{COST_MODELS_FILE.name} entry '{entry_id}': {field} is not valid SQL: {message}") from None


def _parse_entry(number: int, entry: object, seen: set[str]) -> CostModel:
    if not isinstance(entry, dict):
        raise TraceviewError(f"{COST_MODELS_FILE.name} entry {number}: must be a table")
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        raise TraceviewError(f"{COST_MODELS_FILE.name} entry {number}: needs an id")
    where = f"{COST_MODELS_FILE.name} entry '{entry_id}'"
    if entry_id in seen:
        raise TraceviewError(f"{where}: the id is used twice")
    seen.add(entry_id)
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise TraceviewError(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(ENTRY_KEYS)})")
    if ("ops" in entry) == ("pattern" in entry):
        raise TraceviewError(f"{where}: give exactly one of ops (names) or pattern (regex)")
    for key in ("pattern", "when", "flops", "bytes"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise TraceviewError(f"{where}: {key} must be a non-empty string")
    if "bytes" not in entry:
        raise TraceviewError(f"{where}: needs bytes")
    if "ops" in entry:
        ops = entry["ops"]
        if not isinstance(ops, list) or not ops or not all(isinstance(o, str) and o for o in ops):
            raise TraceviewError(f"{where}: ops must be a non-empty list of op names")
        match = f"op IN ({', '.join(_sql_text(o) for o in ops)})"
    else:
        try:
            re.compile(entry["pattern"])
        except re.error as exc:
            raise TraceviewError(f"{where}: pattern is not a valid regex: {exc}") from None
        match = f"regexp_full_match(op, {_sql_text(entry['pattern'])})"
    if "when" in entry:
        match = f"{match} AND ({entry['when']})"
    return CostModel(entry_id, match, entry["bytes"], entry.get("flops"))


@lru_cache(maxsize=4)
def read_cost_models(path: Path = COST_MODELS_FILE) -> tuple[CostModel, ...]:
    """op_costs.toml's entries, each well formed (keys, names, regexes); their SQL is bound when a trace's
    ops need them (build_op_costs), or all at once by load_cost_models."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TraceviewError(f"{path.name}: {exc}") from None
    entries = data.get("op")
    if not isinstance(entries, list) or not entries or set(data) != {"op"}:
        raise TraceviewError(f"{path.name}: expected only [[op]] entries")
    seen: set[str] = set()
    return tuple(_parse_entry(number, entry, seen) for number, entry in enumerate(entries, start=1))


@lru_cache(maxsize=4)
def load_cost_models(path: Path = COST_MODELS_FILE) -> tuple[CostModel, ...]:
    """Read and validate op_costs.toml: every entry well formed and every expression valid SQL."""
    models = read_cost_models(path)
    _check_models_sql(models)
    return models


def _check_models_sql(models: tuple[CostModel, ...]) -> None:
    """Bind every expression of the entries; a failure names the entry and the field."""
    con = db.scratch()
    _create_macros(con)
    con.execute(
        f"""CREATE TEMP TABLE _op_inputs AS
            SELECT *, {VARIABLES}
            FROM (SELECT *, {SIZES}
                  FROM (SELECT ''::VARCHAR AS op, []::BIGINT[][] AS dims, []::VARCHAR[] AS types,
                               []::VARCHAR[] AS vals, false AS values_known))"""
    )
    checks = [(model.id, field, expression) for model in models
              for field, expression in (("when/ops", model.match), ("bytes", model.bytes), ("flops", model.flops))
              if expression is not None]
    try:  # one bind for the whole file; only a failure pays for naming the entry
        con.execute(f"SELECT {', '.join(f'({expression})' for _, _, expression in checks)} FROM _op_inputs LIMIT 0")
    except duckdb.Error:
        for check in checks:
            _check_sql(con, *check)
    finally:
        con.close()


SHAPED_RANGES = "input_dims IS NOT NULL AND kind IN ('cpu_op', 'nvtx')"
OP_COSTS_COLUMNS = """rank INTEGER, range_id BIGINT, kind VARCHAR, pid BIGINT, tid BIGINT, start_ns BIGINT, end_ns BIGINT,
    external_id BIGINT, op VARCHAR, flops DOUBLE, bytes DOUBLE, elements DOUBLE, input_dtype VARCHAR, seq_len BIGINT,
    cost_model VARCHAR"""


def build_op_costs(con: duckdb.DuckDBPyConnection, models: tuple[CostModel, ...] | None = None) -> None:
    """`op_costs`: one row per op range an op_costs.toml entry (or the profiler's own FLOP count) costs.

    The entries' SQL is bound here, with the trace's ops (binding all of it up front cost a small report
    30 ms); where it fails, every entry is checked so that the error names the one at fault."""
    models = read_cost_models() if models is None else models
    try:
        _build_op_costs(con, models)
    except duckdb.Error:
        _check_models_sql(models)
        raise


def _build_op_costs(con: duckdb.DuckDBPyConnection, models: tuple[CostModel, ...]) -> None:
    if not con.execute(f"SELECT count(*) FROM ranges WHERE {SHAPED_RANGES}").fetchone()[0]:
        # most nsys exports and unshaped Kineto traces: skip planning the cost query for no rows
        con.execute(f"CREATE OR REPLACE TABLE op_costs ({OP_COSTS_COLUMNS})")
        return
    _create_macros(con)
    pick = " ".join(f"WHEN {m.match} THEN {_sql_text(m.id)}" for m in models)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _modeled AS
        WITH shaped AS (
            SELECT rank, range_id, kind, pid, tid, start_ns, end_ns, external_id, flops AS recorded_flops,
                   CASE WHEN kind = 'nvtx' THEN trim(split_part(name, ',', 1)) ELSE name END AS op,
                   TRY_CAST(input_dims AS BIGINT[][]) AS dims,
                   TRY(from_json(input_types, '["VARCHAR"]')) AS types,
                   TRY(from_json(input_values, '["VARCHAR"]')) AS vals,
                   input_values IS NOT NULL AS values_known
            FROM ranges WHERE {SHAPED_RANGES}
        )
        SELECT *, CASE {pick} END AS cost_model
        FROM (SELECT *, {VARIABLES} FROM (SELECT *, {SIZES} FROM shaped WHERE dims IS NOT NULL))
        """
    )
    # only the entries some op matched: binding all of them is most of the time on a small trace (60 -> 20 ms)
    matched = {model for (model,) in con.execute("SELECT DISTINCT cost_model FROM _modeled").fetchall()}
    used = [m for m in models if m.id in matched]
    byte_arms = " ".join(f"WHEN {_sql_text(m.id)} THEN ({m.bytes})::DOUBLE" for m in used) or "WHEN NULL THEN NULL"
    flop_arms = " ".join(f"WHEN {_sql_text(m.id)} THEN ({m.flops})::DOUBLE" for m in used if m.flops) or "WHEN NULL THEN NULL"
    con.execute(
        f"""
        CREATE OR REPLACE TABLE op_costs AS
        WITH costs AS (
            SELECT *, CASE cost_model {byte_arms} END AS model_bytes, CASE cost_model {flop_arms} END AS model_flops
            FROM _modeled
        ),
        moved AS (
            SELECT rank, range_id, CASE cost_model {byte_arms} END AS elements
            FROM (SELECT * REPLACE ({UNIT_SIZES}) FROM _modeled)
        )
        SELECT c.rank, c.range_id, c.kind, c.pid, c.tid, c.start_ns, c.end_ns, c.external_id, c.op,
               CASE WHEN c.model_flops IS NOT NULL THEN c.model_flops ELSE c.recorded_flops END AS flops,
               c.model_bytes AS bytes, m.elements,
               type_dtype(c.types[1]) AS input_dtype,
               -- tokens per sequence of a [batch, seq, features] linear input: 1 in decode, the prompt in prefill
               CASE WHEN c.op IN ('aten::linear', 'aten::matmul') AND len(c.d1) = 3 THEN c.d1[2] END AS seq_len,
               CASE WHEN c.cost_model IS NOT NULL THEN c.cost_model
                    WHEN c.recorded_flops IS NOT NULL THEN 'profiler' END AS cost_model
        FROM costs c JOIN moved m USING (rank, range_id)
        WHERE c.cost_model IS NOT NULL OR c.recorded_flops IS NOT NULL
        """
    )
    con.execute("DROP TABLE _modeled")


STAGE = Stage(
    name="op_costs",
    doc="Ideal DRAM bytes and useful FLOPs of every op range whose inputs the trace records, from the cost "
        "models in `src/traceview/analysis/op_costs.toml` (*Cost models* above).",
    requires=("ranges",),
    creates=(
        Relation("op_costs", "op range an op_costs.toml entry (or the profiler's own FLOP count) costs", {
            "rank": "trace rank", "range_id": "the op's `ranges.range_id`", "kind": "copied from `ranges`",
            "pid": "copied from `ranges`", "tid": "copied from `ranges`", "start_ns": "copied from `ranges`",
            "end_ns": "copied from `ranges`", "external_id": "copied from `ranges`",
            "op": "op name (`aten::mm`); for NVTX the text before the first comma",
            "flops": "FLOPs of matmul-like ops (or the recorded value); NULL for others",
            "bytes": "bytes read and written, when every input's type is known",
            "elements": "elements read and written",
            "input_dtype": "dtype of the first input",
            "seq_len": "S of a `[B, S, H]` linear/matmul input (1 in decode)",
            "cost_model": "the op_costs.toml entry that costed the op (`mm`, `sdpa`, `kv_cache_write`, ...), "
                          "or `profiler`"}),
    ),
    run=lambda con, context: build_op_costs(con),
)
