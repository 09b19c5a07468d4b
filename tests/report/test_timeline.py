"""The step timeline: the steps it draws, the bars of a step against the schema, merging past the cap, the
--focus-step flag, and the charts drawing in a real browser."""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

import traceview
from commands import traceview_cli
from conftest import DLRM_DIR, SHARED_TRACES, VLLM_H100, analysed, reported, requires_shared
from test_html import assert_charts_render, chart_rows, run_chromium
from traceview import units as fmt
from traceview.errors import TraceviewError
from traceview.model.db import dict_rows
from traceview.report import charts, html, json_report, timeline
from traceview.report.data import build_report
from traceview.report.timeline import FocusStep, build_timeline
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import llm_serving_spec, serving_steps, write_kineto, write_nsys

SCHEMA = json.loads(resources.files("traceview.report").joinpath("schema.json").read_text())
BOLONGCHENG_OPT = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_opt_A100.sqlite"
SLOW_PREFILL, SLOW_DECODE = 13, 20  # the generated trace's steps made slower than the rest of their phase
SCALES = tuple(1.6 if i == SLOW_PREFILL else 2.5 if i == SLOW_DECODE else 1.0 for i in range(len(serving_steps())))


def report_data(path: Path, focus: FocusStep | None = None) -> tuple[traceview.Trace, dict]:
    trace = traceview.load(path).analyze()
    return trace, report_of(trace, focus)


def report_of(trace: traceview.Trace, focus: FocusStep | None = None) -> dict:
    return build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__, focus_step=focus)


@pytest.fixture(scope="module", params=["kineto", "nsys"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[traceview.Trace, dict]:
    """A generated serving trace with one prefill and one decode step slowed down, in both input formats."""
    spec = llm_serving_spec(step_scales=SCALES)
    folder = tmp_path_factory.mktemp(request.param)
    write = write_kineto if request.param == "kineto" else write_nsys
    path = write(spec, folder / ("serve.json.gz" if request.param == "kineto" else "serve.sqlite"))
    return report_data(path, FocusStep(None, 3))


def rows(trace: traceview.Trace, sql: str, *params: object) -> list[tuple]:
    return trace.con.execute(sql, list(params)).fetchall()


def drawn(data: dict, step_id: int, rank: int = 0) -> dict:
    return next(s for s in data["timeline"]["steps"] if (s["rank"], s["step_id"]) == (rank, step_id))


def lane_of(step: dict) -> dict[int, dict]:
    return {lane["lane"]: lane for lane in step["lanes"]}


# -- which steps ----------------------------------------------------------------------------------


def test_the_slowest_step_of_each_phase_and_the_focus_step_are_drawn(served) -> None:
    trace, data = served
    assert [serving_steps()[i][0] for i in (SLOW_PREFILL, SLOW_DECODE)] == ["prefill", "decode"]
    steps = data["timeline"]["steps"]
    assert [(s["step_id"], s["phase"], s["focus"]) for s in steps] == [
        (3, "decode", True), (SLOW_PREFILL, "prefill", False), (SLOW_DECODE, "decode", False)]
    owned = {(phase, step): ns for step, phase, ns in rows(trace, """
        SELECT s.step_id, s.phase, b.wall_ns FROM steps s JOIN step_budget b USING (rank, step_id)""")}
    slowest_by_phase = {phase: max((ns, step) for (p, step), ns in owned.items() if p == phase)[1]
                        for phase in ("prefill", "decode")}
    assert slowest_by_phase == {"prefill": SLOW_PREFILL, "decode": SLOW_DECODE}  # the spec's slowed steps
    slowest = drawn(data, SLOW_DECODE)
    assert slowest["owned_ns"] == owned[("decode", SLOW_DECODE)]
    ms = f"{slowest['owned_ns'] / 1e6:.3g} ms"
    assert slowest["why"] == f"slowest decode step: step {SLOW_DECODE} on rank 0, {ms}"
    assert drawn(data, 3)["why"].startswith("focus step (--focus-step 3): step 3 on rank 0, ")


def test_a_step_that_is_both_slowest_and_focus_is_drawn_once(served) -> None:
    trace, _ = served
    steps = build_timeline(trace.con, FocusStep(0, SLOW_DECODE))["steps"]
    assert [s["step_id"] for s in steps] == [SLOW_PREFILL, SLOW_DECODE]
    assert steps[1]["why"].startswith(f"slowest decode step and focus step (--focus-step 0:{SLOW_DECODE}): ")
    assert steps[1]["focus"] and not steps[0]["focus"]


# -- what a step holds ----------------------------------------------------------------------------


def test_kernel_bars_are_the_steps_kernels_lane_by_lane(served) -> None:
    trace, data = served
    for step in data["timeline"]["steps"]:
        assert step["resolution_ns"] is None and step["note"] is None  # small steps are drawn as they are
        lanes = lane_of(step)
        expected = defaultdict(list)
        for device, stream, start, dur, name in rows(trace, """
                SELECT device_id, stream_id, start_ns, dur_ns, name FROM kernels WHERE rank = 0 AND step_id = ?""",
                                                     step["step_id"]):
            expected[("gpu", device, stream)].append((start - step["start_ns"], dur, name))
        got = defaultdict(list)
        for bar in step["kernels"]:
            lane = lanes[bar["lane"]]
            assert bar["count"] == 1 and bar["span_ns"] == bar["dur_ns"]
            got[(lane["kind"], lane["device_id"], lane["stream_id"])].append(
                (bar["offset_ns"], bar["dur_ns"], step["names"][bar["name"]]))
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expected.items()}
        assert step["held"]["kernels"] == sum(len(v) for v in expected.values())
        assert step["held"]["kernel_ns"] == sum(d for v in expected.values() for _, d, _ in v)


def test_memops_and_idle_gaps_inside_the_step_are_drawn(served) -> None:
    trace, data = served
    step = drawn(data, SLOW_DECODE)
    lanes = lane_of(step)
    memops = rows(trace, "SELECT start_ns, dur_ns, kind FROM memops WHERE rank = 0 AND step_id = ?", SLOW_DECODE)
    assert len(memops) == 3  # input ids and positions in, sampled tokens out
    assert sorted((m["offset_ns"], m["dur_ns"], m["kind"]) for m in step["memops"]) == sorted(
        (start - step["start_ns"], dur, kind) for start, dur, kind in memops)
    lo, hi = step["gpu_start_ns"], step["gpu_end_ns"]
    gaps = [(max(start, lo) - step["start_ns"], min(end, hi) - max(start, lo), kind) for start, end, kind in rows(
        trace, "SELECT start_ns, end_ns, idle_kind FROM gpu_idle_gaps WHERE rank = 0") if end > lo and start < hi]
    assert len(gaps) > 50 and {kind for _, _, kind in gaps} >= {"host_wait", "bubble"}
    assert sorted((g["offset_ns"], g["dur_ns"], g["idle_kind"]) for g in step["gaps"]) == sorted(gaps)
    assert {lanes[g["lane"]]["label"] for g in step["gaps"]} == {"GPU 0 idle"}
    assert step["held"]["gap_ns"] == sum(dur for _, dur, _ in gaps)


def test_the_host_lane_holds_the_launch_calls(served) -> None:
    trace, data = served
    for step in data["timeline"]["steps"]:
        lanes = lane_of(step)
        launches = rows(trace, """
            SELECT a.tid, a.start_ns, a.dur_ns, a.name FROM api_calls a
            WHERE a.rank = 0 AND a.call_id IN (SELECT launch_call_id FROM kernels WHERE rank = 0 AND step_id = ?)""",
                        step["step_id"])
        got = [(lanes[c["lane"]]["tid"], c["offset_ns"] + step["start_ns"], c["dur_ns"], step["names"][c["name"]])
               for c in step["calls"] if c["kind"] == "launch"]
        assert sorted(got) == sorted(launches)
        assert all(lanes[c["lane"]]["kind"] == "host" for c in step["calls"])
        if step["phase"] == "decode":  # one graph replay and the eager sampling kernels after it
            assert sum(name == "cudaGraphLaunch" for *_, name in got) == 1
    lanes = [lane["label"] for lane in drawn(data, SLOW_DECODE)["lanes"]]
    assert lanes[0].startswith("host thread ") and lanes[1:] == ["GPU 0 idle", "GPU 0 stream 7"]


def test_kernel_bars_carry_their_roofline_figures(served) -> None:
    trace, data = served
    step = drawn(data, SLOW_PREFILL)
    figures = {start - step["start_ns"]: (tflops, tbps, pct) for start, tflops, tbps, pct in rows(trace, """
        SELECT k.start_ns, r.achieved_tflops, r.achieved_tbps, r.pct_of_roof FROM roofline_kernels r
        JOIN kernels k USING (rank, kernel_id) WHERE r.rank = 0 AND r.step_id = ?""", SLOW_PREFILL)}
    kineto = trace.scalar("SELECT source_format FROM trace_info") == "kineto"
    assert len(figures) == (63 if kineto else 0)  # the Kineto writer records the prefill's shapes, nsys none
    for bar in step["kernels"]:
        want = figures.get(bar["offset_ns"], (None, None, None))
        got = (bar["achieved_tflops"], bar["achieved_tbps"], bar["pct_of_roof"])
        assert [g is None for g in got] == [w is None for w in want]
        assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None], rel=1e-9)
    chart = charts.step_lanes(step, charts.category_colors(data))
    spec = charts.vega_lite(chart)  # the page's spec: datasets attached after altair's walk, same dict
    assert spec == chart.to_dict()
    costed = spec["datasets"].get("costed", [])
    assert len(costed) == sum(1 for f in figures.values() if f[2] is not None)
    assert all(r["r"].endswith("of roof") for r in costed)
    if kineto:
        gemm = next(r for r in costed if r["w"] == "gemm")
        tflops = figures[gemm["o"]][0]
        assert gemm["r"].startswith(f"{tflops:.3g} TFLOP/s" if tflops < 100 else f"{tflops:,.0f} TFLOP/s")


def test_report_json_carries_the_timeline_and_stays_schema_valid(served) -> None:
    _, data = served
    document = json.loads(json_report.render(data))
    jsonschema.validate(document, SCHEMA)
    assert document["timeline"]["steps"] == data["timeline"]["steps"]
    assert document["timeline"]["max_marks"] == timeline.MAX_MARKS


# -- past the cap ---------------------------------------------------------------------------------


def test_past_the_cap_marks_merge_and_the_chart_says_so(served, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, data = served
    monkeypatch.setattr(timeline, "MAX_MARKS", 150)
    step = build_timeline(trace.con)["steps"][0]
    assert step["step_id"] == SLOW_PREFILL
    held, resolution = step["held"], step["resolution_ns"]
    bars = sum(len(step[kind]) for kind in ("kernels", "memops", "calls", "gaps"))
    assert held["kernels"] + held["memops"] + held["calls"] + held["gaps"] > 150 >= bars
    assert resolution in {r for r, _ in timeline.levels(step["wall_ns"])} - {0}
    for kind in ("kernels", "memops", "calls", "gaps"):  # nothing is dropped: counts and time add up
        assert sum(bar["count"] for bar in step[kind]) == held[kind]
    assert sum(bar["dur_ns"] for bar in step["kernels"]) == held["kernel_ns"]
    assert sum(bar["dur_ns"] for bar in step["gaps"]) == held["gap_ns"]
    kernels = rows(trace, "SELECT start_ns, end_ns, category FROM kernels WHERE rank = 0 AND step_id = ?", SLOW_PREFILL)
    for start, end, category in kernels:  # every kernel lies inside a bar of its category (or a mixed bar) ...
        offset = start - step["start_ns"]
        assert any(b["offset_ns"] <= offset and end - step["start_ns"] <= b["offset_ns"] + b["span_ns"]
                   and (b["category"] == category or b["categories"] > 1) for b in step["kernels"])
        if end - start >= resolution:  # ... and one longer than the resolution is drawn as it is
            assert {"offset_ns": offset, "dur_ns": end - start, "count": 1} in [
                {k: b[k] for k in ("offset_ns", "dur_ns", "count")} for b in step["kernels"]]
    assert step["merged_across_categories"] and any(b["categories"] > 1 for b in step["kernels"])
    assert step["note"].startswith("More than 150 marks, so adjacent marks of one lane and kind shorter and closer "
                                   "than ")
    assert f"{held['kernels']} kernels into {len(step['kernels'])} bars" in step["note"]
    spec = charts.step_lanes(step, charts.category_colors(data)).to_dict()
    assert spec["title"]["text"].startswith("More than 150 marks") and spec["title"]["subtitle"][0] == (
        f"{held['kernels']} kernels into {len(step['kernels'])} bars")
    assert sum(r["c"] for r in chart_rows(spec) if "t" in r) == held["kernels"] == len(kernels)


# -- the page -------------------------------------------------------------------------------------


def test_each_drawn_step_has_an_anchor_heading_and_chart(served) -> None:
    _, data = served
    page = html.render(data)
    section = page[page.index('<section id="stream-timeline">'):]
    section = section[:section.index("</section>")]
    for step in data["timeline"]["steps"]:
        anchor = f'id="timeline-step-{step["rank"]}-{step["step_id"]}"'
        assert anchor in section
        block = section[section.index(anchor):]
        heading = re.search(r"<h3>(.*?)</h3>", block).group(1)
        assert heading == step["why"][0].upper() + step["why"][1:]
        assert f'data-chart-spec="timeline_{step["rank"]}_{step["step_id"]}"' in block
    spec = json.loads(re.search(rf'data-chart-spec="timeline_0_{SLOW_DECODE}">(.*?)</script>', page, re.S).group(1))
    values = chart_rows(spec)
    step = drawn(data, SLOW_DECODE)
    assert sum(1 for r in values if "c" in r) == sum(len(step[k]) for k in ("kernels", "memops", "calls", "gaps"))
    colors = dict(zip(*(spec["layer"][-1]["encoding"]["color"]["scale"][k] for k in ("domain", "range"))))
    assert colors["gemm"] == charts.category_colors(data)["gemm"]  # the category chart's colour


def test_trace_strings_in_the_timeline_stay_inert(served) -> None:
    _, data = served
    data = copy.deepcopy(data)
    hostile = '</script><script>alert(1)</script> "quotes" <!-- & '
    for step in data["timeline"]["steps"]:
        step["names"] = [hostile + name for name in step["names"]]
        step["why"] = hostile + step["why"]
    page = html.render(data)
    assert "<script>alert(1)" not in page and page.count("&lt;/script&gt;&lt;script&gt;alert(1)") == len(
        data["timeline"]["steps"])  # each heading shows it as text
    for step in data["timeline"]["steps"]:
        block = re.search(rf'data-chart-spec="{charts.timeline_chart_name(step)}">(.*?)</script>', page, re.S).group(1)
        assert "<" not in block and ">" not in block and "&" not in block
        names = [r["name"] for r in chart_rows(json.loads(block)) if "i" in r]
        assert names and all(name.startswith(hostile) for name in names)


def test_timeline_colours_match_the_category_chart(served) -> None:
    _, data = served
    spec = charts.categories(data).to_dict()
    scale = spec["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"])) == charts.category_colors(data)


# -- the command line -----------------------------------------------------------------------------


def test_focus_step_flag_adds_the_step_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json.gz")
    result = traceview_cli("report", trace, "--format", "json", "-o", tmp_path / "r.json", "--focus-step", "0:7")
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    assert [(s["step_id"], s["focus"]) for s in document["timeline"]["steps"]] == [(0, False), (7, True), (15, False)]
    for bad, message in (("99", "traceview: no step 99 on rank 0 (steps 0–25)"),
                         ("3:1", "traceview: --focus-step 3:1: no rank 3 in the trace (ranks: 0)"),
                         ("step7", "traceview: --focus-step 'step7': expected N (a step of the lowest rank) or RANK:N")):
        result = traceview_cli("report", trace, "--format", "json", "-o", tmp_path / "bad.json", "--focus-step", bad)
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [message], result.stderr
        assert not (tmp_path / "bad.json").exists()


def test_focus_step_parses_n_and_rank_colon_n() -> None:
    assert FocusStep.parse("14") == FocusStep(None, 14) and str(FocusStep.parse("14")) == "14"
    assert FocusStep.parse(" 2:7 ") == FocusStep(2, 7) and str(FocusStep(2, 7)) == "2:7"
    for bad in ("", "-1", "1:", "a:1", "1:2:3"):
        with pytest.raises(TraceviewError):
            FocusStep.parse(bad)


# -- real traces in a real browser -------------------------------------------------------------------


def console_problems(stderr: str) -> list[str]:
    """The page's console lines that report an error or a warning (Chromium logs them as CONSOLE)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line and re.search(r"Uncaught|Error|WARN", line)]


@requires_shared
@pytest.mark.parametrize(("path", "focus"), [(VLLM_H100, FocusStep(None, 10)), (BOLONGCHENG_OPT, None)],
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_timeline_draws_in_headless_chromium(path: Path, focus: FocusStep | None, chromium: str, tmp_path: Path) -> None:
    data = report_of(analysed(path), focus)
    steps = [s for s in data["timeline"]["steps"] if s["lanes"]]
    bars = {charts.timeline_chart_name(s): sum(len(s[k]) for k in ("kernels", "memops", "calls", "gaps")) for s in steps}
    assert steps and max(bars.values()) <= timeline.MAX_MARKS
    page = html.render(data)
    assert len(page.encode()) < 3_000_000
    if focus is not None:  # vLLM's last step ran no GPU work: named, and said so in words
        empty = drawn(data, 10)
        assert empty["phase"] == "empty" and empty["held"]["kernels"] == 0 and empty["lanes"] == []
        assert "The step launched no GPU work" in page and 'id="timeline-step-0-10"' in page
    target = tmp_path / "report.html"
    dom = assert_charts_render(chromium, page, target)
    for step in steps:  # every bar of the step became one SVG rect of the timeline's view
        name = charts.timeline_chart_name(step)
        view = re.search(rf'<div class="chart[^"]*" id="chart-{name}"(.*?)<script type="application/json"', dom, re.S)
        rects = sum(body.count("<path") for body in re.findall(
            r'<g class="mark-rect role-mark \w+_marks"[^>]*>(.*?)</g>', view.group(1), re.S))
        assert rects == bars[name] > 100, name
    result = run_chromium(chromium, target, "--dump-dom")
    assert console_problems(result.stderr) == []


@requires_shared
def test_a_step_past_a_third_of_the_cap_goes_straight_to_merging_and_fits_drawn_as_it_is() -> None:
    """vLLM H100's slowest decode step (1,375 kernels, 3,247 marks) skips the query as it is: the merge's first
    level, resolution 0, draws every mark as its own bar, the same bars that query draws."""
    trace = analysed(VLLM_H100)
    step = next(s for s in timeline._chosen(trace.con, None) if s["phase"] == "decode")
    assert 3 * (step["kernels"] + step["memops"]) > timeline.MAX_MARKS >= step["kernels"] + step["memops"]
    drawn_step = timeline._step(trace.con, step)
    as_is = dict_rows(trace.con, timeline._as_is_sql,
                      {"rank": step["rank"], "step_id": step["step_id"], "step_start": step["start_ns"]})[0]
    assert drawn_step["resolution_ns"] is None and drawn_step["note"] is None
    assert sum(as_is["held"][kind] for kind in ("kernels", "memops", "calls", "gaps")) == 3_247
    for kind in ("kernels", "memops", "calls", "gaps"):
        assert drawn_step[kind] == (as_is[kind] or [])
    assert drawn_step["names"] == as_is["names"] and drawn_step["held"] == as_is["held"]


@requires_shared
def test_each_mark_sees_the_latest_end_before_it_on_its_own_lane_only() -> None:
    """The merge's one sorted, streamed pass packs each lane's running max of ends with the lane; on a real
    training step (11 k marks on host, idle and stream lanes) it equals a window partitioned by lane, and the
    order it numbers is the lane's start order."""
    trace = analysed(BOLONGCHENG_OPT)
    step = next(s for s in timeline._chosen(trace.con, None) if s["kernels"] + s["memops"] > 0)
    streamed = f"WITH {timeline._marks_sql}, {timeline._ordered_sql} SELECT lane, kind, seq, pos, prev_end_ns FROM ordered"
    partitioned = f"""
        WITH {timeline._marks_sql}
        SELECT lane, kind, seq,
               max(end_ns) OVER (PARTITION BY lane ORDER BY start_ns, seq
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns,
               row_number() OVER (PARTITION BY lane ORDER BY start_ns, seq) AS lane_pos
        FROM laned"""
    params = {"rank": step["rank"], "step_id": step["step_id"]}
    compared = trace.con.execute(f"""
        SELECT count(*), count(DISTINCT s.lane), count(*) FILTER (WHERE s.prev_end_ns IS NULL),
               count(*) FILTER (WHERE s.prev_end_ns IS DISTINCT FROM p.prev_end_ns),
               count(*) FILTER (WHERE s.lane_rank IS DISTINCT FROM p.lane_pos)
        FROM (SELECT *, row_number() OVER (PARTITION BY lane ORDER BY pos) AS lane_rank FROM ({streamed})) s
        JOIN ({partitioned}) p USING (lane, kind, seq)""", params).fetchone()
    marks, lanes, firsts, wrong_ends, wrong_order = compared
    assert marks > timeline.MAX_MARKS and lanes >= 3
    assert firsts == lanes  # only each lane's first mark has nothing before it
    assert (wrong_ends, wrong_order) == (0, 0)


@requires_shared
def test_lanes_and_steps_zoom_and_pan_on_the_time_axis_of_one_steps_wall_time() -> None:
    """The drawn steps of the 8-rank DLRM job: each chart's time axis spans that step's own wall time on its
    rank (never the ranks' spans added up), and dragging or the wheel pans and zooms it (x only)."""
    _, data = reported(DLRM_DIR)
    steps = data["timeline"]["steps"]
    assert len({s["rank"] for s in data["steps"]}) == 8 and steps
    for step in steps:
        spec = charts.vega_lite(charts.step_lanes(step, charts.category_colors(data)))
        _, scale = fmt.time_unit(step["wall_ns"])
        assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == [0, round(step["wall_ns"] / scale, 6)]
        assert step["wall_ns"] == step["end_ns"] - step["start_ns"]
        assert spec["params"] == [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]},
                                   "bind": "scales", "views": ["lanes"]}]
    summed = sum(s["wall_ns"] for s in data["steps"] if s["step_id"] == steps[0]["step_id"])
    assert steps[0]["wall_ns"] < summed  # one rank's step, not the job's ranks stacked end to end
    page_specs = charts.vega_lite(charts.step_timeline(data))
    assert page_specs["params"][0]["bind"] == "scales" and page_specs["params"][0]["select"]["encodings"] == ["x"]
