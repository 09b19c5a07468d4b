"""db.STAGING_TABLES is exactly what finish_stages reads: every declared column is needed, and nothing else is."""

from __future__ import annotations

import duckdb
import pytest

from traceview.model import db

LINK = db.LaunchLink.CORRELATION


def _staged(con: duckdb.DuckDBPyConnection) -> None:
    db.create_staging_tables(con)
    con.execute("INSERT INTO trace_info (rank, source_format) VALUES (0, 'test')")


def test_empty_declared_stages_pass_the_check_and_finish() -> None:
    con = duckdb.connect()
    db.create_schema(con)
    _staged(con)
    assert db.staging_problems(con) == []
    db.finish_stages(con, 0, LINK)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '\\_stage\\_%' ESCAPE '\\'"
                       ).fetchall() == [(0,)]


@pytest.mark.parametrize("stage", db.STAGING_TABLES, ids=lambda stage: stage.table)
def test_finishing_needs_every_declared_column(stage: db.StagingTable) -> None:
    con = duckdb.connect()
    db.create_schema(con)
    for column in stage.columns:
        _staged(con)
        con.execute(f"ALTER TABLE {stage.name} DROP COLUMN {column.name}")
        assert db.staging_problems(con) == [f"{stage.name} has no column {column.name} ({column.type})"]
        with pytest.raises(duckdb.BinderException):
            db.finish_stages(con, 0, LINK)
        db.drop_stages(con)

