"""How often the `traceview diff --fail-on-regression` gate fails: its false-alarm rate when nothing changed
and its power when decode is truly slower (a script, not a test; it prints rates and never asserts).

    .venv/bin/python bench/diff_calibration.py --pairs 400 --output /tmp/traceview-bench/calibration.md
    .venv/bin/python bench/diff_calibration.py --mode traces --pairs 20 --runs 3 --gates 5 --changes 7

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("model", "traces"), default="model")
    parser.add_argument("--pairs", type=int, help="pairs per setting (default: 200 in model mode, 20 in traces mode)")
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
