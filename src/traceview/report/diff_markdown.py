"""`traceview diff` as Markdown for a PR comment: the verdict and its headline first, then comparability,
phases with their intervals, what moved, categories, kernels and findings.

The conclusion is the diff's own (`traceview.diff.conclude`), the same lines the HTML page shows. The
comment stays under GitHub's 65,536-character limit: long tables are cut with a count of what was left.
"""

from __future__ import annotations

from typing import Any

from traceview.report.markdown import cell
from traceview.units import duration, interval, number, percent, signed_duration, signed_percent

MAX_KERNELS = 30
MAX_CATEGORIES = 15
MAX_FINDINGS = 10
PART_NAMES = {"kernels": "GPU kernels", "idle": "GPU idle in the step", "copies": "copies alone",
              "outside_gpu": "outside GPU work"}
BADGES = {"regression": "🔴 Regression", "improvement": "🟢 Improvement", "neutral": "⚪ Neutral",
          "inconclusive": "🟡 Inconclusive"}


def _runs(side: dict[str, Any]) -> str:
    names = [f.rsplit("/", 1)[-1] for run in side["runs"] for f in run["files"]]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    count = len(side["runs"])
    return f"{count} run{'s' if count != 1 else ''} ({cell(shown, 200)})"


def _phases(diff: dict[str, Any]) -> list[str]:
    level = f"{100 * diff['thresholds']['confidence']:g}%"
    lines = [f"| phase | runs | steps | median step | change [{level} CI] | p90 change [{level} CI] | p | verdict | % of roof |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for p in diff["phases"]:
        b, h = p["base"], p["head"]
        p_value = "n/a" if p["p_value"] is None else f"{p['p_value']:.3g}"
        lines.append(f"| {cell(p['phase'])} | {b['runs']} → {h['runs']} | {b['steps']} → {h['steps']} "
                     f"| {duration(b['median_ns'])} → {duration(h['median_ns'])} "
                     f"| {signed_percent(p['median_change_pct'])} {interval(p['median_interval_pct'])} "
                     f"| {signed_percent(p['p90_change_pct'])} {interval(p['p90_interval_pct'])} | {p_value} "
                     f"| **{p['verdict']}** | {percent(p['base_pct_of_roof'])} → {percent(p['head_pct_of_roof'])} |")
    return lines + ["", *(f"- {cell(p['phase'])}: {cell(p['reason'], 400)}" for p in diff["phases"]), ""]


def _attribution(diff: dict[str, Any]) -> list[str]:
    lines = ["### What moved (mean step per phase; the parts add up to the change)", ""]
    shown = False
    for p in diff["phases"]:
        split = p["attribution"]
        if split is None:
            continue
        shown = True
        lines += [f"**{cell(p['phase'])}**: mean step {duration(split['base_mean_step_ns'])} → "
                  f"{duration(split['head_mean_step_ns'])} ({signed_duration(split['delta_ns'])})", "",
                  "| part | base | head | change |", "|---|---:|---:|---:|"]
        for part in split["parts"]:
            lines.append(f"| {PART_NAMES[part['name']]} | {duration(part['base_ns'])} | {duration(part['head_ns'])} "
                         f"| {signed_duration(part['delta_ns'])} |")
        for family in split["families"][:5]:
            if family["delta_ns"]:
                label = f"{family['name']} ({family['category']})" if family["category"] else family["name"]
                lines.append(f"| · {cell(label, 120)} | {duration(family['base_ns'])} | {duration(family['head_ns'])} "
                             f"| {signed_duration(family['delta_ns'])} |")
        lines.append("")
    return lines if shown else []


def _per_launch(k: dict) -> str:
    """The per-launch median change with its interval, or why there is none."""
    if k.get("median_change_pct") is not None:
        return f"{signed_percent(k['median_change_pct'])} {interval(k.get('median_interval_pct'))}"
    return "total time only" if k.get("basis") == "total_time" else "—"


def _launches(k: dict) -> str:
    """Launches a run, base → head, with the change."""
    text = f"{number(k['base_count'])} → {number(k['head_count'])}"
    return text + (f" ({signed_percent(k['count_change_pct'])})" if k.get("count_change_pct") else "")


def _decomposition(k: dict) -> str:
    """The delta as launch-count effect + per-launch effect."""
    if k.get("count_effect_ns") is None:
        return "—"
    return f"{signed_duration(k['count_effect_ns'])} + {signed_duration(k['per_launch_effect_ns'])}"


def _throughput(diff: dict[str, Any]) -> list[str]:
    """The throughput row of window-bounded captures (docs/ci.md, fixed-window captures), or nothing."""
    window = diff.get("throughput")
    if not window:
        return []
    row = (f"**Throughput** (fixed {duration(window['window_ns'])} windows, basis: {window['basis']}): "
           f"{number(window['base_per_s'], 1)} → {number(window['head_per_s'], 1)} {window['unit']} "
           f"({signed_percent(window['change_pct'])} {interval(window['interval_pct'])}, {cell(window['method'], 200)}); "
           "fewer per second is the regression, whatever GPU busy time did.")
    return [row, "", *_per_unit(window.get("per_unit"))]


def _per_unit(split: dict[str, Any] | None) -> list[str]:
    """Capture time per unit of work in parts that add up to it (fixed-window captures)."""
    if not split:
        return []
    names = {**PART_NAMES, "outside_phase": f"outside the {split['phase']} steps"}
    lines = [f"| part of the capture time per {split['unit']} ({cell(split['phase'])}) | base | head | change |",
             "|---|---:|---:|---:|"]
    for part in split["parts"]:
        lines.append(f"| {names.get(part['name'], part['name'])} | {duration(part['base_ns'])} | {duration(part['head_ns'])} "
                     f"| {signed_duration(part['delta_ns'])} |")
    lines.append(f"| **total** | {duration(split['base_ns'])} | {duration(split['head_ns'])} | {signed_duration(split['delta_ns'])} |")
    return lines + [""]


def render(diff: dict[str, Any]) -> str:
    base, head = diff["base"], diff["head"]
    gpu = (f"GPU changed: **{cell(base['gpu'])}** → **{cell(head['gpu'])}**" if diff["gpu_changed"]
           else f"GPU: {cell(head['gpu'])}")
    conclusion = diff["conclusion"]
    comparable = diff["comparability"]
    lines = [
        "## traceview diff",
        "",
        f"base {_runs(base)} → head {_runs(head)} · {gpu}",
        "",
        f"**{BADGES[diff['verdict']]}** · {cell(diff['headline'], 400)}",
        "",
        *_throughput(diff),
        *(f"- {cell(line['text'], 600)}" for line in conclusion["lines"]),
        "",
        "<details><summary>Comparability " + f"{100 * comparable['score']:.0f}%"
        + ("" if comparable["comparable"] else ": not comparable, so no conclusion is drawn") + "</summary>",
        "",
        *(f"- {'✓' if c['passed'] else '✗'} {c['check']}: {cell(c['detail'], 300)}" for c in comparable["checks"]),
        "",
        "</details>",
        "",
    ]
    if diff["phases"]:
        lines += _phases(diff) + _attribution(diff)
    changed = [c for c in diff["categories"] if c["delta_ns"]]
    if changed:
        lines += ["### Kernel time by category (a run)", "", "| category | base | head | change |", "|---|---:|---:|---:|"]
        for c in changed[:MAX_CATEGORIES]:
            lines.append(f"| {cell(c['category'])} | {duration(c['base_time_ns'])} | {duration(c['head_time_ns'])} "
                         f"| {signed_percent(c['change_pct'])} |")
        if len(changed) > MAX_CATEGORIES:
            lines.append(f"| {len(changed) - MAX_CATEGORIES} more categories | | | |")
        lines.append("")
    kernels = diff["kernels"]
    lines += [f"### Kernels that changed ({len(kernels)})", ""]
    if kernels:
        lines += ["| kernel | category | status | base | head | change | per launch (median) | launches | "
                  "delta = count + per launch |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for k in kernels[:MAX_KERNELS]:
            lines.append(f"| {cell(k['kernel'])} | {cell(k['category'])} | {k['status']} | {duration(k['base_time_ns'])} "
                         f"| {duration(k['head_time_ns'])} | {signed_percent(k['change_pct'])} | {_per_launch(k)} "
                         f"| {_launches(k)} | {_decomposition(k)} |")
        if len(kernels) > MAX_KERNELS:
            lines.append(f"| {len(kernels) - MAX_KERNELS} more families (see the JSON or HTML diff) | | | | | | | | |")
        lines += ["", "Slower or faster: the median launch time moved beyond the threshold with an interval that "
                  "excludes zero; count: only the number of launches moved. Delta = (launches head − base) × base mean "
                  "launch time + head launches × (head − base mean launch time)."]
    else:
        lines.append("No kernel family changed beyond the threshold.")
    new, fixed = diff["findings"]["new"], diff["findings"]["fixed"]
    lines += ["", f"### Findings: {len(new)} new, {len(fixed)} fixed", ""]
    lines += [f"- new {f['rule']} ({f['severity']}): {cell(f['message'], 300)}" for f in new[:MAX_FINDINGS]]
    lines += [f"- fixed {f['rule']}: {cell(f['message'], 300)}" for f in fixed[:MAX_FINDINGS]]
    if len(new) + len(fixed) > 2 * MAX_FINDINGS:
        lines.append("- … the rest in the JSON diff")
    return "\n".join(lines) + "\n"
