"""Device activity: one ordered timeline of every kernel and memop per GPU, its idle gaps and their cause.

Rules and reports ask the same questions of a GPU's timeline (when was it busy, where did it sit idle,
who ended each gap, was communication hidden behind compute), so the answers are built once, here,
after kernels carry their category and step. The SQL is analysis/sql/activity.sql; every interval fact in
it rests on the running-max window of analysis/intervals.py, invoked as its macros.
busiest_device and comm_islands are views, computed when a rule or report reads them, so a filter on them
is pushed down; gpu_idle_gaps is a table: the budget, the host context and idle_by_kind read every gap.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module

ACTIVITY = sql_module.load("activity")

STAGE = ACTIVITY.stage()


def build_activity(con: duckdb.DuckDBPyConnection) -> None:
    """Create every relation the stage declares; needs kernels.category/step_id and memops.step_id."""
    ACTIVITY.run(con)
