"""Compare runs for a performance PR: a pure function of ReportData dicts, one per run, so each side can
be several traces, rank directories or saved JSON reports (CI can keep small JSON baselines).

Steps are pooled per phase with their run kept (stats.py: a bootstrap over runs, then steps), the
sides are checked for comparability first (comparability.py), and each phase's change in mean step
time is split into parts that add up (attribution.py). Kernels match by family (short name and
category) and are compared per launch (median and p90 launch time, bootstrapped over runs, then launches)
and, separately, by launch count: a family that only ran fewer launches in the same window is no faster.
Captures bounded by a time window rather than by work are judged on work per second (throughput.py): less GPU
busy time in a fixed window is less work done, never a speed-up.
"""

from __future__ import annotations

from typing import Any

from traceview import units
from traceview.diff import attribution, comparability, stats, throughput

DIFF_VERSION = 2
KERNEL_STATUSES = ("slower", "new", "gone", "faster", "count")  # count: only the launch count moved
KERNEL_RESAMPLES = 1000  # per family: families are many, and each interval needs less precision than a step verdict


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


def _overall(phases: list[dict[str, Any]], comparable: dict[str, Any], window: dict[str, Any] | None = None,
             threshold_pct: float = 5.0) -> tuple[str, list[str]]:
    """The diff's verdict and the reasons that decided it. Where the captures are bounded by a time window
    (`window`, throughput.fixed_window), throughput decides: the per-step verdicts stay in their phase rows."""
    if not comparable["comparable"]:
        return "inconclusive", [f"not comparable: {reason}" for reason in comparable["reasons"]]
    if window is not None:
        verdict, reason = throughput.decide(window, threshold_pct)
        return verdict, [reason, f"fixed window: {window['reason']}"]
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


def _families(reports: list[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per kernel family, its time and count in a run, averaged over the side's runs, and its launch-time
    sample per run (`kernel_families.launch_sample_ns`; `sampled` false where a report predates it)."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for report in reports:
        for k in report["kernel_families"]:
            row = totals.setdefault((k["short_name"], k["category"]),
                                    {"time_ns": 0.0, "count": 0.0, "runs": [], "sampled": True})
            row["time_ns"] += k["time_ns"] / len(reports)
            row["count"] += k["count"] / len(reports)
            sample = k.get("launch_sample_ns")
            if sample is None:
                row["sampled"] = False
            elif sample:
                row["runs"].append(sample)
    return totals


def _decomposition(bt: int, ht: int, bc: float, hc: float) -> tuple[int, int]:
    """delta_ns = count effect + per-launch effect, with the mean launch time m = time / count a side:
    count effect (hc - bc) · m_base, per-launch effect hc · (m_head - m_base) = delta - count effect (the count
    effect is rounded to the nanosecond, so the two add up to delta_ns exactly). A new family is all count
    effect (ht), a gone one too (-bt)."""
    if bc <= 0:
        return ht - bt, 0
    count_effect = round((hc - bc) * bt / bc)
    return count_effect, (ht - bt) - count_effect


def _per_launch(bf: dict[str, Any], hf: dict[str, Any], threshold_pct: float, confidence: float) -> tuple[str, dict[str, Any]]:
    """A family's per-launch comparison: median and p90 launch time with bootstrap intervals (runs resampled,
    then launches within each run: stats.compare over the launch samples), and its status: slower or faster
    only when the median change reaches the threshold and its interval excludes zero; with too few launches for
    an interval (under stats.MIN_STEPS a side), on the change alone."""
    comparison = stats.compare(bf["runs"], hf["runs"], confidence=confidence, resamples=KERNEL_RESAMPLES)
    change, interval = comparison["median_change_pct"], comparison["median_interval_pct"]
    status = "same"
    if change is not None and change >= threshold_pct and (interval is None or interval[0] > 0):
        status = "slower"
    elif change is not None and change <= -threshold_pct and (interval is None or interval[1] < 0):
        status = "faster"
    fields = {
        "base_median_ns": comparison["base"]["median_ns"], "head_median_ns": comparison["head"]["median_ns"],
        "median_change_pct": change, "median_interval_pct": interval,
        "base_p90_ns": comparison["base"]["p90_ns"], "head_p90_ns": comparison["head"]["p90_ns"],
        "p90_change_pct": comparison["p90_change_pct"], "p90_interval_pct": comparison["p90_interval_pct"],
        "base_launches_sampled": comparison["base"]["steps"], "head_launches_sampled": comparison["head"]["steps"],
    }
    return status, fields


NO_LAUNCH_FIELDS = {"base_median_ns": None, "head_median_ns": None, "median_change_pct": None,
                    "median_interval_pct": None, "base_p90_ns": None, "head_p90_ns": None, "p90_change_pct": None,
                    "p90_interval_pct": None, "base_launches_sampled": 0, "head_launches_sampled": 0}


def _kernel_rows(base: list[dict], head: list[dict], threshold_pct: float, min_share_pct: float,
                 confidence: float = 0.95) -> list[dict[str, Any]]:
    """Kernel families whose per-launch time moved beyond noise (slower, faster), whose launch count alone moved
    by the threshold or more (count), that appeared (new) or vanished (gone); families under `min_share_pct`
    of kernel time are noise. Where a side's report has no launch samples (saved before them), the family is
    compared by total time as before (basis `total_time`)."""
    b, h = _families(base), _families(head)
    total = max(_mean([r["summary"]["kernel_time_ns"] for r in base]), _mean([r["summary"]["kernel_time_ns"] for r in head]), 1)
    rows = []
    for key in sorted(b.keys() | h.keys(), key=lambda k: (k[0] or "", k[1] or "")):
        bf, hf = b.get(key), h.get(key)
        bt, ht = round((bf or {}).get("time_ns", 0)), round((hf or {}).get("time_ns", 0))
        bc, hc = (bf or {}).get("count", 0), (hf or {}).get("count", 0)
        if 100.0 * max(bt, ht) / total < min_share_pct:
            continue
        change, count_change = _pct(bt, ht), _pct(bc, hc)
        launch, basis = dict(NO_LAUNCH_FIELDS), "per_launch"
        if bf is None or hf is None:
            status = "new" if bf is None else "gone"
        elif bf["sampled"] and hf["sampled"]:
            status, launch = _per_launch(bf, hf, threshold_pct, confidence)
            if status == "same" and count_change is not None and abs(count_change) >= threshold_pct:
                status = "count"
        else:
            basis = "total_time"
            status = ("slower" if change is not None and change >= threshold_pct else
                      "faster" if change is not None and change <= -threshold_pct else "same")
        if status == "same":
            continue
        count_effect, per_launch_effect = _decomposition(bt, ht, bc, hc)
        rows.append({
            "kernel": key[0], "category": key[1], "status": status, "basis": basis,
            "base_time_ns": bt, "head_time_ns": ht, "delta_ns": ht - bt, "change_pct": change,
            "base_count": bc, "head_count": hc, "count_change_pct": count_change,
            "count_effect_ns": count_effect, "per_launch_effect_ns": per_launch_effect, **launch,
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
    window = throughput.fixed_window(base, head, confidence=confidence)
    verdict, reasons = _overall(phases, comparable, window, step_pct)
    busy = {"base_ns": round(_mean([r["summary"]["gpu_busy_ns"] for r in base])),
            "head_ns": round(_mean([r["summary"]["gpu_busy_ns"] for r in head]))}
    busy["change_pct"] = _pct(busy["base_ns"], busy["head_ns"])
    base_fp = {f["fingerprint"]: f for r in base for f in r["findings"]}
    head_fp = {f["fingerprint"]: f for r in head for f in r["findings"]}
    gate = fail_on_regression_pct is not None and verdict == "regression"
    regressions = [f"{p['phase']} median step time {units.signed_percent(p['median_change_pct'])} "
                   f"{units.interval(p['median_interval_pct'])}" for p in phases if gate and p["verdict"] == "regression"]
    if window is not None:  # the window fixes time, so throughput alone decides
        regressions = [(f"throughput ({window['unit']}) {units.signed_percent(window['change_pct'])} "
                        f"{units.interval(window['interval_pct'])}")] if gate else []
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
        "headline": _throughput_headline(window, phases) if window is not None else _headline(phases),
        "throughput": window,
        "gpu_busy": busy,
        "gpu_idle_pct": {"base": _mean_or_none([r["summary"]["gpu_idle_pct"] for r in base]),
                         "head": _mean_or_none([r["summary"]["gpu_idle_pct"] for r in head])},
        "phases": phases,
        "categories": _category_rows(base, head),
        "kernels": _kernel_rows(base, head, kernel_threshold_pct, min_kernel_share_pct, confidence),
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


def _throughput_headline(window: dict[str, Any], phases: list[dict[str, Any]]) -> str:
    """The sentence for window-bounded captures: the window, the work in it and the throughput change."""
    return (f"Fixed {units.duration(window['window_ns'])} windows: {throughput.count_text(window['head_count'])} vs "
            f"{throughput.count_text(window['base_count'])} {window['what']} a run (head vs base), throughput "
            f"{units.signed_percent(window['change_pct'])} {units.interval(window['interval_pct'])}.")


def _is_identical(diff: dict[str, Any]) -> bool:
    """Same GPU work to the nanosecond: no GPU change, no category or busy-time delta, same step times."""
    return (not diff["gpu_changed"] and not diff["gpu_busy"]["change_pct"]
            and all(not c["delta_ns"] for c in diff["categories"])
            and all(p["identical"] for p in diff["phases"]))


def throughput_kind(window: dict[str, Any] | None) -> str:
    """How a line about throughput (or GPU busy time in a fixed window) is coloured: by throughput's direction,
    regression when it fell and improvement when it rose beyond doubt, change when the interval holds zero."""
    if window is None:
        return "info"
    change, interval = window["change_pct"], window["interval_pct"]
    if not change:
        return "calm"
    decided = interval is not None and (interval[1] < 0 or interval[0] > 0)
    return ("regression" if change < 0 else "improvement") if decided else "change"


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
    busy, window = diff["gpu_busy"], diff.get("throughput")
    busy_kind, busy_note = "info", ""
    if window is not None:
        busy_kind = throughput_kind(window)
        lines.append({"kind": "info", "text": f"Throughput basis: {window['what']} per second over the "
                      f"{units.duration(window['window_ns'])} window ({window['unit']}; interval: {window['method']}); the "
                      "per-step verdicts below do not decide: the window fixes the time, not the work."})
        if window.get("per_unit"):
            lines.append({"kind": "info", "text": attribution.per_unit_sentence(window["per_unit"])})
        if busy["change_pct"] and busy["change_pct"] < 0:
            busy_note = " in the same window: less busy time here is less work done, not faster work"
        elif busy["change_pct"]:
            busy_note = " in the same window"
    lines.append({"kind": busy_kind, "text": f"GPU busy {units.duration(busy['base_ns'])} → {units.duration(busy['head_ns'])} "
                  f"a run ({units.signed_percent(busy['change_pct'])}){busy_note}; GPU idle "
                  f"{units.percent(diff['gpu_idle_pct']['base'])} → {units.percent(diff['gpu_idle_pct']['head'])} of the active span."})
    kernels, new, fixed = diff["kernels"], diff["findings"]["new"], diff["findings"]["fixed"]
    if kernels:
        counts = {s: sum(1 for k in kernels if k["status"] == s) for s in KERNEL_STATUSES}
        words = {"slower": "slower per launch", "faster": "faster per launch", "new": "new", "gone": "gone",
                 "count": "launch count only"}
        top = kernels[0]
        lines.append({"kind": "info", "text": f"{len(kernels)} kernel famil{'y' if len(kernels) == 1 else 'ies'} changed ("
                      + ", ".join(f"{n} {words[s]}" for s, n in counts.items() if n)
                      + f"); the largest: {top['kernel']} ({words[top['status']]}, {units.signed_duration(top['delta_ns'])} "
                      f"a run: {units.signed_duration(top.get('count_effect_ns'))} from the launch count, "
                      f"{units.signed_duration(top.get('per_launch_effect_ns'))} per launch)."})
        by_total = sum(1 for k in kernels if k.get("basis") == "total_time")
        if by_total:
            lines.append({"kind": "info", "text": f"{by_total} kernel famil{'y' if by_total == 1 else 'ies'} compared by "
                          "total time only: a report saved without launch samples (kernel_families.launch_sample_ns) "
                          "cannot tell fewer launches from faster ones."})
    else:
        lines.append({"kind": "info", "text": f"No kernel family changed per launch or in launch count by ±{kernel_pct:g}% or more, appeared or vanished."})
    lines.append({"kind": "info", "text": f"Findings: {len(new)} new, {len(fixed)} fixed." if new or fixed
                  else "The same findings fire in both runs."})
    if gate is not None:
        lines.append({"kind": "info", "text": f"Regression gate: fail on a regression of +{gate:g}% or more → exit code "
                                              f"{diff['exit_code']}."})
    return {"status": verdict, "lines": lines, "regressions": len(diff["regressions"]), "identical": _is_identical(diff)}
