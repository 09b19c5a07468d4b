"""The statistics a regression gate can rest on: a change in step time with a confidence interval that
respects runs, a test of the shift, and a verdict against a threshold.

GPU step times drift between runs (clocks, thermals, placement) by more than they vary within a run,
so steps of one run are not independent samples of the workload. The interval comes from a
hierarchical bootstrap: each resample draws the runs of a side with replacement, then each drawn
run's steps with replacement, pools them and takes the median (and p90); the change is head's over
base's, in percent, and the interval is the central `confidence` share of the resampled changes
(percentile interval). With one run a side only the steps are resampled, and the interval then
measures step-to-step noise alone (`run_noise_measured` false). docs/ci.md gives the method, its
assumptions, its minimum sample, and the false-alarm rate and power measured by bench/diff_calibration.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

MIN_STEPS = 5  # per side and phase: fewer and the median of a resample is one of a handful of values
MAX_RESAMPLES = 2000
MIN_RESAMPLES = 400
DRAW_BUDGET = 4_000_000  # resampled step draws per comparison, so a side of 10,000 steps stays fast
SEED = 0  # fixed: the same runs give the same interval, byte for byte


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated linearly between order statistics."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion around the normal one (within 1% for dof >= 3)."""
    z = NormalDist().inv_cdf(p)
    return (z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * dof**4))


def small_sample_factor(base_runs: int, head_runs: int, confidence: float) -> float:
    """How much wider than the bootstrap's the interval must be when runs are few.

    A bootstrap over R runs sees (R-1)/R of their variance and treats it as known; with 3 or 5 runs
    a side that under-covers (measured: 13% two-sided false alarms at 95% with 3 runs). The factor
    sqrt(R/(R-1)) · t(ν)/z, with R the fewer runs of a side and ν = runs - 2, restores it (docs/ci.md).
    """
    runs = min(base_runs, head_runs)
    if runs < 2:
        return 1.0
    p = 1.0 - (1.0 - confidence) / 2.0
    return math.sqrt(runs / (runs - 1)) * t_quantile(p, base_runs + head_runs - 2) / NormalDist().inv_cdf(p)


def _percent(base: float, head: float) -> float:
    return 100.0 * (head - base) / base


def _pooled(runs: Sequence[Sequence[float]]) -> list[float]:
    return sorted(value for run in runs for value in run)


def _resample(runs: Sequence[Sequence[float]], rng: random.Random) -> tuple[float, float]:
    """Median and p90 of one hierarchical resample: runs with replacement, then steps within each run."""
    chosen = [runs[rng.randrange(len(runs))] for _ in runs] if len(runs) > 1 else runs
    pooled: list[float] = []
    for run in chosen:
        pooled.extend(rng.choices(run, k=len(run)))
    pooled.sort()
    return quantile(pooled, 0.5), quantile(pooled, 0.9)


def resamples_for(steps: int) -> int:
    """How many resamples a comparison of `steps` steps (both sides) gets within the draw budget."""
    return max(MIN_RESAMPLES, min(MAX_RESAMPLES, DRAW_BUDGET // max(steps, 1)))


def compare(base: Sequence[Sequence[float]], head: Sequence[Sequence[float]], *, confidence: float = 0.95,
            seed: int = SEED, resamples: int | None = None) -> dict[str, Any]:
    """Median and p90 change (%) of head over base with bootstrap intervals and a two-sided p-value.

    `base` and `head` are step times grouped by run (empty runs dropped by the caller); with fewer than
    MIN_STEPS steps a side there is no interval and no p-value, only the change. The p-value is
    the bootstrap's: twice the smaller share of resampled median changes on either side of zero (widened
    like the interval), and never below 1/resamples. `resamples` caps the count `resamples_for` gives (the
    diff's kernel families, many of them, take fewer).
    """
    pooled_base, pooled_head = _pooled(base), _pooled(head)
    result: dict[str, Any] = {
        "base": _side(base, pooled_base), "head": _side(head, pooled_head),
        "confidence": confidence,
        "run_noise_measured": len(base) > 1 and len(head) > 1,
        "identical": pooled_base == pooled_head and sorted(map(sorted, base)) == sorted(map(sorted, head)),
    }
    if not pooled_base or not pooled_head or result["base"]["median_ns"] <= 0:
        return {**result, "median_change_pct": None, "median_interval_pct": None, "p90_change_pct": None,
                "p90_interval_pct": None, "p_value": None, "resamples": 0}
    median_change = _percent(result["base"]["median_ns"], result["head"]["median_ns"])
    p90_change = _percent(result["base"]["p90_ns"], result["head"]["p90_ns"])
    if min(len(pooled_base), len(pooled_head)) < MIN_STEPS:  # an interval of a handful of steps would look decisive
        return {**result, "median_change_pct": median_change, "median_interval_pct": None,
                "p90_change_pct": p90_change, "p90_interval_pct": None, "p_value": None, "resamples": 0}
    if result["identical"]:
        return {**result, "median_change_pct": 0.0, "median_interval_pct": [0.0, 0.0], "p90_change_pct": 0.0,
                "p90_interval_pct": [0.0, 0.0], "p_value": 1.0, "resamples": 0}
    rng = random.Random(seed)
    count = resamples_for(len(pooled_base) + len(pooled_head))
    if resamples is not None:
        count = min(count, resamples)
    medians, p90s = [], []
    for _ in range(count):
        base_median, base_p90 = _resample(base, rng)
        head_median, head_p90 = _resample(head, rng)
        medians.append(_percent(base_median, head_median))
        p90s.append(_percent(base_p90, head_p90) if base_p90 > 0 else math.nan)
    medians.sort()
    p90s = sorted(v for v in p90s if not math.isnan(v))
    factor = small_sample_factor(len(base), len(head), confidence)
    return {
        **result,
        "median_change_pct": median_change,
        "median_interval_pct": _interval(medians, median_change, confidence, factor),
        "p90_change_pct": p90_change,
        "p90_interval_pct": _interval(p90s, p90_change, confidence, factor) if p90s else None,
        "p_value": _p_value(medians, median_change, factor),
        "interval_factor": factor,
        "resamples": count,
    }


def _interval(ordered: list[float], estimate: float, confidence: float, factor: float) -> list[float]:
    """The percentile interval of the resampled changes, widened about the estimate by `factor`."""
    tail = (1.0 - confidence) / 2.0
    low, high = quantile(ordered, tail), quantile(ordered, 1.0 - tail)
    return [estimate - factor * (estimate - low), estimate + factor * (high - estimate)]


def _p_value(ordered: list[float], estimate: float, factor: float) -> float:
    """Two-sided: twice the share of resampled changes beyond zero once widened like the interval
    (a change c counts as estimate + factor·(c - estimate)); at least 1/resamples."""
    count = len(ordered)
    below = sum(1 for v in ordered if estimate + factor * (v - estimate) <= 0.0)
    above = sum(1 for v in ordered if estimate + factor * (v - estimate) >= 0.0)
    return min(1.0, max(2.0 * min(below, above), 1.0) / count)


def _side(runs: Sequence[Sequence[float]], pooled: list[float]) -> dict[str, Any]:
    return {
        "runs": len(runs), "steps": len(pooled),
        "median_ns": quantile(pooled, 0.5) if pooled else None,
        "p10_ns": quantile(pooled, 0.1) if pooled else None,
        "p90_ns": quantile(pooled, 0.9) if pooled else None,
        "run_medians_ns": [quantile(sorted(run), 0.5) for run in runs],
        "spread_pct": _spread(pooled),
    }


def _spread(values: list[float]) -> float | None:
    """Coefficient of variation, in percent (None below two values)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    if mean <= 0:
        return None
    return 100.0 * math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean


def decide(comparison: dict[str, Any], threshold_pct: float) -> tuple[str, str]:
    """The verdict at a threshold, with the reason in words.

    regression: the interval excludes zero (the shift is real at the confidence level) and the change
    is at least +threshold; improvement: likewise below zero and at most -threshold; neutral: the
    interval lies within ±threshold, or the steps are identical, or the shift is real but smaller
    than the threshold with the interval inside ±threshold; inconclusive: too few steps, or an interval
    that reaches across a threshold without deciding (more runs would).
    """
    base, head = comparison["base"], comparison["head"]
    if min(base["steps"], head["steps"]) < MIN_STEPS:
        return "inconclusive", (f"too few steps to decide: base {base['steps']}, head {head['steps']} "
                                f"(at least {MIN_STEPS} a side)")
    if comparison["identical"]:
        return "neutral", "identical step times on both sides"
    interval = comparison["median_interval_pct"]
    if interval is None:
        return "inconclusive", "no step time to compare"
    low, high = interval
    change = comparison["median_change_pct"]
    span = f"{change:+.1f}% [{low:+.1f}%, {high:+.1f}%]"
    level = f"{100 * comparison['confidence']:g}%"
    if low > 0 and change >= threshold_pct:
        return "regression", f"median step {span}: slower at {level} confidence, by at least the {threshold_pct:g}% threshold"
    if high < 0 and change <= -threshold_pct:
        return "improvement", f"median step {span}: faster at {level} confidence, by at least the {threshold_pct:g}% threshold"
    if -threshold_pct <= low and high <= threshold_pct:
        return "neutral", f"median step {span}: any change is within ±{threshold_pct:g}%"
    return "inconclusive", f"median step {span} reaches across ±{threshold_pct:g}%; " + _more_runs(comparison, threshold_pct)


def _more_runs(comparison: dict[str, Any], threshold_pct: float) -> str:
    """How many runs a side would likely decide it, if the noise stays as measured (width ∝ 1/√runs)."""
    if not comparison["run_noise_measured"]:
        return "profile 3 or more runs a side (--base/--head repeated) to measure the run-to-run noise"
    low, high = comparison["median_interval_pct"]
    change = comparison["median_change_pct"]
    margin = min(abs(change - threshold_pct), abs(change + threshold_pct))
    if margin < 0.05:
        return "the change sits at the threshold"
    runs = max(comparison["base"]["runs"], comparison["head"]["runs"])
    needed = math.ceil(runs * ((high - low) / 2.0 / margin) ** 2)
    return f"about {needed} runs a side would decide it" if needed > runs else "more runs a side would decide it"
