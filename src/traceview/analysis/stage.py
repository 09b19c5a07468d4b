"""What an analysis stage needs and what it makes, declared beside its code.

Each analysis module declares a `Stage`: the relations it reads (`requires`: schema tables or
relations of earlier stages) and the ones it creates, every column with its meaning, in the spirit
of Perfetto's trace-processor standard library. The pipeline runs stages in order and refuses to
start one whose prerequisites are missing (an error, not NULLs); docs/analysis.md's table reference
is rendered from these declarations (`python -m traceview.analysis.docs`), and a test checks both
the page and that every declared column exists, in order, after an analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import duckdb

from traceview import profiling
from traceview.errors import TraceviewError


@dataclass(frozen=True)
class Relation:
    """A table or view a stage creates: its name, what one row is, and every column's meaning."""

    name: str
    row: str
    columns: dict[str, str]
    view: bool = False
    # dropped by the stage that consumes it (per-kernel facts joined into `kernels`)
    transient: bool = False


@dataclass(frozen=True)
class Columns:
    """Columns a stage adds to a schema table, assembled into it by analysis/assemble.py."""

    table: str
    columns: dict[str, str]


@dataclass
class Context:
    """What stages hand each other besides tables: the options and the GPU model accounting uses."""

    options: Any
    model: Any = None
    gpu: Any = None


@dataclass(frozen=True)
class Stage:
    name: str
    doc: str
    requires: tuple[str, ...]
    creates: tuple[Relation, ...] = ()
    adds: tuple[Columns, ...] = ()
    run: Callable[[duckdb.DuckDBPyConnection, Context], None] = field(default=lambda con, ctx: None, repr=False)


def relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema IN ('main', 'temp')"
    ).fetchall()}


def run_stages(con: duckdb.DuckDBPyConnection, stages: tuple[Stage, ...], context: Context) -> None:
    """Run each stage after checking that what it requires exists; a gap in the order is a bug, said so."""
    present = relations(con)
    for stage in stages:
        missing = [name for name in stage.requires if name not in present]
        if missing:
            raise TraceviewError(f"analysis stage {stage.name} needs {', '.join(missing)}, "
                                 "which no earlier stage created")
        with profiling.step("analysis", stage.name, lambda: _rows_created(con, stage)):
            stage.run(con, context)
        present = relations(con)


def _rows_created(con: duckdb.DuckDBPyConnection, stage: Stage) -> int:
    """Rows of the tables a stage created (views are counted where they are read), for --profile."""
    return sum(con.execute(f"SELECT count(*) FROM {relation.name}").fetchone()[0]
               for relation in stage.creates if not relation.view)


def render(stages: tuple[Stage, ...]) -> str:
    """The table reference of docs/analysis.md: per stage, what it reads, adds and creates."""
    lines = []
    for stage in stages:
        lines += [f"### Stage `{stage.name}`", "", stage.doc, "",
                  f"Reads: {', '.join(f'`{name}`' for name in stage.requires)}.", ""]
        for added in stage.adds:
            lines += [f"Adds to `{added.table}`:", "", "| column | meaning |", "|---|---|"]
            lines += [f"| `{added.table}.{name}` | {meaning} |" for name, meaning in added.columns.items()]
            lines.append("")
        for relation in stage.creates:
            kind = "view" if relation.view else "table"
            note = " Transient: dropped once `kernels` is assembled." if relation.transient else ""
            lines += [f"#### `{relation.name}` ({kind})", "", f"One row per {relation.row}.{note}", "",
                      "| column | meaning |", "|---|---|"]
            lines += [f"| `{name}` | {meaning} |" for name, meaning in relation.columns.items()]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
