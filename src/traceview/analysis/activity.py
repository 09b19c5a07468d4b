"""Device activity: one ordered timeline of every kernel and memop per GPU, its idle gaps and their cause.

Rules and reports ask the same questions of a GPU's timeline (when was it busy, where did it sit idle,
who ended each gap, was communication hidden behind compute), so the answers are built once, here,
after kernels carry their category and step. The SQL is analysis/sql/activity.sql (the timeline),
idle_gaps.sql and device_busy.sql (what is read off it); every interval fact in them rests on the running-max
window of analysis/intervals.py, invoked as its macros.
busiest_device is a view, computed when a rule or report reads it, so a filter on it is pushed down;
gpu_idle_gaps is a table: the budget, the host context and idle_by_kind read every gap; comm_islands (comm_islands.sql)
is a table: TV401 and TV402 read it.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module

# the timeline first, then what is read off it: stages apart, so that the steady state, the critical path and the
# collectives, which read only the timeline, start beside the gaps and the busy unions, and the communication
# islands, which only rules read, wait for a free core
MODULES = tuple(sql_module.load(name) for name in ("activity", "idle_gaps", "device_busy", "comm_islands"))
STAGES = tuple(module.stage() for module in MODULES)
STAGE, IDLE_GAPS_STAGE, DEVICE_BUSY_STAGE, COMM_ISLANDS_STAGE = STAGES


def build_activity(con: duckdb.DuckDBPyConnection) -> None:
    """Create every relation the four stages declare; needs kernels.category/step_id and memops.step_id."""
    for module in MODULES:
        module.run(con)
