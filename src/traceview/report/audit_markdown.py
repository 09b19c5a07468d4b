"""The audit as Markdown: one table row per trace, the straggler view of multi-rank jobs, and the
errors; small enough for a PR comment or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from typing import Any

from traceview.report.markdown import cell
from traceview.units import duration

MAX_ROWS = 200


def _phases(row: dict) -> str:
    return ", ".join(f"{count} {phase}" for phase, count in row.get("phases", {}).items()) or "-"


def render(audit: dict[str, Any]) -> str:
    counts = audit["findings"]
    lines = [
        "## traceview audit",
        "",
        f"{audit['traces']} traces · {audit['errors']} unreadable · findings: {counts['error']} errors, "
        f"{counts['warning']} warnings, {counts['info']} info · fail on: {audit['fail_on']} · exit {audit['exit_code']}",
        "",
        "| trace | GPU | steps | phases | E | W | I | top finding |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for row in audit["rows"][:MAX_ROWS]:
        name = cell(row["path"], 90)
        if row["status"] == "error":
            lines.append(f"| {name} | | | | | | | error: {cell(row['error'], 200)} |")
            continue
        sev = row["findings_by_severity"]
        lines.append(f"| {name} | {cell(row['gpu'] or '-')} | {row['steps']} | {_phases(row)} | {sev['error']} "
                     f"| {sev['warning']} | {sev['info']} | {cell(row['top_finding'] or '-', 200)} |")
    if len(audit["rows"]) > MAX_ROWS:
        lines.append(f"| … {len(audit['rows']) - MAX_ROWS} more traces in the JSON output | | | | | | | |")
    for row in audit["rows"]:
        view = row.get("stragglers")
        if not view:
            continue
        lines += ["", f"### Ranks of {cell(row['path'], 120)}", "",
                  f"Straggler: rank {view['straggler_rank']} computes {duration(view['straggler_excess_ns'])} longer than "
                  f"the median rank; collective wait differs most on rank {view['collective_wait']['most_different_rank']} "
                  f"({duration(view['collective_wait']['most_different_ns'])} vs median "
                  f"{duration(view['collective_wait']['median_ns'])}).", "",
                  "| rank | kernels | kernel time | compute | collectives |", "|---:|---:|---:|---:|---:|"]
        for r in row["rank_rows"]:
            lines.append(f"| {r['rank']} | {r['kernels']} | {duration(r['kernel_time_ns'])} | "
                         f"{duration(r['compute_time_ns'])} | {duration(r['comm_time_ns'])} |")
    return "\n".join(lines) + "\n"
