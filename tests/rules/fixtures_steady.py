"""Generated traces for steady-state detection (analysis/steady.py) and TV104: a cold first training
iteration, a warm-up iteration, then steady ones, each a ProfilerStep#N window with known one-time work.

Every step runs the same kernels: a forward GEMM, a backward GEMM launched inside an autograd
`evaluate_function` range (so the steps are `train`), and a per-step NCCL all-reduce (it recurs, so it
is not one-time). The cold step 0 first does, on the host, a cudaMalloc (4 ms), a cuLibraryLoadData
(6 ms) and two cuModuleLoadData calls (3 ms each), and on the GPU a one-time NCCL broadcast (12 ms)
before any compute: 28 ms of one-time work, without overlaps, in a 32 ms step. The warm-up step 1's
forward GEMM takes 6 ms instead of 1 ms (10 ms wall against 5 ms). All times are ns.
"""

from __future__ import annotations

from traceview.testing import A100_80GB, ApiCall, Kernel, Range, TraceSpec

PID = 3100
US = 1_000
MS = 1_000_000
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
GEMM_BACKWARD = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"

STEP0_START = 1 * MS
# one-time host calls of the cold step: (name, API, start, duration)
COLD_CALLS = (("cudaMalloc", "runtime", 1_100 * US, 4 * MS),
              ("cuLibraryLoadData", "driver", 5_200 * US, 6 * MS),
              ("cuModuleLoadData", "driver", 11_300 * US, 3 * MS),
              ("cuModuleLoadData", "driver", 14_400 * US, 3 * MS))
BROADCAST_START, BROADCAST_NS = 18 * MS, 12 * MS
COLD_COMPUTE_START = 30_500 * US
STEADY_WALL = 5 * MS
WARMUP_GEMM = 6 * MS


def _iteration(start: int, forward_ns: int, ranges: list, kernels: list) -> int:
    """One iteration's kernels from `start` on the GPU, 100 us apart, each launched 20 us before it runs; returns
    the end of the last."""
    at = start
    for name, dur, backward in ((GEMM, forward_ns, False), (GEMM_BACKWARD, 1 * MS, True), (ALL_REDUCE, 300 * US, False)):
        launch = at - 20 * US
        tid = PID + 1 if backward else PID
        if backward:
            ranges.append(Range("autograd::engine::evaluate_function: MmBackward0", launch - 2 * US, launch + 10 * US,
                                pid=PID, tid=tid, kind="cpu_op"))
        kernels.append(Kernel(name, at, dur, pid=PID, tid=tid, launch_start_ns=launch, launch_dur_ns=5 * US))
        at += dur + 100 * US
    return at - 100 * US


def _training(steps: int) -> TraceSpec:
    kernels: list[Kernel] = []
    ranges: list[Range] = []
    calls = [ApiCall(name, start, dur, pid=PID, tid=PID, api=api) for name, api, start, dur in COLD_CALLS]
    kernels.append(Kernel(BROADCAST, BROADCAST_START, BROADCAST_NS, pid=PID, tid=PID,
                          launch_start_ns=BROADCAST_START - 400 * US, launch_dur_ns=5 * US))
    end = _iteration(COLD_COMPUTE_START, 1 * MS, ranges, kernels)
    windows = [(STEP0_START, end)]
    for step in range(1, steps):
        start = windows[-1][1] + 200 * US
        forward = WARMUP_GEMM if step == 1 else 1 * MS
        wall = STEADY_WALL + (forward - 1 * MS)
        _iteration(start + 300 * US, forward, ranges, kernels)
        windows.append((start, start + wall))
    ranges += [Range(f"ProfilerStep#{index}", lo, hi, pid=PID, tid=PID, kind="user_annotation")
               for index, (lo, hi) in enumerate(windows)]
    return TraceSpec(gpus=(A100_80GB,), kernels=tuple(kernels), api_calls=tuple(calls), ranges=tuple(ranges),
                     process_names={PID: "python"}, thread_names={(PID, PID): "python", (PID, PID + 1): "autograd"})


def cold_then_steady() -> TraceSpec:
    """Step 0 cold (init), step 1 warm-up, steps 2-11 steady."""
    return _training(12)


def single_cold_iteration() -> TraceSpec:
    """Only the cold step: no steady state, 28 ms of one-time work in a 32 ms step."""
    return _training(1)
