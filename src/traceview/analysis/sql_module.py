"""Analysis SQL as named modules: one `.sql` file per stage under analysis/sql/, in the manner of
Perfetto's trace-processor standard library.

A module opens with a header that names the stage, says what it does, what it requires and what
it creates; before each statement that creates a relation a block documents one row and every
column, with its meaning and unit. The `Stage` declaration (what the scheduler orders and
docs/analysis.md lists) is read from these comments, so the docs cannot drift from the SQL:

    -- stage: roofline
    -- Achieved FLOP/s and bandwidth against the matched GPU's roof.
    -- requires: kernels, devices
    -- creates: roofline_kernels

    -- view roofline_kernels: one row per kernel with an accepted cost
    --   rank: trace rank
    --   pct_of_roof: max(FLOPs/peak, bytes/bandwidth) / time; NULL when
    --     a term has no peak
    CREATE OR REPLACE VIEW roofline_kernels AS ...;

Relations are `table`, `view` or `transient table` (dropped by the stage that consumes it); `adds to
TABLE:` documents the columns a stage's facts add to a schema table once `kernels` is assembled.
A relation that repeats another's columns says `--   *: the columns of OTHER from COLUMN on`.
`-- section: NAME` lines split the statements into parts Python runs separately (under a condition,
or around a values table). Python values reach the SQL only as bound `$name` parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Mapping

import duckdb

from traceview.analysis.stage import Columns, Context, Relation, Stage
from traceview.errors import TraceviewError

_RELATION = re.compile(r"^-- (transient table|table|view) (\w+): one row per (.+)$")
_ADDS = re.compile(r"^-- adds to (\w+):$")
_COLUMN = re.compile(r"^--   (\w+): (.+)$")
_MORE = re.compile(r"^--     +(.+)$")
_INHERIT = re.compile(r"^--   \*: the columns of (\w+) from (\w+) on$")
_HEADER = re.compile(r"^-- (stage|requires|creates|rewrites): ?(.*)$")
_SECTION = re.compile(r"^-- section: (\w+)$")


@dataclass(frozen=True)
class Statement:
    sql: str
    parameters: frozenset[str]


@dataclass(frozen=True)
class SqlModule:
    """One parsed .sql file: its declaration and its statements by section ('' before the first)."""

    name: str
    doc: str
    requires: tuple[str, ...]
    creates: tuple[Relation, ...]
    adds: tuple[Columns, ...]
    rewrites: tuple[str, ...]
    sections: Mapping[str, tuple[Statement, ...]]

    def run(self, con: duckdb.DuckDBPyConnection, section: str | None = None, **parameters: Any) -> None:
        """Run one section's statements in file order (every statement when `section` is None), each given
        the parameters it names."""
        names = list(self.sections) if section is None else [section]
        for name in names:
            for statement in self.sections[name]:
                missing = statement.parameters - parameters.keys()
                if missing:
                    raise TraceviewError(f"analysis module {self.name}: no value for ${', $'.join(sorted(missing))}")
                con.execute(statement.sql, {p: parameters[p] for p in statement.parameters})

    def stage(self, run: Callable[[duckdb.DuckDBPyConnection, Context], None] | None = None) -> Stage:
        """The scheduler's declaration; without `run`, the stage runs every statement with no parameters."""
        return Stage(name=self.name, doc=self.doc, requires=self.requires, creates=self.creates, adds=self.adds,
                     rewrites=self.rewrites, run=run or (lambda con, context: self.run(con)))


@lru_cache(maxsize=None)
def load(name: str) -> SqlModule:
    """The module analysis/sql/NAME.sql, parsed once per process."""
    text = resources.files("traceview.analysis").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
    try:
        return parse(name, text)
    except ValueError as exc:
        raise TraceviewError(f"analysis/sql/{name}.sql: {exc}") from None


def parse(name: str, text: str) -> SqlModule:
    lines = text.splitlines()
    header: dict[str, list[str]] = {"stage": [], "requires": [], "creates": [], "rewrites": []}
    doc: list[str] = []
    body = 0
    key = None
    for body, line in enumerate(lines):
        if not line.startswith("--"):
            break
        match = _HEADER.match(line)
        if match:
            key = match.group(1)
            header[key].append(match.group(2))
        elif key in ("requires", "creates", "rewrites") and _MORE.match(line):
            header[key].append(_MORE.match(line).group(1))
        elif key == "stage" and line.strip() != "--":
            doc.append(line[3:])
    if header["stage"] != [name]:
        raise ValueError(f"the header must open with '-- stage: {name}'")
    listed = {k: tuple(n.strip() for part in v for n in part.split(",") if n.strip()) for k, v in header.items()}
    if not listed["requires"]:
        raise ValueError("the header names no '-- requires:'")
    relations, adds = _blocks(lines[body:])
    declared = tuple(r.name for r in relations)
    if declared != listed["creates"]:
        raise ValueError(f"'-- creates:' lists {', '.join(listed['creates']) or 'nothing'} but the blocks "
                         f"document {', '.join(declared) or 'nothing'}")
    return SqlModule(name=name, doc=" ".join(doc), requires=listed["requires"], creates=relations, adds=adds,
                     rewrites=listed["rewrites"], sections=_sections("\n".join(lines[body:])))


def _blocks(lines: list[str]) -> tuple[tuple[Relation, ...], tuple[Columns, ...]]:
    """The documented relations and added columns, in file order."""
    relations: list[Relation] = []
    adds: list[Columns] = []
    columns: dict[str, str] | None = None
    last = None
    for line in lines:
        relation, added = _RELATION.match(line), _ADDS.match(line)
        if relation:
            kind, relation_name, row = relation.groups()
            columns = {}
            relations.append(Relation(relation_name, row, columns, view=kind == "view",
                                      transient=kind == "transient table"))
        elif added:
            columns = {}
            adds.append(Columns(added.group(1), columns))
        elif columns is not None and _INHERIT.match(line):
            source, first = _INHERIT.match(line).groups()
            inherited = next((r.columns for r in relations if r.name == source), None)
            if inherited is None or first not in inherited:
                raise ValueError(f"'{line}': no earlier relation {source} with a column {first}")
            names = list(inherited)
            columns.update((name, inherited[name]) for name in names[names.index(first):])
            last = None
        elif columns is not None and _COLUMN.match(line):
            last, meaning = _COLUMN.match(line).groups()
            if last in columns:
                raise ValueError(f"column {last} documented twice")
            columns[last] = meaning
        elif columns is not None and last in columns and _MORE.match(line):
            columns[last] += " " + _MORE.match(line).group(1)
        else:
            columns, last = None, None
    for block in (*relations, *adds):
        if not block.columns:
            raise ValueError(f"{getattr(block, 'name', getattr(block, 'table', ''))}: no column documented")
    return tuple(relations), tuple(adds)


def _sections(body: str) -> dict[str, tuple[Statement, ...]]:
    parts: dict[str, list[str]] = {"": []}
    current = ""
    for line in body.splitlines():
        match = _SECTION.match(line)
        if match:
            current = match.group(1)
            if current in parts:
                raise ValueError(f"section {current} appears twice")
            parts[current] = []
        else:
            parts[current].append(line)
    sections = {}
    for name, text in parts.items():
        statements = tuple(Statement(s.query, frozenset(s.named_parameters))
                           for s in duckdb.extract_statements("\n".join(text)) if s.query.strip())
        if statements or name:
            sections[name] = statements
    return sections
