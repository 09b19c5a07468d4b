"""Generated traces for the capture-health (TV102, TV103) and host/launch (TV201-TV203) rule cases.

Each public function returns a `traceview.testing.TraceSpec` whose numbers are known exactly; cases name
them as `fixture = "<function>"` in tests/rules/cases/TV1xx.toml / TV2xx.toml. All times are ns from the
start of the capture.
"""

from __future__ import annotations

from dataclasses import replace

from traceview.testing import ApiCall, GpuSpec, Kernel, Memop, Range, TraceSpec, llm_serving_spec

_H100 = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0,
                memory_bandwidth_bytes_per_s=3_352_000_000_000, clock_hz=1_980_000_000, l2_bytes=52_428_800)
_MS = 1_000_000
_US = 1_000


def host_serving_graph_mode() -> TraceSpec:
    """The sample serving run as nsys records it with --cuda-graph-trace=graph (its default).

    Every decode forward is one cudaGraphLaunch; in graph mode nsys writes the launch call but not the
    kernels the graph replays (they go to CUPTI_ACTIVITY_KIND_GRAPH_TRACE as one whole-graph record),
    so the kernels table keeps only the eager prefill, lm_head and sampling kernels. Ground truth:
    24 graph launches (one per decode step), none with a kernel; 24 decode steps affected.
    """
    spec = llm_serving_spec()
    launches: dict[int, Kernel] = {}
    for k in spec.kernels:
        if k.graph and k.launch_start_ns is not None:
            launches[k.correlation_id] = k
    calls = [ApiCall("cudaGraphLaunch", k.launch_start_ns, k.launch_dur_ns, pid=k.pid, tid=k.tid,
                     correlation_id=corr) for corr, k in launches.items()]
    return replace(spec, kernels=tuple(k for k in spec.kernels if not k.graph),
                   api_calls=tuple(spec.api_calls) + tuple(calls))


def host_serving_eager_decode() -> TraceSpec:
    """The sample serving run with CUDA graphs off (vLLM --enforce-eager): decode forwards launched kernel by kernel.

    32 layers (Llama-3-8B's count) so a decode forward is 358 launches. The sample's host simulation is
    reused, so launches keep its cadence (dispatcher and Python time between launches, ~22 us a kernel)
    and the decode kernels of a few us each leave the GPU waiting for the host.
    """
    from traceview.testing import LlamaConfig, samples

    def eager_forward(sim, descs) -> None:  # what vLLM does without CUDA graphs
        for d in descs:
            sim.eager(d)

    graph = samples._Sim.graph
    samples._Sim.graph = eager_forward
    try:
        return samples.llm_serving_spec(cfg=LlamaConfig(num_layers=32), decode_steps=6)
    finally:
        samples._Sim.graph = graph


def host_gaps_two_gpus() -> TraceSpec:
    """Two GPUs with hand-placed idle gaps, one of each cause (ground truth in ns).

    GPU 0 (one process, one thread; every launch call pinned):
      A  kernel   [0.0, 1.0] ms               launched at -0.020 ms
      B  kernel   [4.0, 5.0] ms               launched at 2.5 ms     -> gap 1: 1.0-4.0 ms, 3 ms, host_launch_late
      C  memcpy   [4.5, 5.2] ms (stream 8)    overlaps B: busy until 5.2 ms
         cudaStreamSynchronize 4.6-5.25 ms on the launching thread
      D  kernel   [7.2, 8.0] ms               launched at 6.0 ms     -> gap 2: 5.2-7.2 ms, 2 ms, sync_wait
      E  kernel   [10.0, 10.4] ms             launched at 7.5 ms (before D ended; queued) -> gap 3: 8.0-10.0 ms,
                                              2 ms, launch_overhead
      F  kernel   [10.9, 11.0] ms             launched at 10.7 ms    -> gap 4: 10.4-10.9 ms, 0.5 ms (< 1 ms)
    GPU 0: span 11.0 ms, busy 1.0+1.2+0.8+0.4+0.1 = 3.5 ms, idle 7.5 ms (68.18%);
           gaps > 1 ms: 3 (7.0 ms, 63.64% of the span): host_launch_late 3 ms, sync_wait 2 ms, launch_overhead 2 ms.
    GPU 1 (another thread): G [0.5, 1.5] ms, H [3.0, 3.2] ms launched at 2.9 ms -> one 1.5 ms gap,
           host_launch_late; span 2.7 ms, busy 1.2 ms.
    """
    pid, tid, tid1 = 4242, 4242, 4243
    k = dict(pid=pid, tid=tid, device_id=0, stream_id=7)
    kernels = (
        Kernel("gemm_A", 0, 1 * _MS, launch_start_ns=-20 * _US, launch_dur_ns=5 * _US, **k),
        Kernel("gemm_B", 4 * _MS, 1 * _MS, launch_start_ns=2_500 * _US, launch_dur_ns=5 * _US, **k),
        Kernel("gemm_D", 7_200 * _US, 800 * _US, launch_start_ns=6 * _MS, launch_dur_ns=5 * _US, **k),
        Kernel("gemm_E", 10 * _MS, 400 * _US, launch_start_ns=7_500 * _US, launch_dur_ns=5 * _US, **k),
        Kernel("gemm_F", 10_900 * _US, 100 * _US, launch_start_ns=10_700 * _US, launch_dur_ns=5 * _US, **k),
        Kernel("gemm_G", 500 * _US, 1 * _MS, pid=pid, tid=tid1, device_id=1, stream_id=9,
               launch_start_ns=100 * _US, launch_dur_ns=5 * _US),
        Kernel("gemm_H", 3 * _MS, 200 * _US, pid=pid, tid=tid1, device_id=1, stream_id=9,
               launch_start_ns=2_900 * _US, launch_dur_ns=5 * _US),
    )
    memops = (Memop("memcpy", 4_500 * _US, 700 * _US, 64 << 20, "DtoH", "Device", "Pinned", pid=pid, tid=tid,
                    device_id=0, stream_id=8, launch_start_ns=4_400 * _US, launch_dur_ns=8 * _US),)
    calls = (ApiCall("cudaStreamSynchronize", 4_600 * _US, 650 * _US, pid=pid, tid=tid),)
    ranges = (Range("ProfilerStep#1", -100 * _US, 11_100 * _US, pid=pid, tid=tid, kind="user_annotation"),)
    return TraceSpec(gpus=(_H100, replace(_H100, device_id=1)), kernels=kernels, memops=memops, api_calls=calls,
                     ranges=ranges, process_names={pid: "python"})


def host_step_busy() -> TraceSpec:
    """Three annotated decode steps with known GPU busy share of their wall time.

    Step 0: window [0, 10] ms, kernels [0.5, 10.0] ms            -> busy 9.5 of 10 ms (95%)
    Step 1: window [12, 22] ms, kernels [13, 15] + [17, 20] ms    -> busy 5 of 10 ms (50%), lost 5 ms
    Step 2: window [24, 34] ms, kernels [24.5, 28.5] + [29, 33] ms -> busy 8 of 10 ms (80%), lost 2 ms
    Below 90%: steps 1 and 2, 7 ms lost; below 60%: step 1 only, 5 ms.
    """
    pid = tid = 5150
    name = "execute_context_0(0)_generation_8(8)"
    windows = ((0, 10), (12, 22), (24, 34))
    busy = (((0.5, 10.0),), ((13, 15), (17, 20)), ((24.5, 28.5), (29, 33)))
    kernels, ranges = [], []
    for (w0, w1), spans in zip(windows, busy):
        ranges.append(Range(name, w0 * _MS, w1 * _MS, pid=pid, tid=tid, kind="user_annotation"))
        for s0, s1 in spans:
            start = int(s0 * _MS)
            kernels.append(Kernel("nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN", start, int(s1 * _MS) - start,
                                  pid=pid, tid=tid, launch_start_ns=start - 30 * _US, launch_dur_ns=5 * _US))
    return TraceSpec(gpus=(_H100,), kernels=tuple(kernels), ranges=tuple(ranges), process_names={pid: "VLLM::Worker"})
