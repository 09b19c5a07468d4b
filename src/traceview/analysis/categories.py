"""Kernel category and math dtype from the kernel's name, as data.

The rules live in ``categories.toml`` beside this file: two ordered lists (``[[category]]`` and
``[[dtype]]``) of RE2 patterns; for each kernel the first matching rule wins. Keeping them as data
means a new library's naming grammar is a TOML edit, and the database carries the rules
(``category_patterns``, ``dtype_patterns``) so a user can ask SQL why a kernel got its label.

``classify_kernels`` labels each distinct name (``kernel_name_labels``); the labels become the
``category``, ``dtype`` and ``attention_phase_hint`` columns of ``kernels`` (analysis/assemble.py).

Matching runs in DuckDB (the same RE2 engine the patterns are validated with), once per distinct
(name, short_name) and joined back, so millions of kernels cost what a few hundred names cost. The
SQL is analysis/sql/categories.sql, but for the one CASE whose arms are the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.analysis import sql_module
from traceview.analysis.stage import Stage
from traceview.compat import tomllib
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
MODULE = sql_module.load("categories")
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


def _check_patterns(path: Path, section: str, rules: tuple[Rule, ...], con: duckdb.DuckDBPyConnection | None) -> None:
    """Compile every pattern with RE2 as DuckDB does, not Python's re: that is the engine that will run
    them. One statement for the list; only a failure pays for finding the entry. On a cursor of `con` where
    given (the trace's), else of the scratch database, whose opening cost the sample's first stage 11-17 ms."""
    checker = con.cursor() if con is not None else db.scratch()
    try:
        MODULE.run(checker, "check_all", patterns=[r.pattern for r in rules])
    except duckdb.Error:
        for rule in rules:
            try:
                MODULE.run(checker, "check_one", pattern=rule.pattern)
            except duckdb.Error as exc:
                raise ValueError(f"{path}: [[{section}]] entry {rule.priority}: bad pattern {rule.pattern!r}: {exc}") from None
    finally:
        checker.close()


@lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Parse and check each entry's keys and labels once per file version (the mtime is part of the cache key);
    load_patterns compiles the patterns."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    lists = []
    for section, labels in (("category", CATEGORIES[:-1]), ("dtype", DTYPES + (NO_DTYPE,))):
        entries = data.get(section)
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{path}: no [[{section}]] rules")
        lists.append(tuple(_check_rule(path, section, i, e, labels) for i, e in enumerate(entries)))
    return lists[0], lists[1]


_compiled: set[tuple[Path, int]] = set()  # file versions whose patterns RE2 compiled


def load_patterns(path: str | Path = PATTERNS_FILE,
                  con: duckdb.DuckDBPyConnection | None = None) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """The (category rules, dtype rules) of a patterns file, in priority order, validated; the patterns are
    compiled once per file version, on `con` where given.

    Raises ValueError naming the file and the entry index for a missing key, an unknown label or
    field, or a pattern RE2 rejects.
    """
    path = Path(path).resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    categories, dtypes = _load(path, mtime)
    if (path, mtime) not in _compiled:
        for section, rules in (("category", categories), ("dtype", dtypes)):
            _check_patterns(path, section, rules, con)
        _compiled.add((path, mtime))
    return categories, dtypes


# what a rule's `field` names, as the CASE arms match it
_SUBJECT_SQL = {"name": "name", "short_name": "coalesce(short_name, name)"}


def _first_match_sql(kind: str, rules: tuple[Rule, ...]) -> tuple[str, dict[str, object]]:
    """One CASE giving the priority of the first matching rule, and its parameters. A bound parameter is a
    constant to DuckDB, so each regex compiles once; a join of the names with the pattern table compiles
    one a (name, pattern) pair: the stage took 20 times as long on 194 names, 180 times on 5,000."""
    arms = " ".join(f"WHEN regexp_matches({_SUBJECT_SQL[r.field]}, ${kind}_pattern_{i}) THEN ${kind}_priority_{i}"
                    for i, r in enumerate(rules))
    parameters = {f"{kind}_{field}_{i}": value for i, r in enumerate(rules)
                  for field, value in (("pattern", r.pattern), ("priority", r.priority))}
    return f"CASE {arms} END", parameters


def _pattern_table(kind: str, rules: tuple[Rule, ...], hints: bool) -> dict[str, list]:
    """The parameters of a pattern table (categories.sql): a list a column, in priority order."""
    columns = {"priorities": "priority", "labels": "label", "fields": "field", "patterns": "pattern"}
    if hints:
        columns["phase_hints"] = "phase_hint"
    return {f"{kind}_{name}": [getattr(rule, field) for rule in rules] for name, field in columns.items()}


def classify_kernels(con: duckdb.DuckDBPyConnection, path: str | Path = PATTERNS_FILE) -> None:
    """Label every distinct kernel name: `kernel_name_labels`, plus the pattern tables the labels came from.

    Matching runs once per distinct (name, short_name); analysis/assemble.py joins the labels onto
    `kernels`, so millions of kernels cost what a few hundred names cost.
    """
    categories, dtypes = load_patterns(path, con)
    MODULE.run(con, "patterns", **_pattern_table("category", categories, hints=True),
               **_pattern_table("dtype", dtypes, hints=False))
    category_rule_sql, category_parameters = _first_match_sql("category", categories)
    dtype_rule_sql, dtype_parameters = _first_match_sql("dtype", dtypes)
    # the one statement whose text depends on the patterns file, one CASE arm a rule; categories.sql has the rest
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _kernel_name_rules AS
        SELECT name, short_name, {category_rule_sql} AS category_rule, {dtype_rule_sql} AS dtype_rule
        FROM (SELECT DISTINCT name, short_name FROM kernels)
        """,
        category_parameters | dtype_parameters,
    )
    MODULE.run(con, "labels", no_dtype=NO_DTYPE)
    MODULE.run(con, "view")


def _transient_views(stage: Stage, names: tuple[str, ...]) -> Stage:
    """The stage with the views `names` transient (dropped by analysis/assemble.py): a module's blocks say
    `transient table`, `table` or `view`, and have no word for a transient view."""
    return replace(stage, creates=tuple(replace(r, transient=True) if r.name in names else r for r in stage.creates))


STAGE = _transient_views(MODULE.stage(run=lambda con, context: classify_kernels(con)), ("labelled_kernels",))
