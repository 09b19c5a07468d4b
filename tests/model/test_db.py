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
def test_statements_run_side_by_side_where_one_statement_leaves_cores_idle(all_cores: int) -> None:
    with traceview.load(REPO / "sample_traces" / "llm_serving.pt.trace.json.gz") as sample:
        assert db.side_by_side(sample.con) == memory.cores() == all_cores  # 2,480 kernels: one thread each
        assert sample.scalar("SELECT current_setting('threads')") == 1
    with traceview.load(VLLM_H100) as vllm:
        assert vllm.scalar("SELECT count(*) FROM ranges") > db.ROW_GROUP_ROWS  # 128,521 host ranges
        assert vllm.scalar("SELECT count(*) FROM kernels") < db.ROW_GROUP_ROWS  # 13,545 kernels
        assert db.side_by_side(vllm.con) == min(2, all_cores)  # two at a time, sharing the cores
        assert vllm.scalar("SELECT current_setting('threads')") == max(1, all_cores // 2)


def test_two_row_groups_of_device_rows_per_core_run_one_statement_but_two_stages_at_a_time_unless_memory_binds(
        all_cores: int) -> None:
    con = duckdb.connect()
    limit = 2 * all_cores * db.ROW_GROUP_ROWS
    con.execute("CREATE TABLE kernels AS SELECT range AS kernel_id FROM range($n)", {"n": limit - 11})
    con.execute("CREATE TABLE memops AS SELECT range AS memop_id FROM range(10)")
    for table in ("api_calls", "ranges"):
        con.execute(f"CREATE TABLE {table} AS SELECT range AS id FROM range(1)")
    assert db.side_by_side(con) == min(2, all_cores)  # one row short of two row groups per core
    db.fit_to_size(con)
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == max(1, all_cores // 2)
    con.execute("RESET threads")
    default_threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("INSERT INTO memops VALUES (10)")
    assert db.side_by_side(con) == 1
    db.fit_to_size(con)  # one statement at a time keeps every thread DuckDB gives it
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == default_threads
    assert db.side_by_side(con, stages=True) == min(2, all_cores)  # a stage's statements leave cores idle
    con.execute("SET memory_limit = '720MiB'")  # within a tenth of the 755 MB 491,520 kernels are sized for
    assert db.side_by_side(con, stages=True) == min(2, all_cores)
    con.execute("SET memory_limit = '640MiB'")  # below it
    assert db.side_by_side(con, stages=True) == 1
    con.execute("DELETE FROM kernels WHERE kernel_id >= 100")  # a small trace under the same limit
    assert db.side_by_side(con) == all_cores

