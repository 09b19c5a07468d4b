"""Write a spec as an ``nsys export --type sqlite`` database (2026.3, 2023.1 and legacy schemas)."""

from __future__ import annotations

import datetime as _dt
import json
import re
import sqlite3
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from traceview.model.db import ident, short_kernel_name
from traceview.testing.plan import _Plan, _plan, _time_span
from traceview.testing.spec import GpuSpec, Kernel, TraceSpec, _arch, global_pid, global_tid

NSYS_VERSIONS = ("2026.3", "2023.1", "legacy")


# --------------------------------------------------------------------------------------
# CUDA API facts as nsys stores them (name suffixes, copy/memory kinds, severities)
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

_COPY_KIND = {"Unknown": 0, "HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6,
              "DtoA": 7, "DtoD": 8, "HtoH": 9, "PtoP": 10}
_MEM_KIND = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4,
             "Device Static": 5, "Managed Static": 6, "Unknown": 7}
_SEVERITY = {"unknown": 0, "info": 1, "warning": 2, "error": 3, "verbose": 4}


def _nsys_api_name(name: str, api: str) -> str:
    if api == "driver" or re.search(r"_v\d+$", name):
        return name
    return name + _RUNTIME_SUFFIX.get(name, _DEFAULT_RUNTIME_SUFFIX)


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
    "MPI_RANKS": ("Mapping of global thread IDs (gtid) to MPI ranks", """
globalTid|INTEGER|NOT NULL|Serialized GlobalId.
rank|INTEGER|NOT NULL|MPI rank
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
            decl = f"{ident(name)} {typ}"
            if cons:
                decl += " " + " ".join(cons.split())
            if table == "CUPTI_ACTIVITY_KIND_RUNTIME" and name == "callchainId":
                decl += " REFERENCES CUDA_CALLCHAINS(id)"
            parts.append(decl)
        columns_sql = ", ".join(parts)
        return f"CREATE TABLE {ident(table)} ({columns_sql})"
    comment = _DDL_COLUMNS[table][0]
    lines = [f"CREATE TABLE {ident(table)} ("]
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
    """An ENUM_* table's CREATE TABLE text; the column comments end in a full stop from nsys 2026.3 on."""
    dot = "." if version == "2026.3" else ""
    table_comment_sql = f"-- {comment}"
    id_comment_sql, name_comment_sql, label_comment_sql = (
        f"-- Enum {meaning}{dot}" for meaning in ("numerical value", "symbol name", "human name"))
    return (
        f"CREATE TABLE {ident(table)} (\n    {table_comment_sql}\n\n"
        f"    id                          INTEGER   NOT NULL   PRIMARY KEY,      {id_comment_sql}\n"
        f"    name                        TEXT,                                  {name_comment_sql}\n"
        f"    label                       TEXT                                   {label_comment_sql}\n)"
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
# nsys SQLite writer
# --------------------------------------------------------------------------------------

_TABLE_ORDER = {
    "2026.3": [
        "StringIds", "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS",
        "DIAGNOSTIC_EVENT", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMCPY", "PROCESSES", "ThreadNames",
        "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_CUDA_CONTEXT_INFO", "MPI_RANKS", "<ENUMS>",
        "META_DATA_CAPTURE", "META_DATA_EXPORT",
    ],
    "2023.1": [
        "StringIds", "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS",
        "PROCESSES", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "ThreadNames", "TARGET_INFO_GPU",
        "TARGET_INFO_CUDA_NULL_STREAM", "TARGET_INFO_CUDA_STREAM", "MPI_RANKS", "<ENUMS>", "EXPORT_META_DATA",
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
    mpi_ranks: Mapping[int, int] | None = None,
) -> Path:
    """Write ``spec`` as an ``nsys export --type sqlite`` database of ``version``.

    ``diagnostics`` are ``(timestamp_ns, severity, text)`` rows for DIAGNOSTIC_EVENT
    (severity: Unknown/Info/Warning/Error/Verbose); that table only exists in
    2024+ exports, so other versions reject them.  Tables are created only when
    they have rows, like nsys does. ``mpi_ranks`` (pid -> MPI rank) writes the MPI_RANKS table
    that ``nsys profile --trace mpi`` records, one row for each process's main thread.
    """
    if version not in NSYS_VERSIONS:
        raise ValueError(f"unknown nsys version {version!r}; choose one of {NSYS_VERSIONS}")
    diagnostics = list(diagnostics)
    if diagnostics and version != "2026.3":
        raise ValueError(f"nsys {version} exports have no DIAGNOSTIC_EVENT table")
    plan = _plan(spec)
    path = Path(path)
    tables = _nsys_rows(plan, version, diagnostics, path)
    if mpi_ranks:  # only versions whose table order lists MPI_RANKS write it
        tables["MPI_RANKS"] = [{"globalTid": global_tid(pid, pid), "rank": rank} for pid, rank in mpi_ranks.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(str(path))
    try:
        for table in _TABLE_ORDER[version]:
            if table == "<ENUMS>":
                for etable, comment, erows in _enum_tables(version):
                    con.execute(_enum_ddl(etable, comment, version))
                    con.executemany(f"INSERT INTO {ident(etable)} VALUES (?, ?, ?)", erows)
                continue
            rows = tables.get(table)
            if not rows:
                continue
            con.execute(_ddl(table, version))
            cols = [c[0] for c in _columns(table, version)]
            columns_sql = ", ".join(f'"{ident(c)}"' for c in cols)
            marks_sql = ", ".join("?" for _ in cols)
            con.executemany(
                f"INSERT INTO {ident(table)} ({columns_sql}) VALUES ({marks_sql})",
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
