"""`traceview diff` as one self-contained HTML page: base and head side by side.

The page reuses the single-run report's machinery (``html.py``): the same Jinja environment with
autoescape, ``base.html`` (CSS, Content-Security-Policy, sortable tables, the chart script), the
``_macros.html`` chart macro (spec JSON written with ``<``, ``>``, ``&`` as ``\\u003c`` etc.) and
the inlined Vega bundle. ``templates/diff.html`` includes one ``_diff_<section>.html`` per section.

Charts: per phase, base and head step-time distributions (median dot, p10–p90 whisker); per
kernel category, the change in kernel time as a diverging bar. The conclusion (status and verdict
lines) comes with the diff (``traceview.diff.conclude``), so this page and the Markdown agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from markupsafe import Markup

import traceview
from traceview import units as fmt
from traceview.diff import KERNEL_STATUSES
from traceview.report import html
from traceview.report.data import SCHEMA_VERSION as REPORT_SCHEMA_VERSION

MAX_KERNELS = 300  # changed kernel families shown in the table; the rest are counted
RUN_COLORS = {"base": "#8c99a6", "head": "#2f6feb"}
DIRECTION_COLORS = {"more time in head": "#e45756", "less time in head": "#54a24b"}
STATUS_ORDER = {status: order for order, status in enumerate(KERNEL_STATUSES)}
VERDICT_ORDER = {"regression": 0, "within noise": 1, "improvement": 2, "unchanged": 3}


def change_class(value: float | None) -> str:
    """CSS class for a change in time: 'up' (head takes longer), 'down' (shorter) or ''."""
    if not value:
        return ""
    return "up" if value > 0 else "down"


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
    unit, scale = fmt.time_unit(max(s["p90_ns"] or s["median_ns"] for _, _, s in stats))
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
    unit, scale = fmt.time_unit(max(abs(c["delta_ns"]) for c in changed))
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


# -- page ------------------------------------------------------------------------------------------


def render(diff: dict[str, Any], templates_dir: str | Path | None = None) -> str:
    """The page for one diff (``traceview.diff.build_diff``); `templates_dir` overrides the shipped templates."""
    specs = build_charts(diff)
    env = html.environment(templates_dir)
    kernels = diff["kernels"]
    footer = {"generator": {"version": traceview.__version__},  # what base.html's footer reads
              "schema_version": f"{REPORT_SCHEMA_VERSION} · diff schema {diff.get('schema_version')}"}
    return env.get_template("diff.html").render(
        diff=diff, data=footer, charts=specs, csp=html.CSP, verdict=diff["conclusion"],
        kernels=kernels[:MAX_KERNELS], hidden_kernels=max(0, len(kernels) - MAX_KERNELS),
        identical=diff["conclusion"]["identical"], status_order=STATUS_ORDER, verdict_order=VERDICT_ORDER,
        signed_percent=fmt.signed_percent, signed_duration=fmt.signed_duration, change_class=change_class,
        vega_js=Markup(html.vega_javascript()) if specs else Markup(""),
    )
