"""The HTML diff page: the verdict, the intervals it rests on, comparability and what moved, shown from
generated runs with a known +7% decode change; GPU changes and kernel churn from real traces; a calm page
for no change; trace strings inert; offline; and the charts draw in Chromium."""

from __future__ import annotations

import copy
import html as htmllib
import json
import pickle
import re
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from markupsafe import escape

import traceview
from conftest import REPO, SHARED_TRACES, built_once, reported
from test_html import HOSTILE, JSON_BLOCK, assert_charts_render, assert_offline, chart_rows, visible_text
from traceview import units
from traceview.diff import build_diff, conclude
from traceview.report import diff_html
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import llm_serving_spec, serving_runs, write_kineto

FUSER_BASE = SHARED_TRACES / "nsys" / "NVIDIA__Fuser__report2.sqlite"  # H200
FUSER_HEAD = SHARED_TRACES / "nsys" / "NVIDIA__Fuser__report2_df8f397.sqlite"  # H100
SAME_NSYS = REPO / "sample_traces" / "llm_serving.sqlite"
SAME_KINETO = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"
SLOWER = "rotary_embedding_kernel"
REMOVED = "reshape_and_cache_flash_kernel"
DECODE_CHANGE_PCT = 7.0  # the true change the generated head runs carry in decode
RUNS = 3  # a side: the fewest that measure run-to-run noise
MAX_BYTES = 1_500_000
PARTS = ["kernels", "idle", "copies", "outside_gpu"]
SPEC = re.compile(r'<script type="application/json" data-chart-spec="(\w+)">(.*?)</script>', re.S)


def report(path: Path) -> dict:
    trace = traceview.load(path).analyze()
    return build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__)


def specs(page: str) -> dict[str, dict]:
    return {m.group(1): json.loads(m.group(2)) for m in SPEC.finditer(page)}


def text(fragment: str) -> str:
    """What a reader sees of an HTML fragment: tags dropped, entities decoded, whitespace collapsed."""
    inline = re.sub(r"</?(?:span|b|em|code)\b[^>]*>", "", fragment)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", inline)).split())


def section(page: str, section_id: str) -> str:
    return re.search(rf'<section[^>]*\bid="{section_id}"[^>]*>(.*?)</section>', page, re.S).group(1)


def list_items(fragment: str, list_class: str) -> list[tuple[str, str]]:
    """(class, visible text) of each item of the list with this class."""
    items = re.search(rf'<(?:ul|ol) class="{list_class}">(.*?)</(?:ul|ol)>', fragment, re.S).group(1)
    return [(kind, text(body)) for kind, body in re.findall(r'<li class="(\w*)">(.*?)</li>', items, re.S)]


def check_rows(page: str) -> dict[str, tuple[str, str]]:
    """The comparability table: check name → (passed/failed, the row's visible text), in page order."""
    rows = re.findall(r'<tr class="(passed|failed)" data-check="(\w+)">(.*?)</tr>', section(page, "verdict"), re.S)
    return {check: (result, text(body)) for result, check, body in rows}


def kernel_rows(page: str) -> list[str]:
    """The rows of the changed-kernels table."""
    return re.findall(r"<tr>\s*<td class=\"name\".*?</tr>", section(page, "kernels"), re.S)


def phase_cells(page: str, phase: str) -> list[str]:
    """The visible text of each cell in a phase's row of the step-time table."""
    row = re.search(rf'<tr data-phase="{phase}">(.*?)</tr>', section(page, "phases"), re.S).group(1)
    return [text(cell) for cell in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)]


def moved(page: str, phase: str) -> str:
    """A phase's block in "What moved"."""
    return re.search(rf'<div class="moved"[^>]*data-phase="{phase}">(.*?)(?=<div class="moved"|$)',
                     section(page, "attribution"), re.S).group(1)


def part_rows(block: str) -> list[dict]:
    """The rows of a phase's parts table: kind (part/sub), key (part name, or the part a sub-row splits),
    label, and the base, head and change in ns as the cells carry them."""
    rows = []
    for kind, key, body in re.findall(r'<tr class="(part|sub)" data-(?:part|under)="(\w+)">(.*?)</tr>', block, re.S):
        base, head, delta = (float(v) for v in re.findall(r'data-sort="([^"]*)"', body)[:3])
        label = text(re.search(r"<td>(.*?)</td>", body, re.S).group(1))
        rows.append({"kind": kind, "key": key, "label": label, "base_ns": base, "head_ns": head, "delta_ns": delta,
                     "text": text(body)})
    return rows


def decode_steps(reports: list[dict]) -> list[int]:
    """The decode steps a diff compares (priced ones), as the time each owns on its rank's timeline."""
    return [s["owned_ns"] for r in reports for s in r["steps"] if s["phase"] == "decode" and s["priced"]]


def mean_step(reports: list[dict], phase: str) -> float:
    """A side's mean step from the reports' own time split: each run's mean, averaged over runs."""
    splits = [next(row for row in r["phase_time_split"] if row["phase"] == phase) for r in reports]
    return statistics.mean(row["wall_ns"] / row["steps"] for row in splits)


@pytest.fixture(scope="module")
def serving() -> tuple[list[dict], list[dict]]:
    """Reports of 3 runs a side of one serving workload; head's decode steps are 7% slower. Built once a session."""
    def build(target: Path) -> None:
        with tempfile.TemporaryDirectory() as directory:
            sides = {"base": serving_runs(RUNS, seed=1, decode_steps=8),
                     "head": serving_runs(RUNS, seed=2, decode_steps=8, change_pct={"decode": DECODE_CHANGE_PCT})}
            reports = [[report(write_kineto(spec, Path(directory) / f"{name}{i}.json.gz")) for i, spec in enumerate(runs)]
                       for name, runs in sides.items()]
        target.write_bytes(pickle.dumps(reports))

    base, head = pickle.loads(built_once("diff-html-serving.pickle", build).read_bytes())
    return base, head


@pytest.fixture(scope="module")
def regression(serving: tuple[list[dict], list[dict]]) -> tuple[dict, str]:
    diff = build_diff(*serving)
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def no_split(serving: tuple[list[dict], list[dict]]) -> tuple[dict, str]:
    """The same runs as reports from before the time split existed."""
    base, head = ([{k: v for k, v in r.items() if k != "phase_time_split"} for r in side] for side in serving)
    diff = build_diff(base, head)
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def fuser() -> tuple[dict, str]:
    if not (FUSER_BASE.is_file() and FUSER_HEAD.is_file()):
        pytest.skip("../shared/traces is not present")
    diff = build_diff([reported(FUSER_BASE)[1]], [reported(FUSER_HEAD)[1]])
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def identical() -> tuple[dict, str]:
    diff = build_diff([report(SAME_NSYS)], [report(SAME_KINETO)], fail_on_regression_pct=1.0)
    return diff, diff_html.render(diff)


@pytest.fixture(scope="module")
def churn(tmp_path_factory) -> tuple[dict, dict]:
    """Reports of a generated run and of the same run with one kernel 20% slower and one removed."""
    directory = tmp_path_factory.mktemp("diff_html")
    base = llm_serving_spec()
    kernels = tuple(replace(k, dur_ns=round(k.dur_ns * 1.2)) if SLOWER in k.name else k
                    for k in base.kernels if REMOVED not in k.name)
    return (report(write_kineto(base, directory / "base.json.gz")),
            report(write_kineto(replace(base, kernels=kernels), directory / "head.json.gz")))


@pytest.fixture(scope="module")
def hostile(regression: tuple[dict, str]) -> tuple[dict, str]:
    """A diff with a script-closing string wherever trace text reaches the page (every chart included)."""
    diff = copy.deepcopy(regression[0])
    diff["kernels"] = [{"kernel": f"{HOSTILE} nvjet", "category": HOSTILE, "status": "slower", "base_time_ns": 1000,
                        "head_time_ns": 1500, "delta_ns": 500, "change_pct": 50.0, "base_count": 1, "head_count": 1}]
    diff["categories"][0]["category"] = HOSTILE
    finding = {"rule": "TV999", "name": "hostile", "severity": "warning", "title": HOSTILE, "message": HOSTILE,
               "estimated_saving_ns": 1_000_000, "fingerprint": "0", "evidence": {"kernel": HOSTILE}}
    diff["findings"] = {"new": [finding], "fixed": [{**finding, "fingerprint": "1", "severity": HOSTILE}]}
    diff["base"]["files"] = [f"/tmp/{HOSTILE}.json"]
    diff["head"].update(gpu=HOSTILE, spec_id=HOSTILE)
    diff["gpu_changed"] = True
    diff["regressions"] = [HOSTILE]
    diff.update(headline=HOSTILE, verdict_reasons=[HOSTILE])
    diff["comparability"]["checks"][0]["detail"] = HOSTILE
    for phase in diff["phases"]:
        phase.update(reason=HOSTILE, headline=HOSTILE)
        phase["attribution"]["categories"][0]["name"] = HOSTILE
        phase["attribution"]["families"][0].update(name=HOSTILE, category=HOSTILE)
    diff["phases"][0]["phase"] = HOSTILE  # a phase name reaches the interval, step and attribution charts
    diff["conclusion"] = conclude(diff)
    return diff, diff_html.render(diff)


# -- the first screen ----------------------------------------------------------------------------


def test_first_screen_shows_the_verdict_headline_reasons_and_comparability(regression: tuple[dict, str]) -> None:
    diff, page = regression
    assert diff["verdict"] == "regression"
    verdict = section(page, "verdict")
    assert '<section class="verdict regression" id="verdict">' in page
    assert '<span class="verdict-badge regression">regression</span>' in verdict
    assert page.index('id="verdict"') < page.index('id="phases"') < page.index('id="attribution"')
    headline = re.search(r'<p class="headline">(.*?)</p>', verdict, re.S).group(1)
    assert text(headline) == diff["headline"]
    assert diff["headline"].startswith("decode: kernels +") and "steps are +7.4% slower" in diff["headline"]
    reasons = [line for _, line in list_items(verdict, "reasons")]
    assert reasons == diff["verdict_reasons"] and reasons[0].startswith("decode: median step +7.4% [+4.0%, +10.9%]")
    # the conclusion lines follow, each shown once: the ones that restate a reason are not repeated
    notes = [line for _, line in list_items(verdict, "notes")]
    assert notes[0].startswith("Verdicts at ±5% with 95% confidence intervals")
    shown = text(verdict)
    assert all(shown.count(line["text"][1:].rstrip(".")) == 1 for line in diff["conclusion"]["lines"])
    assert len(reasons) + len(notes) == len(diff["conclusion"]["lines"])
    marks = ('class="headline"', 'class="reasons"', 'id="comparability"', 'class="notes"')
    order = [verdict.index(mark) for mark in marks]
    assert order == sorted(order)


def test_comparability_lists_every_check(regression: tuple[dict, str], fuser: tuple[dict, str]) -> None:
    diff, page = regression
    rows = check_rows(page)
    assert list(rows) == [c["check"] for c in diff["comparability"]["checks"]] == [
        "gpu", "gpu_count", "phase_mix", "tokens_per_step", "kernel_families", "step_detection"]
    assert {result for result, _ in rows.values()} == {"passed"}
    assert rows["gpu"][1] == "GPU passed 100% same GPU (NVIDIA H100 SXM5 80GB)"
    assert rows["tokens_per_step"][1] == ("tokens per step passed 100% same tokens per step: "
                                          "decode 8 → 8; prefill 1024 → 1024")
    assert "Comparability 100%: the sides can be compared" in text(section(page, "verdict"))
    diff, page = fuser  # H200 against H100: the GPU check fails, and with it the comparison
    rows = check_rows(page)
    assert rows["gpu"] == ("failed", "GPU failed 0% GPU changed: NVIDIA H200 SXM 141GB → NVIDIA H100 SXM5 80GB")
    assert rows["kernel_families"] == ("passed", "kernel families passed 78% 77.5% of kernel time is in families "
                                                 "both sides ran")
    assert "Comparability 0%: not comparable, so the verdict is inconclusive" in text(section(page, "verdict"))
    assert '<span class="verdict-badge inconclusive">inconclusive</span>' in page


# -- phases: intervals ---------------------------------------------------------------------------


def test_phase_table_shows_the_change_with_its_interval(regression: tuple[dict, str],
                                                          serving: tuple[list[dict], list[dict]]) -> None:
    diff, page = regression
    base_steps, head_steps = (decode_steps(side) for side in serving)
    assert len(base_steps) == len(head_steps) == 48  # 16 priced decode steps a run, 3 runs
    true_change = 100 * (statistics.median(head_steps) / statistics.median(base_steps) - 1)
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")
    assert decode["median_change_pct"] == pytest.approx(true_change)
    low, high = decode["median_interval_pct"]
    assert 0 < low < DECODE_CHANGE_PCT < high  # the interval covers the change the runs were made with
    cells = phase_cells(page, "decode")
    assert cells[:4] == ["decode", "3 → 3", "48 → 48", f"{units.duration(statistics.median(base_steps))} → "
                                                       f"{units.duration(statistics.median(head_steps))}"]
    assert cells[3] == "2.31 ms → 2.48 ms"
    assert cells[4] == f"{true_change:+.1f}% [{low:+.1f}%, {high:+.1f}%]" == "+7.4% [+4.0%, +10.9%]"
    p90_low, p90_high = decode["p90_interval_pct"]
    assert cells[6] == f"{decode['p90_change_pct']:+.1f}% [{p90_low:+.1f}%, {p90_high:+.1f}%]"
    assert cells[7] == "< 0.001" and decode["p_value"] == 1 / decode["resamples"]
    assert cells[8] == f"regression {decode['reason']}"
    prefill = phase_cells(page, "prefill")
    assert prefill[1:3] == ["3 → 3", "6 → 6"] and prefill[7] == "0.908"
    assert prefill[8].startswith("inconclusive median step +0.0% [-9.9%, +6.0%] reaches across ±5%")
    assert re.search(r'<td class="num change up" data-sort="7\.37', page)  # red: slower beyond doubt
    assert re.search(r'<td class="num change " data-sort="0\.001', page)  # prefill's interval holds zero: no colour


def test_interval_chart_draws_each_phase_against_the_thresholds(regression: tuple[dict, str]) -> None:
    diff, page = regression
    charts = specs(page)
    assert set(charts) == {"intervals", "steps", "attribution", "categories"}
    rows = chart_rows(charts["intervals"])
    phases = {r["phase"]: r for r in rows if "phase" in r}
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")
    assert phases["decode"]["change"] == pytest.approx(decode["median_change_pct"], abs=1e-3)
    assert (phases["decode"]["low"], phases["decode"]["high"]) == pytest.approx(decode["median_interval_pct"], abs=1e-3)
    assert (phases["decode"]["verdict"], phases["prefill"]["verdict"]) == ("regression", "inconclusive")
    assert sorted(r["at"] for r in rows if "at" in r) == [-5.0, 0.0, 5.0]  # the thresholds and the zero line
    colours = charts["intervals"]["layer"][2]["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colours["domain"], colours["range"])) == {"regression": "#cf222e", "inconclusive": "#bf8700"}
    steps = chart_rows(charts["steps"])
    head = next(r for r in steps if r["run"] == "head" and r["phase"] == "decode")
    assert head["median"] == pytest.approx(decode["head"]["median_ns"] / 1e6)  # the ms axis


# -- what moved ----------------------------------------------------------------------------------


def test_what_moved_parts_add_up_to_the_change(regression: tuple[dict, str],
                                               serving: tuple[list[dict], list[dict]]) -> None:
    diff, page = regression
    base, head = (mean_step(side, "decode") for side in serving)
    block = moved(page, "decode")
    assert text(re.search(r'<p class="headline">(.*?)</p>', block, re.S).group(1)) == diff["phases"][1]["headline"]
    rows = part_rows(block)
    parts = [r for r in rows if r["kind"] == "part"]
    assert [r["key"] for r in parts] == PARTS
    assert [r["label"] for r in parts] == ["kernels", "GPU idle", "copies", "outside GPU work"]
    assert sum(r["base_ns"] for r in parts) == pytest.approx(base)
    assert sum(r["head_ns"] for r in parts) == pytest.approx(head)
    assert sum(r["delta_ns"] for r in parts) == pytest.approx(head - base)
    total = text(re.search(r"<tfoot>(.*?)</tfoot>", block, re.S).group(1))
    assert total == f"mean step {units.duration(base)} {units.duration(head)} {units.signed_duration(head - base)} " \
                    f"{units.signed_percent(100 * (head / base - 1))}" == "mean step 2.3 ms 2.47 ms +170 µs +7.4%"
    by_part = {r["key"]: r for r in parts}
    for part in ("kernels", "idle"):  # categories split the kernel part, idle kinds the idle part
        subs = [r for r in rows if r["kind"] == "sub" and r["key"] == part]
        assert len(subs) > 1 and sum(r["delta_ns"] for r in subs) == pytest.approx(by_part[part]["delta_ns"])
    gemm = next(r for r in rows if r["label"] == "gemm")
    gemm_pct = 100 * gemm["delta_ns"] / gemm["base_ns"]
    assert gemm["text"].endswith(f"{units.signed_duration(gemm['delta_ns'])} {units.signed_percent(gemm_pct)}")
    assert [r["label"] for r in rows if r["key"] == "idle" and r["kind"] == "sub"] == ["host wait", "bubble"]
    families = re.findall(r'<tr class="family">(.*?)</tr>', block, re.S)
    family_deltas = [float(re.findall(r'data-sort="([^"]*)"', f)[2]) for f in families]
    assert len(families) == 9 and sum(family_deltas) == pytest.approx(by_part["kernels"]["delta_ns"])
    chart = [r for r in chart_rows(specs(page)["attribution"]) if r["phase"] == "decode"]
    assert [r["part"] for r in chart] == ["kernels", "GPU idle", "copies", "outside GPU work"]
    assert sum(r["delta"] for r in chart) == pytest.approx(chart[0]["step_delta"], abs=1e-4)  # µs
    assert chart[0]["step_delta"] == pytest.approx((head - base) / 1e3, abs=1e-4)


def test_a_phase_without_a_time_split_says_why(no_split: tuple[dict, str]) -> None:
    diff, page = no_split
    assert [p["attribution"] for p in diff["phases"]] == [None, None]
    for phase in ("prefill", "decode"):
        block = text(moved(page, phase))
        assert "the reports carry no time split; regenerate them" in block  # the phase's headline says why
        assert "No parts table: these reports carry no time split" in block
        assert "regenerate them with traceview report TRACE --format json" in block
    assert "<table" not in section(page, "attribution") and "attribution" not in specs(page)
    assert diff["verdict"] == "regression"  # the verdict rests on step times alone
    assert phase_cells(page, "decode")[4] == "+7.4% [+4.0%, +10.9%]"


def test_regression_gate_fails_and_says_so(serving: tuple[list[dict], list[dict]]) -> None:
    diff = build_diff(*serving, fail_on_regression_pct=5.0)
    assert diff["exit_code"] == 1 and diff["regressions"] == ["decode median step time +7.4% [+4.0%, +10.9%]"]
    verdict = section(diff_html.render(diff), "verdict")
    assert [kind for kind, _ in list_items(verdict, "reasons")] == ["regression"]
    assert "Regression gate: fail on a regression of +5% or more → exit code 1." in text(verdict)


# -- real traces and no change -------------------------------------------------------------------


def test_fuser_h200_to_h100_shows_the_gpu_change_and_kernel_churn(fuser: tuple[dict, str]) -> None:
    diff, page = fuser
    assert diff["gpu_changed"] and diff["verdict"] == "inconclusive"
    assert len(page.encode()) < MAX_BYTES
    assert 'class="gpu-changed">NVIDIA H200 SXM 141GB</span>' in page
    assert 'class="gpu-changed">NVIDIA H100 SXM5 80GB</span>' in page
    assert "GPU changed: <b>NVIDIA H200 SXM 141GB</b> → <b>NVIDIA H100 SXM5 80GB</b>" in page
    assert "(h200)" in page and "(h100-sxm)" in page
    assert "NVIDIA__Fuser__report2.sqlite" in page and "NVIDIA__Fuser__report2_df8f397.sqlite" in page
    rows = kernel_rows(page)
    # 3, not 4: vectorized_elementwise_kernel (13 launches a side, +6.1% total time) is compared per launch now
    # (issue 32), and its median launch time did not move beyond noise, so it is no longer listed as slower
    assert len(rows) == len(diff["kernels"]) == 3
    assert "vectorized_elementwise_kernel" not in {k["kernel"] for k in diff["kernels"]}
    new = next(r for r in rows if "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN" in r)
    gone = next(r for r in rows if "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT" in r)
    assert '<span class="badge new">new</span>' in new and "+90.2 µs" in new and "0 → 1" in new
    assert '<span class="badge gone">gone</span>' in gone and "-87.6 µs" in gone and "-100.0%" in gone
    # nvFuser's test binary has no step markers and its bursts do not repeat: each run is one window, and most of
    # it is the fusion's JIT compilation (an initialisation step), so neither side has a step to compare
    assert diff["phases"] == [] and '<tr data-phase="unknown">' not in section(page, "phases")
    assert "393 µs" in page and "405 µs" in page and "+3.1%" in page  # GPU busy base → head
    assert "99.9%" in page  # GPU idle
    charts = specs(page)
    deltas = {r["category"]: r["delta"] for r in chart_rows(charts["categories"]) if "category" in r}
    assert deltas["elementwise"] == pytest.approx(4.705) and deltas["sampling"] == pytest.approx(-0.224)


def test_identical_runs_give_a_calm_neutral_page(identical: tuple[dict, str]) -> None:
    diff, page = identical
    assert diff["kernels"] == [] and not diff["gpu_changed"] and diff["verdict"] == "neutral"
    assert kernel_rows(page) == []
    assert '<section class="verdict neutral" id="verdict">' in page
    assert '<span class="verdict-badge neutral">neutral</span>' in page
    verdict = text(section(page, "verdict"))
    assert "decode: identical step times on both sides" in verdict
    assert "Base and head did the same GPU work, to the nanosecond." in verdict
    assert "Regression gate: fail on a regression of +1% or more → exit code 0." in verdict
    assert phase_cells(page, "decode")[4] == "0.0% [0.0%, 0.0%]"
    assert phase_cells(page, "decode")[8] == "neutral identical step times on both sides"
    assert "gpu-changed" not in re.sub(r"<style\b.*?</style>", "", visible_text(page), flags=re.S)
    assert "badge slower" not in page and "badge regression" not in page and "verdict-badge regression" not in page
    assert set(specs(page)) == {"intervals", "steps"}  # nothing moved: no attribution or category bars
    assert "every category has the same kernel time" in page


def test_generated_pair_lists_the_slower_and_removed_kernels(churn: tuple[dict, dict]) -> None:
    diff = build_diff([churn[0]], [churn[1]])
    rows = kernel_rows(diff_html.render(diff))
    assert len(rows) == 2
    slower = next(r for r in rows if SLOWER in r)
    removed = next(r for r in rows if REMOVED in r)
    assert '<span class="badge slower">slower</span>' in slower and "+20.0%" in slower
    assert '<span class="badge gone">gone</span>' in removed and "-100.0%" in removed


def test_numbers_carry_units() -> None:
    assert units.signed_duration(4705) == "+4.71 µs"
    assert units.signed_duration(-87583) == "-87.6 µs"
    assert units.signed_duration(0) == "0 ns"
    assert units.signed_percent(3.14) == "+3.1%" and units.signed_percent(-0.01) == "0.0%"
    assert units.signed_percent(None) == "n/a"
    assert units.interval([4.04, 10.93]) == "[+4.0%, +10.9%]" and units.interval(None) == "n/a"
    assert diff_html.p_value_text(0.0005) == "< 0.001" and diff_html.p_value_text(0.9081) == "0.908"
    assert diff_html.p_value_text(None) == "n/a"
    intervals = ([4.0, 10.9], [-9.9, 6.0], [-3.0, -1.0], None)
    assert [diff_html.interval_class(i) for i in intervals] == ["up", "", "down", ""]


# -- safety --------------------------------------------------------------------------------------


def test_trace_strings_stay_inert(hostile: tuple[dict, str]) -> None:
    diff, page = hostile
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '"quotes"' not in visible_text(page)
    assert str(escape(HOSTILE)) in page  # the kernel name, the finding message, the GPU ...
    rows = kernel_rows(page)
    assert len(rows) == 1 and str(escape(f"{HOSTILE} nvjet")) in rows[0]
    findings = section(page, "findings")
    assert findings.count(str(escape(HOSTILE))) >= 4  # title and message, new and fixed
    verdict = section(page, "verdict")
    assert verdict.count(str(escape(HOSTILE))) >= 3  # headline, reason, comparability detail
    assert section(page, "attribution").count(str(escape(HOSTILE))) >= 8  # per phase: headline, category, family
    blocks = JSON_BLOCK.findall(page)
    assert len(blocks) == 4
    for block in blocks:
        assert "</script" not in block.lower() and "<" not in block and ">" not in block and "&" not in block
        json.loads(block)
        assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in block  # a phase or category name
    charts = specs(page)
    assert any(r.get("category") == HOSTILE for r in chart_rows(charts["categories"]))
    assert any(r.get("phase") == HOSTILE for r in chart_rows(charts["intervals"]))
    executable = [m.group(1) for m in re.finditer(r"<script>(.*?)</script>", page, re.S)]
    assert len(executable) == 2 and all("alert(1)" not in script for script in executable)


@pytest.mark.parametrize("which", ["regression", "identical", "hostile", "fuser"])
def test_page_is_offline_with_the_report_csp(which: str, request: pytest.FixtureRequest) -> None:
    assert_offline(request.getfixturevalue(which)[1])


# -- in a browser ---------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["regression", "fuser", "hostile"])
def test_diff_charts_render_in_headless_chromium(which: str, chromium: str, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    diff, page = request.getfixturevalue(which)
    with_interval = any(p["median_interval_pct"] for p in diff["phases"])
    # categories always; step times and their attribution where a phase has steps to compare; intervals where drawn
    assert page.count("data-chart-spec=") == 1 + (2 if diff["phases"] else 0) + (1 if with_interval else 0)
    dom = assert_charts_render(chromium, page, tmp_path / f"diff_{which}.html")
    assert "<script>alert(1)" not in dom
