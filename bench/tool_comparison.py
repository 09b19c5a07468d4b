"""Side-by-side: traceview, HTA and nsys-ai on the shared real traces (issue 31, docs/comparison.md).

A script, not a test. For every trace under ../shared/traces/{nsys,torch} (a directory under torch/ is one
multi-rank job) it:

  (a) recomputes the MAIN PROBLEM from the raw file with its own small readers (stdlib sqlite3 for nsys
      exports, json/gzip for Kineto): exact interval unions in ns, a handful of candidate problems, each with
      the time at stake; the main problem is the candidate with the most time at stake;
  (b) runs HTA (Kineto traces; its own venv) and takes its most salient output as its top finding;
  (c) runs nsys-ai `diagnose` (nsys traces; its own venv, offline, no LLM) and takes its first ranked finding;
  (d) runs `traceview report TRACE --format json` and takes findings[0] and verdict;
  (e) judges, for each tool, whether its top finding names the main problem: yes / partly / no (rules in
      docs/comparison.md and in judge() below).

The raw figures, HTA and nsys-ai outputs are cached as JSON under --cache (default /tmp/tool_comparison,
never in the repo), keyed by the trace's size and mtime; traceview's column is always recomputed.

    .venv/bin/python bench/tool_comparison.py                   # everything (peers from cache when present)
    .venv/bin/python bench/tool_comparison.py --traceview-only  # only traceview rerun; raw/peers from cache
    .venv/bin/python bench/tool_comparison.py --refresh         # rerun HTA and nsys-ai too
    .venv/bin/python bench/tool_comparison.py --only bolongcheng --markdown /tmp/table.md

Peers (not project dependencies), each in its own venv:
    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis 'pandas<3'
    python3 -m venv /tmp/nsysai-venv && /tmp/nsysai-venv/bin/pip install nsys-ai
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TRACES = (REPO.parent / "shared" / "traces").resolve()
if not TRACES.exists():
    TRACES = Path("/work/shared/traces")
TRACEVIEW = REPO / ".venv" / "bin" / "traceview"
HTA_PY = Path("/tmp/hta-venv/bin/python")
NSYSAI = Path("/tmp/nsysai-venv/bin/nsys-ai")

# --------------------------------------------------------------------------------------------------
# interval helpers (ns, exact)


def union(intervals):
    """Sorted, merged list of [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def total(merged):
    return sum(e - s for s, e in merged)


def intersect_len(a, b):
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    n = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            n += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return n


COMM_RE = re.compile(r"nccl|rccl|cross_device_reduce|allreduce|all_reduce|allgather|all_gather|reducescatter"
                     r"|reduce_scatter|alltoall|sendrecv", re.I)
SIMT_RE = re.compile(r"sgemm|simt", re.I)
NOT_SIMT_RE = re.compile(r"tensorop|xmma|hmma|s16816|s1688|h16816|wmma|tf32", re.I)
SYNC_RE = re.compile(r"Synchronize|cudaMemcpy(?!Async)|cudaMemset(?!Async)|hipMemcpy(?!Async)", re.I)
LAUNCH_RE = re.compile(r"LaunchKernel|GraphLaunch|LaunchCooperative|cuLaunch", re.I)
STARTUP_RE = re.compile(r"cudaMalloc|cuMemAlloc|cuModuleLoad|cudaFree|cuCtxCreate|cuInit|cudaSetDevice|"
                        r"cuLibraryLoad|cudaGetDevice|cudaStreamCreate|cudaEventCreate|hipMalloc", re.I)

FAMILIES = [
    ("communication", COMM_RE),
    ("attention", re.compile(r"flash|fmha|attn|attention|sdpa|paged", re.I)),
    ("gemm", re.compile(r"gemm|Cijk_|matmul|cutlass|cublas|_mm_|bmm|xmma|wgmma|nvjet|hgemm|sgemm|dot", re.I)),
    ("conv", re.compile(r"conv|winograd|implicit|cudnn|fft", re.I)),
    ("norm", re.compile(r"norm|layer_norm|rms", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("reduce", re.compile(r"reduce|sum|mean|argmax|topk|sort|scan", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|copy|fill|cat|index", re.I)),
]


def family(name: str) -> str:
    for fam, rx in FAMILIES:
        if rx.search(name or ""):
            return fam
    return "other"


KIND = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
        9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}

# --------------------------------------------------------------------------------------------------
# raw readers -> one "device view": kernels [(s,e,name)], memcpys [(s,e,kind,bytes)], memsets [(s,e)],
# runtime [(s,e,name)], plus meta


def read_nsys(path: Path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type in ('table','view')")}

    def cols(t):
        return [r[1] for r in con.execute(f"pragma table_info({t})")]

    strings = {}
    if "StringIds" in tables:
        strings = dict(con.execute("select id, value from StringIds"))
    kern = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        c = cols("CUPTI_ACTIVITY_KIND_KERNEL")
        namecol = "demangledName" if "demangledName" in c else "shortName"
        short = "shortName" if "shortName" in c else namecol
        for s, e, dev, sn, dn in con.execute(
                f"select start, end, deviceId, {short}, {namecol} from CUPTI_ACTIVITY_KIND_KERNEL"):
            nm = strings.get(sn, str(sn)) if isinstance(sn, int) else str(sn)
            full = strings.get(dn, str(dn)) if isinstance(dn, int) else str(dn)
            kern.append((s, e, dev, nm, full))
    mc = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for s, e, dev, kind, b in con.execute(
                "select start, end, deviceId, copyKind, bytes from CUPTI_ACTIVITY_KIND_MEMCPY"):
            mc.append((s, e, dev, KIND.get(kind, str(kind)), b))
    ms = []
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        ms = [(s, e, dev) for s, e, dev in con.execute(
            "select start, end, deviceId from CUPTI_ACTIVITY_KIND_MEMSET")]
    rt = []
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for s, e, nid in con.execute("select start, end, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"):
            rt.append((s, e, strings.get(nid, str(nid))))
    nvtx = 0
    if "NVTX_EVENTS" in tables:
        nvtx = con.execute("select count(*) from NVTX_EVENTS").fetchone()[0]
    gpus = {}
    if "TARGET_INFO_GPU" in tables:
        c = cols("TARGET_INFO_GPU")
        if "computeMajor" in c:
            for gid, name, major in con.execute("select id, name, computeMajor from TARGET_INFO_GPU"):
                gpus[gid] = (name, major)
        else:
            for gid, name in con.execute("select id, name from TARGET_INFO_GPU"):
                gpus[gid] = (name, None)
    con.close()
    if not kern:
        return None
    # primary device = the one with most kernel time
    per_dev = {}
    for s, e, dev, *_ in kern:
        per_dev[dev] = per_dev.get(dev, 0) + (e - s)
    dev = max(per_dev, key=per_dev.get)
    name, major = gpus.get(dev, (None, None))
    if name is None and len(gpus) == 1:
        name, major = next(iter(gpus.values()))
    return [{
        "rank": 0,
        "gpu": name,
        "compute_major": major,
        "kernels": [(s, e, full or nm) for s, e, d, nm, full in kern if d == dev],
        "memcpy": [(s, e, k, b) for s, e, d, k, b in mc if d == dev],
        "memset": [(s, e) for s, e, d in ms if d == dev],
        "runtime": rt,
        "nvtx_rows": nvtx,
        "devices_with_kernels": len(per_dev),
    }]


def load_json(path: Path):
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        return json.loads(f.read())


def read_kineto_file(path: Path):
    doc = load_json(path)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    props = doc.get("deviceProperties") or [] if isinstance(doc, dict) else []
    rank = (doc.get("distributedInfo") or {}).get("rank", 0) if isinstance(doc, dict) else 0
    kern, mc, ms, rt = [], [], [], []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        try:
            s = float(ev["ts"]) * 1000.0
            e = s + float(ev.get("dur", 0)) * 1000.0
        except (KeyError, TypeError, ValueError):
            continue
        lc = cat.lower()
        if lc == "kernel":
            dev = (ev.get("args") or {}).get("device", ev.get("pid"))
            kern.append((s, e, dev, ev.get("name", "")))
        elif lc in ("gpu_memcpy", "memcpy"):
            dev = (ev.get("args") or {}).get("device", ev.get("pid"))
            nm = ev.get("name", "")
            m = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", nm)
            mc.append((s, e, dev, m.group(1) if m else nm, (ev.get("args") or {}).get("bytes", 0)))
        elif lc in ("gpu_memset", "memset"):
            dev = (ev.get("args") or {}).get("device", ev.get("pid"))
            ms.append((s, e, dev))
        elif lc in ("cuda_runtime", "runtime", "cuda_driver"):
            rt.append((s, e, ev.get("name", "")))
    if not kern:
        return None
    per_dev = {}
    for s, e, dev, _ in kern:
        per_dev[dev] = per_dev.get(dev, 0) + (e - s)
    dev = max(per_dev, key=per_dev.get)
    gpu, major = None, None
    for p in props:
        if str(p.get("id")) == str(dev) or len(props) == 1:
            gpu, major = p.get("name"), p.get("computeMajor")
            break
    if gpu is None and props:
        gpu, major = props[0].get("name"), props[0].get("computeMajor")
    return {
        "rank": rank,
        "gpu": gpu,
        "compute_major": major,
        "kernels": [(s, e, n) for s, e, d, n in kern if d == dev],
        "memcpy": [(s, e, k, b) for s, e, d, k, b in mc if d == dev],
        "memset": [(s, e) for s, e, d in ms if d == dev],
        "runtime": rt,
        "nvtx_rows": 0,
        "devices_with_kernels": len(per_dev),
    }


def read_kineto(path: Path):
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    views = [v for v in (read_kineto_file(p) for p in files) if v]
    return views or None


# --------------------------------------------------------------------------------------------------
# (a) the main problem, from one device view


def analyse_view(v):
    K = [(s, e) for s, e, _ in v["kernels"]]
    M = [(s, e) for s, e, *_ in v["memcpy"]]
    S = list(v["memset"])
    busy = union(K + M + S)
    g0, g1 = busy[0][0], busy[-1][1]
    gpu_span = g1 - g0
    busy_ns = total(busy)
    idle_ns = gpu_span - busy_ns
    rt = v["runtime"]
    cap0 = min([g0] + [s for s, _, _ in rt])
    cap1 = max([g1] + [e for _, e, _ in rt])
    capture = cap1 - cap0
    # idle cause: gaps between busy intervals
    gaps = [busy[i + 1][0] - busy[i][1] for i in range(len(busy) - 1)]
    small = sum(g for g in gaps if g < 100_000)
    big = max(gaps) if gaps else 0
    kdur = sorted(e - s for s, e in K)
    med_k = kdur[len(kdur) // 2] if kdur else 0
    sync_ns = sum(e - s for s, e, n in rt if SYNC_RE.search(n) and g0 <= s <= g1)
    launch_bound = idle_ns > 0 and small > 0.5 * idle_ns
    # startup: capture start -> first GPU op
    startup = g0 - cap0
    # a launch long before the first GPU op means the GPU rows are offset from host time (seen on ROCm
    # traces) or the launched work is missing: the window is then not start-up; do not price it
    early = [e for s, e, n in rt if e < g0 - 1_000_000 and LAUNCH_RE.search(n)]
    skew_note = ""
    if early:
        skew_note = "; not priced: a launch call precedes the first GPU op by %.1f ms (clock offset?)" % (
            (g0 - min(early)) / 1e6)
    startup_calls = sum(e - s for s, e, n in rt if s < g0 and STARTUP_RE.search(n))
    pre = {}
    for s, e, n in rt:
        if s < g0:
            pre[n] = pre.get(n, 0) + (min(e, g0) - s)
    pre_top = ", ".join("%s %.1f ms" % (short(n, 30), t / 1e6) for n, t in sorted(pre.items(), key=lambda x: -x[1])[:3])
    # FP32 SIMT GEMM
    simt = [(s, e, n) for s, e, n in v["kernels"] if SIMT_RE.search(n) and not NOT_SIMT_RE.search(n)]
    simt_ns = total(union([(s, e) for s, e, _ in simt]))
    tc = (v["compute_major"] or 0) >= 7 or bool(re.search(r"A100|H100|H200|H800|A10|A40|L4|L40|RTX|V100|T4|"
                                                          r"A2000|A5000|A6000|B200", v["gpu"] or ""))
    kern_u = union(K)
    kern_ns = total(kern_u)
    # exposed copies: memcpy time with no kernel beside it
    mc_u = union(M)
    exposed_copy = total(mc_u) - intersect_len(mc_u, kern_u)
    by_dir = {}
    for s, e, k, b in v["memcpy"]:
        d = by_dir.setdefault(k, [0, 0])
        d[0] += e - s
        d[1] += b or 0
    # exposed communication
    comm_u = union([(s, e) for s, e, n in v["kernels"] if COMM_RE.search(n)])
    comp_u = union([(s, e) for s, e, n in v["kernels"] if not COMM_RE.search(n)])
    comm_ns = total(comm_u)
    exposed_comm = comm_ns - intersect_len(comm_u, comp_u)
    # kernel families (sum of durations)
    fams, names = {}, {}
    for s, e, n in v["kernels"]:
        fams[family(n)] = fams.get(family(n), 0) + (e - s)
        names[n] = names.get(n, 0) + (e - s)
    ksum = sum(fams.values()) or 1
    top_fam = max(fams, key=fams.get)
    top_name = max(names, key=names.get)
    cands = {
        "idle": {"stake_ns": idle_ns, "share_pct": 100.0 * idle_ns / gpu_span if gpu_span else 0.0,
                 "of": "GPU span",
                 "detail": ("launch-bound: %.0f%% of idle in gaps <100 us, median kernel %.1f us"
                            % (100.0 * small / idle_ns, med_k / 1e3)) if launch_bound else
                 ("host-side gaps: largest gap %.2f ms, %d gaps, sync calls %.2f ms"
                  % (big / 1e6, len(gaps), sync_ns / 1e6))},
        "startup": {"stake_ns": 0 if early else startup, "share_pct": 100.0 * startup / capture if capture else 0.0,
                    "of": "capture",
                    "detail": "first CUDA call to first GPU op; malloc/module/context calls %.1f ms; top calls: %s%s"
                    % (startup_calls / 1e6, pre_top, skew_note)},
        "fp32-gemm": {"stake_ns": int(simt_ns * 7 / 8) if tc else 0, "time_ns": simt_ns,
                      "share_pct": 100.0 * simt_ns / kern_ns if kern_ns else 0.0, "of": "kernel time",
                      "detail": "%d FP32 SIMT GEMM kernels; stake = 7/8 of their time (tensor cores)" % len(simt)},
        "copy": {"stake_ns": exposed_copy, "share_pct": 100.0 * exposed_copy / gpu_span if gpu_span else 0.0,
                 "of": "GPU span",
                 "detail": "exposed memcpy; by direction: " + ", ".join(
                     "%s %.2f ms" % (k, d[0] / 1e6) for k, d in sorted(by_dir.items(), key=lambda x: -x[1][0]))},
        "comm": {"stake_ns": exposed_comm, "share_pct": 100.0 * exposed_comm / gpu_span if gpu_span else 0.0,
                 "of": "GPU span", "detail": "comm kernels %.2f ms, %.0f%% exposed"
                 % (comm_ns / 1e6, 100.0 * exposed_comm / comm_ns if comm_ns else 0)},
    }
    return {
        "gpu": v["gpu"], "rank": v["rank"], "kernels": len(K), "memcpys": len(M), "memsets": len(S),
        "gpu_span_ns": gpu_span, "capture_ns": capture, "busy_ns": busy_ns, "idle_ns": idle_ns,
        "kernel_ns": kern_ns,
        "top_family": top_fam, "top_family_pct": 100.0 * fams[top_fam] / ksum,
        "top_kernel": top_name, "top_kernel_pct": 100.0 * names[top_name] / ksum,
        "candidates": cands,
    }


def main_problem(views):
    per = [analyse_view(v) for v in views]
    # multi-rank: mean over ranks of each candidate (stake and share)
    n = len(per)
    agg = dict(per[0])
    agg["ranks"] = n
    if n > 1:
        for key in ("gpu_span_ns", "capture_ns", "busy_ns", "idle_ns", "kernel_ns"):
            agg[key] = sum(p[key] for p in per) / n
        agg["candidates"] = {}
        for c in per[0]["candidates"]:
            d = dict(per[0]["candidates"][c])
            d["stake_ns"] = sum(p["candidates"][c]["stake_ns"] for p in per) / n
            d["share_pct"] = sum(p["candidates"][c]["share_pct"] for p in per) / n
            d["detail"] = "mean of %d ranks (max %.1f%%); " % (
                n, max(p["candidates"][c]["share_pct"] for p in per)) + d["detail"]
            agg["candidates"][c] = d
    cands = agg["candidates"]
    best = max(cands, key=lambda c: cands[c]["stake_ns"])
    span = max(agg["capture_ns"], 1)
    small = (cands[best]["share_pct"] < 10.0 or cands[best]["stake_ns"] < 1_000_000 if best == "startup"
             else cands[best]["stake_ns"] < 0.10 * agg["gpu_span_ns"])
    if small:
        # nothing wasted beyond 10% of the GPU span: the GPU is busy; the main problem is its top family
        agg["main"] = {"category": "hotspot", "stake_ns": 0, "share_pct": agg["top_family_pct"],
                       "label": "GPU-bound: %s kernels %.0f%% of kernel time" % (
                           agg["top_family"], agg["top_family_pct"])}
    else:
        c = cands[best]
        agg["main"] = {"category": best, "stake_ns": c["stake_ns"], "share_pct": c["share_pct"],
                       "label": "%s %.1f ms (%.0f%% of %s)" % (
                           LABEL[best], c["stake_ns"] / 1e6, c["share_pct"], c["of"])}
    agg["main"]["runner_up"] = sorted(cands, key=lambda c: -cands[c]["stake_ns"])[1]
    agg["capture_share_of_main_pct"] = 100.0 * agg["main"]["stake_ns"] / span
    return agg


RAW_VERSION = "4"  # bump when the main-problem reader changes: the raw cache is keyed on it

LABEL = {"idle": "GPU idle", "startup": "start-up before first GPU op", "fp32-gemm": "FP32 SIMT GEMMs",
         "copy": "exposed copies", "comm": "exposed communication", "hotspot": "kernel hotspot"}

# --------------------------------------------------------------------------------------------------
# (b) HTA

HTA_CHILD = r"""
import json, sys, os, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
out = {}
a = TraceAnalysis(trace_dir=sys.argv[1])
def rec(name, fn):
    try:
        out[name] = fn()
    except Exception as ex:
        out[name] = {"error": "%s: %s" % (type(ex).__name__, str(ex)[:200])}
rec("temporal", lambda: json.loads(a.get_temporal_breakdown(visualize=False).to_json(orient="records")))
def kb():
    kt, kk = a.get_gpu_kernel_breakdown(visualize=False)
    return {"types": json.loads(kt.to_json(orient="records")),
            "top": json.loads(kk.sort_values("sum (us)", ascending=False).head(10)[["name", "kernel_type", "sum (us)"]]
                              .rename(columns={"sum (us)": "sum"}).to_json(orient="records"))}
rec("kernels", kb)
def idle():
    r = a.get_idle_time_breakdown(visualize=False)
    df = r[0] if isinstance(r, tuple) else r
    return json.loads(df.to_json(orient="records"))
rec("idle", idle)
rec("overlap", lambda: json.loads(a.get_comm_comp_overlap(visualize=False).to_json(orient="records")))
def launch():
    d = a.get_cuda_kernel_launch_stats(visualize=False)
    res = {}
    for rank, df in d.items():
        res[str(rank)] = {"launches": int(len(df)),
                          "short": int(((df.gpu_duration < df.cpu_duration) & (df.cpu_duration <= 50)).sum()),
                          "runtime_outliers": int((df.cpu_duration > 50).sum()),
                          "launch_delay_outliers": int((df.launch_delay > 100).sum())}
    return res
rec("launch", launch)
print(json.dumps(out))
"""


def run_hta(path: Path, workdir: Path):
    import importlib.metadata  # noqa: F401
    d = workdir / "hta_dirs" / hashlib.md5(str(path).encode()).hexdigest()[:10]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for i, f in enumerate(files):
        suffix = ".json.gz" if f.name.endswith(".gz") else ".json"
        (d / f"rank-{i}.pt.trace{suffix}").symlink_to(f)
    res = {"runs": {}}
    for mode, env_extra in (("default", {}), ("no_rounding", {"HTA_DISABLE_NS_ROUNDING": "1"})):
        t0 = time.time()
        env = dict(os.environ, **env_extra)
        try:
            p = subprocess.run([str(HTA_PY), "-c", HTA_CHILD, str(d)], capture_output=True, text=True,
                               timeout=900, env=env)
        except subprocess.TimeoutExpired:
            res["runs"][mode] = {"error": "timeout", "wall_s": time.time() - t0}
            continue
        r = {"wall_s": round(time.time() - t0, 2), "rc": p.returncode}
        if p.returncode == 0 and p.stdout.strip():
            try:
                r["out"] = json.loads(p.stdout.strip().splitlines()[-1])
            except json.JSONDecodeError:
                r["error"] = "bad output: " + p.stdout[-300:]
        else:
            r["error"] = (p.stderr or p.stdout)[-600:]
        res["runs"][mode] = r
    res["top"] = hta_top(res)
    return res


def hta_top(res):
    """What a user reads first from HTA: the largest of idle / non-compute / exposed comm, else top kernel."""
    run = res["runs"].get("default", {})
    mode = "default"
    out = run.get("out")
    if not out or isinstance(out.get("temporal"), dict):
        run = res["runs"].get("no_rounding", {})
        out = run.get("out")
        mode = "no_rounding (default failed)"
    if not out or isinstance(out.get("temporal"), dict):
        err = (run.get("error") or (out or {}).get("temporal", {}).get("error") or "no output")
        return {"category": "error", "label": "HTA failed: " + err.strip().splitlines()[-1][:160],
                "stake_ns": None}
    temporal = out["temporal"]
    rows = [t for t in temporal if isinstance(t, dict)]
    n = len(rows) or 1
    idle_us = sum(t.get("idle_time(us)", 0) for t in rows) / n
    nonc_us = sum(t.get("non_compute_time(us)", 0) for t in rows) / n
    span_us = sum(t.get("kernel_time(us)", 0) for t in rows) / n
    idle_pct = sum(t.get("idle_time_pctg", 0) for t in rows) / n
    nonc_pct = sum(t.get("non_compute_time_pctg", 0) for t in rows) / n
    comm_us, mem_us, comm_exposed_us, ov_pct = 0.0, 0.0, 0.0, None
    kinfo = out.get("kernels") if isinstance(out.get("kernels"), dict) and "types" in out["kernels"] else None
    if kinfo:
        for t in kinfo["types"]:
            if t.get("kernel_type") == "COMMUNICATION":
                comm_us = t.get("sum", 0) / n
            elif t.get("kernel_type") == "MEMORY":
                mem_us = t.get("sum", 0) / n
    ov = out.get("overlap")
    if isinstance(ov, list) and ov and comm_us:
        vals = [o.get("comp_comm_overlap_pctg", 0) for o in ov]
        ov_pct = sum(vals) / len(vals)
        comm_exposed_us = comm_us * (1 - ov_pct / 100.0)
    # dominant idle category (summed over streams/ranks)
    idle_cat = None
    if isinstance(out.get("idle"), list) and out["idle"]:
        agg = {}
        for r in out["idle"]:
            agg[r.get("idle_category")] = agg.get(r.get("idle_category"), 0) + r.get("idle_time", 0)
        idle_cat = max(agg, key=agg.get)
    top_kernel = None
    named = [t for t in (kinfo or {}).get("top", []) if t.get("name") != "others"]
    if named:
        top = named[0]
        ksum = sum(t.get("sum", 0) for t in kinfo["types"]) / n or 1
        top_kernel = (top["name"], 100.0 * top["sum"] / n / ksum)
    cands = [("idle", idle_us, "temporal breakdown: idle %.1f%% of kernel span (%.1f ms), largest idle "
              "category %s" % (idle_pct, idle_us / 1e3, idle_cat)),
             ("comm" if comm_us > mem_us else "copy", nonc_us,
              "temporal breakdown: non-compute %.1f%% (%.1f ms; kernel breakdown: comm %.1f ms, memory %.1f ms)"
              % (nonc_pct, nonc_us / 1e3, comm_us / 1e3, mem_us / 1e3)),
             ("comm", comm_exposed_us, "comm/comp overlap %.1f%%: exposed comm %.1f ms" % (
                 ov_pct or 0, comm_exposed_us / 1e3))]
    cat, us, label = max(cands, key=lambda c: c[1])
    if us < 0.10 * span_us and top_kernel:
        return {"category": "hotspot", "stake_ns": None, "mode": mode, "kernel": top_kernel[0],
                "label": "top kernel %s (%.0f%% of kernel time)" % (short(top_kernel[0], 40), top_kernel[1])}
    return {"category": cat, "stake_ns": us * 1000.0, "mode": mode, "label": label,
            "kernel": top_kernel[0] if top_kernel else None}


def short(s, n):
    s = s or ""
    return s if len(s) <= n else s[: n - 1] + "…"


# --------------------------------------------------------------------------------------------------
# (c) nsys-ai


def run_nsysai(path: Path, workdir: Path):
    d = workdir / "nsysai_runs" / path.stem
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    prof = d / path.name
    shutil.copyfile(path, prof)  # it writes a cache and sessions beside the profile: a private copy in /tmp
    home = workdir / "nsysai_home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), NO_COLOR="1")
    for k in list(env):
        if k.endswith("_API_KEY"):
            env.pop(k)
    out_json = d / "findings.json"
    t0 = time.time()
    try:
        p = subprocess.run([str(NSYSAI), "diagnose", str(prof), "--format", "text", "-o", str(out_json)],
                           capture_output=True, text=True, timeout=900, env=env, cwd=d)
        rc = p.returncode
        err = p.stderr[-600:]
        text = p.stdout
    except subprocess.TimeoutExpired:
        rc, err, text = "timeout", "", ""
    res = {"wall_s": round(time.time() - t0, 2), "rc": rc, "stdout_head": text[:3000]}
    if out_json.exists():
        doc = json.loads(out_json.read_text())
        fs = doc.get("findings", [])
        res["findings"] = [slim_nsysai(f) for f in fs]
        res["skipped"] = doc.get("skipped")
    else:
        res["error"] = err
    prof.unlink(missing_ok=True)
    res["top"] = nsysai_top(res)
    return res


def slim_nsysai(f):
    vals = {}
    for ev in f.get("evidence") or []:
        for k, v in (ev.get("values") or {}).items():
            if isinstance(v, (int, float, str)) and len(str(v)) < 200:
                vals[k] = v
    return {"label": f.get("label"), "category": f.get("category"), "severity": f.get("severity"),
            "row_kind": (f.get("provenance") or {}).get("row_kind"), "skill": (f.get("provenance") or {}).get("skill"),
            "headroom_ms": f.get("headroom_ms"), "note": f.get("note"), "values": vals}


# an nsys-ai finding's kind, by the first pattern its label, row kind, skill or category matches
NSYSAI_CATEGORIES = (
    ("comm", r"nccl|overlap|comm"),
    ("idle", r"idle|gap|bubble|cpu-bound|cpu_bound|launch|sync|stall"),
    ("copy", r"memcpy|h2d|d2h|memory|transfer|pageable"),
    ("startup", r"startup|warmup|init"),
    ("hotspot", r"hotspot|top kernel|top_kernel|kernels =|compute-bound|compute_bound|kernel"),
    ("capture", r"profile_quality|nvtx|coverage"),
)


def nsysai_category(f):
    t = " ".join(str(f.get(k) or "") for k in ("label", "row_kind", "skill", "category")).lower()
    return next((category for category, pattern in NSYSAI_CATEGORIES if re.search(pattern, t)), "other")


def nsysai_figure_ns(f):
    if f.get("headroom_ms"):
        return f["headroom_ms"] * 1e6
    v = f.get("values") or {}
    for k in ("idle_ms", "total_idle_ms", "gap_ms", "exposed_ms", "total_ms", "duration_ms"):
        if isinstance(v.get(k), (int, float)):
            return v[k] * 1e6
    if isinstance(v.get("duration_ns"), (int, float)):
        return v["duration_ns"]
    return None


def nsysai_top(res):
    fs = res.get("findings") or []
    if not fs:
        return {"category": "error" if res.get("rc") not in (0,) else "none",
                "label": "no findings" + (" (rc %s)" % res.get("rc") if res.get("rc") else ""),
                "stake_ns": None}
    f = fs[0]
    return {"category": nsysai_category(f), "label": f["label"], "stake_ns": nsysai_figure_ns(f),
            "kernel": (f.get("values") or {}).get("kernel_name"),
            "top3": [x["label"] for x in fs[:3]], "top3_cats": [nsysai_category(x) for x in fs[:3]]}


# --------------------------------------------------------------------------------------------------
# (d) traceview

TV_CATEGORY = {"TV101": "capture", "TV102": "capture", "TV103": "capture", "TV104": "startup",
               "TV201": "idle", "TV202": "idle", "TV203": "idle", "TV204": "idle", "TV206": "idle",
               "TV207": "idle", "TV205": "copy", "TV208": "copy", "TV301": "fp32-gemm", "TV302": "fp32-gemm",
               "TV303": "hotspot", "TV304": "hotspot", "TV305": "hotspot", "TV501": "hotspot",
               "TV502": "hotspot", "TV401": "comm", "TV402": "comm"}


def run_traceview(path: Path, workdir: Path):
    out = workdir / "traceview" / (path.name + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    t0 = time.time()
    try:
        p = subprocess.run([str(TRACEVIEW), "report", str(path), "--format", "json", "-o", str(out)],
                           capture_output=True, text=True, timeout=900)
        rc = p.returncode
        err = (p.stderr or "")[-400:]
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    res = {"wall_s": round(time.time() - t0, 2), "rc": rc}
    if out.exists():
        d = json.loads(out.read_text())
        fs = d.get("findings") or []
        res["verdict"] = d.get("verdict")
        res["findings"] = [{"rule": f.get("rule"), "title": f.get("title"), "message": f.get("message"),
                            "fix_summary": f.get("fix_summary"), "saving_ns": f.get("estimated_saving_ns"),
                            "share_pct": f.get("share_pct")} for f in fs]
    else:
        res["error"] = err
    fs = res.get("findings") or []
    if fs:
        f = fs[0]
        res["top"] = {"category": TV_CATEGORY.get(f["rule"], "other"), "rule": f["rule"], "label":
                      "%s %s (%s)" % (f["rule"], f["title"], fmt_ms(f["saving_ns"])), "stake_ns": f["saving_ns"],
                      "message": f["message"], "top3": [x["rule"] for x in fs[:3]],
                      "top3_cats": [TV_CATEGORY.get(x["rule"], "other") for x in fs[:3]]}
    else:
        res["top"] = {"category": "none" if rc == 0 else "error",
                      "label": "no findings" if rc == 0 else "failed: " + err.strip().splitlines()[-1][:120]
                      if err.strip() else "failed", "stake_ns": None}
    return res


def fmt_ms(ns):
    if ns is None:
        return "-"
    return "%.1f ms" % (ns / 1e6) if ns >= 1e5 else "%.0f us" % (ns / 1e3)


# --------------------------------------------------------------------------------------------------
# (e) judging

RELATED = {  # a tool's category that points at the main problem's time without naming its cause
    "fp32-gemm": {"hotspot"},
    "startup": {"capture"},
    "idle": set(),
    "copy": {"idle"},
    "comm": {"idle"},
    "hotspot": set(),
}


def judge(main, top, kernel_hint=None):
    """yes / partly / no / n/a for one tool's top finding against the main problem.

    yes:    same category, and where both give a figure for the time at stake, within 20% of ours
            (hotspot: the named kernel family/kernel is our top family/kernel);
    partly: same category with a figure off by more than 20%; or a related category that points at the
            main problem's time without its cause (a hotspot naming an sgemm kernel when the main problem is
            FP32 SIMT GEMMs; a capture-health warning when it is start-up); or the main problem is the
            tool's 2nd or 3rd finding;
    no:     otherwise (including a tool that ran and reported nothing, or failed);
    n/a:    the tool does not read this format.
    """
    if top is None:
        return "n/a"
    mc, tc = main["category"], top.get("category")
    if tc == mc:
        ours, theirs = main.get("stake_ns"), top.get("stake_ns")
        if mc == "hotspot":
            hint = top.get("kernel") or top.get("message") or top.get("label") or ""
            return "yes" if family(hint) == main.get("top_family") else "partly"
        if not ours or theirs is None:
            return "partly"
        return "yes" if abs(theirs - ours) <= 0.2 * ours else "partly"
    if mc == "hotspot" and tc == "fp32-gemm" and main.get("top_family") == "gemm":
        return "partly"  # names the dominant GEMMs, through a dtype cause we did not establish
    if tc in RELATED.get(mc, ()):
        if mc == "fp32-gemm" and not SIMT_RE.search(top.get("kernel") or top.get("label") or ""):
            return "no"
        return "partly"
    if mc in (top.get("top3_cats") or [])[1:3]:
        return "partly"
    return "no"


# --------------------------------------------------------------------------------------------------
# driver


def trace_list(only=None):
    items = []
    for p in sorted((TRACES / "nsys").glob("*.sqlite")):
        items.append(("nsys", p))
    for p in sorted((TRACES / "torch").iterdir()):
        if p.is_dir() or p.name.endswith((".json", ".json.gz", ".gz")):
            items.append(("kineto", p))
    if only:
        items = [it for it in items if any(o in it[1].name for o in only.split(","))]
    return items


def key_of(path: Path):
    if path.is_dir():
        st = [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in sorted(path.iterdir())]
    else:
        s = path.stat()
        st = [(path.name, s.st_size, int(s.st_mtime))]
    return hashlib.md5(json.dumps(st).encode()).hexdigest()[:12]


def cached(workdir: Path, kind: str, path: Path, fn, refresh: bool, allow_compute: bool = True):
    f = workdir / kind / f"{path.name}.{key_of(path)}.json"
    if f.exists() and not refresh:
        return json.loads(f.read_text())
    if not allow_compute:
        return None
    r = fn()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(r, indent=1, default=str))
    return r


def raw_for(fmt, path):
    views = read_nsys(path) if fmt == "nsys" else read_kineto(path)
    if not views:
        return {"skip": "no GPU kernels"}
    return main_problem(views)


def versions():
    v = {}
    for name, py, pkg in (("HTA", HTA_PY, "HolisticTraceAnalysis"), ("nsys-ai", NSYSAI.parent / "python", "nsys-ai"),
                          ("pandas (HTA venv)", HTA_PY, "pandas"), ("duckdb (nsys-ai venv)", NSYSAI.parent / "python",
                                                                    "duckdb")):
        try:
            v[name] = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version('{pkg}'))"],
                                     capture_output=True, text=True, timeout=60).stdout.strip() or "not installed"
        except OSError:
            v[name] = "not installed"
    try:
        v["traceview"] = subprocess.run([str(TRACEVIEW), "--version"], capture_output=True, text=True,
                                        timeout=120).stdout.strip()
    except OSError:
        v["traceview"] = "not installed"
    return v


def display_name(path: Path):
    n = path.name
    for suf in (".pt.trace.json.gz", ".json.gz", ".pt.trace.json", ".json", ".sqlite"):
        if n.endswith(suf):
            n = n[: -len(suf)]
            break
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/tool_comparison"))
    ap.add_argument("--traceview-only", action="store_true",
                    help="rerun only traceview; raw figures and HTA/nsys-ai come from the cache (missing = blank)")
    ap.add_argument("--refresh", action="store_true", help="rerun HTA and nsys-ai and the raw figures")
    ap.add_argument("--only", help="comma-separated substrings of trace names")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--markdown", type=Path, help="also write the table (Markdown) here")
    ap.add_argument("--json", type=Path, help="also write all rows (JSON) here")
    args = ap.parse_args(argv)
    wd = args.cache
    wd.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    items = trace_list(args.only)

    def one(item):
        fmt, path = item
        raw = cached(wd, "raw" + RAW_VERSION, path, lambda: raw_for(fmt, path), args.refresh)
        row = {"trace": display_name(path), "format": fmt, "raw": raw}
        if raw.get("skip"):
            return row
        peer_ok = not args.traceview_only
        if fmt == "kineto":
            row["hta"] = cached(wd, "hta", path, lambda: run_hta(path, wd), args.refresh, peer_ok)
            if row["hta"]:
                row["hta"]["top"] = hta_top(row["hta"])  # the reading rule is applied to cached outputs
            row["nsysai"] = None
        else:
            row["nsysai"] = cached(wd, "nsysai", path, lambda: run_nsysai(path, wd), args.refresh, peer_ok)
            if row["nsysai"]:
                row["nsysai"]["top"] = nsysai_top(row["nsysai"])
            row["hta"] = None
        row["traceview"] = run_traceview(path, wd)
        return row

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        rows = list(ex.map(one, items))
    for r in rows:
        if r["raw"].get("skip"):
            continue
        m = r["raw"]["main"]
        m = dict(m, top_family=r["raw"]["top_family"])
        r["judged"] = {
            "traceview": judge(m, r["traceview"]["top"]),
            "hta": judge(m, (r["hta"] or {}).get("top")) if r["format"] == "kineto" else "n/a",
            "nsysai": judge(m, (r["nsysai"] or {}).get("top")) if r["format"] == "nsys" else "n/a",
        }
    wall = time.time() - t_start
    md = render(rows, versions(), wall, args.traceview_only)
    print(md)
    if args.markdown:
        args.markdown.write_text(md)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    (wd / "last_rows.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def render(rows, vers, wall, tv_only):
    L = []
    L.append("Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    L.append("")
    L.append("| trace | main problem (figure, recomputed) | traceview top finding | judged | HTA top | judged "
             "| nsys-ai top | judged |")
    L.append("|---|---|---|---|---|---|---|---|")
    tot = {t: {"yes": 0, "partly": 0, "no": 0, "n": 0} for t in ("traceview", "hta", "nsysai")}
    skipped = []
    for r in rows:
        if r["raw"].get("skip"):
            skipped.append(r["trace"])
            continue
        m = r["raw"]["main"]
        main_txt = m["label"]
        tv = r["traceview"]["top"]["label"]
        hta = (r["hta"] or {}).get("top", {}).get("label", "(not run: cached HTA missing)") \
            if r["format"] == "kineto" else "— (nsys: HTA reads Kineto only)"
        ns = (r["nsysai"] or {}).get("top", {}).get("label", "(not run: cached nsys-ai missing)") \
            if r["format"] == "nsys" else "— (Kineto: nsys-ai reads nsys only)"
        if r["format"] == "nsys" and r["nsysai"] and r["nsysai"].get("top", {}).get("stake_ns"):
            ns += " (%s)" % fmt_ms(r["nsysai"]["top"]["stake_ns"])
        j = r["judged"]
        for t in tot:
            if j[t] in ("yes", "partly", "no"):
                tot[t][j[t]] += 1
                tot[t]["n"] += 1
        L.append("| " + " | ".join(cell(x) for x in (
            r["trace"], main_txt, tv, j["traceview"], short(hta, 90), j["hta"], short(ns, 90), j["nsysai"])) + " |")
    L.append("")
    for t, name in (("traceview", "traceview"), ("hta", "HTA"), ("nsysai", "nsys-ai")):
        d = tot[t]
        L.append(f"- {name}: yes {d['yes']} of {d['n']}, partly {d['partly']}, no {d['no']}")
    L.append("")
    L.append("Skipped (no GPU kernels in the file): " + ", ".join(skipped))
    L.append("")
    L.append("Run: %.0f s wall%s." % (wall, " (--traceview-only)" if tv_only else ""))
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
