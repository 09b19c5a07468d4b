"""What an analysis stage needs and what it makes, declared beside its code.

Each analysis module declares a `Stage`: the relations it reads (`requires`: schema tables or
relations of earlier stages) and the ones it creates, every column with its meaning, in the spirit
of Perfetto's trace-processor standard library. The pipeline runs stages in order and refuses to
start one whose prerequisites are missing (an error, not NULLs); docs/analysis.md's table reference
is rendered from these declarations (`python -m traceview.analysis.docs`), and a test checks both
the page and that every declared column exists, in order, after an analysis.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Callable

import duckdb

from traceview import profiling
from traceview.errors import TraceviewError
from traceview.model import db


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
    # existing relations it replaces or drops (devices rewrites `devices`; assemble rewrites `kernels` with
    # the columns the stages add and drops the transient relations): the scheduler orders it after every
    # stage that reads them
    rewrites: tuple[str, ...] = ()

    def writes(self) -> set[str]:
        return {r.name for r in self.creates} | set(self.rewrites)


def run_stages(con: duckdb.DuckDBPyConnection, stages: tuple[Stage, ...], context: Context,
               threads: int = 1, share_cores: bool = False) -> None:
    """Run each stage after checking that what it requires exists; a gap in the order is a bug, said so.

    With `threads` > 1 a stage starts as soon as the earlier stages it depends on are done (it reads
    what they write, or writes what they read or write) and a thread is free, on a cursor of its own; of the
    stages ready when a thread frees, the first listed starts, so the list order is the priority. What each
    stage reads and writes is as in the listed order, so the tables are the same. With `share_cores`
    (`db.shares_cores`), the stages running at any moment share the cores, set before a stage starts: a stage
    that runs alone, as step work does while nothing else is ready, gets them all (the 10x vLLM trace's analysis
    2.38 -> 2.23 s, medians of 10 in turns, each turn faster, against one thread a stage throughout)."""
    _check_inputs(con, stages)
    if threads <= 1:
        for stage in stages:
            _run(con, stage, context)
        return
    after = waits_for(stages)
    done: set[str] = set()
    waiting = list(stages)
    shared = 0  # the stages the cores are shared among now
    # the share the rules and report sections after are sized for (db.fit_to_size), put back when the stages end
    sized = con.execute("SELECT current_setting('threads')").fetchall()[0][0] if share_cores else None
    try:
        with profiling.overlapping("analysis"), db.cursor_pool(con, threads) as submit:
            running: dict[Future, Stage] = {}
            while waiting or running:
                ready = [s for s in waiting if all(name in done for name in after[s.name])]
                starting = ready[:threads - len(running)]
                if share_cores and len(running) + len(starting) != shared:  # before the new stages start
                    shared = len(running) + len(starting)
                    db.share_cores(con, shared)
                for stage in starting:
                    waiting.remove(stage)
                    running[submit(_run, stage, context)] = stage
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    done.add(running.pop(future).name)
                    future.result()  # a failure starts no more stages; leaving the pool waits for the running ones
    finally:
        if share_cores:
            con.execute("SET threads = $threads", {"threads": sized})


def waits_for(stages: tuple[Stage, ...]) -> dict[str, list[str]]:
    """Each stage's earlier stages that it must wait for: it reads what they write, or writes what they
    read or write. Any order that keeps these gives the tables the listed order gives."""
    def depends(stage: Stage, earlier: Stage) -> bool:
        return bool(set(stage.requires) & earlier.writes()
                    or stage.writes() & (set(earlier.requires) | earlier.writes()))

    return {stage.name: [earlier.name for earlier in stages[:i] if depends(stage, earlier)]
            for i, stage in enumerate(stages)}


def _check_inputs(con: duckdb.DuckDBPyConnection, stages: tuple[Stage, ...]) -> None:
    """Before any stage runs, what a stage requires and no earlier stage creates must exist (the schema's
    tables), each name looked up once: a lookup of every stage's every input cost a small trace's analysis
    25 ms (120 lookups). What an earlier stage creates exists once it is done: a test checks that every stage
    creates what it declares (tests/analysis/test_stages.py)."""
    known: set[str] = set()  # created by an earlier stage, or found already
    for stage in stages:
        missing = [name for name in stage.requires if name not in known and not db.has_table(con, name)]
        if missing:
            raise TraceviewError(f"analysis stage {stage.name} needs {', '.join(missing)}, "
                                 "which no earlier stage created")
        known |= set(stage.requires) | stage.writes()


def _run(con: duckdb.DuckDBPyConnection, stage: Stage, context: Context) -> None:
    with profiling.step("analysis", stage.name, lambda: _rows_created(con, stage)):
        stage.run(con, context)


def _rows_created(con: duckdb.DuckDBPyConnection, stage: Stage) -> int:
    """Rows of the tables a stage created (views are counted where they are read), for --profile."""
    return sum(con.execute(f"SELECT count(*) FROM {db.ident(relation.name)}").fetchall()[0][0]  # fetchone leaves the
               for relation in stage.creates if not relation.view)  # result open, and the next register fails


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
