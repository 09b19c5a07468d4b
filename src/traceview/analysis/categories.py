"""Kernel category and math dtype from the kernel's name, as data.

The rules live in ``categories.toml`` beside this file: two ordered lists (``[[category]]`` and
``[[dtype]]``) of RE2 patterns; for each kernel the first matching rule wins. Keeping them as data
means a new library's naming grammar is a TOML edit, and the database carries the rules
(``category_patterns``, ``dtype_patterns``) so a user can ask SQL why a kernel got its label.

``classify_kernels`` labels each distinct name (``kernel_name_labels``); the labels become the
``category``, ``dtype`` and ``attention_phase_hint`` columns of ``kernels`` (analysis/assemble.py).

Matching runs in DuckDB (the same RE2 engine the patterns are validated with), once per distinct
(name, short_name) and joined back, so millions of kernels cost what a few hundred names cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.compat import tomllib
from traceview.analysis.stage import Columns, Relation, Stage
from traceview.model import db


__all__ = [
    "CATEGORIES",
    "DTYPES",
    "PATTERNS_FILE",
    "PHASE_HINTS",
    "Rule",
    "classify_kernels",
    "load_patterns",
]

PATTERNS_FILE = Path(__file__).with_name("categories.toml")
CATEGORIES = (
    "communication", "attention", "conv", "gemm", "fused", "moe_routing", "embedding", "kv_cache_write",
    "norm", "rotary", "activation", "optimizer", "sampling", "memory", "reduction_softmax", "elementwise",
    "other",
)
DTYPES = ("fp4", "fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64")
NO_DTYPE = "none"  # a dtype rule that stops the search and leaves dtype NULL
PHASE_HINTS = ("prefill", "decode")
FIELDS = ("name", "short_name")
_KEYS = {"name", "field", "pattern", "phase_hint", "why", "examples"}


@dataclass(frozen=True)
class Rule:
    """One pattern: `label` (a category or dtype) for kernels whose `field` matches `pattern`."""

    priority: int
    label: str
    field: str
    pattern: str
    phase_hint: str | None = None


def _check_rule(path: Path, section: str, index: int, entry: object, labels: tuple[str, ...]) -> Rule:
    """Validate one TOML entry's shape; every problem names the file, the list and the entry's index."""
    where = f"{path}: [[{section}]] entry {index}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: not a table")
    missing = [key for key in ("name", "field", "pattern") if key not in entry]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    unknown = set(entry) - (_KEYS if section == "category" else _KEYS - {"phase_hint"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if entry["name"] not in labels:
        raise ValueError(f"{where}: name {entry['name']!r} is not one of {', '.join(labels)}")
    if entry["field"] not in FIELDS:
        raise ValueError(f"{where}: field {entry['field']!r} is not one of {', '.join(FIELDS)}")
    hint = entry.get("phase_hint")
    if hint is not None and (hint not in PHASE_HINTS or entry["name"] != "attention"):
        raise ValueError(f"{where}: phase_hint {hint!r} needs name 'attention' and one of {', '.join(PHASE_HINTS)}")
    pattern = entry["pattern"]
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{where}: pattern must be a non-empty string")
    return Rule(index, entry["name"], entry["field"], pattern, hint)


def _check_patterns(path: Path, section: str, rules: tuple[Rule, ...]) -> None:
    """Compile every pattern with RE2 as DuckDB does, not Python's re: that is the engine that will run
    them. One statement for the list; only a failure pays for finding the entry."""
    checker = db.scratch()
    try:
        checker.execute("SELECT " + ", ".join(f"regexp_matches('', {_quote(r.pattern)})" for r in rules))
    except duckdb.Error:
        for rule in rules:
            try:
                checker.execute(f"SELECT regexp_matches('', {_quote(rule.pattern)})")
            except duckdb.Error as exc:
                raise ValueError(f"{path}: [[{section}]] entry {rule.priority}: bad pattern {rule.pattern!r}: {exc}") from None
    finally:
        checker.close()


@lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Parse and validate once per file version (the mtime is part of the cache key)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    lists = []
    for section, labels in (("category", CATEGORIES[:-1]), ("dtype", DTYPES + (NO_DTYPE,))):
        entries = data.get(section)
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{path}: no [[{section}]] rules")
        rules = tuple(_check_rule(path, section, i, e, labels) for i, e in enumerate(entries))
        _check_patterns(path, section, rules)
        lists.append(rules)
    return lists[0], lists[1]


def load_patterns(path: str | Path = PATTERNS_FILE) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """The (category rules, dtype rules) of a patterns file, in priority order, validated.

    Raises ValueError naming the file and the entry index for a missing key, an unknown label or
    field, or a pattern RE2 rejects.
    """
    path = Path(path).resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return _load(path, mtime)


def _quote(text: str) -> str:
    """A SQL string literal (DuckDB keeps backslashes as they are)."""
    return "'" + text.replace("'", "''") + "'"


def _first_match(rules: tuple[Rule, ...]) -> str:
    """One CASE giving the priority of the first matching rule; patterns are constant literals so
    DuckDB compiles each regex once."""
    column = {"name": "name", "short_name": "coalesce(short_name, name)"}
    arms = " ".join(f"WHEN regexp_matches({column[r.field]}, {_quote(r.pattern)}) THEN {r.priority}" for r in rules)
    return f"CASE {arms} END"


def _register_patterns(con: duckdb.DuckDBPyConnection, categories: tuple[Rule, ...], dtypes: tuple[Rule, ...]) -> None:
    con.execute(
        "CREATE OR REPLACE TABLE category_patterns "
        "(priority INTEGER, category VARCHAR, field VARCHAR, pattern VARCHAR, phase_hint VARCHAR)"
    )
    db.insert_rows(con, "category_patterns", [[r.priority, r.label, r.field, r.pattern, r.phase_hint] for r in categories])
    con.execute(
        "CREATE OR REPLACE TABLE dtype_patterns (priority INTEGER, dtype VARCHAR, field VARCHAR, pattern VARCHAR)"
    )
    db.insert_rows(con, "dtype_patterns", [[r.priority, r.label, r.field, r.pattern] for r in dtypes])


def classify_kernels(con: duckdb.DuckDBPyConnection, path: str | Path = PATTERNS_FILE) -> None:
    """Label every distinct kernel name: `kernel_name_labels`, plus the pattern tables the labels came from.

    Matching runs once per distinct (name, short_name); analysis/assemble.py joins the labels onto
    `kernels`, so millions of kernels cost what a few hundred names cost.
    """
    categories, dtypes = load_patterns(path)
    _register_patterns(con, categories, dtypes)
    con.execute(
        f"""
        CREATE OR REPLACE TABLE kernel_name_labels AS
        WITH names AS (SELECT DISTINCT name, short_name FROM kernels),
        matched AS (
            SELECT name, short_name, {_first_match(categories)} AS category_rule, {_first_match(dtypes)} AS dtype_rule
            FROM names
        )
        SELECT coalesce(m.name, '') AS name_key, coalesce(m.short_name, '') AS short_key,
               coalesce(c.category, 'other') AS category, nullif(d.dtype, '{NO_DTYPE}') AS dtype,
               c.phase_hint AS attention_phase_hint
        FROM matched m
        LEFT JOIN category_patterns c ON c.priority = m.category_rule
        LEFT JOIN dtype_patterns d ON d.priority = m.dtype_rule
        """
    )
    con.execute(
        """
        CREATE OR REPLACE VIEW labelled_kernels AS
        SELECT k.rank, k.kernel_id, k.device_id, k.stream_id, k.pid, k.tid, k.start_ns, k.end_ns, k.dur_ns, k.name,
               k.short_name, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread,
               k.shared_memory_bytes, k.correlation_id, k.launch_kind, k.launch_api, k.launch_call_id, k.graph_id,
               k.graph_node_id, k.external_id, l.category, l.dtype, l.attention_phase_hint
        FROM kernels k JOIN kernel_name_labels l
          ON coalesce(k.name, '') = l.name_key AND coalesce(k.short_name, '') = l.short_key
        """
    )


LABEL_COLUMNS = {
    "category": "gemm, attention, conv, norm, activation, rotary, kv_cache_write, reduction_softmax, communication, "
                "memory, sampling, fused, elementwise, moe_routing, embedding, optimizer, other (`category_patterns`)",
    "dtype": "math dtype the name states (fp4, fp8, int8, bf16, fp16, tf32, fp32, fp64); NULL when the name does not "
             "say (`dtype_patterns`)",
    "attention_phase_hint": "'prefill' or 'decode' for attention kernels written for one phase only (paged_attention, "
                            "BatchDecode, MMHA/XQA → decode; BatchPrefill, fmha_v2 context → prefill); NULL for "
                            "kernels serving both (FlashAttention in vLLM V1)",
}

STAGE = Stage(
    name="categories",
    doc="Kernel category, math dtype and attention phase hint from the kernel's name "
        "(`src/traceview/analysis/categories.toml`; the first matching pattern wins).",
    requires=("kernels",),
    creates=(
        Relation("kernel_name_labels", "distinct kernel (name, short_name)", {
            "name_key": "kernels.name ('' for NULL)", "short_key": "kernels.short_name ('' for NULL)", **LABEL_COLUMNS},
            transient=True),
        Relation("category_patterns", "category pattern, in priority order", {
            "priority": "order of the pattern in categories.toml (first match wins)",
            "category": "the label it gives", "field": "`name` or `short_name`: what the pattern is matched against",
            "pattern": "RE2 regex", "phase_hint": "the attention phase hint it gives, if any"}),
        Relation("dtype_patterns", "dtype pattern, in priority order", {
            "priority": "order of the pattern in categories.toml (first match wins)",
            "dtype": "the label it gives ('none': stop and leave dtype NULL)",
            "field": "`name` or `short_name`", "pattern": "RE2 regex"}),
        Relation("labelled_kernels", "kernel, for the stages before `kernels` is assembled", {
            **{column: f"`kernels.{column}`" for column in db.contract_columns("kernels")}, **LABEL_COLUMNS},
            view=True, transient=True),
    ),
    adds=(Columns("kernels", LABEL_COLUMNS),),
    run=lambda con, context: classify_kernels(con),
)
