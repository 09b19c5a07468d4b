"""How often the `traceview diff --fail-on-regression` gate fails: its false-alarm rate when nothing changed
and its power when decode is truly slower (a script, not a test; it prints rates and never asserts).

    .venv/bin/python bench/diff_calibration.py --pairs 400 --output /tmp/traceview-bench/calibration.md
    .venv/bin/python bench/diff_calibration.py --mode traces --pairs 20 --runs 3 --gates 5 --changes 7
    .venv/bin/python bench/diff_calibration.py --mode real --output /tmp/traceview-bench/real.md

real mode: pairs from shared Kineto traces (--traces-dir, read only), base the unedited trace, head an edited copy
under the temp folder: per-step noise, one family 8% slower per launch, or 12% fewer steps in the same window
(real_edit); it counts false alarms, detections and fewer-iterations pairs that read as faster (docs/ci.md).

A pair is R base runs and R head runs of the serving workload, drawn with the noise model of
`traceview.testing.serving_runs`: step time = base × (1 + run_noise·z_run)(1 + step_noise·z_step)(1 + change).
  * model: the step times come from that formula, with the base step times of one generated run analysed
    through the pipeline (its 24 decode steps' `owned_ns`), and go straight to `stats.compare` and
    `stats.decide` at each gate; the gate fails when decode's verdict is `regression`.
  * traces: each run is a generated Kineto trace, reported through the pipeline in a process pool, and the
    gate fails when `build_diff(..., fail_on_regression_pct=T)` gives exit code 1 (any phase). The same
    settings are also measured in model mode, on the same seeds, so the two can be compared.
Pair p's sides use the same seeds in every setting, so rows differ by their setting, not by luck.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import re
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

RUN_NOISE_PCT = 1.5  # serving_runs' defaults
STEP_NOISE_PCT = 2.0
VERDICTS = ("regression", "improvement", "neutral", "inconclusive")


@dataclass(frozen=True)
class Setting:
    """One measured condition: runs a side, the noise, and decode's true change (head over base)."""

    runs: int
    change_pct: float = 0.0
    run_noise_pct: float = RUN_NOISE_PCT
    step_noise_pct: float = STEP_NOISE_PCT


@dataclass(frozen=True)
class Section:
    """One table: its settings, each measured at every gate threshold."""

    title: str
    settings: tuple[Setting, ...]
    gates: tuple[float, ...]
    false_alarms: bool


@dataclass(frozen=True)
class Outcome:
    """One pair at one gate: the verdict, whether the gate failed, the phases that failed it, and each
    phase's own verdict (traces mode)."""

    verdict: str
    failed: bool
    phases: tuple[str, ...] = ()
    phase_verdicts: tuple[tuple[str, str], ...] = ()


def side_seed(seed: int, pair: int, side: int) -> int:
    """The seed of one side of one pair, the same in every setting (common random numbers)."""
    return (seed * 1_000_003 + pair) * 2 + side


def decode_base_times() -> list[float]:
    """Decode steps' owned time in one noise-free generated run, analysed through the whole pipeline."""
    from traceview import api, workflow
    from traceview.testing import serving_runs, serving_steps, write_kineto

    with tempfile.TemporaryDirectory(prefix="traceview-calibration-") as tmp:
        path = write_kineto(serving_runs(1, run_noise_pct=0, step_noise_pct=0)[0], Path(tmp) / "base.pt.trace.json.gz")
        with api.load(path) as trace:
            steps = workflow.report(trace, workflow.CheckOptions.configured())["steps"]
    schedule = [phase for phase, _, _ in serving_steps()]
    phases = [step["phase"] for step in steps]
    if phases != schedule:
        raise SystemExit(f"the generated run's steps are {phases}, not serving_steps()'s schedule {schedule}")
    return [float(step["owned_ns"]) for step in steps if step["phase"] == "decode"]


def model_runs(base_times: Sequence[float], setting: Setting, change_pct: float, seed: int) -> list[list[float]]:
    """Decode step times of `setting.runs` runs, drawn exactly as serving_runs(seed=seed) draws its scales.

    The random stream is consumed in serving_runs' order (a run's factor, one draw per step of every
    phase, then the run's spec seed), so run r here has the scales of serving_runs' run r.
    """
    from traceview.testing import serving_steps

    rng = random.Random(seed)
    schedule = [phase for phase, _, _ in serving_steps()]
    runs = []
    for _ in range(setting.runs):
        run_factor = 1.0 + setting.run_noise_pct / 100.0 * rng.gauss(0.0, 1.0)
        scales = [run_factor * (1.0 + setting.step_noise_pct / 100.0 * rng.gauss(0.0, 1.0))
                  * (1.0 + (change_pct if phase == "decode" else 0.0) / 100.0) for phase in schedule]
        rng.randrange(2**31)  # the spec seed serving_runs draws next; the model keeps the base run's jitter
        decode_scales = [scale for scale, phase in zip(scales, schedule) if phase == "decode"]
        runs.append([base * scale for base, scale in zip(base_times, decode_scales)])
    return runs


def model_pair(task: tuple[list[float], Setting, int, int, tuple[float, ...], float]) -> tuple[Outcome, ...]:
    """Decode's verdict at each gate for one pair drawn from the noise model."""
    from traceview.diff import stats

    base_times, setting, seed, pair, gates, confidence = task
    base = model_runs(base_times, setting, 0.0, side_seed(seed, pair, 0))
    head = model_runs(base_times, setting, setting.change_pct, side_seed(seed, pair, 1))
    comparison = stats.compare(base, head, confidence=confidence)
    outcomes = []
    for gate in gates:
        verdict, _ = stats.decide(comparison, gate)
        outcomes.append(Outcome(verdict, verdict == "regression", ("decode",) if verdict == "regression" else ()))
    return tuple(outcomes)


def traced_side(setting: Setting, change_pct: float, seed: int, workdir: Path) -> list[dict]:
    """ReportData of each run of one side: generated traces, analysed, checked and reported."""
    from traceview import api, workflow
    from traceview.testing import serving_runs, write_kineto

    options = workflow.CheckOptions.configured()
    specs = serving_runs(setting.runs, seed=seed, run_noise_pct=setting.run_noise_pct,
                         step_noise_pct=setting.step_noise_pct, change_pct={"decode": change_pct})
    reports = []
    for run, spec in enumerate(specs):
        path = write_kineto(spec, workdir / f"run{run}-{seed}.pt.trace.json.gz")
        with api.load(path) as trace:
            reports.append(workflow.report(trace, options))
        path.unlink()
    return reports


def traced_pair(task: tuple[Setting, int, int, tuple[float, ...], float]) -> tuple[Outcome, ...]:
    """The diff's verdict and exit code at each gate for one pair of generated runs."""
    from traceview.diff import build_diff

    setting, seed, pair, gates, confidence = task
    with tempfile.TemporaryDirectory(prefix="traceview-calibration-") as tmp:
        base = traced_side(setting, 0.0, side_seed(seed, pair, 0), Path(tmp))
        head = traced_side(setting, setting.change_pct, side_seed(seed, pair, 1), Path(tmp))
    outcomes = []
    for gate in gates:
        diff = build_diff(base, head, fail_on_regression_pct=gate, confidence=confidence)
        failing = tuple(p["phase"] for p in diff["phases"] if diff["exit_code"] == 1 and p["verdict"] == "regression")
        verdicts = tuple((p["phase"], p["verdict"]) for p in diff["phases"])
        outcomes.append(Outcome(diff["verdict"], diff["exit_code"] == 1, failing, verdicts))
    return tuple(outcomes)


def wilson(failures: int, pairs: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a rate: honest near 0 and 1, where the normal one goes negative."""
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    rate = failures / pairs
    denominator = 1.0 + z * z / pairs
    centre = (rate + z * z / (2 * pairs)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / pairs + z * z / (4 * pairs * pairs)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def within(failures: int, pairs: int, allowed: float) -> str:
    """Whether a false-alarm rate keeps to the configured rate, and whether its interval says so firmly."""
    rate = failures / pairs
    low, high = wilson(failures, pairs)
    if rate <= allowed:
        return "yes" if high <= allowed else f"yes (interval reaches {100 * high:.1f}%)"
    return "**no**" if low > allowed else f"**no** (interval reaches down to {100 * low:.1f}%)"


def rate_cells(outcomes: Sequence[Outcome]) -> list[str]:
    failures = sum(o.failed for o in outcomes)
    low, high = wilson(failures, len(outcomes))
    return [f"{failures}/{len(outcomes)}", f"{100 * failures / len(outcomes):.1f}%", f"{100 * low:.1f}–{100 * high:.1f}%"]


def setting_cells(setting: Setting, gate: float) -> list[str]:
    return [str(setting.runs), f"{setting.run_noise_pct:g}%", f"{setting.step_noise_pct:g}%",
            f"{setting.change_pct:+g}%", f"{gate:g}%"]


def verdict_cell(outcomes: Sequence[Outcome]) -> str:
    counts = Counter(o.verdict for o in outcomes)
    return " / ".join(str(counts[v]) for v in VERDICTS)


def phase_verdict_cell(outcomes: Sequence[Outcome]) -> str:
    counts = Counter(pair for o in outcomes for pair in o.phase_verdicts)
    phases = dict.fromkeys(phase for o in outcomes for phase, _ in o.phase_verdicts)
    return "; ".join(f"{phase} " + " / ".join(str(counts[(phase, v)]) for v in VERDICTS) for phase in phases)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; columns whose every cell opens with a number are right-aligned."""
    numeric = [all(row[i][:1].isdigit() or row[i][:1] in "+-" for row in rows) for i in range(len(header))]
    align = ["---:" if n else "---" for n in numeric]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def model_table(section: Section, results: dict[tuple[Setting, float], list[Outcome]], allowed: float) -> list[str]:
    header = ["R", "run noise", "step noise", "change", "gate", "failed / pairs", "rate", "Wilson 95%",
              "verdicts reg / imp / neu / inc"]
    if section.false_alarms:
        header.append(f"within {100 * allowed:g}%?")
    rows = []
    for setting in section.settings:
        for gate in section.gates:
            outcomes = results[(setting, gate)]
            row = [*setting_cells(setting, gate), *rate_cells(outcomes), verdict_cell(outcomes)]
            if section.false_alarms:
                row.append(within(sum(o.failed for o in outcomes), len(outcomes), allowed))
            rows.append(row)
    return table(header, rows)


def traces_table(section: Section, traced: dict[tuple[Setting, float], list[Outcome]],
                 paired: dict[tuple[Setting, float], list[Outcome]], modelled: dict[tuple[Setting, float], list[Outcome]],
                 allowed: float) -> list[str]:
    header = ["R", "run noise", "step noise", "change", "gate", "traces: failed / pairs", "traces rate", "Wilson 95%",
              "failing phases", "verdicts reg / imp / neu / inc", "by phase", "model, same seeds", "same outcome",
              "model: failed / pairs", "model rate", "model Wilson 95%"]
    if section.false_alarms:
        header.append(f"traces within {100 * allowed:g}%?")
    rows = []
    for setting in section.settings:
        for gate in section.gates:
            real, twin, model = traced[(setting, gate)], paired[(setting, gate)], modelled[(setting, gate)]
            phases = Counter(phase for o in real for phase in o.phases)
            agree = sum(a.failed == b.failed for a, b in zip(real, twin))
            row = [*setting_cells(setting, gate), *rate_cells(real),
                   ", ".join(f"{p} {n}" for p, n in sorted(phases.items())) or "none", verdict_cell(real),
                   phase_verdict_cell(real), f"{sum(o.failed for o in twin)}/{len(twin)}", f"{agree}/{len(real)}",
                   *rate_cells(model)]
            if section.false_alarms:
                row.append(within(sum(o.failed for o in real), len(real), allowed))
            rows.append(row)
    return table(header, rows)


def sections_for(mode: str, runs: tuple[int, ...], gates: tuple[float, ...], changes: tuple[float, ...]) -> list[Section]:
    """The tables a mode measures: false alarms and power always; the noisier cases in model mode."""
    sections = [
        Section("False alarms: no real change", tuple(Setting(r) for r in runs), gates, True),
        Section("Power: decode truly slower", tuple(Setting(r, c) for c in changes for r in runs), gates, False),
    ]
    if mode == "model":
        sections += [
            Section("A 1% change under 3% step noise", tuple(Setting(r, 1.0, step_noise_pct=3.0) for r in runs),
                    (5.0,), False),
            Section("False alarms at 3% run noise: is the small-sample widening enough?",
                    tuple(Setting(r, run_noise_pct=3.0) for r in runs), gates, True),
        ]
    return sections


def measure_model(pool: ProcessPoolExecutor, jobs: int, base_times: list[float], sections: list[Section], pairs: int,
                  seed: int, confidence: float) -> dict[tuple[Setting, float], list[Outcome]]:
    results: dict[tuple[Setting, float], list[Outcome]] = {}
    for section in sections:
        for setting in section.settings:
            tasks = [(base_times, setting, seed, pair, section.gates, confidence) for pair in range(pairs)]
            per_pair = list(pool.map(model_pair, tasks, chunksize=max(1, pairs // (4 * jobs))))
            for index, gate in enumerate(section.gates):
                results[(setting, gate)] = [outcomes[index] for outcomes in per_pair]
    return results


def measure_traces(pool: ProcessPoolExecutor, sections: list[Section], pairs: int, seed: int,
                   confidence: float) -> dict[tuple[Setting, float], list[Outcome]]:
    results: dict[tuple[Setting, float], list[Outcome]] = {}
    for section in sections:
        for setting in section.settings:
            tasks = [(setting, seed, pair, section.gates, confidence) for pair in range(pairs)]
            per_pair = list(pool.map(traced_pair, tasks))
            for index, gate in enumerate(section.gates):
                results[(setting, gate)] = [outcomes[index] for outcomes in per_pair]
    return results


def numbers(text: str, kind: type) -> tuple:
    """A comma-separated list of non-negative numbers such as `0,2,5%`; ValueError names the text otherwise."""
    try:
        values = tuple(kind(part.strip().rstrip("%")) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 0:
        raise ValueError(f"expected a comma-separated list of non-negative numbers, got {text!r}")
    return values


# --- real mode: pairs made from real shared Kineto traces ------------------------------------------------

REAL_TRACES = (
    "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz",
    "hta__sampled_rank-0.json.gz",
    "hta__negative_queue_a100_ws16_rank0.json.gz",
    "kineto-tbplugin__resnet50_2021_legacy.pt.trace.json.gz",
    "hta__ns_resolution_v100.pt.trace.json.gz",
)
REAL_CASES = ("noise", "slow", "fewer")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "memcpy", "memset")  # lower-cased: legacy traces say Kernel
SLOW_FACTOR = 1.08  # the slowed family's launches, head over base
DROP_SHARE = 0.12   # the share of the steady steps a fewer-iterations copy leaves out


@dataclass(frozen=True)
class RealBase:
    """What the edits need from an unedited trace: its step windows (trace microseconds), its slowed family
    and that family's full kernel names, and its report."""

    name: str
    steps: tuple[tuple[float, float, str], ...]  # (start_us, end_us, phase) of the priced steps, in start order
    gpu_windows: bool  # steps found from GPU idle gaps (the step windows are GPU time), not annotations
    family: tuple[str, str]
    family_names: tuple[str, ...]
    report: dict


_RAW: dict[Path, dict] = {}


def _cat(event: dict) -> str:
    return str(event.get("cat") or "").lower()


def raw_trace(path: Path) -> dict:
    """The trace's JSON, parsed once per worker process (edits copy the events they change)."""
    if path not in _RAW:
        import gzip
        import json
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            _RAW[path] = json.load(handle)
    return _RAW[path]


def real_base(path: Path) -> RealBase:
    """Report the unedited trace and pick its slowed family: the family with the most kernel time that is
    not communication (NCCL time is mostly waiting) and has at least 10 launches (so it has an interval)."""
    import json
    from traceview import api, workflow

    data = raw_trace(path)
    base_ns = int(data.get("baseTimeNanoseconds") or 0)
    with api.load(path) as trace:
        report = workflow.report(trace, workflow.CheckOptions.configured())
        families = [k for k in report["kernel_families"] if k["category"] != "communication" and k["count"] >= 10]
        top = max(families, key=lambda k: k["time_ns"])
        names = workflow.query(trace, "SELECT DISTINCT name FROM kernels WHERE short_name = $$%s$$ AND category = $$%s$$"
                               % (top["short_name"], top["category"]))["name"].to_list()
    priced = sorted((s for s in report["steps"] if s.get("priced", True)), key=lambda s: s["start_ns"])
    steps = tuple(((s["start_ns"] - base_ns) / 1000.0, (s["end_ns"] - base_ns) / 1000.0, s["phase"]) for s in priced)
    gpu_windows = all(s.get("step_source") == "gpu_gap" for s in priced)
    report = json.loads(json.dumps(report))  # plain data, as a saved report would be
    return RealBase(path.name, steps, gpu_windows, (top["short_name"], top["category"]), tuple(names), report)


def _noise_warp(boundaries: list[float], last_end: float, factors: list[float]):
    """t -> t on a timeline whose step i, [boundaries[i], boundaries[i+1]) (the last to last_end), is stretched
    by factors[i]; time before the first step is unchanged and time after the last is shifted."""
    import bisect

    edges = [*boundaries, max(last_end, boundaries[-1])]
    new_edges = [edges[0]]
    for i, factor in enumerate(factors):
        new_edges.append(new_edges[-1] + (edges[i + 1] - edges[i]) * factor)

    def warp(t: float) -> float:
        if t < edges[0]:
            return t
        if t >= edges[-1]:
            return t + new_edges[-1] - edges[-1]
        i = min(bisect.bisect_right(edges, t) - 1, len(factors) - 1)
        return new_edges[i] + (t - edges[i]) * factors[i]

    return warp


def real_edit(base: RealBase, path: Path, case: str, seed: int, noise_pct: float, out: Path) -> dict:
    """Write an edited copy of the trace: every case gets per-step noise (seeded); `slow` also makes the family's
    launches SLOW_FACTOR longer and shifts everything after each one by the added time; `fewer` also leaves out
    DROP_SHARE of the steady steps (evenly spaced, never the first or last), their CPU events and their GPU work,
    so the same capture window holds fewer iterations with idle where they were."""
    import json

    data = raw_trace(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    steps = list(base.steps)
    rng = random.Random(seed)
    factors = [max(0.5, 1.0 + noise_pct / 100.0 * rng.gauss(0.0, 1.0)) for _ in steps]
    if case == "fewer":
        phase = Counter(p for _, _, p in steps).most_common(1)[0][0]
        candidates = [i for i, (_, _, p) in enumerate(steps) if p == phase]
        inner = candidates[1:-1] if len(candidates) > 2 else candidates[-1:]
        k = max(1, round(DROP_SHARE * len(candidates)))
        dropped = sorted({inner[min(len(inner) - 1, int((j + 0.5) * len(inner) / k))] for j in range(k)})
        windows = [(steps[i][0], steps[i][1]) for i in dropped]

        def inside(t0: float, t1: float) -> bool:
            return any(a <= t0 and t1 <= b for a, b in windows)

        def corr(e: dict):
            args = e.get("args") or {}
            return args.get("correlation")

        cpu_corr = {corr(e) for e in events if _cat(e) not in GPU_CATS and corr(e) is not None}
        if base.gpu_windows:  # the windows are GPU bursts: drop the GPU work in them and the launches of it
            gone = {corr(e) for e in events if _cat(e) in GPU_CATS and e.get("ph") == "X"
                    and inside(float(e["ts"]), float(e["ts"]))}
            gone.discard(None)
            keep = [e for e in events if not (
                (_cat(e) in GPU_CATS and e.get("ph") == "X" and inside(float(e["ts"]), float(e["ts"])))
                or (corr(e) in gone and _cat(e) not in GPU_CATS)
                or (e.get("ph") in ("s", "f", "t") and e.get("id") in gone))]
        else:  # annotation steps: drop the CPU events inside them and the GPU work they launched
            gone = {corr(e) for e in events if _cat(e) not in GPU_CATS and e.get("ph") == "X" and corr(e) is not None
                    and inside(float(e["ts"]), float(e["ts"]) + float(e.get("dur") or 0))}
            cpu = [e for e in events if e.get("ph") == "X" and _cat(e) not in GPU_CATS and "ts" in e]
            last = max(cpu, key=lambda e: float(e["ts"]) + float(e.get("dur") or 0)) if cpu else None
            keep = []
            for e in events:
                if e.get("ph") == "M" or "ts" not in e or e is last:  # the last CPU event keeps the window's end
                    keep.append(e)
                    continue
                t0 = float(e["ts"])
                t1 = t0 + float(e.get("dur") or 0)
                if _cat(e) in GPU_CATS:
                    c = corr(e)
                    if c in gone or (c not in cpu_corr and inside(t0, t0)):
                        continue
                elif e.get("ph") in ("s", "f", "t") and e.get("id") in gone:
                    continue
                elif e.get("ph") != "M" and inside(t0, t1):
                    continue
                keep.append(e)
        events = keep
    if case == "fewer":  # the window keeps its length exactly: the noise is rescaled to add no time overall
        lengths = [b - a for a, b in zip([s for s, _, _ in steps], [s for s, _, _ in steps[1:]] + [steps[-1][1]])]
        scale = sum(lengths) / sum(f * n for f, n in zip(factors, lengths))
        factors = [f * scale for f in factors]
    import bisect

    timed = [i for i, e in enumerate(events) if e.get("ph") != "M" and "ts" in e]
    start = [float(events[i]["ts"]) for i in timed]
    dur = [float(events[i].get("dur") or 0) if events[i].get("ph") == "X" else 0.0 for i in timed]
    end = [a + d for a, d in zip(start, dur)]
    is_gpu = [_cat(events[i]) in GPU_CATS for i in timed]
    boundaries = [s for s, _, _ in steps]
    last_end = steps[-1][1]
    if case == "slow":
        names = set(base.family_names)
        family = [_cat(events[i]) == "kernel" and events[i].get("name") in names for i in timed]
        added = sorted((e, (SLOW_FACTOR - 1.0) * d) for e, d, f in zip(end, dur, family) if f)
        points, extra, total = [p for p, _ in added], [], 0.0
        for _, delta in added:
            total += delta
            extra.append(total)

        def shift(t: float) -> float:
            n = bisect.bisect_right(points, t)
            return t + (extra[n - 1] if n else 0.0)

        new_start = [shift(a) for a in start]
        new_end = [a + SLOW_FACTOR * d if f else a + d if g else shift(e)
                   for a, d, e, f, g in zip(new_start, dur, end, family, is_gpu)]
        boundaries = [shift(b) for b in boundaries]
        last_end = shift(last_end)
        start, end = new_start, [max(a, e) for a, e in zip(new_start, new_end)]
    warp = _noise_warp(boundaries, last_end, factors)
    for j, i in enumerate(timed):
        e = dict(events[i])
        a, b = warp(start[j]), warp(end[j])
        e["ts"] = round(a, 3)
        if e.get("ph") == "X":
            e["dur"] = round(b - a, 3)
        events[i] = e
    edited = {**data, "traceEvents": events}
    out.write_text(json.dumps(edited), encoding="utf-8")
    return {"factors": factors, "dropped": dropped if case == "fewer" else []}


def _throughput(diff: dict) -> str | None:
    """What the diff says of throughput: None where it compares no throughput (not a fixed-window capture, or
    a diff from before throughput.py), else the basis and throughput.decide's verdict at the 5% threshold."""
    found = diff.get("throughput")
    if not isinstance(found, dict):
        return None
    try:
        from traceview.diff import throughput

        verdict, _ = throughput.decide(found, diff["thresholds"]["step_pct"])
    except (ImportError, KeyError, TypeError):
        change = found.get("change_pct")
        verdict = "lower" if change is not None and change < 0 else "higher" if change else "unknown"
    return f"{found.get('basis') or found.get('unit') or 'throughput'} {verdict}"


@dataclass(frozen=True)
class RealOutcome:
    case: str
    trace: str
    seed: int
    verdict: str
    slower: tuple[str, ...]
    faster: tuple[str, ...]
    count: tuple[str, ...]
    target_status: str          # the slowed family's status ("same" when not listed)
    target_change_pct: float | None
    target_interval: tuple[float, float] | None
    throughput: str | None
    reason: str = ""


def real_pair(task: tuple[str, str, int, float, float, str]) -> RealOutcome:
    """One pair: the unedited trace's report (cached on disk) against an edited copy's, through build_diff."""
    import pickle
    from traceview import api, workflow
    from traceview.diff import build_diff

    directory, name, seed, noise_pct, confidence, case = task
    path = Path(directory) / name
    cache = Path(tempfile.gettempdir()) / "traceview-real-calibration" / f"{name}.base.pickle"
    base = pickle.loads(cache.read_bytes())
    with tempfile.TemporaryDirectory(prefix="traceview-real-") as tmp:
        out = Path(tmp) / (name.split(".")[0] + f"-{case}-{seed}.pt.trace.json")
        real_edit(base, path, case, seed, noise_pct, out)
        with api.load(out) as trace:
            head = workflow.report(trace, workflow.CheckOptions.configured())
    diff = build_diff([base.report], [head], confidence=confidence)
    status = {k["kernel"]: k for k in diff["kernels"] if k["category"] == base.family[1]}
    target = status.get(base.family[0])
    interval = target.get("median_interval_pct") if target else None
    return RealOutcome(case, name, seed, diff["verdict"],
                       tuple(k["kernel"] for k in diff["kernels"] if k["status"] == "slower"),
                       tuple(k["kernel"] for k in diff["kernels"] if k["status"] == "faster"),
                       tuple(k["kernel"] for k in diff["kernels"] if k["status"] == "count"),
                       target["status"] if target else "same",
                       target.get("median_change_pct") if target else None,
                       tuple(interval) if interval else None, _throughput(diff),
                       re.sub(r"[-+]?\d[\d.,]*", "#", (diff["verdict_reasons"] or [""])[0])[:140])


def real_base_task(task: tuple[str, str]) -> str:
    import pickle

    directory, name = task
    base = real_base(Path(directory) / name)
    cache = Path(tempfile.gettempdir()) / "traceview-real-calibration" / f"{name}.base.pickle"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(base))
    return f"{name}: {len(base.steps)} priced steps, slowed family {base.family[0]} ({base.family[1]})"


def _count(outcomes: Sequence[RealOutcome], hit) -> str:
    n = sum(1 for o in outcomes if hit(o))
    low, high = wilson(n, len(outcomes))
    return f"{n}/{len(outcomes)}", f"{100 * n / len(outcomes):.0f}%", f"{100 * low:.0f}–{100 * high:.0f}%"


def real_tables(outcomes: list[RealOutcome], names: Sequence[str]) -> list[str]:
    """Per case, one row per trace and one for all: the verdicts, family statuses and the case's rate."""
    short = {n: n.split(".")[0] for n in names}
    measures = {
        "noise": ("false alarm: a regression or improvement verdict, or any family slower or faster",
                  lambda o: o.verdict in ("regression", "improvement") or bool(o.slower or o.faster)),
        "slow": ("detected: the slowed family slower, interval excluding zero",
                 lambda o: o.target_status == "slower" and o.target_interval is not None and o.target_interval[0] > 0),
        "fewer": ("reads faster: an improvement verdict or any family faster",
                  lambda o: o.verdict == "improvement" or bool(o.faster)),
    }
    titles = {"noise": f"Noise only: a trace against itself, each step stretched by 1 + N(0, σ)",
              "slow": f"One family {100 * (SLOW_FACTOR - 1):.0f}% slower per launch (plus the same noise)",
              "fewer": f"Fewer iterations in the same window: {100 * DROP_SHARE:.0f}% of the steady steps left out "
                       "(plus the same noise)"}
    lines = []
    for case in REAL_CASES:
        rows_of = [o for o in outcomes if o.case == case]
        if not rows_of:
            continue
        label, hit = measures[case]
        header = ["trace", "pairs", "verdicts reg / imp / neu / inc", "pairs with a family slower / faster / count only"]
        if case == "slow":
            header.append("slowed family: median change (min–max)")
        if any(o.throughput is not None for o in rows_of):
            header.append("throughput says")
        header += [label, "rate", "Wilson 95%"]
        rows = []
        for name in [*names, None]:
            group = [o for o in rows_of if name is None or o.trace == name]
            if not group:
                continue
            verdicts = Counter(o.verdict for o in group)
            row = [short[name] if name else "**all**", str(len(group)), " / ".join(str(verdicts[v]) for v in VERDICTS),
                   f"{sum(bool(o.slower) for o in group)} / {sum(bool(o.faster) for o in group)} / "
                   f"{sum(bool(o.count) for o in group)}"]
            if case == "slow":
                changes = [o.target_change_pct for o in group if o.target_change_pct is not None]
                row.append(f"{min(changes):+.1f}% – {max(changes):+.1f}%" if changes else "not listed")
            if "throughput says" in header:
                said = Counter(str(o.throughput) for o in group)
                row.append(", ".join(f"{k} {v}" for k, v in sorted(said.items())))
            rows.append(row + list(_count(group, hit)))
        lines += ["", f"## {titles[case]}", "", *table(header, rows)]
        reasons = Counter(o.reason for o in rows_of)
        lines += ["", "Verdict reasons (numbers as #): " + "; ".join(f"\"{r}\" {n}" for r, n in reasons.most_common(4))]
        flagged = Counter(k for o in rows_of for k in (o.slower + o.faster if case != "slow" else o.faster))
        if flagged:
            lines += ["", "Families flagged " + ("faster" if case == "slow" else "slower or faster") + ": "
                      + "; ".join(f"{k} {n}" for k, n in flagged.most_common(8))]
    return lines


def real_main(options: argparse.Namespace) -> None:
    started = time.perf_counter()
    directory = str(options.traces_dir)
    names = [n for n in REAL_TRACES if (options.traces_dir / n).exists()]
    missing = [n for n in REAL_TRACES if n not in names]
    if not names:
        raise SystemExit(f"none of the real traces is under {directory}")
    seeds = range(options.seed, options.seed + options.pairs)
    cases = [c for c in REAL_CASES if c in options.cases.split(",")]
    with ProcessPoolExecutor(options.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        described = list(pool.map(real_base_task, [(directory, n) for n in names]))
        tasks = [(directory, n, s, options.noise, options.confidence, c) for c in cases for n in names for s in seeds]
        outcomes = list(pool.map(real_pair, tasks))
    wall_s = time.perf_counter() - started
    lines = [
        "# Diff calibration on real trace pairs", "",
        f"Command: `{shlex.join([os.path.relpath(sys.executable), *sys.argv])}`; wall time {wall_s:.0f} s with --jobs "
        f"{options.jobs}.",
        f"One run a side: base = the unedited trace, head = an edited copy. Noise σ = {options.noise:g}% per step, "
        f"seeds {seeds.start}–{seeds.stop - 1} (each case reuses the seeds, so its noise is the noise-only case's). "
        f"Diff defaults: ±5% step and kernel thresholds, {100 * options.confidence:g}% confidence.",
        *(f"- {d}" for d in described),
        *([f"- missing, skipped: {', '.join(missing)}"] if missing else []),
    ]
    lines += real_tables(outcomes, names)
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if options.output:
        options.output.parent.mkdir(parents=True, exist_ok=True)
        options.output.write_text(markdown, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("model", "traces", "real"), default="model")
    parser.add_argument("--pairs", type=int, help="pairs per setting (default: 200 in model mode, 20 in traces mode; "
                                                  "real mode: seeds per trace and case, default 10)")
    parser.add_argument("--traces-dir", type=Path, default=Path(os.environ.get("TRACEVIEW_SHARED_TRACES",
                                                                               "/work/shared/traces")) / "torch",
                        help="real mode: the folder holding the shared Kineto traces (read, never written)")
    parser.add_argument("--noise", type=float, default=STEP_NOISE_PCT, help="real mode: per-step noise σ in percent")
    parser.add_argument("--cases", default=",".join(REAL_CASES), help="real mode: cases to run (noise,slow,fewer)")
    parser.add_argument("--model-pairs", type=int, default=400,
                        help="traces mode: pairs of the model-mode measurement it is compared with")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", help="runs a side, comma-separated (default: 3,5; traces mode: 3)")
    parser.add_argument("--gates", help="gate thresholds in percent (default: 0,2,5; traces mode: 5)")
    parser.add_argument("--changes", help="true decode slowdowns in percent for the power table "
                                          "(default: 3,5,7,10; traces mode: 7)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--output", type=Path, help="also write the Markdown tables here")
    options = parser.parse_args()
    if options.mode == "real":
        options.pairs = 10 if options.pairs is None else options.pairs
        if options.pairs < 1 or not 0 < options.confidence < 1:
            parser.error("--pairs must be at least 1, --confidence strictly between 0 and 1")
        real_main(options)
        return
    traces = options.mode == "traces"
    pairs = options.pairs if options.pairs is not None else (20 if traces else 200)
    try:
        runs = numbers(options.runs or ("3" if traces else "3,5"), int)
        gates = numbers(options.gates or ("5" if traces else "0,2,5"), float)
        changes = numbers(options.changes or ("7" if traces else "3,5,7,10"), float)
    except ValueError as error:
        parser.error(str(error))
    if min(pairs, options.model_pairs, *runs) < 1 or not 0 < options.confidence < 1:
        parser.error("--pairs, --model-pairs and --runs must be at least 1, --confidence strictly between 0 and 1")
    allowed = 1.0 - options.confidence
    started = time.perf_counter()
    base_times = decode_base_times()
    sections = sections_for(options.mode, runs, gates, changes)
    # spawn: the parent has opened DuckDB, whose threads a forked child must not inherit
    with ProcessPoolExecutor(options.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        if traces:
            traced = measure_traces(pool, sections, pairs, options.seed, options.confidence)
            paired = measure_model(pool, options.jobs, base_times, sections, pairs, options.seed, options.confidence)
            modelled = measure_model(pool, options.jobs, base_times, sections, options.model_pairs, options.seed,
                                     options.confidence)
        else:
            modelled = measure_model(pool, options.jobs, base_times, sections, pairs, options.seed, options.confidence)
    wall_s = time.perf_counter() - started
    mean = sum(base_times) / len(base_times)
    spread = 100 * math.sqrt(sum((t - mean) ** 2 for t in base_times) / (len(base_times) - 1)) / mean
    lines = [
        f"# Regression gate calibration ({options.mode} mode)", "",
        f"Command: `{shlex.join([os.path.relpath(sys.executable), *sys.argv])}`; wall time {wall_s:.0f} s with --jobs "
        f"{options.jobs}.",
        f"{pairs} pairs per setting, seed {options.seed}, {100 * options.confidence:g}% confidence "
        f"(configured false-alarm rate {100 * allowed:g}%; the gate is one-sided, so about {50 * allowed:g}% at gate 0%). "
        f"Base run: {len(base_times)} decode steps, mean {mean / 1e6:.3f} ms, within-run spread {spread:.2f}% (CV).",
        "A pair fails when the gate would exit 1. Verdict columns count pairs by verdict "
        + ("(the diff's overall verdict)." if traces else "(decode's verdict)."),
    ]
    for section in sections:
        lines += ["", f"## {section.title}", ""]
        lines += (traces_table(section, traced, paired, modelled, allowed) if traces
                  else model_table(section, modelled, allowed))
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if options.output:
        options.output.parent.mkdir(parents=True, exist_ok=True)
        options.output.write_text(markdown, encoding="utf-8")


if __name__ == "__main__":
    main()
