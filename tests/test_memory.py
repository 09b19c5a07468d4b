"""The default memory limit: sized from the input and then from its rows, within the machine's memory."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import traceview
from traceview import memory

MIB = 1 << 20
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "llm_serving.pt.trace.json.gz"


def test_limit_is_the_estimate_between_the_floor_and_duckdbs_own_ceiling() -> None:
    machine = 16 << 30
    assert memory.limit_bytes(100 * MIB, machine) == memory.FLOOR_BYTES
    assert memory.limit_bytes(3000 * MIB, machine) == 3000 * MIB
    assert memory.limit_bytes(64 << 30, machine) == int(0.8 * machine)
    # a small container: what is left once the process's memory outside DuckDB is counted, never below 64 MiB
    assert memory.limit_bytes(100 * MIB, 400 * MIB) == 144 * MIB
    assert memory.limit_bytes(100 * MIB, 256 * MIB) == 64 * MIB
    # a machine of a few GB keeps 60% of itself outside DuckDB, at most 2 GiB: the 2 M-kernel export completes in
    # a 1 GiB cgroup at 409.6 MiB and was killed at 768 MiB (docs/performance.md)
    assert memory.limit_bytes(64 << 30, 1 << 30) == (1 << 30) - int(0.6 * (1 << 30))
    assert memory.limit_bytes(64 << 30, 4 << 30) == 2 << 30
    assert memory.limit_bytes(64 << 30, 10 << 30) == int(0.8 * (10 << 30))


def test_input_bytes_read_a_gzip_members_uncompressed_size(tmp_path: Path) -> None:
    payload = b'{"traceEvents": []}' + b" " * 1_000_000
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(payload))
    assert memory.input_bytes(path) == (len(payload), ".json")
    plain = tmp_path / "export.sqlite"
    plain.write_bytes(b"x" * 4096)
    assert memory.input_bytes(plain) == (4096, ".sqlite")
    assert memory.parse_limit(path, 16 << 30) == memory.FLOOR_BYTES


def test_analysis_limit_grows_with_kernels_more_than_host_rows() -> None:
    machine = 64 << 30
    # the 2 M-kernel nsys export (2 M kernels, 2.2 M calls and ranges) and the 10x vLLM trace (138 k kernels and
    # memops, 1.4 M calls and ranges) of docs/performance.md
    assert memory.analysis_limit(2_000_000, 2_200_000, machine) == 2_000_000 * 1536 + 2_200_000 * 200
    assert memory.analysis_limit(138_180, 1_398_150, machine) == memory.FLOOR_BYTES
    # its tables, 300 MB of them, then count for more than its rows
    assert memory.analysis_limit(138_180, 1_398_150, machine, table_bytes=300_000_000) == 750_000_000
    assert memory.analysis_limit(2_000_000, 2_200_000, machine, table_bytes=930_000_000) == 2_000_000 * 1536 + 2_200_000 * 200


def test_load_sizes_the_limit_from_the_tables_it_loaded(monkeypatch) -> None:
    """Rows wider than the per-row estimate (here: as if each byte of the sample's tables stood for 1,000) raise it."""
    from traceview.model import db

    monkeypatch.delenv("TRACEVIEW_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(memory, "physical_memory", lambda: 64 << 30)
    monkeypatch.setattr(memory, "TABLE_FACTOR", 1000)
    with traceview.load(SAMPLE) as trace:
        expected = memory.limit_bytes(1000 * db.table_bytes(trace.con))
        assert expected > 2 * memory.FLOOR_BYTES
        limit = memory.setting_bytes(trace.scalar("SELECT current_setting('memory_limit')"))
        assert abs(limit - expected) < 0.05 * (1 << 30)  # DuckDB shows one decimal of GiB


def test_load_sets_the_limit_from_the_rows_and_the_user_limit_wins(monkeypatch) -> None:
    monkeypatch.delenv("TRACEVIEW_MEMORY_LIMIT", raising=False)
    with traceview.load(SAMPLE) as trace:
        assert trace.scalar("SELECT current_setting('memory_limit')") == "512.0 MiB"
    with traceview.load(SAMPLE, memory_limit="2GB") as trace:
        assert trace.scalar("SELECT current_setting('memory_limit')") == "1.8 GiB"  # DuckDB's 2 GB, in GiB
    monkeypatch.setenv("TRACEVIEW_MEMORY_LIMIT", "700MB")
    with traceview.load(SAMPLE) as trace:
        assert trace.scalar("SELECT current_setting('memory_limit')") == "667.5 MiB"


@pytest.mark.parametrize(("limit", "shown"), [(memory.FLOOR_BYTES, "512.0 MiB"), (3_000_000_000, "2.7 GiB")])
def test_as_setting_round_trips_through_duckdb(limit: int, shown: str) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{memory.as_setting(limit)}'")
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == shown


def test_a_reader_widens_only_a_limit_traceview_chose() -> None:
    import duckdb

    ceiling = memory.as_setting(memory.limit_bytes(memory.physical_memory(), memory.physical_memory()))
    chosen, given = duckdb.connect(), duckdb.connect()
    for con in (chosen, given):
        con.execute("SET memory_limit = '512MiB'")
    memory.sized(chosen)
    for con in (chosen, given):
        memory.widen_for_parse(con)
    probe = duckdb.connect()
    probe.execute(f"SET memory_limit = '{ceiling}'")
    assert chosen.execute("SELECT current_setting('memory_limit')").fetchone() == \
        probe.execute("SELECT current_setting('memory_limit')").fetchone()
    assert given.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "512.0 MiB"


def test_blocks_are_held_for_reuse_past_the_floor_where_the_machine_has_room_and_never_shrink() -> None:
    import duckdb

    def held(con) -> str:
        return con.execute("SELECT current_setting('block_allocator_memory')").fetchone()[0]

    machine = 16 << 30
    con = duckdb.connect()
    memory.hold_blocks(con, memory.FLOOR_BYTES, machine)  # a small trace: page faults cost nothing worth a pool
    assert held(con) == "0 bytes"
    memory.hold_blocks(con, 3_000_000_000, machine)
    assert held(con) == "2.7 GiB"
    memory.hold_blocks(con, 1_000_000_000, machine)  # DuckDB refuses to shrink the pool: a smaller one keeps it
    assert held(con) == "2.7 GiB"
    memory.hold_blocks(con, 4 << 30, machine)
    assert held(con) == "4.0 GiB"
    # a 1 GB container: the limit (768 MiB) and a pool as large do not both fit, so no pool
    small = duckdb.connect()
    memory.hold_blocks(small, memory.limit_bytes(4 << 30, 1 << 30), 1 << 30)
    assert held(small) == "0 bytes"
    # one of audit's 4 workers on the 16 GB machine has a quarter of it: a 3 GB limit and its pool do not fit
    shared = duckdb.connect()
    try:
        memory.share_machine(4)
        memory.hold_blocks(shared, 3_000_000_000, machine)
        assert held(shared) == "0 bytes"
        memory.hold_blocks(shared, 1_500_000_000, machine)
        assert held(shared) == "1.3 GiB"
    finally:
        memory.share_machine(1)


@pytest.mark.parametrize(("text", "size"), [("8GB", 8 * 10**9), ("512MiB", 512 << 20), (" 1.5 gib ", 3 << 29),
                                            ("700 B", 700)])
def test_setting_bytes_reads_sizes_as_duckdb_does(text: str, size: int) -> None:
    assert memory.setting_bytes(text) == size


def test_load_holds_blocks_up_to_the_estimate_and_never_past_the_users_limit(monkeypatch) -> None:
    monkeypatch.delenv("TRACEVIEW_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(memory, "analysis_limit", lambda kernels, host_rows, **_: 3_000_000_000)  # a 2 M-kernel trace's
    monkeypatch.setattr(memory, "physical_memory", lambda: 16 << 30)  # room for that limit twice over
    with traceview.load(SAMPLE) as trace:
        assert trace.scalar("SELECT current_setting('block_allocator_memory')") == "2.7 GiB"
    with traceview.load(SAMPLE, memory_limit="2GB") as trace:
        assert trace.scalar("SELECT current_setting('block_allocator_memory')") == "1.8 GiB"
        assert trace.scalar("SELECT current_setting('memory_limit')") == "1.8 GiB"
    monkeypatch.undo()
    with traceview.load(SAMPLE) as trace:
        assert trace.scalar("SELECT current_setting('block_allocator_memory')") == "0 bytes"
