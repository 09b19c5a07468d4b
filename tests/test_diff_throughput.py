"""`traceview diff` on captures bounded by a time window (issue 32): where both sides fill the same window, work per
second decides, on the first basis that applies (tokens, steps, main-loop launches); a head that ran 12% fewer
launches at the same per-launch time is 12% lower throughput with an interval, never an improvement; captures
bounded by work (different spans, or the same work) keep the per-step comparison."""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from traceview import api, workflow
from traceview.diff import build_diff, throughput
from traceview.report import diff_html, diff_markdown
from traceview.report.json_report import render as render_json
from traceview.testing import llm_serving_spec, serving_runs, write_kineto

DIFF_SCHEMA = json.loads(resources.files("traceview.report").joinpath("diff_schema.json").read_text())
DROP = 0.12  # the head fits 12% fewer steps (and launches) into the same window
SHAPE = {"prefill_batches": (4,), "decode_steps": 40}
LOOP = "step_loop"


def _steps(spec) -> list:
    return sorted((r for r in spec.ranges if r.kind == "user_annotation" and r.name.startswith("execute_")),
                  key=lambda r: r.start_ns)


def _gap(spec, window_end_ns: int) -> float:
    """The extra host wait before each step that leaves 12% fewer whole steps in the window: the last one kept
    ends exactly at the window's end."""
    ends = [s.end_ns for s in _steps(spec) if s.end_ns <= window_end_ns]
    keep = round((1.0 - DROP) * len(ends))
    return (window_end_ns - ends[keep - 1]) / (keep - 1)


def windowed(spec, window_end_ns: int, extra_gap_ns: float = 0.0):
    """The capture of `spec` in a fixed window ending at `window_end_ns`, with `extra_gap_ns` more host wait before each
    step: step i (and everything it ran) moves by i · extra_gap_ns, a step that no longer ends inside the window is
    dropped, and the engine loop's range spans the window, so every capture made this way has the same span. Kernel
    and copy durations are unchanged: per launch nothing moves."""
    steps = _steps(spec)
    starts = [s.start_ns for s in steps]

    def step_of(t: int) -> int | None:
        index = sum(1 for s in starts if s <= t) - 1
        return index if index >= 0 else None

    keep = {i for i, s in enumerate(steps) if s.end_ns + i * extra_gap_ns <= window_end_ns}

    def moved(items, *fields):
        out = []
        for item in items:
            i = step_of(item.start_ns)
            if i is None:
                out.append(item)
            elif i in keep:
                shift = round(i * extra_gap_ns)
                out.append(replace(item, **{f: getattr(item, f) + shift for f in fields if getattr(item, f) is not None}))
        return out

    loop = [replace(r, end_ns=window_end_ns + 10_000) for r in spec.ranges if LOOP in r.name]
    ranges = moved([r for r in spec.ranges if LOOP not in r.name], "start_ns", "end_ns") + loop
    return replace(spec, kernels=tuple(moved(spec.kernels, "start_ns", "launch_start_ns")),
                   memops=tuple(moved(spec.memops, "start_ns", "launch_start_ns")),
                   api_calls=tuple(moved(spec.api_calls, "start_ns")), ranges=tuple(ranges))


def _report(spec, path: Path) -> dict:
    with api.load(write_kineto(spec, path)) as loaded:
        return json.loads(render_json(workflow.report(loaded, workflow.CheckOptions.configured())))


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, list[dict]]:
    """One run a side in the same window (the head waits longer before each step and fits 12% fewer), three runs a
    side with run-to-run noise in one window, and a work-bounded head (the same steps, all 8% slower: a longer
    span)."""
    directory = tmp_path_factory.mktemp("diff_throughput")
    base = llm_serving_spec(**SHAPE)
    end = _steps(base)[-1].end_ns
    specs = {"base": [windowed(base, end)], "head": [windowed(base, end, _gap(base, end))],
             "slower": [llm_serving_spec(**SHAPE, step_scales=(1.08,) * 41)]}
    runs_base, runs_head = serving_runs(3, seed=21, **SHAPE), serving_runs(3, seed=22, **SHAPE)
    window = min(_steps(s)[-1].end_ns for s in runs_base + runs_head)
    specs["runs_base"] = [windowed(s, window) for s in runs_base]
    specs["runs_head"] = [windowed(s, window, _gap(s, window)) for s in runs_head]
    return {name: [_report(spec, directory / f"{name}{i}.json.gz") for i, spec in enumerate(side)]
            for name, side in specs.items()}


def _diff(base: list[dict], head: list[dict], **options) -> dict:
    diff = build_diff(base, head, **options)
    jsonschema.validate(diff, DIFF_SCHEMA)
    return diff


def _without_tokens(reports: list[dict]) -> list[dict]:
    out = copy.deepcopy(reports)
    for report in out:
        for step in report["steps"]:
            step["tokens"] = None
    return out


def _without_steps(reports: list[dict]) -> list[dict]:
    out = copy.deepcopy(reports)
    for report in out:
        report["steps"], report["phase_time_split"] = [], []
    return out


def _text(diff: dict) -> str:
    return " ".join(line["text"] for line in diff["conclusion"]["lines"])


def test_the_generated_pair_fills_one_window_with_twelve_percent_fewer_steps(reports: dict[str, list[dict]]) -> None:
    base, head = reports["base"][0], reports["head"][0]
    assert base["trace"]["span_ns"] == head["trace"]["span_ns"]
    assert len(head["steps"]) == round((1 - DROP) * len(base["steps"]))
    assert head["summary"]["gpu_busy_ns"] < 0.92 * base["summary"]["gpu_busy_ns"]
    assert head["summary"]["gpu_idle_pct"] > base["summary"]["gpu_idle_pct"]


@pytest.mark.parametrize("strip, basis", [(None, "tokens"), (_without_tokens, "steps"), (_without_steps, "launches")])
def test_twelve_percent_fewer_launches_in_a_fixed_window_is_twelve_percent_less_throughput(
        reports: dict[str, list[dict]], strip, basis: str) -> None:
    base, head = reports["base"], reports["head"]
    if strip:
        base, head = strip(base), strip(head)
    diff = _diff(base, head)
    window = diff["throughput"]
    assert window is not None and window["basis"] == basis and window["unit"] == throughput.UNITS[basis]
    assert window["change_pct"] == pytest.approx(-100 * DROP, abs=2.0)
    low, high = window["interval_pct"]
    assert low < window["change_pct"] < high < 5.0
    assert window["window_ns"] == base[0]["trace"]["span_ns"]
    assert window["head_per_s"] < window["base_per_s"]
    assert not [k for k in diff["kernels"] if k["status"] == "faster"]
    assert diff["verdict"] != "improvement"
    assert diff["verdict_reasons"][0].startswith(f"throughput ({throughput.UNITS[basis]})")
    assert diff["headline"].startswith(f"Fixed {diff['headline'].split()[1]} ms windows:")
    text = _text(diff)
    assert "less busy time here is less work done, not faster work" in text
    busy = next(line for line in diff["conclusion"]["lines"] if line["text"].startswith("GPU busy"))
    assert busy["kind"] in ("regression", "change")  # coloured by throughput, never green


def test_launches_basis_decides_a_regression_with_an_interval_below_zero(reports: dict[str, list[dict]]) -> None:
    """Thousands of launches give a Poisson interval that excludes zero: the gate fails on the lower throughput."""
    diff = _diff(_without_steps(reports["base"]), _without_steps(reports["head"]), fail_on_regression_pct=5.0)
    window = diff["throughput"]
    assert window["method"].startswith("Poisson")
    assert window["interval_pct"][1] < 0
    assert diff["verdict"] == "regression" and diff["exit_code"] == 1
    assert diff["regressions"] and diff["regressions"][0].startswith("throughput (launches/s) -")
    counts = Counter(k["status"] for k in diff["kernels"])
    assert counts["faster"] == 0 and counts["count"] > 0


def test_three_runs_a_side_bootstrap_over_runs(reports: dict[str, list[dict]]) -> None:
    diff = _diff(reports["runs_base"], reports["runs_head"], fail_on_regression_pct=5.0)
    window = diff["throughput"]
    assert window["basis"] == "tokens" and window["method"] == "bootstrap over runs"
    low, high = window["interval_pct"]
    assert window["change_pct"] == pytest.approx(-100 * DROP, abs=3.0)
    assert low < window["change_pct"] < high < 0
    assert diff["verdict"] == "regression"
    assert not [k for k in diff["kernels"] if k["status"] == "faster"]


def test_work_bounded_captures_keep_the_per_step_comparison(reports: dict[str, list[dict]]) -> None:
    """Different spans (the same 41 steps, 8% slower): no throughput row, the step verdict decides as before."""
    diff = _diff(reports["base"], reports["slower"])
    assert diff["throughput"] is None
    assert diff["verdict"] == "regression"
    assert not diff["verdict_reasons"][0].startswith("throughput")
    assert "Fixed" not in _text(diff) and "Throughput" not in diff_markdown.render(diff)
    same = _diff(reports["base"], reports["base"])  # same span and the same work: bounded by work too
    assert same["throughput"] is None


def test_tokens_basis_counts_tokens_and_the_steps_carry_the_variance(reports: dict[str, list[dict]]) -> None:
    base, head = reports["base"][0], reports["head"][0]
    window = throughput.fixed_window([base], [head])
    # decode, the phase with the most steps: its generated tokens (the one prefill's 1,024 prompt tokens are not counted)
    tokens = [sum(s["tokens"]["decode"] for s in r["steps"] if s["priced"] and s["phase"] == "decode") for r in (base, head)]
    assert (window["base_count"], window["head_count"]) == tuple(tokens) == (160, 140)
    assert window["what"] == "tokens (decode)"
    assert window["base_per_s"] == pytest.approx(1e9 * tokens[0] / base["trace"]["span_ns"])
    assert window["method"].startswith("renewal count of the steps")


def test_renderers_show_the_throughput_row(reports: dict[str, list[dict]]) -> None:
    diff = _diff(reports["base"], reports["head"])
    markdown = diff_markdown.render(diff)
    row = next(line for line in markdown.splitlines() if line.startswith("**Throughput"))
    assert "tokens/s" in row and "basis: tokens" in row
    page = diff_html.render(diff)
    assert 'data-kpi="throughput"' in page and "tokens/s" in page
    assert 'GPU busy <span class="change up">' in page  # busy fell in the window, shown in throughput's colour



@pytest.mark.parametrize("runs", [("base", "head"), ("runs_base", "runs_head")])
def test_capture_time_per_unit_of_work_splits_into_parts_that_add_up(reports: dict[str, list[dict]], runs) -> None:
    """Per token (decode): each run's capture time over its tokens, in parts (the decode steps' kernels, idle, copies,
    outside GPU, and the time outside them) that add up to it, so their changes add up to the change exactly."""
    base, head = reports[runs[0]], reports[runs[1]]
    diff = _diff(base, head)
    split = diff["throughput"]["per_unit"]
    assert (split["unit"], split["phase"]) == ("token", "decode")
    for side in ("base", "head"):
        assert sum(p[f"{side}_ns"] for p in split["parts"]) == pytest.approx(split[f"{side}_ns"], rel=1e-12)
    assert sum(p["delta_ns"] for p in split["parts"]) == pytest.approx(split["delta_ns"], rel=1e-9)
    assert split["base_ns"] == pytest.approx(sum(r["trace"]["span_ns"] / c for r, c in zip(
        base, [sum(s["tokens"]["decode"] for s in r["steps"] if s["priced"] and s["phase"] == "decode") for r in base])) / len(base))
    # time per token rose by about what throughput fell: 1 / (1 - 0.12) - 1
    assert 100 * split["delta_ns"] / split["base_ns"] == pytest.approx(-diff["throughput"]["change_pct"] / (1 + diff["throughput"]["change_pct"] / 100), rel=0.02)
    parts = {p["name"]: p for p in split["parts"]}
    # the head waited longer between the annotated steps: all of it outside them; per token the kernels did not move
    assert max(split["parts"], key=lambda p: p["delta_ns"])["name"] == "outside_phase"
    assert abs(parts["kernels"]["delta_ns"]) < 0.01 * parts["kernels"]["base_ns"]
    assert "Per token (decode): capture time" in _text(diff)
    assert "| part of the capture time per token (decode) |" in diff_markdown.render(diff)
    assert throughput.fixed_window(_without_steps(base), _without_steps(head))["per_unit"] is None
