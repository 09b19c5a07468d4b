"""`traceview diff` as Markdown for a PR comment: the conclusion, GPU, phases, categories, kernels, findings.

The conclusion is the diff's own (`traceview.diff.conclude`), the same lines the HTML page shows.
"""

from __future__ import annotations

from typing import Any

from traceview.report.markdown import cell
from traceview.units import duration, percent, signed_percent

MAX_KERNELS = 30


def render(diff: dict[str, Any]) -> str:
    base, head = diff["base"], diff["head"]
    gpu = (f"GPU changed: **{cell(base['gpu'])}** → **{cell(head['gpu'])}**" if diff["gpu_changed"]
           else f"GPU: {cell(head['gpu'])}")
    conclusion = diff["conclusion"]
    lines = [
        "## traceview diff",
        "",
        f"base {cell(', '.join(f.rsplit('/', 1)[-1] for f in base['files']), 200)} → "
        f"head {cell(', '.join(f.rsplit('/', 1)[-1] for f in head['files']), 200)} · {gpu}",
        "",
        f"**{conclusion['status'].capitalize()}**",
        "",
        *(f"- {cell(line['text'], 400)}" for line in conclusion["lines"]),
        "",
    ]
    if diff["phases"]:
        lines += ["| phase | steps | median step | p90 step | change | verdict | % of roof |",
                  "|---|---:|---:|---:|---:|---|---:|"]
        for p in diff["phases"]:
            b, h = p["base"], p["head"]
            lines.append(f"| {p['phase']} | {b['steps']} → {h['steps']} | {duration(b['median_ns'])} → {duration(h['median_ns'])} "
                         f"| {duration(b['p90_ns'])} → {duration(h['p90_ns'])} | {signed_percent(p['median_change_pct'])} "
                         f"| {p['verdict']} | {percent(p['base_pct_of_roof'])} → {percent(p['head_pct_of_roof'])} |")
        lines.append("")
    changed = [c for c in diff["categories"] if c["delta_ns"]]
    if changed:
        lines += ["| category | base | head | change |", "|---|---:|---:|---:|"]
        for c in changed[:15]:
            lines.append(f"| {cell(c['category'])} | {duration(c['base_time_ns'])} | {duration(c['head_time_ns'])} "
                         f"| {signed_percent(c['change_pct'])} |")
        lines.append("")
    kernels = diff["kernels"]
    lines.append(f"### Kernels that changed ({len(kernels)})")
    lines.append("")
    if kernels:
        lines += ["| kernel | category | status | base | head | change |", "|---|---|---|---:|---:|---:|"]
        for k in kernels[:MAX_KERNELS]:
            lines.append(f"| {cell(k['kernel'])} | {cell(k['category'])} | {k['status']} | {duration(k['base_time_ns'])} "
                         f"| {duration(k['head_time_ns'])} | {signed_percent(k['change_pct'])} |")
    else:
        lines.append("No kernel family changed beyond the threshold.")
    new, fixed = diff["findings"]["new"], diff["findings"]["fixed"]
    lines += ["", f"### Findings: {len(new)} new, {len(fixed)} fixed", ""]
    lines += [f"- new {f['rule']} ({f['severity']}): {cell(f['message'], 300)}" for f in new[:10]]
    lines += [f"- fixed {f['rule']}: {cell(f['message'], 300)}" for f in fixed[:10]]
    return "\n".join(lines) + "\n"
