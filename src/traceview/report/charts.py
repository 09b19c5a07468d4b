"""Altair charts for the HTML report, each built from ReportData alone.

Every function returns an altair chart, or None when the data has nothing to draw (the page then
says so in words instead of showing an empty chart). Times are plotted in ms; data is trimmed to
the fields a chart uses so the page stays small.
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
from altair.utils.schemapi import debug_mode

from traceview import units as fmt
from traceview.report.style import PHASE_COLORS, PHASE_ORDER

WIDTH = 980
MAX_STEP_BARS = 400  # above this, steps are averaged in buckets so the chart stays readable
MAX_LABEL = 140  # kernel names in tooltips are cut to this many characters
TIME_PARTS = (  # the accounting terms, in stacking order, with their colours
    ("roofline floor", "#4c78a8"),
    ("kernel inefficiency", "#e45756"),
    ("GPU busy (no roofline split)", "#72b7b2"),
    ("GPU idle", "#f2a541"),
    ("outside GPU", "#bab0ac"),
)
# Vega's tableau20, written out so the category chart and the timeline give a category the same colour
TABLEAU20 = ("#4c78a8", "#9ecae9", "#f58518", "#ffbf79", "#54a24b", "#88d27a", "#b79a20", "#f2cf5b", "#439894",
             "#83bcb6", "#e45756", "#ff9d98", "#79706e", "#bab0ac", "#d67195", "#fcbfd2", "#b279a2", "#d6a5c9",
             "#9e765f", "#d8b5a5")
COMMUNICATION_COLOR = "#8e0152"  # no tableau20 colour is near it: communication stands out next to compute
LANE_PX = 24  # height of one timeline lane
TIMELINE_COLORS = {  # the timeline's marks that are not kernels
    "memcpy": "#1f3b73", "memset": "#5b3f8c", "launch call": "#6e7781", "copy call": "#2f6feb", "sync call": "#cf222e",
    "idle: host_wait": "#f2a541", "idle: sync_drain": "#e07b91", "idle: bubble": "#f5d76e", "idle: unknown": "#c9c9c9",
}
ZOOM = alt.SelectionParameter(name="zoom", select=alt.IntervalSelectionConfig(type="interval", encodings=["x"]),
                              bind="scales")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def _config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """The page's look, set on the chart itself: each `configure_*` call would copy the chart, data included."""
    chart.config = alt.Config(
        font=FONT, view=alt.ViewConfig(stroke="#ddd"),
        axis=alt.AxisConfig(labelColor="#333", titleColor="#333", gridColor="#eee", labelFontSize=11, titleFontSize=12),
        legend=alt.LegendConfig(labelFontSize=11, titleFontSize=12, labelLimit=260, symbolOpacity=1))
    return chart


def _layered(layers: list[alt.Chart], **properties: Any) -> alt.LayerChart:
    """`alt.layer(*layers).properties(...)` without altair's copies, for layers that each name their own data
    and declare no params: LayerChart's constructor deep-copies every layer to merge their data and params
    (there is none to merge) and each `properties` call copies the whole chart again. The spec is the same dict
    (a test compares them); the sample page's charts build in 0.044 s instead of 0.070 s."""
    chart = alt.LayerChart()
    chart.layer = list(layers)
    for name, value in properties.items():
        setattr(chart, name, value)
    return chart


def _zoomable(chart: alt.TopLevelMixin, view: str) -> alt.TopLevelMixin:
    """Drag to pan and wheel to zoom the time axis (Vega-Lite's interval selection bound to the scales, x only;
    double-click resets). The selection is declared on the top-level chart for the layer named `view`, as
    alt.layer would hoist it, but under a fixed name, so the spec is the same however the chart is built."""
    layers = getattr(chart, "layer", alt.Undefined)
    if layers is alt.Undefined:
        chart.params = [ZOOM]
        return chart
    layers[0].name = view
    chart.params = [alt.TopLevelSelectionParameter(name=ZOOM.name, select=ZOOM.select, bind=ZOOM.bind, views=[view])]
    return chart


def vega_lite(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """The chart's Vega-Lite spec. Its named datasets (a timeline's thousands of bars) join the spec after
    altair's to_dict, which would pass every row through its schema checks: half a second on a large
    trace's page, for values that are plain JSON already."""
    datasets = chart.datasets
    chart.datasets = alt.Undefined
    try:
        spec = chart.to_dict(validate=False)
    finally:
        chart.datasets = datasets
    if datasets is not alt.Undefined:
        spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    return spec


def _label(value: Any) -> str:
    text = " ".join(str(value if value is not None else "").split())
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _positive(value: float | None) -> bool:
    """A value a log axis can place."""
    return value is not None and math.isfinite(value) and value > 0


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 6)


def _phase_scale(phases: list[str]) -> alt.Scale:
    return alt.Scale(domain=phases, range=[PHASE_COLORS.get(p, "#888") for p in phases])


def _ordered_phases(values: list[str]) -> list[str]:
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    return sorted(set(values), key=lambda p: (order.get(p, 99), p))


def phase_time(data: dict[str, Any]) -> alt.Chart | None:
    """Stacked bars: each phase's wall time split into roofline floor, inefficiency, idle and outside-GPU."""
    rows = []
    for p in data["phases"]:
        wall = p["time_ns"] or 0
        if p["roofline_ns"] is not None and p["kernel_inefficiency_ns"] is not None:
            busy = [("roofline floor", p["roofline_ns"]), ("kernel inefficiency", p["kernel_inefficiency_ns"])]
        else:
            busy = [("GPU busy (no roofline split)", p["gpu_busy_ns"])]
        for part, ns in (*busy, ("GPU idle", p["idle_ns"]), ("outside GPU", p["outside_gpu_ns"])):
            if ns:
                rows.append({"phase": p["phase"] or "none", "part": part, "order": [t[0] for t in TIME_PARTS].index(part),
                             "ms": _ms(ns), "pct": round(100.0 * ns / wall, 2) if wall else None})
    if not rows:
        return None
    parts = [t for t in TIME_PARTS if any(r["part"] == t[0] for r in rows)]
    phases = _ordered_phases([r["phase"] for r in rows])
    chart = alt.Chart(alt.Data(values=rows)).mark_bar(height={"band": 0.7}).encode(
        y=alt.Y("phase:N", sort=phases, title=None),
        x=alt.X("ms:Q", stack="zero", title="wall time (ms)"),
        color=alt.Color("part:N", title="time went to", sort=[t[0] for t in parts],
                        scale=alt.Scale(domain=[t[0] for t in parts], range=[t[1] for t in parts]),
                        legend=alt.Legend(orient="bottom", direction="horizontal")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("phase:N"), alt.Tooltip("part:N", title="time went to"),
                 alt.Tooltip("ms:Q", title="ms", format=",.3f"), alt.Tooltip("pct:Q", title="% of phase wall", format=".1f")],
    ).properties(width=WIDTH - 120, height=max(60, 44 * len(phases)))
    return _config(chart)


def step_bucket(steps: int) -> int:
    """How many consecutive steps the timeline averages into one point (1: every step is drawn)."""
    return 1 if steps <= MAX_STEP_BARS else math.ceil(steps / MAX_STEP_BARS)


def _step_rows(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Per step rows, or per (bucket, phase) averages when there are too many steps to draw one by one."""
    size = step_bucket(len(steps))
    if size == 1:
        return [{"index": s["index"], "x0": s["index"] - 0.45, "x1": s["index"] + 0.45, "phase": s["phase"] or "none",
                 "wall_ms": _ms(s["wall_ns"]), "gpu_ms": _ms(s["gpu_time_ns"]), "kernels": s["kernels"],
                 "name": _label(s["name"])} for s in steps], 1
    import polars as pl  # 0.1 s to import: only for a trace with more steps than the chart draws

    frame = pl.DataFrame(
        {"index": [s["index"] for s in steps], "phase": [s["phase"] or "none" for s in steps],
         "wall_ns": [s["wall_ns"] for s in steps], "gpu_ns": [s["gpu_time_ns"] for s in steps]},
        schema={"index": pl.Int64, "phase": pl.Utf8, "wall_ns": pl.Float64, "gpu_ns": pl.Float64},
    )
    out = (frame.with_columns((pl.col("index") // size * size).alias("start"))
           .group_by("start", "phase")
           .agg(pl.len().alias("steps"), (pl.col("wall_ns").mean() / 1e6).round(6).alias("wall_ms"),
                (pl.col("gpu_ns").mean() / 1e6).round(6).alias("gpu_ms"))
           .sort("start", "phase"))
    return out.to_dicts(), size


def step_timeline(data: dict[str, Any]) -> alt.Chart | None:
    """Step wall time (light) and GPU time (solid) by step index, coloured by phase; bucket means when many."""
    steps = [s for s in data["steps"] if s["wall_ns"] is not None]
    if not steps:
        return None
    rows, bucket = _step_rows(steps)
    phases = _ordered_phases([r["phase"] for r in rows])
    color = alt.Color("phase:N", scale=_phase_scale(phases), title="phase", legend=alt.Legend(orient="top"))
    base = alt.Chart(alt.Data(values=rows)).properties(width=max(240, min(WIDTH - 80, 48 * len(rows))), height=240)
    x_title = "step index" if bucket == 1 else f"step index (mean of each {bucket} steps, per phase)"
    if bucket == 1:
        tooltip = [alt.Tooltip("index:Q", title="step"), alt.Tooltip("name:N", title="name"), alt.Tooltip("phase:N"),
                   alt.Tooltip("wall_ms:Q", title="wall ms", format=",.3f"),
                   alt.Tooltip("gpu_ms:Q", title="GPU ms", format=",.3f"), alt.Tooltip("kernels:Q", format=",")]
        first, last = rows[0]["index"], rows[-1]["index"]
        ticks = list(range(first, last + 1)) if last - first < 30 else alt.Undefined
        x = alt.X("x0:Q", title=x_title, scale=alt.Scale(domain=[first - 0.5, last + 0.5], nice=False, zero=False),
                  axis=alt.Axis(format="d", tickMinStep=1, values=ticks, grid=False))
        wall = base.mark_bar(opacity=0.35).encode(
            x=x, x2=alt.X2("x1:Q"), y=alt.Y("wall_ms:Q", title="ms per step"), y2=alt.Y2Datum(0), color=color,
            tooltip=tooltip)
        gpu = base.mark_bar().encode(
            x=x, x2=alt.X2("x1:Q"), y=alt.Y("gpu_ms:Q"), y2=alt.Y2Datum(0), color=color, tooltip=tooltip)
        chart = _zoomable(alt.layer(wall, gpu), "steps_wall")
    else:
        long = [{**r, "measure": m, "ms": r[f"{k}_ms"]} for r in rows for m, k in (("wall", "wall"), ("GPU time", "gpu"))]
        tooltip = [alt.Tooltip("start:Q", title="first step"), alt.Tooltip("steps:Q", title="steps averaged"),
                   alt.Tooltip("phase:N"), alt.Tooltip("measure:N"), alt.Tooltip("ms:Q", title="mean ms", format=",.3f")]
        chart = alt.Chart(alt.Data(values=long)).mark_line(strokeWidth=1.3).encode(
            x=alt.X("start:Q", title=x_title, axis=alt.Axis(format="d")),
            y=alt.Y("ms:Q", title="mean ms per step"), color=color,
            strokeDash=alt.StrokeDash("measure:N", title="measure", sort=["wall", "GPU time"],
                                      scale=alt.Scale(domain=["wall", "GPU time"], range=[[1, 0], [4, 3]])),
            detail=alt.Detail("measure:N"), tooltip=tooltip,
        ).properties(width=WIDTH - 80, height=240)
        chart = _zoomable(chart, "steps")
    return _config(chart)


def _roof_rows(gpu: dict[str, Any], hbm: float | None, x_min: float,
               x_max: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Roof polylines (one per distinct peak, dtypes sharing a peak merged) and their labels."""
    peaks: dict[float, list[str]] = {}
    for dtype, tflops in (gpu.get("peak_tflops") or {}).items():
        if _positive(tflops):
            peaks.setdefault(float(tflops), []).append(dtype)
    lines, labels = [], []
    for peak, dtypes in sorted(peaks.items(), reverse=True):
        name = "/".join(dtypes)
        ridge = peak / hbm if hbm else None
        points = ([(x_min, hbm * x_min), (ridge, peak)] if ridge and ridge > x_min else [(x_min, peak)]) + [(x_max, peak)]
        lines += [{"roof": name, "i": i, "ai": x, "tflops": y} for i, (x, y) in enumerate(points)]
        labels.append({"roof": name, "ai": x_max, "tflops": peak, "text": f"{name} {peak:,.0f} TFLOP/s"})
    return lines, labels


def roofline(data: dict[str, Any]) -> alt.Chart | None:
    """Log-log roofline: the GPU's roofs, and phases, categories and sampled kernels where costs exist."""
    points = data["roofline"]
    kernels = [{"name": _label(k["name"]), "category": k["category"] or "none", "phase": k["phase"] or "none",
                "dtype": k["dtype"] or "?", "ms": _ms(k["dur_ns"]), "ai": k["arithmetic_intensity"],
                "tflops": k["achieved_tflops"], "tbps": k["achieved_tbps"], "bound": k["bound"],
                "pct_of_roof": fmt.percent(k["pct_of_roof"])}
               for k in points["kernels"] if _positive(k["arithmetic_intensity"]) and _positive(k["achieved_tflops"])]
    categories = [{"category": c["category"] or "none", "ms": _ms(c["time_ns"]), "ai": c["arithmetic_intensity"],
                   "tflops": c["achieved_tflops"], "pct_of_roof": fmt.percent(c["pct_of_roof"])}
                  for c in points["categories"] if _positive(c["arithmetic_intensity"]) and _positive(c["achieved_tflops"])]
    phases = [{"phase": p["phase"] or "none", "ai": p["arithmetic_intensity"], "tflops": p["achieved_tflops"],
               "pct_of_roof": fmt.percent(p["pct_of_roof"])}
              for p in points["phases"] if _positive(p["arithmetic_intensity"]) and _positive(p["achieved_tflops"])]
    if not (kernels or categories or phases):
        return None
    gpu = data["gpu"]
    ais = [r["ai"] for r in (*kernels, *categories, *phases)]
    perf = [r["tflops"] for r in (*kernels, *categories, *phases)]
    peak_values = [v for v in (gpu.get("peak_tflops") or {}).values() if _positive(v)]
    hbm = gpu.get("hbm_tbps") if _positive(gpu.get("hbm_tbps")) else None
    ridges = [v / hbm for v in peak_values] if hbm else []
    x_min = 10 ** math.floor(math.log10(min(ais) / 2))
    x_max = 10 ** math.ceil(math.log10(max([*ais, *ridges]) * 3))
    y_top = max([*perf, *peak_values]) * 2
    y_min = 10 ** math.floor(math.log10(max(min(perf) / 2, y_top * 1e-7)))
    x = alt.X("ai:Q", title="arithmetic intensity (FLOP/byte)", scale=alt.Scale(type="log", domain=[x_min, x_max], nice=False))
    y = alt.Y("tflops:Q", title="achieved TFLOP/s", scale=alt.Scale(type="log", domain=[y_min, y_top], nice=False))
    categories_seen = sorted({r["category"] for r in (*kernels, *categories)})
    color = alt.Color("category:N", title="category", scale=alt.Scale(domain=categories_seen, scheme="tableau10"),
                      legend=alt.Legend(orient="right"))
    layers = []
    roof_lines, roof_labels = _roof_rows(gpu, hbm, x_min, x_max) if peak_values else ([], [])
    if roof_lines:
        layers.append(alt.Chart(alt.Data(values=roof_lines)).mark_line(color="#555", strokeWidth=1.2, clip=True).encode(
            x=x, y=y, detail=alt.Detail("roof:N"), order=alt.Order("i:Q"), tooltip=[alt.Tooltip("roof:N", title="roof")]))
        layers.append(alt.Chart(alt.Data(values=roof_labels)).mark_text(
            align="right", baseline="bottom", dx=-4, dy=-2, fontSize=10, color="#444", clip=True).encode(
            x=x, y=y, text=alt.Text("text:N")))
    if roof_lines and hbm:
        slope_x = x_min * 2
        layers.append(alt.Chart(alt.Data(values=[{"ai": slope_x, "tflops": hbm * slope_x, "text": f"HBM {hbm:g} TB/s"}]))
                      .mark_text(align="left", baseline="top", dx=6, dy=4, fontSize=10, color="#444", clip=True)
                      .encode(x=x, y=y, text=alt.Text("text:N")))
    if kernels:
        layers.append(alt.Chart(alt.Data(values=kernels)).mark_circle(opacity=0.55, clip=True).encode(
            x=x, y=y, color=color, size=alt.Size("ms:Q", title="kernel ms", scale=alt.Scale(range=[12, 320]),
                                                    legend=None),
            tooltip=[alt.Tooltip("name:N", title="kernel"), alt.Tooltip("category:N"), alt.Tooltip("phase:N"),
                     alt.Tooltip("dtype:N"), alt.Tooltip("ms:Q", format=",.3f"),
                     alt.Tooltip("ai:Q", title="FLOP/byte", format=",.2f"), alt.Tooltip("tflops:Q", title="TFLOP/s", format=",.2f"),
                     alt.Tooltip("tbps:Q", title="TB/s", format=",.3f"), alt.Tooltip("bound:N"),
                     alt.Tooltip("pct_of_roof:N", title="% of roof")]))
    if categories:
        layers.append(alt.Chart(alt.Data(values=categories)).mark_square(size=180, opacity=0.95, stroke="#222",
                                                                         strokeWidth=1, clip=True).encode(
            x=x, y=y, color=color,
            tooltip=[alt.Tooltip("category:N"), alt.Tooltip("ms:Q", title="time ms", format=",.3f"),
                     alt.Tooltip("ai:Q", title="FLOP/byte", format=",.2f"), alt.Tooltip("tflops:Q", title="TFLOP/s", format=",.2f"),
                     alt.Tooltip("pct_of_roof:N", title="% of roof")]))
    if phases:
        tip = [alt.Tooltip("phase:N"), alt.Tooltip("ai:Q", title="FLOP/byte", format=",.2f"),
               alt.Tooltip("tflops:Q", title="TFLOP/s", format=",.2f"), alt.Tooltip("pct_of_roof:N", title="% of roof")]
        layers.append(alt.Chart(alt.Data(values=phases)).mark_point(shape="diamond", size=320, filled=True, color="#111", opacity=1,
                                                                    stroke="white", strokeWidth=1.5, clip=True).encode(
            x=x, y=y, tooltip=tip))
        layers.append(alt.Chart(alt.Data(values=phases)).mark_text(align="center", dy=-16, fontSize=12, fontWeight="bold",
                                                                   color="#111", clip=True).encode(
            x=x, y=y, text=alt.Text("phase:N"), tooltip=tip))
    return _config(_layered(layers, width=WIDTH - 200, height=420))


def category_colors(data: dict[str, Any]) -> dict[str, str]:
    """One colour per kernel category, most kernel time first, shared by the category chart and the timeline."""
    totals: dict[str, float] = {}
    for c in data["categories"]:
        totals[c["category"] or "none"] = totals.get(c["category"] or "none", 0.0) + (c["time_ns"] or 0)
    order = sorted(totals, key=lambda c: (-totals[c], c))
    palette = iter(TABLEAU20 * (1 + len(order) // len(TABLEAU20)))
    return {c: COMMUNICATION_COLOR if c == "communication" else next(palette) for c in order}


def timeline_chart_name(step: dict[str, Any]) -> str:
    """The chart id of a drawn step (a word, as the page's chart ids are)."""
    return f"timeline_{step['rank']}_{step['step_id']}"


def _scaled(expr: str) -> str:
    """3 significant digits below 100 units, whole units with thousands separators above."""
    return f"({expr} < 100 ? format({expr}, '.3~r') : format({expr}, ',.0f'))"


def _duration(field: str) -> str:
    """A Vega expression writing a ns field as units.duration does: '7.14 ms', '912 µs', '1,234 ms'."""
    value = f"datum.{field}"
    parts = [f"{value} >= {scale:g} ? {_scaled(f'{value} / {scale:g}')} + ' {unit}'" for unit, scale in fmt.TIME_UNITS]
    return " : ".join([*parts, f"format({value}, 'd') + ' ns'"])


def _lane_rows(step: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The step's bars as the chart draws them, one dataset per layer, with the step's names looked up once."""
    labels = {lane["lane"]: lane["label"] for lane in step["lanes"]}

    def bar(row: dict[str, Any], what: str) -> dict[str, Any]:
        return {"y": labels[row["lane"]], "w": what, "n": row["name"], "o": row["offset_ns"], "s": row["span_ns"],
                "d": row["dur_ns"], "c": row["count"]}

    def roof(row: dict[str, Any]) -> str:
        parts = [fmt.tflops(row["achieved_tflops"]) if row["achieved_tflops"] is not None else None,
                 fmt.tbps(row["achieved_tbps"]) if row["achieved_tbps"] is not None else None,
                 f"{fmt.percent(row['pct_of_roof'])} of roof" if row["pct_of_roof"] is not None else None]
        return ", ".join(p for p in parts if p)

    def kernel(row: dict[str, Any]) -> dict[str, Any]:
        dtype = row["dtype"] or ("not in the name" if row["count"] == 1 else "mixed or unknown")
        category = (row["category"] if row["categories"] == 1
                    else f"{row['categories']} categories, most time {row['category']}")
        return {**bar(row, row["category"]), "t": dtype, "m": category}

    kernels = [kernel(k) for k in step["kernels"]]
    figures = [roof(k) for k in step["kernels"]]
    return {
        "kernels": [k for k, r in zip(kernels, figures) if not r],
        "costed": [{**k, "r": r} for k, r in zip(kernels, figures) if r],
        "memops": [{**bar(m, m["kind"]), "b": fmt.size(m["bytes"])} for m in step["memops"]],
        "calls": [bar(c, f"{c['kind']} call") for c in step["calls"]],
        "gaps": [bar(g, f"idle: {g['idle_kind']}") for g in step["gaps"]],
        "names": [{"i": i, "name": _label(name)} for i, name in enumerate(step["names"])],
    }


def step_lanes(step: dict[str, Any], colors: dict[str, str]) -> alt.LayerChart | None:
    """One step as lanes: host calls on top, then per GPU its idle gaps and its streams' kernels and memops,
    coloured by category (communication taller, in its own colour), on a time axis from the step's start."""
    rows = _lane_rows(step)
    if not any(rows[layer] for layer in ("kernels", "costed", "memops", "calls", "gaps")):
        return None
    unit, unit_ns = fmt.time_unit(step["wall_ns"] or 1)
    present = [c for c in colors if any(k["w"] == c for k in (*rows["kernels"], *rows["costed"]))]
    present += sorted({k["w"] for k in (*rows["kernels"], *rows["costed"])} - set(colors))
    others = [w for w in TIMELINE_COLORS
              if any(r["w"] == w for layer in ("memops", "calls", "gaps") for r in rows[layer])]
    domain = present + others
    palette = [colors.get(w) or TIMELINE_COLORS.get(w) or "#888" for w in domain]
    lanes = [lane["label"] for lane in step["lanes"]]
    x = alt.X("x0:Q", title=f"{unit} from the step start",
              scale=alt.Scale(domain=[0, round(step["wall_ns"] / unit_ns, 6)], nice=False, zero=True))
    y = alt.Y("y:N", sort=lanes, title=None, axis=alt.Axis(labelLimit=220))
    color = alt.Color("w:N", title="colour", scale=alt.Scale(domain=domain, range=palette),
                      legend=alt.Legend(orient="bottom", columns=4, symbolType="square"))
    timing = [alt.Tooltip("start:N", title="start"), alt.Tooltip("duration:N", title="duration")]
    merged = [alt.Tooltip("c:Q", title="merged marks", format=","), alt.Tooltip("extent:N", title="bar spans")]

    # communication kernels fill their lane's whole height (the rest 70%) in a colour of their own. Every
    # encoding here is a channel object: altair turns a shorthand string or a value dict into one through
    # from_dict, which hashes its whole schema on each call (5 ms a call, most of the page's chart time)
    tall = alt.SizeValue(round(0.7 * LANE_PX), condition={"test": "datum.w === 'communication'", "value": LANE_PX - 2})

    def layer(name: str, tooltip: list[alt.Tooltip], kernels: bool = False) -> alt.Chart:
        base = alt.Chart(alt.NamedData(name)).transform_lookup(
            lookup="n", from_=alt.LookupData(data=alt.NamedData("names"), key="i", fields=["name"]),
        ).transform_calculate(
            x0=f"datum.o / {unit_ns:g}", x1=f"(datum.o + datum.s) / {unit_ns:g}",
            op="datum.s > 0 ? max(0.35, min(1, datum.d / datum.s)) : 1",  # a merged bar is as solid as it is busy
            start=f"'+' + ({_duration('o')})", duration=_duration("d"), extent=_duration("s"))
        chart = base.mark_bar(clip=True).encode(
            x=x, x2=alt.X2("x1:Q"), y=y, color=color, opacity=alt.Opacity("op:Q", scale=None, legend=None),
            tooltip=tooltip)
        return chart.encode(size=tall if kernels else alt.SizeValue(round(0.7 * LANE_PX)))

    kernel_tip = [alt.Tooltip("name:N", title="kernel"), *timing, alt.Tooltip("m:N", title="category"),
                  alt.Tooltip("t:N", title="dtype")]
    layers = []
    if rows["gaps"]:
        layers.append(layer("gaps", [alt.Tooltip("w:N", title="GPU"), *timing, alt.Tooltip("name:N", title="ended by"),
                                     *merged]))
    if rows["calls"]:
        layers.append(layer("calls", [alt.Tooltip("name:N", title="host call"), alt.Tooltip("w:N", title="kind"),
                                      *timing, *merged]))
    if rows["memops"]:
        layers.append(layer("memops", [alt.Tooltip("name:N", title="memop"), *timing, alt.Tooltip("b:N", title="bytes"),
                                       *merged]))
    for name, extra in (("kernels", []), ("costed", [alt.Tooltip("r:N", title="roofline")])):
        if rows[name]:
            layers.append(layer(name, [*kernel_tip, *extra, *merged], kernels=True))
    chart = _zoomable(_layered(layers, width=WIDTH - 180, height=max(60, LANE_PX * len(lanes))), "lanes")
    if step["note"]:  # a coarser drawing says so on the chart itself: the note's clauses, one a line
        head, _, clauses = step["note"].partition(": ")
        chart.title = alt.TitleParams(
            f"{head}:", subtitle=[c.rstrip(".") for c in clauses.split("; ")],
            anchor="start", fontSize=12, color="#b35900", subtitleColor="#b35900", subtitleFontSize=11)
    chart = _config(chart)
    chart.datasets = {name: values for name, values in rows.items() if values}  # set last: never copied
    return chart


def categories(data: dict[str, Any]) -> alt.Chart | None:
    """Stacked bars: each phase's kernel time by category."""
    rows = [{"phase": c["phase"] or "none", "category": c["category"] or "none", "ms": _ms(c["time_ns"]),
             "kernels": c["kernels"], "pct": round(c["share_of_phase_pct"], 2) if c["share_of_phase_pct"] is not None else None}
            for c in data["categories"] if c["time_ns"]]
    if not rows:
        return None
    colors = category_colors(data)
    order = list(colors)
    for r in rows:
        r["rank"] = order.index(r["category"])
    phases = _ordered_phases([r["phase"] for r in rows])
    chart = alt.Chart(alt.Data(values=rows)).mark_bar(height={"band": 0.7}).encode(
        y=alt.Y("phase:N", sort=phases, title=None),
        x=alt.X("ms:Q", stack="zero", title="kernel time (ms)"),
        color=alt.Color("category:N", sort=order, title="category",
                        scale=alt.Scale(domain=order, range=list(colors.values())),
                        legend=alt.Legend(orient="right", columns=1)),
        order=alt.Order("rank:Q"),
        tooltip=[alt.Tooltip("phase:N"), alt.Tooltip("category:N"), alt.Tooltip("kernels:Q", format=","),
                 alt.Tooltip("ms:Q", title="ms", format=",.3f"), alt.Tooltip("pct:Q", title="% of phase", format=".1f")],
    ).properties(
        width=WIDTH - 240, height=max(60, 44 * len(phases)))
    return _config(chart)


def build(data: dict[str, Any]) -> dict[str, alt.TopLevelMixin | None]:
    """All charts of the page by section id; None where a section has nothing to draw.

    The specs come from this project's own chart code, checked against the Vega-Lite schema by the tests
    (whole, and built in debug mode to the same dicts); altair's debug mode, which validates every channel,
    mark and title as it is created, cost a third of a small report."""
    if not data["summary"]["kernels"]:
        return {}
    with debug_mode(False):
        charts = {"phases": phase_time(data), "steps": step_timeline(data), "roofline": roofline(data),
                  "categories": categories(data)}
        colors = category_colors(data)
        for step in data["timeline"]["steps"]:
            charts[timeline_chart_name(step)] = step_lanes(step, colors)
    return charts
