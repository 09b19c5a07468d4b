"""Ingest-speed benchmark: how fast `traceview.load()` turns a big trace into its DuckDB schema.

A script, not a test: it builds two large inputs (cached in --workdir), then measures each case
in a fresh Python subprocess (whole-process wall time and peak RSS) and prints a Markdown table.

    .venv/bin/python bench/ingest.py                      # build inputs if missing, run every case
    .venv/bin/python bench/ingest.py --only nsys --repeat 3
    .venv/bin/python bench/ingest.py --output /tmp/traceview-bench/results.md --breakdown

Inputs (rebuilt only when missing):
  * nsys: an Nsight Systems SQLite export with 2,000,000 kernels, one cudaLaunchKernel_v7000
    runtime row per kernel (same correlation ids, name via StringIds) and 200,000 NVTX push/pop
    ranges. Kernel names, launch configs and durations, NVTX texts and the GPU are taken at run
    time from a real export in ../shared/traces/nsys/. Written by the project's generator
    (traceview.testing.write_nsys, about a minute) when it is importable, else with
    sqlite3 executemany using that real export's own CREATE TABLE statements (--nsys-builder).
  * kineto: the real vLLM H100 trace from ../shared/traces/torch/ replicated 10x in time
    (ts shifted by the trace span plus a gap; correlation / External / Python / flow ids offset
    so they stay unique), written gzip-compressed like real traces.

Cases (each one fresh `python -c` process; wall time and ru_maxrss from os.wait4 on that child):
  nsys / kineto            traceview.load(path) + a count query over the contract tables
  floors                   what the stdlib alone needs: sqlite3 fetchall() of the kernel rows
                           (and of kernel+runtime+NVTX rows), gzip decompress, gzip + json.loads,
                           gzip + orjson.loads (when orjson is importable)

Nothing here asserts on time; numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / ".." / "shared" / "traces"  # the project's real traces: ../shared/traces from the repo root
NSYS_TEMPLATE = TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"
KINETO_SOURCE = TRACES / "torch" / "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz"

NSYS_KERNELS = 2_000_000
KERNELS_PER_BLOCK = 100  # one outer NVTX range and 9 inner ranges nested in it per 100 kernels
INNER_RANGES_PER_BLOCK = 9
NSYS_NVTX_RANGES = NSYS_KERNELS // KERNELS_PER_BLOCK * (1 + INNER_RANGES_PER_BLOCK)  # 200,000
KINETO_COPIES = 10
KINETO_GAP_US = 10_000
BUILD_VERSION = 3  # bump when the generated inputs change shape

NSYS_TABLES = (
    "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
    "TARGET_INFO_GPU", "META_DATA_EXPORT",
)
NVTX_PUSH_POP = 59
NVTX_DOMAIN_CREATE = 75
PID = 5025
TID = 5025
GLOBAL_PID = (1 << 48) | (PID << 24)  # nsys GlobalId serialisation: pid in bits 24..47
GLOBAL_TID = GLOBAL_PID | TID
LAUNCH_NAME = "cudaLaunchKernel_v7000"

# Numeric ids in Kineto args that must stay unique across the replicated copies.
KINETO_ARG_IDS = ("correlation", "External id", "Python id", "Python parent id", "Record function id", "Ev Idx")


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Input builders
# --------------------------------------------------------------------------------------------


def _manifest_path(target: Path) -> Path:
    return target.with_name(target.name + ".manifest.json")


def _cached(target: Path) -> dict | None:
    manifest = _manifest_path(target)
    if target.exists() and manifest.exists():
        info = json.loads(manifest.read_text())
        if info.get("build_version") == BUILD_VERSION:
            return info
    return None


def _save_manifest(target: Path, info: dict) -> dict:
    info = {"build_version": BUILD_VERSION, **info}
    _manifest_path(target).write_text(json.dumps(info, indent=2) + "\n")
    return info


def _nsys_templates() -> dict:
    """Everything the synthetic export copies from the real one, read at run time."""
    import sqlite3

    if not NSYS_TEMPLATE.exists():
        sys.exit(f"missing real nsys export {NSYS_TEMPLATE} (needed for its DDL and template rows)")
    src = sqlite3.connect(f"file:{NSYS_TEMPLATE.resolve().as_posix()}?mode=ro&immutable=1", uri=True)
    try:
        ddl = dict(src.execute(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'table' "
            f"AND name IN ({', '.join('?' * len(NSYS_TABLES))})", NSYS_TABLES).fetchall())
        missing = [t for t in NSYS_TABLES if t not in ddl]
        if missing:
            sys.exit(f"{NSYS_TEMPLATE}: template export lacks {missing}")
        strings = src.execute("SELECT id, value FROM StringIds ORDER BY id").fetchall()
        string_id = {value: sid for sid, value in strings}
        t = {
            "ddl": ddl,
            "strings": strings,
            "string_id": string_id,
            "columns": {table: [row[1] for row in src.execute(f'PRAGMA table_info("{table}")')]
                        for table in NSYS_TABLES},
            "kernels": src.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start").fetchall(),
            "launch": src.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId = ? LIMIT 1",
                                  [string_id.get(LAUNCH_NAME, -1)]).fetchone(),
            "nvtx": src.execute("SELECT * FROM NVTX_EVENTS WHERE eventType = ? AND text LIKE '%sizes = %' "
                                "ORDER BY start", [NVTX_PUSH_POP]).fetchall(),
            "nvtx_domain": src.execute("SELECT * FROM NVTX_EVENTS WHERE eventType = ?",
                                       [NVTX_DOMAIN_CREATE]).fetchall(),
            "gpu": src.execute("SELECT * FROM TARGET_INFO_GPU").fetchall(),
            "meta": src.execute("SELECT * FROM META_DATA_EXPORT").fetchall(),
        }
    finally:
        src.close()
    if not t["kernels"] or t["launch"] is None or not t["nvtx"]:
        sys.exit(f"{NSYS_TEMPLATE}: template export lacks kernel, {LAUNCH_NAME} or NVTX rows")
    return t


def _nsys_timeline(durations: list[int]) -> dict[str, list[int]]:
    """Host launches every 3 us but never runs more than 200 us ahead of the GPU (a full launch
    queue); kernels run back to back in launch order on one stream."""
    n = NSYS_KERNELS
    launch_start, launch_end, kernel_start, kernel_end = [0] * n, [0] * n, [0] * n, [0] * n
    host_t, gpu_t = 1_000_000_000, 0
    for i in range(n):
        host_t = max(host_t, gpu_t - 200_000)
        launch_start[i] = host_t
        launch_end[i] = host_t + 2_500
        host_t += 3_000
        kernel_start[i] = max(gpu_t, launch_end[i] + 1_000)
        kernel_end[i] = kernel_start[i] + durations[i % len(durations)]
        gpu_t = kernel_end[i] + 800
    return {"launch_start": launch_start, "launch_end": launch_end,
            "kernel_start": kernel_start, "kernel_end": kernel_end}


def _nsys_ranges(tl: dict[str, list[int]], texts: list[str]):
    """(start, end, text) of the NVTX push/pop ranges: per 100 kernels one outer range and 9 inner
    ones nested in it, the inner ones named with the real export's PyTorch NVTX texts."""
    per_inner = KERNELS_PER_BLOCK // INNER_RANGES_PER_BLOCK
    ls, le = tl["launch_start"], tl["launch_end"]
    t = 0
    for block, first in enumerate(range(0, NSYS_KERNELS, KERNELS_PER_BLOCK)):
        last = min(first + KERNELS_PER_BLOCK, NSYS_KERNELS) - 1
        yield ls[first] - 100, le[last] + 100, f"layer {block % 48}, step {block // 48}"
        for j in range(INNER_RANGES_PER_BLOCK):
            a = first + j * per_inner
            b = last if j == INNER_RANGES_PER_BLOCK - 1 else min(a + per_inner, last + 1) - 1
            yield ls[a] - 50, le[b] + 50, texts[t % len(texts)]
            t += 1


def _generator_available() -> bool:
    try:
        from traceview.testing import Kernel, Range, TraceSpec, write_nsys  # noqa: F401
    except ImportError:
        return False
    return True


def _write_nsys_generator(path: Path, tpl: dict, tl: dict[str, list[int]]) -> str:
    """Write through the project's generator (traceview.testing.write_nsys)."""
    from traceview.testing import GpuSpec, Kernel, Range, TraceSpec, write_nsys

    kc = {c: i for i, c in enumerate(tpl["columns"]["CUPTI_ACTIVITY_KIND_KERNEL"])}
    nc = {c: i for i, c in enumerate(tpl["columns"]["NVTX_EVENTS"])}
    gc = {c: i for i, c in enumerate(tpl["columns"]["TARGET_INFO_GPU"])}
    names = {sid: value for sid, value in tpl["strings"]}
    templates = [
        {
            "name": names[row[kc["demangledName"]]],
            "short_name": names[row[kc["shortName"]]],
            "grid": (row[kc["gridX"]], row[kc["gridY"]], row[kc["gridZ"]]),
            "block": (row[kc["blockX"]], row[kc["blockY"]], row[kc["blockZ"]]),
            "registers_per_thread": row[kc["registersPerThread"]],
            "shared_memory_bytes": row[kc["staticSharedMemory"]] + row[kc["dynamicSharedMemory"]],
        }
        for row in tpl["kernels"]
    ]
    ks, ke, ls, le = tl["kernel_start"], tl["kernel_end"], tl["launch_start"], tl["launch_end"]
    kernels = [
        Kernel(start_ns=ks[i], dur_ns=ke[i] - ks[i], pid=PID, tid=TID, correlation_id=i + 1,
               launch_api="cudaLaunchKernel", launch_start_ns=ls[i], launch_dur_ns=le[i] - ls[i],
               **templates[i % len(templates)])
        for i in range(NSYS_KERNELS)
    ]
    texts = [row[nc["text"]] for row in tpl["nvtx"]]
    ranges = [Range(name=text, start_ns=s, end_ns=e, pid=PID, tid=TID, kind="nvtx")
              for s, e, text in _nsys_ranges(tl, texts)]
    gpus = [GpuSpec(name=g[gc["name"]], sm_count=g[gc["smCount"]], memory_bytes=g[gc["totalMemory"]],
                    compute_major=g[gc["computeMajor"]], compute_minor=g[gc["computeMinor"]],
                    memory_bandwidth_bytes_per_s=g[gc["memoryBandwidth"]], clock_hz=g[gc["clockRate"]],
                    l2_bytes=g[gc["l2CacheSize"]], device_id=g[gc["id"]]) for g in tpl["gpu"]]
    write_nsys(TraceSpec(gpus=gpus, kernels=kernels, ranges=ranges), path, version="2026.3")
    return ("traceview.testing.write_nsys (nsys 2026.3 schema), kernel names/launch configs and "
            "NVTX texts from the real export")


def _write_nsys_direct(path: Path, tpl: dict, tl: dict[str, list[int]]) -> str:
    """Write with sqlite3 executemany, using the real export's CREATE TABLE statements and rows as templates."""
    import sqlite3

    cols = tpl["columns"]
    k = {c: i for i, c in enumerate(cols["CUPTI_ACTIVITY_KIND_KERNEL"])}
    r = {c: i for i, c in enumerate(cols["CUPTI_ACTIVITY_KIND_RUNTIME"])}
    n = {c: i for i, c in enumerate(cols["NVTX_EVENTS"])}
    kernel_templates = [list(row) for row in tpl["kernels"]]
    launch_template = list(tpl["launch"])
    nvtx_template = list(tpl["nvtx"][0])
    texts = [row[n["text"]] for row in tpl["nvtx"]]
    launch_name_id = tpl["string_id"][LAUNCH_NAME]
    ks, ke, ls, le = tl["kernel_start"], tl["kernel_end"], tl["launch_start"], tl["launch_end"]

    def kernels():
        for i in range(NSYS_KERNELS):
            row = kernel_templates[i % len(kernel_templates)].copy()
            row[k["start"]], row[k["end"]] = ks[i], ke[i]
            row[k["correlationId"]] = row[k["gridId"]] = i + 1
            row[k["globalPid"]], row[k["streamId"]] = GLOBAL_PID, 7
            yield row

    def launches():
        for i in range(NSYS_KERNELS):
            row = launch_template.copy()
            row[r["start"]], row[r["end"]] = ls[i], le[i]
            row[r["correlationId"]] = i + 1
            row[r["globalTid"]], row[r["nameId"]] = GLOBAL_TID, launch_name_id
            yield row

    def nvtx():
        for row in tpl["nvtx_domain"]:
            row = list(row)
            row[n["globalTid"]] = GLOBAL_TID
            yield row
        for start, end, text in _nsys_ranges(tl, texts):
            row = nvtx_template.copy()
            row[n["start"]], row[n["end"]], row[n["text"]] = start, end, text
            row[n["globalTid"]] = GLOBAL_TID
            yield row

    out = sqlite3.connect(path)
    try:
        out.execute("PRAGMA journal_mode = OFF")
        out.execute("PRAGMA synchronous = OFF")
        for table in NSYS_TABLES:
            out.execute(tpl["ddl"][table])
        for table, rows in (("StringIds", tpl["strings"]), ("TARGET_INFO_GPU", tpl["gpu"]),
                            ("META_DATA_EXPORT", tpl["meta"]), ("CUPTI_ACTIVITY_KIND_KERNEL", kernels()),
                            ("CUPTI_ACTIVITY_KIND_RUNTIME", launches()), ("NVTX_EVENTS", nvtx())):
            out.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols[table]))})", rows)
        out.commit()
    finally:
        out.close()
    return "sqlite3 executemany with the real export's DDL and rows as templates"


def build_nsys(workdir: Path, builder: str = "auto") -> tuple[Path, dict]:
    """A 2 M-kernel nsys export in the real schema (cached; rebuilt only when missing)."""
    import sqlite3

    if builder == "auto":
        builder = "generator" if _generator_available() else "direct"
    elif builder == "generator" and not _generator_available():
        sys.exit("traceview.testing is not importable; use --nsys-builder direct")
    target = workdir / f"nsys_{NSYS_KERNELS // 1_000_000}M_kernels_{builder}.sqlite"
    if (info := _cached(target)) is not None:
        return target, info
    log(f"building {target} ({NSYS_KERNELS:,} kernels, {NSYS_NVTX_RANGES:,} NVTX ranges, {builder}) ...")
    started = time.perf_counter()
    tpl = _nsys_templates()
    kc = {c: i for i, c in enumerate(tpl["columns"]["CUPTI_ACTIVITY_KIND_KERNEL"])}
    if LAUNCH_NAME not in tpl["string_id"]:
        sid = max(tpl["string_id"].values()) + 1
        tpl["strings"].append((sid, LAUNCH_NAME))
        tpl["string_id"][LAUNCH_NAME] = sid
    timeline = _nsys_timeline([row[kc["end"]] - row[kc["start"]] for row in tpl["kernels"]])
    tmp = target.with_name(target.name + ".tmp")
    tmp.unlink(missing_ok=True)
    how = (_write_nsys_generator if builder == "generator" else _write_nsys_direct)(tmp, tpl, timeline)
    conn = sqlite3.connect(tmp)
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in NSYS_TABLES}
    conn.close()
    os.replace(tmp, target)
    info = _save_manifest(target, {
        "kind": "nsys",
        "builder": how,
        "template": "../shared/traces/nsys/" + NSYS_TEMPLATE.name,
        "counts": counts,
        "rows": counts["CUPTI_ACTIVITY_KIND_KERNEL"] + counts["CUPTI_ACTIVITY_KIND_RUNTIME"] + counts["NVTX_EVENTS"],
        "bytes": target.stat().st_size,
        "build_seconds": round(time.perf_counter() - started, 1),
    })
    log(f"built {target} in {info['build_seconds']} s ({info['bytes'] / 1e6:.0f} MB)")
    return target, info


def build_kineto(workdir: Path) -> tuple[Path, dict]:
    """The real vLLM trace replicated KINETO_COPIES times in time, gzip-compressed."""
    target = workdir / f"kineto_vllm_x{KINETO_COPIES}.pt.trace.json.gz"
    if (info := _cached(target)) is not None:
        return target, info
    if not KINETO_SOURCE.exists():
        sys.exit(f"missing real Kineto trace {KINETO_SOURCE}")
    log(f"building {target} (vLLM trace x{KINETO_COPIES}) ...")
    started = time.perf_counter()
    with gzip.open(KINETO_SOURCE, "rb") as f:
        doc = json.loads(f.read())
    events = doc["traceEvents"]
    metadata = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    # Integer microsecond shift: adding an integer keeps each float ts on the same nanosecond grid.
    shift_us = int(t1 - t0) + 1 + KINETO_GAP_US
    max_id = max(
        [int(e["id"]) for e in timed if isinstance(e.get("id"), int)]
        + [int(e["args"][key]) for e in timed if isinstance(e.get("args"), dict)
           for key in KINETO_ARG_IDS if isinstance(e["args"].get(key), int)]
    )
    id_stride = 10 ** len(str(max_id))  # copies get ids c*stride + original: unique and readable

    def shifted(event: dict, copy: int) -> dict:
        if copy == 0:
            return event
        out = dict(event)
        out["ts"] = event["ts"] + copy * shift_us
        if isinstance(out.get("id"), int):
            out["id"] = event["id"] + copy * id_stride
        args = event.get("args")
        if isinstance(args, dict) and any(key in args for key in KINETO_ARG_IDS):
            args = dict(args)
            for key in KINETO_ARG_IDS:
                if isinstance(args.get(key), int) and args[key] >= 0:
                    args[key] += copy * id_stride
            out["args"] = args
        return out

    before = {}
    after = {}
    seen_events = False
    for key, value in doc.items():
        if key == "traceEvents":
            seen_events = True
        else:
            (after if seen_events else before)[key] = value

    tmp = target.with_name(target.name + ".tmp")
    uncompressed = 0
    n_events = 0
    with gzip.open(tmp, "wb", compresslevel=6) as out:
        def write(text: str) -> None:
            nonlocal uncompressed
            data = text.encode()
            uncompressed += len(data)
            out.write(data)

        write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in before.items()))
        write('  "traceEvents": [\n')
        first = True
        for copy in range(KINETO_COPIES):
            batch = metadata if copy == 0 else []
            batch = batch + [shifted(e, copy) for e in timed]
            n_events += len(batch)
            text = ",\n".join("  " + json.dumps(e) for e in batch)
            write(text if first else ",\n" + text)
            first = False
        write("\n  ]" + "".join(f",\n  {json.dumps(k)}: {json.dumps(v)}" for k, v in after.items()) + "\n}\n")
    os.replace(tmp, target)
    info = _save_manifest(target, {
        "kind": "kineto",
        "builder": f"../shared/traces/torch/{KINETO_SOURCE.name} x{KINETO_COPIES}",
        "source_events": len(events),
        "events": n_events,
        "rows": n_events,
        "shift_us": shift_us,
        "id_stride": id_stride,
        "bytes": target.stat().st_size,
        "uncompressed_bytes": uncompressed,
        "build_seconds": round(time.perf_counter() - started, 1),
    })
    log(f"built {target} in {info['build_seconds']} s ({info['bytes'] / 1e6:.0f} MB gzip, "
        f"{uncompressed / 1e6:.0f} MB JSON, {n_events:,} events)")
    return target, info


# --------------------------------------------------------------------------------------------
# Measured cases: each is the body of a `python -c` child that prints one JSON line
# --------------------------------------------------------------------------------------------

LOAD_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import traceview
t1 = time.perf_counter()
trace = traceview.load(sys.argv[1])
t2 = time.perf_counter()
counts = trace.con.execute(
    "SELECT (SELECT count(*) FROM kernels), (SELECT count(*) FROM api_calls), "
    "(SELECT count(*) FROM ranges), (SELECT count(*) FROM memops)").fetchall()[0]
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "query_s": t3 - t2,
                  "counts": dict(zip(["kernels", "api_calls", "ranges", "memops"], counts))}))
"""

SQLITE_KERNELS_CHILD = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
rows = conn.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
print(json.dumps({"load_s": time.perf_counter() - t0, "counts": {"kernel rows": len(rows)}}))
"""

SQLITE_ALL_CHILD = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
counts = {}
for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
    rows = conn.execute(f"SELECT * FROM {table}").fetchall()
    counts[table] = len(rows)
    del rows
print(json.dumps({"load_s": time.perf_counter() - t0, "counts": counts}))
"""

GZIP_CHILD = """
import gzip, json, sys, time
t0 = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as f:
    raw = f.read()
print(json.dumps({"load_s": time.perf_counter() - t0, "counts": {"bytes": len(raw)}}))
"""

JSON_CHILD = """
import gzip, json, sys, time
t0 = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as f:
    raw = f.read()
t1 = time.perf_counter()
doc = json.loads(raw)
t2 = time.perf_counter()
print(json.dumps({"load_s": t2 - t0, "gunzip_s": t1 - t0, "parse_s": t2 - t1,
                  "counts": {"events": len(doc["traceEvents"])}}))
"""

ORJSON_CHILD = JSON_CHILD.replace("import gzip, json,", "import gzip, json, orjson,").replace(
    "doc = json.loads(raw)", "doc = orjson.loads(raw)")

# Stage timings: the same load with the reader's steps wrapped in timers (module globals are
# looked up at call time, so patching them here times the real code without touching src/).
BREAKDOWN_CHILD = """
import json, resource, sys, time
import traceview
from traceview.ingest import kineto, nsys
from traceview.model import db

records, depth = [], [0]

def timed(module, name):
    fn = getattr(module, name)
    def wrapper(*args, **kwargs):
        entry = [depth[0], module.__name__.rsplit(".", 1)[-1] + "." + name, 0.0, None]
        records.append(entry)
        depth[0] += 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            entry[2] = time.perf_counter() - t
            entry[3] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            depth[0] -= 1
    setattr(module, name, wrapper)

def timed_generator(module, name):
    fn = getattr(module, name)
    def wrapper(*args, **kwargs):
        entry = [depth[0], module.__name__.rsplit(".", 1)[-1] + "." + name + " (fetchmany + pa.array)", 0.0, None]
        records.append(entry)
        it = fn(*args, **kwargs)
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                entry[2] += time.perf_counter() - t
                entry[3] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                return
            entry[2] += time.perf_counter() - t
            yield item
    setattr(module, name, wrapper)

timed(db, "create_schema")
for name in ("_read_trace_info", "_read_devices", "_read_api_calls", "_read_kernels", "_read_memops",
             "_read_ranges", "_read_diagnostics", "_stage", "_stage_strings", "_stage_dumped"):
    timed(nsys, name)
timed_generator(nsys, "_batches")
for name in ("_load_event_parts", "_read_events_file", "_insert_trace_info", "_stage_events", "_add_diagnostics"):
    timed(kineto, name)
for name in ("finish_stages", "finish_api_calls", "finish_kernels", "finish_memops", "finish_ranges",
             "finish_trace_span", "add_short_names"):
    timed(db, name)
t0 = time.perf_counter()
trace = traceview.load(sys.argv[1])
total = time.perf_counter() - t0
print(json.dumps({"load_s": total, "stages": records,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(code: str, path: Path) -> dict:
    """Run `python -c code path` in a fresh process; wall time and that child's own peak RSS."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    # os.wait4 gives this child's rusage alone (RUSAGE_CHILDREN would be the max over all children).
    # Drain the pipes first (small outputs), then reap.
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{stderr.decode(errors='replace')[-4000:]}")
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    result["wall_s"] = wall
    result["rss_mb"] = usage.ru_maxrss / 1024  # Linux reports KiB
    return result


def measure(name: str, code: str, path: Path, rows: int, rows_label: str, repeat: int) -> dict:
    runs = []
    for i in range(repeat):
        log(f"{name}: run {i + 1}/{repeat} ...")
        runs.append(run_child(code, path))
        log(f"{name}: {runs[-1]['wall_s']:.2f} s wall, {runs[-1]['rss_mb']:.0f} MB peak RSS")
    best = min(runs, key=lambda r: r["wall_s"])
    return {"case": name, "rows": rows, "rows_label": rows_label, **best,
            "all_wall_s": [r["wall_s"] for r in runs], "max_rss_mb": max(r["rss_mb"] for r in runs)}


def python_has(module: str) -> bool:
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return probe.returncode == 0


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def environment() -> dict:
    versions = subprocess.run(
        [sys.executable, "-c",
         "import json, duckdb, polars, pyarrow, sqlite3\n"
         "try:\n import orjson; o = orjson.__version__\nexcept ImportError:\n o = None\n"
         "print(json.dumps({'duckdb': duckdb.__version__, 'polars': polars.__version__,"
         " 'pyarrow': pyarrow.__version__, 'sqlite': sqlite3.sqlite_version, 'orjson': o}))"],
        capture_output=True, text=True, check=True).stdout
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": mem_gib,
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        **json.loads(versions),
    }


def markdown(results: list[dict], inputs: dict, env: dict, repeat: int) -> str:
    lines = [
        f"Machine: {env['cores']} cores ({env['cpu']}), {env['mem_gib']:.1f} GiB RAM, {env['os']}; "
        f"Python {env['python']}, duckdb {env['duckdb']}, polars {env['polars']}, pyarrow {env['pyarrow']}, "
        f"SQLite {env['sqlite']}" + (f", orjson {env['orjson']}" if env.get("orjson") else "") + ".",
        "",
    ]
    for kind, info in inputs.items():
        if kind == "nsys":
            c = info["counts"]
            lines.append(
                f"- nsys input: {info['bytes'] / 1e6:,.0f} MB SQLite; {c['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, "
                f"{c['CUPTI_ACTIVITY_KIND_RUNTIME']:,} runtime launches, {c['NVTX_EVENTS']:,} NVTX rows "
                f"({info['rows']:,} rows counted for rows/s).")
        else:
            lines.append(
                f"- Kineto input: {info['bytes'] / 1e6:,.0f} MB gzip, {info['uncompressed_bytes'] / 1e6:,.0f} MB JSON, "
                f"{info['events']:,} events ({info['builder']}).")
    lines += [
        "",
        f"Best of {repeat} run(s) by wall time; each run is a fresh `python -c` process. Wall = the whole "
        "process (interpreter start, imports, load, count query); in-process = the timed part inside the "
        "child (`traceview.load()` alone for the ingest rows); rows/s = rows / best wall; peak RSS = "
        "`ru_maxrss` of the best run (and the highest over all runs).",
        "",
        "| case | rows | wall s (best) | all runs, wall s | in-process s | rows/s (wall) | peak RSS MB (max) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        runs = ", ".join(f"{w:.1f}" for w in r["all_wall_s"])
        lines.append(
            f"| {r['case']} | {r['rows']:,} {r['rows_label']} | {r['wall_s']:.2f} | {runs} | {r['load_s']:.2f} | "
            f"{r['rows'] / r['wall_s']:,.0f} | {r['rss_mb']:,.0f} ({r['max_rss_mb']:,.0f}) |")
    return "\n".join(lines) + "\n"


def breakdown_markdown(name: str, result: dict) -> str:
    lines = [f"Stage breakdown, {name}: inclusive seconds (indented = called inside the line above) and the "
             f"process's peak RSS when the stage ended; load() total {result['load_s']:.2f} s "
             f"(timers add a little overhead; one run, not best-of):", "", "```",
             f"{'stage':<56} {'seconds':>8} {'peak RSS MB':>12}"]
    for depth, stage, seconds, rss in result["stages"]:
        rss_text = f"{rss:12,.0f}" if rss is not None else f"{'':12}"
        lines.append(f"{'  ' * depth}{stage:<{56 - 2 * depth}} {seconds:8.2f} {rss_text}")
    lines.append("```")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"),
                        help="where the generated inputs are cached (default /tmp/traceview-bench)")
    parser.add_argument("--only", choices=("nsys", "kineto"), help="run one input format only")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the best (lowest wall) is reported")
    parser.add_argument("--output", type=Path, help="also write the Markdown report to this file")
    parser.add_argument("--breakdown", action="store_true",
                        help="add one extra run per format with per-stage timers around the reader's steps")
    parser.add_argument("--nsys-builder", choices=("auto", "generator", "direct"), default="auto",
                        help="how to write the nsys input: the project's generator "
                             "(traceview.testing.write_nsys), sqlite3 executemany with the real "
                             "export's DDL, or auto (the generator when importable; default)")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the inputs and stop")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.workdir.mkdir(parents=True, exist_ok=True)

    kinds = [args.only] if args.only else ["nsys", "kineto"]
    inputs: dict[str, dict] = {}
    paths: dict[str, Path] = {}
    for kind in kinds:
        if kind == "nsys":
            paths[kind], inputs[kind] = build_nsys(args.workdir, args.nsys_builder)
        else:
            paths[kind], inputs[kind] = build_kineto(args.workdir)
    if args.build_only:
        print(json.dumps(inputs, indent=2))
        return 0

    env = environment()
    results = []
    breakdowns = []
    if "nsys" in kinds:
        info, path = inputs["nsys"], paths["nsys"]
        c = info["counts"]
        results.append(measure("nsys: traceview.load", LOAD_CHILD, path, info["rows"], "rows", args.repeat))
        results.append(measure("nsys floor: sqlite3 fetchall kernels", SQLITE_KERNELS_CHILD, path,
                               c["CUPTI_ACTIVITY_KIND_KERNEL"], "rows", args.repeat))
        results.append(measure("nsys floor: sqlite3 fetchall kernels+runtime+NVTX", SQLITE_ALL_CHILD, path,
                               info["rows"], "rows", args.repeat))
        if args.breakdown:
            breakdowns.append(breakdown_markdown("nsys", run_child(BREAKDOWN_CHILD, path)))
    if "kineto" in kinds:
        info, path = inputs["kineto"], paths["kineto"]
        results.append(measure("kineto: traceview.load", LOAD_CHILD, path, info["events"], "events", args.repeat))
        results.append(measure("kineto floor: gzip decompress", GZIP_CHILD, path, info["events"], "events",
                               args.repeat))
        results.append(measure("kineto floor: gzip + json.loads", JSON_CHILD, path, info["events"], "events",
                               args.repeat))
        if python_has("orjson"):
            results.append(measure("kineto floor: gzip + orjson.loads", ORJSON_CHILD, path, info["events"],
                                   "events", args.repeat))
        else:
            log("orjson not importable: skipping the orjson floor")
        if args.breakdown:
            breakdowns.append(breakdown_markdown("kineto", run_child(BREAKDOWN_CHILD, path)))

    for r in results:
        if "counts" in r:
            log(f"{r['case']}: counts {r['counts']}")
    report = markdown(results, inputs, env, args.repeat)
    if breakdowns:
        report += "\n" + "\n".join(breakdowns)
    print(report)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report)
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
