"""The JSON and Markdown reports: schema-valid, values equal to what `query` returns, text inert."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

import traceview
from conftest import NSYS_TRACES, KINETO_TRACES, DLRM_DIR, VLLM_H100, requires_shared, trace_id
from traceview.report import html, json_report, markdown
from traceview.report.data import build_report
from traceview.rules import RuleConfig, check, load_rules

SCHEMA = json.loads(resources.files("traceview.report").joinpath("schema.json").read_text())


def report_for(path: Path) -> tuple[traceview.Trace, dict]:
    trace = traceview.load(path).analyze()
    return trace, build_report(trace.con, check(trace.con, load_rules(), RuleConfig()), traceview.__version__)


@requires_shared
@pytest.mark.parametrize("path", NSYS_TRACES + KINETO_TRACES + [DLRM_DIR], ids=trace_id)
def test_report_json_is_schema_valid_for_every_real_trace(path: Path) -> None:
    trace, data = report_for(path)
    jsonschema.validate(json.loads(json_report.render(data)), SCHEMA)
    assert data["summary"]["kernels"] == trace.scalar("SELECT count(*) FROM kernels")
    assert data["summary"]["kernel_time_ns"] == (trace.scalar("SELECT coalesce(sum(dur_ns), 0) FROM kernels"))
    assert len(data["steps"]) == trace.scalar("SELECT count(*) FROM steps")
    assert len(markdown.render(data)) < 60_000
    page = html.render(data)
    assert len(page) < 3_000_000 and data["verdict"][0].split(":")[0] in page
    if not data["summary"]["kernels"]:
        assert "no GPU kernels" in page


@requires_shared
def test_vllm_h100_report_values() -> None:
    trace, data = report_for(VLLM_H100)
    summary = data["summary"]
    assert (summary["kernels"], summary["kernel_time_ns"], summary["graph_kernels"]) == (13_508, 233_133_565, 8_667)
    assert summary["gpu_idle_pct"] == pytest.approx(10.88, abs=0.005)  # hand-checked, no timestamp rounding
    assert data["gpu"]["spec_id"] == "h100-sxm" and data["gpu"]["peak_tflops"]["bf16"] == pytest.approx(989.4)
    phases = {p["phase"]: p for p in data["phases"]}
    assert (phases["decode"]["steps"], phases["decode"]["bound"]) == (9, "memory")
    assert [s["phase"] for s in data["steps"]] == ["prefill"] + ["decode"] * 9 + ["empty"]
    rendered = json.loads(json_report.render(data))
    query = subprocess.run(
        [sys.executable, "-m", "traceview", "query", str(VLLM_H100),
         "SELECT step_id, phase, gpu_time_ns, kernels FROM steps ORDER BY step_id", "--format", "json"],
        capture_output=True, text=True, timeout=300,
    )
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
