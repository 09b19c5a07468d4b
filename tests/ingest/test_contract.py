"""A reader that breaks the staging contract (db.STAGING_TABLES) is named, with the table and column, before
finishing runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from traceview import ingest
from traceview.errors import TraceviewError
from traceview.ingest import kineto
from traceview.model import db
from traceview.testing import llm_serving_spec, write_kineto

SMALL = llm_serving_spec(prefill_batches=(2,), decode_steps=2)
BREAKAGES = {
    "ALTER TABLE _stage_kernels DROP COLUMN graph_replay": "_stage_kernels has no column graph_replay (BOOLEAN)",
    "DROP TABLE _stage_ranges": "no table _stage_ranges",
    "CREATE OR REPLACE TEMP TABLE _stage_memops AS SELECT * REPLACE (bytes::VARCHAR AS bytes) FROM _stage_memops":
        "_stage_memops.bytes is VARCHAR, not BIGINT",
    "UPDATE trace_info SET source_format = 'kineto'": "trace_info.source_format is 'kineto', not 'broken'",
    "DELETE FROM trace_info": "no trace_info row",
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_reader_that_breaks_the_contract_is_named_with_the_table_and_column(
        breakage: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def read(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None) -> int:
        rank = kineto.read(path, con, rank)
        con.execute("UPDATE trace_info SET source_format = 'broken'")
        con.execute(breakage)
        return rank

    monkeypatch.setattr(ingest, "READERS", (dataclasses.replace(kineto.READER, name="broken", read=read),))
    path = write_kineto(SMALL, tmp_path / "t.json")
    with pytest.raises(TraceviewError) as error:
        ingest.ingest(path, duckdb.connect())
    assert str(error.value) == (f"{path}: the 'broken' reader broke the staging contract (docs/schema.md, "
                                f"What a reader must produce): {BREAKAGES[breakage]}")


def test_the_shipped_readers_stage_what_is_declared_with_types_it_takes(tmp_path: Path) -> None:
    """Kineto stages grid sizes as BIGINT for INTEGER contract columns: a type INTEGER takes, as the insert casts."""
    con = duckdb.connect()
    db.create_schema(con)
    kineto.read(write_kineto(SMALL, tmp_path / "t.json"), con, None)
    staged = dict(zip(con.table("_stage_kernels").columns, con.table("_stage_kernels").types))
    assert staged["grid_x"] == "BIGINT"
    assert db.staging_problems(con) == []
