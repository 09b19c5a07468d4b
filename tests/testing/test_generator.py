"""The trace generator writes real-format files whose contents equal the spec.

Everything is read back with sqlite3 / json directly (not with traceview's
ingester), so these tests pin the file formats themselves.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from traceview.testing import (
    ApiCall,
    GpuSpec,
    Kernel,
    Memop,
    Range,
    TraceSpec,
    global_pid,
    global_tid,
    llm_serving_spec,
    llm_serving_truth,
    summarize,
    two_process_spec,
    write_kineto,
    write_nsys,
)
from traceview.testing.samples import main as samples_main

H100 = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0, memory_bandwidth_bytes_per_s=3_352_000_000_000,
               clock_hz=1_980_000_000, l2_bytes=52_428_800)
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)"


def small_spec() -> TraceSpec:
    """Eager kernels inside cpu_ops, one 3-kernel CUDA-graph launch, copies, a sync, NVTX ranges.

    All times are multiples of 1000 ns so the legacy Kineto flavour is exact too.
    """
    pid = tid = 777
    kernels = [
        Kernel(NORM, 100_000, 5_000, pid=pid, tid=tid, grid=(512, 1, 1), block=(1024, 1, 1)),
        Kernel(GEMM, 110_000, 250_000, pid=pid, tid=tid, launch_api="cudaLaunchKernelExC", grid=(48, 8, 1),
               block=(384, 1, 1), registers_per_thread=168, shared_memory_bytes=231_424),
        Kernel("triton_poi_fused_add_0", 365_000, 7_000, pid=pid, tid=tid, launch_api="cuLaunchKernel"),
    ] + [
        Kernel(n, 400_000 + 20_000 * i, 12_000, pid=pid, tid=tid, graph=True, correlation_id=500, stream_id=13)
        for i, n in enumerate(["nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN", NORM, "flash_fwd_splitkv_kernel"])
    ]
    memops = [
        Memop("memcpy", 60_000, 3_000, 4096, "HtoD", "Pinned", "Device", pid=pid, tid=tid),
        Memop("memset", 70_000, 1_000, 1024, pid=pid, tid=tid, dst_kind="Device"),
        Memop("memcpy", 470_000, 2_000, 64, "DtoH", "Device", "Pageable", pid=pid, tid=tid),
    ]
    calls = [ApiCall("cudaStreamSynchronize", 466_000, 8_000, pid=pid, tid=tid)]
    ranges = [
        Range("execute_context_1(512)_generation_0(0)", 20_000, 480_000, pid=pid, tid=tid, kind="user_annotation"),
        Range("_C::rms_norm", 85_000, 99_000, pid=pid, tid=tid, kind="cpu_op",
              input_dims=[[512, 4096], [512, 4096], [4096], []], input_types=["c10::BFloat16"] * 3 + ["Scalar"]),
        Range("aten::mm", 100_000, 109_000, pid=pid, tid=tid, kind="cpu_op",
              input_dims=[[512, 4096], [4096, 6144]], input_types=["c10::BFloat16", "c10::BFloat16"]),
        Range("forward", 30_000, 470_000, pid=pid, tid=tid, kind="nvtx"),
        Range("gemm_region", 90_000, 115_000, pid=pid, tid=tid, kind="nvtx", domain="cuBLAS"),
        Range("model_runner.py(10): execute_model", 25_000, 478_000, pid=pid, tid=tid, kind="python_function"),
    ]
    return TraceSpec(gpus=(H100,), kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(calls),
                     ranges=tuple(ranges), process_names={pid: "python3"})


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


@pytest.fixture(scope="module")
def nsys_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nsys")
    spec = small_spec()
    out = {v: write_nsys(spec, d / f"small_{v}.sqlite", version=v) for v in ("2023.1", "legacy")}
    out["2026.3"] = write_nsys(spec, d / "small_2026.3.sqlite",
                               diagnostics=[(0, "Warning", "Not all CUDA events might have been collected")])
    out["two"] = write_nsys(two_process_spec(), d / "two.sqlite")
    return out


# ---- nsys -----------------------------------------------------------------------------


def test_nsys_2026_metadata_and_tables(nsys_files: dict[str, Path]) -> None:
    con = sqlite3.connect(nsys_files["2026.3"])
    names = tables(con)
    assert "EXPORT_META_DATA" not in names
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
    assert meta["EXPORT_PRODUCT_VERSION"] == "2026.3.1.157"
    assert meta["EXPORT_SCHEMA_VERSION"] == "3.27.0"
    assert {"ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_KERNEL_LAUNCH_TYPE", "ENUM_CUDA_MEMCPY_OPER"} <= names
    assert con.execute("SELECT name FROM ENUM_NSYS_EVENT_TYPE WHERE id = 59").fetchone() == ("NvtxPushPopRange",)
    kcols = columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert {"mangledName", "greenContextId", "graphNodeId", "graphId"} <= set(kcols)
    assert con.execute("SELECT severity, text FROM DIAGNOSTIC_EVENT").fetchall() == [
        (2, "Not all CUDA events might have been collected")]
    gpu = con.execute("SELECT name, smCount, memoryBandwidth, totalMemory, vmId FROM TARGET_INFO_GPU").fetchone()
    assert gpu == ("NVIDIA H100 80GB HBM3", 132, 3_352_000_000_000, 85_899_345_920, 1 << 48)
    assert con.execute("SELECT count(*) FROM TARGET_INFO_SESSION_START_TIME").fetchone() == (1,)
    mode = con.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE'")
    assert mode.fetchone() == ("Node",)


def test_nsys_2023_metadata_and_enum_typo(nsys_files: dict[str, Path]) -> None:
    con = sqlite3.connect(nsys_files["2023.1"])
    names = tables(con)
    assert "META_DATA_EXPORT" not in names and "DIAGNOSTIC_EVENT" not in names
    meta = dict(con.execute("SELECT name, value FROM EXPORT_META_DATA"))
    assert meta["EXPORT_SCHEMA_VERSION"] == "3.1.2" and "EXPORT_PARAM_OUTUPT_FILE" in meta
    assert "ENUM_CUDA_KRENEL_LAUNCH_TYPE" in names and "ENUM_CUDA_KERNEL_LAUNCH_TYPE" not in names
    kcols = columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert "mangledName" in kcols and "greenContextId" not in kcols
    with pytest.raises(ValueError):
        write_nsys(small_spec(), nsys_files["2023.1"].with_name("x.sqlite"), version="2023.1",
                   diagnostics=[(0, "Info", "x")])


def test_nsys_legacy_has_no_metadata_enums_or_mangled_names(nsys_files: dict[str, Path], tmp_path: Path) -> None:
    con = sqlite3.connect(nsys_files["legacy"])
    names = tables(con)
    assert not {"META_DATA_EXPORT", "EXPORT_META_DATA"} & names
    assert not any(n.startswith("ENUM_") for n in names)
    assert "mangledName" not in columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert "endGlobalTid" not in columns(con, "NVTX_EVENTS")
    no_ranges = TraceSpec(gpus=(H100,), kernels=small_spec().kernels)
    con2 = sqlite3.connect(write_nsys(no_ranges, tmp_path / "legacy_noranges.sqlite", version="legacy"))
    assert "NVTX_EVENTS" not in tables(con2)


@pytest.mark.parametrize("version", ["2026.3", "2023.1", "legacy"])
def test_nsys_kernels_and_launch_join(nsys_files: dict[str, Path], version: str) -> None:
    spec = small_spec()
    con = sqlite3.connect(nsys_files[version])
    count, total, first = con.execute(
        'SELECT count(*), sum("end" - start), min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    assert count == len(spec.kernels)
    assert total == sum(k.dur_ns for k in spec.kernels)
    assert first == spec.session_offset_ns + min(k.start_ns for k in spec.kernels)  # session time base, not 0
    rows = con.execute(
        """SELECT k.correlationId, count(r.start), min(r."end" <= k.start)
           FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
             ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
           GROUP BY k.rowid""").fetchall()
    assert all(n == 1 for _, n, _ in rows)
    assert all(before == 1 for _, _, before in rows)  # the launch ends before the kernel starts
    api = dict(con.execute(
        "SELECT s.value, r.eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"))
    assert api == {"cudaLaunchKernel_v7000": 0, "cudaLaunchKernelExC_v11060": 0, "cuLaunchKernel": 1,
                   "cudaGraphLaunch_v10000": 0, "cudaMemcpyAsync_v3020": 0, "cudaMemsetAsync_v3020": 0,
                   "cudaStreamSynchronize_v3020": 0}
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone() == (2,)
    assert con.execute("SELECT copyKind, srcKind, dstKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start"
                       ).fetchall() == [(1, 1, 2, 4096), (2, 2, 0, 64)]
    assert con.execute("SELECT memKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall() == [(2, 1024)]


def test_nsys_graph_replays_share_one_graph_launch(nsys_files: dict[str, Path]) -> None:
    con = sqlite3.connect(nsys_files["2026.3"])
    graph = con.execute("""SELECT correlationId, count(*), count(DISTINCT graphNodeId), count(DISTINCT graphId)
                           FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL GROUP BY 1""").fetchall()
    assert graph == [(500, 3, 3, 1)]
    launches = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                              WHERE s.value = 'cudaGraphLaunch_v10000' AND r.correlationId = 500""").fetchone()
    assert launches == (1,)
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NULL").fetchone() == (3,)


def test_nsys_strings_ids_and_nvtx(nsys_files: dict[str, Path]) -> None:
    con = sqlite3.connect(nsys_files["2026.3"])
    values = [v for (v,) in con.execute("SELECT value FROM StringIds")]
    assert len(values) == len(set(values))
    names = {r[0] for r in con.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")}
    assert NORM in names and GEMM in names
    short = {r[0] for r in con.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName")}
    assert {"rms_norm_kernel", GEMM, "flash_fwd_splitkv_kernel"} <= short
    tids = {r[0] for r in con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    assert tids == {global_tid(777, 777)} == {(1 << 48) | (777 << 24) | 777}
    assert {r[0] for r in con.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")} == {global_pid(777)}
    nvtx = con.execute("""SELECT n.eventType, n.text, s.value, n.domainId FROM NVTX_EVENTS n
                          LEFT JOIN StringIds s ON s.id = n.textId ORDER BY n.start""").fetchall()
    assert nvtx[0] == (75, "cuBLAS", None, 1)  # domain registration precedes its ranges
    assert (59, "forward", None, 0) in nvtx  # plain push/pop: text
    assert (59, None, "execute_context_1(512)_generation_0(0)", 0) in nvtx  # registered string: textId
    assert (59, None, "gemm_region", 1) in nvtx
    assert not any(n[1] == "aten::mm" or n[2] == "aten::mm" for n in nvtx)  # cpu_ops are Kineto-only


def test_nsys_correlation_ids_repeat_across_processes(nsys_files: dict[str, Path]) -> None:
    spec = two_process_spec()
    con = sqlite3.connect(nsys_files["two"])
    per_pid = con.execute("""SELECT globalTid >> 24 & 16777215, group_concat(correlationId)
                             FROM (SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY correlationId)
                             GROUP BY 1""").fetchall()
    assert len(per_pid) == 2 and per_pid[0][1] == per_pid[1][1] == ",".join(map(str, range(1, 8)))
    naive = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId""").fetchone()[0]
    right = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                           ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
                        """).fetchone()[0]
    assert right == len(spec.kernels) and naive == 2 * len(spec.kernels)
    domains = con.execute("SELECT text, globalTid >> 24 & 16777215 FROM NVTX_EVENTS WHERE eventType = 75").fetchall()
    assert domains == [("NCCL", 41_002)]


def test_nsys_without_kernels_has_no_kernel_table(tmp_path: Path) -> None:
    spec = TraceSpec(gpus=(H100,), kernels=(), api_calls=(ApiCall("cudaDeviceSynchronize", 0, 1_000),))
    con = sqlite3.connect(write_nsys(spec, tmp_path / "empty.sqlite"))
    names = tables(con)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in names and "CUPTI_ACTIVITY_KIND_RUNTIME" in names
    assert "CUPTI_ACTIVITY_KIND_MEMCPY" not in names and "NVTX_EVENTS" not in names


# ---- Kineto ---------------------------------------------------------------------------


def ns(value: Decimal) -> int:
    """Kineto µs value (3 decimals) back to integer ns, exactly."""
    return int(value * 1000)


def load(path: Path) -> tuple[str, dict]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    return text, json.loads(text, parse_float=Decimal)


def test_kineto_modern_format(tmp_path: Path) -> None:
    spec = small_spec()
    path = write_kineto(spec, tmp_path / "small.pt.trace.json.gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    text, doc = load(path)
    assert list(doc)[:2] == ["schemaVersion", "deviceProperties"] and list(doc)[-1] == "baseTimeNanoseconds"
    assert doc["schemaVersion"] == 1 and "distributedInfo" not in doc
    assert doc["deviceProperties"][0]["numSms"] == 132 and doc["deviceProperties"][0]["warpSize"] == 32
    events = doc["traceEvents"]
    assert text.count("\n") > 5 * len(events)  # pretty-printed like Kineto, not one giant line
    assert re.search(r'"ts": \d+\.\d{3}, "dur": \d+\.\d{3}', text)

    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_name = {}
    for e in kernels:
        by_name.setdefault(e["name"], []).append(e)
    spec_kernels = sorted(spec.kernels, key=lambda k: k.start_ns)
    got = sorted(kernels, key=lambda e: e["ts"])
    assert [(ns(e["ts"]) - spec.session_offset_ns, ns(e["dur"])) for e in got] == [
        (k.start_ns, k.dur_ns) for k in spec_kernels]
    graph = [e for e in got if e["args"]["stream"] == 13]
    assert len(graph) == 3 and all("External id" not in e["args"] for e in graph)
    assert len({e["args"]["correlation"] for e in graph}) == 1

    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") in ("cpu_op", "user_annotation")}
    gemm = by_name[GEMM][0]
    assert ops[gemm["args"]["External id"]] == "aten::mm"
    assert gemm["args"]["grid"] == [48, 8, 1] and gemm["args"]["shared memory"] == 231_424
    triton = by_name["triton_poi_fused_add_0"][0]  # launched outside any cpu_op: innermost is the step annotation
    assert ops[triton["args"]["External id"]] == "execute_context_1(512)_generation_0(0)"

    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    assert all(e["args"]["correlation"] in runtime for e in kernels)
    assert runtime[graph[0]["args"]["correlation"]]["name"] == "cudaGraphLaunch"
    assert runtime[triton["args"]["correlation"]]["cat"] == "cuda_driver"
    assert {e["cat"] for e in events if "cat" in e} >= {
        "kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset", "cpu_op", "user_annotation",
        "python_function", "ac2g", "gpu_user_annotation", "Trace"}
    assert not any(e["name"] == "forward" for e in events)  # NVTX-only ranges are not in Kineto
    copies = [e["name"] for e in events if e.get("cat") == "gpu_memcpy"]
    assert copies == ["Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)"]
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    assert {e["ph"] for e in flows} == {"s", "f"} and all(e["cat"] == "ac2g" for e in flows)
    assert {(e["name"], e["args"].get("name")) for e in events if e.get("ph") == "M"} >= {
        ("process_name", "python3"), ("thread_name", "stream 7 ")}


def test_kineto_exact_ns_and_distributed_info(tmp_path: Path) -> None:
    spec = TraceSpec(gpus=(H100,), kernels=(Kernel("k", 1_234_567, 8_901),), rank=3, world_size=8)
    text, doc = load(write_kineto(spec, tmp_path / "odd.json"))
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 3, "world_size": 8}
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert f'"ts": {(spec.session_offset_ns + 1_234_567) // 1000}.567, "dur": 8.901' in text
    assert ns(kernel["ts"]) == spec.session_offset_ns + 1_234_567 and ns(kernel["dur"]) == 8_901
    assert doc["baseTimeNanoseconds"] + ns(kernel["ts"]) == spec.start_utc_ns + spec.session_offset_ns + 1_234_567


def test_kineto_legacy_2021_flavour(tmp_path: Path) -> None:
    spec = small_spec()
    path = write_kineto(spec, tmp_path / "legacy.json", flavour="legacy2021")
    assert path.read_bytes()[:2] != b"\x1f\x8b"
    text, doc = load(path)
    assert "baseTimeNanoseconds" not in doc and text.rstrip().endswith("]}")
    events = doc["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"Kernel", "Runtime", "Memcpy", "Memset", "Operator"} <= cats
    assert not cats & {"kernel", "cuda_runtime", "cpu_op", "python_function"}
    kernels = [e for e in events if e.get("cat") == "Kernel"]
    assert {e["tid"] for e in kernels} == {"stream 7", "stream 13"}
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in kernels)
    base_us = (spec.start_utc_ns + spec.session_offset_ns) // 1000
    assert sorted((e["ts"] - base_us, e["dur"]) for e in kernels) == sorted(
        (k.start_ns // 1000, k.dur_ns // 1000) for k in spec.kernels)
    assert all("external id" in e["args"] and "External id" not in e["args"] for e in kernels)
    runtime_tids = {e["tid"] for e in events if e.get("cat") == "Runtime"}
    assert runtime_tids == {"777"}


def test_kineto_needs_pid_for_multi_process_spec(tmp_path: Path) -> None:
    spec = two_process_spec()
    with pytest.raises(ValueError):
        write_kineto(spec, tmp_path / "both.json")
    _, doc = load(write_kineto(spec, tmp_path / "rank1.json", pid=41_002))
    assert doc["distributedInfo"]["rank"] == 1
    assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")} == {41_002}


# ---- specs ----------------------------------------------------------------------------


def test_auto_correlation_ids_are_per_process_and_unique(tmp_path: Path) -> None:
    spec = TraceSpec(gpus=(H100,), kernels=tuple(
        Kernel(f"k{i}", 10_000 * i, 2_000, pid=1 + i % 2, tid=1 + i % 2, correlation_id=3 if i == 0 else None)
        for i in range(6)))
    con = sqlite3.connect(write_nsys(spec, tmp_path / "auto.sqlite"))
    got = con.execute("""SELECT k.globalPid >> 24 & 16777215, s.value, k.correlationId
                         FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                         ORDER BY k.start""").fetchall()
    assert got == [(1, "k0", 3), (2, "k1", 1), (1, "k2", 1), (2, "k3", 2), (1, "k4", 2), (2, "k5", 3)]
    with pytest.raises(ValueError):
        summarize(TraceSpec(gpus=(H100,), kernels=(Kernel("a", 0, 1, correlation_id=1),
                                                    Kernel("b", 10, 1, correlation_id=1))))


def test_llm_serving_sample(tmp_path: Path) -> None:
    spec = llm_serving_spec(seed=0)
    assert summarize(spec) == summarize(llm_serving_spec(seed=0))
    assert summarize(spec) != summarize(llm_serving_spec(seed=1))
    truth = llm_serving_truth(spec)
    assert truth["steps_by_phase"] == {"prefill": 2, "decode": 24, "mixed": 0}
    assert truth["graph_launch_count"] == 24 and 0 < truth["graph_kernel_count"] < truth["kernel_count"] <= 5000
    assert spec.gpus[0].name == "NVIDIA H100 80GB HBM3" and spec.gpus[0].sm_count == 132
    graph_corrs: dict[int, int] = {}
    for k in spec.kernels:
        if k.graph:
            graph_corrs[k.correlation_id] = graph_corrs.get(k.correlation_id, 0) + 1
    assert len(graph_corrs) == 24 and len(set(graph_corrs.values())) == 1
    decode_gemms = [k.dur_ns for k in spec.kernels if k.graph and k.name.startswith("nvjet")]
    prefill_gemms = [k.dur_ns for k in spec.kernels if k.name.startswith("sm90_xmma")]
    assert 10_000 < min(decode_gemms) and max(decode_gemms) < 100_000
    assert max(prefill_gemms) > 200_000

    assert samples_main([str(tmp_path)]) == 0
    nsys, kin = tmp_path / "llm_serving.sqlite", tmp_path / "llm_serving.pt.trace.json.gz"
    assert nsys.stat().st_size < 2_000_000 and kin.stat().st_size < 2_000_000
    con = sqlite3.connect(nsys)
    assert con.execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone() == (
        truth["kernel_count"], truth["kernel_sum_ns"])
    steps = con.execute("""SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                           WHERE s.value LIKE 'execute_context_%'""").fetchone()
    assert steps == (26,)
