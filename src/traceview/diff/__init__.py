"""Compare runs for a performance PR: a pure function of ReportData dicts, one per run, so each side can
be several traces, rank directories or saved JSON reports (CI can keep small JSON baselines).

Steps are pooled per phase with their run kept (stats.py: a bootstrap over runs, then steps), the
sides are checked for comparability first (comparability.py), and each phase's change in mean step
time is split into parts that add up (attribution.py). Kernels match by family (short name and
category), compared per run.
"""

from __future__ import annotations

from typing import Any

from traceview import units
from traceview.diff import attribution, comparability, stats

DIFF_VERSION = 2
KERNEL_STATUSES = ("slower", "new", "gone", "faster")


def _pct(base: float | None, head: float | None) -> float | None:
    if base in (None, 0) or head is None:
        return None
    return 100.0 * (head - base) / base


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _step_time(step: dict[str, Any]) -> int:
    """The time a step owns on its rank's timeline (what the attribution splits); a report older than
    `owned_ns` gives the step's wall time."""
    owned = step.get("owned_ns")
    return owned if owned is not None else step["wall_ns"]


def _phases(base: list[dict], head: list[dict]) -> list[str]:
    order = {"prefill": 0, "decode": 1, "mixed": 2, "train": 3}
    found = {s["phase"] for r in base + head for s in comparability.priced_steps(r)}
    return sorted(found, key=lambda p: (order.get(p, 9), p or ""))


def _samples(reports: list[dict], phase: str) -> list[list[int]]:
    runs = [[_step_time(s) for s in comparability.priced_steps(r) if s["phase"] == phase] for r in reports]
    return [run for run in runs if run]


def _roof(reports: list[dict], phase: str) -> float | None:
    values = [p["pct_of_roof"] for r in reports for p in r["phases"] if p["phase"] == phase and p.get("pct_of_roof") is not None]
    return _mean(values) if values else None


def _phase_rows(base: list[dict], head: list[dict], threshold_pct: float, confidence: float,
                comparable: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for phase in _phases(base, head):
        comparison = stats.compare(_samples(base, phase), _samples(head, phase), confidence=confidence)
        verdict, reason = stats.decide(comparison, threshold_pct)
        if not comparable["comparable"]:
            reason = f"not comparable ({'; '.join(comparable['reasons'])}); the step times alone say: {verdict}, {reason}"
            verdict = "inconclusive"
        split = attribution.attribute(base, head, phase)
        interval = comparison["median_interval_pct"]
        rows.append({
            "phase": phase, **comparison,
            "significant": interval is not None and (interval[0] > 0 or interval[1] < 0),
            "verdict": verdict, "reason": reason,
            "base_pct_of_roof": _roof(base, phase), "head_pct_of_roof": _roof(head, phase),
            "attribution": split,
            "headline": attribution.headline(phase, split, verdict, comparison["median_change_pct"]),
        })
    return rows


def _judged(phase: dict[str, Any]) -> bool:
    """Whether the phase has the steps a verdict needs (a capture's one or two prefill steps do not)."""
    return min(phase["base"]["steps"], phase["head"]["steps"]) >= stats.MIN_STEPS


def _overall(phases: list[dict[str, Any]], comparable: dict[str, Any]) -> tuple[str, list[str]]:
    """The diff's verdict and the reasons that decided it."""
    if not comparable["comparable"]:
        return "inconclusive", [f"not comparable: {reason}" for reason in comparable["reasons"]]
    judged = [p for p in phases if _judged(p)]
    unjudged = [f"{p['phase']} not judged: {p['reason']}" for p in phases if p not in judged]
    for verdict in ("regression", "inconclusive", "improvement"):
        hits = [p for p in judged if p["verdict"] == verdict]
        if hits:
            return verdict, [f"{p['phase']}: {p['reason']}" for p in hits] + unjudged
    if not judged:
        return "inconclusive", unjudged or ["no steady steps on either side to compare (start-up steps are never "
                                            "compared: capture iterations after warm-up)"]
    return "neutral", [f"{p['phase']}: {p['reason']}" for p in judged] + unjudged


def _families(reports: list[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """Per kernel family, its time and count in a run, averaged over the side's runs."""
    totals: dict[tuple[str, str], dict[str, float]] = {}
    for report in reports:
        for k in report["kernel_families"]:
            row = totals.setdefault((k["short_name"], k["category"]), {"time_ns": 0.0, "count": 0.0})
            row["time_ns"] += k["time_ns"] / len(reports)
            row["count"] += k["count"] / len(reports)
    return totals


def _kernel_rows(base: list[dict], head: list[dict], threshold_pct: float, min_share_pct: float) -> list[dict[str, Any]]:
    """Kernel families that changed more than the threshold, appeared or vanished (noise floor: share)."""
    b, h = _families(base), _families(head)
    total = max(_mean([r["summary"]["kernel_time_ns"] for r in base]), _mean([r["summary"]["kernel_time_ns"] for r in head]), 1)
    rows = []
    for key in sorted(b.keys() | h.keys(), key=lambda k: (k[0] or "", k[1] or "")):
        bt, ht = round((b.get(key) or {}).get("time_ns", 0)), round((h.get(key) or {}).get("time_ns", 0))
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


def _category_rows(base: list[dict], head: list[dict]) -> list[dict[str, Any]]:
    def by_category(reports: list[dict]) -> dict[str, int]:
        totals: dict[str, float] = {}
        for (_, category), row in _families(reports).items():
            totals[category] = totals.get(category, 0.0) + row["time_ns"]
        return {c: round(t) for c, t in totals.items()}

    b, h = by_category(base), by_category(head)
    rows = [{"category": c, "base_time_ns": b.get(c, 0), "head_time_ns": h.get(c, 0),
             "delta_ns": h.get(c, 0) - b.get(c, 0), "change_pct": _pct(b.get(c, 0), h.get(c, 0))}
            for c in sorted(b.keys() | h.keys(), key=lambda c: c or "")]
    return sorted(rows, key=lambda r: -abs(r["delta_ns"]))


def _side(reports: list[dict]) -> dict[str, Any]:
    gpu = reports[0]["gpu"]
    return {"runs": [{"files": r["trace"]["files"], "gpu": r["gpu"].get("spec_name") or r["gpu"].get("name"),
                      "spec_id": r["gpu"].get("spec_id")} for r in reports],
            "files": [f for r in reports for f in r["trace"]["files"]],
            "gpu": gpu.get("spec_name") or gpu.get("name"), "spec_id": gpu.get("spec_id")}


def build_diff(base: list[dict], head: list[dict], *, threshold_pct: float = 5.0, kernel_threshold_pct: float = 5.0,
               min_kernel_share_pct: float = 0.1, fail_on_regression_pct: float | None = None,
               confidence: float = 0.95, fail_on_inconclusive: bool = False) -> dict[str, Any]:
    """The diff of runs `base` and `head` (ReportData dicts, one per run). The step verdicts are decided at
    the gate's percentage when there is one, else at `threshold_pct`."""
    step_pct = fail_on_regression_pct if fail_on_regression_pct is not None else threshold_pct
    comparable = comparability.assess(base, head)
    phases = _phase_rows(base, head, step_pct, confidence, comparable)
    verdict, reasons = _overall(phases, comparable)
    busy = {"base_ns": round(_mean([r["summary"]["gpu_busy_ns"] for r in base])),
            "head_ns": round(_mean([r["summary"]["gpu_busy_ns"] for r in head]))}
    busy["change_pct"] = _pct(busy["base_ns"], busy["head_ns"])
    base_fp = {f["fingerprint"]: f for r in base for f in r["findings"]}
    head_fp = {f["fingerprint"]: f for r in head for f in r["findings"]}
    gate = fail_on_regression_pct is not None and verdict == "regression"
    regressions = [f"{p['phase']} median step time {units.signed_percent(p['median_change_pct'])} "
                   f"{units.interval(p['median_interval_pct'])}" for p in phases if gate and p["verdict"] == "regression"]
    failed = gate or (fail_on_inconclusive and verdict == "inconclusive")
    base_side, head_side = _side(base), _side(head)
    diff = {
        "schema_version": DIFF_VERSION,
        "base": base_side, "head": head_side,
        "gpu_changed": not next(c for c in comparable["checks"] if c["check"] == "gpu")["passed"],
        "thresholds": {"step_pct": step_pct, "kernel_pct": kernel_threshold_pct, "min_kernel_share_pct": min_kernel_share_pct,
                       "fail_on_regression_pct": fail_on_regression_pct, "confidence": confidence,
                       "fail_on_inconclusive": fail_on_inconclusive, "min_steps": stats.MIN_STEPS},
        "verdict": verdict,
        "verdict_reasons": reasons,
        "comparability": comparable,
        "headline": _headline(phases),
        "gpu_busy": busy,
        "gpu_idle_pct": {"base": _mean_or_none([r["summary"]["gpu_idle_pct"] for r in base]),
                         "head": _mean_or_none([r["summary"]["gpu_idle_pct"] for r in head])},
        "phases": phases,
        "categories": _category_rows(base, head),
        "kernels": _kernel_rows(base, head, kernel_threshold_pct, min_kernel_share_pct),
        "findings": {
            "new": [head_fp[k] for k in sorted(head_fp.keys() - base_fp.keys())],
            "fixed": [base_fp[k] for k in sorted(base_fp.keys() - head_fp.keys())],
        },
        "regressions": regressions,
        "exit_code": 1 if failed else 0,
    }
    diff["conclusion"] = conclude(diff)
    return diff


def _mean_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return _mean(known) if known else None


def _headline(phases: list[dict[str, Any]]) -> str:
    """The sentence for the phase that decided the most: judged phases before those with too few steps,
    a regression first, then an improvement, then the phase with the most step time."""
    if not phases:
        return "No steps on either side to compare."
    rank = {"regression": 0, "improvement": 1, "inconclusive": 2, "neutral": 3}

    def key(p: dict[str, Any]) -> tuple:
        return (not _judged(p), rank[p["verdict"]],
                -(p["base"]["median_ns"] or 0) * p["base"]["steps"], p["phase"] or "")

    return min(phases, key=key)["headline"]


def _is_identical(diff: dict[str, Any]) -> bool:
    """Same GPU work to the nanosecond: no GPU change, no category or busy-time delta, same step times."""
    return (not diff["gpu_changed"] and not diff["gpu_busy"]["change_pct"]
            and all(not c["delta_ns"] for c in diff["categories"])
            and all(p["identical"] for p in diff["phases"]))


def conclude(diff: dict[str, Any]) -> dict[str, Any]:
    """The diff's conclusion, which every renderer shows as it is: the verdict and plain-word lines.

    status is the verdict: regression, improvement, neutral or inconclusive.
    """
    thresholds = diff["thresholds"]
    step_pct, kernel_pct, gate = thresholds["step_pct"], thresholds["kernel_pct"], thresholds["fail_on_regression_pct"]
    confidence = f"{100 * thresholds['confidence']:g}%"
    verdict = diff["verdict"]
    lines: list[dict[str, str]] = []
    kind = {"regression": "regression", "improvement": "improvement", "neutral": "calm", "inconclusive": "change"}[verdict]
    for reason in diff["verdict_reasons"]:
        lines.append({"kind": kind, "text": reason[0].upper() + reason[1:] + "."})
    if verdict == "neutral" and _is_identical(diff):
        lines.append({"kind": "calm", "text": "Base and head did the same GPU work, to the nanosecond."})
    lines.append({"kind": "info", "text": f"Verdicts at ±{step_pct:g}% with {confidence} confidence intervals that resample "
                                          "runs, then steps within runs (docs/ci.md)."})
    comparable = diff["comparability"]
    failed = [c["detail"] for c in comparable["checks"] if not c["passed"]]
    lines.append({"kind": "change" if failed else "info",
                  "text": f"Comparability {100 * comparable['score']:.0f}%: "
                          + ("; ".join(failed) if failed else f"all {len(comparable['checks'])} checks pass ("
                             + ", ".join(c["check"].replace("_", " ") for c in comparable["checks"]) + ")") + "."})
    if not all(p["run_noise_measured"] for p in diff["phases"]):
        lines.append({"kind": "info", "text": "One run a side: the intervals hold step-to-step noise only; run-to-run "
                                              "noise is not measured (pass --base and --head three or more times)."})
    busy = diff["gpu_busy"]
    lines.append({"kind": "info", "text": f"GPU busy {units.duration(busy['base_ns'])} → {units.duration(busy['head_ns'])} "
                  f"a run ({units.signed_percent(busy['change_pct'])}); GPU idle {units.percent(diff['gpu_idle_pct']['base'])} → "
                  f"{units.percent(diff['gpu_idle_pct']['head'])} of the active span."})
    kernels, new, fixed = diff["kernels"], diff["findings"]["new"], diff["findings"]["fixed"]
    if kernels:
        counts = {s: sum(1 for k in kernels if k["status"] == s) for s in KERNEL_STATUSES}
        top = kernels[0]
        lines.append({"kind": "info", "text": f"{len(kernels)} kernel famil{'y' if len(kernels) == 1 else 'ies'} changed ("
                      + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                      + f"); the largest: {top['kernel']} ({top['status']}, {units.signed_duration(top['delta_ns'])} a run)."})
    else:
        lines.append({"kind": "info", "text": f"No kernel family changed by ±{kernel_pct:g}% or more, appeared or vanished."})
    lines.append({"kind": "info", "text": f"Findings: {len(new)} new, {len(fixed)} fixed." if new or fixed
                  else "The same findings fire in both runs."})
    if gate is not None:
        lines.append({"kind": "info", "text": f"Regression gate: fail on a regression of +{gate:g}% or more → exit code "
                                              f"{diff['exit_code']}."})
    return {"status": verdict, "lines": lines, "regressions": len(diff["regressions"]), "identical": _is_identical(diff)}
