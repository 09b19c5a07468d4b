"""Device activity: a generated trace whose gaps and causes are set by hand, and a real trace checked in Python."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import traceview
from conftest import DLRM_DIR, VLLM_H100, analysed, requires_shared, union_ns
from traceview.analysis.activity import STAGES, build_activity
from traceview.testing import H100_SXM, ApiCall, Kernel, Memop, TraceSpec, write_nsys

US = 1_000
PID = 4242
GEMM = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _kernel(name: str, start_us: int, dur_us: int, launch_us: int, **kwargs) -> Kernel:
    return Kernel(name, start_us * US, dur_us * US, pid=PID, tid=PID, launch_start_ns=launch_us * US,
                  launch_dur_ns=5 * US, **kwargs)


def _gaps_spec() -> TraceSpec:
    """GPU 0, times in us: a GEMM [1000, 1500) with a shorter one inside it on another stream
    [1200, 1400), so the running end stays 1500; then
      gap [1500, 1700): the kernel's launch call starts at 1600, after the GPU went idle -> host_launch_late
      gap [1800, 2000): a memcpy launched at 1700, before the gap                      -> launch_overhead
      gap [2050, 3000): the host sits in cudaStreamSynchronize [2020, 2940)             -> sync_wait
    and an NCCL all-reduce [3050, 3300) beside a GEMM [3000, 3100): 50 us hidden, 200 us exposed.
    GPU 1 runs one 10 us kernel inside GPU 0's first island."""
    kernels = (
        _kernel(GEMM, 1000, 500, 900),
        _kernel(GEMM, 1200, 200, 950, stream_id=8),
        _kernel(GEMM, 1700, 100, 1600),
        _kernel(GEMM, 3000, 100, 2950),
        _kernel(NCCL, 3050, 250, 2960, stream_id=9),
        _kernel(GEMM, 1000, 10, 905, device_id=1),
    )
    memops = (Memop("memcpy", 2000 * US, 50 * US, 1 << 20, pid=PID, tid=PID, launch_start_ns=1700 * US,
                    launch_dur_ns=5 * US),)
    syncs = (ApiCall("cudaStreamSynchronize", 2020 * US, 920 * US, pid=PID, tid=PID),)
    return TraceSpec(gpus=(H100_SXM, replace(H100_SXM, device_id=1)), kernels=kernels, memops=memops,
                     api_calls=syncs, process_names={PID: "python"}, thread_names={(PID, PID): "python"},
                     session_offset_ns=0)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> traceview.Trace:
    path = write_nsys(_gaps_spec(), tmp_path_factory.mktemp("activity") / "gaps.sqlite")
    trace = traceview.load(path).analyze()
    build_activity(trace.con)
    return trace


def test_idle_gaps_and_their_causes(generated) -> None:
    gaps = generated.sql("SELECT device_id, start_ns, end_ns, dur_ns, kind, cause FROM gpu_idle_gaps "
                         "ORDER BY device_id, start_ns").rows()
    assert gaps == [
        (0, 1500 * US, 1700 * US, 200 * US, "kernel", "host_launch_late"),
        (0, 1800 * US, 2000 * US, 200 * US, "memop", "launch_overhead"),
        (0, 2050 * US, 3000 * US, 950 * US, "kernel", "sync_wait"),
    ]
    memcpy_name = generated.scalar("SELECT name FROM memops")
    assert generated.sql("SELECT name FROM gpu_idle_gaps ORDER BY start_ns")["name"].to_list() == [
        GEMM, memcpy_name, GEMM]
    # each gap's launch call is the call that launched the work ending it
    assert generated.scalar("""SELECT count(*) FROM gpu_idle_gaps g JOIN kernels k
                               ON g.kind = 'kernel' AND k.kernel_id = g.activity_id
                               WHERE k.launch_call_id = g.call_id""") == 2


def test_idle_kinds_name_the_causes_for_the_budget(generated) -> None:
    """host_launch_late -> host_wait, launch_overhead -> bubble (queued before the gap), sync_wait -> sync_drain;
    idle_by_kind sums them per step (no step marker: the gap-based step of the work that ended them)."""
    kinds = generated.sql("SELECT cause, idle_kind FROM gpu_idle_gaps ORDER BY start_ns").rows()
    assert kinds == [("host_launch_late", "host_wait"), ("launch_overhead", "bubble"), ("sync_wait", "sync_drain")]
    totals = generated.sql("SELECT idle_kind, sum(gaps), sum(idle_ns), max(largest_gap_ns) FROM idle_by_kind "
                           "GROUP BY idle_kind ORDER BY idle_kind").rows()
    assert totals == [("bubble", 1, 200 * US, 200 * US), ("host_wait", 1, 200 * US, 200 * US),
                      ("sync_drain", 1, 950 * US, 950 * US)]


def test_a_gap_during_a_pageable_copy_is_a_sync_drain(tmp_path) -> None:
    """cudaMemcpyAsync into pageable memory returns only when the copy is done: the launching thread is blocked
    in it, as in a synchronize. Kernel [0, 100] us, the copy call [50, 400] us (copy [110, 112]), next kernel
    launched at 450, runs [460, 500]: the gap [112, 460] is a sync drain."""
    spec = TraceSpec(gpus=(H100_SXM,), kernels=(_kernel(GEMM, 0, 100, -20), _kernel(GEMM, 460, 40, 450)),
                     memops=(Memop("memcpy", 110 * US, 2 * US, 4, "DtoH", "Device", "Pageable", pid=PID, tid=PID,
                                   launch_start_ns=50 * US, launch_dur_ns=350 * US),),
                     process_names={PID: "python"}, session_offset_ns=0)
    trace = traceview.load(write_nsys(spec, tmp_path / "t.sqlite")).analyze()
    assert trace.sql("SELECT start_ns, end_ns, idle_kind FROM gpu_idle_gaps ORDER BY start_ns").rows()[-1] == (
        112 * US, 460 * US, "sync_drain")


def test_a_gap_is_a_sync_drain_only_through_a_blocking_call_other_than_its_own_launch(tmp_path) -> None:
    """Times in us. Kernel [0, 100]; a pageable copy call [150, 400] issued in the gap, its copy [300, 302]: the
    gap [100, 300) it ends overlaps only its own launch, which is late, not a drain. The gap [302, 500) ends with
    a kernel launched at 450 and lies inside that copy call (started before it): a drain. In the gap [540, 700) a
    synchronize [600, 620] starts: a drain. The gap [900, 1100) ends with a second pageable copy (call [950,
    1200], copy [1100, 1102]) and holds a synchronize [920, 940] besides: a drain."""
    def copy(start_us: int, launch_us: int, launch_dur_us: int) -> Memop:
        return Memop("memcpy", start_us * US, 2 * US, 4, "DtoH", "Device", "Pageable", pid=PID, tid=PID,
                     launch_start_ns=launch_us * US, launch_dur_ns=launch_dur_us * US)

    def sync(start_us: int) -> ApiCall:
        return ApiCall("cudaStreamSynchronize", start_us * US, 20 * US, pid=PID, tid=PID)

    spec = TraceSpec(gpus=(H100_SXM,),
                     kernels=(_kernel(GEMM, 0, 100, -20), _kernel(GEMM, 500, 40, 450), _kernel(GEMM, 700, 10, 650),
                              _kernel(GEMM, 800, 100, 705)),
                     memops=(copy(300, 150, 250), copy(1100, 950, 250)), api_calls=(sync(600), sync(920)),
                     process_names={PID: "python"}, session_offset_ns=0)
    trace = traceview.load(write_nsys(spec, tmp_path / "t.sqlite")).analyze()
    assert trace.sql("SELECT start_ns // 1000, end_ns // 1000, cause FROM gpu_idle_gaps ORDER BY start_ns").rows() == [
        (100, 300, "host_launch_late"), (302, 500, "sync_wait"), (540, 700, "sync_wait"), (710, 800, "launch_overhead"),
        (900, 1100, "sync_wait")]


def test_device_activity(generated) -> None:
    rows = generated.sql("""SELECT device_id, first_ns, last_ns, span_ns, busy_ns, kernel_ns, kernel_busy_ns, idle_ns,
                                   gaps, comm_kernels, comm_ns, comm_exposed_ns
                            FROM device_activity ORDER BY device_id""").rows()
    # busy: [1000,1500) + [1700,1800) + [2000,2050) + [3000,3300); kernels alone lack the memcpy's 50
    assert rows == [
        (0, 1000 * US, 3300 * US, 2300 * US, 950 * US, 1150 * US, 900 * US, 1350 * US, 3, 1, 250 * US, 200 * US),
        (1, 1000 * US, 1010 * US, 10 * US, 10 * US, 10 * US, 10 * US, 0, 0, None, None, None),
    ]
    assert generated.sql("SELECT start_ns, end_ns FROM rank_busy_islands ORDER BY start_ns").rows() == [
        (1000 * US, 1500 * US), (1700 * US, 1800 * US), (2000 * US, 2050 * US), (3000 * US, 3300 * US)]


def test_comm_islands_and_family(generated) -> None:
    assert generated.sql("SELECT family, start_ns, end_ns, comm_ns, exposed_ns FROM comm_islands ORDER BY family"
                         ).rows() == [("all", 3050 * US, 3300 * US, 250 * US, 200 * US),
                                      ("nccl_all_reduce", 3050 * US, 3300 * US, 250 * US, 200 * US)]


def test_busiest_device(generated) -> None:
    busiest = generated.sql("SELECT rank, device_id, kernel_time_ns, devices_used, spec_id, hbm_tbps "
                            "FROM busiest_device").rows()
    assert busiest == [(0, 0, 1150 * US, 2, "h100-sxm", 3.35)]


def test_tables_declare_every_column(generated) -> None:
    for relation in (relation for stage in STAGES for relation in stage.creates):
        actual = [name for (name,) in generated.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [relation.name]).fetchall()]
        assert actual == list(relation.columns), relation.name


@requires_shared
def test_vllm_h100_idle_is_the_hand_checked_share() -> None:
    """../shared/traces/README.md: exact idle over the kernel+memcpy+memset span is 10.88%."""
    trace = analysed(VLLM_H100)
    build_activity(trace.con)
    span, idle = trace.sql("SELECT span_ns, idle_ns FROM device_activity").rows()[0]
    assert round(100.0 * idle / span, 2) == 10.88


def _python_gaps(rows: list[tuple]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Idle gaps per device by a plain sweep over (rank, device, start, end) sorted by start, then end."""
    gaps: dict[tuple[int, int], list[tuple[int, int]]] = {}
    running_end: dict[tuple[int, int], int] = {}
    for rank, device, start, end in sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3])):
        key = (rank, device)
        gaps.setdefault(key, [])
        if key in running_end and start > running_end[key]:
            gaps[key].append((running_end[key], start))
        running_end[key] = max(running_end.get(key, end), end)
    return gaps


def _python_union(rows: list[tuple]) -> dict[tuple[int, int], int]:
    return {key: union_ns(intervals) for key, intervals in _group(rows).items()}


def _group(rows: list[tuple]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    grouped: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, device, start, end in rows:
        grouped.setdefault((rank, device), []).append((start, end))
    return grouped


@requires_shared
@pytest.mark.parametrize("path", [VLLM_H100, DLRM_DIR], ids=lambda p: Path(p).name)
def test_real_trace_matches_a_python_sweep(path: Path) -> None:
    trace = analysed(path)
    build_activity(trace.con)
    kernels = trace.sql("SELECT rank, device_id, start_ns, end_ns FROM kernels").rows()
    activity = kernels + trace.sql("SELECT rank, device_id, start_ns, end_ns FROM memops").rows()
    expected = _python_gaps(activity)
    found = trace.sql("SELECT rank, device_id, start_ns, end_ns FROM gpu_idle_gaps ORDER BY ALL").rows()
    assert found == sorted((r, d, s, e) for (r, d), gaps in expected.items() for s, e in gaps)
    assert len(found) > 100
    busy, kernel_busy = _python_union(activity), _python_union(kernels)
    per_device = trace.sql("SELECT rank, device_id, span_ns, busy_ns, kernel_busy_ns, idle_ns, gaps, kernel_ns "
                           "FROM device_activity ORDER BY rank, device_id").rows()
    kernel_time: dict[tuple[int, int], int] = {}
    for rank, device, start, end in kernels:
        kernel_time[(rank, device)] = kernel_time.get((rank, device), 0) + end - start
    for rank, device, span, busy_ns, kernel_busy_ns, idle, gaps, kernel_ns in per_device:
        key = (rank, device)
        intervals = _group(activity)[key]
        assert span == max(e for _, e in intervals) - min(s for s, _ in intervals)
        assert (busy_ns, kernel_busy_ns, kernel_ns) == (busy[key], kernel_busy[key], kernel_time[key])
        assert (idle, gaps) == (sum(e - s for s, e in expected[key]), len(expected[key]))
    top = max(kernel_time, key=lambda k: (kernel_time[k], -k[0], -k[1]))
    assert trace.sql("SELECT rank, device_id, kernel_time_ns, devices_used FROM busiest_device").rows() == [
        (*top, kernel_time[top], len(kernel_time))]
    # a gap without a launch call in the trace is 'unknown', and only such a gap
    calls = set(trace.sql("SELECT rank, pid, correlation_id FROM api_calls").rows())
    ending = trace.sql("SELECT rank, pid, correlation_id, cause FROM gpu_idle_gaps").rows()
    assert [c == "unknown" for *_, c in ending] == [tuple(k) not in calls for *k, _ in ending]
