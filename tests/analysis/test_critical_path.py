"""The critical path of a step: generated traces whose paths are worked out by hand (each spec's docstring gives
the arithmetic), and the invariants of the path on a real vLLM trace.

Every generated trace has four identical steps, 1 ms apart, each a vLLM step annotation on the launching thread,
and one API call before the first step, so that every step's first call has a predecessor before the step began
(the walk stops at the step's start).
"""

from __future__ import annotations

import pytest
from conftest import VLLM_H100, analysed, requires_shared

import traceview
from traceview.testing import (
    H100_SXM,
    ApiCall,
    Kernel,
    Memop,
    Range,
    TraceSpec,
    write_kineto,
    write_nsys,
)

US = 1_000
PID = 3131
STEPS = 4
STEP_US = 1_000
DECODE = "execute_context_0(0)_generation_8(8)"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1> >"
GEMM = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
FIGURES = ("path_ns", "compute_ns", "communication_ns", "copy_ns", "memset_ns", "host_ns", "launch_latency_ns")


def _kernel(name: str, start_us: int, dur_us: int, launch_us: int, stream: int = 7) -> Kernel:
    return Kernel(name, start_us * US, dur_us * US, pid=PID, tid=PID, stream_id=stream,
                  launch_start_ns=launch_us * US, launch_dur_ns=5 * US)


def _spec(step, api_calls=()) -> TraceSpec:
    """STEPS copies of `step(w0)` (the kernels and memops of a step whose window starts at w0 us)."""
    kernels, memops, calls, ranges = [], [], [ApiCall("cudaGetDevice", 0, 2 * US, pid=PID, tid=PID)], []
    for i in range(STEPS):
        w0 = 100 + i * STEP_US
        ops = step(w0)
        kernels += [op for op in ops if isinstance(op, Kernel)]
        memops += [op for op in ops if isinstance(op, Memop)]
        calls += [call(w0) for call in api_calls]
        ranges.append(Range(DECODE, w0 * US, (w0 + 900) * US, pid=PID, tid=PID, kind="user_annotation"))
    return TraceSpec(gpus=(H100_SXM,), kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(calls),
                     ranges=tuple(ranges), process_names={PID: "VLLM::Worker"})


def launch_bound(w0: int) -> list[Kernel]:
    """Ten 2 us kernels, each launched by a 5 us call every 20 us from w0 + 10 us; each starts 3 us after its
    launch returns, long after the kernel before it ended. The path: the host from the step's start to the
    first launch (10 us), ten launch calls (50 us) and the nine gaps between them (9 x 15 us), the last
    launch's latency (3 us) and the last kernel (2 us): 200 us, of which host 195 us."""
    return [_kernel(ELEMENTWISE, w0 + 10 + 20 * i + 5 + 3, 2, w0 + 10 + 20 * i) for i in range(10)]


def compute_bound(w0: int) -> list[Kernel]:
    """Five 100 us GEMMs launched every 10 us from w0 + 10 us, queued: the first starts 5 us after its launch
    returns, each next 1 us after the one before. The path: host 10 + 5 us, the first launch latency 5 us,
    500 us of GEMMs and four 1 us gaps between them: 524 us."""
    first = w0 + 10 + 5 + 5
    return [_kernel(GEMM, first + 101 * i, 100, w0 + 10 + 10 * i) for i in range(5)]


def exposed_all_reduce(w0: int) -> list[Kernel]:
    """Three queued 100 us GEMMs (as compute_bound) and a 400 us all-reduce on stream 13, launched at w0 + 40 us
    but starting 2 us after the last GEMM ended (it waited for it, as an event wait would make it): the path is
    host 15 us, latency 5 us, GEMMs 300 us, two 1 us gaps, the 2 us wait and the all-reduce: 724 us, of which
    communication 400 us."""
    first = w0 + 20
    gemms = [_kernel(GEMM, first + 101 * i, 100, w0 + 10 + 10 * i) for i in range(3)]
    return [*gemms, _kernel(ALL_REDUCE, first + 302 + 2, 400, w0 + 40, stream=13)]


def copy_bound(w0: int) -> list[Kernel | Memop]:
    """A 300 us HtoD copy launched at w0 + 10 us (5 us), starting 3 us after; a 20 us kernel launched at w0 + 20 us
    that starts 1 us after the copy ends. The path: host 10 + 5 us, latency 3 us, the copy 300 us, a 1 us gap and
    the kernel 20 us: 339 us."""
    copy = Memop("memcpy", (w0 + 18) * US, 300 * US, 256 << 20, pid=PID, tid=PID, launch_start_ns=(w0 + 10) * US,
                 launch_dur_ns=5 * US)
    return [copy, _kernel(GEMM, w0 + 18 + 301, 20, w0 + 20)]


def synchronised(w0: int) -> list[Kernel]:
    """A 200 us GEMM launched at w0 + 10 us (starting 3 us after its launch returned), a cudaStreamSynchronize from
    w0 + 30 us that returns 5 us after the GEMM ends (at w0 + 223 us), then a 10 us kernel launched 2 us later that
    starts 3 us after its launch: host 10 + 5, latency 3, GEMM 200, the sync's return 5, host 2 + 5, latency 3,
    the kernel 10: 243 us."""
    return [_kernel(GEMM, w0 + 18, 200, w0 + 10), _kernel(ELEMENTWISE, w0 + 225 + 5 + 3, 10, w0 + 225)]


def _sync(w0: int) -> ApiCall:
    return ApiCall("cudaStreamSynchronize", (w0 + 30) * US, 193 * US, pid=PID, tid=PID)


CASES = {
    # name: (step, extra calls, figures per step as FIGURES, bound)
    "launch_bound": (launch_bound, (), (200, 2, 0, 0, 0, 195, 3), "host"),
    "compute_bound": (compute_bound, (), (524, 500, 0, 0, 0, 15, 9), "compute"),
    "exposed_all_reduce": (exposed_all_reduce, (), (724, 300, 400, 0, 0, 15, 9), "communication"),
    "copy_bound": (copy_bound, (), (339, 20, 0, 300, 0, 15, 4), "copy"),
    "synchronised": (synchronised, (_sync,), (243, 210, 0, 0, 0, 27, 6), "compute"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    step, calls, figures, bound = CASES[request.param]
    spec = _spec(step, calls)
    path = write_kineto(spec, tmp_path_factory.mktemp(request.param) / "t.json.gz")
    return traceview.load(path).analyze(), tuple(f * US for f in figures), bound


def test_each_step_has_the_path_worked_out_by_hand(case) -> None:
    trace, figures, bound = case
    rows = trace.sql(f"SELECT step_id, phase, {', '.join(FIGURES)}, bound, bound_pct FROM step_critical_path "
                     "ORDER BY step_id").rows()
    path, compute, communication, copy, memset, host, launch_latency = figures
    share = {"compute": compute, "communication": communication, "copy": copy + memset,
             "host": host + launch_latency}[bound]
    assert rows == [(i, "decode", *figures, bound, pytest.approx(100 * share / path)) for i in range(STEPS)]


def test_the_segments_tile_the_path_from_its_start_to_the_last_gpu_op(case) -> None:
    trace, figures, _ = case
    rows = trace.sql("""
        SELECT c.step_id, c.path_start_ns - t.start_ns, c.path_end_ns = t.gpu_end_ns, count(*) = max(s.seq) + 1,
               sum(s.dur_ns), bool_and(s.start_ns = coalesce(s.prev_end, c.path_start_ns))
        FROM step_critical_path c
        JOIN steps t USING (rank, step_id)
        JOIN (SELECT *, lag(end_ns) OVER (PARTITION BY rank, step_id ORDER BY seq) AS prev_end
              FROM critical_path_segments) s USING (rank, step_id)
        GROUP BY ALL ORDER BY c.step_id
    """).rows()
    assert rows == [(i, 0, True, True, figures[0], True) for i in range(STEPS)]


def test_by_phase_sums_the_priced_steps(case) -> None:
    trace, figures, bound = case
    priced = trace.sql("SELECT count(DISTINCT step_id) FROM step_windows WHERE priced AND step_id IS NOT NULL").rows()
    (n,), = priced
    assert n >= 1
    rows = trace.sql(f"SELECT rank, phase, steps, {', '.join(FIGURES)}, bound FROM critical_path_by_phase").rows()
    assert rows == [(0, "decode", n, *(n * f for f in figures), bound)]


def test_launch_bound_path_names_every_launch_and_gap(tmp_path) -> None:
    """The launch-bound step in time order: host to the first launch, then per kernel its call and the host gap
    after it, and at the end the last launch's latency and the last kernel (nsys, the other reader)."""
    spec = _spec(launch_bound)
    trace = traceview.load(write_nsys(spec, tmp_path / "launch.sqlite")).analyze()
    rows = trace.sql("SELECT kind, node, name, dur_ns FROM critical_path_segments WHERE step_id = 2 "
                     "ORDER BY seq").rows()
    calls = [("host", "call", "cudaLaunchKernel", 5 * US), ("host", "call", "cudaLaunchKernel", 15 * US)] * 10
    expected = [("host", "call", "cudaLaunchKernel", 10 * US), *calls[:-1],
                ("launch_latency", "kernel", "vectorized_elementwise_kernel", 3 * US),
                ("compute", "kernel", "vectorized_elementwise_kernel", 2 * US)]
    assert rows == expected


@requires_shared
def test_vllm_paths_tile_each_step_and_end_at_its_last_op() -> None:
    """vLLM on H100: every step with GPU work has a path that ends where its last GPU op ends, starts inside the
    step and is tiled by its segments; every step is steady (test_steady), so all are priced."""
    trace = analysed(VLLM_H100)
    rows = trace.sql("""
        SELECT c.phase, count(*), bool_and(c.path_end_ns = t.gpu_end_ns), bool_and(c.path_start_ns >= t.start_ns),
               bool_and(c.path_ns = s.total), bool_and(s.contiguous), bool_and(c.priced)
        FROM step_critical_path c
        JOIN steps t USING (rank, step_id)
        JOIN (SELECT rank, step_id, sum(dur_ns) AS total,
                     bool_and(prev_end IS NULL OR prev_end = start_ns) AS contiguous
              FROM (SELECT *, lag(end_ns) OVER (PARTITION BY rank, step_id ORDER BY seq) AS prev_end
                    FROM critical_path_segments)
              GROUP BY ALL) s USING (rank, step_id)
        GROUP BY c.phase ORDER BY c.phase
    """).rows()
    assert rows == [("decode", 9, True, True, True, True, True), ("prefill", 1, True, True, True, True, True)]
    (steps, bound), = trace.sql("SELECT steps, bound FROM critical_path_by_phase WHERE phase = 'decode'").rows()
    assert (steps, bound) == (9, "compute")
