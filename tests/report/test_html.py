"""The HTML report: real traces render, trace strings stay inert, the page is offline, charts draw in Chromium."""

from __future__ import annotations

import contextlib
import copy
import html as htmllib
import json
import re
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import escape

import traceview
from conftest import REPO, SHARED_TRACES, VLLM_H100, reported, requires_shared
from traceview import units as fmt
from traceview.report import charts, evidence, html
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules

SAMPLE = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"
NO_GPU = SHARED_TRACES / "nsys" / "amir-ghz__DynamicViT__nsys_profile.sqlite"
QWEN = SHARED_TRACES / "torch" / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
MAX_BYTES = 3_000_000
HOSTILE = '<script>alert(1)</script> "quotes" </script><!-- & \'x\''
JSON_BLOCK = re.compile(r'<script type="application/json"[^>]*>(.*?)</script>', re.S)


def report_data(path: Path) -> dict:
    trace = traceview.load(path).analyze()
    return build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__)


@pytest.fixture(scope="module")
def sample() -> tuple[dict, str]:
    data = report_data(SAMPLE)
    return data, html.render(data)


@pytest.fixture(scope="module")
def vllm() -> tuple[dict, str]:
    if not VLLM_H100.is_file():
        pytest.skip("../shared/traces is not present")
    _, data = reported(VLLM_H100)
    return data, html.render(data)


@pytest.fixture(scope="module")
def no_gpu() -> tuple[dict, str]:
    if not NO_GPU.is_file():
        pytest.skip("../shared/traces is not present")
    _, data = reported(NO_GPU)
    return data, html.render(data)


@pytest.fixture(scope="module")
def hostile(sample: tuple[dict, str]) -> tuple[dict, str]:
    """The sample's ReportData with a script-closing string in every place trace text reaches the page."""
    data = copy.deepcopy(sample[0])
    for kernel in data["top_kernels"]:
        kernel["short_name"] = kernel["name"] = f"{HOSTILE} {kernel['short_name']}"
    for step in data["steps"]:
        step["name"] = HOSTILE
    for kernel in data["roofline"]["kernels"]:
        kernel["name"] = HOSTILE
    for category in data["roofline"]["categories"]:
        category["category"] = HOSTILE
    data["trace"]["files"] = [f"/tmp/{HOSTILE}.json"]
    data["gpu"]["name"] = HOSTILE
    data["findings"] = [{
        "rule": "TV999", "name": "hostile", "severity": "warning", "title": HOSTILE, "message": HOSTILE,
        "estimated_saving_ns": 1_000_000, "share_pct": 1.0, "fingerprint": "0", "doc": "docs/rules.md#tv999",
        "fix": HOSTILE, "evidence": {"kernel_names": HOSTILE, "rows": [{"kernel": HOSTILE, "time_ns": 5}]},
    }]
    data["capture"]["diagnostics"] = [{"rank": 0, "source": "ingest", "severity": "warning", "code": HOSTILE,
                                       "message": HOSTILE, "occurrences": 1}]
    data["capture"]["skipped_rules"] = [{"rule": "TV998", "title": HOSTILE, "reason": HOSTILE}]
    data["verdict"] = [HOSTILE, HOSTILE, HOSTILE]
    return data, html.render(data)


def chart_rows(spec: dict) -> list[dict]:
    """Every data row of a Vega-Lite spec, wherever altair put it (top-level datasets or inline values)."""
    rows = [row for values in spec.get("datasets", {}).values() for row in values]
    rows += (spec.get("data") or {}).get("values") or []
    for layer in spec.get("layer", []):
        rows += chart_rows(layer)
    return rows


def visible_text(page: str) -> str:
    """The page without its script elements, so the Vega bundle's own strings do not count."""
    return re.sub(r"<script\b[^>]*>.*?</script>", "", page, flags=re.S)


# -- real traces ---------------------------------------------------------------------------------


def test_sample_report_shows_header_verdict_and_sections(sample: tuple[dict, str]) -> None:
    data, page = sample
    for line in data["verdict"]:
        assert str(escape(line)) in page
    assert "GPU busy 60.0% of its active span with kernels" in page  # 60,150,652 ns of kernels over a 100,192,822 ns span
    assert "NVIDIA H100 SXM5 80GB" in page and "h100-sxm" in page
    assert "3.35 TB/s" in page and "989 TFLOP/s" in page  # HBM and the bf16/fp16 dense peak
    assert "llm_serving.pt.trace.json.gz" in page and "2,480" in page  # file and kernel count
    for section in ("verdict", "time", "steps", "stream-timeline", "roofline", "kernels", "categories", "findings",
                    "capture"):
        assert f'id="{section}"' in page
    top = data["top_kernels"][0]
    assert str(escape(top["short_name"])) in page and "42.6%" in page
    assert page.count("data-chart-spec=") == 6  # phases, steps, roofline, categories, 2 timeline steps


def test_sample_chart_specs_carry_the_data(sample: tuple[dict, str]) -> None:
    data, page = sample
    specs = {m.group(1): json.loads(m.group(2)) for m in
             re.finditer(r'<script type="application/json" data-chart-spec="(\w+)">(.*?)</script>', page, re.S)}
    assert set(specs) == {"phases", "steps", "roofline", "categories", "timeline_0_0", "timeline_0_15"}
    values = {name: chart_rows(spec) for name, spec in specs.items()}
    roofs = {row["roof"] for row in values["roofline"] if "roof" in row}
    assert {"bf16/fp16", "fp8/int8"} <= roofs
    assert max(row["tflops"] for row in values["roofline"] if "roof" in row) == pytest.approx(1978.9)
    phases = {row["phase"] for row in values["roofline"] if "phase" in row and "category" not in row}
    assert phases == {"prefill", "decode"}
    assert len([row for row in values["steps"]]) == len(data["steps"]) == 26
    decode = next(p for p in data["phases"] if p["phase"] == "decode")
    busy = next(r for r in values["phases"] if r["phase"] == "decode" and r["part"].startswith("GPU busy"))
    assert busy["ms"] == pytest.approx(decode["gpu_busy_ns"] / 1e6)



@pytest.mark.parametrize("fixture", ["sample", "vllm"])
def test_every_chart_the_page_embeds_is_valid_vega_lite(fixture: str, request: pytest.FixtureRequest) -> None:
    """The page skips altair's validation (a third of a small report's time); the schema is checked here."""
    data, page = request.getfixturevalue(fixture)
    built = {name: chart for name, chart in charts.build(data).items() if chart is not None}
    embedded = {m.group(1): json.loads(m.group(2)) for m in
                re.finditer(r'<script type="application/json" data-chart-spec="(\w+)">(.*?)</script>', page, re.S)}
    assert set(embedded) == set(built)
    for name, chart in built.items():
        assert chart.to_dict(validate=True) == embedded[name], name  # validates, and is what the page holds

@pytest.mark.parametrize("fixture", ["sample", "vllm"])
def test_charts_built_without_altairs_copies_and_debug_checks_are_the_same_specs(
        fixture: str, request: pytest.FixtureRequest, monkeypatch) -> None:
    """The page's charts skip altair's debug-mode validation and the copies of alt.layer and .properties (most
    of a small page's chart time); built altair's own way, every spec is the same dict, a merged step's note
    (the vLLM prefill's) included."""
    import altair as alt

    data, _ = request.getfixturevalue(fixture)
    fast = {name: charts.vega_lite(chart) for name, chart in charts.build(data).items() if chart is not None}
    monkeypatch.setattr(charts, "_layered", lambda layers, **properties: alt.layer(*layers).properties(**properties))
    monkeypatch.setattr(charts, "debug_mode", lambda on: contextlib.nullcontext())
    assert alt.utils.schemapi.DEBUG_MODE
    slow = {name: charts.vega_lite(chart) for name, chart in charts.build(data).items() if chart is not None}
    assert slow == fast
    noted = [name for name, spec in fast.items() if name.startswith("timeline") and spec.get("title")]
    assert bool(noted) == (fixture == "vllm")


@requires_shared
def test_vllm_h100_report_is_small_and_says_costs_are_missing(vllm: tuple[dict, str]) -> None:
    data, page = vllm
    assert len(page.encode()) < MAX_BYTES
    for line in data["verdict"]:
        assert str(escape(line)) in page
    assert "NVIDIA H100 SXM5 80GB" in page and "13,508" in page
    assert "No FLOP/byte costs exist for this trace" in page
    assert 'data-chart-spec="roofline"' not in page  # no empty roofline chart
    assert page.count("data-chart-spec=") == 5  # phases, steps, categories, the prefill and decode timelines
    assert "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64" in page


@requires_shared
def test_qwen_roofline_places_costed_kernels() -> None:
    _, data = reported(QWEN)
    spec = charts.roofline(data).to_dict()
    rows = chart_rows(spec)
    assert len([r for r in rows if "name" in r]) == len(data["roofline"]["kernels"]) > 100
    assert "roofline" in html.render(data)


@requires_shared
def test_trace_without_gpu_data_gives_a_short_report(no_gpu: tuple[dict, str]) -> None:
    data, page = no_gpu
    assert data["summary"]["kernels"] == 0
    assert "No GPU data in this trace" in page
    for line in data["verdict"]:
        assert str(escape(line)) in page
    assert 'data-chart-spec="' not in page and "<svg" not in page
    assert "window.vegaEmbed" not in page  # no 0.9 MB bundle for a page without charts
    assert len(page.encode()) < 100_000
    assert "TV101" in page and "How to fix" in page  # the finding and its fix text
    assert "export has no CUDA kernel table" in page  # the capture diagnostic


def test_many_steps_are_averaged_in_buckets(sample: tuple[dict, str]) -> None:
    data = copy.deepcopy(sample[0])
    data["steps"] = [{**data["steps"][i % 26], "index": i, "step_id": i} for i in range(20_000)]
    spec = charts.step_timeline(data).to_dict()
    rows = chart_rows(spec)
    bucket = charts.step_bucket(20_000)
    assert bucket == 50 and len(rows) <= 2 * 2 * charts.MAX_STEP_BARS  # (wall, GPU) x phases x buckets
    assert {r["steps"] for r in rows} <= set(range(1, bucket + 1))
    page = html.render(data)
    assert f"averaging {bucket} consecutive steps" in page and len(page.encode()) < MAX_BYTES


def _unmatched_gpu(data: dict) -> str:
    data["gpu"] = {"name": "Mystery GPU 9000", "spec_id": None, "peak_tflops": {}, "ridge_bf16": None}
    return "matched no hardware spec"


def _no_steps(data: dict) -> str:
    data["steps"], data["phases"] = [], []
    data["categories"] = [{**c, "phase": None} for c in data["categories"]]
    return "No steps were found"


def _roofline_split(data: dict) -> str:
    for phase in data["phases"]:
        phase["roofline_ns"] = phase["gpu_busy_ns"] // 2
        phase["kernel_inefficiency_ns"] = phase["gpu_busy_ns"] - phase["roofline_ns"]
    return "kernel inefficiency"


@pytest.mark.parametrize("change", [_unmatched_gpu, _no_steps, _roofline_split], ids=lambda f: f.__name__[1:])
def test_partial_data_renders_and_says_what_is_missing(change, sample: tuple[dict, str]) -> None:
    data = copy.deepcopy(sample[0])
    expected = change(data)
    page = html.render(data)
    assert expected in page
    specs = [json.loads(block) for block in JSON_BLOCK.findall(page)]
    assert all(chart_rows(spec) for spec in specs)  # no empty chart


# -- safety --------------------------------------------------------------------------------------


def test_trace_strings_stay_inert(hostile: tuple[dict, str]) -> None:
    _, page = hostile
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
    assert '"quotes"' not in visible_text(page)
    blocks = JSON_BLOCK.findall(page)
    assert len(blocks) == 6  # 4 charts and 2 timeline steps
    for block in blocks:
        assert "</script" not in block.lower() and "<" not in block and ">" not in block and "&" not in block
        json.loads(block)
    named = [b for b in blocks if "alert(1)" in b]
    assert len(named) == 2  # the step timeline and the roofline carry the names ...
    for block in named:  # ... escaped in the page, and intact once parsed
        assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in block
        assert any(HOSTILE in str(row.get("name") or row.get("category")) for row in chart_rows(json.loads(block)))
    executable = [m.group(1) for m in re.finditer(r"<script>(.*?)</script>", page, re.S)]
    assert len(executable) == 2 and all("alert(1)" not in script for script in executable)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def assert_offline(page: str) -> None:
    """No URL the browser would fetch, no external CSS, and the strict CSP in force before any script."""
    parser = _Collector()
    parser.feed(page)
    for tag, attrs in parser.tags:
        for name in ("src", "href", "action", "formaction", "poster", "data", "srcset", "background"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), f"<{tag} {name}={value}>"
            if name in ("src", "srcset", "poster", "data") and value:
                assert value.startswith("data:"), f"<{tag} {name}={value}>"
        assert tag not in ("link", "iframe", "object", "embed", "base", "img")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", visible_text(page), re.I)
    assert not any("url(" in css or "@import" in css for css in parser.styles)
    csp = [attrs for tag, attrs in parser.tags if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1 and csp[0]["content"] == html.CSP
    policy = dict(part.strip().split(" ", 1) for part in html.CSP.split(";"))
    assert policy["default-src"] == "'none'" and policy["connect-src"] == "'none'"
    assert policy["script-src"] == "'unsafe-inline'" and "unsafe-eval" not in html.CSP
    assert policy["img-src"] == "data:"
    assert page.index("Content-Security-Policy") < page.index("<script")  # in force before any script


@pytest.mark.parametrize("report", ["sample", "hostile"])
def test_page_makes_no_external_requests(report: str, request: pytest.FixtureRequest) -> None:
    assert_offline(request.getfixturevalue(report)[1])


def test_templates_are_found_and_escape_everything() -> None:
    directory = html.default_templates_dir()
    names = {p.name for p in directory.glob("*.html")}
    assert {"base.html", "report.html", "_verdict.html", "_roofline.html", "_findings.html"} <= names
    env = html.environment(directory)
    assert env.autoescape is True
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"


def test_evidence_values_carry_units() -> None:
    assert html.evidence_value("wait_ns", 2_500_000) == "2.5 ms"
    assert html.evidence_value("idle_pct", 12.345) == "12.3%"
    assert html.evidence_value("start_ns", 1_002_000_000, origin_ns=1_000_000_000) == "+2 ms"
    assert html.evidence_value("bytes", 3_000_000) == "3 MB"
    assert html.evidence_value("achieved_tflops", 12.34) == "12.3 TFLOP/s"
    assert html.evidence_value("kernels", 1234) == "1,234"
    assert html.evidence_value("flops", 2.767e10) == "27.7 GFLOP"  # never 2.767e+10
    assert html.evidence_value("peak_flops", 9.89e14) == "989 TFLOP/s"
    assert html.evidence_value("hbm_bytes_per_s", 3.35e12) == "3.35 TB/s"
    assert html.evidence_value("link_gbps", 25.0) == "25 GB/s"
    assert html.evidence_value("median_launch_us", 4.5) == "4.5 µs"
    assert html.evidence_value("p99_ms", 1.25) == "1.25 ms"
    assert html.evidence_value("mb", 4e-05) == "40 B"
    assert html.evidence_value("p99_over_p50", 2.5) == "2.5×"
    assert html.evidence_value("calls_per_step", 1.8181818) == "1.82"
    assert html.evidence_value("model_bytes", 2.767e10) == "27.7 GB"
    assert html.evidence_value("serial", True) == "yes"
    assert html.evidence_value("step_ids", [3, 4, 5]) == "3, 4, 5"
    assert html.paragraphs("one\ntwo\n\n- a\n- b") == ["one two", "- a\n- b"]


def test_evidence_is_labelled_rows_by_suffix_and_shape_never_json() -> None:
    """Fields a rule may add later (per-rank rows, a basis, a cover share) render by their name and shape."""
    finding = {
        "cover_pct": 42.25, "fix_basis": "pinned_host_memory", "idle_ns": 1_234_567, "idle_ms": 1.234567,
        "step_savings": [{"rank": 0, "step_id": 3, "bucket": "idle_host_wait", "ns": 1_200_000},
                         {"rank": 0, "step_id": 4, "bucket": "idle_bubble", "ns": 800}],
        "per_rank": [{"rank": r, "device_id": 0, "busy_ns": 10_000_000 * (r + 1), "busy_pct": 50.0 + r,
                      "wait_ns": 1_000 * r, "kernel": f"volta_sgemm_128x64_{'nn' if r else 'tn'}", "flops": 2.767e10 * (r + 1)}
                     for r in range(2)],
    }
    fields, tables = evidence.shape(finding, None)
    assert [(f.label, f.value.text) for f in fields] == [
        ("cover %", "42.2%"), ("fix basis", "pinned host memory"), ("idle", "1.23 ms")]  # idle once, in ns
    savings, per_rank = tables
    assert savings.note == "rank 0"
    assert [[c.text for c in line] for line in savings.lines] == [
        ["step 3", "idle host wait", "1.2 ms"], ["step 4", "idle bubble", "800 ns"]]
    assert per_rank.note == "GPU 0"  # what every row shares, said once
    assert [name for _, name in per_rank.columns] == ["rank", "busy", "busy %", "wait", "kernel", "flops"]
    assert [[c.text for c in row] for row in per_rank.rows] == [
        ["0", "10 ms", "50.0%", "0 ns", "volta_sgemm_128x64_tn", "27.7 GFLOP"],
        ["1", "20 ms", "51.0%", "1 µs", "volta_sgemm_128x64_nn", "55.3 GFLOP"]]
    page = html.environment().from_string('{% import "_macros.html" as m %}{{ m.evidence(e, none) }}').render(e=finding)
    assert "step 3 · idle host wait · 1.2 ms" in re.sub(r"<[^>]+>", "", page)
    assert "{" not in page and "e+" not in page and "[" not in page


@requires_shared
def test_vllm_findings_show_no_json_and_numbers_with_units(vllm: tuple[dict, str]) -> None:
    data, page = vllm
    section = re.sub(r"<[^>]+>", "", page[page.index('id="findings"'):page.index("</section>", page.index('id="findings"'))])
    assert '{"' not in section and "[{" not in section
    assert not re.search(r"\d\.\d+e[+-]\d", section)  # no exponent anywhere in the findings
    text, checked = htmllib.unescape(section), 0
    for finding in data["findings"]:
        savings = (finding.get("evidence") or {}).get("step_savings", [])
        # a bucket every row of several shares is said once, above; a single row says it inline
        varied = len({item["bucket"] for item in savings}) > 1 or len(savings) == 1
        for item in savings[:3]:
            words = [item["bucket"].replace("_", " ")] if varied else []
            assert " · ".join([f"step {item['step_id']}", *words, fmt.duration(item["ns"])]) in text
            checked += 1
    assert checked >= 6


def test_findings_and_kernels_tables_keep_saving_and_where_in_fixed_columns(sample: tuple[dict, str]) -> None:
    """Fixed layout with the saving column second and the where column fourth: a long message or kernel name
    wraps inside its column instead of pushing them off the page."""
    _, page = sample
    head = re.search(r'<table class="sortable findings-summary">.*?</thead>', page, re.S).group(0)
    assert re.findall(r"<th[^>]*>([^<]+)</th>", head)[:4] == ["#", "saving", "of span", "where"]
    assert '<col class="c-saving">' in head
    css = page[page.index("<style>"):page.index("</style>")]
    assert "table.findings-summary, table.kernels-table { table-layout: fixed; }" in css
    assert 'class="sortable kernels-table"' in page


_MEASURE = """<script>
window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("table.findings-summary tr, table.kernels-table tr").forEach(function (row) {
    var cells = row.cells, last = cells[cells.length - 1].getBoundingClientRect();
    var saving = cells[1].getBoundingClientRect();  // the saving (findings) or time (kernels) column
    out.push([Math.round(saving.right), Math.round(last.right), document.documentElement.clientWidth]);
  });
  document.body.setAttribute("data-measured", JSON.stringify(out));
});
</script></body>"""


@requires_shared
def test_saving_and_where_columns_are_on_screen_at_1400_px(vllm: tuple[dict, str], chromium: str,
                                                             tmp_path: Path) -> None:
    """In headless Chromium at 1400 px, every row of the findings and kernels tables ends inside the window."""
    _, page = vllm
    target = tmp_path / "wide.html"
    target.write_text(page.replace("</body>", _MEASURE), encoding="utf-8")
    dom = run_chromium(chromium, target, "--dump-dom", "--window-size=1400,900").stdout
    measured = json.loads(htmllib.unescape(re.search(r'data-measured="([^"]*)"', dom).group(1)))
    assert len(measured) > 10
    for saving_right, last_right, width in measured:
        assert width <= 1400 and 0 < saving_right < last_right <= width


# -- in a browser ---------------------------------------------------------------------------------


def run_chromium(binary: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium with no network at all: every host fails to resolve and the proxy is a closed port."""
    with tempfile.TemporaryDirectory() as profile:
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                   "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
                   f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
                   "--proxy-server=127.0.0.1:9", "--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0",
                   *args, page.resolve().as_uri()]
        return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def assert_charts_render(chromium: str, page: str, target: Path) -> str:
    """Open the page in headless Chromium; every chart must draw SVG marks, with no error and no CSP
    violation. Returns the rendered DOM."""
    target.write_text(page, encoding="utf-8")
    result = run_chromium(chromium, target, "--dump-dom")
    dom = result.stdout
    expected = page.count("data-chart-spec=")
    assert f'data-charts-expected="{expected}"' in dom
    assert f'data-charts-rendered="{expected}"' in dom, result.stderr[-2000:]
    assert 'data-chart-errors="0"' in dom
    assert "Refused to" not in result.stderr  # no Content-Security-Policy violation (eval, network)
    for name in re.findall(r'data-chart-spec="(\w+)"', page):
        container = re.search(rf'<div class="chart[^"]*" id="chart-{name}"(.*?)<script type="application/json"', dom, re.S)
        assert container and '<svg' in container.group(1) and 'class="marks"' in container.group(1), name
    return dom


@pytest.mark.parametrize("report", ["sample", "vllm", "no_gpu", "hostile"])
def test_charts_render_in_headless_chromium(report: str, chromium: str, request: pytest.FixtureRequest,
                                            tmp_path: Path) -> None:
    _, page = request.getfixturevalue(report)
    dom = assert_charts_render(chromium, page, tmp_path / f"{report}.html")
    assert "alert(1)" not in htmllib.unescape(re.sub(r"<[^>]+>", "", dom)) or report == "hostile"
    if report == "hostile":  # the names reached the DOM as text only: no element was created from them
        assert "<script>alert(1)" not in dom


@pytest.mark.parametrize("report", ["sample", "vllm"])
def test_screenshot(report: str, chromium: str, request: pytest.FixtureRequest) -> None:
    """A picture of the page for people to look at: tests/report/artifacts/<report>.png."""
    _, page = request.getfixturevalue(report)
    ARTIFACTS.mkdir(exist_ok=True)
    source = ARTIFACTS / f"report_{report}.html"
    source.write_text(page, encoding="utf-8")
    shot = ARTIFACTS / f"report_{report}.png"
    shot.unlink(missing_ok=True)
    run_chromium(chromium, source, f"--screenshot={shot}", "--window-size=1280,4000", "--hide-scrollbars")
    assert shot.is_file() and shot.stat().st_size > 50_000


def test_vega_bundle_is_built_once_and_then_read_from_the_cache(tmp_path, monkeypatch) -> None:
    import vl_convert

    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path))
    html.vega_javascript.cache_clear()
    built = html.vega_javascript()
    cached = tmp_path / f"vega-bundle-{vl_convert.__version__}.js"
    assert cached.read_text(encoding="utf-8") == built
    assert "vegaEmbed" in built and "</script" not in built.lower()

    def no_rebuild():
        raise AssertionError("the bundle was rebuilt although it is cached")

    monkeypatch.setattr(vl_convert, "javascript_bundle", no_rebuild)
    html.vega_javascript.cache_clear()
    assert html.vega_javascript() == built
    html.vega_javascript.cache_clear()
