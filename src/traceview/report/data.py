"""ReportData: everything a report shows, built once from the analysed database and the rule results.

Renderers (HTML, Markdown, JSON) only format this plain, JSON-ready dict; none of them queries the
trace. The JSON report is this dict verbatim (docs/report-json.md), so a saved report can be
rendered again or compared without the trace.
"""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any, Callable

import duckdb

from traceview import profiling
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
NO_ROOF_WORDS = {
    "no_gpu_spec": "no GPU spec matched; pass --gpu",
    "no_shapes": "no shapes recorded; profile with record_shapes=True (emit_nvtx(record_shapes=True) under nsys)",
    "costs_rejected": "every modelled cost was physically impossible and was rejected (see diagnostics)",
    "low_coverage": "too little of the kernel time has costs",
    "model_exceeds_measured": "the --model floor is above the measured GPU time: the options do not describe this run",
}


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> dict[str, Any]:
    rows = dict_rows(con, sql, params)
    return rows[0] if rows else {}


def _trace(con) -> dict[str, Any]:
    """The files and their ranks. Each file is listed once (one nsys export can hold every rank), and each rank
    has its own span and steps (`rank_spans`): ranks run side by side, so their times never add up."""
    files = dict_rows(con, "SELECT rank, file, source_format, producer, producer_version, schema_version, world_size, "
                       "time_base, start_ns, end_ns FROM trace_info ORDER BY rank")
    first = files[0] if files else {}
    starts = [f["start_ns"] for f in files if f["start_ns"] is not None]
    ends = [f["end_ns"] for f in files if f["end_ns"] is not None]
    file_ranks = dict_rows(con, "SELECT * FROM trace_files")
    rank_spans = dict_rows(con, "SELECT * FROM rank_spans ORDER BY rank")
    return {
        "files": [f["file"] for f in file_ranks],
        "file_ranks": file_ranks,
        "rank_spans": rank_spans,
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
    # the copy KPI: per GPU and direction, since H2D, D2H and D2D cross different links and GPUs run side by
    # side; the worst (largest share of its GPU's span) is the headline, never an average or a sum
    directions = dict_rows(con, """
        SELECT * FROM copy_direction_shares
        ORDER BY busy_pct DESC NULLS LAST, busy_ns DESC, rank, device_id, direction""")
    ranks = {d["rank"] for d in directions}
    for d in directions:
        d["gpu"] = f"GPU {d['device_id']}" + (f" (rank {d['rank']})" if len(ranks) > 1 else "")
        # floored to 0.01 %: 99.996 % pinned must not read as all of it
        d["pinned"] = (None if d["pinned_pct"] is None else "none pinned" if d["pinned_pct"] == 0
                       else f"{math.floor(d['pinned_pct'] * 100) / 100:.2f}".rstrip("0").rstrip(".") + "% pinned")
    summary["copies"]["by_direction"] = directions
    summary["copies"]["worst"] = directions[0] if directions else None
    summary["memsets"] = _memops(con, "memset", summary.get("gpu_span_ns"))
    summary["communication"] = _communication(con)
    return summary


def _memops(con, kind: str, span_ns: int | None) -> dict[str, Any]:
    """Copies (or memsets): count, busy time (union per device), bytes, achieved GB/s, per copy_kind."""
    total = _one(con, "SELECT count, busy_ns, time_ns, bytes, gbps FROM memop_totals WHERE kind = ?", [kind])
    total["busy_pct"] = 100.0 * total["busy_ns"] / span_ns if total["busy_ns"] is not None and span_ns else None
    total["by_kind"] = dict_rows(con, "SELECT copy_kind, count, time_ns, bytes, gbps FROM memop_kind_totals "
                                      "WHERE kind = ? ORDER BY time_ns DESC, copy_kind", [kind])
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
    """Per phase over all ranks (`phase_totals`), with why a phase has no % of roof in words, and its time per
    rank: the ranks ran side by side, so `time_ns` (summed over them) is no wall time, but the slowest rank's
    (`rank_time_max_ns`) bounds the job's and the mean (`rank_time_mean_ns`) is a typical rank's."""
    phases = dict_rows(con, "SELECT t.*, r.* EXCLUDE (phase) FROM phase_totals t LEFT JOIN phase_rank_times r USING (phase)")
    for phase in phases:
        phase["roofline_gap"] = _phase_gap(phase)
        del phase["no_roof_reason"]
    return sorted(phases, key=lambda p: PHASE_ORDER.index(p["phase"]) if p["phase"] in PHASE_ORDER else 99)


def phase_time_words(phase: dict[str, Any]) -> str:
    """A phase's steps and time as an engineer reads them: '2 steps, 1.94 s' on one rank; across ranks the
    steps per rank and the slowest rank's time, since summed time over ranks that ran side by side is no wall time."""
    if (phase.get("ranks") or 1) == 1:
        return f"{phase['steps']} step{'' if phase['steps'] == 1 else 's'}, {duration(phase['time_ns'])}"
    low, high = phase["rank_steps_min"], phase["rank_steps_max"]
    steps = (f"{low} step{'' if low == 1 else 's'} on each of {phase['ranks']} ranks" if low == high
             else f"{low}-{high} steps per rank on {phase['ranks']} ranks")
    return (f"{steps}, {duration(phase['rank_time_max_ns'])} on rank {phase['slowest_rank']}, the slowest, "
            f"{duration(phase['rank_time_mean_ns'])} mean")


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
    """Per phase, the priced steps' owned wall time cut into parts that add up to it (`phase_time_split`);
    `traceview diff` takes per-step means of these to say what a change in step time is made of."""
    return dict_rows(con, "SELECT * FROM phase_time_split ORDER BY phase")


def _top_kernels(con) -> list[dict[str, Any]]:
    return dict_rows(con, "SELECT * FROM kernel_family_rates ORDER BY time_ns DESC, short_name LIMIT ?", [TOP_KERNELS])


def _kernel_families(con) -> list[dict[str, Any]]:
    """Every kernel family (short name and category) with its time: what `traceview diff` compares."""
    return dict_rows(con, "SELECT * FROM kernel_families ORDER BY time_ns DESC, short_name, category")


def _categories(con) -> list[dict[str, Any]]:
    return dict_rows(con, "SELECT * FROM category_time ORDER BY phase, time_ns DESC, category")


def _roofline(con) -> dict[str, Any]:
    """Points for the roofline chart: phases, categories, and the longest kernels (sampled, never all)."""
    kernels = dict_rows(con, """
        SELECT name, category, phase, dtype, dur_ns, arithmetic_intensity, achieved_tflops, achieved_tbps, bound, pct_of_roof
        FROM roofline_kernels WHERE arithmetic_intensity > 0 AND achieved_tflops > 0
        ORDER BY dur_ns DESC, name, phase, achieved_tflops LIMIT ?""", [ROOFLINE_KERNEL_POINTS])
    categories = dict_rows(con, "SELECT * FROM roofline_category_totals ORDER BY category")
    phases = dict_rows(con, "SELECT * FROM roofline_phase_totals ORDER BY phase")
    return {"kernels": kernels, "categories": categories, "phases": phases}


def _diagnosis(con) -> dict[str, Any]:
    """What the rules' causes rest on: steady state, where step time went, engines, idle by kind with the host
    work under the gaps, launch queue depth, blocking calls and ranks side by side (docs/report-json.md)."""
    ranks = dict_rows(con, "SELECT * FROM rank_summary ORDER BY rank")
    rows = [DIAGNOSIS_ROWS]
    return {
        "steady_state": dict_rows(con, """
            SELECT s.rank, s.verdict, s.steps, s.steady_steps, s.warmup_steps, s.init_steps, s.dominant_phase,
                   s.first_steady_step, s.last_steady_step, s.non_steady_ns, s.init_ns, s.init_summary,
                   s.step_wall_ns, s.outside_init_ns,
                   s.more_steps_needed, coalesce(p.unpriced_steps, 0) AS unpriced_steps,
                   coalesce(p.unpriced_ns, 0) AS unpriced_ns
            FROM steady_state s LEFT JOIN rank_pricing p USING (rank) ORDER BY s.rank"""),
        "unsteady_steps": dict_rows(con, """
            SELECT rank, step_id, phase, state, reason, wall_ns FROM step_states WHERE state <> 'steady'
            ORDER BY rank, step_id LIMIT ?""", rows),
        "time_budget": dict_rows(con, "SELECT * FROM priced_time_by_phase ORDER BY wall_ns DESC, phase"),
        "engines": dict_rows(con, """
            SELECT rank, device_id, span_ns, kernel_ns, copy_ns, memset_ns, idle_ns, copy_only_ns, copy_only_pct,
                   compute_stream_copy_ns, side_stream_copy_ns, host_link, host_link_bytes_per_s
            FROM device_engines ORDER BY rank, device_id"""),
        "copy_directions": dict_rows(con, """
            SELECT rank, device_id, direction, copies, bytes, busy_ns, copy_only_ns, pinned_copies, pageable_copies,
                   compute_stream_copies, link, link_bytes_per_s, achieved_bytes_per_s, pct_of_link
            FROM copy_directions ORDER BY busy_ns DESC, rank, device_id, direction"""),
        "idle_by_kind": dict_rows(con, "SELECT * FROM idle_totals ORDER BY rank, device_id, idle_ns DESC, idle_kind"),
        "queue_depth": dict_rows(con, "SELECT * FROM queue_depth_totals ORDER BY launches DESC, rank, device_id, "
                                      "stream_id LIMIT ?", rows),
        "gap_causes": dict_rows(con, """
            SELECT rank, device_id, step_id, start_ns, dur_ns, idle_kind, next_op, host_call, host_call_dur_ns,
                   cpu_op, issuing_op, python_frame, user_range, covered, cover_kind, cover_name, cover_pct,
                   untraced_pct
            FROM idle_gap_context ORDER BY dur_ns DESC, rank, start_ns LIMIT ?""", rows),
        "blocking_calls": dict_rows(con, """
            SELECT rank, step_id, name, reason, start_ns, dur_ns, exposed_idle_ns, saving_ns, cpu_op, issuing_op,
                   python_frame, user_range
            FROM blocking_calls ORDER BY saving_ns DESC, dur_ns DESC, rank, start_ns LIMIT ?""", rows),
        "ranks": ranks if len(ranks) > 1 else [],
        "collective_summary": dict_rows(con, """
            SELECT rank, kind, message_bytes, workload, parallelism, calls, total_ns, mean_ns, max_ns, variability,
                   algorithm, protocol, group_size, bus_bytes_per_s, link, pct_of_link, exposed_ns, on_critical_path
            FROM collective_summary ORDER BY total_ns DESC, rank, kind LIMIT ?""", rows),
        "collectives": dict_rows(con, """
            SELECT family, name, occurrence, participants, min_dur_ns, max_dur_ns, wait_ns, last_rank, start_skew_ns
            FROM collectives WHERE wait_ns > 0 ORDER BY wait_ns DESC, family, occurrence LIMIT ?""", rows),
        "stragglers": dict_rows(con, "SELECT * FROM rank_step_skew ORDER BY skew_ns DESC, phase, ordinal LIMIT ?",
                                rows),
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


def _critical_path_words(path: dict[str, Any] | None) -> str:
    """'; its critical path is compute-bound: 74% compute, 22% host, 4% communication' (kinds of at least 1%, as
    critical_path_phase_totals has them)."""
    if not path:
        return ""
    shares = sorted(((path[f"{kind}_pct"], kind) for kind in ("compute", "host", "copy", "communication")),
                    key=lambda share: (-share[0], share[1]))
    parts = ", ".join(f"{pct:.0f}% {kind}" for pct, kind in shares if pct >= 1)
    return f"; its critical path is {path['bound']}-bound: {parts}"


def _slowest_line(summary: dict[str, Any], phases: list[dict[str, Any]],
                  critical_paths: list[dict[str, Any]]) -> str:
    """What is slow: the phase holding the most step time, how busy the GPU's SMs are, and what bounds that phase's
    critical path (critical_path_phase_totals)."""
    worst = summary["copies"]["worst"]
    copy_note = ""
    kernel_pct = summary["kernel_busy_pct"]
    if worst and worst["busy_pct"] is not None and (worst["busy_pct"] >= COPY_NOTE_PCT
                                                    or (kernel_pct is not None and worst["busy_pct"] > kernel_pct)):
        rate = f" at {worst['gbps']:.3g} GB/s" if worst["gbps"] is not None else ""
        link = f", {worst['pct_of_link']:.0f}% of {worst['link']}" if worst["pct_of_link"] is not None else ""
        pinned = f", {worst['pinned']}" if worst["pinned"] else ""
        copy_note = (f" ({worst['gpu']}'s {worst['direction']} copies fill {_share(worst['busy_pct'], 1)} of its span: "
                     f"{size(worst['bytes']) if worst['bytes'] is not None else 'sizes not recorded'}{rate}{link}{pinned})")
    busy = f"GPU busy {_share(summary['kernel_busy_pct'], 1)} of its active span with kernels{copy_note}"
    worked = [p for p in phases if p["phase"] != "empty" and p["time_ns"]]
    if not worked:
        return f"{busy}; no steps were found."
    slowest = max(worked, key=lambda p: (p["time_ns"], p["phase"]))
    total = sum(p["time_ns"] or 0 for p in phases)
    who = "Steps of no known phase" if slowest["phase"] == "unknown" else f"{slowest['phase'].capitalize()} steps"
    share = _share(100 * slowest["time_ns"] / total)
    path = next((c for c in critical_paths if c["phase"] == slowest["phase"]), None)
    return f"{who} take {share} of the step time ({phase_time_words(slowest)}){_critical_path_words(path)}; {busy}."


def _wall_line(phases: list[dict[str, Any]]) -> str:
    """Which wall: each phase's bound and how close it runs to that roof, slowest phase first; where the % of
    roof is unknown, why."""
    worked = sorted((p for p in phases if p["phase"] != "empty" and p["time_ns"]), key=lambda p: -p["time_ns"])
    walls = [f"{p['phase']} is {p['bound']}-bound"
             + (f" at {_share(p['pct_of_roof'])} of its roof" if p["pct_of_roof"] is not None else "")
             + f" ({_bound_basis(p)})" for p in worked if p["bound"]]
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


def _bound_basis(phase: dict[str, Any]) -> str:
    """The evidence a phase's wall was decided from (phase_totals.bound_source) and, where the kernels that have
    costs say otherwise, that too: they are too few to decide (under half the kernel time), not ignored."""
    basis = (phase["bound_source"] or "unknown source").replace("_", " ")
    if phase["costed_bound"] and phase["costed_bound"] != phase["bound"] and phase["coverage_pct"] is not None:
        basis += (f"; the {_share(phase['coverage_pct'])} of kernel time with costs runs "
                  f"{phase['costed_bound']}-bound")
    return basis


def _first_fix_line(findings: list[dict[str, Any]]) -> str:
    """What to do: the top finding's problem, its fix and what it could save."""
    if not findings:
        return "No rule fired: nothing to fix first."
    top = findings[0]
    title = top["title"][0].lower() + top["title"][1:] if top["title"][1:2].islower() else top["title"]
    saving = (f", up to {duration(top['estimated_saving_ns'])}"
              + (f", {_share(top['share_pct'], 1)} of the span" if top.get("share_pct") is not None else "")
              if top["estimated_saving_ns"] else ", no saving estimated")
    if top.get("at_stake_ns"):
        saving += f", {duration(top['at_stake_ns'])} at stake"
    fix = top.get("fix_summary") or ""
    fix = fix[0].lower() + fix[1:] if fix[1:2].islower() else fix  # a clause inside the line
    return f"Top finding ({top['rule']}{saving}): {title}" + (f"; fix: {fix}." if fix else ".")


MOSTLY_STARTUP_PCT = 25.0  # one-time work outside the steps that fills this share of a rank's span leads the verdict


def _startup_line(steady_state: list[dict[str, Any]], findings: list[dict[str, Any]],
                  spans: dict[int, int]) -> str | None:
    """When no rank holds a steady step and one-time work made steps initialisation: the capture is start-up, with
    the figures, what was not priced, and how to capture steady state (TV104's fix for this trace). When steps are
    steady but one-time work outside them outlasts them and fills a quarter of the rank's span (a context created
    by the first cudaMalloc, modules loaded before the loop): the capture is mostly start-up, and only the steps
    are priced."""
    if not steady_state:
        return None
    if any(r["steady_steps"] for r in steady_state) or not any(r["init_steps"] for r in steady_state):
        outside = [r for r in steady_state if r["outside_init_ns"] and r["step_wall_ns"] and spans.get(r["rank"])
                   and r["outside_init_ns"] >= r["step_wall_ns"]
                   and 100 * r["outside_init_ns"] >= MOSTLY_STARTUP_PCT * spans[r["rank"]]]
        if not outside:
            return None
        worst = max(outside, key=lambda r: (r["outside_init_ns"], -r["rank"]))
        who = f"on rank {worst['rank']}, " if len(steady_state) > 1 else ""
        steps = f"{worst['steps']} step{'' if worst['steps'] == 1 else 's'}"
        return (f"Mostly start-up: {who}{duration(worst['outside_init_ns'])} of one-time work outside the steps "
                f"({worst['init_summary']}) against {duration(worst['step_wall_ns'])} in its {steps}; findings price "
                f"the steps only, and start-up is not a steady-state cost.")
    ranks = [r for r in steady_state if r["init_steps"]]
    worst = max(ranks, key=lambda r: (r["init_ns"] or 0, -r["rank"]))
    who = f"on rank {worst['rank']}, " if len(steady_state) > 1 else ""
    steps = worst["steps"]
    states = (f"{'the only step is' if steps == 1 else f'all {steps} steps are'} initialisation" if worst["init_steps"] == steps
              else f"{worst['init_steps']} of the {steps} steps are initialisation and none is steady")
    work = (f": {duration(worst['init_ns'])} of one-time work"
            + (f" ({worst['init_summary']})" if worst["init_summary"] else "")) if worst["init_ns"] else ""
    capture = next((f["fix_summary"] for f in findings if f["rule"] == "TV104"), None)
    how = f" To measure steady state, {capture}." if capture else " Profile iterations after warm-up to measure steady state."
    return (f"Start-up, not steady state: {who}{states}{work}; no saving is priced from start-up steps "
            f"({duration(worst['unpriced_ns'])} of step time left unpriced).{how}")


def _verdict(data: dict[str, Any]) -> list[str]:
    """The first screen in three lines: what is slow (the phase with the most step time), which wall it hits
    and how far from it, and what to do first (the top finding's fix and saving). A capture of start-up only
    says so first, instead of a wall that start-up work cannot tell."""
    summary, phases, findings = data["summary"], data["phases"], data["findings"]
    first_fix = _first_fix_line(findings)
    if not summary["kernels"]:
        return ["The trace holds no GPU kernels: nothing about GPU time can be measured.",
                "See capture health below for what the capture reported.", first_fix]
    spans = {r["rank"]: r["span_ns"] for r in data["trace"]["rank_spans"]}
    startup = _startup_line(data["diagnosis"]["steady_state"], findings, spans)
    if startup:
        return [startup, _slowest_line(summary, phases, data["critical_path"]), first_fix]
    return [_slowest_line(summary, phases, data["critical_path"]), _wall_line(phases), first_fix]


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
        "rows": {table: con.execute(f"SELECT count(*) FROM {db.ident(table)}").fetchall()[0][0]
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
        "diagnosis": _diagnosis,
        "critical_path": lambda cursor: dict_rows(cursor, "SELECT * FROM critical_path_phase_totals ORDER BY phase"),
        "timeline": lambda cursor: build_timeline(cursor, focus_step),
        # the sections built from the findings come last: started early, they would hold the cursors while they
        # wait for the rules, and the sections that need no findings would wait behind them
        "findings": lambda cursor: finding_windows(cursor, [f.to_dict() for f in findings().findings]),
        "capture": lambda cursor: _capture(cursor, findings()),
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
