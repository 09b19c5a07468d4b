"""Throughput where the capture's time is fixed (issue 32): work per second, not time per piece of work.

A capture bounded by a window (nsys --duration, a profiler's fixed active window) holds whatever work fitted:
a head that ran 60 launches where the base ran 68 in the same 300 ms did *less* work, and its lower GPU busy
time is lower throughput, not a speed-up. The diff therefore asks first whether the captures were bounded by
time or by work, and where time is the fixed quantity compares work per second.

**Window-bounded** when every run's span (report `trace.span_ns`) is within `SPAN_TOLERANCE` (2%) of every
other run's, on both sides, *and* the work counted on the basis below is not the same in every run. Repeated
captures of a fixed amount of work (a benchmark of N steps) do the same work each time, so their counts agree and
their spans carry the change: they are compared per step as before. Equal spans with equal work read the same
either way, so they stay on the per-step comparison too.

**Basis**, the first that applies:

- `tokens`: every run has at least 2 priced steps of the phase with the most steps (decode in serving, train in
  training) and each carries its token counts (annotations): that phase's tokens per second (generated tokens for
  decode, prompt tokens for prefill, both for mixed steps; a capture's one prefill of 1,024 prompt tokens would
  otherwise outweigh forty decode steps of 4);
- `steps`: the same steps without token counts: steps of that phase per second;
- `launches`: launches per second of the main loop's kernels, the kernel families every run ran that hold the
  most time, largest first until they cover `MAIN_LOOP_SHARE` (80%) of the base's kernel time in such families.

A run's rate is its count over its span; a side's rate the mean of its runs' rates; the change is head's over
base's, in percent. **Interval**: with 2 or more runs a side, a bootstrap over runs (each side's runs drawn with
replacement, `RESAMPLES` times from a fixed seed), its percentile interval widened about the estimate by
`stats.small_sample_factor` as the step comparison's. With one run a side: for launches, the rate ratio of two
counts a, b with the Poisson interval exp(ln r ± z·√(1/a + 1/b)); for steps and tokens (tokens come in steps,
so the step counts carry the variance), the count of a renewal process in a window, var(ln n) ≈ cv²/n with cv the
coefficient of variation of the counted steps' owned times, plus 1/n² a side for the step the window's edges
may cut: exp(ln r ± z·√(cv_b²/n_b + cv_h²/n_h + 1/n_b² + 1/n_h²)).

**Per unit of work** (tokens and steps): each run's capture time over its count, split into parts that tile it
(attribution.per_unit): the counted phase's kernels, GPU idle, copies and outside-GPU time, and the time outside
its steps. The parts' changes add up to the change in time per unit of work exactly.
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist
from typing import Any

from traceview.diff import attribution, comparability, stats

SPAN_TOLERANCE = 0.02  # largest over smallest span, less one
MAIN_LOOP_SHARE = 0.8  # of the base's kernel time in families every run ran
MIN_STEPS_FOR_RATE = 2  # priced steps of the counted phase, per run
RESAMPLES = 2000
UNITS = {"tokens": "tokens/s", "steps": "steps/s", "launches": "launches/s"}
BASIS_WORDS = {"tokens": "tokens", "steps": "steps", "launches": "launches of the main loop's kernels"}


def _span(report: dict[str, Any]) -> int | None:
    span = (report.get("trace") or {}).get("span_ns")
    return span if span and span > 0 else None


def _step_tokens(step: dict[str, Any]) -> int | None:
    tokens = step.get("tokens") or {}
    known = [v for v in (tokens.get("prefill"), tokens.get("decode")) if v is not None]
    return sum(known) if known else None


def _main_phase(reports: list[dict[str, Any]]) -> str | None:
    counts: dict[str, int] = {}
    for report in reports:
        for step in comparability.priced_steps(report):
            counts[step["phase"]] = counts.get(step["phase"], 0) + 1
    return min(counts, key=lambda p: (-counts[p], p or "")) if counts else None


def _main_loop(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The families every run ran that hold the most base kernel time, up to MAIN_LOOP_SHARE of it."""
    runs = base + head
    common = set.intersection(*({(k["short_name"], k["category"]) for k in r["kernel_families"]} for r in runs))
    time: dict[tuple[str, str], float] = {}
    for report in base:
        for k in report["kernel_families"]:
            key = (k["short_name"], k["category"])
            if key in common:
                time[key] = time.get(key, 0.0) + k["time_ns"]
    total = sum(time.values())
    chosen, covered = [], 0.0
    for key in sorted(time, key=lambda k: (-time[k], k[0] or "", k[1] or "")):
        if total and covered >= MAIN_LOOP_SHARE * total:
            break
        chosen.append(key)
        covered += time[key]
    return chosen


def _work(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]] | None:
    """The basis and, per run (base first), the work counted, the steps that carry its variance and their cv."""
    runs = base + head
    priced = [comparability.priced_steps(r) for r in runs]

    def cv(times: list[int]) -> float:
        spread = stats._spread([float(t) for t in times])  # the step comparison's own spread
        return (spread or 0.0) / 100.0

    phase = _main_phase(runs)
    counted = [[s for s in steps if s["phase"] == phase] for steps in priced]
    enough = phase is not None and all(len(steps) >= MIN_STEPS_FOR_RATE for steps in counted)
    if enough and all(_step_tokens(s) is not None for steps in counted for s in steps):
        return "tokens", [{"count": sum(_step_tokens(s) for s in steps), "steps": len(steps),
                           "cv": cv([_owned(s) for s in steps]), "phase": phase} for steps in counted]
    if enough:
        return "steps", [{"count": len(steps), "steps": len(steps), "cv": cv([_owned(s) for s in steps]),
                          "phase": phase} for steps in counted]
    families = _main_loop(base, head)
    if not families:
        return None
    chosen = set(families)
    counts = [sum(k["count"] for k in r["kernel_families"] if (k["short_name"], k["category"]) in chosen) for r in runs]
    if not all(counts):
        return None
    return "launches", [{"count": c, "steps": None, "cv": None, "families": len(families)} for c in counts]


def _owned(step: dict[str, Any]) -> int:
    owned = step.get("owned_ns")
    return owned if owned is not None else step["wall_ns"]


def _interval(base: list[float], head: list[float], work: list[dict[str, Any]], basis: str, change: float,
              confidence: float) -> tuple[list[float] | None, str]:
    """The change's interval in percent and the method, in words."""
    if len(base) > 1 and len(head) > 1:
        rng = random.Random(stats.SEED)
        resampled = []
        for _ in range(RESAMPLES):
            b = sum(rng.choice(base) for _ in base) / len(base)
            h = sum(rng.choice(head) for _ in head) / len(head)
            resampled.append(100.0 * (h / b - 1.0))
        resampled.sort()
        factor = stats.small_sample_factor(len(base), len(head), confidence)
        return stats._interval(resampled, change, confidence, factor), "bootstrap over runs"
    if len(base) != 1 or len(head) != 1:
        return None, "no interval"
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    b, h = work[0], work[-1]
    if basis == "launches":
        se, method = math.sqrt(1.0 / b["count"] + 1.0 / h["count"]), "Poisson rate ratio of the launch counts"
    else:
        nb, nh = b["steps"], h["steps"]
        se = math.sqrt(b["cv"] ** 2 / nb + h["cv"] ** 2 / nh + 1.0 / nb**2 + 1.0 / nh**2)
        method = "renewal count of the steps in a window (one run a side: step-to-step noise only)"
    ratio = 1.0 + change / 100.0
    return [100.0 * (ratio * math.exp(-z * se) - 1.0), 100.0 * (ratio * math.exp(z * se) - 1.0)], method


def fixed_window(base: list[dict[str, Any]], head: list[dict[str, Any]], *, confidence: float = 0.95) -> dict[str, Any] | None:
    """Throughput of window-bounded captures (module docstring), or None when the captures are bounded by work."""
    spans = [_span(r) for r in base + head]
    if not base or not head or any(s is None for s in spans):
        return None
    if max(spans) > (1.0 + SPAN_TOLERANCE) * min(spans):
        return None
    found = _work(base, head)
    if found is None:
        return None
    basis, work = found
    counts = [w["count"] for w in work]
    if len(set(counts)) == 1:  # the same work in every run: bounded by work, the per-step comparison holds
        return None
    rates = [1e9 * w["count"] / s for w, s in zip(work, spans)]
    base_rates, head_rates = rates[:len(base)], rates[len(base):]
    base_rate, head_rate = sum(base_rates) / len(base_rates), sum(head_rates) / len(head_rates)
    change = 100.0 * (head_rate / base_rate - 1.0)
    interval, method = _interval(base_rates, head_rates, work, basis, change, confidence)
    base_count = sum(counts[:len(base)]) / len(base)
    head_count = sum(counts[len(base):]) / len(head)
    window = round(sum(spans) / len(spans))
    spread = 100.0 * (max(spans) / min(spans) - 1.0)
    what = BASIS_WORDS[basis] + (f" ({work[0]['phase']})" if basis != "launches" else "")
    per_unit = None
    if basis != "launches":
        per_unit = attribution.per_unit(base, head, work[0]["phase"], counts[:len(base)], counts[len(base):],
                                        "token" if basis == "tokens" else "step")
    return {
        "basis": basis, "unit": UNITS[basis], "what": what, "per_unit": per_unit,
        "base_per_s": base_rate, "head_per_s": head_rate,
        "base_count": base_count, "head_count": head_count,
        "change_pct": change, "interval_pct": interval, "method": method,
        "window_ns": window, "confidence": confidence,
        "reason": (f"every run's span is within {100 * SPAN_TOLERANCE:g}% of the others' ({spread:.1f}% apart) while "
                   f"the work differs ({count_text(base_count)} vs {count_text(head_count)} {what} a run): the captures are bounded "
                   "by time, so work per second is compared"),
    }


def count_text(value: float) -> str:
    return f"{value:,.0f}" if abs(value - round(value)) < 1e-9 else f"{value:,.1f}"


def decide(throughput: dict[str, Any], threshold_pct: float) -> tuple[str, str]:
    """The verdict on throughput: lower work per second is the regression, never less busy time the improvement."""
    change, interval = throughput["change_pct"], throughput["interval_pct"]
    level = f"{100 * throughput['confidence']:g}%"
    unit = throughput["unit"]
    if interval is None:
        return "inconclusive", f"throughput ({unit}) {change:+.1f}% with no interval"
    low, high = interval
    span = f"{change:+.1f}% [{low:+.1f}%, {high:+.1f}%]"
    if high < 0 and change <= -threshold_pct:
        return "regression", (f"throughput ({unit}) {span}: lower at {level} confidence, by at least the "
                              f"{threshold_pct:g}% threshold")
    if low > 0 and change >= threshold_pct:
        return "improvement", (f"throughput ({unit}) {span}: higher at {level} confidence, by at least the "
                               f"{threshold_pct:g}% threshold")
    if -threshold_pct <= low and high <= threshold_pct:
        return "neutral", f"throughput ({unit}) {span}: any change is within ±{threshold_pct:g}%"
    return "inconclusive", (f"throughput ({unit}) {span} reaches across ±{threshold_pct:g}%; more runs a side (or a "
                            "longer window) would decide it")
