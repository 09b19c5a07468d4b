"""The user-facing `kernels` and `memops`: their ingested columns plus each stage's facts, in one place.

Stages never alter the schema tables; each writes its facts to a table of its own (labels per
distinct name, costs and steps per kernel). This stage joins them back once, so rules and reports
read plain tables, and the columns docs/analysis.md lists for `kernels` are defined here and
nowhere else. Only the ingested columns are read from the old tables, so analysing a trace again
(other options) starts from the trace, not from the previous analysis.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import categories, roofline
from traceview.analysis.stage import Stage
from traceview.model import db


TRANSIENT = ("kernel_name_labels", "kernel_costs", "kernel_steps", "memop_steps")


def assemble(con: duckdb.DuckDBPyConnection) -> None:
    kernel_columns = ", ".join(f"k.{column}" for column in db.contract_columns("kernels"))
    costs = ", ".join(f"c.{column}" for column in roofline.COST_COLUMNS)
    labels = ", ".join(f"l.{column}" for column in categories.LABEL_COLUMNS)
    con.execute(
        f"""
        CREATE OR REPLACE TABLE kernels AS
        SELECT {kernel_columns}, {labels}, {costs}, s.step_id,
               CASE WHEN st.phase IS NULL THEN 'other' ELSE st.phase END AS phase
        FROM kernels k
        JOIN kernel_name_labels l ON coalesce(k.name, '') = l.name_key AND coalesce(k.short_name, '') = l.short_key
        LEFT JOIN kernel_costs c ON c.rank = k.rank AND c.kernel_id = k.kernel_id
        LEFT JOIN kernel_steps s ON s.rank = k.rank AND s.kernel_id = k.kernel_id
        LEFT JOIN steps st ON st.rank = k.rank AND st.step_id = s.step_id
        """
    )
    memop_columns = ", ".join(f"m.{column}" for column in db.contract_columns("memops"))
    con.execute(
        f"""
        CREATE OR REPLACE TABLE memops AS
        SELECT {memop_columns}, s.step_id
        FROM memops m LEFT JOIN memop_steps s ON s.rank = m.rank AND s.memop_id = m.memop_id
        """
    )
    con.execute("DROP VIEW labelled_kernels")
    for table in TRANSIENT:
        con.execute(f"DROP TABLE {table}")


STAGE = Stage(
    name="assemble",
    doc="`kernels` and `memops` as users query them: the ingested columns plus the columns the stages above "
        "add (`categories`, `kernel_costs`, `steps`), joined once.",
    requires=("kernels", "memops", "kernel_name_labels", "kernel_costs", "kernel_steps", "memop_steps", "steps"),
    run=lambda con, context: assemble(con),
    rewrites=("kernels", "memops", "labelled_kernels", *TRANSIENT),
)
