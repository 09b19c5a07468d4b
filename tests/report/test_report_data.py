"""The JSON and Markdown reports: schema-valid, values equal to what `query` returns, text inert."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from markupsafe import escape

import traceview
from commands import traceview_cli
from conftest import DLRM_DIR, KINETO_TRACES, NSYS_TRACES, VLLM_H100, reported, requires_shared, trace_id, union_ns
from traceview.report import html, json_report, markdown
from traceview.report.markdown import cell
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules
from traceview.units import duration

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "llm_serving.pt.trace.json.gz"
SCHEMA = json.loads(resources.files("traceview.report").joinpath("schema.json").read_text())
# each Kineto file once; of the 8 rank files of the DLRM job (reported whole as DLRM_DIR), the first stands for
# reading one rank of a job on its own
ONE_FILE_A_JOB = [p for p in KINETO_TRACES if p.parent != DLRM_DIR] + [p for p in KINETO_TRACES if p.parent == DLRM_DIR][:1]


def report_for(path: Path) -> tuple[traceview.Trace, dict]:
    """A generated trace's report, built here (a real trace's comes from the session: `reported`)."""
    trace = traceview.load(path).analyze()
    return trace, build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__)


@requires_shared
@pytest.mark.parametrize("path", NSYS_TRACES + ONE_FILE_A_JOB + [DLRM_DIR], ids=trace_id)
def test_report_json_is_schema_valid_for_every_real_trace(path: Path) -> None:
    trace, data = reported(path)
    jsonschema.validate(json.loads(json_report.render(data)), SCHEMA)
    assert data["summary"]["kernels"] == trace.scalar("SELECT count(*) FROM kernels")
    assert data["summary"]["kernel_time_ns"] == (trace.scalar("SELECT coalesce(sum(dur_ns), 0) FROM kernels"))
    assert len(data["steps"]) == trace.scalar("SELECT count(*) FROM steps")
    assert len(markdown.render(data)) < 60_000
    page = html.render(data)
    assert len(page) < 3_000_000 and str(escape(data["verdict"][0].split(":")[0])) in page
    if not data["summary"]["kernels"]:
        assert "no GPU kernels" in page


@requires_shared
def test_markdown_and_html_list_the_findings_in_rank_order() -> None:
    """Each renderer's findings table holds the report's findings in its order, the top one first: a renderer that
    skipped or reordered one would hide the fix that saves most."""
    _, data = reported(VLLM_H100)
    rules = [f["rule"] for f in data["findings"]]
    assert len(rules) >= 2
    table = [re.match(r"\| (TV\d{3}) \| ", line) for line in markdown.render(data).splitlines()]
    assert [m.group(1) for m in table if m] == rules[:markdown.TOP_FINDINGS]
    rows = re.findall(r'<a href="#finding-(\d+)"><code>(TV\d{3})</code></a>', html.render(data))
    assert rows == [(str(i), rule) for i, rule in enumerate(rules, 1)]


@requires_shared
def test_vllm_h100_report_values() -> None:
    trace, data = reported(VLLM_H100)
    summary = data["summary"]
    assert (summary["kernels"], summary["kernel_time_ns"], summary["graph_kernels"]) == (13_508, 233_133_565, 8_667)
    assert summary["gpu_idle_pct"] == pytest.approx(10.88, abs=0.005)  # hand-checked, no timestamp rounding
    assert data["gpu"]["spec_id"] == "h100-sxm" and data["gpu"]["peak_tflops"]["bf16"] == pytest.approx(989.4)
    phases = {p["phase"]: p for p in data["phases"]}
    assert (phases["decode"]["steps"], phases["decode"]["bound"]) == (9, "memory")
    assert [s["phase"] for s in data["steps"]] == ["prefill"] + ["decode"] * 9 + ["empty"]
    rendered = json.loads(json_report.render(data))
    query = traceview_cli("query", VLLM_H100, "SELECT step_id, phase, gpu_time_ns, kernels FROM steps ORDER BY step_id",
                          "--format", "json")
    assert [{k: s[k] for k in ("step_id", "phase", "gpu_time_ns", "kernels")} for s in rendered["steps"]] \
        == json.loads(query.stdout)


def test_markdown_keeps_trace_text_inert(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace, data = report_for(write_kineto(llm_serving_spec(), tmp_path / "s.json.gz"))
    data["top_kernels"][0]["name"] = data["top_kernels"][0]["short_name"] = (
        "<script>alert('x')</script> | `tick` [link](http://x)")
    data["verdict"][2] = "Top finding: </script><img src=x onerror=alert(1)>"
    text = markdown.render(data)
    assert "<script>" not in text and "</script>" not in text and "<img" not in text
    assert "&lt;script&gt;alert('x')&lt;/script&gt; \\| 'tick' \\[link\\](http://x)" in text


def test_report_is_deterministic(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_nsys

    path = write_nsys(llm_serving_spec(), tmp_path / "s.sqlite")
    assert json_report.render(report_for(path)[1]) == json_report.render(report_for(path)[1])


def test_copies_are_not_gpu_busy(tmp_path: Path) -> None:
    """A generated nsys export whose copies fill 95% of the span: GPU busy is the kernels' 2%, copies stand apart."""
    from traceview.testing import GpuSpec, Kernel, Memop, TraceSpec, write_nsys

    gpu = GpuSpec(name="NVIDIA H100 80GB HBM3", sm_count=132, memory_bytes=80 * 2**30, compute_major=9, compute_minor=0)
    copies = [Memop("memcpy", start_ns=1_000_000 + i * 10_000_000, dur_ns=9_500_000, bytes=240_000_000) for i in range(10)]
    copies.append(Memop("memcpy", start_ns=101_000_000, dur_ns=500_000, bytes=8_000_000, copy_kind="DtoH",
                        src_kind="Device", dst_kind="Pinned"))
    kernels = [Kernel("void add_kernel<float>(float*, float const*, int)", start_ns=1_000_000 + i * 10_000_000 + 9_600_000,
                      dur_ns=200_000) for i in range(10)]
    memset = Memop("memset", start_ns=101_600_000, dur_ns=100_000, bytes=1_000_000, copy_kind="", src_kind="",
                   dst_kind="Device")
    path = write_nsys(TraceSpec(gpus=[gpu], kernels=kernels, memops=copies + [memset]), tmp_path / "copies.sqlite")
    _, data = report_for(path)
    summary = data["summary"]
    span = 101_700_000 - 1_000_000
    assert summary["gpu_span_ns"] == span
    assert summary["kernel_busy_ns"] == 10 * 200_000
    assert summary["kernel_busy_pct"] == pytest.approx(100 * 2_000_000 / span)
    copy = summary["copies"]
    assert (copy["count"], copy["busy_ns"], copy["bytes"]) == (11, 10 * 9_500_000 + 500_000, 2_408_000_000)
    assert copy["busy_pct"] == pytest.approx(100 * 95_500_000 / span)
    assert copy["gbps"] == pytest.approx(2_408_000_000 / 95_500_000)  # bytes per ns = GB/s
    # the KPI per GPU and direction, each against its GPU's span and the H100's PCIe 5.0 x16 (8192e9/130 B/s)
    link = 8192e9 / 130
    htod, dtoh = copy["by_direction"]
    assert htod == {"rank": 0, "device_id": 0, "direction": "HtoD", "copies": 10, "bytes": 2_400_000_000,
                    "busy_ns": 95_000_000, "busy_pct": pytest.approx(100 * 95_000_000 / span),
                    "gbps": pytest.approx(2.4e9 / 95e6), "pct_of_link": pytest.approx(100 * 2.4e9 / 0.095 / link),
                    "link": "PCIe 5.0 x16", "pinned_pct": 100.0, "gpu": "GPU 0", "pinned": "100% pinned"}
    assert (dtoh["direction"], dtoh["bytes"], dtoh["busy_ns"], dtoh["gbps"]) == ("DtoH", 8_000_000, 500_000, 16.0)
    assert copy["worst"] == htod
    assert (summary["memsets"]["count"], summary["memsets"]["bytes"], summary["memsets"]["gbps"]) == (1, 1_000_000, 10.0)
    assert summary["communication"] == []
    # the generated launches each come just before their op, so the host chain binds the critical path
    assert data["verdict"][0] == (f"Steps of no known phase take 100% of the step time (1 step, 101 ms); "
                                  f"its critical path is host-bound: 100% host; "
                                  f"GPU busy {100 * 2_000_000 / span:.1f}% of its active span with kernels "
                                  f"(GPU 0's HtoD copies fill {100 * 95_000_000 / span:.1f}% of its span: 2.4 GB at "
                                  f"25.3 GB/s, 40% of PCIe 5.0 x16, 100% pinned).")
    jsonschema.validate(json.loads(json_report.render(data)), SCHEMA)
    text = markdown.render(data)
    assert "| kernels | 10 | 2 ms | 2.0% | | |" in text
    assert "| copies, GPU 0 HtoD (40.1% of PCIe 5.0 x16, 100% pinned) | 10 | 95 ms | 94.3% | 2.4 GB | 25.3 |" in text
    assert "| copies, GPU 0 DtoH (25.4% of PCIe 5.0 x16, 100% pinned) | 1 | 500 µs | 0.5% | 8 MB | 16.0 |" in text
    assert "| memsets | 1 | 100 µs | 0.1% | 1 MB | 10.0 |" in text
    page = html.render(data)
    assert "GPU busy (kernels) of its active span" in page
    assert "GPU 0 HtoD copies of its span: 95 ms, 2.4 GB at 25.3 GB/s (40% of PCIe 5.0 x16), 100% pinned" in page


def test_copy_kpi_is_per_gpu_and_direction(tmp_path: Path) -> None:
    """Two GPUs (fixtures_copies.copy_bound_two_gpus): the KPI lists GPU 0's HtoD, GPU 1's DtoH and DtoD apart and
    heads with GPU 0's HtoD (940 of its 969 ms), never an average of HtoD with DtoD nor a sum over the GPUs."""
    import fixtures_copies as fc
    from traceview.testing import write_nsys

    _, data = report_for(write_nsys(fc.copy_bound_two_gpus(), tmp_path / "two.sqlite"))
    rows = [(d["gpu"], d["direction"], d["copies"], d["bytes"], d["busy_ns"], d["pinned_pct"])
            for d in data["summary"]["copies"]["by_direction"]]
    assert rows == [("GPU 0", "HtoD", 10, 23_500_000_000, 940_000_000, 100.0),
                    ("GPU 1", "DtoH", 10, 1_000_000_000, 50_000_000, 0.0),
                    ("GPU 1", "DtoD", 10, 10_000_000_000, 10_000_000, None)]
    gpu1_span = 9 * fc.STEP_NS + fc.GPU1_COPY_NS + 2 * fc.GPU1_KERNEL_NS
    by = {(d["gpu"], d["direction"]): d for d in data["summary"]["copies"]["by_direction"]}
    assert by["GPU 0", "HtoD"]["busy_pct"] == pytest.approx(100 * 940 / 969)
    assert by["GPU 0", "HtoD"]["gbps"] == pytest.approx(25.0)
    assert by["GPU 0", "HtoD"]["pct_of_link"] == pytest.approx(100 * 25e9 / (8192e9 / 130))
    assert by["GPU 1", "DtoH"]["busy_pct"] == pytest.approx(100 * 50_000_000 / gpu1_span)
    assert (by["GPU 1", "DtoH"]["gbps"], by["GPU 1", "DtoH"]["pinned"]) == (pytest.approx(20.0), "none pinned")
    assert by["GPU 1", "DtoD"]["gbps"] == pytest.approx(1000.0) and by["GPU 1", "DtoD"]["pinned"] is None
    assert by["GPU 1", "DtoD"]["pct_of_link"] == pytest.approx(100 * 1e12 / (3.35e12 / 2))  # half the H100's HBM
    assert data["summary"]["copies"]["worst"]["direction"] == "HtoD"
    assert "(GPU 0's HtoD copies fill 97.0% of its span: 23.5 GB at 25 GB/s, 40% of PCIe 5.0 x16, 100% pinned)" \
        in data["verdict"][0]


@requires_shared
def test_kernel_busy_and_communication_overlap_on_vllm_h100() -> None:
    """Kernel-only busy time and comm overlap, recomputed here in Python from the kernels' intervals."""
    trace, data = reported(VLLM_H100)
    rows = trace.con.execute("SELECT start_ns, end_ns, category = 'communication' FROM kernels").fetchall()
    kernel_busy = union_ns([(lo, hi) for lo, hi, _ in rows])
    comm = union_ns([(lo, hi) for lo, hi, c in rows if c])
    compute = union_ns([(lo, hi) for lo, hi, c in rows if not c])
    both = comm + compute - kernel_busy  # |A ∩ B| = |A| + |B| - |A ∪ B|
    summary = data["summary"]
    assert summary["kernel_busy_ns"] == kernel_busy == 233_116_597
    assert summary["kernel_busy_pct"] == pytest.approx(100 * kernel_busy / summary["gpu_span_ns"])
    assert summary["communication"] == [{"rank": 0, "device_id": 0, "kernels": sum(c for *_, c in rows),
                                         "comm_ns": comm, "overlapped_ns": both, "exposed_ns": comm - both}]
    assert comm == 24_177_491 and both == 128  # TP all-reduces run alone: TV401 reports them 0% overlapped
    assert summary["copies"]["count"] + summary["memsets"]["count"] == summary["memops"] == 310


@requires_shared
def test_phases_without_costs_say_na_and_why() -> None:
    """vLLM's trace has no input shapes: no phase gets a % of roof, and every renderer says why."""
    _, data = reported(VLLM_H100)
    for phase in data["phases"]:
        assert (phase["pct_of_roof"], phase["achieved_tflops"], phase["achieved_tbps"]) == (None, None, None)
        assert phase["roofline_gap"].startswith("no shapes recorded")
    assert data["verdict"][1].startswith("Decode is memory-bound (phase rule), prefill is compute-bound (phase rule); "
                                         "no % of roof for decode and prefill: no shapes recorded")
    assert "n/a" not in " ".join(data["verdict"])
    text = markdown.render(data)
    assert "| decode | 9 |" in text and "| memory (phase rule) | n/a | n/a | n/a |" in text
    assert "No roofline figure for prefill and decode: no shapes recorded" in text
    assert "no shapes recorded" in html.render(data)
    info = traceview_cli("info", VLLM_H100)
    assert "decode: 9 steps, kernels busy 149.423 ms" in info.stdout and "% of roof n/a (no shapes recorded" in info.stdout
    assert "100% of roof" not in info.stdout and "0% of roof" not in info.stdout


def test_cross_rank_phase_figures_are_ratios_of_sums(tmp_path: Path) -> None:
    """Two ranks of different size: a phase's rates and % of roof are Σ/Σ of the kernels' own costs, not a mean."""
    import dataclasses

    from traceview.testing import llm_serving_spec, write_kineto

    for rank, seed, batches in ((0, 0, (4, 4)), (1, 3, (8,))):
        spec = dataclasses.replace(llm_serving_spec(seed=seed, prefill_batches=batches), rank=rank, world_size=2)
        write_kineto(spec, tmp_path / f"rank{rank}.json.gz")
    trace, data = report_for(tmp_path)
    assert trace.scalar("SELECT count(DISTINCT rank) FROM phase_summary") == 2
    kernels = trace.con.execute("""
        SELECT k.phase, sum(k.flops), sum(k.bytes), sum(k.dur_ns) FILTER (WHERE k.flops IS NOT NULL OR k.bytes IS NOT NULL),
               sum(k.dur_ns)
        FROM kernels k JOIN phase_summary p USING (rank, phase) GROUP BY k.phase""").fetchall()
    phases = {p["phase"]: p for p in data["phases"]}
    checked = False
    for phase, flops, nbytes, costed, total in kernels:
        got = phases[phase]
        assert got["costed_time_ns"] == costed and got["coverage_pct"] == pytest.approx(100 * costed / total)
        if got["achieved_tbps"] is not None:
            assert got["achieved_tbps"] == pytest.approx(nbytes / costed / 1e3)
        if got["pct_of_roof"] is not None and got["bound_source"] == "measured":
            floor = trace.scalar(f"SELECT sum(roofline_floor_ns) FROM roofline_by_phase WHERE phase = '{phase}'")
            assert got["pct_of_roof"] == pytest.approx(100 * floor / costed, rel=1e-9)
            checked = True
        else:
            assert got["roofline_gap"]
    assert checked


def test_a_wall_decided_from_tokens_shows_the_costed_kernels_disagreeing_as_evidence() -> None:
    """The sample's decode has costs on 21% of its kernel time. Made compute-bound there (compute floor above
    memory floor), those kernels are too few to decide the phase: every output keeps the tokens-per-step wall,
    `roofline_by_phase.bound` stays NULL rather than saying otherwise, and the verdict names both."""
    from traceview.analysis import sql_module
    from traceview.report.data import _wall_line, phase_rows

    trace = traceview.load(SAMPLE).analyze()
    con = trace.con
    con.execute("""UPDATE _roofline_groups SET compute_floor_ns = memory_floor_ns * 2,
                       costed_bound = 'compute' WHERE grain = 'phase' AND phase = 'decode'""")
    sql_module.load("phase_summary").run(con)
    sql_module.load("totals").run(con)
    (decode,) = [p for p in phase_rows(con) if p["phase"] == "decode"]
    assert trace.scalar("SELECT bound FROM roofline_by_phase WHERE phase = 'decode'") is None
    assert (decode["bound"], decode["bound_source"], decode["costed_bound"]) == ("memory", "tokens_per_step", "compute")
    assert ("decode is memory-bound (tokens per step; the 21% of kernel time with costs runs compute-bound)"
            in _wall_line(phase_rows(con)).lower())


def test_a_phase_pooled_over_ranks_takes_its_wall_from_the_summed_floors() -> None:
    """Rank 0's prefill is compute-bound (10 ms vs 1 ms), rank 1's memory-bound (1 ms vs 30 ms): pooled, the
    memory floor is the larger (31 vs 11 ms), whichever rank a query happens to read first."""
    from traceview.analysis import sql_module
    from traceview.report.data import phase_rows

    trace = traceview.load(SAMPLE).analyze()
    con = trace.con
    con.execute("DROP VIEW roofline_by_phase")
    con.execute("""CREATE TABLE roofline_by_phase AS SELECT *, NULL::DOUBLE AS achieved_tflops,
                       NULL::DOUBLE AS roofline_floor_ns, NULL::DOUBLE AS pct_of_roof FROM (VALUES
        (0, 'prefill', 20e6, 20e6, 10e6, 1e6, 1e15, 1e12), (1, 'prefill', 40e6, 40e6, 1e6, 30e6, 1e14, 1e13))
        t(rank, phase, time_ns, costed_time_ns, compute_floor_ns, memory_floor_ns, flops, bytes)""")
    con.execute("DELETE FROM phase_summary")
    con.execute("""INSERT INTO phase_summary (rank, phase, steps, wall_ns, gpu_busy_ns, kernel_time_ns, costed_time_ns,
                       bound, bound_source, pct_of_roof, roofline_floor_ns, roof_basis_ns)
                   VALUES (0, 'prefill', 1, 30e6, 25e6, 20e6, 20e6, 'compute', 'measured', 50.0, 10e6, 20e6),
                          (1, 'prefill', 1, 50e6, 45e6, 40e6, 40e6, 'memory', 'measured', 75.0, 30e6, 40e6)""")
    sql_module.load("totals").run(con)  # the pooled figures are the analysis' (phase_totals), made again here
    (prefill,) = [p for p in phase_rows(con) if p["phase"] == "prefill"]
    assert (prefill["bound"], prefill["bound_source"]) == ("memory", "measured")
    assert prefill["pct_of_roof"] == pytest.approx(100 * 40e6 / 60e6)  # Σ floors / Σ costed time, not mean(50, 75)


@requires_shared
def test_a_rank_directory_reports_each_ranks_own_span_and_steps() -> None:
    """The 8 DLRM ranks ran side by side: each rank's span is its own first to last event in its file's JSON (the
    profiler's own 'Trace' envelope aside), its steps are its ProfilerStep annotations, each file is listed once with
    its rank, and a phase's time is per rank (the slowest and the mean), not 8 ranks' wall times added up."""
    _, data = reported(DLRM_DIR)
    truth = {}
    for path in sorted(DLRM_DIR.glob("*.json")):
        document = json.loads(path.read_text())
        events = [e for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
        start, end = min(e["ts"] for e in events) * 1000, max(e["ts"] + e.get("dur", 0) for e in events) * 1000
        steps = [e["dur"] * 1000 for e in events if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        truth[document["distributedInfo"]["rank"]] = {"file": str(path.resolve()), "start_ns": start, "end_ns": end,
                                                      "span_ns": end - start, "steps": len(steps), "step_ns": sum(steps)}
    assert {r["rank"]: {k: v for k, v in r.items() if k != "rank"} for r in data["trace"]["rank_spans"]} == truth
    assert data["trace"]["files"] == [truth[rank]["file"] for rank in range(8)]
    assert data["trace"]["file_ranks"] == [{"file": truth[rank]["file"], "ranks": [rank]} for rank in range(8)]
    (train,) = data["phases"]
    walls = {rank: t["step_ns"] for rank, t in truth.items()}
    slowest = max(walls, key=walls.get)
    assert (train["ranks"], train["rank_steps_min"], train["rank_steps_max"]) == (8, 1, 1)
    assert (train["rank_time_max_ns"], train["slowest_rank"]) == (walls[slowest], slowest)
    assert train["rank_time_mean_ns"] == pytest.approx(sum(walls.values()) / 8, abs=1e-6)
    assert train["time_ns"] == sum(walls.values())  # the Σ stays, for ratios of sums
    assert f"(1 step on each of 8 ranks, {duration(walls[slowest])} on rank {slowest}, the slowest" in data["verdict"][0]
    text = markdown.render(data)
    assert "**Ranks** " + " · ".join(f"rank {rank}: 1 step over {duration(t['span_ns'])}" for rank, t in truth.items()) in text
    assert f"{cell(Path(truth[0]['file']).name, 120)} (rank 0)" in text
    mean = duration(sum(walls.values()) / 8)
    assert f"| train | 8 (1 per rank) | {duration(walls[slowest])} (rank {slowest}), mean {mean} |" in text


def test_one_export_of_two_ranks_names_its_file_once(tmp_path: Path) -> None:
    """One nsys export holds both DDP processes: its file is listed once, as ranks 0 and 1, and each rank's span
    is its own process's first to last call or kernel (the launcher's one call is rank 0's)."""
    import fixtures_ranks as ddp

    from traceview.testing import write_nsys

    spec = ddp.ddp_straggler()
    path = write_nsys(spec, tmp_path / "ddp.sqlite")
    _, data = report_for(path)
    assert data["trace"]["files"] == [str(path)]
    assert data["trace"]["file_ranks"] == [{"file": str(path), "ranks": [0, 1]}]
    spans = {}
    for (pid, gpu), rank in zip(ddp.PROCESSES, (0, 1)):
        times = [t for k in spec.kernels if k.pid == pid for t in (k.start_ns, k.end_ns, k.launch_start_ns)]
        times += [t for c in spec.api_calls if rank == 0 for t in (c.start_ns, c.start_ns + c.dur_ns)]
        spans[rank] = max(times) - min(times)
    assert {r["rank"]: r["span_ns"] for r in data["trace"]["rank_spans"]} == spans
    assert [r["steps"] for r in data["trace"]["rank_spans"]] == [ddp.STEPS, ddp.STEPS]
    text = markdown.render(data)
    assert text.count("ddp.sqlite") == 1 and "ddp.sqlite (ranks 0, 1)" in text
    page = html.render(data)
    assert page.count('<code title="' + str(path) + '">ddp.sqlite</code>') == 1
    assert f"<b>rank 1</b> {ddp.STEPS} steps over {duration(spans[1])}" in page
