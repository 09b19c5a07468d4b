"""Write synthetic but format-exact profiler traces with known ground truth.

Why this exists: ingest and analysis code must be tested against files that look
exactly like what ``nsys export --type sqlite`` and ``torch.profiler`` /
Kineto write (schema, string interning, packed ids, per-process correlation
ids, CUDA-graph replays, time bases), while the test still knows the right
answer.  A :class:`TraceSpec` is the answer; :func:`write_nsys` and
:func:`write_kineto` turn it into raw files that an ingester cannot tell from
real captures.  Only the standard library is used so the generator can run
anywhere the tests run.

Time convention: every ``*_ns`` in a spec is an integer nanosecond offset from
the start of the capture.  The nsys writer adds ``TraceSpec.session_offset_ns``
(nsys timestamps are on a session time base that does not start at 0); the
Kineto writer writes ``ts`` relative to ``baseTimeNanoseconds`` (modern) or as
absolute Unix microseconds (legacy 2021 flavour).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import gzip as _gzip
import json
import re
import sqlite3
import struct
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

__all__ = [
    "ApiCall",
    "GpuSpec",
    "Kernel",
    "Memop",
    "Range",
    "TraceSpec",
    "NSYS_VERSIONS",
    "KINETO_FLAVOURS",
    "global_tid",
    "global_pid",
    "short_kernel_name",
    "summarize",
    "two_process_spec",
    "write_kineto",
    "write_nsys",
]

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


NSYS_VERSIONS = ("2026.3", "2023.1", "legacy")
KINETO_FLAVOURS = ("modern", "legacy2021")


def global_tid(pid: int, tid: int) -> int:
    """nsys serialized thread id: (hw/vm id 1 << 48) | (pid << 24) | tid."""
    return (1 << 48) | ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def global_pid(pid: int) -> int:
    """nsys serialized process id: the globalTid layout with the tid bits zero."""
    return (1 << 48) | ((pid & 0xFFFFFF) << 24)


# --------------------------------------------------------------------------------------
# CUDA API facts (names, suffixes, CUPTI callback ids, default host durations)
# --------------------------------------------------------------------------------------

# nsys stores runtime API names with the CUDA version that introduced them.
_RUNTIME_SUFFIX = {
    "cudaLaunchKernel": "_v7000",
    "cudaLaunchKernelExC": "_v11060",
    "cudaLaunchCooperativeKernel": "_v9000",
    "cudaGraphLaunch": "_v10000",
    "cudaStreamIsCapturing": "_v10000",
    "cudaFuncSetAttribute": "_v9000",
    "cudaStreamDestroy": "_v5050",
    "cudaStreamCreateWithPriority": "_v5050",
}
_DEFAULT_RUNTIME_SUFFIX = "_v3020"

# CUPTI callback ids as written in Kineto ``cbid`` args.
_CBID = {
    "cudaDriverGetVersion": 1,
    "cudaFuncGetAttributes": 15,
    "cudaMemcpy": 31,
    "cudaMemcpyAsync": 41,
    "cudaMemset": 49,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cudaEventSynchronize": 137,
    "cudaEventQuery": 138,
    "cudaStreamWaitEvent": 147,
    "cudaDeviceSynchronize": 165,
    "cudaLaunchKernel": 211,
    "cudaLaunchCooperativeKernel": 214,
    "cudaFuncSetAttribute": 273,
    "cudaGraphLaunch": 311,
    "cudaStreamIsCapturing": 317,
    "cudaLaunchKernelExC": 430,
    "cuLaunchKernel": 307,
    "cuLaunchKernelEx": 652,
}

# Host calls Kineto draws an ac2g flow start for (launches, copies, syncs).
_FLOW_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cudaMemset",
        "cudaMemsetAsync",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaStreamWaitEvent",
    }
)
_LEGACY_FLOW_APIS = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
     "cudaGraphLaunch", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync"}
)

_LAUNCH_DUR_NS = {
    "cudaLaunchKernel": 4_200,
    "cudaLaunchKernelExC": 5_100,
    "cudaLaunchCooperativeKernel": 5_000,
    "cuLaunchKernel": 3_800,
    "cuLaunchKernelEx": 4_000,
    "cudaGraphLaunch": 28_000,
    "cudaMemcpyAsync": 7_500,
    "cudaMemsetAsync": 3_500,
}
_LAUNCH_LEAD_NS = 1_500  # launch call ends this long before the GPU op starts
_CALL_GAP_NS = 300  # minimum gap between two auto-placed calls on one thread

_COPY_KIND = {"Unknown": 0, "HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6,
              "DtoA": 7, "DtoD": 8, "HtoH": 9, "PtoP": 10}
_MEM_KIND = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4,
             "Device Static": 5, "Managed Static": 6, "Unknown": 7}
_SEVERITY = {"unknown": 0, "info": 1, "warning": 2, "error": 3, "verbose": 4}


def _is_driver_api(name: str) -> bool:
    return name.startswith("cu") and not name.startswith("cuda")


def _nsys_api_name(name: str, api: str) -> str:
    if api == "driver" or re.search(r"_v\d+$", name):
        return name
    return name + _RUNTIME_SUFFIX.get(name, _DEFAULT_RUNTIME_SUFFIX)


def _base_api_name(name: str) -> str:
    return re.sub(r"_v\d+$", "", name)


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


def short_kernel_name(name: str) -> str:
    """nsys ``shortName``: the base function name without namespaces/templates/args."""
    s = name.replace("(anonymous namespace)", "{anon}")
    if s.startswith("void "):
        s = s[5:]
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<" and depth == 0 and not s.startswith("operator", max(0, i - 8)):
            s = s[:i]
            break
        if ch == "(" and depth == 0:
            s = s[:i]
            break
    s = s.strip()
    return s.rsplit("::", 1)[-1] if s else name


def _mangle(name: str) -> str:
    """Plausible Itanium-style symbol for C++ names; ``extern "C"`` names stay as they are.

    Real exports carry the raw symbol; nothing downstream demangles it, so a stable
    ``_ZN...`` string is enough to exercise the column.
    """
    if "(" not in name and "::" not in name:
        return name
    qual = name[5:] if name.startswith("void ") else name
    qual = qual.replace("(anonymous namespace)", "_GLOBAL__N_1")
    cut = min([i for i in (qual.find("<"), qual.find("(")) if i != -1] or [len(qual)])
    parts = [p for p in qual[:cut].split("::") if p]
    body = "".join(f"{len(p)}{p}" for p in parts)
    templ = "I" + "".join(f"{len(t)}{t}" for t in re.findall(r"[A-Za-z_]\w*", qual[cut:].split("(")[0])[:3]) + "E" \
        if qual[cut:cut + 1] == "<" else ""
    return (f"_ZN{body}{templ}Ev" if len(parts) > 1 else f"_Z{body}{templ}v")


# --------------------------------------------------------------------------------------
# nsys schema: DDL column lists (copied from real exports) and ENUM contents
# --------------------------------------------------------------------------------------

# name|TYPE|CONSTRAINTS|comment, as nsys 2026.3.1 (schema 3.27.0) writes them.
_DDL_COLUMNS: dict[str, tuple[str | None, str]] = {
    "StringIds": ("Consolidation of repetitive string values.", """
id|INTEGER|NOT NULL   PRIMARY KEY|ID reference value.
value|TEXT|NOT NULL|String value.
"""),
    "TARGET_INFO_SYSTEM_ENV": (None, """
globalVid|INTEGER||Serialized GlobalId.
devStateName|TEXT|NOT NULL|Device state name.
name|TEXT|NOT NULL|Property name.
nameEnum|INTEGER|NOT NULL|Property enum value.
value|TEXT|NOT NULL|Property value.
"""),
    "TARGET_INFO_SESSION_START_TIME": (None, """
utcEpochNs|INTEGER||UTC Epoch timestamp at start of the capture (ns).
utcTime|TEXT||Start of the capture in UTC.
localTime|TEXT||Start of the capture in local time of target.
systemClockNs|INTEGER||Target system clock timestamp at start of the capture (ns).
"""),
    "ANALYSIS_DETAILS": ("Details about the analysis session.", """
globalVid|INTEGER|NOT NULL|Serialized GlobalId.
duration|INTEGER|NOT NULL|The total time span of the entire trace (ns).
startTime|INTEGER|NOT NULL|Trace start timestamp in nanoseconds.
stopTime|INTEGER|NOT NULL|Trace stop timestamp in nanoseconds.
"""),
    "DIAGNOSTIC_EVENT": (None, """
timestamp|INTEGER|NOT NULL|Event timestamp (ns).
timestampType|INTEGER|NOT NULL|REFERENCES ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE(id)
source|INTEGER|NOT NULL|REFERENCES ENUM_DIAGNOSTIC_SOURCE_TYPE(id)
severity|INTEGER|NOT NULL|REFERENCES ENUM_DIAGNOSTIC_SEVERITY_LEVEL(id)
text|TEXT|NOT NULL|Diagnostic message text
globalPid|INTEGER||Serialized GlobalId.
"""),
    "NVTX_EVENTS": (None, """
start|INTEGER|NOT NULL|Event start timestamp (ns).
end|INTEGER||Event end timestamp (ns).
eventType|INTEGER|NOT NULL|REFERENCES ENUM_NSYS_EVENT_TYPE(id)
rangeId|INTEGER||Correlation ID returned from a nvtxRangeStart call.
category|INTEGER||User-controlled ID that can be used to group events.
color|INTEGER||Encoded ARGB color value.
text|TEXT||Explicit name/text (non-registered string)
globalTid|INTEGER||Serialized GlobalId.
endGlobalTid|INTEGER||Serialized GlobalId.
textId|INTEGER||REFERENCES StringIds(id) -- Registered NVTX domain/string
domainId|INTEGER||User-controlled ID that can be used to group events.
uint64Value|INTEGER||One of possible payload value union members.
int64Value|INTEGER||One of possible payload value union members.
doubleValue|REAL||One of possible payload value union members.
uint32Value|INTEGER||One of possible payload value union members.
int32Value|INTEGER||One of possible payload value union members.
floatValue|REAL||One of possible payload value union members.
jsonTextId|INTEGER||One of possible payload value union members.
jsonText|TEXT||One of possible payload value union members.
binaryData|TEXT||Binary payload. See docs for format.
"""),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (None, """
start|INTEGER|NOT NULL|Event start timestamp (ns).
end|INTEGER|NOT NULL|Event end timestamp (ns).
eventClass|INTEGER|NOT NULL|REFERENCES ENUM_NSYS_EVENT_CLASS(id)
globalTid|INTEGER||Serialized GlobalId.
correlationId|INTEGER||ID used to identify events that this function call has triggered.
nameId|INTEGER|NOT NULL|REFERENCES StringIds(id) -- Function name
returnValue|INTEGER|NOT NULL|Return value of the function call.
callchainId|INTEGER||REFERENCES CUDA_CALLCHAINS(id)
"""),
    "CUPTI_ACTIVITY_KIND_KERNEL": (None, """
start|INTEGER|NOT NULL|Event start timestamp (ns).
end|INTEGER|NOT NULL|Event end timestamp (ns).
deviceId|INTEGER|NOT NULL|Device ID.
contextId|INTEGER|NOT NULL|Context ID.
greenContextId|INTEGER||Green context ID.
streamId|INTEGER|NOT NULL|Stream ID.
correlationId|INTEGER||REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
globalPid|INTEGER||Serialized GlobalId.
demangledName|INTEGER|NOT NULL|REFERENCES StringIds(id) -- Kernel function name w/ templates
shortName|INTEGER|NOT NULL|REFERENCES StringIds(id) -- Base kernel function name
mangledName|INTEGER||REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
launchType|INTEGER||REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
cacheConfig|INTEGER||REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
registersPerThread|INTEGER|NOT NULL|Number of registers required for each thread executing the kernel.
gridX|INTEGER|NOT NULL|X-dimension grid size.
gridY|INTEGER|NOT NULL|Y-dimension grid size.
gridZ|INTEGER|NOT NULL|Z-dimension grid size.
blockX|INTEGER|NOT NULL|X-dimension block size.
blockY|INTEGER|NOT NULL|Y-dimension block size.
blockZ|INTEGER|NOT NULL|Z-dimension block size.
staticSharedMemory|INTEGER|NOT NULL|Static shared memory allocated for the kernel (B).
dynamicSharedMemory|INTEGER|NOT NULL|Dynamic shared memory reserved for the kernel (B).
localMemoryPerThread|INTEGER|NOT NULL|Amount of local memory reserved for each thread (B).
localMemoryTotal|INTEGER|NOT NULL|Total amount of local memory reserved for the kernel (B).
gridId|INTEGER|NOT NULL|Unique grid ID of the kernel assigned at runtime.
sharedMemoryExecuted|INTEGER||Shared memory size set by the driver.
graphNodeId|INTEGER||REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
sharedMemoryLimitConfig|INTEGER||REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
qmdBulkReleaseDone|INTEGER||QMD bulk release done timestamp from CWD events.
qmdPreexitDone|INTEGER||QMD pre-exit done timestamp from CWD events.
qmdLastCtaDone|INTEGER||QMD last CTA done timestamp from CWD events.
graphId|INTEGER||Kernel graph ID.
clusterX|INTEGER||Cluster X dimension.
clusterY|INTEGER||Cluster Y dimension.
clusterZ|INTEGER||Cluster Z dimension.
clusterSchedulingPolicy|INTEGER||Cluster scheduling policy.
maxPotentialClusterSize|INTEGER||Maximum potential cluster size.
maxActiveClusters|INTEGER||Maximum active clusters.
sharedMemoryRequestedPercentage|INTEGER||Shared memory requested percentage.
tensorSizeMinusOneElements|TEXT|NOT NULL|TMA descriptor tensor size minus one elements array.
"""),
    "CUPTI_ACTIVITY_KIND_MEMSET": (None, """
start|INTEGER|NOT NULL|Event start timestamp (ns).
end|INTEGER|NOT NULL|Event end timestamp (ns).
deviceId|INTEGER|NOT NULL|Device ID.
contextId|INTEGER|NOT NULL|Context ID.
greenContextId|INTEGER||Green context ID.
streamId|INTEGER|NOT NULL|Stream ID.
correlationId|INTEGER||REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
globalPid|INTEGER||Serialized GlobalId.
value|INTEGER|NOT NULL|Value assigned to memory.
bytes|INTEGER|NOT NULL|Number of bytes set (B).
graphNodeId|INTEGER||REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
memKind|INTEGER||REFERENCES ENUM_CUDA_MEM_KIND(id)
"""),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (None, """
start|INTEGER|NOT NULL|Event start timestamp (ns).
end|INTEGER|NOT NULL|Event end timestamp (ns).
deviceId|INTEGER|NOT NULL|Device ID.
contextId|INTEGER|NOT NULL|Context ID.
greenContextId|INTEGER||Green context ID.
streamId|INTEGER|NOT NULL|Stream ID.
correlationId|INTEGER||REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
globalPid|INTEGER||Serialized GlobalId.
bytes|INTEGER|NOT NULL|Number of bytes transferred (B).
copyKind|INTEGER|NOT NULL|REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
deprecatedSrcId|INTEGER||Deprecated, use srcDeviceId instead.
srcKind|INTEGER||REFERENCES ENUM_CUDA_MEM_KIND(id)
dstKind|INTEGER||REFERENCES ENUM_CUDA_MEM_KIND(id)
srcDeviceId|INTEGER||Source device ID.
srcContextId|INTEGER||Source context ID.
dstDeviceId|INTEGER||Destination device ID.
dstContextId|INTEGER||Destination context ID.
migrationCause|INTEGER||REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
graphNodeId|INTEGER||REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
virtualAddress|INTEGER||Virtual base address of the page/s being transferred.
copyCount|INTEGER||The total number of memcopy operations traced in this record. In CUDA \
MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes \
based on certain heuristics.
"""),
    "PROCESSES": ("Names and identifiers of processes captured in the report.", """
globalPid|INTEGER||Serialized GlobalId.
pid|INTEGER||The process ID.
name|TEXT||The process name.
"""),
    "ThreadNames": (None, """
nameId|INTEGER|NOT NULL|REFERENCES StringIds(id) -- Thread name
priority|INTEGER||Priority of the thread.
globalTid|INTEGER||Serialized GlobalId.
"""),
    "TARGET_INFO_GPU": (None, """
vmId|INTEGER|NOT NULL|Serialized GlobalId.
id|INTEGER|NOT NULL|Device ID.
name|TEXT||Device name.
busLocation|TEXT||PCI bus location.
isDiscrete|INTEGER||True if discrete, false if integrated.
l2CacheSize|INTEGER||Size of L2 cache (B).
totalMemory|INTEGER||Total amount of memory on the device (B).
memoryBandwidth|INTEGER||Amount of memory transferred (B).
clockRate|INTEGER||Clock frequency (Hz).
smCount|INTEGER||Number of multiprocessors on the device.
pwGpuId|INTEGER||PerfWorks GPU ID.
uuid|TEXT||Device UUID.
luid|INTEGER||Device LUID.
chipName|TEXT||Chip name.
cuDevice|INTEGER||CUDA device ID.
ctxswDevPath|TEXT||GPU context switch device node path.
ctrlDevPath|TEXT||GPU control device node path.
revision|INTEGER||Revision number.
nodeMask|INTEGER||Device node mask.
constantMemory|INTEGER||Memory available on device for __constant__ variables (B).
maxIPC|INTEGER||Maximum instructions per count.
maxRegistersPerBlock|INTEGER||Maximum number of 32-bit registers available per block.
maxShmemPerBlock|INTEGER||Maximum optin shared memory per block.
maxShmemPerBlockOptin|INTEGER||Maximum optin shared memory per block.
maxShmemPerSm|INTEGER||Maximum shared memory available per multiprocessor (B).
maxRegistersPerSm|INTEGER||Maximum number of 32-bit registers available per multiprocessor.
threadsPerWarp|INTEGER||Warp size in threads.
asyncEngines|INTEGER||Number of asynchronous engines.
maxWarpsPerSm|INTEGER||Maximum number of warps per multiprocessor.
maxBlocksPerSm|INTEGER||Maximum number of blocks per multiprocessor.
maxThreadsPerBlock|INTEGER||Maximum number of threads per block.
maxBlockDimX|INTEGER||Maximum X-dimension of a block.
maxBlockDimY|INTEGER||Maximum Y-dimension of a block.
maxBlockDimZ|INTEGER||Maximum Z-dimension of a block.
maxGridDimX|INTEGER||Maximum X-dimension of a grid.
maxGridDimY|INTEGER||Maximum Y-dimension of a grid.
maxGridDimZ|INTEGER||Maximum Z-dimension of a grid.
computeMajor|INTEGER||Major compute capability version number.
computeMinor|INTEGER||Minor compute capability version number.
smMajor|INTEGER||Major multiprocessor version number.
smMinor|INTEGER||Minor multiprocessor version number.
"""),
    "TARGET_INFO_CUDA_DEVICE": (None, """
gpuId|INTEGER||GPU ID.
cudaId|INTEGER|NOT NULL|CUDA device ID.
pid|INTEGER|NOT NULL|Process ID.
uuid|TEXT||Device UUID.
numMultiprocessors|INTEGER||Number of SMs available on the device.
"""),
    "TARGET_INFO_CUDA_CONTEXT_INFO": (None, """
nullStreamId|INTEGER|NOT NULL|Stream ID.
hwId|INTEGER|NOT NULL|Hardware ID.
vmId|INTEGER|NOT NULL|VM ID.
processId|INTEGER|NOT NULL|Process ID.
deviceId|INTEGER|NOT NULL|Device ID.
contextId|INTEGER|NOT NULL|Context ID.
parentContextId|INTEGER||For green context, this is the parent context id.
isGreenContext|INTEGER||Is this a Green Context?
numMultiprocessors|INTEGER||For green context, number of SMs allocated.
numTpcs|INTEGER||For green context, number of TPCs allocated.
tpcMask|TEXT||For green context, comma-separated hex TPC mask values (e.g., '0xf,0x0').
workqueueResourceId|INTEGER||For green context, workqueue resource ID.
workqueueConcurrencyLimit|INTEGER||For green context, workqueue concurrency limit.
workqueueSharingScope|INTEGER||For green context, workqueue sharing scope.
"""),
    "META_DATA_CAPTURE": ("information about nsys capture parameters", """
name|TEXT|NOT NULL|Name of meta-data record
value|TEXT||Value of meta-data record
"""),
    "META_DATA_EXPORT": ("information about nsys export process", """
name|TEXT|NOT NULL|Name of meta-data record
value|TEXT||Value of meta-data record
"""),
    "TARGET_INFO_CUDA_NULL_STREAM": (None, """
streamId|INTEGER|NOT NULL|Stream ID.
hwId|INTEGER|NOT NULL|Hardware ID.
vmId|INTEGER|NOT NULL|VM ID.
processId|INTEGER|NOT NULL|Process ID.
deviceId|INTEGER|NOT NULL|Device ID.
contextId|INTEGER|NOT NULL|Context ID.
"""),
    "TARGET_INFO_CUDA_STREAM": (None, """
streamId|INTEGER|NOT NULL|Stream ID.
hwId|INTEGER|NOT NULL|Hardware ID.
vmId|INTEGER|NOT NULL|VM ID.
processId|INTEGER|NOT NULL|Process ID.
contextId|INTEGER|NOT NULL|Context ID.
priority|INTEGER|NOT NULL|Priority of the stream.
flag|INTEGER|NOT NULL|REFERENCES ENUM_CUPTI_STREAM_TYPE(id)
"""),
    "EXPORT_META_DATA": ("information about nsys export process", """
name|TEXT|NOT NULL|Name of export meta-data record
value|TEXT||Value of export meta-data record
"""),
}

# How nsys 2023.1.2 (schema 3.1.2) differs from 2026.3.1 for the tables we write.
_DROP_2023 = {
    "TARGET_INFO_SESSION_START_TIME": {"systemClockNs"},
    "NVTX_EVENTS": {"binaryData"},
    "CUPTI_ACTIVITY_KIND_KERNEL": {
        "greenContextId", "qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone", "graphId",
        "clusterX", "clusterY", "clusterZ", "clusterSchedulingPolicy", "maxPotentialClusterSize",
        "maxActiveClusters", "sharedMemoryRequestedPercentage", "tensorSizeMinusOneElements",
    },
    "CUPTI_ACTIVITY_KIND_MEMSET": {"greenContextId"},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {"greenContextId", "copyCount"},
}
_COMMENT_2023 = {
    ("NVTX_EVENTS", "text"): "Optional text message for non registered strings.",
    ("NVTX_EVENTS", "textId"): "REFERENCES StringIds(id) -- Registered NVTX domain",
    ("CUPTI_ACTIVITY_KIND_KERNEL", "launchType"): "REFERENCES ENUM_CUDA_KRENEL_LAUNCH_TYPE(id)",
    ("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId"): "REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)",
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "graphNodeId"): "REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)",
    ("CUPTI_ACTIVITY_KIND_MEMSET", "graphNodeId"): "REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)",
}
# Pre-2022 exports (e.g. Mordred report1): one-line DDL, no comments, fewer columns.
_DROP_LEGACY = {
    "NVTX_EVENTS": {"binaryData", "endGlobalTid"},
    "CUPTI_ACTIVITY_KIND_KERNEL": _DROP_2023["CUPTI_ACTIVITY_KIND_KERNEL"] | {"mangledName"},
    "CUPTI_ACTIVITY_KIND_MEMSET": {"greenContextId"},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {"greenContextId", "copyCount", "virtualAddress"},
}


def _columns(table: str, version: str) -> list[tuple[str, str, str, str]]:
    comment, body = _DDL_COLUMNS[table]
    cols = []
    for line in body.strip().splitlines():
        name, typ, cons, cmt = line.split("|", 3)
        cols.append((name, typ, cons, cmt))
    if version == "2023.1":
        drop = _DROP_2023.get(table, set())
        cols = [(n, t, c, _COMMENT_2023.get((table, n), m)) for n, t, c, m in cols if n not in drop]
    elif version == "legacy":
        drop = _DROP_LEGACY.get(table, set())
        cols = [col for col in cols if col[0] not in drop]
    return cols


def _ddl(table: str, version: str) -> str:
    """CREATE TABLE text laid out exactly like the nsys exporter of ``version``."""
    cols = _columns(table, version)
    if version == "legacy":
        parts = []
        for name, typ, cons, _ in cols:
            decl = f"{name} {typ}"
            if cons:
                decl += " " + " ".join(cons.split())
            if table == "CUPTI_ACTIVITY_KIND_RUNTIME" and name == "callchainId":
                decl += " REFERENCES CUDA_CALLCHAINS(id)"
            parts.append(decl)
        return f"CREATE TABLE {table} ({', '.join(parts)})"
    comment = _DDL_COLUMNS[table][0]
    lines = [f"CREATE TABLE {table} ("]
    if comment:
        lines += [f"    -- {comment}", ""]
    for i, (name, typ, cons, cmt) in enumerate(cols):
        rest = (typ.ljust(10) + cons) if cons else typ
        if i < len(cols) - 1:
            rest += ","
        head = "    " + name + " " * max(3, 28 - len(name)) + rest
        lines.append(head.ljust(71) + "-- " + cmt)
    lines.append(")")
    return "\n".join(lines)


def _enum_ddl(table: str, comment: str, version: str) -> str:
    dot = "." if version == "2026.3" else ""
    return (
        f"CREATE TABLE {table} (\n    -- {comment}\n\n"
        f"    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value{dot}\n"
        f"    name                        TEXT,                                  -- Enum symbol name{dot}\n"
        f"    label                       TEXT                                   -- Enum human name{dot}\n)"
    )


# ENUM_NSYS_EVENT_TYPE rows of nsys 2026.3.1 (ids 0..156; name == label).
_EVENT_TYPE_NAMES_2026 = (
    "Unknown|CpuCycles|Instructions|CacheReferences|L1CacheDataWriteMisses|L1CacheDataReadMisse"
    "s|L1CacheInstructionMisses|L2CacheDataWriteMisses|L2CacheDataReadMisses|L2CacheInstruction"
    "Misses|BranchInstructions|BranchMisses|BusCycles|CpuClock|TaskClock|PageFault|ContextSwitc"
    "hes|CpuMigrations|PageFaultsMin|PageFaultsMax|AlignmentFaults|EmulationFaults|ThreadState|"
    "Frames|Annotations|SchedSwitch|SchedWakeup|Command|Mmap|MemUsage|Emc|Composite|NvtxEvents|"
    "NvtxCategory|NvtxMark|NvtxPushRange|NvtxPopRange|NvtxStartRange|NvtxEndRange|NvtxThread|Po"
    "werRate|Sched|CpuCyclesSelf|CpuCyclesTotal|CpuCyclesSelfPlus|Cuda|CudaDevice|TraceProcess|"
    "TraceFunctions|Diagnostic|GlWorkload|BandwidthUsage|KhrDebugMark|KhrDebugPushRange|KhrDebu"
    "gPopRange|KhrDebugGpuMark|KhrDebugGpuPushRange|KhrDebugGpuPopRange|GpuCtxsw|NvtxPushPopRan"
    "ge|NvtxStartEndRange|ProfTime|KhrDebugPushPopRange|KhrDebugGpuPushPopRange|NvtxtCategory|N"
    "vtxtMark|NvtxtPushRange|NvtxtPopRange|NvtxtStartRange|NvtxtEndRange|NvtxtPushPopRange|Nvtx"
    "tStartEndRange|NvtxtMetaThread|NvtxtMetaProcess|NvtxtMetaFileDisplay|NvtxDomainCreate|Nvtx"
    "DomainDestroy|NvnGpuCmdBuf|TraceVSync|CudaDeviceKernel|CudaDeviceMemory|Pmu|NvnGpuDraw|Nvn"
    "GpuCompute|NvnGpuDebug|OS runtime libraries|CuDNN|CuBLAS|NvMedia|OpenACC|Correlation|DX12|"
    "DX12Workload|PmuRawEvent|GraphicsFrame|Vulkan|VulkanWorkload|NvtxNameCudaDevice|NvtxNameCu"
    "daContext|NvtxNameCudaStream|SystemEvent|GpuMemoryEvent|DX12CreateObject|VulkanCreateObjec"
    "t|UnitTraceEvent|CustomETWEvent|CudaSyncEvent|SLIEvent (DEPRECATED)|CudaBacktrace|WddmEven"
    "t|DX11|DX11CreateObject|DXGI|CudaGraphNodeCreation|OpenMP|UncorePmuEvent|UncorePmuCarmel|C"
    "udaDeviceMemoryUsage|ETWDxgKrnlEvent|CudaUvmCpuPageFaultEvent|CudaUvmGpuPageFaultEvent|NIC"
    "MetricsValuesEvent|NICMetricsListEvent|InterruptHandler|NvEncode|NVDecode|nvJPEG|CudaEvent"
    "Record|PerfEventCountEvent|CudaDeviceMemoryPool|CudaDeviceGraph|CudaGraphExecCreation|Cuda"
    "GraphCreation|CudaGraphClone|GpuMemoryTransferEvent|GlTrace|GpuVideoEngineWorkload|IBSwitc"
    "hMetricsValuesEvent|GenericEvent|UncorePmuT23xScf|UncorePmuT23xDsu|IBSwitchCongestionEvent"
    "|CudaDeviceMemcpy|PerfMetricValueEvent|OpenXREvent|TegraInternalEvent|TraceStartFinish|Sys"
    "call|CudaConfidentialComputeKeyRotation|CudaGraphExecNodeSetParams|NvApi|CudaHostFunc|Cuda"
    "Api|Overhead|CudaOverhead|CudaMemDecompress|CudaJit"
)
# 2023.1 has ids 0..140 and older names for three of them.
_EVENT_TYPE_2023_RENAMES = {107: "SLIEvent", 124: "NVENC", 125: "NVDEC"}

# ENUM_NSYS_EVENT_CLASS of nsys 2026.3.1: id|name without TRACE_PROCESS_EVENT_ prefix|label
_EVENT_CLASS_2026 = """
0|CUDA_RUNTIME|CUDA runtime
1|CUDA_DRIVER|CUDA driver
2|GL|GL
3|TSP_OVERHEAD|TSP overhead
4|GL_DEBUG|GL debug
5|GL_WORKLOAD|GL workload
6|NVTX_START|NVTX start
7|NVTX_FINISH|NVTX finish
8|GL_START|GL start
9|GL_FINISH|GL finish
10|CUDA_START|CUDA start
11|CUDA_FINISH|CUDA finish
12|CUDA_INIT_ERROR|CUDA init error
13|CUDA_EGL_DRIVER|CUDA EGL driver
18|VSYNC|Vsync
26|CUDA_API|CUDA API
27|OS_RUNTIME|OSRT runtime
28|CUDNN|cuDNN
29|CUBLAS|cuBLAS
31|OS_RUNTIME_START|OSRT start
32|OS_RUNTIME_FINISH|OSRT finish
33|CUDNN_START|cuDNN start
34|CUDNN_FINISH|cuDNN finish
35|CUBLAS_START|cuBLAS start
36|CUBLAS_FINISH|cuBLAS finish
37|THREAD_BLOCK|Thread block
38|NVMEDIA|NVmedia
39|NVMEDIA_START|NVmedia start
40|NVMEDIA_FINISH|NVmedia finish
41|DX12_API|DX12 API
42|DX12_WORKLOAD|DX12 workload
43|DX12_START|DX12 start
44|DX12_FINISH|DX12 finish
45|OPENACC_START|OpenACC start
46|OPENACC_FINISH|OpenACC finish
47|OPENACC_INIT_ERROR|OpenACC init error
48|OPENACC|OpenACC
49|CPU_FPS|CPU FPS
50|GPU_FPS|GPU FPS
51|GL_MULTI_ERROR|GL multi-error
52|DX12_DISPLAY|DX12 display
53|VULKAN_API|Vulkan API
54|VULKAN_WORKLOAD|Vulkan workload
55|VULKAN_START|Vulkan start
56|VULKAN_FINISH|Vulkan finish
57|SYSTEM_EVENT|System event
58|GPU_MEMORY|GPU memory
59|DX12_CREATE_OBJECT|DX12 create object
60|VULKAN_CREATE_OBJECT|Vulkan create object
61|CUSTOM_ETW_TRACE|Custom ETW trace
62|SLI_DEPRECATED|SLI (Deprecated)
63|SLI_START_DEPRECATED|SLI start (Deprecated)
64|SLI_FINISH_DEPRECATED|SLI finish (Deprecated)
65|DX12_DEBUG_API|DX12 debug API
66|VULKAN_DEBUG_API|Vulkan debug API
67|CUDABACKTRACE|CUDA backtrace
68|CUDABACKTRACE_START|CUDA backtrace start
69|CUDABACKTRACE_FINISH|CUDA backtrace finish
70|WDDM|WDDM
71|DX11_API|DX11 API
72|DX11_START|DX11 start
73|DX11_FINISH|DX11 finish
74|DX11_CREATE_OBJECT|DX11 create object
75|DX11_DEBUG_API|DX11 debug API
76|DXCOMMON_API|DX common API
77|CUDA_GRAPH_NODE_CREATION|CUDA graph node creation
78|OPENMP|OpenMP
79|OPENMP_START|OpenMP start
80|OPENMP_FINISH|OpenMP finish
81|NVAPI|NV API
82|ETWDXGKRNL|ETW DXG KRNL
83|NVENCODE|NVENCODE
84|NVENCODE_START|NVENCODE start
85|NVENCODE_FINISH|NVENCODE finish
86|NVDECODE|NVDECODE
87|NVDECODE_START|NVDECODE start
88|NVDECODE_FINISH|NVDECODE finish
89|NVJPEG|nvJPEG
90|NVJPEG_START|nvJPEG start
91|NVJPEG_FINISH|nvJPEG finish
92|DX12_BATCH_WORKLOAD|DX12 batch workload
93|VULKAN_BATCH_WORKLOAD|Vulkan batch workload
94|CUDA_GRAPHEXEC_CREATION|CUDA graph exec creation
95|CUDA_GRAPH_CREATION|CUDA graph creation
96|CUDA_GRAPH_CLONE|CUDA graph clone
98|OPENCL|OpenCL event
99|OPENCL_START|OpenCL start
100|OPENCL_FINISH|OpenCL finish
101|OPENCL_INIT_ERROR|OpenCL Init error
102|CUDA_JIT|CUDA JIT
103|CUDA_OVERHEAD|CUDA overhead
104|OPENXR|OpenXR event
105|OPENXR_START|OpenXR start
106|OPENXR_FINISH|OpenXR finish
107|SYSCALL|Syscall
108|TEGRA_INTERNAL|Tegra Internal API
109|TEGRA_INTERNAL_START|Tegra Internal API start
110|TEGRA_INTERNAL_FINISH|Tegra Internal API finish
111|CUDA_GRAPH_EXEC_NODE_SET_PARAMS|CUDA graph exec-node set params
112|CUDA_HOST_FUNC|CUDA host function
"""
# 2023.1 has ids up to 96 and the older NVENC/NVDEC/SLI names.
_EVENT_CLASS_2023_RENAMES = {
    62: ("SLI", "SLI"), 63: ("SLI_START", "SLI start"), 64: ("SLI_FINISH", "SLI finish"),
    83: ("NVENC", "NVENC"), 84: ("NVENC_START", "NVENC start"), 85: ("NVENC_FINISH", "NVENC finish"),
    86: ("NVDEC", "NVDEC"), 87: ("NVDEC_START", "NVDEC start"), 88: ("NVDEC_FINISH", "NVDEC finish"),
}

_SMALL_ENUMS: list[tuple[str, str, list[tuple[int, str, str]], tuple[str, ...]]] = [
    ("ENUM_CUDA_MEMCPY_OPER", "CUDA memcpy operation labels", [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
        (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUDA_MEM_KIND", "CUDA memory kind labels", [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUDA_KERNEL_LAUNCH_TYPE", "CUDA kernel launch type labels", [
        (0, "CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN", "Unknown"), (1, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"),
        (2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Coop Single Device"),
        (3, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Coop Multi Device"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG", "CUDA shared memory limit config labels", [
        (0, "CUDA_SHARED_MEM_LIMIT_DEFAULT", "Default"), (1, "CUDA_SHARED_MEM_LIMIT_OPTIN", "Opt in"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUDA_UNIF_MEM_MIGRATION", "CUDA unified memory migration cause labels", [
        (0, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_UNKNOWN", "Unknown"),
        (1, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_USER", "User prefetch"),
        (2, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE", "Page fault"),
        (3, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH", "Speculative prefecth"),
        (4, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION", "Eviction"),
        (5, "CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_ACCESS_COUNTERS", "Access counters"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUDA_FUNC_CACHE_CONFIG", "CUDA function cache config labels", [
        (0, "CU_FUNC_CACHE_PREFER_NONE", "None"), (1, "CU_FUNC_CACHE_PREFER_SHARED", "Shared"),
        (2, "CU_FUNC_CACHE_PREFER_L1", "L1"), (3, "CU_FUNC_CACHE_PREFER_EQUAL", "Equal"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUPTI_STREAM_TYPE", "CUPTI stream type labels", [
        (0, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_UNKNOWN", "Unknown stream type"),
        (1, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT", "Default stream"),
        (2, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING", "Non-blocking stream"),
        (3, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL", "Null stream"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUPTI_SYNC_TYPE", "CUPTI synchronization type labels", [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ], ("2026.3", "2023.1")),
    ("ENUM_CUPTI_OVERHEAD_TYPE", "CUPTI overhead type labels", [
        (0, "OVERHEAD_UNDEFINED", "Undefined"), (1, "OVERHEAD_UNKNOWN", "Unknown"),
        (2, "OVERHEAD_DRIVER_COMPILER", "Driver JIT compiler (CUDA)"),
        (3, "OVERHEAD_CUPTI_BUFFER_FLUSH", "Buffer flush (Profiler)"),
        (4, "OVERHEAD_CUPTI_INSTRUMENTATION", "Instrumentation (Profiler)"),
        (5, "OVERHEAD_CUPTI_RESOURCE", "Resource creation/destruction (Profiler)"),
        (6, "OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING", "Runtime module loading (CUDA)"),
        (7, "OVERHEAD_LAZY_FUNCTION_LOADING", "Lazy function loading (CUDA)"),
        (8, "OVERHEAD_COMMAND_BUFFER_FULL", "Command buffer full (CUDA)"),
    ], ("2026.3",)),
    ("ENUM_DIAGNOSTIC_SEVERITY_LEVEL", "Diagnostic message severity level labels", [
        (0, "UnknownLevel", "Unknown"), (1, "Info", "Info"), (2, "Warning", "Warning"),
        (3, "Error", "Error"), (4, "Verbose", "Verbose"),
    ], ("2026.3",)),
    ("ENUM_DIAGNOSTIC_SOURCE_TYPE", "Diagnostic message source type labels", [
        (0, "UnknownSource", "Unknown source"), (1, "Injection", "Injection"), (2, "Daemon", "Daemon"),
        (3, "Analysis", "Analysis"),
    ], ("2026.3",)),
    ("ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE", "Diagnostic message timestamp source lables", [
        (0, "UnknownTimestamp", "Unknown timestamp"), (1, "TargetTimestamp", "Target timestamp"),
        (2, "HostTimestamp", "Host timestamp"),
    ], ("2026.3",)),
]


def _enum_tables(version: str) -> list[tuple[str, str, list[tuple[int, str, str]]]]:
    """The ENUM_* tables (subset relevant to CUDA traces) in the order nsys creates them."""
    if version == "legacy":
        return []
    names = _EVENT_TYPE_NAMES_2026.split("|")
    classes = []
    for line in _EVENT_CLASS_2026.strip().splitlines():
        i, n, label = line.split("|")
        classes.append((int(i), "TRACE_PROCESS_EVENT_" + n, label))
    if version == "2026.3":
        etype = [(i, n, n) for i, n in enumerate(names)]
    else:
        etype = [(i, _EVENT_TYPE_2023_RENAMES.get(i, n), _EVENT_TYPE_2023_RENAMES.get(i, n))
                 for i, n in enumerate(names[:141])]
        classes = [
            (i, "TRACE_PROCESS_EVENT_" + _EVENT_CLASS_2023_RENAMES[i][0], _EVENT_CLASS_2023_RENAMES[i][1])
            if i in _EVENT_CLASS_2023_RENAMES else (i, n, label)
            for i, n, label in classes if i <= 96
        ]
    out = [("ENUM_NSYS_EVENT_TYPE", "Nsys event type labels", etype),
           ("ENUM_NSYS_EVENT_CLASS", "Nsys event class labels", classes)]
    for table, comment, rows, versions in _SMALL_ENUMS:
        if version not in versions:
            continue
        if version == "2023.1" and table == "ENUM_CUDA_KERNEL_LAUNCH_TYPE":
            table = "ENUM_CUDA_KRENEL_LAUNCH_TYPE"  # sic: the 2023.1 exporter's typo
        out.append((table, comment, rows))
    return out


# --------------------------------------------------------------------------------------
# Planning: resolve launches, correlation ids, external ids, graphs
# --------------------------------------------------------------------------------------


@dataclass
class _Op:
    kind: str  # kernel | memcpy | memset
    src: Kernel | Memop
    corr: int = 0
    graph_id: int | None = None
    node_id: int | None = None
    grid_id: int = 0

    @property
    def start(self) -> int:
        return self.src.start_ns

    @property
    def end(self) -> int:
        return self.src.start_ns + self.src.dur_ns

    @property
    def pid(self) -> int:
        return self.src.pid


@dataclass
class _Call:
    kind: str  # launch | graph | memcpy | memset | call
    name: str  # base API name, no version suffix
    api: str  # runtime | driver
    pid: int
    tid: int
    start: int = 0
    end: int = 0
    corr: int | None = None
    explicit_corr: bool = False
    fixed: bool = False
    ops: list[_Op] = field(default_factory=list)
    explicit_ext: int | None = None
    ext: int | None = None


@dataclass
class _RangeInfo:
    r: Range
    ext: int | None = None


@dataclass
class _Plan:
    spec: TraceSpec
    calls: list[_Call]
    ops: list[_Op]
    ranges: list[_RangeInfo]
    pids: list[int]


def _plan(spec: TraceSpec) -> _Plan:
    calls: list[_Call] = []
    ops: list[_Op] = []

    # ---- group GPU ops into launch units ------------------------------------------------
    graph_groups: dict[tuple[int, int], list[Kernel]] = defaultdict(list)
    for k in spec.kernels:
        if k.dur_ns < 0:
            raise ValueError(f"kernel {k.name!r} has a negative duration")
        if k.graph and k.correlation_id is not None:
            graph_groups[(k.pid, k.correlation_id)].append(k)
            continue
        op = _Op("kernel", k)
        ops.append(op)
        if k.graph:
            call = _Call("graph", "cudaGraphLaunch", "runtime", k.pid, k.tid, ops=[op])
        else:
            api = "driver" if _is_driver_api(k.launch_api) else "runtime"
            call = _Call("launch", _base_api_name(k.launch_api), api, k.pid, k.tid, ops=[op],
                         explicit_ext=k.external_id)
        call.corr, call.explicit_corr = k.correlation_id, k.correlation_id is not None
        _pin(call, k.launch_start_ns, k.launch_dur_ns)
        calls.append(call)
    for (pid, corr), ks in graph_groups.items():
        ks = sorted(ks, key=lambda k: k.start_ns)
        gops = [_Op("kernel", k) for k in ks]
        ops.extend(gops)
        call = _Call("graph", "cudaGraphLaunch", "runtime", pid, ks[0].tid, corr=corr,
                     explicit_corr=True, ops=gops)
        _pin(call, ks[0].launch_start_ns, ks[0].launch_dur_ns)
        calls.append(call)
    for m in spec.memops:
        if m.kind not in ("memcpy", "memset"):
            raise ValueError(f"unknown memop kind {m.kind!r}")
        op = _Op(m.kind, m)
        ops.append(op)
        name = "cudaMemcpyAsync" if m.kind == "memcpy" else "cudaMemsetAsync"
        call = _Call(m.kind, name, "runtime", m.pid, m.tid, corr=m.correlation_id,
                     explicit_corr=m.correlation_id is not None, ops=[op], explicit_ext=m.external_id)
        _pin(call, m.launch_start_ns, m.launch_dur_ns)
        calls.append(call)
    for a in spec.api_calls:
        api = a.api if a.api in ("runtime", "driver") else "runtime"
        calls.append(_Call("call", _base_api_name(a.name), api, a.pid, a.tid, a.start_ns,
                           a.start_ns + a.dur_ns, a.correlation_id, a.correlation_id is not None,
                           True, [], a.external_id))

    # ---- place auto launch calls: end shortly before the GPU op, never overlapping -----
    by_thread: dict[tuple[int, int], list[_Call]] = defaultdict(list)
    for c in calls:
        if c.kind != "call":
            by_thread[(c.pid, c.tid)].append(c)
    for thread_calls in by_thread.values():
        thread_calls.sort(key=lambda c: (c.start if c.fixed else min(o.start for o in c.ops)))
        next_start: int | None = None
        for c in reversed(thread_calls):
            if not c.fixed:
                dur = _LAUNCH_DUR_NS.get(c.name, 4_000)
                end = min(o.start for o in c.ops) - _LAUNCH_LEAD_NS
                if next_start is not None:
                    end = min(end, next_start - _CALL_GAP_NS)
                c.start, c.end = end - dur, end
            next_start = c.start

    # ---- correlation ids: unique per process; auto ids fill 1, 2, ... in call order ----
    used: dict[int, set[int]] = defaultdict(set)
    for c in calls:
        if c.explicit_corr:
            assert c.corr is not None
            if c.corr in used[c.pid]:
                raise ValueError(f"correlation id {c.corr} used twice in process {c.pid}")
            used[c.pid].add(c.corr)
    calls.sort(key=lambda c: (c.start, c.end))
    counters: dict[int, int] = defaultdict(int)
    for c in calls:
        if c.corr is None:
            n = counters[c.pid] + 1
            while n in used[c.pid]:
                n += 1
            counters[c.pid] = n
            c.corr = n
            used[c.pid].add(n)
        for o in c.ops:
            o.corr = c.corr

    # ---- graph identity: same kernel sequence (name, grid, block) -> same graph -------
    graph_ids: dict[tuple[int, tuple], int] = {}
    for c in calls:
        if c.kind != "graph":
            continue
        sig = tuple((o.src.name, o.src.grid, o.src.block) for o in c.ops)  # type: ignore[union-attr]
        gid = graph_ids.setdefault((c.pid, sig), len(graph_ids) + 1)
        for i, o in enumerate(c.ops):
            o.graph_id, o.node_id = gid, gid * 10_000 + i + 1

    # ---- Kineto external ids: ranges first, then innermost enclosing op per call -------
    rinfos = [_RangeInfo(r) for r in spec.ranges]
    ext_used = {ri.r.external_id for ri in rinfos if ri.r.external_id is not None}
    nxt = 0
    for ri in sorted(rinfos, key=lambda ri: (ri.r.start_ns, -ri.r.end_ns)):
        if ri.r.kind not in ("cpu_op", "user_annotation"):
            continue
        if ri.r.external_id is not None:
            ri.ext = ri.r.external_id
            continue
        nxt += 1
        while nxt in ext_used:
            nxt += 1
        ri.ext = nxt
    _assign_call_ext(calls, rinfos)

    ops.sort(key=lambda o: (o.start, o.end))
    grid_counter: dict[int, int] = defaultdict(int)
    for o in ops:
        if o.kind == "kernel":
            grid_counter[o.pid] += 1
            o.grid_id = 1000 + grid_counter[o.pid]
    pids = sorted({c.pid for c in calls} | {r.pid for r in spec.ranges})
    return _Plan(spec, calls, ops, rinfos, pids)


def _pin(call: _Call, start: int | None, dur: int | None) -> None:
    if start is not None:
        call.fixed = True
        call.start = start
        call.end = start + (dur if dur is not None else _LAUNCH_DUR_NS.get(call.name, 4_000))


def _assign_call_ext(calls: list[_Call], rinfos: list[_RangeInfo]) -> None:
    """Innermost enclosing cpu_op/user_annotation on the same thread (Kineto's
    external-correlation stack); graph replays get none, as in real traces."""
    by_thread: dict[tuple[int, int], list[_RangeInfo]] = defaultdict(list)
    for ri in rinfos:
        if ri.ext is not None:
            by_thread[(ri.r.pid, ri.r.tid)].append(ri)
    for lst in by_thread.values():
        lst.sort(key=lambda ri: (ri.r.start_ns, -ri.r.end_ns))
    thread_calls: dict[tuple[int, int], list[_Call]] = defaultdict(list)
    for c in calls:
        if c.kind == "graph":
            c.ext = None
        elif c.explicit_ext is not None:
            c.ext = c.explicit_ext
        else:
            thread_calls[(c.pid, c.tid)].append(c)
    for key, tcalls in thread_calls.items():
        rl = by_thread.get(key, [])
        stack: list[_RangeInfo] = []
        i = 0
        for c in sorted(tcalls, key=lambda c: c.start):
            while i < len(rl) and rl[i].r.start_ns <= c.start:
                while stack and stack[-1].r.end_ns < rl[i].r.start_ns:
                    stack.pop()
                stack.append(rl[i])
                i += 1
            while stack and stack[-1].r.end_ns < c.end:
                stack.pop()
            c.ext = stack[-1].ext if stack else None


def summarize(spec: TraceSpec) -> dict[str, int]:
    """Ground-truth numbers of a spec, for assertions and reports."""
    plan = _plan(spec)
    graph_launches = sum(1 for c in plan.calls if c.kind == "graph")
    return {
        "kernel_count": len(spec.kernels),
        "kernel_sum_ns": sum(k.dur_ns for k in spec.kernels),
        "graph_kernel_count": sum(1 for k in spec.kernels if k.graph),
        "graph_launch_count": graph_launches,
        "memcpy_count": sum(1 for m in spec.memops if m.kind == "memcpy"),
        "memset_count": sum(1 for m in spec.memops if m.kind == "memset"),
        "host_api_call_count": len(plan.calls),
        "process_count": len(plan.pids),
    }


# --------------------------------------------------------------------------------------
# nsys SQLite writer
# --------------------------------------------------------------------------------------

_TABLE_ORDER = {
    "2026.3": [
        "StringIds", "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS",
        "DIAGNOSTIC_EVENT", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMCPY", "PROCESSES", "ThreadNames",
        "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_CUDA_CONTEXT_INFO", "<ENUMS>",
        "META_DATA_CAPTURE", "META_DATA_EXPORT",
    ],
    "2023.1": [
        "StringIds", "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS",
        "PROCESSES", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "ThreadNames", "TARGET_INFO_GPU",
        "TARGET_INFO_CUDA_NULL_STREAM", "TARGET_INFO_CUDA_STREAM", "<ENUMS>", "EXPORT_META_DATA",
    ],
    "legacy": [
        "StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_KERNEL", "ThreadNames", "TARGET_INFO_GPU",
        "TARGET_INFO_CUDA_NULL_STREAM", "TARGET_INFO_CUDA_STREAM",
    ],
}
_STRING_PREAMBLE = {
    "2026.3": ["[Unknown]", "[kernel.kallsyms]", "[Max depth]", "[Broken backtraces]", "[Called from Java]"],
    "2023.1": ["QnxKernelTrace", "GpuMetrics", "SocMetrics", "mm_", "task_submit"],
    "legacy": ["[Unknown]", "[kernel.kallsyms]", "[Max depth]", "[Broken backtraces]", "[Called from Java]"],
}
_PRODUCT = {"2026.3": ("2026.3.1.157", "3.27.0", "3868112111 184048"),
            "2023.1": ("2023.1.2.43", "3.1.2", "3015401642 121024")}
_VM_ID = 1 << 48
_CONTEXT_ID = 1
_NULL_STREAM = 7
_LOCAL_MEMORY_TOTAL = 136_314_880
_SMEM_CARVEOUTS_KB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


class _Strings:
    """StringIds interning: one id per distinct string, in first-use order."""

    def __init__(self, preamble: Iterable[str]) -> None:
        self.ids: dict[str, int] = {}
        for s in preamble:
            self.id(s)

    def id(self, s: str) -> int:
        if s not in self.ids:
            self.ids[s] = len(self.ids)
        return self.ids[s]

    def rows(self) -> list[dict]:
        return [{"id": i, "value": s} for s, i in self.ids.items()]


def _iso(ns: int) -> str:
    return _dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _time_span(plan: _Plan) -> tuple[int, int]:
    ts = [c.start for c in plan.calls] + [o.start for o in plan.ops] + [ri.r.start_ns for ri in plan.ranges]
    te = [c.end for c in plan.calls] + [o.end for o in plan.ops] + [ri.r.end_ns for ri in plan.ranges]
    if not ts:
        return 0, 0
    return min(ts), max(te)


def _gpu_by_id(spec: TraceSpec) -> dict[int, GpuSpec]:
    return {g.device_id: g for g in spec.gpus}


def _gpu_uuid(g: GpuSpec, host: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}/{g.device_id}/{g.name}"))


def _smem_executed(smem: int) -> int:
    need = max(smem + (1024 if smem else 0), 32 * 1024)
    for kb in _SMEM_CARVEOUTS_KB:
        if kb * 1024 >= need:
            return kb * 1024
    return _SMEM_CARVEOUTS_KB[-1] * 1024


def write_nsys(
    spec: TraceSpec,
    path: str | Path,
    version: str = "2026.3",
    diagnostics: Iterable[tuple[int, str, str]] = (),
) -> Path:
    """Write ``spec`` as an ``nsys export --type sqlite`` database of ``version``.

    ``diagnostics`` are ``(timestamp_ns, severity, text)`` rows for DIAGNOSTIC_EVENT
    (severity: Unknown/Info/Warning/Error/Verbose); that table only exists in
    2024+ exports, so other versions reject them.  Tables are created only when
    they have rows, like nsys does.
    """
    if version not in NSYS_VERSIONS:
        raise ValueError(f"unknown nsys version {version!r}; choose one of {NSYS_VERSIONS}")
    diagnostics = list(diagnostics)
    if diagnostics and version != "2026.3":
        raise ValueError(f"nsys {version} exports have no DIAGNOSTIC_EVENT table")
    plan = _plan(spec)
    path = Path(path)
    tables = _nsys_rows(plan, version, diagnostics, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(str(path))
    try:
        for table in _TABLE_ORDER[version]:
            if table == "<ENUMS>":
                for etable, comment, erows in _enum_tables(version):
                    con.execute(_enum_ddl(etable, comment, version))
                    con.executemany(f"INSERT INTO {etable} VALUES (?, ?, ?)", erows)
                continue
            rows = tables.get(table)
            if not rows:
                continue
            con.execute(_ddl(table, version))
            cols = [c[0] for c in _columns(table, version)]
            quoted = ", ".join(f'"{c}"' for c in cols)
            marks = ", ".join("?" for _ in cols)
            con.executemany(
                f"INSERT INTO {table} ({quoted}) VALUES ({marks})",
                [tuple(r.get(c) for c in cols) for r in rows],
            )
        con.commit()
    finally:
        con.close()
    return path


def _nsys_rows(plan: _Plan, version: str, diagnostics: list[tuple[int, str, str]], path: Path) -> dict[str, list[dict]]:
    spec = plan.spec
    off = spec.session_offset_ns
    strings = _Strings(_STRING_PREAMBLE[version])
    t0, t1 = _time_span(plan)
    pname = {pid: spec.process_names.get(pid, "python3") for pid in plan.pids}
    out: dict[str, list[dict]] = defaultdict(list)

    # -- threads and processes
    threads = sorted({(c.pid, c.tid) for c in plan.calls} | {(ri.r.pid, ri.r.tid) for ri in plan.ranges})
    for pid in plan.pids:
        out["PROCESSES"].append({"globalPid": global_pid(pid), "pid": pid, "name": pname[pid]})
    for pid, tid in threads:
        name = spec.thread_names.get((pid, tid), pname[pid])
        out["ThreadNames"].append({"nameId": strings.id(name), "priority": 20, "globalTid": global_tid(pid, tid)})

    # -- NVTX push/pop ranges (nvtx + user_annotation kinds) and domain registrations
    domain_ids: dict[tuple[int, str], int] = {}
    nvtx_rows: list[dict] = []
    for ri in sorted(plan.ranges, key=lambda ri: (ri.r.start_ns, -ri.r.end_ns)):
        r = ri.r
        if r.kind not in ("nvtx", "user_annotation"):
            continue
        dom = 0
        if r.domain:
            key = (r.pid, r.domain)
            if key not in domain_ids:
                domain_ids[key] = 1 + sum(1 for p, _ in domain_ids if p == r.pid)
                out["NVTX_EVENTS"].append({
                    "start": off + t0 - 1_250_000_000 - 1_000 * domain_ids[key], "eventType": 75,
                    "text": r.domain, "globalTid": global_tid(r.pid, r.tid), "domainId": domain_ids[key],
                })
            dom = domain_ids[key]
        registered = r.kind == "user_annotation" or r.domain is not None
        nvtx_rows.append({
            "start": off + r.start_ns, "end": off + r.end_ns, "eventType": 59,
            "text": None if registered else r.name,
            "textId": strings.id(r.name) if registered else None,
            "globalTid": global_tid(r.pid, r.tid), "domainId": dom,
        })
    out["NVTX_EVENTS"].extend(nvtx_rows)

    # -- CUDA API calls (runtime and driver share one table)
    for c in plan.calls:
        out["CUPTI_ACTIVITY_KIND_RUNTIME"].append({
            "start": off + c.start, "end": off + c.end, "eventClass": 1 if c.api == "driver" else 0,
            "globalTid": global_tid(c.pid, c.tid), "correlationId": c.corr,
            "nameId": strings.id(_nsys_api_name(c.name, c.api)), "returnValue": 0,
        })

    # -- GPU activities
    for o in plan.ops:
        base = {"start": off + o.start, "end": off + o.end, "deviceId": o.src.device_id,
                "contextId": _CONTEXT_ID, "greenContextId": 0, "streamId": o.src.stream_id,
                "correlationId": o.corr, "globalPid": global_pid(o.pid), "graphNodeId": o.node_id}
        src = o.src
        if isinstance(src, Kernel):
            smem = src.shared_memory_bytes
            static, dynamic = (smem, 0) if smem <= 16 * 1024 else (0, smem)
            base.update({
                "demangledName": strings.id(src.name),
                "shortName": strings.id(src.short_name or short_kernel_name(src.name)),
                "mangledName": strings.id(_mangle(src.name)),
                "launchType": 1, "cacheConfig": 1, "registersPerThread": src.registers_per_thread,
                "gridX": src.grid[0], "gridY": src.grid[1], "gridZ": src.grid[2],
                "blockX": src.block[0], "blockY": src.block[1], "blockZ": src.block[2],
                "staticSharedMemory": static, "dynamicSharedMemory": dynamic,
                "localMemoryPerThread": 0, "localMemoryTotal": _LOCAL_MEMORY_TOTAL, "gridId": o.grid_id,
                "sharedMemoryExecuted": _smem_executed(smem),
                "sharedMemoryLimitConfig": 1 if smem > 48 * 1024 else 0,
                "graphId": o.graph_id, "clusterX": 0, "clusterY": 0, "clusterZ": 0,
                "maxPotentialClusterSize": 0, "maxActiveClusters": 0, "tensorSizeMinusOneElements": "[]",
            })
            out["CUPTI_ACTIVITY_KIND_KERNEL"].append(base)
        elif src.kind == "memcpy":
            base.update({"bytes": src.bytes, "copyKind": _COPY_KIND.get(src.copy_kind, 0),
                         "srcKind": _MEM_KIND.get(src.src_kind, 7), "dstKind": _MEM_KIND.get(src.dst_kind, 7),
                         "copyCount": 1})
            out["CUPTI_ACTIVITY_KIND_MEMCPY"].append(base)
        else:
            base.update({"value": src.value, "bytes": src.bytes, "memKind": _MEM_KIND.get(src.dst_kind, 2)})
            out["CUPTI_ACTIVITY_KIND_MEMSET"].append(base)

    # -- CUDA contexts / streams per process
    dev_of: dict[tuple[int, int], set[int]] = defaultdict(set)
    for o in plan.ops:
        dev_of[(o.pid, o.src.device_id)].add(o.src.stream_id)
    for (pid, dev), streams in sorted(dev_of.items()):
        out["TARGET_INFO_CUDA_DEVICE"].append({"gpuId": dev, "cudaId": dev, "pid": pid})
        out["TARGET_INFO_CUDA_CONTEXT_INFO"].append({
            "nullStreamId": _NULL_STREAM, "hwId": 0, "vmId": 1, "processId": pid, "deviceId": dev,
            "contextId": _CONTEXT_ID, "parentContextId": 0, "isGreenContext": 0})
        out["TARGET_INFO_CUDA_NULL_STREAM"].append({
            "streamId": _NULL_STREAM, "hwId": 0, "vmId": 1, "processId": pid, "deviceId": dev,
            "contextId": _CONTEXT_ID})
        for s in sorted(streams - {_NULL_STREAM}):
            out["TARGET_INFO_CUDA_STREAM"].append({
                "streamId": s, "hwId": 0, "vmId": 1, "processId": pid, "contextId": _CONTEXT_ID,
                "priority": 0, "flag": 2})

    # -- GPUs
    for g in spec.gpus:
        tps, warps, blocks, smem_sm, smem_optin, chip = _arch(g)
        out["TARGET_INFO_GPU"].append({
            "vmId": _VM_ID, "id": g.device_id, "name": g.name, "busLocation": f"0000:{0x18 + 0x10 * g.device_id:02X}:00.0",
            "isDiscrete": 1, "l2CacheSize": g.l2_bytes, "totalMemory": g.memory_bytes,
            "memoryBandwidth": g.memory_bandwidth_bytes_per_s, "clockRate": g.clock_hz, "smCount": g.sm_count,
            "pwGpuId": g.device_id, "uuid": _gpu_uuid(g, spec.hostname), "luid": 0, "chipName": chip,
            "cuDevice": g.device_id, "ctxswDevPath": "", "ctrlDevPath": "", "revision": 161, "nodeMask": 0,
            "constantMemory": 65536, "maxIPC": 4, "maxRegistersPerBlock": 65536, "maxShmemPerBlock": 49152,
            "maxShmemPerBlockOptin": smem_optin, "maxShmemPerSm": smem_sm, "maxRegistersPerSm": 65536,
            "threadsPerWarp": 32, "asyncEngines": 2 if g.compute_major < 9 else 3, "maxWarpsPerSm": warps,
            "maxBlocksPerSm": blocks, "maxThreadsPerBlock": 1024, "maxBlockDimX": 1024, "maxBlockDimY": 1024,
            "maxBlockDimZ": 64, "maxGridDimX": 2147483647, "maxGridDimY": 65535, "maxGridDimZ": 65535,
            "computeMajor": g.compute_major, "computeMinor": g.compute_minor,
            "smMajor": g.compute_major, "smMinor": g.compute_minor,
        })

    if version == "legacy":
        out["StringIds"] = strings.rows()
        return out

    # -- session / environment / export metadata (2023.1 and 2026.3)
    start_time = off + t0 - 150_000_000
    stop_time = off + t1 + 50_000_000
    out["ANALYSIS_DETAILS"].append({"globalVid": _VM_ID, "duration": stop_time - start_time,
                                    "startTime": start_time, "stopTime": stop_time})
    out["TARGET_INFO_SESSION_START_TIME"].append({
        "utcEpochNs": spec.start_utc_ns, "utcTime": _iso(spec.start_utc_ns), "localTime": _iso(spec.start_utc_ns),
        "systemClockNs": start_time})
    gpu_info = {"Gpus": [{"Id": g.device_id, "Name": g.name, "IsDiscrete": True,
                          "Uuid": _gpu_uuid(g, spec.hostname), "ChipName": _arch(g)[5],
                          "L2CacheSize": g.l2_bytes, "TotalMemory": g.memory_bytes,
                          "MemoryBandwidth": g.memory_bandwidth_bytes_per_s, "ClockRate": g.clock_hz,
                          "SmCount": g.sm_count, "ComputeMajor": g.compute_major,
                          "ComputeMinor": g.compute_minor} for g in spec.gpus]}
    env = [("CpuCores", 1, "32"), ("CpuArchitecture", 3, "x86_64"),
           ("CpuDescription", 13, "AMD EPYC 9454 48-Core Processor"),
           ("NvDriverVersion", 205, "570.124.06"), ("HardwarePlatform", 600, "x86_64"),
           ("SoftwarePlatform", 601, "L4X"), ("OsDescription", 605, "Ubuntu 22.04.5 LTS"),
           ("CudaDriverVersion", 611, "12080"), ("Hostname", 619, spec.hostname),
           ("GpuInfo", 897, json.dumps(gpu_info, separators=(",", ":")))]
    out["TARGET_INFO_SYSTEM_ENV"] = [
        {"globalVid": _VM_ID, "devStateName": "Local (CLI)", "name": n, "nameEnum": e, "value": v} for n, e, v in env]
    for ts, severity, text in diagnostics:
        out["DIAGNOSTIC_EVENT"].append({
            "timestamp": off + ts, "timestampType": 1, "source": 1,
            "severity": _SEVERITY.get(str(severity).lower(), 0), "text": text,
            "globalPid": global_pid(plan.pids[0]) if plan.pids else None})

    product, schema, cksum = _PRODUCT[version]
    export_time = spec.start_utc_ns + (t1 - t0) + 600_000_000_000
    stem = path.stem
    major, minor, micro = schema.split(".")
    if version == "2026.3":
        meta = [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", product),
            ("EXPORT_PRODUCT_DATE", "2026.3"), ("EXPORT_SCHEMA_VERSION", schema),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_SCHEMA_VERSION_CKSUM", cksum),
            ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"),
            ("EXPORT_TIME_UTC", _iso(export_time)), ("EXPORT_TIME_LOCAL", _iso(export_time) + " +0000 UTC"),
            ("EXPORT_HOST", spec.hostname), ("EXPORT_USER", "ubuntu"), ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"),
            ("EXPORT_PARAM_INPUT_FILE", f"{stem}.nsys-rep"), ("EXPORT_PARAM_OUTPUT_FILE", path.name),
            ("EXPORT_PARAM_INPUT_PATH", f"/workspace/profiles/{stem}.nsys-rep"),
            ("EXPORT_PARAM_OUTPUT_PATH", f"/workspace/profiles/{path.name}"),
            ("EXPORT_PARAM_INPUT_PATH_ABS", f"/workspace/profiles/{stem}.nsys-rep"),
            ("EXPORT_PARAM_OUTPUT_PATH_ABS", f"/workspace/profiles/{path.name}"),
            ("EXPORT_PARAM_PROGRESS", "false"), ("EXPORT_PARAM_OVERWRITE", "true"),
            ("EXPORT_PARAM_APPEND", "false"), ("EXPORT_PARAM_LAZY", "true"),
            ("EXPORT_PARAM_USE_SHUFFLE", "true"), ("EXPORT_PARAM_INCLUDE_JSON", "true"),
            ("EXPORT_PARAM_INCLUDE_BLOBS", "false"), ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
            ("EXPORT_PARAM_TIME_SHIFT", "0"), ("EXPORT_PARAM_TABLES_TO_EXPORT", ""),
            ("EXPORT_PARAM_TIMES_TO_EXPORT", ""), ("EXPORT_CONFIG_TIME_SHIFT", "0"), ("EXPORT_TIME", "0.21 sec"),
        ]
        out["META_DATA_EXPORT"] = [{"name": n, "value": v} for n, v in meta]
        has_graph = any(c.kind == "graph" for c in plan.calls)
        capture = [
            ("DEVICE_ID", "Local (CLI)"), ("CAPTURE_EVENT_TYPE", "OSRuntime"), ("CAPTURE_EVENT_TYPE", "NvtxEvents"),
            ("CAPTURE_EVENT_TYPE", "Cuda"), ("START_TRIGGER", "Immediate"), ("STOP_TRIGGER", "Delayed"),
            ("DEVICE_TYPE", "Unix"), ("DEVICE_DISPLAY_NAME", spec.hostname),
            ("PROCESS_0:HOW_TO_ATTACH", "LaunchAnother"), ("PROCESS_0:COMMAND", "python3"),
            ("PROCESS_0:COLLECT_NVTX_TRACE", "true"), ("PROCESS_0:COLLECT_CUDA_TRACE", "true"),
            ("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Node" if has_graph else "Graph"),
            ("PROFILING_SESSION_UUID", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{spec.hostname}/{spec.start_utc_ns}"))),
            ("RUN_DURATION_MS", str((stop_time - start_time) // 1_000_000)),
            ("TRACE_AFTER_FORK_BEFORE_EXEC", "true" if len(plan.pids) > 1 else "false"),
        ]
        out["META_DATA_CAPTURE"] = [{"name": n, "value": v} for n, v in capture]
    else:
        meta = [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", product),
            ("EXPORT_PRODUCT_DATE", "2023.1"), ("EXPORT_SCHEMA_VERSION", schema),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_SCHEMA_VERSION_CKSUM", cksum),
            ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_TIME", "0.03"),
            ("EXPORT_TIME_UTC", _iso(export_time)), ("EXPORT_TIME_LOCAL", _iso(export_time)),
            ("EXPORT_HOST", spec.hostname), ("EXPORT_USER", "root"),
            ("EXPORT_PARAM_INPUT_FILE", f"{stem}.nsys-rep"), ("EXPORT_PARAM_OUTUPT_FILE", path.name),
            ("EXPORT_PARAM_INPUT_PATH", f"/workspace/profiles/{stem}.nsys-rep"),
            ("EXPORT_PARAM_OUTUPT_PATH", f"/workspace/profiles/{path.name}"),
            ("EXPORT_PARAM_INPUT_PATH_ABS", f"/workspace/profiles/{stem}.nsys-rep"),
            ("EXPORT_PARAM_OUTUPT_PATH_ABS", f"/workspace/profiles/{path.name}"),
            ("EXPORT_PARAM_OVERWRITE", "true"), ("EXPORT_PARAM_LAZY", "true"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
            ("EXPORT_CONFIG_TIME_SHIFT", "0"),
        ]
        out["EXPORT_META_DATA"] = [{"name": n, "value": v} for n, v in meta]
    out["StringIds"] = strings.rows()
    return out


# --------------------------------------------------------------------------------------
# Kineto (PyTorch profiler) Chrome-trace writer
# --------------------------------------------------------------------------------------


def _fmt_us(ns: int) -> str:
    """Kineto's fmtTs: integer ns printed as microseconds with exactly 3 decimals."""
    ns = max(ns, 0)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _kernel_stats(gpu: GpuSpec | None, k: Kernel) -> tuple[float, float, int]:
    """(blocks per SM, warps per SM, est. achieved occupancy %) the way Kineto derives them."""
    sms = gpu.sm_count if gpu else 108
    _, max_warps, max_blocks, smem_sm, _, _ = _arch(gpu)
    blocks = k.grid[0] * k.grid[1] * k.grid[2]
    threads = k.block[0] * k.block[1] * k.block[2]
    wpb = max(1, -(-threads // 32))
    bps, wps = blocks / sms, blocks * wpb / sms
    limits = [max_blocks, max_warps // wpb]
    if k.registers_per_thread:
        per_warp = -(-k.registers_per_thread * 32 // 256) * 256
        limits.append((65536 // per_warp) // wpb)
    smem = k.shared_memory_bytes
    if smem > 48 * 1024:
        limits.append(0)  # the estimator assumes the default carveout
    elif smem:
        limits.append(smem_sm // (smem + 1024))
    active_warps = min(limits) * wpb
    occ = int(min(active_warps, wps) / max_warps * 100 + 0.5)
    return bps, wps, occ


def _dims_strides(dims: Sequence) -> list:
    out = []
    for d in dims:
        if isinstance(d, (list, tuple)) and all(isinstance(x, int) for x in d):
            st, acc = [], 1
            for x in reversed(d):
                st.append(acc)
                acc *= x
            out.append(list(reversed(st)))
        else:
            out.append([])
    return out


def _jl(x: object) -> str:
    return json.dumps(x, ensure_ascii=False)


def write_kineto(
    spec: TraceSpec,
    path: str | Path,
    flavour: str = "modern",
    gzip: bool | None = None,
    pid: int | None = None,
    rank: int | None = None,
) -> Path:
    """Write ``spec`` as a ``*.pt.trace.json[.gz]`` the way libkineto does.

    Kineto writes one file per process, so a multi-process spec needs ``pid``.
    ``gzip=None`` compresses when the path ends in ``.gz``.  ``legacy2021`` writes
    integer microseconds, so use multiples of 1000 ns if exact times matter.
    """
    if flavour not in KINETO_FLAVOURS:
        raise ValueError(f"unknown Kineto flavour {flavour!r}; choose one of {KINETO_FLAVOURS}")
    plan = _plan(spec)
    if pid is None:
        if len(plan.pids) > 1:
            raise ValueError(f"spec has processes {plan.pids}; Kineto writes one file per process, pass pid=")
        pid = plan.pids[0] if plan.pids else 0
    if rank is None:
        rank = spec.rank + (plan.pids.index(pid) if pid in plan.pids and len(plan.pids) > 1 else 0)
    path = Path(path)
    trace_name = "/tmp/" + (path.name[:-3] if path.name.endswith(".gz") else path.name)
    text = _kineto_text(plan, flavour, pid, rank, trace_name)
    use_gzip = str(path).endswith(".gz") if gzip is None else gzip
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    if use_gzip:
        with open(path, "wb") as fh, _gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
            gz.write(data)
    else:
        path.write_bytes(data)
    return path


def _kineto_text(plan: _Plan, flavour: str, pid: int, rank: int, trace_name: str) -> str:
    spec = plan.spec
    legacy = flavour == "legacy2021"
    off = spec.session_offset_ns
    gpus = _gpu_by_id(spec)
    pname = spec.process_names.get(pid, "python3")

    if legacy:
        def ts(t: int) -> str:
            return str((spec.start_utc_ns + off + t) // 1000)

        def dur(t0: int, t1: int) -> str:
            return str(int(ts(t1)) - int(ts(t0)))
    else:
        def ts(t: int) -> str:
            return _fmt_us(off + t)

        def dur(t0: int, t1: int) -> str:
            return _fmt_us(t1 - t0)

    def tid_s(tid: int | str) -> str:
        return f'"{tid}"' if legacy else str(tid)

    def x_event(cat: str, name: str, epid: int, etid: str, t0: int, t1: int, args: str | None) -> str:
        if legacy:
            head = f'  {{\n    "ph": "X", "cat": "{cat}", \n    "name": {_jl(name)}, "pid": {epid}, "tid": {etid},\n'
        else:
            head = f'  {{\n    "ph": "X", "cat": "{cat}", "name": {_jl(name)}, "pid": {epid}, "tid": {etid},\n'
        body = f'    "ts": {ts(t0)}, "dur": {dur(t0, t1)}'
        if args is None:
            return head + body + "\n  }"
        return head + body + f',\n    "args": {{\n      {args}\n    }}\n  }}'

    def flow(ph: str, fid: int, epid: int, etid: str, t: int) -> str:
        cat, name = ("async", "launch") if legacy else ("ac2g", "ac2g")
        tail = ', "bp": "e"' if ph == "f" else ""
        return (f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {epid}, "tid": {etid}, "ts": {ts(t)},\n'
                f'    "cat": "{cat}", "name": "{name}"{tail}\n  }}')

    events: list[str] = []
    ranges = [ri for ri in plan.ranges if ri.r.pid == pid]
    calls = [c for c in plan.calls if c.pid == pid]
    ext_ts = {ri.ext: ri.r.start_ns for ri in ranges if ri.ext is not None}

    # ---- CPU ops and annotations (Kineto writes them first, in start order) ----------
    ev_idx = 0
    ops_ranges = sorted((ri for ri in ranges if ri.r.kind in ("cpu_op", "user_annotation")),
                        key=lambda ri: (ri.r.start_ns, -ri.r.end_ns))
    record_shapes = False
    for ri in ops_ranges:
        r = ri.r
        dims = list(r.input_dims) if r.input_dims is not None else None
        types = list(r.input_types) if r.input_types is not None else ([""] * len(dims) if dims else None)
        values = list(r.input_values) if r.input_values is not None else ([""] * len(dims) if dims else None)
        if legacy:
            extra = (f'"Input Dims": {_jl(dims)}, "Call stack": "", "Input type": {_jl(types)}'
                     if dims is not None else '"Call stack": ""')
            args = (f'"Device": {pid}, "External id": {ri.ext},\n      "Trace name": "PyTorch Profiler", '
                    f'"Trace iteration": 0 ,\n      {extra}')
            events.append(x_event("Operator", r.name, pid, tid_s(r.tid), r.start_ns, r.end_ns, args))
        else:
            shapes = ""
            if dims is not None:
                record_shapes = True
                shapes = (f'"Concrete Inputs": {_jl(values)}, "Input type": {_jl(types)}, '
                          f'"Input Strides": {_jl(_dims_strides(dims))}, "Input Dims": {_jl(dims)}, ')
            args = f'"External id": {ri.ext},"Record function id": 0, {shapes}"Ev Idx": {ev_idx}'
            events.append(x_event(r.kind, r.name, pid, tid_s(r.tid), r.start_ns, r.end_ns, args))
        ev_idx += 1

    # ---- Python stack events (with_stack=True); not present in the 2021 format --------
    py = sorted((ri for ri in ranges if ri.r.kind == "python_function"), key=lambda ri: (ri.r.start_ns, -ri.r.end_ns))
    if not legacy:
        stacks: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for n, ri in enumerate(py, start=1):
            st = stacks[ri.r.tid]
            while st and st[-1][1] < ri.r.end_ns:
                st.pop()
            parent = str(st[-1][0]) if st else "null"
            st.append((n, ri.r.end_ns))
            args = f'"Python parent id": {parent}, "Python id": {n}, "Ev Idx": {ev_idx}'
            events.append(x_event("python_function", ri.r.name, pid, tid_s(ri.r.tid), ri.r.start_ns, ri.r.end_ns, args))
            ev_idx += 1

    # ---- GPU activity and the CUDA API calls that launched it ------------------------
    flow_apis = _LEGACY_FLOW_APIS if legacy else _FLOW_APIS
    for c in sorted(calls, key=lambda c: (c.start, c.end)):
        ext = c.ext
        for o in c.ops:
            src = o.src
            dev, stream = src.device_id, src.stream_id
            gtid = f'"stream {stream}"' if legacy else str(stream)
            if isinstance(src, Kernel):
                bps, wps, occ = _kernel_stats(gpus.get(dev), src)
                grid, block = _jl(list(src.grid)), _jl(list(src.block))
                if legacy:
                    args = (f'"queued": 0, "device": {dev}, "context": 1,\n      "stream": {stream}, '
                            f'"correlation": {o.corr}, "external id": {ext or 0},\n'
                            f'      "registers per thread": {src.registers_per_thread},\n'
                            f'      "shared memory": {src.shared_memory_bytes},\n'
                            f'      "blocks per SM": {bps!r},\n      "warps per SM": {wps!r},\n'
                            f'      "grid": {grid},\n      "block": {block},\n'
                            f'      "est. achieved occupancy %": {occ}')
                    cat = "Kernel"
                else:
                    ext_s = f'"External id": {ext},' if ext is not None else ""
                    args = (f'{ext_s}      "queued": 0, "device": {dev}, "context": 1,      "stream": {stream}, '
                            f'"correlation": {o.corr},      "registers per thread": {src.registers_per_thread},'
                            f'      "shared memory": {src.shared_memory_bytes},      '
                            f'"blocks per SM": {_f32(bps):.6f},      "warps per SM": {_f32(wps):.6f},'
                            f'      "grid": {grid},      "block": {block},      "est. achieved occupancy %": {occ}')
                    cat = "kernel"
                name = src.name
            else:
                bw = src.bytes / src.dur_ns if src.dur_ns > 0 else 0.0
                if src.kind == "memcpy":
                    name = f"Memcpy {src.copy_kind} ({src.src_kind} -> {src.dst_kind})"
                    cat = "Memcpy" if legacy else "gpu_memcpy"
                else:
                    name = f"Memset ({src.dst_kind})"
                    cat = "Memset" if legacy else "gpu_memset"
                if legacy:
                    args = (f'"device": {dev}, "context": 1,\n      "stream": {stream}, "correlation": {o.corr}, '
                            f'"external id": {ext or 0},\n      "bytes": {src.bytes}, "memory bandwidth (GB/s)": {bw!r}')
                else:
                    ext_s = f'"External id": {ext},' if ext is not None else ""
                    args = (f'{ext_s}      "device": {dev}, "context": 1,      "stream": {stream}, '
                            f'"correlation": {o.corr},      "bytes": {src.bytes}, "memory bandwidth (GB/s)": {bw!r}')
            events.append(x_event(cat, name, dev, gtid, o.start, o.end, args))
            events.append(flow("f", o.corr, dev, gtid, o.start))
        cbid = _CBID.get(c.name, 0)
        if legacy:
            args = (f'"cbid": {cbid}, "correlation": {c.corr},\n      "external id": {ext or 0}, '
                    f'"external ts": {ts(ext_ts[ext]) if ext in ext_ts else 0}')
            cat = "Runtime"
        else:
            ext_s = f'"External id": {ext},' if ext is not None else ""
            args = f'{ext_s}      "cbid": {cbid}, "correlation": {c.corr}'
            cat = "cuda_driver" if c.api == "driver" else "cuda_runtime"
        events.append(x_event(cat, c.name, pid, tid_s(c.tid), c.start, c.end, args))
        if c.name in flow_apis:
            events.append(flow("s", c.corr, pid, str(c.tid), c.start))

    # ---- GPU-side projection of user annotations (modern Kineto) ---------------------
    if not legacy:
        by_tid: dict[int, list[_Call]] = defaultdict(list)
        for c in calls:
            if c.ops:
                by_tid[c.tid].append(c)
        starts = {t: [c.start for c in sorted(lst, key=lambda c: c.start)] for t, lst in by_tid.items()}
        sorted_calls = {t: sorted(lst, key=lambda c: c.start) for t, lst in by_tid.items()}
        for ri in ops_ranges:
            r = ri.r
            if r.kind != "user_annotation" or r.tid not in starts:
                continue
            lo = bisect.bisect_left(starts[r.tid], r.start_ns)
            hi = bisect.bisect_right(starts[r.tid], r.end_ns)
            gops = [o for c in sorted_calls[r.tid][lo:hi] if c.end <= r.end_ns for o in c.ops]
            if not gops:
                continue
            first = min(gops, key=lambda o: o.start)
            g0, g1 = first.start - 1, max(o.end for o in gops) + 1
            events.append(x_event("gpu_user_annotation", r.name, first.src.device_id, str(first.src.stream_id),
                                  g0, g1, f'"External id": {ri.ext}'))

    # ---- metadata rows, trace span, window markers --------------------------------------
    t_first, t_last = _time_span(plan)
    t_start = t_first - 250_000
    t_end = t_last + 120_000
    devices = sorted({o.src.device_id for c in calls for o in c.ops})
    streams = sorted({(o.src.device_id, o.src.stream_id) for c in calls for o in c.ops})
    cpu_tids = sorted({c.tid for c in calls} | {ri.r.tid for ri in ranges})

    def meta(name: str, mpid: int, mtid: str, key: str, value: str) -> str:
        return (f'  {{\n    "name": "{name}", "ph": "M", "ts": {ts(t_start)}, "pid": {mpid}, "tid": {mtid},\n'
                f'    "args": {{\n      "{key}": {value}\n    }}\n  }}')

    events.append(meta("process_name", pid, "0", "name", _jl(pname)))
    events.append(meta("process_labels", pid, "0", "labels", '"CPU"'))
    if not legacy:
        events.append(meta("process_sort_index", pid, "0", "sort_index", str(pid)))
    for d in devices:
        events.append(meta("process_name", d, "0", "name", _jl(pname)))
        events.append(meta("process_labels", d, "0", "labels", f'"GPU {d}"'))
        if not legacy:
            events.append(meta("process_sort_index", d, "0", "sort_index", str(5_000_000 + d)))
    if not legacy:
        for d, s in streams:
            events.append(meta("thread_name", d, str(s), "name", f'"stream {s} "'))
            events.append(meta("thread_sort_index", d, str(s), "sort_index", str(s)))
    for t in cpu_tids:
        events.append(meta("thread_name", pid, tid_s(t), "name", _jl(f"thread {t} ({pname})")))
        if not legacy:
            events.append(meta("thread_sort_index", pid, str(t), "sort_index", str(t)))
    span_pid = '"Traces"' if legacy else '"Spans"'
    events.append(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ts(t_start)}, "dur": {dur(t_start, t_end)},\n'
                  f'    "pid": {span_pid}, "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
                  f'    "args": {{\n      "Op count": 0\n    }}\n  }}')
    if not legacy:
        events.append(f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {ts(t_start)},\n'
                      f'    "pid": "Spans", "tid": 0,\n    "args": {{\n      "sort_index": 536870912\n    }}\n  }}')
    events.append(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
                  f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {ts(t_start)}\n  }}')
    events.append(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
                  f'    "pid": "", "tid": "", "ts": {ts(t_end)}\n  }}')

    # ---- assemble -----------------------------------------------------------------------
    props = []
    for g in sorted(spec.gpus, key=lambda g: g.device_id):
        tps, _, _, smem_sm, smem_optin, _ = _arch(g)
        if legacy:
            props.append(
                f'    {{\n      "id": {g.device_id}, "name": {_jl(g.name)}, "totalGlobalMem": {g.memory_bytes},\n'
                f'      "computeMajor": {g.compute_major}, "computeMinor": {g.compute_minor},\n'
                f'      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": {tps},\n'
                f'      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,\n'
                f'      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": {smem_sm},\n'
                f'      "numSms": {g.sm_count}, "sharedMemPerBlockOptin": {smem_optin}\n    }}')
        else:
            props.append(
                f'    {{\n      "id": {g.device_id}, "name": {_jl(g.name)}, "totalGlobalMem": {g.memory_bytes},\n'
                f'      "computeMajor": {g.compute_major}, "computeMinor": {g.compute_minor},\n'
                f'      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": {tps},\n'
                f'      "regsPerBlock": 65536, "warpSize": 32,\n'
                f'      "sharedMemPerBlock": 49152, "numSms": {g.sm_count}\n'
                f'    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": {smem_optin}, '
                f'"sharedMemPerMultiprocessor": {smem_sm}\n    }}')
    head = '\n{\n  "schemaVersion": 1,\n  "deviceProperties": [\n' + ",\n".join(props) + "\n  ],\n"
    dist = (f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {spec.world_size}}},\n'
            if spec.world_size > 1 else "")
    body = ",\n".join(events)
    if legacy:
        return head + dist + '  "traceEvents": [\n' + body + "\n]}"
    trace_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{spec.hostname}/{spec.start_utc_ns}/{pid}").hex.upper()
    extra = '  "cupti_version": 22,\n  "cuda_runtime_version": 12040,\n  "cuda_driver_version": 12090,\n' + dist
    if py:
        extra += '  "with_stack": 1,\n'
    if record_shapes:
        extra += '  "record_shapes": 1,\n'
    extra += f'  "trace_id": "{trace_id}",\n'
    return (head + extra + '  "traceEvents": [\n' + body + "\n  ],\n"
            f'  "traceName": {_jl(trace_name)},\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {spec.start_utc_ns}\n}}')


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
