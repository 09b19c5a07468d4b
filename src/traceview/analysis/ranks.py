"""Ranks side by side: the same collective on every rank, who waited in it for whom, and stragglers per step.

In a collective every participant spins until the last one arrives, so a rank that reaches it early
shows a longer communication kernel, and a data-parallel job runs at the pace of its slowest rank.
The n-th communication kernel of one family and name on each participant (a (rank, device) pair) is
one collective: the schema keeps no NCCL sequence number, so order of occurrence is the match, and a
(family, name) is matched only where every participant that ran it ran it equally often (otherwise
the order cannot be trusted, and an `unmatched_collectives` diagnostic says which were left out).

Separate per-rank files may be on clocks that are offset from each other, so the wait is measured by
duration: a participant's duration minus the shortest duration of that collective, which is the
transfer itself with no waiting (this assumes the transfer takes equally long everywhere; an
asymmetric collective - a broadcast root, a pipeline send - shows its asymmetry as wait). Start
skew, which needs one clock, is given only where every participant comes from the same trace file.
The SQL is analysis/sql/ranks.sql; Python only words the diagnostic.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module
from traceview.model import db

MODULE = sql_module.load("ranks")

STAGE = MODULE.stage(run=lambda con, context: build_ranks(con))


def build_ranks(con: duckdb.DuckDBPyConnection) -> None:
    """Create every relation of analysis/sql/ranks.sql."""
    MODULE.run(con, "")
    _say_unmatched(con)
    MODULE.run(con, "summaries")


def _say_unmatched(con: duckdb.DuckDBPyConnection) -> None:
    """Communication kernels that several participants ran unequally often cannot be paired by order."""
    rows = MODULE.query(con, "unmatched")
    if not rows:
        return
    listed = "; ".join(f"{family} {name[:60]} ({participants} participants, {fewest} to {most} runs)"
                       for family, name, participants, fewest, most in rows[:3])
    more = f"; and {len(rows) - 3} more" if len(rows) > 3 else ""
    rank = MODULE.query(con, "diagnostic_rank")[0][0]
    db.add_diagnostic(con, rank, "analysis", "info", "unmatched_collectives",
                      f"{len(rows)} communication kernel name{'' if len(rows) == 1 else 's'} ran on several ranks "
                      "or devices but not equally often, so their n-th runs cannot be paired and no wait is measured "
                      f"for them: {listed}{more}")
