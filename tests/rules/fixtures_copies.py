"""Generated copy-bound runs for the engines stage and TV208 (copy-bound-run).

Ten training-like iterations on one H100 SXM (host link PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 / 8 =
8192e9/130 = 63.015 GB/s per direction). Each iteration copies a 1 GB batch host-to-device and then runs four
1.25 ms kernels; the host waits in cudaStreamSynchronize and then spends 3 ms preparing the next batch, so
the GPU idles 3.06 ms between iterations. Each iteration is a `ProfilerStep#N` range on the launching thread: a
Kineto profiler step, and in the nsys files an NVTX range that `step_regex = "^ProfilerStep#"` makes a step
(gap-based steps are kernel bursts that would leave the copies outside every step). All times are ns.
"""

from __future__ import annotations

from dataclasses import replace

from traceview.testing import H100_SXM, ApiCall, Kernel, Memop, Range, TraceSpec

PID = 5151
US = 1_000
MS = 1_000_000
START = 5 * MS
STEPS = 10
BATCH_BYTES = 1_000_000_000
COPY_NS = 40 * MS  # 1 GB at 25 GB/s
KERNEL_NS = 1_250 * US
KERNELS = 4
HOST_PREP_NS = 3 * MS
COMPUTE_STREAM, SIDE_STREAM = 7, 13
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
NAMES = (GEMM, "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int, float*)",
         GEMM, "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>(float*)")


STEP_REGEX = "^ProfilerStep#"


def _step(i: int, start: int, end: int) -> Range:
    return Range(f"ProfilerStep#{i}", start, end, pid=PID, tid=PID, kind="user_annotation")


def _spec(kernels, memops, calls, ranges) -> TraceSpec:
    return TraceSpec(gpus=(H100_SXM,), kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(calls),
                     ranges=tuple(ranges), process_names={PID: "python"}, thread_names={(PID, PID): "python"})


def copy_bound_run() -> TraceSpec:
    """Per iteration at t: the copy is launched at t+10 us and runs t+50 us .. +40 ms on the compute stream;
    the kernels are launched at t+30 us + 5 us each and run back to back after it (5 ms); the host sits in
    cudaStreamSynchronize from t+60 us until 10 us after the last kernel, then prepares the next batch.

    Per step: copy-only X = 40 ms, copy C = 40 ms, kernels K = 5 ms, no overlap; at the link's peak the copy
    takes C' = 1e9 B / 63.015 GB/s = 15,869,140.625 ns (15,869,141 rounded). Overlap hides X - (C - K) = 5 ms;
    the saving is X - (C' - K) = 29,130,859 ns per step, 291,308,590 ns over the ten."""
    kernels, memops, calls, ranges = [], [], [], []
    t = START
    for i in range(STEPS):
        copy_start = t + 50 * US
        memops.append(Memop("memcpy", copy_start, COPY_NS, BATCH_BYTES, "HtoD", "Pinned", "Device", pid=PID, tid=PID,
                            stream_id=COMPUTE_STREAM, launch_start_ns=t + 10 * US, launch_dur_ns=8 * US))
        for j, name in enumerate(NAMES):
            kernels.append(Kernel(name, copy_start + COPY_NS + j * KERNEL_NS, KERNEL_NS, pid=PID, tid=PID,
                                  stream_id=COMPUTE_STREAM, launch_start_ns=t + 30 * US + j * 5 * US,
                                  launch_dur_ns=4 * US, grid=(132, 1, 1), block=(256, 1, 1)))
        gpu_end = copy_start + COPY_NS + KERNELS * KERNEL_NS
        calls.append(ApiCall("cudaStreamSynchronize", t + 60 * US, gpu_end + 10 * US - (t + 60 * US), pid=PID, tid=PID))
        ranges.append(_step(i, t, gpu_end + 10 * US + HOST_PREP_NS))
        t = gpu_end + 10 * US + HOST_PREP_NS
    return _spec(kernels, memops, calls, ranges)


def prefetched_copies() -> TraceSpec:
    """The same batches prefetched on a side stream: batch i+1 copies while iteration i's 50 ms of kernels run.

    Only the first copy (40 ms) has no kernel beside it: 40 of 10 x 50 + 40 = 540 ms of span, 7.4 %."""
    kernels, memops, ranges = [], [], []
    compute_ns = 50 * MS
    t = START
    memops.append(Memop("memcpy", t, COPY_NS, BATCH_BYTES, "HtoD", "Pinned", "Device", pid=PID, tid=PID,
                        stream_id=SIDE_STREAM, launch_start_ns=t - 20 * US, launch_dur_ns=8 * US))
    t += COPY_NS
    for i in range(STEPS):
        ranges.append(_step(i, t - 30 * US, t + compute_ns - 30 * US))
        if i + 1 < STEPS:
            memops.append(Memop("memcpy", t + 20 * US, COPY_NS, BATCH_BYTES, "HtoD", "Pinned", "Device", pid=PID,
                                tid=PID, stream_id=SIDE_STREAM, launch_start_ns=t, launch_dur_ns=8 * US))
        for j, name in enumerate(NAMES):
            kernels.append(Kernel(name, t + j * compute_ns // KERNELS, compute_ns // KERNELS, pid=PID, tid=PID,
                                  stream_id=COMPUTE_STREAM, launch_start_ns=t - 15 * US + j * 3 * US,
                                  launch_dur_ns=2 * US, grid=(132, 1, 1), block=(256, 1, 1)))
        t += compute_ns
    return _spec(kernels, memops, (), ranges)


STEP_NS = 96_900_000  # one step of the two-GPU run: its GPU 0 copies 94 ms of every 96.9
GPU0_COPY_NS, GPU0_BYTES = 94 * MS, 2_350_000_000  # 2.35 GB at 25 GB/s
GPU0_KERNEL_NS = 1_450 * US  # two per step, after the copy: 2.9 ms of compute
GPU1_COPY_NS, GPU1_BYTES = 5 * MS, 100_000_000  # DtoH into pageable memory at 20 GB/s
GPU1_D2D_NS, GPU1_D2D_BYTES = 1 * MS, 1_000_000_000  # under GPU 1's kernels
GPU1_KERNEL_NS = 1 * MS  # two per step


def copy_bound_two_gpus() -> TraceSpec:
    """One process driving two H100 SXM, ten `ProfilerStep#N` steps of 96.9 ms from t = 5 ms.

    GPU 0 copies 2.35 GB host-to-device from pinned memory at 25 GB/s (94 ms, 39.7 % of PCIe 5.0 x16) and
    then runs two 1.45 ms kernels: its span is 10 x 96.9 = 969 ms, 940 ms of it copy-only, beside 29 ms of
    kernels. GPU 1 reads 100 MB back into pageable memory (5 ms, 20 GB/s), then runs two 1 ms kernels with a
    1 GB device-to-device copy under them (1 ms, 1 TB/s); its span is 9 x 96.9 + 7 = 879.1 ms, copy-only 50 ms
    (5.7 %). The step's rank-wide copy-only time (no kernel on either GPU) is 94 - 2 = 92 ms, so the budget holds
    GPU 0's whole claim.
    Every launch sits inside its step's range, 100 us before the step's GPU work."""
    kernels, memops, ranges = [], [], []
    h100_1 = replace(H100_SXM, device_id=1)
    for i in range(STEPS):
        t = START + i * STEP_NS
        ranges.append(_step(i, t - 100 * US, t + STEP_NS - 100 * US))
        memops.append(Memop("memcpy", t, GPU0_COPY_NS, GPU0_BYTES, "HtoD", "Pinned", "Device", pid=PID, tid=PID,
                            stream_id=COMPUTE_STREAM, launch_start_ns=t - 90 * US, launch_dur_ns=8 * US))
        for j in range(2):
            kernels.append(Kernel(NAMES[j], t + GPU0_COPY_NS + j * GPU0_KERNEL_NS, GPU0_KERNEL_NS, pid=PID, tid=PID,
                                  stream_id=COMPUTE_STREAM, launch_start_ns=t - 80 * US + j * 5 * US,
                                  launch_dur_ns=4 * US, grid=(132, 1, 1), block=(256, 1, 1)))
        memops.append(Memop("memcpy", t, GPU1_COPY_NS, GPU1_BYTES, "DtoH", "Device", "Pageable", pid=PID, tid=PID,
                            device_id=1, stream_id=SIDE_STREAM, launch_start_ns=t - 60 * US, launch_dur_ns=8 * US))
        for j in range(2):
            kernels.append(Kernel(NAMES[2 + j], t + GPU1_COPY_NS + j * GPU1_KERNEL_NS, GPU1_KERNEL_NS, pid=PID,
                                  tid=PID, device_id=1, stream_id=COMPUTE_STREAM,
                                  launch_start_ns=t - 50 * US + j * 5 * US, launch_dur_ns=4 * US,
                                  grid=(132, 1, 1), block=(256, 1, 1)))
        memops.append(Memop("memcpy", t + GPU1_COPY_NS + 500 * US, GPU1_D2D_NS, GPU1_D2D_BYTES, "DtoD", "Device",
                            "Device", pid=PID, tid=PID, device_id=1, stream_id=SIDE_STREAM + 1,
                            launch_start_ns=t - 30 * US, launch_dur_ns=8 * US))
    return TraceSpec(gpus=(H100_SXM, h100_1), kernels=tuple(kernels), memops=tuple(memops), ranges=tuple(ranges),
                     process_names={PID: "python"}, thread_names={(PID, PID): "python"})
