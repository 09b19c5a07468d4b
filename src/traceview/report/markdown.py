"""The Markdown report: a summary that fits a GitHub PR comment (well under 60,000 characters).

Everything that comes from the trace (kernel names, NVTX text, messages) goes through `cell()`, so
a name like `<script>` or one holding `|` stays inert text in a rendered comment.
"""

from __future__ import annotations

from typing import Any

from traceview.report import evidence
from traceview.report.names import short_kernel_names
from traceview.units import duration, number, percent, size

TOP_FINDINGS = 10
TOP_KERNELS = 10
MAX_NAME = 80
EVIDENCE_ROWS = 5  # rows of each evidence list in the comment; the HTML shows more


def cell(value: Any, limit: int = MAX_NAME) -> str:
    """Inert Markdown table text: no HTML, no table breaks, no code spans, one line."""
    text = " ".join(str(value if value is not None else "").split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    for raw, safe in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "'"), ("*", "\\*"),
                      ("_", "\\_"), ("[", "\\["), ("]", "\\]")):
        text = text.replace(raw, safe)
    return text


def _time_or_none(ns: int | None) -> str:
    """A time that says 'none' rather than '0 ns'."""
    return duration(ns) if ns else "none"


def _time_cell(ns: int | None) -> str:
    """A table cell for a time: a dash rather than '0 ns'."""
    return duration(ns) if ns else "—"


def _small_percent(pct: float | None) -> str:
    """A percentage that does not read as zero when it is not: '<0.1%'."""
    return "<0.1%" if pct is not None and 0 < pct < 0.05 else percent(pct)


def _rate(gbps: float | None) -> str:
    """GB/s with one decimal, or two significant digits below 0.05 (a trickle is not '0.0')."""
    return f"{gbps:.2g}" if gbps is not None and 0 < gbps < 0.05 else number(gbps, 1)


def _where(finding: dict[str, Any]) -> str:
    """Where a finding points ('step 4, rank 0'), from its window; empty when it has none."""
    window = finding.get("window")
    if not window:
        return ""
    return (f"step {window['step_id']}, rank {window['rank']}" if window["step_id"] is not None
            else f"rank {window['rank']}, outside steps")


def _evidence_lines(index: int, finding: dict[str, Any], origin_ns: int | None) -> list[str]:
    """A finding's evidence folded under its number: labelled values with units, each list of rows one line a
    row or a small table (report/evidence.py), at most EVIDENCE_ROWS rows each."""
    fields, tables = evidence.shape(finding.get("evidence"), origin_ns, MAX_NAME)
    if not fields and not tables:
        return []
    lines = ["", f"<details><summary>#{index} {cell(finding['rule'])} evidence</summary>", ""]
    if fields:
        lines.append(" · ".join(f"{cell(f.label)} **{cell(f.value.text, 160)}**" for f in fields))
    for t in tables:
        note = f" ({cell(t.note, 200)})" if t.note else ""
        more = t.more + max(0, len(t.lines or t.rows) - EVIDENCE_ROWS)
        lines += ["", f"{cell(t.label)}{note}:", ""]
        if t.lines:
            lines += [f"- {' · '.join(cell(c.text, 120) for c in line)}" for line in t.lines[:EVIDENCE_ROWS]]
        else:
            lines += ["| " + " | ".join(cell(name) for _, name in t.columns) + " |",
                      "|" + "".join("---:|" if any(r[i].sort is not None for r in t.rows) else "---|"
                                    for i in range(len(t.columns)))]
            lines += ["| " + " | ".join(cell(c.text, 60) for c in row) + " |" for row in t.rows[:EVIDENCE_ROWS]]
        if more:
            lines.append(f"{'- ' if t.lines else ''}… and {more} more")
    return lines + ["", "</details>"]


def _busy_lines(summary: dict[str, Any]) -> list[str]:
    """Kernel busy time, copies and memsets, and communication under compute: each its own figure."""
    rows = ["| GPU work | count | busy | of active span | bytes | GB/s |", "|---|---:|---:|---:|---:|---:|",
            f"| kernels | {number(summary['kernels'])} | {duration(summary['kernel_busy_ns'])} "
            f"| {percent(summary['kernel_busy_pct'])} | | |"]
    # copies per GPU and direction (each against its own GPU's span and link), worst first: never summed
    for d in summary["copies"]["by_direction"]:
        link = f"{percent(d['pct_of_link'])} of {d['link']}" if d["pct_of_link"] is not None else "link peak not known"
        pinned = f", {d['pinned']}" if d["pinned"] else ""
        rows.append(f"| copies, {d['gpu']} {cell(d['direction'])} ({cell(link)}{pinned}) | {number(d['copies'])} "
                    f"| {duration(d['busy_ns'])} | {_small_percent(d['busy_pct'])} | {size(d['bytes'])} | {_rate(d['gbps'])} |")
    ops = summary["memsets"]
    if ops["count"]:
        rows.append(f"| memsets | {number(ops['count'])} | {duration(ops['busy_ns'])} | {_small_percent(ops['busy_pct'])} "
                    f"| {size(ops['bytes'])} | {_rate(ops['gbps'])} |")
        rows += [f"| ↳ {cell(k['copy_kind'])} | {number(k['count'])} | {duration(k['time_ns'])} | | {size(k['bytes'])} "
                 f"| {_rate(k['gbps'])} |" for k in ops["by_kind"]]
    comm = summary["communication"]
    if comm:
        total = sum(c["comm_ns"] for c in comm)
        exposed = sum(c["exposed_ns"] for c in comm)
        rows += ["", f"Communication {duration(total)} over {len(comm)} device(s): {_time_or_none(total - exposed)} under compute, "
                     f"{_time_or_none(exposed)} exposed."]
    return rows + [""]


BUDGET_COLUMNS = (("compute", "compute_ns"), ("exposed comm", "communication_ns"), ("copies only", "copy_ns"),
                  ("host wait", "idle_host_wait_ns"), ("sync drain", "idle_sync_drain_ns"),
                  ("bubbles", "idle_bubble_ns"), ("idle unknown", "idle_unknown_ns"), ("outside GPU", "outside_gpu_ns"))


def _diagnosis_lines(diagnosis: dict[str, Any]) -> list[str]:
    """Steady state, where steady step time went, and the host work under the longest GPU gaps."""
    lines = ["### Diagnosis", ""]
    for r in diagnosis["steady_state"]:
        if r["verdict"] == "steady":
            state = f"steady from step {r['first_steady_step']} ({r['steady_steps']} of {r['steps']} steps)"
        else:
            state = (f"**no steady state** ({r['steady_steps']} steady of {r['steps']} steps): profile at least "
                     f"{r['more_steps_needed']} more iterations")
        unpriced = (f"; {r['unpriced_steps']} initialisation/warm-up step{'' if r['unpriced_steps'] == 1 else 's'} "
                    f"({duration(r['unpriced_ns'])}) not priced" if r["unpriced_steps"] else "")
        lines.append(f"- Rank {r['rank']}: {state}{unpriced}")
    budget = diagnosis["time_budget"]
    if budget:
        used = [(label, key) for label, key in BUDGET_COLUMNS if any(b[key] for b in budget)]
        lines += ["", "| where steady time went | wall | " + " | ".join(label for label, _ in used) + " |",
                  "|---|---:|" + "---:|" * len(used)]
        lines += [f"| {cell(b['phase'])} ({number(b['steps'])} steps) | {duration(b['wall_ns'])} | "
                  + " | ".join(f"{duration(b[key])} ({percent(100.0 * b[key] / b['wall_ns'] if b['wall_ns'] else None)})"
                               if b[key] else "—" for _, key in used) + " |" for b in budget]
    gaps = diagnosis["gap_causes"][:3]
    if gaps:
        lines += ["", "Longest GPU idle gaps and the host work that covers them:"]
        for g in gaps:
            lines.append(f"- {duration(g['dur_ns'])} ({g['idle_kind']}) on rank {g['rank']} GPU {g['device_id']}"
                         + _gap_cover(g))
    lines.append("")
    return lines


def _gap_cover(gap: dict[str, Any]) -> str:
    """': 98% under python_frame forward (model.py:120)', or what little is known when nothing covers half the gap."""
    if gap.get("cover_name") is None:
        return ""
    what = f"{gap['cover_kind'].replace('_', ' ')} {cell(gap['cover_name'], 100)}"
    if gap.get("covered"):
        return f": {percent(gap['cover_pct'])} under {what}"
    untraced = f"{percent(gap['untraced_pct'])} untraced host time, " if gap.get("untraced_pct") is not None else ""
    return f": {untraced}the widest event {what} covers {percent(gap['cover_pct'])}"


def _trace_lines(trace: dict[str, Any], gpu: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The header: each file once with the ranks it holds, and across ranks each rank's own steps and span."""
    multi = len(trace["rank_spans"]) > 1

    def label(entry: dict[str, Any]) -> str:
        ranks = entry["ranks"]
        name = cell(entry["file"].rsplit("/", 1)[-1], 120)
        return f"{name} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if multi else name

    files = ", ".join(label(entry) for entry in trace["file_ranks"][:4])
    more = f" (+{len(trace['file_ranks']) - 4} more)" if len(trace["file_ranks"]) > 4 else ""
    gpu_line = cell(gpu.get("spec_name") or gpu.get("name") or "unknown GPU")
    span = f"{len(trace['rank_spans'])} ranks side by side over {duration(trace['span_ns'])}" if multi \
        else f"span {duration(trace['span_ns'])}"
    lines = [f"**Trace** {files}{more} · {cell(trace['format'])} {cell(trace['producer_version'] or '')} · "
             f"**GPU** {gpu_line} · {span} · {number(summary['kernels'])} kernels", ""]
    if multi:
        lines += ["**Ranks** " + " · ".join(
            f"rank {r['rank']}: {number(r['steps'])} step{'' if r['steps'] == 1 else 's'} over {duration(r['span_ns'])}"
            for r in trace["rank_spans"]), ""]
    return lines


def _phase_line(p: dict[str, Any], multi: bool) -> str:
    """A phase row; across ranks its steps and wall time per rank, never summed over ranks that ran side by side."""
    bound = f"{p['bound']} ({p['bound_source'].replace('_', ' ')})" if p["bound"] else "unknown"
    steps, wall = number(p["steps"]), duration(p["time_ns"])
    if multi:
        low, high = p["rank_steps_min"], p["rank_steps_max"]
        steps += f" ({low if low == high else f'{low}-{high}'} per rank)"
        wall = f"{duration(p['rank_time_max_ns'])} (rank {p['slowest_rank']}), mean {duration(p['rank_time_mean_ns'])}"
    return (f"| {p['phase']} | {steps} | {wall} | {_time_cell(p.get('kernel_busy_ns'))} "
            f"| {_time_cell(p.get('copy_busy_ns'))} | {bound} | {percent(p['pct_of_roof'])} "
            f"| {number(p['achieved_tbps'], 2)} | {number(p['achieved_tflops'], 1)} |")


def render(data: dict[str, Any]) -> str:
    trace, gpu, summary = data["trace"], data["gpu"], data["summary"]
    lines = [
        "## traceview report",
        "",
        *_trace_lines(trace, gpu, summary),
        *[f"> {cell(line, 400)}" for line in data["verdict"]],
        "",
    ]
    if summary["kernels"] or summary["memops"]:
        lines += _busy_lines(summary)
    if data["phases"]:
        multi = len(trace["rank_spans"]) > 1
        summed = " (Σ ranks)" if multi else ""
        lines += [f"| phase | steps | wall{' per rank: slowest, mean' if multi else ''} | kernel busy{summed} "
                  f"| copies{summed} | bound | % of roof | TB/s | TFLOP/s |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
        lines += [_phase_line(p, multi) for p in data["phases"]]
        unknown: dict[str, list[str]] = {}
        for p in data["phases"]:
            if p.get("roofline_gap"):
                unknown.setdefault(p["roofline_gap"], []).append(p["phase"])
        if unknown:
            gaps = "; ".join(f"{' and '.join(names)}: {gap}" for gap, names in unknown.items())
            lines += ["", "<sub>No roofline figure for " + cell(gaps, 600) + "</sub>"]
        lines.append("")
    findings = data["findings"]
    lines.append(f"### Findings ({len(findings)})")
    lines.append("")
    if findings:
        lines += ["| rule | severity | saving | where | finding | fix |", "|---|---|---:|---|---|---|"]
        for f in findings[:TOP_FINDINGS]:
            lines.append(f"| {f['rule']} | {f['severity']} | {_time_cell(f['estimated_saving_ns'])} | {_where(f)} "
                         f"| {cell(f['message'], 300)} | {cell(f.get('fix_summary') or '', 200)} |")
        if len(findings) > TOP_FINDINGS:
            lines.append(f"| | | | | … {len(findings) - TOP_FINDINGS} more in the HTML/JSON report | |")
        for index, f in enumerate(findings[:TOP_FINDINGS], start=1):
            lines += _evidence_lines(index, f, data["trace"].get("start_ns"))
    else:
        lines.append("No findings.")
    lines.append("")
    if summary["kernels"] or summary["memops"]:
        lines += _diagnosis_lines(data["diagnosis"])
    if data["top_kernels"]:
        lines += ["### Top kernels", "", "| kernel | category | count | time | share |", "|---|---|---:|---:|---:|"]
        top = data["top_kernels"][:TOP_KERNELS]
        short = short_kernel_names((k["name"] or k["short_name"] or "" for k in top), MAX_NAME)
        for k in top:
            lines.append(f"| {cell(short.get(k['name'] or k['short_name'] or '', k['short_name']))} "
                         f"| {cell(k['category'])} | {number(k['count'])} "
                         f"| {duration(k['time_ns'])} | {percent(k['share_pct'])} |")
        lines.append("")
    skipped = data["capture"]["skipped_rules"]
    if skipped:
        lines.append(f"<sub>{len(skipped)} rules skipped (missing data): "
                     + ", ".join(s["rule"] for s in skipped) + "</sub>")
    lines.append(f"<sub>traceview {data['generator']['version']}</sub>")
    return "\n".join(lines) + "\n"
