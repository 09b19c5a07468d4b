"""ReportData: everything a report shows, built once from the analysed database and the rule results.

Renderers (HTML, Markdown, JSON) only format this plain, JSON-ready dict; none of them queries the
trace. The JSON report is this dict verbatim (docs/report-json.md), so a saved report can be
rendered again or compared without the trace.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from typing import Any, Callable

import duckdb

from traceview import profiling
from traceview.analysis.budget import BUCKETS, IDLE_KINDS
from traceview.analysis.intervals import busy_time_sql
from traceview.model import db
from traceview.model.db import dict_rows
from traceview.report.finding_windows import finding_windows
from traceview.report.style import PHASE_ORDER
from traceview.report.timeline import FocusStep, build_timeline
from traceview.rules.engine import CheckResult
from traceview.rules.loader import severity_order_sql
from traceview.units import duration, size

SCHEMA_VERSION = 1
TOP_KERNELS = 25
ROOFLINE_KERNEL_POINTS = 300
DIAGNOSIS_ROWS = 10  # rows per diagnosis table (largest first)
COPY_NOTE_PCT = 10.0  # the verdict names copy time once copies fill this share of the active span
FIX_MIN_WORDS, FIX_MAX_CHARS = 3, 120  # the verdict's one-clause fix: cut at a clause break past its third word
# the labels rule fixes give their per-profiler parts ('nsys: profile with ...'), by trace format
FIX_LABELS = {"nsys": ("nsys", "Nsight Systems"), "kineto": ("PyTorch profiler", "PyTorch")}
NO_ROOF_WORDS = {
    "no_gpu_spec": "no GPU spec matched; pass --gpu",
    "no_shapes": "no shapes recorded; profile with record_shapes=True (emit_nvtx(record_shapes=True) under nsys)",
    "costs_rejected": "every modelled cost was physically impossible and was rejected (see diagnostics)",
    "low_coverage": "too little of the kernel time has costs",
    "model_exceeds_measured": "the --model floor is above the measured GPU time: the options do not describe this run",
}


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
    """The GPU that ran the most kernel time (the analysis' busiest_device), with its spec's peaks."""
    gpu = _one(con, "SELECT name, spec_id, spec_name, hbm_tbps, sm_count, memory_bytes, devices_used FROM busiest_device")
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
    """Counts and busy time per kind of GPU work: kernels (the SMs), copies and memsets apart.

    `gpu_busy_ns` / `gpu_idle_pct` keep their schema-1 meaning (any GPU activity, kernels and memops
    together); the headline "GPU busy" is `kernel_busy_pct`, since a GPU whose copy engines move data
    while its SMs sit idle is not busy computing.
    """
    summary = _one(con, """
        SELECT (SELECT count(*) FROM kernels) AS kernels,
               (SELECT coalesce(sum(dur_ns), 0) FROM kernels)::BIGINT AS kernel_time_ns,
               (SELECT count(*) FROM memops) AS memops,
               (SELECT count(*) FROM kernels WHERE launch_kind = 'graph') AS graph_kernels,
               (SELECT count(*) FROM steps) AS steps,
               coalesce(sum(busy_ns), 0)::BIGINT AS gpu_busy_ns,
               coalesce(sum(span_ns), 0)::BIGINT AS gpu_span_ns,
               100.0 * (1 - sum(busy_ns) / nullif(sum(span_ns), 0)) AS gpu_idle_pct,
               coalesce(sum(kernel_busy_ns), 0)::BIGINT AS kernel_busy_ns,
               100.0 * sum(kernel_busy_ns) / nullif(sum(span_ns), 0) AS kernel_busy_pct
        FROM device_activity""")
    summary["copies"] = _memops(con, "memcpy", summary.get("gpu_span_ns"))
    summary["memsets"] = _memops(con, "memset", summary.get("gpu_span_ns"))
    summary["communication"] = _communication(con)
    return summary


def _memops(con, kind: str, span_ns: int | None) -> dict[str, Any]:
    """Copies (or memsets): count, busy time (union per device), bytes, achieved GB/s, per copy_kind.

    GB/s is Σbytes / Σduration over the operations whose bytes are known (1 byte/ns = 1 GB/s).
    """
    source = f"SELECT rank, device_id, start_ns, end_ns FROM memops WHERE kind = '{kind}'"
    total = _one(con, f"""
        SELECT count(*) AS count,
               CASE WHEN count(*) = 0 THEN 0 ELSE (SELECT sum(busy_ns) FROM ({busy_time_sql(source, ("rank", "device_id"))})) END::BIGINT AS busy_ns,
               CASE WHEN count(*) = 0 THEN 0 ELSE sum(dur_ns) END::BIGINT AS time_ns,
               CASE WHEN count(*) = 0 THEN 0 ELSE sum(bytes) END::BIGINT AS bytes,
               sum(bytes) / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL), 0) AS gbps
        FROM memops WHERE kind = '{kind}'""")
    total["busy_pct"] = 100.0 * total["busy_ns"] / span_ns if total["busy_ns"] is not None and span_ns else None
    total["by_kind"] = dict_rows(con, f"""
        SELECT coalesce(copy_kind, dst_kind, 'unknown') AS copy_kind, count(*) AS count, sum(dur_ns)::BIGINT AS time_ns,
               sum(bytes)::BIGINT AS bytes, sum(bytes) / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL), 0) AS gbps
        FROM memops WHERE kind = '{kind}' GROUP BY ALL ORDER BY time_ns DESC, copy_kind""")
    return total


def _communication(con) -> list[dict[str, Any]]:
    """Per device: the union of communication kernels, the part of it under non-communication kernels, the rest
    (`device_activity`, the same figures TV401 reads)."""
    return dict_rows(con, """
        SELECT rank, device_id, comm_kernels AS kernels, comm_ns, comm_ns - comm_exposed_ns AS overlapped_ns,
               comm_exposed_ns AS exposed_ns
        FROM device_activity WHERE comm_kernels IS NOT NULL ORDER BY rank, device_id""")


def _phase_gap(phase: dict[str, Any]) -> str | None:
    """Why a phase has no roofline figure, in words (phase_summary.no_roof_reason); None when it has one."""
    if phase["pct_of_roof"] is not None:
        return None
    reason = phase["no_roof_reason"]
    if reason == "low_coverage" and phase["coverage_pct"]:
        return f"too little costed: {_share(phase['coverage_pct'])} of kernel time has costs"
    return NO_ROOF_WORDS.get(reason, "no costs")


def phase_rows(con) -> list[dict[str, Any]]:
    """Per phase over all ranks; rates and % of roof as ratios of sums, NULL where no rank has the figure."""
    phases = dict_rows(con, """
        WITH model AS (
            SELECT rank, phase, sum(roofline_floor_ns) AS roofline_floor_ns,
                   sum(kernel_inefficiency_ns) AS kernel_inefficiency_ns, sum(gpu_idle_ns) AS gpu_idle_ns,
                   sum(outside_gpu_ns) AS outside_gpu_ns, mode(dominant_term) AS dominant_term,
                   sum(memory_time_ns) AS memory_time_ns, sum(compute_time_ns) AS compute_time_ns
            FROM step_accounting GROUP BY ALL
        ),
        -- the evidence a phase's % of roof comes from: measured costs where any rank has them, else the model,
        -- so ranks are pooled only over figures of one kind
        roof_sources AS (
            SELECT phase, CASE WHEN bool_or(bound_source = 'measured' AND pct_of_roof IS NOT NULL) THEN 'measured'
                               WHEN bool_or(bound_source = 'model' AND pct_of_roof IS NOT NULL) THEN 'model' END AS roof_source
            FROM phase_summary GROUP BY phase
        )
        SELECT p.phase, sum(p.steps)::BIGINT AS steps, sum(p.wall_ns)::BIGINT AS time_ns,
               sum(p.gpu_busy_ns)::BIGINT AS gpu_busy_ns, sum(p.kernel_time_ns)::BIGINT AS kernel_time_ns,
               sum(p.costed_time_ns)::BIGINT AS costed_time_ns,
               100.0 * sum(p.costed_time_ns) / nullif(sum(p.kernel_time_ns), 0) AS coverage_pct,
               sum(p.flops) AS flops, sum(p.bytes) AS bytes,
               -- Σ FLOPs over Σ time of the kernels that have FLOPs (each rank's: its FLOPs / its rate), and bytes alike
               sum(p.flops) / nullif(sum(p.flops / (p.achieved_tflops * 1e3)), 0) / 1e3 AS achieved_tflops,
               sum(p.bytes) / nullif(sum(p.bytes / (p.achieved_tbps * 1e3)), 0) / 1e3 AS achieved_tbps,
               sum(p.flops) FILTER (WHERE p.arithmetic_intensity IS NOT NULL)
                   / nullif(sum(p.bytes) FILTER (WHERE p.arithmetic_intensity IS NOT NULL), 0) AS arithmetic_intensity,
               sum(p.flops) FILTER (WHERE r.compute_floor_ns > 0) / nullif(sum(r.compute_floor_ns) / 1e9, 0)
                   / any_value(g.hbm_bytes_per_s) AS ridge,
               -- the wall, decided from the floors summed over the ranks whose % of roof is pooled (the
               -- rule of roofline_by_phase and phase_summary); else the bound most ranks have
               CASE any_value(c.roof_source)
                   WHEN 'measured' THEN CASE
                       WHEN sum(r.costed_time_ns) FILTER (WHERE p.bound_source = 'measured') IS NULL THEN NULL
                       WHEN sum(r.compute_floor_ns) FILTER (WHERE p.bound_source = 'measured') IS NULL THEN 'memory'
                       WHEN sum(r.memory_floor_ns) FILTER (WHERE p.bound_source = 'measured') IS NULL
                            OR sum(r.compute_floor_ns) FILTER (WHERE p.bound_source = 'measured')
                               >= sum(r.memory_floor_ns) FILTER (WHERE p.bound_source = 'measured') THEN 'compute'
                       ELSE 'memory' END
                   WHEN 'model' THEN CASE
                       WHEN sum(a.memory_time_ns) FILTER (WHERE p.bound_source = 'model')
                            >= sum(a.compute_time_ns) FILTER (WHERE p.bound_source = 'model') THEN 'memory'
                       ELSE 'compute' END
                   ELSE mode(p.bound) END AS bound,
               CASE WHEN any_value(c.roof_source) IS NULL THEN mode(p.bound_source) ELSE any_value(c.roof_source) END
                   AS bound_source,
               sum(p.roofline_floor_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = 'measured')::BIGINT
                   AS roofline_floor_ns,
               100.0 * sum(p.roofline_floor_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = c.roof_source)
                   / nullif(sum(p.roof_basis_ns) FILTER (WHERE p.pct_of_roof IS NOT NULL AND p.bound_source = c.roof_source), 0)
                   AS pct_of_roof,
               sum(a.roofline_floor_ns)::BIGINT AS roofline_ns, sum(a.kernel_inefficiency_ns)::BIGINT AS kernel_inefficiency_ns,
               sum(a.gpu_idle_ns)::BIGINT AS idle_ns, sum(a.outside_gpu_ns)::BIGINT AS outside_gpu_ns,
               any_value(a.dominant_term) AS dominant_term,
               mode(p.no_roof_reason) AS no_roof_reason
        FROM phase_summary p
        LEFT JOIN roofline_by_phase r USING (rank, phase)
        LEFT JOIN model a USING (rank, phase)
        LEFT JOIN roof_sources c USING (phase)
        LEFT JOIN (SELECT d.rank, any_value(s.hbm_bytes_per_s) AS hbm_bytes_per_s FROM devices d
                   JOIN gpu_specs s USING (spec_id) GROUP BY d.rank) g USING (rank)
        GROUP BY p.phase""")
    busy = _phase_busy(con)
    for phase in phases:
        phase.update(busy.get(phase["phase"], {"kernel_busy_ns": 0, "copy_busy_ns": 0}))
        phase["roofline_gap"] = _phase_gap(phase)
        del phase["no_roof_reason"]
    return sorted(phases, key=lambda p: PHASE_ORDER.index(p["phase"]) if p["phase"] in PHASE_ORDER else 99)


def _phase_busy(con) -> dict[str, dict[str, int]]:
    """Per phase: kernel busy time and copy/memset busy time, each the union per device, summed (0 when none ran)."""
    # a device whose kernels are all of one phase has that phase's busy time already (device_activity): only
    # devices that ran several phases need a union per phase
    one_phase = ("SELECT rank, device_id, any_value(phase) AS phase FROM kernels WHERE device_id IS NOT NULL "
                 "GROUP BY rank, device_id HAVING count(DISTINCT phase) = 1")
    kernels = ("SELECT rank, device_id, phase, start_ns, end_ns FROM kernels k "
               f"ANTI JOIN ({one_phase}) o ON o.rank = k.rank AND o.device_id = k.device_id")
    memops = ("SELECT m.rank, m.device_id, coalesce(s.phase, 'other') AS phase, m.start_ns, m.end_ns FROM memops m "
              "LEFT JOIN steps s ON s.rank = m.rank AND s.step_id = m.step_id")
    keys = ("rank", "device_id", "phase")
    per_phase = (
        ("kernel_busy_ns", f"""SELECT o.phase, sum(d.kernel_busy_ns)::BIGINT FROM ({one_phase}) o
                               JOIN device_activity d ON d.rank = o.rank AND d.device_id = o.device_id GROUP BY o.phase"""),
        ("kernel_busy_ns", f"SELECT phase, sum(busy_ns)::BIGINT FROM ({busy_time_sql(kernels, keys)}) GROUP BY phase"),
        ("copy_busy_ns", f"SELECT phase, sum(busy_ns)::BIGINT FROM ({busy_time_sql(memops, keys)}) GROUP BY phase"),
    )
    busy: dict[str, dict[str, int]] = {}
    for column, query in per_phase:
        for phase, ns in con.execute(query).fetchall():
            busy.setdefault(phase, {"kernel_busy_ns": 0, "copy_busy_ns": 0})[column] += ns
    return busy


def step_rows(con) -> list[dict[str, Any]]:
    """Every step; `owned_ns` (the wall time the step owns on its rank's timeline) and `priced` are what
    `traceview diff` compares, so its step times and its attribution (`phase_time_split`) add up."""
    return dict_rows(con, """
        SELECT row_number() OVER (ORDER BY s.rank, s.step_id) - 1 AS index, s.rank, s.step_id, s.phase, s.phase_source,
               s.step_source, s.confidence, s.start_ns, s.end_ns, s.end_ns - s.start_ns AS wall_ns, b.wall_ns AS owned_ns,
               st.state, b.priced, s.gpu_time_ns, s.kernels,
               struct_pack(prefill := s.prefill_tokens, decode := s.decode_tokens) AS tokens, s.name
        FROM steps s
        LEFT JOIN step_budget b ON b.rank = s.rank AND b.step_id = s.step_id
        LEFT JOIN step_states st ON st.rank = s.rank AND st.step_id = s.step_id
        ORDER BY s.rank, s.step_id""")


def phase_time_split(con) -> list[dict[str, Any]]:
    """Per phase, the priced steps' owned wall time cut into parts that add up to it: the step budget's
    compute and exposed-communication time apportioned to kernel categories and families by their kernel
    time in each step, copies alone, GPU idle by kind, and time outside GPU work. `traceview diff` takes
    per-step means of these to say what a change in step time is made of."""
    idle = " + ".join(f"b.idle_{kind}_ns" for kind in IDLE_KINDS)
    rows = dict_rows(con, f"""
        WITH priced AS (SELECT * FROM step_budget WHERE step_id IS NOT NULL AND priced),
        family AS (
            SELECT k.rank, k.step_id, k.category, k.short_name, sum(k.dur_ns) AS dur_ns,
                   k.category IS NOT DISTINCT FROM 'communication' AS communication
            FROM kernels k JOIN priced b ON b.rank = k.rank AND b.step_id = k.step_id GROUP BY ALL
        ),
        shares AS (  -- a family's share of the bucket its kind of kernel fills in its step
            SELECT f.rank, f.step_id, f.category, f.short_name,
                   CASE WHEN f.communication THEN b.communication_ns ELSE b.compute_ns END * f.dur_ns
                       / sum(f.dur_ns) OVER (PARTITION BY f.rank, f.step_id, f.communication) AS ns
            FROM family f JOIN priced b ON b.rank = f.rank AND b.step_id = f.step_id
        ),
        families AS (  -- sums of doubles in a stated order: a parallel sum's last digits follow thread timing
            SELECT s.phase, f.category, f.short_name, sum(f.ns ORDER BY f.rank, f.step_id) AS ns
            FROM shares f JOIN priced s ON s.rank = f.rank AND s.step_id = f.step_id GROUP BY ALL
        ),
        totals AS (
            SELECT b.phase, count(*) AS steps, sum(b.wall_ns)::BIGINT AS wall_ns,
                   sum(b.compute_ns + b.communication_ns)::BIGINT AS kernel_ns, sum(b.copy_ns)::BIGINT AS copy_ns,
                   {", ".join(f"sum(b.idle_{kind}_ns)::BIGINT AS idle_{kind}_ns" for kind in IDLE_KINDS)},
                   sum({idle})::BIGINT AS idle_ns, sum(b.outside_gpu_ns)::BIGINT AS outside_gpu_ns
            FROM priced b GROUP BY b.phase
        )
        SELECT t.*,
               coalesce((SELECT list(struct_pack(category := category, ns := ns) ORDER BY ns DESC, category)
                         FROM (SELECT category, sum(ns ORDER BY short_name) AS ns FROM families f
                               WHERE f.phase IS NOT DISTINCT FROM t.phase GROUP BY category)), []) AS categories,
               coalesce((SELECT list(struct_pack(short_name := short_name, category := category, ns := ns)
                                     ORDER BY ns DESC, short_name, category)
                         FROM families f WHERE f.phase IS NOT DISTINCT FROM t.phase), []) AS families
        FROM totals t ORDER BY t.phase""")
    for row in rows:  # a bucket with no kernel of its kind in the step (work of a neighbour step ran there)
        row["unattributed_kernel_ns"] = row["kernel_ns"] - sum(c["ns"] for c in row["categories"])
    return rows


def _top_kernels(con) -> list[dict[str, Any]]:
    return dict_rows(con, f"""
        WITH variants AS (  -- a family's name, category and dtype are those of its variant with the most time
            SELECT short_name, arg_max(struct_pack(name := name, category := category, dtype := dtype),
                                       (variant_ns, name)) AS top
            FROM (SELECT short_name, name, category, dtype, sum(dur_ns) AS variant_ns FROM kernels GROUP BY ALL)
            GROUP BY short_name
        )
        SELECT k.short_name, any_value(v.top.name) AS name, any_value(v.top.category) AS category,
               any_value(v.top.dtype) AS dtype,
               count(*) AS count, sum(k.dur_ns)::BIGINT AS time_ns,
               100.0 * sum(k.dur_ns) / (SELECT sum(dur_ns) FROM kernels) AS share_pct,
               median(k.dur_ns)::BIGINT AS median_ns,
               -- HBM figures from accepted costs only: an L2-resident kernel's bytes/s are not HBM bandwidth
               sum(k.flops) FILTER (WHERE k.cost_status = 'accepted')
                   / nullif(sum(k.dur_ns) FILTER (WHERE k.cost_status = 'accepted' AND k.flops IS NOT NULL), 0) / 1e3
                   AS achieved_tflops,
               sum(k.bytes) FILTER (WHERE k.cost_status = 'accepted')
                   / nullif(sum(k.dur_ns) FILTER (WHERE k.cost_status = 'accepted' AND k.bytes IS NOT NULL), 0) / 1e3
                   AS achieved_tbps,
               string_agg(DISTINCT k.phase, ', ' ORDER BY k.phase) AS phases
        FROM kernels k JOIN variants v ON v.short_name IS NOT DISTINCT FROM k.short_name
        GROUP BY k.short_name ORDER BY time_ns DESC, k.short_name LIMIT {TOP_KERNELS}""")


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
        ORDER BY phase, time_ns DESC, category""")


def _roofline(con) -> dict[str, Any]:
    """Points for the roofline chart: phases, categories, and the longest kernels (sampled, never all)."""
    kernels = dict_rows(con, f"""
        SELECT name, category, phase, dtype, dur_ns, arithmetic_intensity, achieved_tflops, achieved_tbps, bound, pct_of_roof
        FROM roofline_kernels WHERE arithmetic_intensity > 0 AND achieved_tflops > 0
        ORDER BY dur_ns DESC, name, phase, achieved_tflops LIMIT {ROOFLINE_KERNEL_POINTS}""")
    categories = dict_rows(con, """
        SELECT category, sum(time_ns)::BIGINT AS time_ns, sum(flops) / sum(bytes) AS arithmetic_intensity,
               sum(flops) / sum(flops / (achieved_tflops * 1e3)) / 1e3 AS achieved_tflops,
               100.0 * sum(roofline_floor_ns) FILTER (WHERE pct_of_roof IS NOT NULL)
                   / nullif(sum(costed_time_ns) FILTER (WHERE pct_of_roof IS NOT NULL), 0) AS pct_of_roof
        FROM roofline_by_category WHERE flops > 0 AND bytes > 0 GROUP BY category ORDER BY category""")
    phases = dict_rows(con, """
        SELECT phase, sum(flops) / sum(bytes) AS arithmetic_intensity,
               sum(flops) / sum(flops / (achieved_tflops * 1e3)) / 1e3 AS achieved_tflops,
               100.0 * sum(roofline_floor_ns) FILTER (WHERE pct_of_roof IS NOT NULL)
                   / nullif(sum(costed_time_ns) FILTER (WHERE pct_of_roof IS NOT NULL), 0) AS pct_of_roof
        FROM roofline_by_phase WHERE flops > 0 AND bytes > 0 GROUP BY phase ORDER BY phase""")
    return {"kernels": kernels, "categories": categories, "phases": phases}


def _diagnosis(con) -> dict[str, Any]:
    """What the rules' causes rest on: steady state, where step time went, engines, idle by kind with the host
    work under the gaps, launch queue depth, blocking calls and ranks side by side (docs/report-json.md)."""
    budget_sums = ", ".join(f"sum({bucket}_ns)::BIGINT AS {bucket}_ns" for bucket in BUCKETS)
    context = "cpu_op, issuing_op, python_frame, user_range"
    ranks = dict_rows(con, "SELECT * FROM rank_summary ORDER BY rank")
    return {
        "steady_state": dict_rows(con, """
            SELECT rank, verdict, steps, steady_steps, warmup_steps, init_steps, dominant_phase, first_steady_step,
                   last_steady_step, non_steady_ns, init_ns, init_summary, more_steps_needed
            FROM steady_state ORDER BY rank"""),
        "unsteady_steps": dict_rows(con, f"""
            SELECT rank, step_id, phase, state, reason, wall_ns FROM step_states WHERE state <> 'steady'
            ORDER BY rank, step_id LIMIT {DIAGNOSIS_ROWS}"""),
        "time_budget": dict_rows(con, f"""
            SELECT coalesce(phase, 'outside steps') AS phase, count(*) FILTER (WHERE step_id IS NOT NULL) AS steps,
                   sum(wall_ns)::BIGINT AS wall_ns, {budget_sums}
            FROM step_budget WHERE priced GROUP BY ALL ORDER BY wall_ns DESC, phase"""),
        "engines": dict_rows(con, """
            SELECT rank, device_id, span_ns, kernel_ns, copy_ns, memset_ns, idle_ns, copy_only_ns, copy_only_pct,
                   compute_stream_copy_ns, side_stream_copy_ns, host_link, host_link_bytes_per_s
            FROM device_engines ORDER BY rank, device_id"""),
        "copy_directions": dict_rows(con, """
            SELECT rank, device_id, direction, copies, bytes, busy_ns, copy_only_ns, pinned_copies, pageable_copies,
                   compute_stream_copies, link, link_bytes_per_s, achieved_bytes_per_s, pct_of_link
            FROM copy_directions ORDER BY busy_ns DESC, rank, device_id, direction"""),
        "idle_by_kind": dict_rows(con, """
            SELECT rank, device_id, idle_kind, sum(gaps)::BIGINT AS gaps, sum(idle_ns)::BIGINT AS idle_ns,
                   max(largest_gap_ns) AS largest_gap_ns
            FROM idle_by_kind GROUP BY ALL ORDER BY rank, device_id, idle_ns DESC, idle_kind"""),
        "queue_depth": dict_rows(con, f"""
            SELECT rank, device_id, stream_id, sum(launches)::BIGINT AS launches,
                   sum(depth_at_launch_mean * launches) / nullif(sum(launches), 0) AS depth_at_launch_mean,
                   max(depth_max) AS depth_max,
                   100.0 * sum(empty_launches) / nullif(sum(launches), 0) AS empty_launch_pct
            FROM launch_queue_depth GROUP BY ALL ORDER BY launches DESC, rank, device_id, stream_id
            LIMIT {DIAGNOSIS_ROWS}"""),
        "gap_causes": dict_rows(con, f"""
            SELECT rank, device_id, step_id, start_ns, dur_ns, idle_kind, next_op, host_call, host_call_dur_ns,
                   {context}
            FROM idle_gap_context ORDER BY dur_ns DESC, rank, start_ns LIMIT {DIAGNOSIS_ROWS}"""),
        "blocking_calls": dict_rows(con, f"""
            SELECT rank, step_id, name, reason, start_ns, dur_ns, exposed_idle_ns, saving_ns, {context}
            FROM blocking_calls ORDER BY saving_ns DESC, dur_ns DESC, rank, start_ns LIMIT {DIAGNOSIS_ROWS}"""),
        "ranks": ranks if len(ranks) > 1 else [],
        "collectives": dict_rows(con, f"""
            SELECT family, name, occurrence, participants, min_dur_ns, max_dur_ns, wait_ns, last_rank, start_skew_ns
            FROM collectives WHERE wait_ns > 0 ORDER BY wait_ns DESC, family, occurrence LIMIT {DIAGNOSIS_ROWS}"""),
        "stragglers": dict_rows(con, f"""
            SELECT phase, ordinal, any_value(slowest_rank) AS slowest_rank, any_value(skew_ns) AS skew_ns,
                   any_value(wall_skew_ns) AS wall_skew_ns, any_value(ranks) AS ranks
            FROM rank_steps WHERE skew_ns IS NOT NULL GROUP BY phase, ordinal
            ORDER BY skew_ns DESC, phase, ordinal LIMIT {DIAGNOSIS_ROWS}"""),
    }


def _capture(con, result: CheckResult) -> dict[str, Any]:
    diagnostics = dict_rows(con, """
        SELECT rank, source, severity, code, message, count(*) AS occurrences FROM diagnostics
        GROUP BY rank, source, severity, code, message ORDER BY """ + severity_order_sql("severity") + ", rank, code, message")
    return {"diagnostics": diagnostics, "skipped_rules": [s.to_dict() for s in result.skipped]}


def _share(pct: float, digits: int = 0) -> str:
    """A percentage that never reads as zero when it is not: '65%', '<1%' (digits=1: '0.4%', '<0.1%')."""
    floor = 10.0 ** -digits
    return f"<{floor:g}%" if 0 < pct < floor / 2 else f"{pct:.{digits}f}%"


def _and(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _slowest_line(summary: dict[str, Any], phases: list[dict[str, Any]]) -> str:
    """What is slow: the phase holding the most step time, and how busy the GPU's SMs are."""
    copies = summary["copies"]
    copy_note = ""
    if copies["busy_pct"] is not None and (copies["busy_pct"] > summary["kernel_busy_pct"] or copies["busy_pct"] >= COPY_NOTE_PCT):
        rate = f" at {copies['gbps']:.3g} GB/s" if copies["gbps"] is not None else ""
        copy_note = f" (copies fill {_share(copies['busy_pct'], 1)}: {size(copies['bytes'])}{rate})"
    busy = f"GPU busy {_share(summary['kernel_busy_pct'], 1)} of its active span with kernels{copy_note}"
    worked = [p for p in phases if p["phase"] != "empty" and p["time_ns"]]
    if not worked:
        return f"{busy}; no steps were found."
    slowest = max(worked, key=lambda p: (p["time_ns"], p["phase"]))
    total = sum(p["time_ns"] or 0 for p in phases)
    steps = f"{slowest['steps']} step{'' if slowest['steps'] == 1 else 's'}"
    who = "Steps of no known phase" if slowest["phase"] == "unknown" else f"{slowest['phase'].capitalize()} steps"
    share = _share(100 * slowest["time_ns"] / total)
    return f"{who} take {share} of the step time ({steps}, {duration(slowest['time_ns'])}); {busy}."


def _wall_line(phases: list[dict[str, Any]]) -> str:
    """Which wall: each phase's bound and how close it runs to that roof, slowest phase first; where the % of
    roof is unknown, why."""
    worked = sorted((p for p in phases if p["phase"] != "empty" and p["time_ns"]), key=lambda p: -p["time_ns"])
    walls = [f"{p['phase']} is {p['bound']}-bound"
             + (f" at {_share(p['pct_of_roof'])} of its roof" if p["pct_of_roof"] is not None else "")
             + f" ({(p['bound_source'] or 'unknown source').replace('_', ' ')})" for p in worked if p["bound"]]
    unknown: dict[str, list[str]] = {}
    for phase in worked:
        if phase["roofline_gap"]:
            unknown.setdefault(phase["roofline_gap"], []).append(phase["phase"])
    if not walls:
        reasons = "; ".join(unknown) if len(unknown) == 1 else "; ".join(
            f"{_and(names)}: {gap}" for gap, names in unknown.items())
        return "No phase could be placed against the roofline" + (f": {reasons}." if reasons else ".")
    gaps = [f"no % of roof for {_and(names)}: {gap}" for gap, names in unknown.items()]
    line = "; ".join([", ".join(walls)] + gaps) + "."
    return line[0].upper() + line[1:]


def _fix_summary(finding: dict[str, Any], trace_format: str | None) -> str:
    """The fix in one clause. A fix written in labelled parts ('host wait: ...', 'nsys: ...') gives the part for
    the budget bucket holding most of the finding's saving, else the part for the trace's profiler; the
    clause is cut at its first break past the opening words."""
    text = " ".join(str(finding.get("fix") or "").split())
    buckets: dict[str, int] = {}
    for claim in (finding.get("evidence") or {}).get("step_savings") or []:
        buckets[claim["bucket"]] = buckets.get(claim["bucket"], 0) + claim["ns"]
    labels = [b.removeprefix("idle_").replace("_", " ") for b in sorted(buckets, key=lambda b: (-buckets[b], b))]
    for label in labels + list(FIX_LABELS.get(trace_format or "", ())):
        part = re.search(rf"(?:^|(?<=\. )){re.escape(label)}: (.*?)(?=\. [A-Za-z][\w ]*: |$)", text)
        if part:
            text = part.group(1)
            break
    text = re.split(r"(?<=[\w)\]'`])\. (?=[A-Z])", text)[0].rstrip(".")
    breaks = [m.start() for m in re.finditer(r"; |: | \(", text) if len(text[:m.start()].split()) >= FIX_MIN_WORDS]
    text = text[:breaks[0]] if breaks else text
    if len(text) > FIX_MAX_CHARS:
        text = text[:FIX_MAX_CHARS].rsplit(" ", 1)[0] + "…"
    return text[0].lower() + text[1:] if len(text) > 1 and text[1].islower() else text


def _first_fix_line(findings: list[dict[str, Any]], trace_format: str | None) -> str:
    """What to do: the top finding's problem, its fix and what it could save."""
    if not findings:
        return "No rule fired: nothing to fix first."
    top = findings[0]
    title = top["title"][0].lower() + top["title"][1:] if top["title"][1:2].islower() else top["title"]
    saving = (f", up to {duration(top['estimated_saving_ns'])}"
              + (f", {_share(top['share_pct'], 1)} of the span" if top.get("share_pct") is not None else "")
              if top["estimated_saving_ns"] else ", no saving estimated")
    fix = _fix_summary(top, trace_format)
    return f"Top finding ({top['rule']}{saving}): {title}" + (f"; fix: {fix}." if fix else ".")


def _verdict(data: dict[str, Any]) -> list[str]:
    """The first screen in three lines: what is slow (the phase with the most step time), which wall it hits
    and how far from it, and what to do first (the top finding's fix and saving)."""
    summary, phases, findings = data["summary"], data["phases"], data["findings"]
    first_fix = _first_fix_line(findings, data["trace"]["format"])
    if not summary["kernels"]:
        return ["The trace holds no GPU kernels: nothing about GPU time can be measured.",
                "See capture health below for what the capture reported.", first_fix]
    return [_slowest_line(summary, phases), _wall_line(phases), first_fix]


def check_document(trace: str, result: CheckResult) -> dict[str, Any]:
    """What `traceview check` prints: the findings ranked, the rules skipped and why, what the baseline hid."""
    return {
        "schema_version": 1,
        "trace": trace,
        "findings": [f.to_dict() for f in result.findings],
        "skipped": [s.to_dict() for s in result.skipped],
        "rules_run": list(result.rules_run),
        "suppressed_by_baseline": result.suppressed,
    }


def trace_summary(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What `traceview info` prints: the files, the GPUs, rows per table, launch kinds, phases, diagnostics."""
    kinds = dict(con.execute("SELECT launch_kind, count(*) FROM kernels GROUP BY ALL").fetchall())
    return {
        "traces": dict_rows(con, "SELECT *, end_ns - start_ns AS span_ns FROM trace_info ORDER BY rank"),
        "devices": dict_rows(con, "SELECT * FROM devices ORDER BY rank, device_id"),
        "phases": [{"wall_ns": p["time_ns"], **p} for p in phase_rows(con)],
        "rows": {table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
                 for table in db.CONTRACT_TABLES if table != "trace_info"},
        "kernels": {"graph": kinds.get("graph", 0), "eager": kinds.get("eager", 0)},
        "diagnostics": dict_rows(con, "SELECT rank, source, severity, code, message FROM diagnostics ORDER BY "
                                      + severity_order_sql("severity") + ", rank, timestamp_ns NULLS FIRST"),
    }


def build_report(con: duckdb.DuckDBPyConnection, result: CheckResult | Future[CheckResult], version: str,
                 focus_step: FocusStep | None = None) -> dict[str, Any]:
    """ReportData; under --profile each section is a `report` step, so a slow one shows by name. `result`
    may still be running: only the sections built from the findings wait for it."""
    def findings() -> CheckResult:
        return result.result() if isinstance(result, Future) else result

    sections: dict[str, Callable[[duckdb.DuckDBPyConnection], Any]] = {
        "trace": _trace,
        "gpu": _gpu,
        "summary": _summary,
        "phases": phase_rows,
        "steps": step_rows,
        "phase_time_split": phase_time_split,
        "top_kernels": _top_kernels,
        "kernel_families": _kernel_families,
        "categories": _categories,
        "roofline": _roofline,
        "findings": lambda cursor: finding_windows(cursor, [f.to_dict() for f in findings().findings]),
        "capture": lambda cursor: _capture(cursor, findings()),
        "diagnosis": _diagnosis,
        "timeline": lambda cursor: build_timeline(cursor, focus_step),
    }

    def section(cursor: duckdb.DuckDBPyConnection, name: str) -> Any:
        with profiling.step("report", name):
            return sections[name](cursor)

    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "generator": {"name": "traceview", "version": version}}
    with profiling.overlapping("report"), db.cursor_pool(con, db.side_by_side(con)) as submit:  # they only read
        futures = {name: submit(section, name) for name in sections}
    data.update((name, future.result()) for name, future in futures.items())
    data["summary"]["span_ns"] = data["trace"]["span_ns"]
    data["verdict"] = _verdict(data)
    return data
