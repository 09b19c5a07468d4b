"""The HTML diff page: GPU changes and kernel churn shown, a calm page for no change, trace strings inert,
offline, and the charts draw in Chromium."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from markupsafe import escape

import traceview
from conftest import REPO, SHARED_TRACES
from test_html import HOSTILE, JSON_BLOCK, assert_charts_render, assert_offline, chart_rows, chromium, visible_text  # noqa: F401
from traceview import units
from traceview.diff import build_diff, conclude
from traceview.report import diff_html
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import llm_serving_spec, write_kineto

FUSER_BASE = SHARED_TRACES / "nsys" / "NVIDIA__Fuser__report2.sqlite"  # H200
FUSER_HEAD = SHARED_TRACES / "nsys" / "NVIDIA__Fuser__report2_df8f397.sqlite"  # H100
SAME_NSYS = REPO / "sample_traces" / "llm_serving.sqlite"
SAME_KINETO = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"
SLOWER = "rotary_embedding_kernel"
REMOVED = "reshape_and_cache_flash_kernel"
MAX_BYTES = 1_500_000
SPEC = re.compile(r'<script type="application/json" data-chart-spec="(\w+)">(.*?)</script>', re.S)


def report(path: Path) -> dict:
    trace = traceview.load(path).analyze()
    return build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__)


def specs(page: str) -> dict[str, dict]:
    return {m.group(1): json.loads(m.group(2)) for m in SPEC.finditer(page)}


def kernel_rows(page: str) -> list[str]:
    """The rows of the changed-kernels table."""
    section = re.search(r'<section id="kernels">(.*?)</section>', page, re.S).group(1)
    return re.findall(r"<tr>\s*<td class=\"name\".*?</tr>", section, re.S)


@pytest.fixture(scope="module")
def fuser() -> tuple[dict, str]:
    if not (FUSER_BASE.is_file() and FUSER_HEAD.is_file()):
        pytest.skip("../shared/traces is not present")
    diff = build_diff(report(FUSER_BASE), report(FUSER_HEAD))
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def identical() -> tuple[dict, str]:
    diff = build_diff(report(SAME_NSYS), report(SAME_KINETO), fail_on_regression_pct=1.0)
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[dict, dict]:
    """Reports of a generated run and of the same run with one kernel 20% slower and one removed."""
    directory = tmp_path_factory.mktemp("diff_html")
    base = llm_serving_spec()
    kernels = tuple(replace(k, dur_ns=round(k.dur_ns * 1.2)) if SLOWER in k.name else k
                    for k in base.kernels if REMOVED not in k.name)
    return (report(write_kineto(base, directory / "base.json.gz")),
            report(write_kineto(replace(base, kernels=kernels), directory / "head.json.gz")))


@pytest.fixture(scope="module")
def hostile(identical: tuple[dict, str]) -> tuple[dict, str]:
    """A diff with a script-closing string wherever trace text reaches the page (charts included)."""
    diff = copy.deepcopy(identical[0])
    diff["kernels"] = [{"kernel": f"{HOSTILE} nvjet", "category": HOSTILE, "status": "slower", "base_time_ns": 1000,
                        "head_time_ns": 1500, "delta_ns": 500, "change_pct": 50.0, "base_count": 1, "head_count": 1}]
    diff["categories"][0].update(category=HOSTILE, head_time_ns=diff["categories"][0]["base_time_ns"] + 500,
                                 delta_ns=500, change_pct=1.0)
    finding = {"rule": "TV999", "name": "hostile", "severity": "warning", "title": HOSTILE, "message": HOSTILE,
               "estimated_saving_ns": 1_000_000, "fingerprint": "0", "evidence": {"kernel": HOSTILE}}
    diff["findings"] = {"new": [finding], "fixed": [{**finding, "fingerprint": "1", "severity": HOSTILE}]}
    diff["base"]["files"] = [f"/tmp/{HOSTILE}.json"]
    diff["head"].update(gpu=HOSTILE, spec_id=HOSTILE)
    diff["gpu_changed"] = True
    diff["regressions"] = [HOSTILE]
    return diff, diff_html.render(diff)


# -- real traces ---------------------------------------------------------------------------------


def test_fuser_h200_to_h100_shows_the_gpu_change_and_kernel_churn(fuser: tuple[dict, str]) -> None:
    diff, page = fuser
    assert diff["gpu_changed"]
    assert len(page.encode()) < MAX_BYTES
    assert 'class="gpu-changed">NVIDIA H200 SXM 141GB</span>' in page
    assert 'class="gpu-changed">NVIDIA H100 SXM5 80GB</span>' in page
    assert "GPU changed: <b>NVIDIA H200 SXM 141GB</b> → <b>NVIDIA H100 SXM5 80GB</b>" in page
    assert "(h200)" in page and "(h100-sxm)" in page
    assert "NVIDIA__Fuser__report2.sqlite" in page and "NVIDIA__Fuser__report2_df8f397.sqlite" in page
    rows = kernel_rows(page)
    assert len(rows) == len(diff["kernels"]) == 4
    new = next(r for r in rows if "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN" in r)
    gone = next(r for r in rows if "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT" in r)
    assert '<span class="badge new">new</span>' in new and "+90.2 µs" in new and "0 → 1" in new
    assert '<span class="badge gone">gone</span>' in gone and "-87.6 µs" in gone and "-100.0%" in gone
    # nvFuser's test binary has no step markers and its bursts do not repeat: each run is one window, 504 ms
    # (H200) against 532 ms (H100), a 5.6% change with one step a side, so nothing measures the noise
    assert 'class="verdict regression"' in page and "too few steps to measure the noise" in page
    assert "393 µs" in page and "405 µs" in page and "+3.1%" in page  # GPU busy base → head
    assert "99.9%" in page  # GPU idle
    charts = specs(page)
    assert set(charts) == {"steps", "categories"}
    steps = chart_rows(charts["steps"])
    assert {(r["phase"], r["run"]) for r in steps} == {("unknown", "base"), ("unknown", "head")}
    head = next(r for r in steps if r["run"] == "head")
    assert head["median"] == pytest.approx(diff["phases"][0]["head"]["median_ns"] / 1e6)  # ms axis (a 532 ms step)
    deltas = {r["category"]: r["delta"] for r in chart_rows(charts["categories"]) if "category" in r}
    assert deltas["elementwise"] == pytest.approx(4.705) and deltas["sampling"] == pytest.approx(-0.224)


def test_identical_runs_give_a_calm_no_change_page(identical: tuple[dict, str]) -> None:
    diff, page = identical
    assert diff["kernels"] == [] and not diff["gpu_changed"]
    assert kernel_rows(page) == []
    assert 'class="verdict no-change"' in page and '<span class="status">no change</span>' in page
    assert "No change: base and head did the same GPU work" in page
    assert "No regression beyond the thresholds" in page
    assert "gpu-changed" not in re.sub(r"<style\b.*?</style>", "", visible_text(page), flags=re.S)
    assert "badge slower" not in page and "badge regression" not in page and 'class="regression"' not in page
    assert "Regression gate: fail above +1% → exit code 0." in page
    assert set(specs(page)) == {"steps"}  # no delta chart when no category moved
    assert "every category has the same kernel time" in page


def test_generated_pair_lists_the_slower_and_removed_kernels(generated: tuple[dict, dict]) -> None:
    diff = build_diff(*generated)
    page = diff_html.render(diff)
    rows = kernel_rows(page)
    assert len(rows) == 2
    slower = next(r for r in rows if SLOWER in r)
    removed = next(r for r in rows if REMOVED in r)
    assert '<span class="badge slower">slower</span>' in slower and "+20.0%" in slower
    assert '<span class="badge gone">gone</span>' in removed and "-100.0%" in removed


def test_regressions_come_first(generated: tuple[dict, dict]) -> None:
    base, head = generated
    diff = build_diff(head, base, fail_on_regression_pct=0.5)  # head has the removed kernel back: more GPU time
    assert diff["regressions"]
    page = diff_html.render(diff)
    verdict = diff["conclusion"]
    assert verdict["status"] == "regression" and verdict["lines"][0]["kind"] == "regression"
    assert verdict["lines"][0]["text"].startswith("Regression: total GPU busy time +")
    assert "No regression beyond" not in page
    items = re.findall(r'<li class="(\w+)">', re.search(r'<section class="verdict regression".*?</section>', page, re.S).group(0))
    assert items[: len(diff["regressions"])] == ["regression"] * len(diff["regressions"])
    assert f"exit code {diff['exit_code']}" in page and diff["exit_code"] == 1


def test_phase_regression_beyond_noise_is_named(identical: tuple[dict, str]) -> None:
    diff = copy.deepcopy(identical[0])
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")
    decode["head"] = {**decode["head"], "median_ns": decode["base"]["median_ns"] * 1.2}
    decode.update(median_change_pct=20.0, verdict="regression")
    diff["conclusion"] = verdict = conclude(diff)
    assert verdict["status"] == "regression"
    assert verdict["lines"][0]["text"].startswith("Regression: decode median step time 2.3 ms → 2.76 ms (+20.0%)")
    page = diff_html.render(diff)
    assert '<span class="badge regression">regression</span>' in page


def test_numbers_carry_units() -> None:
    assert units.signed_duration(4705) == "+4.71 µs"
    assert units.signed_duration(-87583) == "-87.6 µs"
    assert units.signed_duration(0) == "0 ns"
    assert units.signed_percent(3.14) == "+3.1%" and units.signed_percent(-0.01) == "0.0%"
    assert units.signed_percent(None) == "n/a"


# -- safety --------------------------------------------------------------------------------------


def test_trace_strings_stay_inert(hostile: tuple[dict, str]) -> None:
    diff, page = hostile
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '"quotes"' not in visible_text(page)
    assert str(escape(HOSTILE)) in page  # the kernel name, the finding message, the GPU ...
    rows = kernel_rows(page)
    assert len(rows) == 1 and str(escape(f"{HOSTILE} nvjet")) in rows[0]
    findings = re.search(r'<section id="findings">(.*?)</section>', page, re.S).group(1)
    assert findings.count(str(escape(HOSTILE))) >= 4  # title and message, new and fixed
    blocks = JSON_BLOCK.findall(page)
    assert len(blocks) == 2
    for block in blocks:
        assert "</script" not in block.lower() and "<" not in block and ">" not in block and "&" not in block
        json.loads(block)
    named = [b for b in blocks if "alert(1)" in b]
    assert len(named) == 1  # the category chart, escaped exactly as the report escapes its charts
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in named[0]
    assert any(r.get("category") == HOSTILE for r in chart_rows(json.loads(named[0])))
    executable = [m.group(1) for m in re.finditer(r"<script>(.*?)</script>", page, re.S)]
    assert len(executable) == 2 and all("alert(1)" not in script for script in executable)


@pytest.mark.parametrize("which", ["identical", "hostile", "fuser"])
def test_page_is_offline_with_the_report_csp(which: str, request: pytest.FixtureRequest) -> None:
    assert_offline(request.getfixturevalue(which)[1])


# -- in a browser ---------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["fuser", "hostile"])
def test_diff_charts_render_in_headless_chromium(which: str, chromium: str, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    _, page = request.getfixturevalue(which)
    assert page.count("data-chart-spec=") == 2
    dom = assert_charts_render(chromium, page, tmp_path / f"diff_{which}.html")
    assert "<script>alert(1)" not in dom
