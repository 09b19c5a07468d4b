"""Compare two runs for a performance PR: a pure function of two ReportData dicts, so BASE and HEAD
can each be a trace or a saved JSON report (CI can keep a small JSON baseline instead of a trace).

Steps match by phase and compare as distributions (median and p90, with the spread, so noise is not
called a regression); kernels match by family (short name and category).
"""

from __future__ import annotations

import statistics
from typing import Any

from traceview import units

DIFF_VERSION = 1
KERNEL_STATUSES = ("slower", "new", "gone", "faster")


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = int(position), min(int(position) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _pct(base: float | None, head: float | None) -> float | None:
    if base in (None, 0) or head is None:
        return None
    return 100.0 * (head - base) / base


def _step_stats(report: dict, phase: str) -> dict[str, Any]:
    walls = [s["wall_ns"] for s in report["steps"] if s["phase"] == phase]
    return {"steps": len(walls), "median_ns": _quantile(walls, 0.5), "p10_ns": _quantile(walls, 0.1),
            "p90_ns": _quantile(walls, 0.9),
            "spread_pct": (100.0 * statistics.pstdev(walls) / statistics.mean(walls)) if len(walls) > 1 else None}


def _phase_rows(base: dict, head: dict, threshold_pct: float) -> list[dict[str, Any]]:
    """Per phase: step-time distributions and roofline %; a regression must clear the threshold and the noise."""
    phases = [p for p in ("prefill", "decode", "mixed", "unknown")
              if any(s["phase"] == p for s in base["steps"] + head["steps"])]
    roofs = {name: {p["phase"]: p for p in report["phases"]} for name, report in (("base", base), ("head", head))}
    rows = []
    for phase in phases:
        b, h = _step_stats(base, phase), _step_stats(head, phase)
        change = _pct(b["median_ns"], h["median_ns"])
        # beyond noise: head's typical step is slower than almost all of base's (and vice versa)
        shifted_up = h["median_ns"] is not None and b["p90_ns"] is not None and h["median_ns"] > b["p90_ns"]
        shifted_down = h["median_ns"] is not None and b["p10_ns"] is not None and h["median_ns"] < b["p10_ns"]
        few = min(b["steps"], h["steps"]) < 3
        verdict = "unchanged"
        if change is not None and abs(change) >= threshold_pct and (few or shifted_up or shifted_down):
            verdict = "regression" if change > 0 else "improvement"
        elif change is not None and abs(change) >= threshold_pct:
            verdict = "within noise"
        rows.append({
            "phase": phase, "base": b, "head": h, "median_change_pct": change, "verdict": verdict,
            "base_pct_of_roof": roofs["base"].get(phase, {}).get("pct_of_roof"),
            "head_pct_of_roof": roofs["head"].get(phase, {}).get("pct_of_roof"),
        })
    return rows


def _kernel_rows(base: dict, head: dict, threshold_pct: float, min_share_pct: float) -> list[dict[str, Any]]:
    """Kernel families that changed more than the threshold, appeared or vanished (noise floor: share)."""
    def families(report: dict) -> dict[tuple[str, str], dict]:
        return {(k["short_name"], k["category"]): k for k in report["kernel_families"]}

    b, h = families(base), families(head)
    total = max(base["summary"]["kernel_time_ns"], head["summary"]["kernel_time_ns"], 1)
    rows = []
    for key in sorted(b.keys() | h.keys(), key=lambda k: (k[0] or "", k[1] or "")):
        bt, ht = (b.get(key) or {}).get("time_ns", 0), (h.get(key) or {}).get("time_ns", 0)
        change = _pct(bt, ht)
        status = "new" if key not in b else "gone" if key not in h else (
            "slower" if change is not None and change >= threshold_pct else
            "faster" if change is not None and change <= -threshold_pct else "same")
        if status == "same" or 100.0 * max(bt, ht) / total < min_share_pct:
            continue
        rows.append({
            "kernel": key[0], "category": key[1], "status": status, "base_time_ns": bt, "head_time_ns": ht,
            "delta_ns": ht - bt, "change_pct": change,
            "base_count": (b.get(key) or {}).get("count", 0), "head_count": (h.get(key) or {}).get("count", 0),
        })
    return sorted(rows, key=lambda r: (-abs(r["delta_ns"]), r["kernel"] or ""))


def _category_rows(base: dict, head: dict) -> list[dict[str, Any]]:
    def by_category(report: dict) -> dict[str, int]:
        totals: dict[str, int] = {}
        for k in report["kernel_families"]:
            totals[k["category"]] = totals.get(k["category"], 0) + k["time_ns"]
        return totals

    b, h = by_category(base), by_category(head)
    rows = [{"category": c, "base_time_ns": b.get(c, 0), "head_time_ns": h.get(c, 0),
             "delta_ns": h.get(c, 0) - b.get(c, 0), "change_pct": _pct(b.get(c, 0), h.get(c, 0))}
            for c in sorted(b.keys() | h.keys(), key=lambda c: c or "")]
    return sorted(rows, key=lambda r: -abs(r["delta_ns"]))


def build_diff(base: dict, head: dict, *, threshold_pct: float = 5.0, kernel_threshold_pct: float = 5.0,
               min_kernel_share_pct: float = 0.1, fail_on_regression_pct: float | None = None) -> dict[str, Any]:
    base_gpu, head_gpu = base["gpu"], head["gpu"]
    busy = {"base_ns": base["summary"]["gpu_busy_ns"], "head_ns": head["summary"]["gpu_busy_ns"]}
    busy["change_pct"] = _pct(busy["base_ns"], busy["head_ns"])
    phases = _phase_rows(base, head, threshold_pct)
    base_fp = {f["fingerprint"]: f for f in base["findings"]}
    head_fp = {f["fingerprint"]: f for f in head["findings"]}
    regressions = []
    if fail_on_regression_pct is not None:
        for row in phases:
            if row["median_change_pct"] is not None and row["median_change_pct"] > fail_on_regression_pct \
                    and row["verdict"] == "regression":
                regressions.append(f"{row['phase']} median step time +{row['median_change_pct']:.1f}%")
        if busy["change_pct"] is not None and busy["change_pct"] > fail_on_regression_pct:
            regressions.append(f"total GPU busy time +{busy['change_pct']:.1f}%")
    diff = {
        "schema_version": DIFF_VERSION,
        "base": {"files": base["trace"]["files"], "gpu": base_gpu.get("spec_name") or base_gpu.get("name"),
                 "spec_id": base_gpu.get("spec_id")},
        "head": {"files": head["trace"]["files"], "gpu": head_gpu.get("spec_name") or head_gpu.get("name"),
                 "spec_id": head_gpu.get("spec_id")},
        "gpu_changed": base_gpu.get("spec_id") != head_gpu.get("spec_id") or base_gpu.get("name") != head_gpu.get("name"),
        "thresholds": {"step_pct": threshold_pct, "kernel_pct": kernel_threshold_pct,
                       "min_kernel_share_pct": min_kernel_share_pct, "fail_on_regression_pct": fail_on_regression_pct},
        "gpu_busy": busy,
        "gpu_idle_pct": {"base": base["summary"]["gpu_idle_pct"], "head": head["summary"]["gpu_idle_pct"]},
        "phases": phases,
        "categories": _category_rows(base, head),
        "kernels": _kernel_rows(base, head, kernel_threshold_pct, min_kernel_share_pct),
        "findings": {
            "new": [head_fp[k] for k in sorted(head_fp.keys() - base_fp.keys())],
            "fixed": [base_fp[k] for k in sorted(base_fp.keys() - head_fp.keys())],
        },
        "regressions": regressions,
        "exit_code": 1 if regressions else 0,
    }
    diff["conclusion"] = conclude(diff)
    return diff


def _is_identical(diff: dict[str, Any]) -> bool:
    """Same GPU work to the nanosecond: no GPU change, no category or busy-time delta, same step times."""
    return (not diff["gpu_changed"] and not diff["gpu_busy"]["change_pct"]
            and all(not c["delta_ns"] for c in diff["categories"])
            and all(p["base"] == p["head"] for p in diff["phases"]))


def conclude(diff: dict[str, Any]) -> dict[str, Any]:
    """The diff's conclusion, which every renderer shows as it is: a status and plain-word lines, regressions first.

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
               else f"above base's p90 of {units.duration(b['p90_ns'])}")
        regressions.append(f"Regression: {p['phase']} median step time {units.duration(b['median_ns'])} → "
                           f"{units.duration(h['median_ns'])} ({units.signed_percent(p['median_change_pct'])}), {why}.")
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
                          f"{units.duration(p['base']['median_ns'])} → {units.duration(p['head']['median_ns'])} "
                          f"({units.signed_percent(p['median_change_pct'])})."})
        elif p["verdict"] == "within noise":
            lines.append({"kind": "info", "text": f"{p['phase']}: median step time "
                          f"{units.signed_percent(p['median_change_pct'])}, but inside base's p10–p90 spread: noise, "
                          "not a regression."})
    lines.append({"kind": "info", "text": f"GPU busy {units.duration(busy['base_ns'])} → {units.duration(busy['head_ns'])} "
                  f"({units.signed_percent(busy['change_pct'])}); GPU idle {units.percent(diff['gpu_idle_pct']['base'])} → "
                  f"{units.percent(diff['gpu_idle_pct']['head'])} of the active span."})
    if kernels:
        counts = {s: sum(1 for k in kernels if k["status"] == s) for s in KERNEL_STATUSES}
        top = kernels[0]
        lines.append({"kind": "info", "text": f"{len(kernels)} kernel famil{'y' if len(kernels) == 1 else 'ies'} changed ("
                      + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                      + f"); the largest: {top['kernel']} ({top['status']}, {units.signed_duration(top['delta_ns'])})."})
    else:
        lines.append({"kind": "info", "text": f"No kernel family changed by ±{kernel_pct:g}% or more, appeared or vanished."})
    lines.append({"kind": "info", "text": f"Findings: {len(new)} new, {len(fixed)} fixed." if new or fixed
                  else "The same findings fire in both runs."})
    if gate is not None:
        lines.append({"kind": "info", "text": f"Regression gate: fail above +{gate:g}% → exit code {diff['exit_code']}."})
    return {"status": status, "lines": lines, "regressions": len(regressions), "identical": _is_identical(diff)}
