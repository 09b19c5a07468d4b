"""`traceview diff` as one self-contained HTML page: base and head side by side.

The page reuses the single-run report's machinery (``html.py``): the same Jinja environment with
autoescape, ``base.html`` (CSS, Content-Security-Policy, sortable tables, the chart script), the
``_macros.html`` chart macro (spec JSON written with ``<``, ``>``, ``&`` as ``\\u003c`` etc.) and
the inlined Vega bundle. ``templates/diff.html`` includes one ``_diff_<section>.html`` per section.

Charts: per phase, base and head step-time distributions (median dot, p10–p90 whisker); per
kernel category, the change in kernel time as a diverging bar. The verdict lines are built here in
plain words, regressions first, so the template only lays them out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from markupsafe import Markup

import traceview
from traceview.report import format as fmt
from traceview.report import html
from traceview.report.data import SCHEMA_VERSION as REPORT_SCHEMA_VERSION

NAME = "html"
EXTENSION = "html"
MAX_KERNELS = 300  # changed kernel families shown in the table; the rest are counted
RUN_COLORS = {"base": "#8c99a6", "head": "#2f6feb"}
DIRECTION_COLORS = {"more time in head": "#e45756", "less time in head": "#54a24b"}
STATUS_ORDER = {"slower": 0, "new": 1, "gone": 2, "faster": 3}
VERDICT_ORDER = {"regression": 0, "within noise": 1, "improvement": 2, "unchanged": 3}


# -- formatting ------------------------------------------------------------------------------------


def signed_percent(pct: float | None) -> str:
    """A change in percent with its sign: '+3.1%', '-100.0%', 'n/a'."""
    if pct is None:
        return "n/a"
    text = f"{pct:+.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def signed_duration(ns: float | None) -> str:
    """A time difference with its sign and unit: '+4.71 µs', '-87.6 µs', '0 ns'."""
    if ns is None:
        return "n/a"
    return ("+" if ns > 0 else "") + fmt.duration(ns)


def change_class(value: float | None) -> str:
    """CSS class for a change in time: 'up' (head takes longer), 'down' (shorter) or ''."""
    if not value:
        return ""
    return "up" if value > 0 else "down"


def _unit(max_ns: float) -> tuple[str, float]:
    """The time unit a chart axis reads best in for values up to `max_ns`."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if max_ns >= scale:
            return unit, scale
    return "ns", 1.0


def _scaled(ns: float | None, scale: float) -> float | None:
    return None if ns is None else round(ns / scale, 6)


# -- charts ----------------------------------------------------------------------------------------


def step_distributions(diff: dict[str, Any]):
    """Per phase (one row each, own x axis): base and head step time, median dot and p10–p90 whisker."""
    import altair as alt

    from traceview.report import charts

    stats = [(p, run, p[run]) for p in diff["phases"] for run in ("base", "head") if p[run]["median_ns"] is not None]
    if not stats:
        return None
    unit, scale = _unit(max(s["p90_ns"] or s["median_ns"] for _, _, s in stats))
    rows = [{"phase": p["phase"] or "none", "run": run, "steps": s["steps"], "median": _scaled(s["median_ns"], scale),
             "p10": _scaled(s["p10_ns"], scale), "p90": _scaled(s["p90_ns"], scale),
             "spread_pct": round(s["spread_pct"], 2) if s["spread_pct"] is not None else None,
             "change_pct": round(p["median_change_pct"], 2) if p["median_change_pct"] is not None else None,
             "verdict": p["verdict"]}
            for p, run, s in stats]
    phases = charts._ordered_phases([r["phase"] for r in rows])
    runs = [r for r in ("base", "head") if any(row["run"] == r for row in rows)]
    color = alt.Color("run:N", title=None, sort=runs, legend=alt.Legend(orient="top"),
                      scale=alt.Scale(domain=runs, range=[RUN_COLORS[r] for r in runs]))
    y = alt.Y("run:N", sort=["base", "head"], title=None, axis=alt.Axis(labelFontWeight="bold", ticks=False))
    x = alt.X("p10:Q", title=f"step time ({unit}): median, p10–p90", scale=alt.Scale(zero=True),
              axis=alt.Axis(tickCount=8))
    tooltip = [alt.Tooltip("phase:N"), alt.Tooltip("run:N"), alt.Tooltip("steps:Q", format=","),
               alt.Tooltip("median:Q", title=f"median {unit}", format=",.3f"),
               alt.Tooltip("p10:Q", title=f"p10 {unit}", format=",.3f"),
               alt.Tooltip("p90:Q", title=f"p90 {unit}", format=",.3f"),
               alt.Tooltip("spread_pct:Q", title="spread (CV %)", format=".1f"),
               alt.Tooltip("change_pct:Q", title="median change %", format="+.1f"), alt.Tooltip("verdict:N")]
    whisker = alt.Chart().mark_rule(strokeWidth=2.5).encode(x=x, x2="p90:Q", y=y, color=color, tooltip=tooltip)
    low = alt.Chart().mark_tick(thickness=2, size=14).encode(x="p10:Q", y=y, color=color, tooltip=tooltip)
    high = alt.Chart().mark_tick(thickness=2, size=14).encode(x="p90:Q", y=y, color=color, tooltip=tooltip)
    median = alt.Chart().mark_point(filled=True, size=110, opacity=1, stroke="white", strokeWidth=1).encode(
        x="median:Q", y=y, color=color, tooltip=tooltip)
    layered = alt.layer(whisker, low, high, median, data=alt.Data(values=rows)).properties(
        width=charts.WIDTH - 260, height=54)
    chart = layered.facet(
        row=alt.Row("phase:N", sort=phases, title=None,
                    header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold", labelFontSize=12)),
        spacing=14,
    ).resolve_scale(x="independent")
    return charts._config(chart)


def category_deltas(diff: dict[str, Any]):
    """Diverging bars: each category's change in kernel time, head − base (red: more time, green: less)."""
    import altair as alt

    from traceview.report import charts

    changed = [c for c in diff["categories"] if c["delta_ns"]]
    if not changed:
        return None
    unit, scale = _unit(max(abs(c["delta_ns"]) for c in changed))
    rows = [{"category": charts._label(c["category"] or "none"), "delta": _scaled(c["delta_ns"], scale),
             "base": _scaled(c["base_time_ns"], scale), "head": _scaled(c["head_time_ns"], scale),
             "change_pct": round(c["change_pct"], 2) if c["change_pct"] is not None else None,
             "direction": "more time in head" if c["delta_ns"] > 0 else "less time in head"}
            for c in changed]
    order = [r["category"] for r in sorted(rows, key=lambda r: (-r["delta"], r["category"]))]
    directions = [d for d in DIRECTION_COLORS if any(r["direction"] == d for r in rows)]
    bars = alt.Chart(alt.Data(values=rows)).mark_bar(height={"band": 0.7}).encode(
        y=alt.Y("category:N", sort=order, title=None),
        x=alt.X("delta:Q", title=f"kernel time change, head − base ({unit})"),
        color=alt.Color("direction:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=directions, range=[DIRECTION_COLORS[d] for d in directions])),
        tooltip=[alt.Tooltip("category:N"), alt.Tooltip("base:Q", title=f"base {unit}", format=",.3f"),
                 alt.Tooltip("head:Q", title=f"head {unit}", format=",.3f"),
                 alt.Tooltip("delta:Q", title=f"change {unit}", format="+,.3f"),
                 alt.Tooltip("change_pct:Q", title="change %", format="+.1f")],
    )
    zero = alt.Chart(alt.Data(values=[{"zero": 0}])).mark_rule(color="#555", strokeWidth=1).encode(x="zero:Q")
    chart = alt.layer(bars, zero).properties(width=charts.WIDTH - 300, height=max(60, 26 * len(rows)))
    return charts._config(chart)


def build_charts(diff: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Vega-Lite specs by section id, only for charts that have something to draw."""
    built = {"steps": step_distributions(diff), "categories": category_deltas(diff)}
    return {name: chart.to_dict() for name, chart in built.items() if chart is not None}


# -- verdict ---------------------------------------------------------------------------------------


def _is_identical(diff: dict[str, Any]) -> bool:
    """Same GPU work to the nanosecond: no GPU change, no category or busy-time delta, same step times."""
    return (not diff["gpu_changed"] and not diff["gpu_busy"]["change_pct"]
            and all(not c["delta_ns"] for c in diff["categories"])
            and all(p["base"] == p["head"] for p in diff["phases"]))


def verdict(diff: dict[str, Any]) -> dict[str, Any]:
    """The page's conclusion: a status and plain-word lines, regressions first.

    status: 'regression' (a gate failure or a phase whose step time moved beyond the noise),
    'no change' (nothing beyond the thresholds and no kernel, finding or GPU change), else 'changed'.
    """
    thresholds = diff["thresholds"]
    step_pct, kernel_pct = thresholds["step_pct"], thresholds["kernel_pct"]
    gate = thresholds.get("fail_on_regression_pct")
    regressions: list[str] = []
    for text in diff["regressions"]:
        regressions.append(f"Regression: {text} (the gate fails above +{gate:g}%)." if gate is not None
                           else f"Regression: {text}.")
    for p in diff["phases"]:
        if p["verdict"] != "regression" or any(t.startswith(f"{p['phase']} median step time") for t in diff["regressions"]):
            continue
        b, h = p["base"], p["head"]
        why = ("too few steps to measure the noise" if min(b["steps"], h["steps"]) < 3
               else f"above base's p90 of {fmt.duration(b['p90_ns'])}")
        regressions.append(f"Regression: {p['phase']} median step time {fmt.duration(b['median_ns'])} → "
                           f"{fmt.duration(h['median_ns'])} ({signed_percent(p['median_change_pct'])}), {why}.")
    kernels, new, fixed = diff["kernels"], diff["findings"]["new"], diff["findings"]["fixed"]
    moved = [p for p in diff["phases"] if p["verdict"] != "unchanged"]
    busy = diff["gpu_busy"]
    if regressions:
        status = "regression"
    elif not (diff["gpu_changed"] or kernels or new or fixed or moved
              or (busy["change_pct"] is not None and abs(busy["change_pct"]) >= step_pct)):
        status = "no change"
    else:
        status = "changed"

    lines: list[dict[str, str]] = [{"kind": "regression", "text": text} for text in regressions]
    if not regressions:
        lines.append({"kind": "calm", "text": f"No regression beyond the thresholds (step time ±{step_pct:g}% and "
                                              f"outside base's p10–p90; kernel families ±{kernel_pct:g}%)."})
    if status == "no change":
        text = ("No change: neither run recorded GPU kernels." if not diff["categories"]
                else "No change: base and head did the same GPU work, to the nanosecond." if _is_identical(diff)
                else "No change: head matches base within the thresholds.")
        lines.append({"kind": "calm", "text": text})
    if diff["gpu_changed"]:
        lines.append({"kind": "change", "text": f"The GPU changed: {diff['base']['gpu'] or 'unknown'} → "
                                                f"{diff['head']['gpu'] or 'unknown'}, so times compare different "
                                                "hardware (and often different kernel choices)."})
    for p in moved:
        if p["verdict"] == "improvement":
            lines.append({"kind": "improvement", "text": f"Faster: {p['phase']} median step time "
                          f"{fmt.duration(p['base']['median_ns'])} → {fmt.duration(p['head']['median_ns'])} "
                          f"({signed_percent(p['median_change_pct'])})."})
        elif p["verdict"] == "within noise":
            lines.append({"kind": "info", "text": f"{p['phase']}: median step time "
                          f"{signed_percent(p['median_change_pct'])}, but inside base's p10–p90 spread: noise, "
                          "not a regression."})
    lines.append({"kind": "info", "text": f"GPU busy {fmt.duration(busy['base_ns'])} → {fmt.duration(busy['head_ns'])} "
                  f"({signed_percent(busy['change_pct'])}); GPU idle {fmt.percent(diff['gpu_idle_pct']['base'])} → "
                  f"{fmt.percent(diff['gpu_idle_pct']['head'])} of the active span."})
    if kernels:
        counts = {s: sum(1 for k in kernels if k["status"] == s) for s in STATUS_ORDER}
        top = kernels[0]
        lines.append({"kind": "info", "text": f"{len(kernels)} kernel famil{'y' if len(kernels) == 1 else 'ies'} changed ("
                      + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                      + f"); the largest: {top['kernel']} ({top['status']}, {signed_duration(top['delta_ns'])})."})
    else:
        lines.append({"kind": "info", "text": f"No kernel family changed by ±{kernel_pct:g}% or more, appeared or vanished."})
    lines.append({"kind": "info", "text": f"Findings: {len(new)} new, {len(fixed)} fixed." if new or fixed
                  else "The same findings fire in both runs."})
    if gate is not None:
        lines.append({"kind": "info", "text": f"Regression gate: fail above +{gate:g}% → exit code {diff['exit_code']}."})
    return {"status": status, "lines": lines, "regressions": len(regressions)}


# -- page ------------------------------------------------------------------------------------------


def render(diff: dict[str, Any], templates_dir: str | Path | None = None) -> str:
    """The page for one diff (``traceview.diff.build_diff``); `templates_dir` overrides the shipped templates."""
    specs = build_charts(diff)
    env = html._environment(str(Path(templates_dir) if templates_dir else html.default_templates_dir()))
    kernels = diff["kernels"]
    footer = {"generator": {"version": traceview.__version__},  # what base.html's footer reads
              "schema_version": f"{REPORT_SCHEMA_VERSION} · diff schema {diff.get('schema_version')}"}
    return env.get_template("diff.html").render(
        diff=diff, data=footer, charts=specs, csp=html.CSP, verdict=verdict(diff),
        kernels=kernels[:MAX_KERNELS], hidden_kernels=max(0, len(kernels) - MAX_KERNELS),
        identical=_is_identical(diff), status_order=STATUS_ORDER, verdict_order=VERDICT_ORDER,
        signed_percent=signed_percent, signed_duration=signed_duration, change_class=change_class,
        vega_js=Markup(html.vega_javascript()) if specs else Markup(""),
    )
