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
Interval arithmetic (analysis/intervals.py, the one place its windows are written) is invoked from a module
as a macro that the loader expands once, like Perfetto's `CREATE PERFETTO MACRO`: `busy_time!((SELECT rank,
device_id, start_ns, end_ns FROM kernels), (rank, device_id))` becomes `intervals.busy_time_sql(...)`'s text,
so the statement DuckDB plans is the one the Python stages compose. A relation argument is a parenthesised
query, keys a parenthesised list of names, anything else an SQL expression.
`-- section: NAME` lines split the statements into parts Python runs separately (under a condition,
or around a values table). Python values reach the SQL only as bound `$name` parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import duckdb

from traceview.analysis import intervals
from traceview.analysis.stage import Columns, Context, Relation, Stage
from traceview.errors import TraceviewError

_RELATION = re.compile(r"^-- (transient table|table|view) (\w+): one row per (.+)$")
_ADDS = re.compile(r"^-- adds to (\w+):$")
_COLUMN = re.compile(r"^--   (\w+): (.+)$")
_MORE = re.compile(r"^--     +(.+)$")
_INHERIT = re.compile(r"^--   \*: the columns of (\w+) from (\w+) on$")
_HEADER = re.compile(r"^-- (stage|requires|creates|rewrites): ?(.*)$")
_SECTION = re.compile(r"^-- section: (\w+)$")
_MACRO = re.compile(r"\b(\w+)!\(")
# name -> (the intervals.py function, what each argument is: a relation, keys, or an SQL expression)
MACROS: dict[str, tuple[Callable[..., str], tuple[str, ...]]] = {
    "with_prev_end": (intervals.with_prev_end_sql, ("relation", "keys", "keys")),
    "busy_islands": (intervals.busy_islands_sql, ("relation", "keys", "expression")),
    "islands_from_prev_end": (intervals.islands_from_prev_end_sql, ("relation", "keys", "expression")),
    "busy_time": (intervals.busy_time_sql, ("relation", "keys")),
    "islands_with_time_before": (intervals.islands_with_time_before_sql, ("relation", "keys")),
    "time_before": (intervals.time_before_sql, ("relation", "keys")),
    "busy_before": (intervals.busy_before_sql, ("expression", "expression")),
    "exposed_islands": (intervals.exposed_islands_sql, ("relation", "keys", "relation", "keys")),
    "bucket_width": (intervals.bucket_width_sql, ("relation",)),
    "in_buckets": (intervals.in_buckets_sql, ("relation", "relation")),
}


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

    def query(self, con: duckdb.DuckDBPyConnection, section: str, **parameters: Any) -> list[tuple]:
        """Run a section whose last statement is a query and return its rows: what Python acts on (a
        diagnostic's text, a model's step shapes)."""
        if not self.sections.get(section):
            raise TraceviewError(f"analysis module {self.name}: no section {section!r}")
        self.run(con, section, **parameters)
        return con.fetchall()

    def stage(self, run: Callable[[duckdb.DuckDBPyConnection, Context], None] | None = None) -> Stage:
        """The scheduler's declaration; without `run`, the stage runs every statement with no parameters."""
        return Stage(name=self.name, doc=self.doc, requires=self.requires, creates=self.creates, adds=self.adds,
                     rewrites=self.rewrites, run=run or (lambda con, context: self.run(con)))


@cache
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
                     rewrites=listed["rewrites"], sections=_sections(expand("\n".join(lines[body:]))))


def expand(text: str) -> str:
    """The text with every `name!(args)` macro replaced by its SQL, innermost arguments first."""
    start = 0
    while (match := _next_macro(text, start)) is not None:
        name = match.group(1)
        if name not in MACROS:
            raise ValueError(f"unknown macro {name}!(...): the macros are {', '.join(f'{m}!' for m in MACROS)}")
        end, arguments = _arguments(text, match.end())
        function, kinds = MACROS[name]
        if not len(arguments) <= len(kinds):
            raise ValueError(f"{name}!(...) takes at most {len(kinds)} arguments, got {len(arguments)}")
        values = [_argument(expand(argument), kind, name) for argument, kind in zip(arguments, kinds)]
        expanded = function(*values)
        text = text[:match.start()] + expanded + text[end:]
        start = match.start() + len(expanded)
    return text


def _next_macro(text: str, start: int) -> re.Match | None:
    """The first `name!(` at or after `start`: found by its `!(`, then the name before it (a regular expression
    searching for the name first tries every word of the module, a twentieth of a second at every import)."""
    while (bang := text.find("!(", start)) >= 0:
        match = _MACRO.match(text, _word_start(text, bang))
        if match is not None:
            return match
        start = bang + 2
    return None


def _word_start(text: str, end: int) -> int:
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return start


def _arguments(text: str, start: int) -> tuple[int, list[str]]:
    """The top-level comma-separated arguments from `start` (just past the opening parenthesis) to the matching
    one, and the index past it; quotes and nested parentheses are skipped."""
    depth, quoted, pieces, piece_start = 0, False, [], start
    for i in range(start, len(text)):
        char = text[i]
        if char == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char == ")":
            pieces.append(text[piece_start:i])
            return i + 1, [piece.strip() for piece in pieces]
        elif char == "," and not depth:
            pieces.append(text[piece_start:i])
            piece_start = i + 1
    raise ValueError("a macro's parentheses do not close")


def _argument(text: str, kind: str, name: str) -> Any:
    if kind == "expression":
        return text
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"{name}!(...): a {kind} argument is parenthesised, got {text[:40]!r}")
    inner = text[1:-1].strip()
    return inner if kind == "relation" else tuple(key.strip() for key in inner.split(",") if key.strip())


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
        statements = tuple(_statements("\n".join(text)))
        if statements or name:
            sections[name] = statements
    return sections


_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|\$([A-Za-z_]\w*)|;")


def _statements(text: str) -> list[Statement]:
    """The statements of `text`, split at the semicolons outside quotes and comments, each with the `$name`
    parameters it uses: a scan of the text, since parsing every module with DuckDB at import costs every
    command a tenth of a second; DuckDB checks each statement when it runs."""
    statements, start, parameters = [], 0, set()
    for token in _TOKEN.finditer(text + ";"):
        if token.group(1):
            parameters.add(token.group(1))
        elif token.group(0) == ";":
            sql = text[start:token.start()]
            if "".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip():
                statements.append(Statement(sql.strip() + ";", frozenset(parameters)))
            start, parameters = token.end(), set()
    return statements
