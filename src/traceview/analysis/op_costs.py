"""`op_costs`: ideal DRAM bytes and useful FLOPs of every op range whose inputs the trace records.

How each op's cost follows from its input shapes, dtypes and scalar arguments is data, one entry per
op in `op_costs.toml`, so that adding an op is one entry. Entries are SQL expressions that DuckDB
evaluates for all ops at once. An op no entry matches stays uncosted: a guess ("inputs plus the
largest input") would put ops that are handed a whole buffer but touch a slice of it (KV-cache
writes, rotary with a cos/sin table, paged attention) far above the memory roof.

The SQL around the entries' expressions is analysis/sql/op_costs.sql; the two statements built from
the entries are composed here, their op names, patterns and ids bound as parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.analysis import sql_module
from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.model import db


COST_MODELS_FILE = Path(__file__).with_name("op_costs.toml")
ENTRY_KEYS = {"id", "ops", "pattern", "when", "flops", "bytes"}
MODULE = sql_module.load("op_costs")


@dataclass(frozen=True)
class CostModel:
    """One op_costs.toml entry: which ops it costs and the SQL for their bytes and FLOPs."""

    id: str
    match: str  # SQL; the op names or the pattern in it are parameters, given by `parameters`
    bytes: str
    flops: str | None
    number: int  # the entry's place in the file, from 1: it names the entry's parameters
    parameters: tuple[tuple[str, str], ...]  # (name, value)

    @property
    def id_parameter(self) -> str:
        """The parameter that carries the entry's id into the statements that name it."""
        return f"model_{self.number}"


def _check_sql(con: duckdb.DuckDBPyConnection, entry_id: str, field: str, expression_sql: str,
               parameters: dict[str, str]) -> None:
    try:
        con.execute(f"SELECT ({expression_sql}) FROM _op_inputs LIMIT 0", parameters)
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
        parameters = tuple((f"model_{number}_op_{k}", op) for k, op in enumerate(ops))
        match = f"op IN ({', '.join(f'${name}' for name, _ in parameters)})"
    else:
        try:
            re.compile(entry["pattern"])
        except re.error as exc:
            raise TraceviewError(f"{where}: pattern is not a valid regex: {exc}") from None
        parameters = ((f"model_{number}_pattern", entry["pattern"]),)
        match = f"regexp_full_match(op, ${parameters[0][0]})"
    if "when" in entry:
        match = f"{match} AND ({entry['when']})"
    return CostModel(entry_id, match, entry["bytes"], entry.get("flops"), number, parameters)


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
    for section in ("macros", "no_ops", "inputs"):
        MODULE.run(con, section)
    checks = [(model.id, field, expression, dict(model.parameters) if field == "when/ops" else {})
              for model in models
              for field, expression in (("when/ops", model.match), ("bytes", model.bytes), ("flops", model.flops))
              if expression is not None]
    expressions_sql = ", ".join(f"({expression})" for _, _, expression, _ in checks)
    try:  # one bind for the whole file; only a failure pays for naming the entry
        con.execute(f"SELECT {expressions_sql} FROM _op_inputs LIMIT 0",
                    {name: value for model in models for name, value in model.parameters})
    except duckdb.Error:
        for check in checks:
            _check_sql(con, *check)
    finally:
        con.close()


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
    if not MODULE.query(con, "shaped_count")[0][0]:
        # most nsys exports and unshaped Kineto traces: skip planning the cost query for no rows
        MODULE.run(con, "empty")
        return
    for section in ("macros", "trace_ops", "inputs"):
        MODULE.run(con, section)
    # The two statements whose text is the entries' SQL (op_costs.sql has the rest): one CASE arm an entry,
    # its op names, pattern and id bound as parameters.
    pick_sql = " ".join(f"WHEN {m.match} THEN ${m.id_parameter}" for m in models)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _modeled AS SELECT *, CASE {pick_sql} END AS cost_model FROM _op_inputs",
                {name: value for m in models for name, value in (*m.parameters, (m.id_parameter, m.id))})
    # only the entries some op matched: binding all of them is most of the time on a small trace (60 -> 20 ms)
    matched = {model for (model,) in MODULE.query(con, "used")}
    used = [m for m in models if m.id in matched]
    byte_arms_sql = " ".join(f"WHEN ${m.id_parameter} THEN ({m.bytes})::DOUBLE" for m in used) or "WHEN NULL THEN NULL"
    flop_arms_sql = (" ".join(f"WHEN ${m.id_parameter} THEN ({m.flops})::DOUBLE" for m in used if m.flops)
                     or "WHEN NULL THEN NULL")
    MODULE.run(con, "units")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _priced AS
        WITH costs AS (
            SELECT *, CASE cost_model {byte_arms_sql} END AS model_bytes,
                   CASE cost_model {flop_arms_sql} END AS model_flops
            FROM _modeled
        ),
        moved AS (
            SELECT signature, CASE cost_model {byte_arms_sql} END AS elements
            FROM _modeled_units
        )
        SELECT c.op, c.input_dims, c.input_types, c.input_values, c.cost_model, c.model_flops, c.model_bytes,
               m.elements, type_dtype(c.types[1]) AS input_dtype,
               -- tokens per sequence of a [batch, seq, features] linear input: 1 in decode, the prompt in prefill
               CASE WHEN c.op IN ('aten::linear', 'aten::matmul') AND len(c.d1) = 3 THEN c.d1[2] END AS seq_len
        FROM costs c JOIN moved m USING (signature)
        """,
        {m.id_parameter: m.id for m in used},
    )
    MODULE.run(con, "finish")


STAGE = MODULE.stage(run=lambda con, context: build_op_costs(con))
