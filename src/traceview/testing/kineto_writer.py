"""Write a spec as a PyTorch profiler ``*.pt.trace.json[.gz]``, as libkineto does (today's and the 2021 format)."""

from __future__ import annotations

import bisect
import gzip as _gzip
import json
import struct
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from traceview.testing.plan import _Call, _Plan, _gpu_by_id, _plan, _time_span
from traceview.testing.spec import GpuSpec, Kernel, TraceSpec, _arch

KINETO_FLAVOURS = ("modern", "legacy2021")


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
