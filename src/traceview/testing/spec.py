"""What a synthetic trace holds: the spec a test writes, and so the ground truth it asserts.

Why this exists: ingest and analysis code must be tested against files that look
exactly like what ``nsys export --type sqlite`` and ``torch.profiler`` /
Kineto write (schema, string interning, packed ids, per-process correlation
ids, CUDA-graph replays, time bases), while the test still knows the right
answer.  A :class:`TraceSpec` is the answer; the writers (nsys_writer.py,
kineto_writer.py) turn it into raw files that an ingester cannot tell from
real captures.  Only the standard library is used so the generator can run
anywhere the tests run.

Time convention: every ``*_ns`` in a spec is an integer nanosecond offset from
the start of the capture.  The nsys writer adds ``TraceSpec.session_offset_ns``
(nsys timestamps are on a session time base that does not start at 0); the
Kineto writer writes ``ts`` relative to ``baseTimeNanoseconds`` (modern) or as
absolute Unix microseconds (legacy 2021 flavour).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

# --------------------------------------------------------------------------------------
# Public description of a trace
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    """One visible GPU; written to TARGET_INFO_GPU and Kineto ``deviceProperties``.

    Peak bandwidth / clock are optional because real files may lack them; roofline
    code must cope with that.
    """

    name: str
    sm_count: int
    memory_bytes: int
    compute_major: int
    compute_minor: int
    memory_bandwidth_bytes_per_s: int | None = None
    clock_hz: int | None = None
    l2_bytes: int | None = None
    device_id: int = 0


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel execution plus (implicitly) the host call that launched it.

    ``graph=True`` marks a CUDA-graph replay: all kernels of one ``cudaGraphLaunch``
    share its correlation id (pass the same ``correlation_id``) and carry no
    Kineto ``External id``.  ``launch_start_ns``/``launch_dur_ns`` pin the launch
    call; when omitted the writer places it so that it ends shortly before the
    kernel starts.
    """

    name: str
    start_ns: int
    dur_ns: int
    pid: int = 1000
    tid: int = 1000
    device_id: int = 0
    stream_id: int = 7
    correlation_id: int | None = None
    launch_api: str = "cudaLaunchKernel"
    graph: bool = False
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers_per_thread: int = 32
    shared_memory_bytes: int = 0
    external_id: int | None = None
    short_name: str | None = None
    launch_start_ns: int | None = None
    launch_dur_ns: int | None = None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class Memop:
    """A memcpy or memset on the GPU; its ``cudaMemcpyAsync``/``cudaMemsetAsync``
    launch call is generated like a kernel launch."""

    kind: Literal["memcpy", "memset"]
    start_ns: int
    dur_ns: int
    bytes: int
    copy_kind: str = "HtoD"
    src_kind: str = "Pinned"
    dst_kind: str = "Device"
    pid: int = 1000
    tid: int = 1000
    device_id: int = 0
    stream_id: int = 7
    correlation_id: int | None = None
    external_id: int | None = None
    launch_start_ns: int | None = None
    launch_dur_ns: int | None = None
    value: int = 0

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class ApiCall:
    """An extra host-side CUDA API call (e.g. ``cudaStreamSynchronize``) with no GPU op."""

    name: str
    start_ns: int
    dur_ns: int
    pid: int = 1000
    tid: int = 1000
    correlation_id: int | None = None
    api: Literal["runtime", "driver"] = "runtime"
    external_id: int | None = None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class Range:
    """A host-side range.

    ``nvtx`` ranges exist only in nsys files, ``cpu_op``/``python_function`` only
    in Kineto files, and ``user_annotation`` (``record_function``, vLLM step
    annotations) in both: as a Kineto ``user_annotation`` and as an NVTX push/pop
    range (as PyTorch/vLLM emit them when nsys traces NVTX).
    """

    name: str
    start_ns: int
    end_ns: int
    pid: int = 1000
    tid: int = 1000
    kind: Literal["nvtx", "user_annotation", "cpu_op", "python_function"] = "nvtx"
    domain: str | None = None
    external_id: int | None = None
    input_dims: tuple | list | None = None
    input_types: tuple | list | None = None
    input_values: tuple | list | None = None  # Kineto 'Concrete Inputs': scalars as strings, '' for tensors


@dataclass(frozen=True)
class TraceSpec:
    """The ground truth of one capture: GPUs, GPU ops, host calls and ranges."""

    gpus: Sequence[GpuSpec]
    kernels: Sequence[Kernel]
    memops: Sequence[Memop] = ()
    api_calls: Sequence[ApiCall] = ()
    ranges: Sequence[Range] = ()
    rank: int = 0
    world_size: int = 1
    process_names: Mapping[int, str] = field(default_factory=dict)
    thread_names: Mapping[tuple[int, int], str] = field(default_factory=dict)
    session_offset_ns: int = 3_900_000_000
    start_utc_ns: int = 1_780_088_400_000_000_000
    hostname: str = "gpu-node-07"


def global_tid(pid: int, tid: int) -> int:
    """nsys serialized thread id: (hw/vm id 1 << 48) | (pid << 24) | tid."""
    return (1 << 48) | ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def global_pid(pid: int) -> int:
    """nsys serialized process id: the globalTid layout with the tid bits zero."""
    return (1 << 48) | ((pid & 0xFFFFFF) << 24)


# Per compute-capability hardware limits (deviceProperties, TARGET_INFO_GPU, occupancy).
# cc -> (maxThreadsPerSM, maxWarpsPerSM, maxBlocksPerSM, smemPerSM, smemPerBlockOptin, chip)
_ARCH = {
    (7, 0): (2048, 64, 32, 98_304, 98_304, "GV100"),
    (7, 5): (1024, 32, 16, 65_536, 65_536, "TU102"),
    (8, 0): (2048, 64, 32, 167_936, 166_912, "GA100"),
    (8, 6): (1536, 48, 16, 102_400, 101_376, "GA102"),
    (8, 9): (1536, 48, 24, 102_400, 101_376, "AD102"),
    (9, 0): (2048, 64, 32, 233_472, 232_448, "GH100"),
    (10, 0): (2048, 64, 32, 233_472, 232_448, "GB100"),
    (12, 0): (1536, 48, 32, 102_400, 101_376, "GB202"),
}


def _arch(gpu: GpuSpec | None) -> tuple[int, int, int, int, int, str]:
    if gpu is None:
        return _ARCH[(8, 0)]
    return _ARCH.get((gpu.compute_major, gpu.compute_minor), _ARCH[(8, 0)])


# --------------------------------------------------------------------------------------
# Ready-made specs
# --------------------------------------------------------------------------------------

A100_80GB = GpuSpec("NVIDIA A100-SXM4-80GB", 108, 85_198_045_184, 8, 0,
                    memory_bandwidth_bytes_per_s=2_039_000_000_000, clock_hz=1_410_000_000,
                    l2_bytes=41_943_040)


def two_process_spec(n_kernels: int = 5) -> TraceSpec:
    """Two DDP-like processes whose correlation ids are the same numbers (1..N each).

    Joining GPU work to API calls on correlationId alone pairs every kernel with a
    call in *both* processes (and some with a memcpy or sync call); only a join on
    (pid, correlationId) is right.  Process B also launches through the driver API
    and uses different kernels and durations, so a wrong join is visible.
    """
    gpus = (A100_80GB, replace(A100_80GB, device_id=1))
    kernels: list[Kernel] = []
    memops: list[Memop] = []
    calls: list[ApiCall] = []
    ranges: list[Range] = []
    procs = [(41_001, 0, "cudaLaunchKernel", 0), (41_002, 1, "cuLaunchKernelEx", 7_000)]
    for pid, dev, api, shift in procs:
        tid = pid
        t = 1_000_000 + shift
        memops.append(Memop("memcpy", t + 20_000, 6_000 + 1_000 * dev, 1 << 20, "HtoD", "Pinned", "Device",
                            pid=pid, tid=tid, device_id=dev, correlation_id=1))
        t += 40_000
        for i in range(n_kernels):
            dur = (30_000 + 5_000 * i) if dev == 0 else (90_000 - 7_000 * i)
            name = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
                    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
                    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
                    "std::array<char*, 2ul>)") if dev == 0 else f"triton_poi_fused_add_mul_{i}"
            kernels.append(Kernel(name, t, dur, pid=pid, tid=tid, device_id=dev, correlation_id=2 + i,
                                  launch_api=api if (dev == 0 or i % 2 == 0) else "cudaLaunchKernel",
                                  grid=(1024 * (dev + 1), 1, 1), block=(128, 1, 1)))
            t += dur + 3_000
        calls.append(ApiCall("cudaDeviceSynchronize", t - 2_000, 20_000, pid=pid, tid=tid,
                             correlation_id=2 + n_kernels))
        ranges.append(Range("train_step_0", 1_000_000 + shift - 5_000, t + 30_000, pid=pid, tid=tid, kind="nvtx"))
        if dev == 1:
            ranges.append(Range("ncclAllReduce", t - 60_000, t - 10_000, pid=pid, tid=tid, kind="nvtx",
                                domain="NCCL"))
    return TraceSpec(gpus=gpus, kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(calls),
                     ranges=tuple(ranges), rank=0, world_size=2,
                     process_names={41_001: "python3", 41_002: "python3"})
