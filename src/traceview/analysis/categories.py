"""Kernel category and math dtype from the kernel's name, as data.

The rules live in ``categories.toml`` beside this file: two ordered lists (``[[category]]`` and
``[[dtype]]``) of RE2 patterns; for each kernel the first matching rule wins. Keeping them as data
means a new library's naming grammar is a TOML edit, and the database carries the rules
(``category_patterns``, ``dtype_patterns``) so a user can ask SQL why a kernel got its label.

``classify_kernels`` adds three columns to ``kernels``:

* ``category``: one of ``CATEGORIES`` (``other`` when no rule matches);
* ``dtype``: one of ``DTYPES``, or NULL when the name does not tell the number format;
* ``attention_phase_hint``: ``prefill`` / ``decode`` for attention kernels written for one phase.

Matching runs in DuckDB (the same RE2 engine the patterns are validated with), once per distinct
(name, short_name) and joined back, so millions of kernels cost what a few hundred names cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.compat import tomllib
from traceview.errors import TraceviewError
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


def _check_rule(path: Path, section: str, index: int, entry: object, labels: tuple[str, ...],
                checker: duckdb.DuckDBPyConnection) -> Rule:
    """Validate one TOML entry; every problem names the file, the list and the entry's index."""
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
    try:  # RE2 as DuckDB compiles it, not Python's re: that is the engine that will run it
        checker.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as exc:
        raise ValueError(f"{where}: bad pattern {pattern!r}: {exc}") from None
    return Rule(index, entry["name"], entry["field"], pattern, hint)


@lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Parse and validate once per file version (the mtime is part of the cache key)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    checker = duckdb.connect()
    try:
        lists = []
        for section, labels in (("category", CATEGORIES[:-1]), ("dtype", DTYPES + (NO_DTYPE,))):
            entries = data.get(section)
            if not isinstance(entries, list) or not entries:
                raise ValueError(f"{path}: no [[{section}]] rules")
            lists.append(tuple(_check_rule(path, section, i, e, labels, checker) for i, e in enumerate(entries)))
    finally:
        checker.close()
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
    con.executemany("INSERT INTO category_patterns VALUES (?, ?, ?, ?, ?)",
                    [[r.priority, r.label, r.field, r.pattern, r.phase_hint] for r in categories])
    con.execute(
        "CREATE OR REPLACE TABLE dtype_patterns (priority INTEGER, dtype VARCHAR, field VARCHAR, pattern VARCHAR)"
    )
    con.executemany("INSERT INTO dtype_patterns VALUES (?, ?, ?, ?)",
                    [[r.priority, r.label, r.field, r.pattern] for r in dtypes])


def _read_only(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute(
        "SELECT readonly FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()[0][0])


def classify_kernels(con: duckdb.DuckDBPyConnection, path: str | Path = PATTERNS_FILE) -> None:
    """Set kernels.category, kernels.dtype and kernels.attention_phase_hint from the kernel names.

    Adds the columns if missing (re-running replaces the values) and (re)creates the
    ``category_patterns(priority, category, field, pattern, phase_hint)`` and
    ``dtype_patterns(priority, dtype, field, pattern)`` tables the labels came from. A saved
    database opened read-only keeps the labels it was saved with.
    """
    categories, dtypes = load_patterns(path)
    if _read_only(con):
        if all(db.has_column(con, "kernels", c) for c in ("category", "dtype", "attention_phase_hint")):
            return
        raise TraceviewError("kernel categories: the database is read-only; load the original trace to classify it")
    _register_patterns(con, categories, dtypes)
    for column in ("category", "dtype", "attention_phase_hint"):
        con.execute(f"ALTER TABLE kernels ADD COLUMN IF NOT EXISTS {column} VARCHAR")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _kernel_labels AS
        WITH names AS (SELECT DISTINCT name, short_name FROM kernels),
        matched AS (
            SELECT name, short_name, {_first_match(categories)} AS category_rule, {_first_match(dtypes)} AS dtype_rule
            FROM names
        )
        SELECT coalesce(m.name, '') AS name_key, coalesce(m.short_name, '') AS short_key,
               coalesce(c.category, 'other') AS category, nullif(d.dtype, '{NO_DTYPE}') AS dtype, c.phase_hint
        FROM matched m
        LEFT JOIN category_patterns c ON c.priority = m.category_rule
        LEFT JOIN dtype_patterns d ON d.priority = m.dtype_rule
        """
    )
    con.execute(
        """
        UPDATE kernels SET category = l.category, dtype = l.dtype, attention_phase_hint = l.phase_hint
        FROM _kernel_labels l
        WHERE coalesce(kernels.name, '') = l.name_key AND coalesce(kernels.short_name, '') = l.short_key
        """
    )
    con.execute("DROP TABLE _kernel_labels")
