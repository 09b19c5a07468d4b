"""ReportData: everything a report shows, built once from the analysed database and the rule results.

Renderers (HTML, Markdown, JSON) only format this plain, JSON-ready dict; none of them queries the
trace. The JSON report is this dict verbatim (docs/report-json.md), so a saved report can be
rendered again or compared without the trace.
"""

from __future__ import annotations

from typing import Any

import duckdb

from traceview.analysis.intervals import busy_time_sql
from traceview.model.db import dict_rows
from traceview.rules.engine import CheckResult

SCHEMA_VERSION = 1
TOP_KERNELS = 25
ROOFLINE_KERNEL_POINTS = 300
PHASE_ORDER = ("prefill", "decode", "mixed", "unknown", "empty", "other")


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, Any]:
    rows = dict_rows(con, sql)
    return rows[0] if rows else {}


def _trace(con) -> dict[str, Any]:
    files = dict_rows(con, "SELECT rank, file, source_format, producer, producer_version, schema_version, world_size, "
                       "time_base, start_ns, end_ns FROM trace_info ORDER BY rank")
    first = files[0] if files else {}
    starts = [f["start_ns"] for f in files if f["start_ns"] is not None]
    ends = [f["end_ns"] for f in files if f["end_ns"] is not None]
    return {
        "files": [f["file"] for f in files],
        "format": first.get("source_format"),
        "producer": first.get("producer"),
        "producer_version": first.get("producer_version"),
        "schema_version": first.get("schema_version"),
        "ranks": [f["rank"] for f in files],
        "world_size": first.get("world_size"),
        "time_base": first.get("time_base"),
        "start_ns": min(starts) if starts else None,
        "end_ns": max(ends) if ends else None,
        "span_ns": (max(ends) - min(starts)) if starts and ends else None,
    }


def _gpu(con) -> dict[str, Any]:
    """The GPU that ran the most kernel time, with its spec's peaks."""
    gpu = _one(con, """
        SELECT d.name, d.spec_id, s.name AS spec_name, s.hbm_bytes_per_s / 1e12 AS hbm_tbps, d.sm_count,
               d.memory_bytes, count(DISTINCT (d.rank, d.device_id)) OVER () AS devices_used
        FROM kernels k JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
        GROUP BY d.name, d.spec_id, s.name, s.hbm_bytes_per_s, d.sm_count, d.memory_bytes, d.rank, d.device_id
        ORDER BY sum(k.dur_ns) DESC LIMIT 1""")
    if gpu.get("spec_id"):
        peaks = dict_rows(con, "SELECT dtype, peak_flops / 1e12 AS tflops FROM gpu_peaks WHERE spec_id = ? ORDER BY peak_flops DESC",
                      [gpu["spec_id"]])
        gpu["peak_tflops"] = {p["dtype"]: p["tflops"] for p in peaks}
        bf16 = gpu["peak_tflops"].get("bf16") or gpu["peak_tflops"].get("fp16")
        gpu["ridge_bf16"] = bf16 / gpu["hbm_tbps"] if bf16 and gpu["hbm_tbps"] else None
    else:
        gpu["peak_tflops"], gpu["ridge_bf16"] = {}, None
    return gpu


def _summary(con) -> dict[str, Any]:
    activity = "SELECT rank, device_id, start_ns, end_ns FROM kernels UNION ALL SELECT rank, device_id, start_ns, end_ns FROM memops"
    summary = _one(con, f"""
        WITH spans AS (SELECT rank, device_id, max(end_ns) - min(start_ns) AS span_ns FROM ({activity}) GROUP BY ALL),
             busy AS ({busy_time_sql(activity, ("rank", "device_id"))})
        SELECT (SELECT count(*) FROM kernels) AS kernels,
               (SELECT coalesce(sum(dur_ns), 0) FROM kernels)::BIGINT AS kernel_time_ns,
               (SELECT count(*) FROM memops) AS memops,
               (SELECT count(*) FROM kernels WHERE launch_kind = 'graph') AS graph_kernels,
               (SELECT count(*) FROM steps) AS steps,
               coalesce(sum(b.busy_ns), 0)::BIGINT AS gpu_busy_ns,
               coalesce(sum(s.span_ns), 0)::BIGINT AS gpu_span_ns,
               100.0 * (1 - sum(b.busy_ns) / nullif(sum(s.span_ns), 0)) AS gpu_idle_pct
        FROM spans s JOIN busy b USING (rank, device_id)""")
    return summary


def _phases(con) -> list[dict[str, Any]]:
    phases = dict_rows(con, """
        SELECT p.phase, sum(p.steps)::BIGINT AS steps, sum(p.wall_ns)::BIGINT AS time_ns,
               sum(p.gpu_busy_ns)::BIGINT AS gpu_busy_ns, sum(p.kernel_time_ns)::BIGINT AS kernel_time_ns,
               sum(p.flops) AS flops, sum(p.bytes) AS bytes,
               avg(p.achieved_tflops) AS achieved_tflops, avg(p.achieved_tbps) AS achieved_tbps,
               avg(p.arithmetic_intensity) AS arithmetic_intensity, avg(p.ridge) AS ridge,
               any_value(p.bound) AS bound, any_value(p.bound_source) AS bound_source, avg(p.pct_of_roof) AS pct_of_roof,
               sum(a.roofline_floor_ns)::BIGINT AS roofline_ns, sum(a.kernel_inefficiency_ns)::BIGINT AS kernel_inefficiency_ns,
               sum(a.gpu_idle_ns)::BIGINT AS idle_ns, sum(a.outside_gpu_ns)::BIGINT AS outside_gpu_ns,
               any_value(a.dominant_term) AS dominant_term
        FROM phase_summary p
        LEFT JOIN (SELECT rank, phase, sum(roofline_floor_ns) AS roofline_floor_ns,
                          sum(kernel_inefficiency_ns) AS kernel_inefficiency_ns, sum(gpu_idle_ns) AS gpu_idle_ns,
                          sum(outside_gpu_ns) AS outside_gpu_ns, mode(dominant_term) AS dominant_term
                   FROM step_accounting GROUP BY ALL) a USING (rank, phase)
        GROUP BY p.phase""")
    return sorted(phases, key=lambda p: PHASE_ORDER.index(p["phase"]) if p["phase"] in PHASE_ORDER else 99)


def _steps(con) -> list[dict[str, Any]]:
    return dict_rows(con, """
        SELECT row_number() OVER (ORDER BY rank, step_id) - 1 AS index, rank, step_id, phase, phase_source,
               confidence, start_ns, end_ns, end_ns - start_ns AS wall_ns, gpu_time_ns, kernels,
               struct_pack(prefill := prefill_tokens, decode := decode_tokens) AS tokens, name
        FROM steps ORDER BY rank, step_id""")


def _top_kernels(con) -> list[dict[str, Any]]:
    return dict_rows(con, f"""
        SELECT k.short_name, any_value(k.name) AS name, any_value(k.category) AS category, any_value(k.dtype) AS dtype,
               count(*) AS count, sum(k.dur_ns)::BIGINT AS time_ns,
               100.0 * sum(k.dur_ns) / (SELECT sum(dur_ns) FROM kernels) AS share_pct,
               median(k.dur_ns)::BIGINT AS median_ns,
               sum(k.flops) / nullif(sum(k.dur_ns) FILTER (WHERE k.flops IS NOT NULL), 0) / 1e3 AS achieved_tflops,
               sum(k.bytes) / nullif(sum(k.dur_ns) FILTER (WHERE k.bytes IS NOT NULL), 0) / 1e3 AS achieved_tbps,
               string_agg(DISTINCT k.phase, ', ' ORDER BY k.phase) AS phases
        FROM kernels k GROUP BY k.short_name ORDER BY time_ns DESC, k.short_name LIMIT {TOP_KERNELS}""")


def _kernel_families(con) -> list[dict[str, Any]]:
    """Every kernel family (short name and category) with its time: what `traceview diff` compares."""
    return dict_rows(con, """
        SELECT short_name, category, count(*) AS count, sum(dur_ns)::BIGINT AS time_ns,
               string_agg(DISTINCT phase, ', ' ORDER BY phase) AS phases
        FROM kernels GROUP BY short_name, category ORDER BY time_ns DESC, short_name, category""")


def _categories(con) -> list[dict[str, Any]]:
    return dict_rows(con, """
        SELECT phase, category, kernels, time_ns, 100.0 * time_ns / sum(time_ns) OVER (PARTITION BY phase) AS share_of_phase_pct
        FROM (SELECT phase, category, count(*) AS kernels, sum(dur_ns)::BIGINT AS time_ns FROM kernels GROUP BY ALL)
        ORDER BY phase, time_ns DESC""")


def _roofline(con) -> dict[str, Any]:
    """Points for the roofline chart: phases, categories, and the longest kernels (sampled, never all)."""
    kernels = dict_rows(con, f"""
        SELECT name, category, phase, dtype, dur_ns, arithmetic_intensity, achieved_tflops, achieved_tbps, bound, pct_of_roof
        FROM roofline_kernels WHERE arithmetic_intensity > 0 AND achieved_tflops > 0
        ORDER BY dur_ns DESC LIMIT {ROOFLINE_KERNEL_POINTS}""")
    categories = dict_rows(con, """
        SELECT category, sum(time_ns)::BIGINT AS time_ns, sum(flops) / sum(bytes) AS arithmetic_intensity,
               sum(flops) / sum(costed_time_ns) / 1e3 AS achieved_tflops, avg(pct_of_roof) AS pct_of_roof
        FROM roofline_by_category WHERE flops > 0 AND bytes > 0 GROUP BY category""")
    phases = dict_rows(con, """
        SELECT phase, sum(flops) / sum(bytes) AS arithmetic_intensity,
               sum(flops) / sum(costed_time_ns) / 1e3 AS achieved_tflops, avg(pct_of_roof) AS pct_of_roof
        FROM roofline_by_phase WHERE flops > 0 AND bytes > 0 GROUP BY phase""")
    return {"kernels": kernels, "categories": categories, "phases": phases}


def _capture(con, result: CheckResult) -> dict[str, Any]:
    diagnostics = dict_rows(con, """
        SELECT rank, source, severity, code, message, count(*) AS occurrences FROM diagnostics
        GROUP BY rank, source, severity, code, message ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, rank, code, message""")
    return {"diagnostics": diagnostics, "skipped_rules": [s.to_dict() for s in result.skipped]}


def _verdict(data: dict[str, Any]) -> list[str]:
    """Three lines: where the time went, which wall each phase hits, the top finding."""
    summary, phases, findings = data["summary"], data["phases"], data["findings"]
    if not summary["kernels"]:
        return ["The trace holds no GPU kernels: nothing about GPU time can be measured.",
                "See capture health below for what the capture reported.",
                f"Top finding: {findings[0]['message']}" if findings else "No findings."]
    busy_pct = 100 - (summary["gpu_idle_pct"] or 0)
    top = max((p for p in phases if p["phase"] != "empty"), key=lambda p: p["gpu_busy_ns"] or 0, default=None)
    where = (f"GPU busy {busy_pct:.1f}% of its active span; "
             + (f"{top['phase']} steps take {100 * (top['gpu_busy_ns'] or 0) / max(sum(p['gpu_busy_ns'] or 0 for p in phases), 1):.0f}% of GPU time."
                if top else "no steps were found."))
    walls = []
    for phase in phases:
        if phase["bound"]:
            roof = f" at {phase['pct_of_roof']:.0f}% of its roof" if phase["pct_of_roof"] is not None else ""
            walls.append(f"{phase['phase']} is {phase['bound']}-bound{roof} ({phase['bound_source'].replace('_', ' ')})")
    wall = "; ".join(walls) + "." if walls else "No phase could be placed against the roofline."
    top_finding = (f"Top finding: {findings[0]['message']} (up to {findings[0]['estimated_saving_ns'] / 1e6:.1f} ms)"
                   if findings else "No findings.")
    return [where, wall[0].upper() + wall[1:], top_finding]


def build_report(con: duckdb.DuckDBPyConnection, result: CheckResult, version: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generator": {"name": "traceview", "version": version},
        "trace": _trace(con),
        "gpu": _gpu(con),
        "summary": _summary(con),
        "phases": _phases(con),
        "steps": _steps(con),
        "top_kernels": _top_kernels(con),
        "kernel_families": _kernel_families(con),
        "categories": _categories(con),
        "roofline": _roofline(con),
        "findings": [f.to_dict() for f in result.findings],
        "capture": _capture(con, result),
    }
    data["summary"]["span_ns"] = data["trace"]["span_ns"]
    data["verdict"] = _verdict(data)
    return data
