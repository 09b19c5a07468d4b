"""Audit throughput: traces per minute for `traceview audit` on this machine (a script, not a test).

Cases: the 8 ranks of the real DLRM job (as one job, and as 8 separate traces) and a directory of
50 generated serving traces, each at --jobs 1 and --jobs = cores. Whole-process wall time and peak RSS.

    .venv/bin/python bench/audit.py [--workdir /tmp/traceview-bench] [--count 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DLRM = REPO.parent / "shared" / "traces" / "torch" / "param__dlrm_v100_8rank"


def generated(workdir: Path, count: int) -> Path:
    directory = workdir / f"audit-{count}"
    if len(list(directory.glob("*.json.gz"))) != count:
        from traceview.testing import llm_serving_spec, write_kineto

        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for seed in range(count):
            write_kineto(llm_serving_spec(seed=seed), directory / f"serve-{seed:03d}.pt.trace.json.gz")
    return directory


def timed(args: list[str]) -> tuple[float, float, int]:
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "traceview", "audit", *args, "--json", os.devnull],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    parser.add_argument("--count", type=int, default=50)
    options = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    serving = generated(options.workdir, options.count)
    ranks = options.workdir / "dlrm-ranks-as-files"
    if not ranks.exists():
        ranks.mkdir(parents=True)
        for i, path in enumerate(sorted(DLRM.glob("*.json"))):
            (ranks / f"trace_{chr(97 + i)}.json").symlink_to(path)  # names without ranks: 8 separate traces
    cases = [("DLRM 8 ranks as one job", [str(DLRM)], 8), ("DLRM 8 ranks as 8 traces", [str(ranks)], 8),
             (f"{options.count} generated serving traces", [str(serving)], options.count)]
    print("| case | traces | --jobs | wall s | traces/min | peak RSS MB (main process) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, args, traces in cases:
        for jobs in sorted({1, cores}):
            wall, rss, code = timed([*args, "--jobs", str(jobs)])
            print(f"| {name} | {traces} | {jobs} | {wall:.2f} | {60 * traces / wall:.0f} | {rss:.0f} |  (exit {code})")


if __name__ == "__main__":
    main()
