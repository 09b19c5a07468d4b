"""Resolve a spec into what both writers emit: launch calls placed on the host timeline,
correlation ids, graph identities and Kineto external ids; and the ground truth read from it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from traceview.testing.spec import GpuSpec, Kernel, Memop, Range, TraceSpec

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


def _is_driver_api(name: str) -> bool:
    return name.startswith("cu") and not name.startswith("cuda")


def _base_api_name(name: str) -> str:
    return re.sub(r"_v\d+$", "", name)


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


def _time_span(plan: _Plan) -> tuple[int, int]:
    ts = [c.start for c in plan.calls] + [o.start for o in plan.ops] + [ri.r.start_ns for ri in plan.ranges]
    te = [c.end for c in plan.calls] + [o.end for o in plan.ops] + [ri.r.end_ns for ri in plan.ranges]
    if not ts:
        return 0, 0
    return min(ts), max(te)


def _gpu_by_id(spec: TraceSpec) -> dict[int, GpuSpec]:
    return {g.device_id: g for g in spec.gpus}
