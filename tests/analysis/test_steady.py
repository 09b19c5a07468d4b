"""Steady state: one-time work, step states and the per-rank verdict, on generated traces with known truth
(tests/rules/fixtures_steady.py) and on real ones."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import traceview
from traceview import workflow
from conftest import SHARED_TRACES, VLLM_H100, analysed, requires_shared
from traceview.analysis.steady import INIT_FAMILIES, INIT_RANGE_FAMILIES
from traceview.testing import A100_80GB, ApiCall, Kernel, Range, TraceSpec, write_kineto, write_nsys

import fixtures_steady as cold

MS = 1_000_000


def _load(spec: TraceSpec, tmp_path: Path, writer=write_kineto) -> traceview.Trace:
    if writer is write_nsys:
        return traceview.load(write_nsys(spec, tmp_path / "t.sqlite")).analyze(step_regex="^ProfilerStep#")
    return traceview.load(write_kineto(spec, tmp_path / "t.json.gz")).analyze()


@pytest.mark.parametrize("writer", [write_kineto, write_nsys], ids=["kineto", "nsys"])
def test_cold_first_iteration_is_init_then_warmup_then_steady(tmp_path: Path, writer) -> None:
    trace = _load(cold.cold_then_steady(), tmp_path, writer)
    start = trace.scalar("SELECT min(start_ns) FROM steps")  # ProfilerStep#0 starts at STEP0_START
    windows = trace.sql(f"SELECT step_id, kind, name, side, start_ns - {start}, dur_ns FROM init_windows").rows()
    offset = -cold.STEP0_START
    assert windows == [
        (0, "allocation", "cudaMalloc", "host", 1_100_000 + offset, 4 * MS),
        (0, "module_load", "cuLibraryLoadData", "host", 5_200_000 + offset, 6 * MS),
        (0, "module_load", "cuModuleLoadData", "host", 11_300_000 + offset, 3 * MS),
        (0, "module_load", "cuModuleLoadData", "host", 14_400_000 + offset, 3 * MS),
        (0, "collective", "ncclDevKernel_Broadcast_RING_LL", "gpu", cold.BROADCAST_START + offset, cold.BROADCAST_NS),
    ]
    states = trace.sql("SELECT step_id, state, reason, wall_ns, init_ns FROM step_states ORDER BY step_id").rows()
    phase = "train " if writer is write_kineto else ""  # nsys has no autograd cpu_op ranges: phase unknown
    assert states[0] == (0, "init", "1 one-time ncclDevKernel_Broadcast_RING_LL kernel 12.0 ms, 1 cuLibraryLoadData "
                         "call 6.0 ms, 2 cuModuleLoadData calls 6.0 ms, 1 cudaMalloc call 4.0 ms; one-time work 28.0 ms "
                         "of the step's 32.0 ms wall", 32 * MS, 28 * MS)
    assert states[1] == (1, "warmup", f"wall 2.0x the median of 10 later {phase}steps", 10 * MS, 0)
    assert [s[1] for s in states[2:]] == ["steady"] * 10
    assert states[2][2] == f"wall 1.00x the median of 9 later {phase}steps"
    summary = trace.sql("SELECT * FROM steady_state").to_dicts()
    assert len(summary) == 1
    row = summary[0]
    assert (row["steps"], row["init_steps"], row["warmup_steps"], row["steady_steps"]) == (12, 1, 1, 10)
    assert (row["first_steady_step"], row["last_steady_step"], row["verdict"], row["more_steps_needed"]) == (2, 11, "steady", 0)
    assert (row["non_steady_ns"], row["step_wall_ns"], row["init_ns"], row["outside_init_ns"]) == (42 * MS, 92 * MS, 28 * MS, 0)
    steps = trace.sql("SELECT min(start_ns), max(end_ns) FROM steps WHERE step_id >= 2").rows()[0]
    assert (row["steady_start_ns"], row["steady_end_ns"]) == steps


def test_single_cold_iteration_has_no_steady_state(tmp_path: Path) -> None:
    trace = _load(cold.single_cold_iteration(), tmp_path)
    assert trace.sql("SELECT state FROM step_states").rows() == [("init",)]
    row = trace.sql("SELECT verdict, more_steps_needed, dominant_phase, dominant_steady_steps, first_steady_step "
                    "FROM steady_state").rows()
    assert row == [("no_steady_state", 3, "train", 0, None)]


@pytest.mark.parametrize("writer", [write_kineto, write_nsys], ids=["kineto", "nsys"])
def test_jit_compilation_makes_a_single_run_start_up_and_the_verdict_says_so(tmp_path: Path, writer) -> None:
    """A 400 ms compile range before the first launch is one-time work (the compiled region running is not):
    the one window is an initialisation step, no finding prices it, and the verdict opens with start-up and how
    to capture steady state for this profiler."""
    path = writer(cold.jit_compiled_single_run(), tmp_path / ("t.sqlite" if writer is write_nsys else "t.json.gz"))
    trace = traceview.load(path).analyze()
    windows = trace.sql("SELECT kind, name, dur_ns FROM init_windows ORDER BY start_ns").rows()
    assert windows == [("compilation", "FusionExecutorCache::compileFusion", cold.COMPILE_NS),
                       ("compilation", "executor_utils::Nvrtc::CompileProgram", 380 * MS)]
    assert trace.sql("SELECT state FROM step_states").rows() == [("init",)]
    document = workflow.report(trace, workflow.CheckOptions.configured(baseline=False))
    assert all(f["estimated_saving_ns"] == 0 for f in document["findings"])
    first = document["verdict"][0]
    assert first.startswith("Start-up, not steady state: the only step is initialisation: 400 ms of one-time work")
    assert "FusionExecutorCache::compileFusion" in first and "no saving is priced" in first
    how = ("record steady iterations with torch.profiler.schedule(wait=1, warmup=2, active=3) and prof.step()"
           if writer is write_kineto else "start the capture after warm-up: nsys --capture-range=cudaProfilerApi "
           "around later iterations")
    assert first.endswith(f"To measure steady state, {how}.")


def test_allocations_every_step_are_not_init_but_captures_are(tmp_path: Path) -> None:
    """A cudaMallocAsync of 1 ms in each 5 ms step (an allocator without a cache) is steady work; a stream capture
    from cudaStreamBeginCapture to cudaStreamEndCapture (2 ms) plus cudaGraphInstantiate (1 ms) in step 0 is init."""
    pid, kernels, calls, ranges = 7, [], [], []
    for step in range(5):
        lo = 1 * MS + step * 5 * MS
        ranges.append(Range(f"ProfilerStep#{step}", lo, lo + 5 * MS, pid=pid, tid=pid, kind="user_annotation"))
        calls.append(ApiCall("cudaMallocAsync", lo + 100_000, 1 * MS, pid=pid, tid=pid))
        kernels.append(Kernel("gemm_kernel", lo + 3 * MS, 1 * MS, pid=pid, tid=pid))
    calls += [ApiCall("cudaStreamBeginCapture", 1_200_000, 10_000, pid=pid, tid=pid),
              ApiCall("cudaStreamEndCapture", 3_190_000, 10_000, pid=pid, tid=pid),
              ApiCall("cudaGraphInstantiateWithFlags", 3_300_000, 1 * MS, pid=pid, tid=pid)]
    trace = _load(TraceSpec(gpus=(A100_80GB,), kernels=tuple(kernels), api_calls=tuple(calls), ranges=tuple(ranges)),
                  tmp_path)
    captures = trace.sql("SELECT name, dur_ns FROM init_windows WHERE kind = 'graph_capture' ORDER BY start_ns").rows()
    assert captures == [("cudaStreamBeginCapture..cudaStreamEndCapture", 2 * MS), ("cudaGraphInstantiateWithFlags", 1 * MS)]
    states = trace.sql("SELECT state, init_ns FROM step_states ORDER BY step_id").rows()
    # step 0: allocation [1.1, 2.1) ms, capture [1.2, 3.2), instantiate [3.3, 4.3): union 3.1 ms
    assert states == [("init", 3_100_000)] + [("steady", 1 * MS)] * 4


def test_one_time_range_families_tell_compiling_from_running_compiled_code() -> None:
    patterns = dict(INIT_RANGE_FAMILIES)
    compiling = ["KernelExecutor::compileFusion", "compile_fx_inner", "triton_autotune", "CachingAutotuner.benchmark_all_configs"
                 " (autotuning)", "executor_utils::Nvrtc::CompileProgram"]
    running = ["Torch-Compiled Region: 0/0", "CompiledFunction", "CompiledFunctionBackward", "aten::mm",
               "TorchDynamo Cache Lookup",
               "fbgemm::split_embedding_codegen_lookup_adagrad_function", "is_compiling", "compiler_get_specialization"]
    con = duckdb.connect()
    matches = lambda name, kind: con.execute("SELECT regexp_matches(?, ?)", [name, patterns[kind]]).fetchone()[0]
    assert [name for name in compiling if not matches(name, "compilation")] == []
    assert [name for name in running if matches(name, "compilation")] == []
    assert all(matches(name, "comm_init") for name in ("ncclCommInitRank", "ncclCommInitAll", "init_process_group"))
    assert not matches("ncclAllReduce", "comm_init")


def test_init_families_match_driver_runtime_and_hip_names() -> None:
    names = {
        "module_load": ["cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuLibraryLoadData",
                        "cuLibraryLoadFromFile", "hipModuleLoad", "hipModuleLoadData", "cuLinkComplete"],
        "graph_capture": ["cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture",
                          "cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
                          "hipStreamBeginCapture", "hipGraphInstantiateWithFlags", "cudaGraphUpload"],
        "allocation": ["cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc",
                       "cuMemAlloc_v2", "cuMemAllocManaged", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemCreate",
                       "cuMemMap", "cuMemSetAccess", "cuMemAddressReserve", "hipMalloc", "hipExtMallocWithFlags",
                       "hipHostMalloc", "hipMemCreate", "hipMemSetAccess"],
        "context": ["cuInit", "cuCtxCreate_v2", "cuDevicePrimaryCtxRetain", "hipInit", "hipCtxCreate"],
        None: ["cudaLaunchKernel", "cuLaunchKernelEx", "cudaStreamGetCaptureInfo", "cudaStreamGetCaptureInfo_v2",
               "cudaGraphLaunch", "cudaFree", "cuMemFree_v2", "cudaMemcpyAsync", "cudaMemsetAsync", "hipMemsetAsync",
               "cuModuleGetFunction", "cuModuleUnload", "cuCtxSynchronize", "cuCtxSetCurrent", "cuKernelGetName"],
    }
    con = duckdb.connect()
    for expected, api_names in names.items():
        for name in api_names:
            kinds = [kind for kind, pattern in INIT_FAMILIES
                     if con.execute("SELECT regexp_matches(?, ?)", [name, pattern]).fetchone()[0]]
            assert kinds == ([expected] if expected else []), name


@requires_shared
def test_vllm_h100_is_steady_and_its_prefill_all_reduce_is_not_one_time() -> None:
    """The prefill step's NCCL all-reduces run in no other step, but it is the only prefill step: nothing says
    they would not recur, so they are not one-time; all 11 steps are steady, 9 of them decode. The only one-time
    work is Inductor's autotune-cache end_compile hook, 81 calls in the first step, 15.6 us in all: far under
    the share that makes a step initialisation."""
    trace = analysed(VLLM_H100)
    assert trace.sql("SELECT kind, step_id, count(*), sum(dur_ns) FROM init_windows GROUP BY ALL").rows() == [
        ("compilation", 0, 81, 15_621)]
    assert trace.sql("SELECT DISTINCT state FROM step_states").rows() == [("steady",)]
    assert trace.sql("SELECT reason FROM step_states WHERE step_id = 0").rows() == [
        ("the only prefill step: nothing to compare it with",)]
    row = trace.sql("SELECT dominant_phase, dominant_steady_steps, verdict FROM steady_state").rows()
    assert row == [("decode", 9, "steady")]


@requires_shared
def test_graph_capture_trace_is_dominated_by_its_captures() -> None:
    """vLLM's piecewise graph capture on MI300X: each hipStreamBeginCapture pairs with the next
    hipStreamEndCapture of its thread; the captures lie between the 26 GPU bursts."""
    trace = analysed(SHARED_TRACES / "torch" / "tracelens__vllm_prefilldecode_piecewise_graph_capture.pt.trace.json.gz")
    calls = trace.sql("SELECT tid, name, start_ns, end_ns FROM api_calls WHERE name LIKE 'hipStream%Capture' "
                      "ORDER BY tid, start_ns").rows()
    spans, open_at = [], {}
    for tid, name, start, end in calls:
        if name == "hipStreamBeginCapture":
            open_at[tid] = start
        elif tid in open_at:
            spans.append(end - open_at.pop(tid))
    captures = trace.sql("SELECT count(*), sum(dur_ns) FROM init_windows WHERE name LIKE '%..%'").rows()
    assert captures == [(len(spans), sum(spans))] and len(spans) == 25
    row = trace.sql("SELECT steady_steps, verdict, outside_init_ns > step_wall_ns FROM steady_state").rows()
    # each GPU burst's step runs to the next burst, so the captures between them fall inside the steps: every
    # step is initialisation and the profile has no steady state; vLLM's compile_or_warm_up_model frame (174.3 ms,
    # one-time compilation and warm-up around the captures) reaches past the steps, so more one-time work lies
    # outside them (127.2 ms) than the steps last (55.2 ms)
    assert row == [(0, "no_steady_state", True)]
    assert trace.sql("SELECT count(*), sum(dur_ns) FROM init_windows WHERE kind = 'compilation'").rows() == [
        (3, 174_330_842)]
    assert trace.sql("SELECT state, count(*) FROM step_states GROUP BY state").rows() == [("init", 26)]
