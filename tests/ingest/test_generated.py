"""Ingest of generated traces whose ground truth is known exactly (traceview.testing)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceview
from traceview.testing import (
    GpuSpec, Kernel, Range, TraceSpec, llm_serving_spec, summarize, two_process_spec, write_kineto, write_nsys,
)

GPU = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0)


def test_two_process_export_links_every_kernel_to_its_own_process(tmp_path: Path) -> None:
    spec = two_process_spec()
    trace = traceview.load(write_nsys(spec, tmp_path / "ddp.sqlite"))
    truth = {(k.pid, k.correlation_id): (k.launch_api, k.tid) for k in spec.kernels}
    rows = trace.con.execute("SELECT pid, correlation_id, launch_api, tid FROM kernels").fetchall()
    assert {(pid, corr): (api, tid) for pid, corr, api, tid in rows} == truth
    links = trace.scalar(
        """SELECT max(n) FROM (SELECT count(*) AS n FROM kernels k JOIN api_calls a
           ON a.pid = k.pid AND a.correlation_id = k.correlation_id GROUP BY k.rank, k.kernel_id)"""
    )
    assert links == 1
    naive = trace.scalar(
        "SELECT count(*) FROM kernels k JOIN api_calls a ON a.correlation_id = k.correlation_id"
    )
    assert naive > len(spec.kernels), "the fixture must make a correlation-only join wrong"
    assert set(trace.sql("SELECT DISTINCT domain FROM ranges")["domain"].to_list()) == {None, "NCCL"}


@pytest.mark.parametrize("version", ["2026.3", "2023.1", "legacy"])
def test_every_nsys_schema_version_reads_the_same(tmp_path: Path, version: str) -> None:
    spec = llm_serving_spec()
    truth = summarize(spec)
    trace = traceview.load(write_nsys(spec, tmp_path / f"serve-{version}.sqlite", version=version))
    assert trace.scalar("SELECT count(*) FROM kernels") == truth["kernel_count"]
    assert trace.scalar("SELECT sum(dur_ns) FROM kernels") == truth["kernel_sum_ns"]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_kind = 'graph'") == truth["graph_kernel_count"]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_api IS NULL") == 0


def test_both_formats_of_one_run_give_the_same_kernels(tmp_path: Path) -> None:
    """The schema is the contract: the same run read from nsys and from Kineto gives the same rows."""
    spec = llm_serving_spec()
    query = """SELECT start_ns - min(start_ns) OVER () AS t, dur_ns, name, short_name, launch_kind,
                      grid_x, block_x, stream_id FROM kernels ORDER BY kernel_id"""
    nsys_rows = traceview.load(write_nsys(spec, tmp_path / "s.sqlite")).sql(query)
    kineto_rows = traceview.load(write_kineto(spec, tmp_path / "s.json.gz")).sql(query)
    assert nsys_rows.equals(kineto_rows)
    assert nsys_rows.height == summarize(spec)["kernel_count"]


def test_legacy_2021_kineto_flavour(tmp_path: Path) -> None:
    kernels = tuple(Kernel(f"kernel_{i}", 1_000_000 + 50_000 * i, 20_000, correlation_id=i + 1) for i in range(4))
    spec = TraceSpec(gpus=(GPU,), kernels=kernels)
    trace = traceview.load(write_kineto(spec, tmp_path / "old.pt.trace.json", flavour="legacy2021"))
    assert trace.sql("SELECT dur_ns, launch_api FROM kernels").rows() == [(20_000, "cudaLaunchKernel")] * 4
    assert trace.scalar("SELECT time_base FROM trace_info") == "unix_epoch"


def test_range_nesting_depth(tmp_path: Path) -> None:
    """Outer [0, 100), children [10, 40) and [40, 90) (back to back: siblings), grandchild [20, 30), a mark-like [50, 50)."""
    ranges = (
        Range("outer", 0, 100_000), Range("a", 10_000, 40_000), Range("b", 40_000, 90_000),
        Range("a.1", 20_000, 30_000), Range("b.0", 50_000, 50_000),
    )
    spec = TraceSpec(gpus=(GPU,), kernels=(Kernel("k", 60_000, 1_000),), ranges=ranges)
    trace = traceview.load(write_nsys(spec, tmp_path / "nest.sqlite"))
    depths = dict(trace.con.execute("SELECT name, depth FROM ranges").fetchall())
    assert depths == {"outer": 0, "a": 1, "b": 1, "a.1": 2, "b.0": 2}


def test_range_depth_is_per_thread_and_kind_and_the_longer_of_two_opening_together_is_the_parent(tmp_path) -> None:
    """Depth counts only the ranges of the range's own thread and kind, in one sorted pass over all of them: of
    two opening together the longer holds the shorter, whichever is listed first; another thread's ranges and
    another kind's on the same thread, open at the same time, do not count."""
    ranges = (
        Range("short", 10_000, 20_000, kind="cpu_op"), Range("long", 10_000, 50_000, kind="cpu_op"),
        Range("inner", 10_000, 15_000, kind="cpu_op"), Range("after", 20_000, 30_000, kind="cpu_op"),
        Range("annotation", 0, 60_000, kind="user_annotation"),
        Range("other thread", 5_000, 60_000, tid=2000, kind="cpu_op"),
        Range("other thread child", 10_000, 12_000, tid=2000, kind="cpu_op"),
    )
    spec = TraceSpec(gpus=(GPU,), kernels=(Kernel("k", 60_000, 1_000),), ranges=ranges)
    trace = traceview.load(write_kineto(spec, tmp_path / "lanes.pt.trace.json"))
    depths = dict(trace.con.execute("SELECT name, depth FROM ranges").fetchall())
    assert depths == {"long": 0, "short": 1, "inner": 2, "after": 1, "annotation": 0,
                      "other thread": 0, "other thread child": 1}
