"""`traceview diff` as one self-contained HTML page: the verdict first, then why.

The page reuses the single-run report's machinery (``html.py``): the same Jinja environment with
autoescape, ``base.html`` (CSS, Content-Security-Policy, sortable tables, the chart script), the
``_macros.html`` chart macro (spec JSON written with ``<``, ``>``, ``&`` as ``\\u003c`` etc.) and
the inlined Vega bundle. ``templates/diff.html`` includes one ``_diff_<section>.html`` per section.

The first screen is the verdict (badge, headline, reasons), the comparability checks and the
conclusion lines (``traceview.diff.conclude``, so this page and the Markdown agree). Charts: per
phase, the median change with its confidence interval against the ±threshold; base and head step
distributions (median dot, p10–p90 whisker); the change in mean step split into its parts (what
moved); per kernel category, the change in kernel time as a diverging bar.
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
VERDICT_COLORS = {"regression": "#cf222e", "inconclusive": "#bf8700", "improvement": "#1a7f37", "neutral": "#8c959f"}
STATUS_ORDER = {status: order for order, status in enumerate(KERNEL_STATUSES)}
VERDICT_ORDER = {verdict: order for order, verdict in enumerate(VERDICT_COLORS)}  # worst first, for sorting
PART_LABELS = {"kernels": "kernels", "idle": "GPU idle", "copies": "copies", "outside_gpu": "outside GPU work"}
CHECK_LABELS = {"gpu": "GPU", "gpu_count": "GPU count", "phase_mix": "phase mix", "tokens_per_step": "tokens per step",
                "kernel_families": "kernel families", "step_detection": "step detection"}


def change_class(value: float | None) -> str:
    """CSS class for a change in time: 'up' (head takes longer), 'down' (shorter) or ''."""
    if not value:
        return ""
    return "up" if value > 0 else "down"


def throughput_class(window: dict[str, Any] | None) -> str:
    """CSS class for throughput (and GPU busy time in a fixed window): 'up' (the bad colour) when work per second
    fell beyond doubt, 'down' when it rose, '' otherwise: less busy time in a fixed window is never green."""
    if not window or not window.get("interval_pct"):
        return ""
    low, high = window["interval_pct"]
    return "up" if high < 0 else "down" if low > 0 else ""


def interval_class(interval_pct: list[float] | None) -> str:
    """CSS class for a change by its interval: 'up' when it lies above zero (slower beyond doubt),
    'down' below, '' when it contains zero or is unknown."""
    if not interval_pct:
        return ""
    return "up" if interval_pct[0] > 0 else "down" if interval_pct[1] < 0 else ""


def p_value_text(p_value: float | None) -> str:
    """A p-value to three decimals; below 0.001 it reads '< 0.001' (the bootstrap floor is 1/resamples)."""
    if p_value is None:
        return "n/a"
    return "< 0.001" if p_value < 0.001 else f"{p_value:.3f}"


def relative_change(row: dict[str, Any]) -> float | None:
    """An attribution row's change in percent of its base time (None when base had none)."""
    return 100.0 * row["delta_ns"] / row["base_ns"] if row["base_ns"] else None


def _scaled(ns: float | None, scale: float) -> float | None:
    return None if ns is None else round(ns / scale, 6)


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- charts ----------------------------------------------------------------------------------------


def change_intervals(diff: dict[str, Any]):
    """Per phase, the median change (point) and its confidence interval (rule) against zero and the
    ±threshold, coloured by verdict: what the verdict rests on, in one picture."""
    import altair as alt

    from traceview.report import charts

    measured = [p for p in diff["phases"] if p["median_change_pct"] is not None and p["median_interval_pct"]]
    if not measured:
        return None
    threshold = diff["thresholds"]["step_pct"]
    level = f"{100 * diff['thresholds']['confidence']:g}%"
    rows = [{"phase": p["phase"] or "none", "change": _rounded(p["median_change_pct"], 3),
             "low": _rounded(p["median_interval_pct"][0], 3), "high": _rounded(p["median_interval_pct"][1], 3),
             "p_value": p["p_value"], "verdict": p["verdict"], "runs": f"{p['base']['runs']} → {p['head']['runs']}",
             "steps": f"{p['base']['steps']} → {p['head']['steps']}"}
            for p in measured]
    phases = charts._ordered_phases([r["phase"] for r in rows])
    verdicts = [v for v in VERDICT_COLORS if any(r["verdict"] == v for r in rows)]
    y = alt.Y("phase:N", sort=phases, title=None, axis=alt.Axis(labelFontWeight="bold", ticks=False))
    x = alt.X("low:Q", title=f"median step change, head vs base (%), with its {level} interval")
    color = alt.Color("verdict:N", title=None, legend=alt.Legend(orient="top"),
                      scale=alt.Scale(domain=verdicts, range=[VERDICT_COLORS[v] for v in verdicts]))
    tooltip = [alt.Tooltip("phase:N"), alt.Tooltip("change:Q", title="median change %", format="+.1f"),
               alt.Tooltip("low:Q", title="interval low %", format="+.1f"),
               alt.Tooltip("high:Q", title="interval high %", format="+.1f"),
               alt.Tooltip("p_value:Q", title="p-value", format=".3f"), alt.Tooltip("verdict:N"),
               alt.Tooltip("runs:N", title="runs"), alt.Tooltip("steps:N", title="steps")]
    interval = alt.Chart().mark_rule(strokeWidth=3).encode(x=x, x2="high:Q", y=y, color=color, tooltip=tooltip)
    ends = [alt.Chart().mark_tick(thickness=2, size=16).encode(x=f"{end}:Q", y=y, color=color, tooltip=tooltip)
            for end in ("low", "high")]
    median = alt.Chart().mark_point(filled=True, size=120, opacity=1, stroke="white", strokeWidth=1).encode(
        x="change:Q", y=y, color=color, tooltip=tooltip)
    marks = [{"at": 0.0, "line": "no change"}, {"at": -threshold, "line": f"-{threshold:g}% threshold"},
             {"at": threshold, "line": f"+{threshold:g}% threshold"}]
    zero = alt.Chart(alt.Data(values=marks[:1])).mark_rule(color="#555", strokeWidth=1).encode(
        x="at:Q", tooltip=[alt.Tooltip("line:N", title="line")])
    limits = alt.Chart(alt.Data(values=marks[1:])).mark_rule(color="#888", strokeWidth=1, strokeDash=[5, 4]).encode(
        x="at:Q", tooltip=[alt.Tooltip("line:N", title="line")])
    phases_marks = alt.layer(interval, *ends, median, data=alt.Data(values=rows))
    chart = alt.layer(limits, zero, phases_marks).properties(
        width=charts.WIDTH - 220, height=max(60, 46 * len(rows)))
    return charts._config(chart)


def step_distributions(diff: dict[str, Any]):
    """Per phase (one row each, own x axis): base and head step time, median dot and p10–p90 whisker."""
    import altair as alt

    from traceview.report import charts

    stats = [(p, run, p[run]) for p in diff["phases"] for run in ("base", "head") if p[run]["median_ns"] is not None]
    if not stats:
        return None
    unit, scale = fmt.time_unit(max(s["p90_ns"] or s["median_ns"] for _, _, s in stats))
    rows = [{"phase": p["phase"] or "none", "run": run, "runs": s["runs"], "steps": s["steps"],
             "median": _scaled(s["median_ns"], scale), "p10": _scaled(s["p10_ns"], scale),
             "p90": _scaled(s["p90_ns"], scale), "spread_pct": _rounded(s["spread_pct"]),
             "change_pct": _rounded(p["median_change_pct"]), "verdict": p["verdict"]}
            for p, run, s in stats]
    phases = charts._ordered_phases([r["phase"] for r in rows])
    runs = [r for r in ("base", "head") if any(row["run"] == r for row in rows)]
    color = alt.Color("run:N", title=None, sort=runs, legend=alt.Legend(orient="top"),
                      scale=alt.Scale(domain=runs, range=[RUN_COLORS[r] for r in runs]))
    y = alt.Y("run:N", sort=["base", "head"], title=None, axis=alt.Axis(labelFontWeight="bold", ticks=False))
    x = alt.X("p10:Q", title=f"step time ({unit}): median, p10–p90", scale=alt.Scale(zero=True),
              axis=alt.Axis(tickCount=8))
    tooltip = [alt.Tooltip("phase:N"), alt.Tooltip("run:N"), alt.Tooltip("runs:Q", format=","),
               alt.Tooltip("steps:Q", format=","),
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


def attribution_parts(diff: dict[str, Any]):
    """Per phase, diverging bars: how each part of the mean step (kernels, GPU idle, copies, outside GPU
    work) moved, head − base; the bars of a phase add up to its change in mean step."""
    import altair as alt

    from traceview.report import charts

    split = [(p, part) for p in diff["phases"] if p["attribution"] is not None for part in p["attribution"]["parts"]]
    if not any(part["delta_ns"] for _, part in split):
        return None
    unit, scale = fmt.time_unit(max(abs(part["delta_ns"]) for _, part in split))
    rows = [{"phase": p["phase"] or "none", "part": PART_LABELS.get(part["name"], part["name"]),
             "delta": _scaled(part["delta_ns"], scale), "base": _scaled(part["base_ns"], scale),
             "head": _scaled(part["head_ns"], scale), "step_delta": _scaled(p["attribution"]["delta_ns"], scale),
             "direction": "more time in head" if part["delta_ns"] > 0 else "less time in head", "zero": 0}
            for p, part in split]
    phases = charts._ordered_phases([r["phase"] for r in rows])
    parts = list(dict.fromkeys(r["part"] for r in rows))
    directions = [d for d in DIRECTION_COLORS if any(r["direction"] == d for r in rows if r["delta"])]
    y = alt.Y("part:N", sort=parts, title=None)
    bars = alt.Chart().mark_bar(height={"band": 0.7}).encode(
        y=y, x=alt.X("delta:Q", title=f"change in mean step, head − base ({unit})"),
        color=alt.Color("direction:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=directions, range=[DIRECTION_COLORS[d] for d in directions])),
        tooltip=[alt.Tooltip("phase:N"), alt.Tooltip("part:N"),
                 alt.Tooltip("base:Q", title=f"base {unit} a step", format=",.3f"),
                 alt.Tooltip("head:Q", title=f"head {unit} a step", format=",.3f"),
                 alt.Tooltip("delta:Q", title=f"change {unit}", format="+,.3f"),
                 alt.Tooltip("step_delta:Q", title=f"whole step change {unit}", format="+,.3f")],
    )
    zero = alt.Chart().mark_rule(color="#555", strokeWidth=1).encode(x="zero:Q")
    layered = alt.layer(bars, zero, data=alt.Data(values=rows)).properties(width=charts.WIDTH - 300,
                                                                           height=26 * len(parts))
    chart = layered.facet(
        row=alt.Row("phase:N", sort=phases, title=None,
                    header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold", labelFontSize=12)),
        spacing=14,
    )
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
             "change_pct": _rounded(c["change_pct"]),
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
    built = {"intervals": change_intervals(diff), "steps": step_distributions(diff),
             "attribution": attribution_parts(diff), "categories": category_deltas(diff)}
    return {name: chart.to_dict() for name, chart in built.items() if chart is not None}


# -- page ------------------------------------------------------------------------------------------


def _notes(diff: dict[str, Any]) -> list[dict[str, str]]:
    """The conclusion lines after the ones that restate the verdict reasons (``conclude`` opens with
    them), which the page already shows under the headline."""
    return diff["conclusion"]["lines"][len(diff["verdict_reasons"]):]


def render(diff: dict[str, Any], templates_dir: str | Path | None = None) -> str:
    """The page for one diff (``traceview.diff.build_diff``); `templates_dir` overrides the shipped templates."""
    specs = build_charts(diff)
    env = html.environment(templates_dir)
    kernels = diff["kernels"]
    footer = {"generator": {"version": traceview.__version__},  # what base.html's footer reads
              "schema_version": f"{REPORT_SCHEMA_VERSION} · diff schema {diff.get('schema_version')}"}
    # conclude() opens with the reasons; their kind (regression, calm, ...) colours the reasons list
    reason_kind = diff["conclusion"]["lines"][0]["kind"] if diff["verdict_reasons"] else ""
    return env.get_template("diff.html").render(
        diff=diff, data=footer, charts=specs, csp=html.CSP, notes=_notes(diff), reason_kind=reason_kind,
        kernels=kernels[:MAX_KERNELS], hidden_kernels=max(0, len(kernels) - MAX_KERNELS), status_order=STATUS_ORDER,
        verdict_order=VERDICT_ORDER, part_labels=PART_LABELS, check_labels=CHECK_LABELS,
        signed_percent=fmt.signed_percent, signed_duration=fmt.signed_duration, interval=fmt.interval,
        change_class=change_class, interval_class=interval_class, throughput_class=throughput_class, p_value_text=p_value_text,
        relative_change=relative_change,
        vega_js=Markup(html.vega_javascript()) if specs else Markup(""),
    )
