"""Generated two-process DDP runs in one nsys export, for the rank analysis and TV402 (rank skew).

Two training processes, one GPU each, plus a launcher process that makes one CUDA call and no GPU
work. Every step: a 40 us NCCL broadcast both ranks reach together, four GEMMs, then an NCCL
all-reduce that ends at the same moment on both GPUs, 300 us after the later rank reached it; then
the GPUs idle until the next step. The process on GPU 1 has the smaller pid, so the ranks must come
from the GPU ordinal first (GPU 0 -> rank 0), not from the pid.

`ddp_straggler`: rank 1 (GPU 1) computes 1.5 ms per GEMM against rank 0's 0.5 ms, so rank 0 sits in each
all-reduce 4,300 us where rank 1 needs 300 us: 4 ms of waiting per step, 40 ms over the 10 steps.
`ddp_balanced`: both ranks compute 0.5 ms per GEMM; nobody waits.
All times are ns.
"""

from __future__ import annotations

from dataclasses import replace

from traceview.testing import H100_SXM, ApiCall, Kernel, TraceSpec

US = 1_000
MS = 1_000_000
STEPS = 10
PERIOD = 7_500 * US
START = 1 * MS
LAUNCHER_PID = 5000
# (pid, GPU): the rank-1 process has the lower pid
PROCESSES = ((5200, 0), (5100, 1))
GEMMS = 4
BROADCAST_NS = 40 * US
ALL_REDUCE_NS = 300 * US  # the transfer itself, once the last rank arrived
COMPUTE_STREAM, NCCL_STREAM = 7, 20
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x5_tn_align8>(Params)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _run(gemm_ns: dict[int, int]) -> TraceSpec:
    """One DDP run: `gemm_ns` maps each GPU to its GEMM duration."""
    kernels = []
    all_reduce_start = 50 * US + 10 * US + GEMMS * max(gemm_ns.values())  # when the later rank arrives
    for step in range(STEPS):
        t = START + step * PERIOD
        for pid, gpu in PROCESSES:
            def launch(name: str, start: int, dur: int, stream: int) -> Kernel:
                return Kernel(name, t + start, dur, pid=pid, tid=pid, device_id=gpu, stream_id=stream,
                              launch_start_ns=t + start - 8 * US, launch_dur_ns=5 * US)
            kernels.append(launch(BROADCAST, 0, BROADCAST_NS, NCCL_STREAM))
            for i in range(GEMMS):
                kernels.append(launch(GEMM, 50 * US + i * gemm_ns[gpu], gemm_ns[gpu], COMPUTE_STREAM))
            arrive = 50 * US + GEMMS * gemm_ns[gpu] + 10 * US
            kernels.append(launch(ALL_REDUCE, arrive, all_reduce_start + ALL_REDUCE_NS - arrive, NCCL_STREAM))
    gpus = (H100_SXM, replace(H100_SXM, device_id=1))
    launcher = ApiCall("cudaGetDeviceCount", START // 2, 5 * US, pid=LAUNCHER_PID, tid=LAUNCHER_PID)
    kernels.sort(key=lambda k: (k.start_ns, k.device_id))
    return TraceSpec(gpus=gpus, kernels=tuple(kernels), api_calls=(launcher,), world_size=2,
                     process_names={LAUNCHER_PID: "torchrun", 5100: "python", 5200: "python"})


def ddp_straggler() -> TraceSpec:
    return _run({0: 500 * US, 1: 1_500 * US})


def ddp_balanced() -> TraceSpec:
    return _run({0: 500 * US, 1: 500 * US})
