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


# A test binary's one run, nvFuser-like: it fills its inputs on the GPU (one 100 us kernel at 1 ms), then the
# host compiles the fusion for 400 ms (a range `FusionExecutorCache::compileFusion` with a nested
# `Nvrtc::CompileProgram`) before launching it, and a Torch-Compiled Region range (a compiled module running,
# not compiling) wraps those launches. The GPU waits about 401 ms between its first two kernels: start-up, which
# no finding may price.
COMPILE_START, COMPILE_NS = 2 * MS, 400 * MS
JIT_KERNELS = 8
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float*)"


def jit_compiled_single_run() -> TraceSpec:
    """One GPU window after a 400 ms compile range: an initialisation step, nothing steady."""
    kernels, ranges = [], [
        Range("FusionExecutorCache::compileFusion", COMPILE_START, COMPILE_START + COMPILE_NS, pid=PID, tid=PID,
              kind="user_annotation"),
        Range("executor_utils::Nvrtc::CompileProgram", COMPILE_START + 10 * MS, COMPILE_START + 390 * MS, pid=PID,
              tid=PID, kind="user_annotation"),
    ]
    kernels.append(Kernel(FILL, 1 * MS, 100 * US, pid=PID, tid=PID, launch_start_ns=1 * MS - 20 * US,
                          launch_dur_ns=5 * US))
    at = COMPILE_START + COMPILE_NS + 20 * US
    ranges.append(Range("Torch-Compiled Region: 0/0", at - 30 * US, at + JIT_KERNELS * 300 * US, pid=PID,
                        tid=PID, kind="user_annotation"))
    for _ in range(JIT_KERNELS):
        kernels.append(Kernel(GEMM, at, 200 * US, pid=PID, tid=PID, launch_start_ns=at - 20 * US,
                              launch_dur_ns=5 * US))
        at += 300 * US
    return TraceSpec(gpus=(A100_80GB,), kernels=tuple(kernels), ranges=tuple(ranges),
                     process_names={PID: "python"}, thread_names={(PID, PID): "python"})
