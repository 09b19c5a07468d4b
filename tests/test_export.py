"""`traceview export`: Chrome trace-event JSON that holds every kernel, links launches to their kernels
exactly where the schema does, and nests on every track as Perfetto requires.

Every check recomputes its expectation from the schema tables or the generator's spec, and reads the
written JSON back with the standard library, as a viewer would.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import traceview
from traceview import workflow
from traceview.report.chrome_trace import write_chrome_trace
from traceview.report.finding_windows import finding_windows
from traceview.testing import A100_80GB, ApiCall, Kernel, Memop, Range, TraceSpec, write_nsys
from commands import traceview_cli
from conftest import SHARED_TRACES, built_once, corpus, reported, requires_shared, trace_key

BOLONGCHENG_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def read_trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def export(trace: traceview.Trace, target: Path) -> tuple[dict, list[dict]]:
    """Export an analysed trace with its findings, as the command does; returns the JSON and the findings."""
    options = workflow.CheckOptions.configured()
    findings = finding_windows(trace.con, [f.to_dict() for f in workflow.check(trace, options).findings])
    workflow.export(trace, options, target)
    return read_trace(target), findings


def ns(us: float) -> int:
    """A `ts`/`dur` back in ns: three decimals of µs are exact to the ns when read to the nearest."""
    return round(us * 1000)


def tracks(events: list[dict]) -> dict[tuple[int, int], list[dict]]:
    by_track = defaultdict(list)
    for e in events:
        if e["ph"] == "X" or (e["ph"] == "i" and e.get("s") == "t"):
            by_track[(e["pid"], e["tid"])].append(e)
    return by_track


def misnested(slices: list[dict]) -> list[dict]:
    """Slices that do not nest inside the slice open when they start (the spec's rule), by a plain stack."""
    bad, stack = [], []
    for e in sorted(slices, key=lambda e: (ns(e["ts"]), -ns(e.get("dur", 0)))):
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0))
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            bad.append(e)
            continue
        stack.append(end)
    return bad


@pytest.fixture(scope="module", params=corpus(), ids=lambda p: p.name)
def exported(request):
    """A real trace exported once a session, as the command does (`workflow.export`: the findings of a check, each
    with its report window); the findings are the report's, which are those."""
    trace, document = reported(request.param)
    findings = document["findings"]
    written = built_once(f"exports/{trace_key(trace.source)}.json",
                         lambda target: write_chrome_trace(trace.con, findings, target, version=traceview.__version__))
    return trace, read_trace(written), findings


@requires_shared
def test_every_kernel_is_exported_once_with_its_exact_time(exported) -> None:
    trace, data, _ = exported
    origin = data["otherData"]["ts_origin_ns"]
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    count, total = trace.con.execute("SELECT count(*), coalesce(sum(dur_ns), 0) FROM kernels").fetchall()[0]
    assert len(kernels) == count
    assert sum(e["args"]["dur_ns"] for e in kernels) == total
    assert len({(e["args"]["rank"], e["args"]["kernel_id"]) for e in kernels}) == count
    assert all(ns(e["ts"]) + origin == e["args"]["start_ns"] and ns(e["dur"]) == e["args"]["dur_ns"] for e in kernels)
    copies = trace.con.execute("SELECT count(*) FILTER (WHERE kind = 'memcpy'), count(*) FILTER (WHERE kind = 'memset')"
                               " FROM memops").fetchall()[0]
    assert (sum(e.get("cat") == "memcpy" for e in data["traceEvents"]),
            sum(e.get("cat") == "memset" for e in data["traceEvents"])) == copies


@requires_shared
def test_flows_connect_each_launch_call_to_the_work_it_launched(exported) -> None:
    trace, data, _ = exported
    origin = data["otherData"]["ts_origin_ns"]
    events = data["traceEvents"]
    at = {}  # (source, rank, id) -> where its slice is drawn
    for e in events:
        if e["ph"] != "X":
            continue
        args = e["args"]
        for source, key in (("kernel", "kernel_id"), ("memop", "memop_id"), ("call", "call_id")):
            if key in args:
                at[(source, args["rank"], args[key])] = (e["pid"], e["tid"], args["start_ns"] - origin)
    links = trace.con.execute("""
        SELECT 'kernel', rank, kernel_id, launch_call_id FROM kernels WHERE launch_call_id IS NOT NULL
        UNION ALL
        SELECT 'memop', m.rank, m.memop_id, min(a.call_id) FROM memops m
        JOIN api_calls a ON a.rank = m.rank AND a.pid = m.pid AND a.correlation_id = m.correlation_id
        GROUP BY ALL""").fetchall()
    expected = Counter((at[("call", rank, call)], at[(source, rank, work)]) for source, rank, work, call in links)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in events) == len(links)
    assert starts.keys() == finishes.keys()
    assert all(e["bp"] == "e" for e in finishes.values())
    drawn = Counter(((s["pid"], s["tid"], ns(s["ts"])), (f["pid"], f["tid"], ns(f["ts"])))
                    for s, f in ((starts[i], finishes[i]) for i in starts))
    assert drawn == expected


@requires_shared
def test_every_track_nests_and_is_named(exported) -> None:
    _, data, _ = exported
    events = data["traceEvents"]
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    by_track = tracks(events)
    assert set(by_track) <= named
    assert {track: misnested(slices) for track, slices in by_track.items() if misnested(slices)} == {}
    for slices in by_track.values():  # GPU work never nests: one kernel or copy at a time per lane
        work = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in slices
                      if e["cat"] in ("kernel", "memcpy", "memset"))
        assert all(a[1] <= b[0] for a, b in zip(work, work[1:]))


@requires_shared
def test_steps_and_findings_have_tracks_of_their_own(exported) -> None:
    trace, data, findings = exported
    events = data["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    expected = trace.con.execute("SELECT rank, step_id, phase, start_ns, end_ns - start_ns FROM steps").fetchall()
    assert sorted((e["args"]["rank"], e["args"]["step_id"], e["args"]["phase"], e["args"]["start_ns"],
                   e["args"]["dur_ns"]) for e in steps) == sorted(expected)
    assert all(e["name"] == f"{e['args']['phase']} step {e['args']['step_id']}" for e in steps)
    instants = [e for e in events if e["ph"] == "i" and e.get("s") == "g"]
    spans = trace.con.execute("SELECT count(*) FROM trace_info WHERE start_ns IS NOT NULL").fetchall()[0][0]
    assert sorted(e["args"]["rule"] for e in instants) == (sorted(f["rule"] for f in findings) if spans else [])
    assert all(e["args"]["message"] for e in instants)


# ------------------------------------------------------------------------------------------------
# A generated trace: every number known in advance
# ------------------------------------------------------------------------------------------------

OFFSET = 3_900_000_000  # TraceSpec.session_offset_ns: nsys times are on the session clock


def generated_spec() -> TraceSpec:
    """An eager kernel at a time and duration with sub-µs digits, a CUDA-graph replay of three kernels, a copy,
    a sync call, and an NVTX range around it all."""
    kernels = (
        Kernel("ampere_sgemm_128x64_nn", 1_000_123, 4_567, correlation_id=10, launch_start_ns=990_001,
               launch_dur_ns=3_001, grid=(120, 2, 1), block=(256, 1, 1)),
        *(Kernel(f"graph_kernel_{i}", 1_100_000 + 10_000 * i, 5_001 + i, correlation_id=20, graph=True,
                 launch_start_ns=1_090_000, launch_dur_ns=2_000) for i in range(3)),
    )
    memops = (Memop("memcpy", 1_200_000, 8_333, 1 << 20, correlation_id=30, launch_start_ns=1_195_000,
                    launch_dur_ns=1_500),)
    calls = (ApiCall("cudaDeviceSynchronize", 1_210_000, 3_000, correlation_id=31),)
    ranges = (Range("forward", 980_000, 1_215_000, kind="nvtx"),)
    return TraceSpec(gpus=(A100_80GB,), kernels=kernels, memops=memops, api_calls=calls, ranges=ranges)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated")
    path = write_nsys(generated_spec(), folder / "gen.sqlite")
    with traceview.load(path) as trace:
        trace.analyze()
        data, findings = export(trace, folder / "gen.json")
    return data, (folder / "gen.json").read_text(encoding="utf-8"), findings


def test_a_kernel_keeps_its_time_to_the_ns(generated) -> None:
    data, text, _ = generated
    origin = data["otherData"]["ts_origin_ns"]
    assert origin == OFFSET + 980_000  # the NVTX range opens first
    (gemm,) = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["name"] == "ampere_sgemm_128x64_nn"]
    assert '"ts":20.123,"dur":4.567' in text  # 1,000,123 - 980,000 ns; 4,567 ns
    assert (gemm["args"]["start_ns"], gemm["args"]["dur_ns"]) == (OFFSET + 1_000_123, 4_567)
    assert (gemm["args"]["grid"], gemm["args"]["block"]) == ([120, 2, 1], [256, 1, 1])
    assert gemm["args"]["category"] == "gemm" and gemm["args"]["dtype"] == "fp32"
    (copy,) = [e for e in data["traceEvents"] if e.get("cat") == "memcpy"]
    assert (ns(copy["ts"]), ns(copy["dur"]), copy["args"]["bytes"]) == (220_000, 8_333, 1 << 20)


def test_a_graph_launch_points_at_every_kernel_it_replayed(generated) -> None:
    data, _, _ = generated
    events = data["traceEvents"]
    (launch,) = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    graph = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("graph_kernel_")]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    from_launch = [i for i, s in starts.items() if (s["pid"], s["tid"], s["ts"]) == (launch["pid"], launch["tid"],
                                                                                     launch["ts"])]
    assert sorted(ns(finishes[i]["ts"]) for i in from_launch) == sorted(ns(k["ts"]) for k in graph) == [
        120_000, 130_000, 140_000]
    assert len(starts) == 5  # the eager launch, three graph kernels, the copy; the sync launched nothing


def test_tracks_are_named_by_process_thread_gpu_and_stream(generated) -> None:
    data, _, findings = generated
    names = {e["name"]: set() for e in data["traceEvents"] if e["ph"] == "M"}
    for e in data["traceEvents"]:
        if e["ph"] == "M" and e["name"] in ("process_name", "thread_name"):
            names[e["name"]].add(e["args"]["name"])
    assert names["process_name"] == {"traceview", "process 1000 (rank 0)", "GPU 0 (rank 0): NVIDIA A100-SXM4-80GB"}
    assert names["thread_name"] == {"steps (rank 0)", "thread 1000", "thread 1000 NVTX", "stream 7"} | (
        {"findings"} if findings else set())
    pids = {e["pid"] for e in data["traceEvents"]}
    tids = [e["tid"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(tids) == len(set(tids)) and not set(tids) & pids  # no tid reused across processes


# ------------------------------------------------------------------------------------------------
# The command
# ------------------------------------------------------------------------------------------------


@requires_shared
def test_export_gzips_when_the_path_ends_in_gz(tmp_path) -> None:
    result = traceview_cli("export", BOLONGCHENG_FWD, "-o", tmp_path / "out" / "fwd.json.gz")
    assert result.returncode == 0, result.stderr
    raw = (tmp_path / "out" / "fwd.json.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    data = json.loads(gzip.decompress(raw))
    assert sum(e.get("cat") == "kernel" for e in data["traceEvents"]) == 632
    assert "632 kernels" in result.stderr and "wrote" in result.stderr


@requires_shared
def test_export_refuses_to_write_over_its_input(tmp_path) -> None:
    trace = tmp_path / "fwd.sqlite"
    trace.write_bytes(BOLONGCHENG_FWD.read_bytes())
    before = hashlib.sha256(trace.read_bytes()).hexdigest()
    result = traceview_cli("export", trace, "-o", trace)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to overwrite the input trace" in lines[0], result.stderr
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == before
    assert list(tmp_path.iterdir()) == [trace]  # no temporary file left beside it


def test_export_of_a_missing_trace_is_one_line(tmp_path) -> None:
    result = traceview_cli("export", tmp_path / "nope.sqlite", "-o", tmp_path / "out.json")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()
