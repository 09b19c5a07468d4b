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
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules

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
    data["top_kernels"][0]["short_name"] = "<script>alert('x')</script> | `tick` [link](http://x)"
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
    kinds = {k["copy_kind"]: k for k in copy["by_kind"]}
    assert kinds["HtoD"]["gbps"] == pytest.approx(240 / 9.5) and kinds["DtoH"]["bytes"] == 8_000_000
    assert (summary["memsets"]["count"], summary["memsets"]["bytes"], summary["memsets"]["gbps"]) == (1, 1_000_000, 10.0)
    assert summary["communication"] == []
    assert data["verdict"][0] == (f"Steps of no known phase take 100% of the step time (1 step, 101 ms); "
                                  f"GPU busy {100 * 2_000_000 / span:.1f}% of its active span with kernels "
                                  f"(copies fill {100 * 95_500_000 / span:.1f}%: 2.41 GB at 25.2 GB/s).")
    jsonschema.validate(json.loads(json_report.render(data)), SCHEMA)
    text = markdown.render(data)
    assert "| kernels | 10 | 2 ms | 2.0% | | |" in text and "| copies | 11 | 95.5 ms | 94.8% | 2.41 GB | 25.2 |" in text
    assert "| ↳ HtoD | 10 | 95 ms | | 2.4 GB | 25.3 |" in text and "| memsets | 1 | 100 µs | 0.1% | 1 MB | 10.0 |" in text
    page = html.render(data)
    assert "GPU busy (kernels) of its active span" in page and "2.41 GB at 25.2 GB/s" in page


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
