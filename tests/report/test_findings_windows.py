"""Findings that point and verdicts that read: each finding's window and steps, the links the HTML report
gives them, the three-line verdict, and no message stating a zero on any shared trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import traceview
from conftest import VLLM_H100, corpus, reported, requires_shared
from traceview import workflow
from traceview.report import html, markdown
from traceview.report.finding_windows import finding_windows
from traceview.testing import GpuSpec, Kernel, Range, TraceSpec, write_kineto
from traceview.units import duration

MS, US = 1_000_000, 1_000
H100 = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0, memory_bandwidth_bytes_per_s=3_352_000_000_000)
STEPS, STALL_STEP, STALL_NS = 8, 5, 6 * MS
# a number that is zero, with its unit or what it counts: ' 0.00 ms', '(0 gaps)', '(0)', ' 0 calls', '0 of them'
ZERO_PARTS = re.compile(
    r"(?<![\w.,])0(?:\.0+)? ?(?:ms|µs|us|ns|s|%|B|bytes|KiB|MiB|GiB|GB/s)(?!\w)"
    r"|\(0\)"
    r"|(?<![\w.,])0 (?:gaps?|calls?|kernels?|steps?|copies|launches|memcpys?|memsets?|HtoD|DtoH|init|warm-up|chains?"
    r"|kinds?|ranks?|collectives?)\b"
    r"|(?<!GPU )(?<!rank )(?<![\w.,])0 of\b"
    r"|\bn/a\b")


def stall_spec() -> TraceSpec:
    """Eight ProfilerStep ranges of ten 200 us kernels 20 us apart; in step 5 the sixth kernel is launched
    6 ms late, the only GPU gap over 1 ms. Each range ends 50 us after its last kernel; 10 us between ranges."""
    kernels, ranges = [], []
    t = 1 * MS
    for step in range(STEPS):
        start = t
        for index in range(10):
            t += STALL_NS if (step == STALL_STEP and index == 5) else 20 * US
            kernels.append(Kernel("void gemm_kernel<float>(float*)", t, 200 * US, launch_start_ns=t - 10 * US,
                                  launch_dur_ns=5 * US))
            t += 200 * US
        t += 50 * US
        ranges.append(Range(f"ProfilerStep#{step}", start, t, kind="user_annotation"))
        t += 10 * US
    return TraceSpec(gpus=[H100], kernels=kernels, ranges=ranges)


@pytest.fixture(scope="module")
def stall(tmp_path_factory) -> tuple[traceview.Trace, dict]:
    trace = traceview.load(write_kineto(stall_spec(), tmp_path_factory.mktemp("stall") / "stall.json.gz")).analyze()
    return trace, workflow.report(trace, workflow.CheckOptions.configured(baseline=False))


def by_rule(data: dict, rule: str) -> dict:
    return next(f for f in data["findings"] if f["rule"] == rule)


def test_a_gap_points_at_the_step_it_lies_in(stall) -> None:
    """TV201's one gap lies in ProfilerStep#5: its window is that step, as long as the range the spec wrote."""
    _, data = stall
    ranges = stall_spec().ranges
    finding = by_rule(data, "TV201")
    window = finding["window"]
    assert (window["rank"], window["step_id"]) == (0, STALL_STEP)
    assert window["end_ns"] - window["start_ns"] == ranges[STALL_STEP].end_ns - ranges[STALL_STEP].start_ns
    first = next(s for s in data["steps"] if s["step_id"] == 0)
    assert window["start_ns"] - first["start_ns"] == ranges[STALL_STEP].start_ns - ranges[0].start_ns
    assert finding["steps"] == [STALL_STEP]
    assert [row["step_id"] for row in finding["evidence"]["rows"]] == [STALL_STEP]


def test_the_window_is_the_step_with_the_largest_granted_saving(stall) -> None:
    """TV202 claims two buckets in every step; the window is the step whose claims sum highest."""
    _, data = stall
    finding = by_rule(data, "TV202")
    per_step: dict[int, int] = {}
    for claim in finding["evidence"]["step_savings"]:
        per_step[claim["step_id"]] = per_step.get(claim["step_id"], 0) + claim["ns"]
    best = max(per_step.values())
    assert finding["window"]["step_id"] == min(step for step, ns in per_step.items() if ns == best)
    assert finding["steps"] == sorted(per_step) == list(range(STEPS))


def test_a_finding_with_nothing_to_point_at_has_no_window(stall) -> None:
    """TV305 (a kernel family, no step in its evidence) has no window and no steps."""
    _, data = stall
    finding = by_rule(data, "TV305")
    assert (finding["window"], finding["steps"]) == (None, [])


def test_timed_rows_without_a_step_get_the_step_holding_their_start(stall) -> None:
    """Rows with a start and no step id: each gets the step whose range holds its start; the longest row's
    step is the window; a row before every step points at its own interval."""
    trace, _ = stall
    ranges = stall_spec().ranges
    origin = trace.scalar("SELECT min(start_ns) FROM steps") - ranges[0].start_ns  # spec time 0, in trace time
    inside = [(ranges[2].start_ns + 100 * US, 30 * US), (ranges[6].start_ns + 5 * US, 90 * US)]
    rows = [{"start_ns": origin + start, "dur_ns": dur} for start, dur in inside]
    finding = {"rule": "X", "evidence": {"rank": 0, "rows": rows}}
    early = {"rule": "Y", "evidence": {"rank": 0, "rows": [{"start_ns": origin + 10 * US, "dur_ns": 40 * US}]}}
    named = {"rule": "Z", "evidence": {"rank": 0, "rows": [{"step_id": 3, "wall_ns": 1}, {"step_id": 1}]}}
    pointed, before, first_named = finding_windows(trace.con, [finding, early, named])
    assert [row["step_id"] for row in pointed["evidence"]["rows"]] == [2, 6]
    assert "step_id" not in rows[0]  # the report's copy gets the step, not the rule's own evidence
    assert pointed["window"]["step_id"] == 6 and pointed["steps"] == [2, 6]
    assert pointed["window"]["end_ns"] - pointed["window"]["start_ns"] == ranges[6].end_ns - ranges[6].start_ns
    assert before["window"] == {"rank": 0, "step_id": None, "start_ns": origin + 10 * US, "end_ns": origin + 50 * US}
    assert "step_id" not in before["evidence"]["rows"][0] and before["steps"] == []
    assert first_named["window"]["step_id"] == 3 and first_named["steps"] == [1, 3]


def test_the_html_links_drawn_steps_and_names_the_flag_for_the_others(stall) -> None:
    """TV201's step 5 is the slowest step, which the timeline draws: a link to it. TV202's step 0 is not drawn:
    the page gives the command that draws it."""
    _, data = stall
    assert {(s["rank"], s["step_id"]) for s in data["timeline"]["steps"]} == {(0, STALL_STEP)}
    page = html.render(data)
    assert f'id="timeline-step-0-{STALL_STEP}"' in page
    assert page.count(f'href="#timeline-step-0-{STALL_STEP}"') == 2  # the summary row and the finding
    start = data["trace"]["start_ns"]
    window = by_rule(data, "TV201")["window"]
    assert f"Where: step {STALL_STEP} on rank 0, at +{duration(window['start_ns'] - start)}" in page
    assert "<code>traceview report --focus-step 0:0</code> draws it" in page
    text = markdown.render(data)
    assert f"| TV201 | warning | {duration(STALL_NS)} | step {STALL_STEP}, rank 0 |" in text


def test_without_a_timeline_every_window_names_the_flag(stall) -> None:
    """A report saved before the timeline existed still says where each finding points."""
    _, data = stall
    old = {key: value for key, value in data.items() if key != "timeline"}
    page = html.render({**old, "timeline": {"steps": []}})
    assert "href=\"#timeline-step-" not in page
    assert f"<code>traceview report --focus-step 0:{STALL_STEP}</code> draws it" in page


def test_the_verdict_says_what_is_slow_which_wall_and_what_to_do(stall) -> None:
    """Line 1: the phase with the most step time (all eight ranges, spec time); line 2: why no roof figure;
    line 3: the top finding's rule, saving, problem and the first clause of its fix."""
    trace, data = stall
    ranges = stall_spec().ranges
    busy = 100.0 * STEPS * 10 * 200 * US / (ranges[-1].end_ns - 50 * US - (ranges[0].start_ns + 20 * US))
    total = sum(r.end_ns - r.start_ns for r in ranges)
    slow, wall, fix = data["verdict"]
    # the steps' critical paths, summed: the host stalls between launches outweigh the kernels
    host, compute, path = trace.sql("SELECT sum(host_ns + launch_latency_ns), sum(compute_ns), sum(path_ns) "
                                    "FROM step_critical_path").rows()[0]
    assert host > compute
    assert slow == (f"Steps of no known phase take 100% of the step time ({STEPS} steps, {duration(total)}); "
                    f"its critical path is host-bound: {100 * host / path:.0f}% host, {100 * compute / path:.0f}% "
                    f"compute; GPU busy {busy:.1f}% of its active span with kernels.")
    assert wall == ("No phase could be placed against the roofline: no shapes recorded; profile with "
                    "record_shapes=True (emit_nvtx(record_shapes=True) under nsys).")
    top = data["findings"][0]
    assert top["rule"] == "TV301"
    assert fix == (f"Top finding (TV301, up to {duration(top['estimated_saving_ns'])}, {top['share_pct']:.1f}% of the "
                   "span): FP32 GEMMs on a GPU with tensor cores; fix: allow TF32 for float32 matmuls, or run the model in "
                   "bf16/fp16.")


@requires_shared
def test_vllm_findings_point_at_steps_and_the_verdict_names_decode() -> None:
    """vLLM TP4 rank 0: decode's 9 steps hold most step time; TV202 points at its costliest decode step."""
    trace, data = reported(VLLM_H100)
    walls = dict(trace.sql("SELECT phase, sum(end_ns - start_ns) FROM steps GROUP BY phase").rows())
    share = 100 * walls["decode"] / sum(walls.values())
    path = dict(zip(("compute", "host", "path"), trace.sql(
        "SELECT sum(compute_ns), sum(host_ns + launch_latency_ns), sum(path_ns) FROM step_critical_path "
        "WHERE phase = 'decode' AND priced").rows()[0]))
    assert data["verdict"][0].startswith(
        f"Decode steps take {share:.0f}% of the step time (9 steps, {duration(walls['decode'])}); its critical "
        f"path is compute-bound: {100 * path['compute'] / path['path']:.0f}% compute, "
        f"{100 * path['host'] / path['path']:.0f}% host")
    assert data["verdict"][0].endswith("; GPU busy 89.0% of its active span with kernels.")
    finding = by_rule(data, "TV202")
    phases = dict(trace.sql("SELECT step_id, phase FROM steps").rows())
    assert phases[finding["window"]["step_id"]] == "decode" and finding["steps"] == list(range(1, 10))


@requires_shared
@pytest.mark.parametrize("path", corpus(), ids=lambda p: p.name)
def test_no_message_or_verdict_states_a_zero(path: Path) -> None:
    """Every finding message and verdict line on every shared trace: no zero-valued part, no bare n/a."""
    _, data = reported(path)
    texts = [f"{f['rule']}: {f['message']}" for f in data["findings"]] + [f"verdict: {line}" for line in data["verdict"]]
    assert [(text, ZERO_PARTS.findall(text)) for text in texts if ZERO_PARTS.search(text)] == []
