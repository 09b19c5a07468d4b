"""Memory-bounded runs: the default `report` of each large trace inside a memory limit it must complete in.

A script, not a test. Each case runs `traceview report TRACE --format html,json` with default options (no
TRACEVIEW_MEMORY_LIMIT: traceview sizes DuckDB from the input and the machine, and the machine is the limit) in a
memory cgroup of its own, with no swap, and says whether it completed, was killed, or failed:

- the 10x vLLM trace (434 MB of JSON) in 400 MiB;
- the 2 M-kernel nsys export (296 MB) in 1 GiB.

The limit comes from a cgroup the script makes, as root: v1 (`memory.limit_in_bytes`) or v2 (`memory.max`, with
`memory.swap.max` 0), whichever the machine mounts; the child joins it before it starts. Without root it runs under
`systemd-run --user --scope -p MemoryMax=... -p MemorySwapMax=0` where that works. It records the wall time, the
process's peak RSS (`ru_maxrss` from `os.wait4`) and the cgroup's own peak (v1 `memory.max_usage_in_bytes`, v2
`memory.peak`, which count the page cache the cgroup is charged for too), with several `--tree NAME=PYTHONPATH` in
turns, as bench/before_after.py takes them.

    sudo .venv/bin/python bench/memory_bounded.py --tree now=src
    sudo .venv/bin/python bench/memory_bounded.py --tree before=/tmp/before_data:/tmp/before/src --tree after=src
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from before_after import add_trees, emit, in_turns, large_inputs, log, run, traceview, trees_of  # noqa: E402

MIB = 1 << 20
LIMITS = {"kineto 10x": 400 * MIB, "nsys 2M": 1024 * MIB}
CGROUP_ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    """A memory cgroup made for one run (v1 or v2, as mounted), removed once its processes have exited."""

    def __init__(self, name: str, limit: int):
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        self.path = CGROUP_ROOT / name if self.v2 else CGROUP_ROOT / "memory" / name
        self.path.mkdir()
        if self.v2:
            (self.path / "memory.max").write_text(str(limit))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            if (self.path / "memory.memsw.limit_in_bytes").exists():
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))

    def join(self) -> None:
        """In the child, before it runs the command: it and everything it starts count against the limit."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak_mb(self) -> float | None:
        peak = self.path / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        return int(peak.read_text()) / MIB if peak.exists() else None

    def remove(self) -> None:
        """Once what the run left behind is gone: a killed report leaves its renderer and dump processes."""
        for _ in range(100):
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            if not pids:
                self.path.rmdir()
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        raise SystemExit(f"memory_bounded.py: {self.path} still holds processes")


def can_make_cgroups() -> bool:
    parent = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "memory"
    return os.geteuid() == 0 and os.access(parent, os.W_OK)


def bounded(argv: list[str], pythonpath: str, limit: int, name: str) -> dict:
    """argv under `limit`: in a cgroup of its own where this process may make one, else under systemd-run."""
    if can_make_cgroups():
        group = Cgroup(name, limit)
        try:
            result = run(argv, pythonpath, preexec_fn=group.join)
            result["cgroup_peak_mb"] = group.peak_mb()
        finally:
            group.remove()
        return result
    if shutil.which("systemd-run"):
        scope = ["systemd-run", "--user", "--scope", "--quiet", f"-pMemoryMax={limit}", "-pMemorySwapMax=0"]
        return {**run(scope + argv, pythonpath), "cgroup_peak_mb": None}
    raise SystemExit("memory_bounded.py: needs root (to make a memory cgroup) or systemd-run --user")


def outcome(result: dict) -> str:
    if result["rc"] == 0:
        return "completes"
    if result["rc"] == -9:
        return "killed (SIGKILL: out of the cgroup's memory)"
    last = (result["stderr"].strip().splitlines() or [""])[-1]
    return f"exit {result['rc']}: {last[:160]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_trees(parser, "a tree to run (repeat: the trees take turns in every run)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    parser.add_argument("--repeat", type=int, default=1, help="runs per case and tree")
    parser.add_argument("--only", action="append", help="run only cases whose name starts with this (repeatable)")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    trees = trees_of(args)
    out = Path(tempfile.mkdtemp(prefix="memory-bounded-"))
    inputs = large_inputs(args.workdir)
    cases = [c for c in inputs if not args.only or any(c.startswith(prefix) for prefix in args.only)]

    lines = [f"Trees: {', '.join(f'{t} = `{p}`' for t, p in trees)}. Default `report --format html,json` in a "
             "memory cgroup with no swap; peak RSS is the process's, the cgroup's peak counts its page cache too.", "",
             "| case | limit | tree | run | outcome | wall s | peak RSS MB | cgroup peak MB |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    for attempt in range(args.repeat):
        for case in cases:
            for tree, pythonpath in in_turns(trees, attempt):
                log(f"{case} in {LIMITS[case] // MIB} MiB, {tree}, run {attempt + 1}")
                result = bounded(traceview("report", inputs[case], "--format", "html,json", "-o", out / f"{tree}.html"),
                                 pythonpath, LIMITS[case], f"traceview-bench-{os.getpid()}")
                peak = result["cgroup_peak_mb"]
                lines.append(f"| {case} | {LIMITS[case] // MIB} MiB | {tree} | {attempt + 1} | {outcome(result)} | "
                             f"{result['wall_s']:.2f} | {result['rss_mb']:,.0f} | "
                             + (f"{peak:,.0f} |" if peak is not None else "n/a |"))
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
