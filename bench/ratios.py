"""The performance targets as ratios within one run: a report against the ingest of the same file, against HTA, and the
sample's report time.

A script, not a test. The machine's pace moves by up to 2x within a day, so every figure here is a ratio of runs
taken in turns in the same run, or a median of interleaved runs, never a number to compare across runs:

- 10x vLLM trace and 2 M-kernel nsys export: `traceview ingest TRACE -o X.duckdb` and
  `traceview report TRACE --format html,json`, interleaved `--repeat` times; the ratio is the median report wall
  over the median ingest wall (targets: 1.4x and 1.6x).
- 10x trace: HTA's load and three breakdowns (bench/compare.py's child), `--hta-repeat` times in the same run:
  traceview's median report against HTA's median wall (target: at least 5x faster) and peak RSS (at most 40%).
- sample trace: `traceview report` (html, md, json), `--sample-repeat` times (target: median at most 0.7 s on a quiet
  machine, 1.0 s on a busy one).

With several `--tree NAME=PYTHONPATH` (as bench/before_after.py takes them), every run takes each tree in turn, the
order reversed every other run, so the trees' columns are measured in the same conditions.

    .venv/bin/python bench/ratios.py --tree now=src --output /tmp/ratios.md
    .venv/bin/python bench/ratios.py --tree before=/tmp/before_data:/tmp/before/src --tree after=src --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import compare  # noqa: E402 - HTA's child script and its trace directory
from before_after import SAMPLE, add_trees, emit, in_turns, large_inputs, log, run, traceview, trees_of  # noqa: E402

TARGETS = {"kineto 10x": 1.4, "nsys 2M": 1.6}
HTA_SPEEDUP = 5.0
HTA_RSS_SHARE = 0.40
SAMPLE_QUIET_S = 0.7


def median(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if r["rc"] == 0]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_trees(parser, "a tree to run (repeat: the trees take turns in every run)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    parser.add_argument("--repeat", type=int, default=3, help="interleaved ingest/report runs per trace and tree")
    parser.add_argument("--hta-repeat", type=int, default=1, help="HTA runs on the 10x trace (0: none)")
    parser.add_argument("--sample-repeat", type=int, default=10)
    parser.add_argument("--hta-python", type=Path, default=compare.DEFAULT_HTA_PYTHON)
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    trees = trees_of(args)
    out = Path(tempfile.mkdtemp(prefix="ratios-"))
    inputs = large_inputs(args.workdir)

    runs: dict[tuple[str, str, str], list[dict]] = {}
    for attempt in range(args.repeat):
        for case, trace in inputs.items():
            for tree, pythonpath in in_turns(trees, attempt):
                for step, argv_ in (("ingest", ("ingest", trace, "-o", out / f"{tree}.duckdb")),
                                    ("report", ("report", trace, "--format", "html,json", "-o", out / f"{tree}.html"))):
                    log(f"{case} {step}, {tree}, run {attempt + 1}")
                    (out / f"{tree}.duckdb").unlink(missing_ok=True)
                    runs.setdefault((case, step, tree), []).append(run(traceview(*argv_), pythonpath))
    hta = []
    if args.hta_repeat and args.hta_python.exists():
        for attempt in range(args.hta_repeat):
            log(f"HTA 10x, run {attempt + 1}")
            hta.append(run([str(args.hta_python), "-c", compare.HTA_CHILD,
                            str(compare.hta_dir(args.workdir, inputs["kineto 10x"]))], None, timeout=1800))
    for attempt in range(args.sample_repeat):
        for tree, pythonpath in in_turns(trees, attempt):
            runs.setdefault(("sample", "report", tree), []).append(
                run(traceview("report", SAMPLE, "-o", out / f"{tree}-sample.html"), pythonpath))

    lines = [f"Trees: {', '.join(f'{t} = `{p}`' for t, p in trees)}. Medians of {args.repeat} interleaved runs "
             f"(the sample: of {args.sample_repeat}); wall s, with CPU s and peak RSS MB of the median run's kind.", "",
             "| measure | " + " | ".join(tree for tree, _ in trees) + " | target |",
             "|---|" + "---:|" * len(trees) + "---|"]
    for case, target in TARGETS.items():
        for step in ("ingest", "report"):
            cells = [f"{median(runs[(case, step, t)], 'wall_s'):.2f} s / {median(runs[(case, step, t)], 'cpu_s'):.2f} "
                     f"CPU s / {median(runs[(case, step, t)], 'rss_mb'):,.0f} MB" for t, _ in trees]
            lines.append(f"| {case}: `{step}` | " + " | ".join(cells) + " | |")
        ratios = [median(runs[(case, "report", t)], "wall_s") / median(runs[(case, "ingest", t)], "wall_s")
                  for t, _ in trees]
        lines.append(f"| {case}: report / ingest | " + " | ".join(f"{r:.2f}x" for r in ratios)
                     + f" | at most {target}x |")
    hta_wall, hta_rss = median(hta, "wall_s"), median(hta, "rss_mb")
    if hta_wall is not None:
        lines.append(f"| HTA 10x: load and three breakdowns | " + " | ".join(
            [f"{hta_wall:.2f} s / {median(hta, 'cpu_s'):.2f} CPU s / {hta_rss:,.0f} MB"] * len(trees)) + " | |")
        lines.append("| 10x: HTA wall / traceview report wall | " + " | ".join(
            f"{hta_wall / median(runs[('kineto 10x', 'report', t)], 'wall_s'):.1f}x" for t, _ in trees)
            + f" | at least {HTA_SPEEDUP:g}x |")
        lines.append("| 10x: traceview report peak RSS / HTA's | " + " | ".join(
            f"{100 * median(runs[('kineto 10x', 'report', t)], 'rss_mb') / hta_rss:.0f}%" for t, _ in trees)
            + f" | at most {100 * HTA_RSS_SHARE:.0f}% |")
    lines.append("| sample: `report` (html, md, json) | " + " | ".join(
        f"{median(runs[('sample', 'report', t)], 'wall_s'):.3f} s" for t, _ in trees)
        + f" | at most {SAMPLE_QUIET_S} s quiet |")
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
