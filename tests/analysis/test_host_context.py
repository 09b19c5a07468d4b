"""Host context under gaps and blocking calls, one price per blocking call, idle by kind and launch queue depth.

Generated traces set every time by hand (the docstrings give the arithmetic); real traces are checked against
sweeps written here in plain Python over the trace's own rows.
"""

from __future__ import annotations

import bisect
from dataclasses import replace

import pytest

import traceview
from conftest import SHARED_TRACES, VLLM_H100, analysed, requires_shared
from traceview.rules import RuleConfig, check, load_rules
from fixtures_sync import ITEM_SILU as SILU, item_sync
from traceview.testing import H100_SXM, ApiCall, Kernel, Range, TraceSpec, write_kineto, write_nsys

US = 1_000
MS = 1_000_000
PID = 4242
GEMM = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN"
NCCL_TRACE = SHARED_TRACES / "torch" / "hta__nccl_data_a100_ws2.json.gz"
RULES = {rule.id: rule for rule in load_rules()}


def _kernel(name: str, start_us: int, dur_us: int, launch_us: int, **kwargs) -> Kernel:
    return Kernel(name, start_us * US, dur_us * US, pid=PID, tid=PID, launch_start_ns=launch_us * US,
                  launch_dur_ns=5 * US, **kwargs)


@pytest.fixture(scope="module")
def item_trace(tmp_path_factory) -> traceview.Trace:
    return traceview.load(write_kineto(item_sync(), tmp_path_factory.mktemp("item") / "t.json.gz")).analyze()


def test_the_gap_after_item_names_the_sync_and_the_op(item_trace) -> None:
    rows = item_trace.sql("""
        SELECT start_ns, dur_ns, idle_kind, next_op, host_call, host_call_overlap_ns, cpu_op, cpu_op_overlap_ns,
               issuing_op FROM idle_gap_context WHERE dur_ns > 100000 AND idle_kind = 'sync_drain' ORDER BY start_ns
    """).rows()
    assert len(rows) == 4
    for _start, dur, kind, next_op, call, call_overlap, op, op_overlap, issuing in rows:
        assert (dur, kind, next_op) == (278 * US, "sync_drain", SILU)
        assert (call, call_overlap) == ("cudaStreamSynchronize", 15 * US)
        assert (op, op_overlap, issuing) == ("aten::item", 168 * US, "aten::item")


def test_a_generic_copy_is_reported_by_the_op_that_called_it(item_trace) -> None:
    bubbles = item_trace.sql("SELECT dur_ns, host_call, cpu_op, issuing_op FROM idle_gap_context "
                             "WHERE idle_kind = 'bubble'").rows()
    assert bubbles == [(10 * US, "cudaMemcpyAsync", "aten::copy_", "aten::item")] * 4


def test_each_blocking_call_is_priced_once(item_trace) -> None:
    rows = item_trace.sql("SELECT name, reason, dur_ns, exposed_idle_ns, saving_ns, saving_in_gpu_span_ns, "
                          "cpu_op, issuing_op FROM blocking_calls ORDER BY start_ns").rows()
    assert rows == [("cudaMemcpyAsync", "pageable_dtoh", 720 * US, 278 * US, 278 * US, 278 * US, "aten::copy_",
                     "aten::item"),
                    ("cudaStreamSynchronize", "synchronize", 15 * US, 0, 0, 0, "aten::copy_", "aten::item")] * 4


def test_tv204_names_aten_item_and_claims_sync_drain_idle(item_trace) -> None:
    result = check(item_trace.con, [RULES["TV204"], RULES["TV201"], RULES["TV206"]],
                   RuleConfig(select=("TV204", "TV201", "TV206")))
    tv204 = [f for f in result.findings if f.rule == "TV204"]
    assert len(tv204) == 1
    assert "issued by aten::item (8 calls, 1.11 ms)" in tv204[0].message
    assert tv204[0].evidence["exposed_idle_ns"] == 4 * 278 * US
    assert {(c.step_id, c.bucket, c.ns) for c in tv204[0].claims} == {(i, "idle_sync_drain", 278 * US)
                                                                      for i in range(4)}
    # the sync drains are TV204's: TV201 claims none of them (here no gap is longer than 1 ms)
    assert not [f for f in result.findings if f.rule == "TV201"]
    # cudaMemcpyAsync is not a synchronous memcpy API: TV206 has nothing to price
    assert not [f for f in result.findings if f.rule == "TV206"]


def _library_load_spec() -> TraceSpec:
    """nsys: kernel A [0, 1] ms; inside NVTX 'load_weights' [0.5, 70] ms the launching thread loads a module
    (cuLibraryLoadData, driver API, [1, 63] ms) and launches kernel B at 65 ms; B runs [65.01, 66] ms.
    Gap [1, 65.01] ms, host_wait: host call cuLibraryLoadData, 62 ms of it in the gap; range load_weights."""
    kernels = (_kernel(GEMM, 0, 1_000, -20), _kernel(GEMM, 65_010, 990, 65_000))
    calls = (ApiCall("cuLibraryLoadData", 1 * MS, 62 * MS, pid=PID, tid=PID, api="driver"),)
    ranges = (Range("load_weights", 500 * US, 70 * MS, pid=PID, tid=PID, kind="nvtx"),)
    return TraceSpec(gpus=(H100_SXM,), kernels=kernels, api_calls=calls, ranges=ranges,
                     process_names={PID: "python"}, thread_names={(PID, PID): "python"})


def test_a_driver_call_and_an_nvtx_range_under_a_gap(tmp_path) -> None:
    trace = traceview.load(write_nsys(_library_load_spec(), tmp_path / "t.sqlite")).analyze()
    gap = trace.sql("SELECT dur_ns, idle_kind, host_call, host_call_dur_ns, host_call_overlap_ns, cpu_op, "
                    "user_range FROM idle_gap_context").rows()
    assert gap == [(64_010 * US, "host_wait", "cuLibraryLoadData", 62 * MS, 62 * MS, None, "load_weights")]
    finding, = check(trace.con, [RULES["TV201"]], RuleConfig(select=("TV201",))).findings
    # the driver call is the deepest event covering half the gap: 62 / 64.01 ms = 96.9%, inside load_weights
    assert "64.01 ms before nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN: 97% under call cuLibraryLoadData " \
           "[load_weights] (host wait)" in finding.message
    assert "cover:driver_call" in finding.fix_facts and "CUDA_MODULE_LOADING=EAGER" in finding.fix
    assert "By kind: host launched late 64.01 ms (1 gap)." in finding.message
    assert "0.00 ms" not in finding.message


@requires_shared
def test_ddp_gaps_on_the_hta_nccl_trace_name_the_ddp_ops() -> None:
    """The three 15.5-15.7 ms gaps per step: the launching thread sits in aten::unflatten_dense_tensors (DDP
    unflattening the broadcast buffers) inside the DistributedDataParallel.forward annotation. Checked with a
    sweep here: the cpu_op of the launching thread overlapping each gap the most."""
    trace = analysed(NCCL_TRACE)
    gaps = trace.sql("SELECT g.start_ns, g.end_ns, g.pid, g.call_tid FROM gpu_idle_gaps g "
                     "ORDER BY g.dur_ns DESC LIMIT 3").rows()
    ops = trace.sql("SELECT pid, tid, kind, name, start_ns, end_ns FROM ranges "
                    "WHERE kind IN ('cpu_op', 'user_annotation')").rows()
    context = {(r[0], r[1]): r[2:] for r in trace.sql(
        "SELECT start_ns, end_ns, cpu_op, cpu_op_overlap_ns, user_range FROM idle_gap_context").rows()}
    for start, end, pid, tid in gaps:
        def best(kind: str) -> tuple[str, int]:
            scored = [(min(e, end) - max(s, start), s, -e, name) for p, t, k, name, s, e in ops
                      if (p, t, k) == (pid, tid, kind) and s < end and e > start]
            overlap, _, _, name = max(scored)
            return name, overlap
        op, overlap = best("cpu_op")
        assert op == "aten::unflatten_dense_tensors" and overlap > 0.95 * (end - start)
        assert context[(start, end)] == (op, overlap, best("user_annotation")[0])
        assert best("user_annotation")[0] == "DistributedDataParallel.forward"
    (tv201,) = [f for f in check(trace.con, load_rules(), RuleConfig()).findings if f.rule == "TV201"]
    assert "15.72 ms before Memcpy DtoD (Device -> Device): 97% under op aten::unflatten_dense_tensors " \
           "[DistributedDataParallel.forward] (host wait)" in tv201.message


def _sweep_blocking_savings(trace: traceview.Trace) -> dict[int, int]:
    """TV204's price per blocking call, written again in Python: the drained window after each call, within
    its step, each nanosecond counted for the first call that exposes it, capped by the call's duration."""
    busy = sorted(trace.sql("SELECT start_ns, end_ns FROM kernels UNION ALL SELECT start_ns, end_ns FROM memops")
                  .rows())
    islands: list[list[int]] = []
    for s, e in busy:
        if islands and s <= islands[-1][1]:
            islands[-1][1] = max(islands[-1][1], e)
        else:
            islands.append([s, e])
    starts = [i[0] for i in islands]
    pageable = {(p, c) for p, c in trace.sql("SELECT pid, correlation_id FROM memops WHERE copy_kind = 'DtoH' "
                                             "AND dst_kind = 'Pageable'").rows()}
    calls = [c for c in trace.sql("SELECT call_id, pid, correlation_id, is_sync, start_ns, end_ns FROM api_calls")
             .rows() if c[3] or (c[1], c[2]) in pageable]
    steps = sorted(trace.sql("SELECT cpu_start_ns, cpu_end_ns, end_ns FROM steps").rows())
    windows = []
    for call_id, _pid, _corr, _sync, start, end in calls:
        owner = [s for s in steps if s[0] <= start < s[1]]
        if not owner:
            continue
        step_end = owner[-1][2]
        last = bisect.bisect_left(starts, end) - 1  # last island starting before the call returned
        if last >= 0 and islands[last][1] >= end:
            windows.append((start, call_id, end - start, 0, 0))
            continue
        idle_start = max(islands[last][1], start) if last >= 0 else start
        nxt = last + 1
        idle_end = min(islands[nxt][0], step_end) if nxt < len(islands) else step_end
        windows.append((idle_start, call_id, end - start, idle_start, idle_end))
    savings, counted_to = {}, None
    for _key, call_id, dur, lo, hi in sorted(windows, key=lambda w: (w[3], w[4])):
        if hi <= lo:
            savings[call_id] = 0
            continue
        exposed = hi - max(lo, counted_to) if counted_to is not None and counted_to > lo else hi - lo
        savings[call_id] = max(0, min(exposed, dur))
        counted_to = hi if counted_to is None else max(counted_to, hi)
    return savings


@requires_shared
def test_blocking_call_prices_match_a_python_sweep_on_vllm() -> None:
    trace = analysed(VLLM_H100)
    expected = _sweep_blocking_savings(trace)
    priced = dict(trace.sql("SELECT call_id, saving_ns FROM blocking_calls WHERE step_id IS NOT NULL").rows())
    assert priced == expected
    finding, = check(trace.con, [RULES["TV204"]], RuleConfig(select=("TV204",))).findings
    assert sum(c.ns for c in finding.claims) == sum(expected.values())
    assert "issued by aten::to in <built-in method tolist of Tensor object> (20 calls" in finding.message


@requires_shared
def test_tv206_prices_its_calls_as_blocking_calls_does() -> None:
    trace = analysed(SHARED_TRACES / "nsys" / "blbadger__threebody__report1.sqlite")
    finding, = check(trace.con, [RULES["TV206"]], RuleConfig(select=("TV206",))).findings
    by_api = trace.sql("""
        SELECT name, copy_kind, sum(saving_ns), sum(dur_ns) FROM blocking_calls
        WHERE reason = 'sync_memcpy' AND NOT (copy_kind = 'HtoD' AND bytes <= 65536) GROUP BY ALL
    """).rows()
    assert {(r["api"], r["direction"], r["saving_ns"], r["blocked_ns"]) for r in finding.evidence["rows"]} == \
        set(by_api)
    assert sum(c.ns for c in finding.claims) == sum(r[2] for r in by_api)


def _queue_spec() -> TraceSpec:
    """One ProfilerStep around everything, three streams (times in us):

    stream 7, host far ahead: 10 launches at 0, 1, ..., 9; kernel i runs [20 + 100 i, 120 + 100 i]. Launch i finds
      i pending: mean depth at launch 4.5, max 10, 1 of 10 found it empty. Over time: depth k+1 on [k, k+1) for
      k < 9 (45), 10 on [9, 120) (1110), then 9..1 for 100 us each (4500): 5655 / 1020 = 5.5441.
    stream 8, starved GPU: 10 launches at 2000 + 50 i; each kernel runs [+10, +15] after its launch: every launch
      finds the stream empty; depth 1 for 15 us of every 50 (the last ends at 2465): 150 / 465.
    stream 9: one cudaGraphLaunch at 3000 replaying 3 kernels [3010, 3020], [3020, 3030], [3030, 3040]: one
      launch, depth 1 for 40 us."""
    kernels = [_kernel(GEMM, 20 + 100 * i, 100, i, stream_id=7) for i in range(10)]
    kernels += [_kernel(SILU, 2_010 + 50 * i, 5, 2_000 + 50 * i, stream_id=8) for i in range(10)]
    kernels += [Kernel(SILU, (3_010 + 10 * i) * US, 10 * US, pid=PID, tid=PID, stream_id=9, correlation_id=9_000,
                       launch_api="cudaGraphLaunch", graph=True, launch_start_ns=3_000 * US, launch_dur_ns=5 * US)
                for i in range(3)]
    kernels = [replace(k, launch_dur_ns=1 * US) if k.stream_id == 7 else k for k in kernels]
    ranges = (Range("ProfilerStep#1", -100 * US, 4_000 * US, pid=PID, tid=PID, kind="user_annotation"),)
    return TraceSpec(gpus=(H100_SXM,), kernels=tuple(kernels), ranges=ranges, process_names={PID: "python"},
                     thread_names={(PID, PID): "python"})


def test_launch_queue_depth_host_ahead_starved_and_graph(tmp_path) -> None:
    trace = traceview.load(write_kineto(_queue_spec(), tmp_path / "t.json.gz")).analyze()
    rows = trace.sql("SELECT stream_id, launches, graph_launches, depth_at_launch_mean, depth_mean, depth_max, "
                     "empty_launches, empty_launch_pct, unordered_launches FROM launch_queue_depth "
                     "ORDER BY stream_id").rows()
    assert [r[0] for r in rows] == [7, 8, 9]
    ahead, starved, graph = rows
    assert ahead[1:3] == (10, 0) and ahead[3] == pytest.approx(4.5) and ahead[4] == pytest.approx(5655 / 1020)
    assert ahead[5:] == (10, 1, pytest.approx(10.0), 0)
    assert starved[1:4] == (10, 0, 0.0) and starved[4] == pytest.approx(150 / 465)
    assert starved[5:] == (1, 10, 100.0, 0)
    assert graph[1:] == (1, 1, 0.0, 1.0, 1, 1, 100.0, 0)


def test_idle_by_kind_sums_the_gaps(item_trace) -> None:
    """Per step of the item trace: one sync drain of 278 us and one bubble of 10 us; the 20 us between steps
    (the next GEMM launched at T+10 after the GPU ran dry at T, the end of the step before) are host waits."""
    rows = item_trace.sql("SELECT step_id, idle_kind, gaps, idle_ns FROM idle_by_kind ORDER BY step_id, idle_kind")
    by_step = {}
    for step, kind, gaps, ns in rows.rows():
        by_step.setdefault(step, {})[kind] = (gaps, ns)
    assert by_step[0] == {"bubble": (1, 10 * US), "sync_drain": (1, 278 * US)}
    for step in (1, 2, 3):
        assert by_step[step] == {"bubble": (1, 10 * US), "host_wait": (1, 20 * US), "sync_drain": (1, 278 * US)}


def _cover_spec() -> TraceSpec:
    """Kineto, one thread; times in us. Four gaps over 2 ms, each with a known covering cause:

    1. A [0, 1000], B [28000, 29000] launched at 27975: gap [1000, 28000], 27 ms, host wait. The Python frame
       model.py(120): forward [1500, 28500] covers 26.5 ms of it (98.15%); aten::slice [27940, 27970] (30 us) and
       the launch (5 us) lie at its end; [1000, 1500] is outside every event: 500 us untraced (1.85%).
    2. C [30000, 31000], D [36000, 37000] launched at 35500, inside train.py(40): step [29500, 36500] > aten::item
       [30400, 35200] > cudaStreamSynchronize [30500, 35000]: gap [31000, 36000], 5 ms, sync drain. The frame
       (100%), the op (84%) and the call (80%) all cover half of it; the call is the deepest. Nothing untraced.
    3. E [41000, 42000] launched at 40995: gap [37000, 41000], 4 ms, host wait, with only the 5 us launch call in
       it: nothing covers half; 3995 us untraced (99.875%), the widest event the launch (0.125%).
    4. F [45000, 46000] launched at 41500 (queued behind a wait): gap [42000, 45000], 3 ms, bubble, no host event
       in it: 100% untraced, no event to name."""
    kernels = (_kernel(GEMM, 0, 1_000, -20), _kernel(GEMM, 28_000, 1_000, 27_975), _kernel(SILU, 30_000, 1_000, 29_950),
               _kernel(GEMM, 36_000, 1_000, 35_500), _kernel(GEMM, 41_000, 1_000, 40_995),
               _kernel(SILU, 45_000, 1_000, 41_500))
    calls = (ApiCall("cudaStreamSynchronize", 30_500 * US, 4_500 * US, pid=PID, tid=PID),)
    ranges = (Range("model.py(120): forward", 1_500 * US, 28_500 * US, pid=PID, tid=PID, kind="python_function"),
              Range("aten::slice", 27_940 * US, 27_970 * US, pid=PID, tid=PID, kind="cpu_op"),
              Range("train.py(40): step", 29_500 * US, 36_500 * US, pid=PID, tid=PID, kind="python_function"),
              Range("aten::item", 30_400 * US, 35_200 * US, pid=PID, tid=PID, kind="cpu_op"))
    return TraceSpec(gpus=(H100_SXM,), kernels=kernels, api_calls=calls, ranges=ranges,
                     process_names={PID: "python"}, thread_names={(PID, PID): "python"})


@pytest.fixture(scope="module")
def cover_trace(tmp_path_factory) -> traceview.Trace:
    return traceview.load(write_kineto(_cover_spec(), tmp_path_factory.mktemp("cover") / "t.json.gz")).analyze()


def test_the_covering_cause_is_the_deepest_event_over_half_the_gap(cover_trace) -> None:
    rows = cover_trace.sql("""
        SELECT dur_ns, idle_kind, covered, cover_kind, cover_name, cover_ns, cover_pct, untraced_ns, untraced_pct,
               cpu_op, cpu_op_overlap_ns FROM idle_gap_context WHERE dur_ns > 2000000 ORDER BY start_ns
    """).rows()
    assert [r[:6] + (r[7],) + r[9:] for r in rows] == [
        (27 * MS, "host_wait", True, "python_frame", "model.py(120): forward", 26_500 * US, 500 * US,
         "aten::slice", 30 * US),
        (5 * MS, "sync_drain", True, "host_call", "cudaStreamSynchronize", 4 * MS, 0, "aten::item", 4_200 * US),
        (4 * MS, "host_wait", False, "host_call", "cudaLaunchKernel", 5 * US, 3_995 * US, None, None),
        (3 * MS, "bubble", False, None, None, None, 3 * MS, None, None),
    ]
    assert [r[6] for r in rows[:3]] == [pytest.approx(100 * 26.5 / 27), pytest.approx(80.0), pytest.approx(0.125)]
    assert rows[3][6] is None
    assert [r[8] for r in rows] == [pytest.approx(100 * 0.5 / 27), 0.0, pytest.approx(99.875), 100.0]


def test_tv201_names_the_covering_cause_with_its_share(cover_trace) -> None:
    finding, = check(cover_trace.con, [RULES["TV201"]], RuleConfig(select=("TV201",))).findings
    assert f"27.00 ms before {GEMM}: 98% under python forward (model.py:120) (host wait)" in finding.message
    assert f"5.00 ms before {GEMM}: 80% under call cudaStreamSynchronize (sync drain)" in finding.message
    assert f"4.00 ms before {GEMM}: 99.9% untraced host time, the widest event 0.1% (call cudaLaunchKernel) " \
           "(host wait)" in finding.message
    assert "aten::slice" not in finding.message
    largest = finding.evidence["rows"][0]
    assert (largest["cover_kind"], largest["cover_ns"], largest["untraced_ns"]) == ("python_frame", 26_500 * US,
                                                                                     500 * US)
    assert "cover:python_frame" in finding.fix_facts and "python_events_dense" not in finding.fix_facts


def test_ranges_inside_a_caller_in_the_gap_change_no_context(tmp_path) -> None:
    """Kineto, one thread; times in us. A [0, 1000], B [11000, 12000] launched at 10990: gap [1000, 11000], 10 ms.
    In it two frames with one interval, run.py(1): run and step.py(2): step [2000, 5000] (30% of the gap), then
    f.py(3): f [2500, 3500] inside them, aten::mm [2600, 3400] inside that, aten::add [6000, 6100] alone. Of the
    equal frames the deeper is named (the innermost of equals); f.py, inside them and shorter, names nothing; the
    CPU op is aten::mm (800 us, against aten::add's 100); nothing covers half. Traced: [2000, 5000], [6000, 6100]
    and the 5 us launch: 6,895 us untraced."""
    kernels = (_kernel(GEMM, 0, 1_000, -20), _kernel(GEMM, 11_000, 1_000, 10_990))
    ranges = (Range("run.py(1): run", 2_000 * US, 5_000 * US, pid=PID, tid=PID, kind="python_function"),
              Range("step.py(2): step", 2_000 * US, 5_000 * US, pid=PID, tid=PID, kind="python_function"),
              Range("f.py(3): f", 2_500 * US, 3_500 * US, pid=PID, tid=PID, kind="python_function"),
              Range("aten::mm", 2_600 * US, 3_400 * US, pid=PID, tid=PID, kind="cpu_op"),
              Range("aten::add", 6_000 * US, 6_100 * US, pid=PID, tid=PID, kind="cpu_op"))
    spec = TraceSpec(gpus=(H100_SXM,), kernels=kernels, ranges=ranges, process_names={PID: "python"},
                     thread_names={(PID, PID): "python"})
    trace = traceview.load(write_kineto(spec, tmp_path / "t.json.gz")).analyze()
    depths = dict(trace.sql("SELECT name, depth FROM ranges WHERE name IN ('run.py(1): run', 'step.py(2): step')").rows())
    assert len(set(depths.values())) == 2, depths
    deeper = max(depths, key=depths.get)
    row = trace.sql("""SELECT dur_ns, covered, python_frame, cpu_op, cpu_op_overlap_ns, untraced_ns
                       FROM idle_gap_context""").rows()
    assert row == [(10 * MS, False, deeper, "aten::mm", 800 * US, 6_895 * US)]


def test_python_event_density_of_a_sparse_trace(cover_trace) -> None:
    """Two frames on the launching thread, whose events run from A's launch at -20 us to F's launch end at 41505."""
    row = cover_trace.sql("SELECT threads, host_ns, python_events, overhead_ns, dense FROM python_event_density").rows()
    assert row == [(1, 41_525 * US, 2, 2 * US, False)]
    assert not cover_trace.sql("SELECT * FROM diagnostics WHERE code = 'python_events_dense'").rows()


def test_dense_python_events_are_diagnosed(tmp_path) -> None:
    """1500 Python frames of 2 us, one every 6 us, between launches at 0 and 9990 us (5 us each): 9.995 ms of host
    time, 150.08 events per ms; at 1 us each 1.5 ms of it, 15.01%, over the 10% at which it is reported."""
    frames = tuple(Range("f.py(1): g", (10 + 6 * i) * US, (12 + 6 * i) * US, pid=PID, tid=PID, kind="python_function")
                   for i in range(1_500))
    spec = TraceSpec(gpus=(H100_SXM,), kernels=(_kernel(GEMM, 50, 10, 0), _kernel(GEMM, 10_000, 10, 9_990)),
                     ranges=frames, process_names={PID: "python"}, thread_names={(PID, PID): "python"})
    trace = traceview.load(write_kineto(spec, tmp_path / "t.json.gz")).analyze()
    (host_ns, events, per_ms, overhead_pct, dense), = trace.sql(
        "SELECT host_ns, python_events, events_per_ms, overhead_pct, dense FROM python_event_density").rows()
    assert (host_ns, events, dense) == (9_995 * US, 1_500, True)
    assert per_ms == pytest.approx(1_500 / 9.995) and overhead_pct == pytest.approx(100 * 1.5 / 9.995)
    (severity, message), = trace.sql("SELECT severity, message FROM diagnostics "
                                     "WHERE source = 'analysis' AND code = 'python_events_dense'").rows()
    assert severity == "warning"
    assert "1500 Python function events on the launching threads, 150 per ms of their 10.0 ms" in message
    assert "some 15% of that host time is the profiler's own" in message


@requires_shared
def test_vllm_gaps_are_covered_by_the_model_forward_not_the_op_at_their_end() -> None:
    """vLLM H100 (with_stack): the one gap over 1 ms (1.21 ms before the prefill's first Triton kernel) used to
    name the Triton op at its end, which covers 67 us of it; checked with a sweep here over the launching thread's
    Python frames: the latest-starting one covering half the gap is llama.py(343): forward."""
    trace = analysed(VLLM_H100)
    (start, end, pid, tid), = trace.sql("SELECT start_ns, end_ns, pid, call_tid FROM gpu_idle_gaps "
                                        "WHERE dur_ns > 1000000").rows()
    frames = trace.sql("SELECT name, start_ns, end_ns FROM ranges WHERE kind = 'python_function' AND pid = ? "
                       "AND tid = ? AND start_ns < ? AND end_ns > ?", params=[pid, tid, end, start]).rows()
    over_half = [(s, -e, name, min(e, end) - max(s, start)) for name, s, e in frames
                 if 2 * (min(e, end) - max(s, start)) >= end - start]
    _, _, name, overlap = max(over_half)
    row = trace.sql("SELECT covered, cover_kind, cover_name, cover_ns, cpu_op, cpu_op_overlap_ns "
                    "FROM idle_gap_context WHERE end_ns = ?", params=[end]).rows()
    assert name == "vllm/model_executor/models/llama.py(343): forward"
    assert row == [(True, "python_frame", name, overlap, row[0][4], row[0][5])]
    assert 2 * row[0][5] < end - start  # the op at the gap's end covers far less than half
    (density,) = trace.sql("SELECT python_events, dense FROM python_event_density").rows()
    assert density == (106_101, True)


@requires_shared
def test_every_gaps_frame_op_and_range_match_a_range_join_on_vllm() -> None:
    """vLLM H100 (with_stack, 128 k host ranges): for every gap of at least 10 us, the Python frame, CPU op and
    user range of the launching thread overlapping it the most (then the latest-starting, the shortest, the
    deepest), found here by a plain range join over every range, equal what the analysis finds with ASOF joins
    over the ranges its time buckets keep."""
    trace = analysed(VLLM_H100)
    expected = trace.sql("""
        WITH g AS (SELECT device_id, start_ns, end_ns, pid, call_tid FROM gpu_idle_gaps
                   WHERE dur_ns >= 10000 AND call_tid IS NOT NULL),
        o AS (SELECT g.device_id, g.end_ns AS gap_end, r.kind, r.name, r.start_ns, r.end_ns, r.depth,
                     (CASE WHEN r.end_ns < g.end_ns THEN r.end_ns ELSE g.end_ns END)
                       - (CASE WHEN r.start_ns > g.start_ns THEN r.start_ns ELSE g.start_ns END) AS overlap
              FROM g JOIN ranges r ON r.pid = g.pid AND r.tid = g.call_tid
                                  AND r.start_ns < g.end_ns AND r.end_ns > g.start_ns)
        SELECT device_id, gap_end,
               arg_max(name, (overlap, start_ns, -end_ns, depth)) FILTER (WHERE kind = 'python_function'),
               arg_max(name, (overlap, start_ns, -end_ns, depth)) FILTER (WHERE kind = 'cpu_op'),
               arg_max(name, (overlap, start_ns, -end_ns, depth)) FILTER (WHERE kind IN ('nvtx', 'user_annotation'))
        FROM o GROUP BY ALL ORDER BY ALL""").rows()
    found = trace.sql("""SELECT device_id, end_ns, python_frame, cpu_op, user_range FROM idle_gap_context
                         WHERE python_frame IS NOT NULL OR cpu_op IS NOT NULL OR user_range IS NOT NULL
                         ORDER BY ALL""").rows()
    assert len(found) > 100 and found == expected
