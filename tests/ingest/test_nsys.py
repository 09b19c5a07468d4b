"""Nsight Systems SQLite ingest across schema versions, checked against facts read from real exports."""

from __future__ import annotations

import pytest

from conftest import SHARED_TRACES, ingested, requires_shared

pytestmark = requires_shared
NSYS = SHARED_TRACES / "nsys"
BOLONGCHENG_FWD = NSYS / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


@pytest.mark.parametrize(
    ("name", "version", "schema"),
    [
        ("bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite", "2026.3.1.157", "3.27.0"),
        ("NVIDIA__Fuser__report3.sqlite", "2024.6.2.25", "3.16.1"),
        ("LeiWang1999__memfusion_artifact__report1.sqlite", "2023.1.2.43", "3.1.2"),
        ("MohanadOdema__DLProf__nsys_profile.sqlite", "2022.1.3.3", "2.9.1"),
        ("bwyogatama__Mordred-Deprecated__report1.sqlite", None, None),
    ],
)
def test_producer_version_from_either_metadata_table(name: str, version: str | None, schema: str | None) -> None:
    info = ingested(NSYS / name).sql("SELECT * FROM trace_info").to_dicts()[0]
    assert (info["source_format"], info["producer_version"], info["schema_version"]) == ("nsys", version, schema)


def test_runtime_names_lose_the_version_suffix() -> None:
    trace = ingested(BOLONGCHENG_FWD)
    assert trace.scalar(r"SELECT count(*) FROM api_calls WHERE regexp_matches(name, '_v[0-9]{4,}$')") == 0
    launches = dict(trace.con.execute("SELECT name, count(*) FROM api_calls WHERE is_launch GROUP BY ALL").fetchall())
    assert launches.get("cudaLaunchKernel", 0) > 0


def test_every_kernel_links_to_a_launch_of_its_own_process() -> None:
    trace = ingested(BOLONGCHENG_FWD)
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_api IS NULL OR tid IS NULL") == 0
    assert trace.scalar(
        """SELECT count(*) FROM kernels k JOIN api_calls a
           ON a.pid = k.pid AND a.correlation_id = k.correlation_id AND a.is_launch"""
    ) == 632


def test_gpu_properties_from_target_info() -> None:
    device = ingested(BOLONGCHENG_FWD).sql("SELECT * FROM devices").to_dicts()[0]
    assert device["name"] == "NVIDIA A100-SXM4-40GB"
    assert (device["sm_count"], device["memory_bandwidth_bytes_per_s"], device["compute_major"]) == (108, 1_555_200_000_000, 8)


def test_emit_nvtx_shapes_and_nesting() -> None:
    trace = ingested(BOLONGCHENG_FWD)
    row = trace.sql(
        "SELECT depth, input_dims FROM ranges WHERE name GLOB 'aten::bmm, op_id = *' ORDER BY start_ns LIMIT 1"
    ).to_dicts()[0]
    assert row["input_dims"].startswith("[[") and row["depth"] >= 2
    assert trace.sql("SELECT name, depth FROM ranges WHERE depth = 0").rows() == [("profile", 0)]


def test_nvtx_text_registered_through_text_id() -> None:
    """nsys 2023.1 stores every NVTX string in StringIds (textId), none in `text`."""
    trace = ingested(NSYS / "LeiWang1999__memfusion_artifact__report1.sqlite")
    assert trace.scalar("SELECT count(*) FROM ranges") == 59
    assert trace.scalar("SELECT count(*) FROM ranges WHERE name = ''") == 0


def test_failed_cuda_capture_keeps_the_capture_diagnostics() -> None:
    trace = ingested(NSYS / "lighttransport__gemm__profile.sqlite")
    codes = dict(trace.con.execute("SELECT code, count(*) FROM diagnostics GROUP BY ALL").fetchall())
    assert codes == {"diagnostic_event": 14, "no_kernels": 1}
    assert trace.scalar(
        "SELECT count(*) FROM diagnostics WHERE message = 'Not all CUDA events might have been collected.'"
    ) == 1


def test_post_export_mutated_kernel_table_reads_by_column_name() -> None:
    """DLProf appended columns to the kernel table after export; columns are read by name."""
    trace = ingested(NSYS / "MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite")
    assert trace.scalar("SELECT count(*) FROM kernels WHERE name = '' OR short_name = ''") == 0


def test_derived_short_names_match_nsys_short_names() -> None:
    """Kineto has no shortName; the one traceview derives must equal what nsys itself stores."""
    from conftest import NSYS_TRACES
    from traceview.model.db import short_kernel_name

    pairs = {
        (name, short)
        for path in NSYS_TRACES
        for name, short in ingested(path).con.execute("SELECT DISTINCT name, short_name FROM kernels").fetchall()
    }
    assert len(pairs) == 133
    assert [(n, s) for n, s in pairs if short_kernel_name(n) != s] == []


TABLES = ("kernels", "api_calls", "ranges", "memops", "devices", "diagnostics")


def _contents(trace) -> dict[str, list[tuple]]:
    return {table: trace.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in TABLES}


@pytest.mark.parametrize("name", [
    "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite",
    "LeiWang1999__memfusion_artifact__report1.sqlite",
    "MohanadOdema__DLProf__nsys_profile.sqlite",
])
def test_parallel_csv_dump_reads_the_same_tables_as_fetching_rows(name: str, monkeypatch) -> None:
    """The dump path (child processes, CSV, DuckDB) is used for large tables; force it on real exports."""
    import traceview
    from traceview.ingest import nsys

    by_rows = _contents(traceview.load(NSYS / name))
    monkeypatch.setattr(nsys, "DUMP_MIN_ROWS", 1)
    monkeypatch.setattr(nsys, "DUMP_CHUNK_ROWS", 7)  # several chunks per child, and a short last one
    dumped = {}
    real_dump = nsys._stage_dumped
    monkeypatch.setattr(nsys, "_stage_dumped", lambda *args: dumped.setdefault(args[2], real_dump(*args)))
    assert _contents(traceview.load(NSYS / name)) == by_rows
    assert dumped == {"_nsys_kernels": True, "_nsys_runtime": True}


def test_a_value_the_dump_cannot_parse_falls_back_to_fetching_rows(tmp_path, monkeypatch) -> None:
    """A text value where nsys writes integers (a hand-edited export) must not be read differently by the dump."""
    import shutil
    import sqlite3

    import traceview
    from traceview.errors import TraceviewError
    from traceview.ingest import nsys

    path = tmp_path / "edited.sqlite"
    shutil.copy(BOLONGCHENG_FWD, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'x,y' WHERE rowid = 3")
    conn.close()
    with pytest.raises(TraceviewError) as by_rows:
        traceview.load(path)
    monkeypatch.setattr(nsys, "DUMP_MIN_ROWS", 1)
    with pytest.raises(TraceviewError) as dumped:
        traceview.load(path)
    assert str(dumped.value) == str(by_rows.value)
    assert "Could not convert 'x,y'" in str(dumped.value)
