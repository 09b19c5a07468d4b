"""The model's small helpers that every stage leans on: metadata inserts and the side-by-side decision."""

from __future__ import annotations

import duckdb

import traceview
from traceview import memory
from conftest import REPO, VLLM_H100, requires_shared
from traceview.model import db


def test_metadata_rows_insert_in_batches_as_given() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a INTEGER, b VARCHAR, c DOUBLE)")
    rows = [[i, None if i % 3 else f"r{i}", i / 4] for i in range(2 * db.INSERT_BATCH + 500)]  # three statements
    db.insert_rows(con, "t", rows)
    db.insert_rows(con, "t", [])
    assert [list(r) for r in con.execute("SELECT * FROM t ORDER BY rowid").fetchall()] == rows


@requires_shared
def test_statements_run_side_by_side_and_on_one_thread_each_only_below_one_row_group(all_cores: int) -> None:
    default_threads = duckdb.connect().execute("SELECT current_setting('threads')").fetchall()[0][0]
    with traceview.load(REPO / "sample_traces" / "llm_serving.pt.trace.json.gz") as sample:
        assert db.side_by_side(sample.con) == memory.cores() == all_cores  # 2,480 kernels
        assert sample.scalar("SELECT current_setting('threads')") == 1
    with traceview.load(VLLM_H100) as vllm:
        assert vllm.scalar("SELECT count(*) FROM ranges") > db.ROW_GROUP_ROWS  # 128,521 host ranges
        assert db.side_by_side(vllm.con) == 1
        assert vllm.scalar("SELECT current_setting('threads')") == default_threads
