"""The user-facing `kernels` and `memops`: their ingested columns plus each stage's facts, in one place.

Stages never alter the schema tables; each writes its facts to a table of its own (labels per
distinct name, costs and steps per kernel). This stage joins them back once, so rules and reports
read plain tables, and the columns docs/analysis.md lists for `kernels` are defined here and
nowhere else. Only the ingested columns are read from the old tables, so analysing a trace again
(other options) starts from the trace, not from the previous analysis. The SQL is
analysis/sql/assemble.sql.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module
from traceview.model import db


MODULE = sql_module.load("assemble")


def assemble(con: duckdb.DuckDBPyConnection) -> None:
    for table in ("kernels", "memops"):
        # schema.sql's columns of the table, the ones ingest writes: a list of names assemble.sql cannot spell
        con.execute(f"CREATE OR REPLACE TEMP VIEW _ingested_{db.ident(table)} AS "
                    f"SELECT {db.idents(db.contract_columns(table))} FROM {db.ident(table)}")
    MODULE.run(con)


STAGE = MODULE.stage(run=lambda con, context: assemble(con))
