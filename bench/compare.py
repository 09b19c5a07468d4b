"""traceview vs Holistic Trace Analysis (HTA) on the same Kineto traces, and the JSON parse floor.

A script, not a test. Inputs: the real vLLM H100 trace from ../shared/traces/torch/ replicated 1x, 2x,
5x and 10x in time, built (and cached in --workdir) by bench/ingest.py's own `build_kineto`.

    .venv/bin/python bench/compare.py                                  # every case, every size
    .venv/bin/python bench/compare.py --copies 1,10 --output /tmp/traceview-bench/compare.md

HTA is not a project dependency. Install it into its own venv first (the script finds it there):

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install holistictraceanalysis

Cases (each one fresh process; wall time and peak RSS = ru_maxrss from os.wait4 on that child, which
on Linux also covers the child's own reaped children, as a max, not a sum):
  traceview report   `traceview report TRACE --format html,json -o OUT.html` (the CLI, end to end)
  HTA breakdowns     `TraceAnalysis(trace_dir=DIR)` (DIR holds one symlink to TRACE), then
                     get_temporal_breakdown, get_gpu_kernel_breakdown and get_idle_time_breakdown,
                     all with visualize=False
  floor              gzip decompress + json.loads, stdlib only, in the project's Python

Nothing here asserts on time; numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import ingest  # bench/ingest.py: environment(); its build_kineto runs in BUILD_CHILD

REPO = BENCH.parent
TRACEVIEW = Path(sys.executable).parent / "traceview"
DEFAULT_HTA_PYTHON = Path("/tmp/hta-venv/bin/python")

HTA_CHILD = """
import json, sys, time, logging
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
temporal = analyzer.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
kernel_type, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
t4 = time.perf_counter()
idle, idle_stats = analyzer.get_idle_time_breakdown(visualize=False)
t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "temporal_s": t3 - t2, "kernel_s": t4 - t3,
                  "idle_s": t5 - t4, "work_s": t5 - t1,
                  "temporal": json.loads(temporal.to_json(orient="records")),
                  "kernel_rows": len(kernels), "kernel_type_rows": len(kernel_type),
                  "idle_rows": len(idle)}))
"""

FLOOR_CHILD = """
import gzip, json, sys, time
t0 = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as f:
    doc = json.loads(f.read())
print(json.dumps({"work_s": time.perf_counter() - t0, "events": len(doc["traceEvents"])}))
"""


def log(message: str) -> None:
    print(f"[compare] {message}", file=sys.stderr, flush=True)


BUILD_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import ingest
ingest.KINETO_COPIES = int(sys.argv[3])  # build_kineto reads this module-level constant
path, info = ingest.build_kineto(Path(sys.argv[2]))
print(json.dumps([str(path), info]))
"""


def build_inputs(workdir: Path, copies: list[int]) -> dict[int, tuple[Path, dict]]:
    """Build (or find) each replicated trace with ingest.build_kineto, in a child process.

    Not in this process: a child started by fork/vfork + exec inherits the parent's RSS high-water
    mark into its ru_maxrss, so a parent that once held a parsed trace would inflate every row."""
    workdir.mkdir(parents=True, exist_ok=True)
    inputs = {}
    for n in copies:
        out = subprocess.run([sys.executable, "-c", BUILD_CHILD, str(BENCH), str(workdir), str(n)],
                             stdout=subprocess.PIPE, check=True, text=True).stdout
        path, info = json.loads(out.strip().splitlines()[-1])
        inputs[n] = (Path(path), info)
    return inputs


def run(argv: list[str], timeout: float) -> dict:
    """Run argv in a fresh process: wall time and that child's peak RSS (os.wait4)."""
    started = time.perf_counter()
    # stderr goes to a file (HTA logs a lot; a second pipe could fill and block), stdout is one JSON
    # line; the child is reaped with os.wait4 (not proc.wait) so its own rusage comes back.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            stdout = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        err.seek(0)
        stderr = err.read()
    rc = os.waitstatus_to_exitcode(status)
    result = {"wall_s": wall, "rss_mb": usage.ru_maxrss / 1024, "rc": rc}
    if rc != 0:
        result["error"] = stderr.decode(errors="replace")[-3000:]
        return result
    lines = stdout.decode(errors="replace").strip().splitlines()
    if lines:
        try:
            result.update(json.loads(lines[-1]))
        except json.JSONDecodeError:
            pass
    return result


def hta_dir(workdir: Path, trace: Path) -> Path:
    """HTA wants a directory of rank traces: one symlink to the file, in a directory of its own."""
    d = workdir / f"hta-{trace.name.split('.')[0]}"
    d.mkdir(exist_ok=True)
    link = d / trace.name
    if not link.is_symlink():
        link.symlink_to(trace.resolve())
    return d


def versions(hta_python: Path | None) -> dict:
    env = ingest.environment()
    env["traceview"] = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('traceview'))"],
        check=False, capture_output=True, text=True).stdout.strip()
    if hta_python and hta_python.exists():
        probe = subprocess.run(
            [str(hta_python), "-c", ("import importlib.metadata as m, platform, json; print(json.dumps("
                                     "{'hta': m.version('HolisticTraceAnalysis'), 'pandas': m.version('pandas'),"
                                     " 'numpy': m.version('numpy'), 'python': platform.python_version()}))")],
            check=False, capture_output=True, text=True)
        env["hta_env"] = json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr[-500:]}
    return env


def markdown(rows: list[dict], env: dict) -> str:
    hta = env.get("hta_env", {})
    lines = [
        f"Machine: {env['cores']} cores ({env['cpu']}), {env['mem_gib']:.1f} GiB RAM, {env['os']}; "
        f"traceview {env['traceview']}, Python {env['python']}, duckdb {env['duckdb']}; "
        + (f"HTA {hta['hta']} (pandas {hta['pandas']}, numpy {hta['numpy']}, Python {hta['python']})"
           if "hta" in hta else "HTA: not available") + ".",
        "",
        "| case | input (events; JSON MB / gzip MB) | wall s | peak RSS MB | wall vs HTA | RSS vs HTA |",
        "|---|---|---:|---:|---:|---:|",
    ]
    hta_by_copies = {r["copies"]: r for r in rows if r["tool"] == "hta" and r.get("rc") == 0}
    for r in rows:
        info = r["info"]
        size = f"{info['events']:,}; {info['uncompressed_bytes'] / 1e6:,.0f} / {info['bytes'] / 1e6:,.1f}"
        if r.get("rc") != 0:
            first = (r.get("error") or "").strip().splitlines()[-1:] or ["?"]
            lines.append(f"| {r['case']} | {size} | failed ({r['wall_s']:.1f} s) | {r['rss_mb']:,.0f} | "
                         f"`{first[0][:120]}` | |")
            continue
        h = hta_by_copies.get(r["copies"])
        ratio_wall = f"{r['wall_s'] / h['wall_s']:.2f}× ({h['wall_s'] / r['wall_s']:.1f}× faster)" if h else "n/a"
        ratio_rss = f"{r['rss_mb'] / h['rss_mb']:.0%}" if h else "n/a"
        lines.append(f"| {r['case']} | {size} | {r['wall_s']:.2f} | {r['rss_mb']:,.0f} | {ratio_wall} | {ratio_rss} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    p.add_argument("--copies", default="1,2,5,10", help="comma-separated replication factors")
    p.add_argument("--only", choices=["traceview", "hta", "floor"], action="append",
                   help="run only these tools (repeatable); default all three")
    p.add_argument("--hta-python", type=Path, default=DEFAULT_HTA_PYTHON,
                   help="python of the venv that has holistictraceanalysis")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--output", type=Path, help="also write the Markdown table and raw JSON (FILE.json)")
    args = p.parse_args(argv)
    copies = [int(c) for c in args.copies.split(",")]
    tools = args.only or ["traceview", "hta", "floor"]

    inputs = build_inputs(args.workdir, copies)
    out_dir = args.workdir / "compare-out"
    out_dir.mkdir(exist_ok=True)
    rows = []
    for n in copies:
        trace, info = inputs[n]
        cases = []
        if "traceview" in tools:
            cases.append(("traceview", f"traceview report x{n}",
                          [str(TRACEVIEW), "report", str(trace), "--format", "html,json",
                           "-o", str(out_dir / f"report_x{n}.html")]))
        if "hta" in tools:
            if args.hta_python.exists():
                cases.append(("hta", f"HTA breakdowns x{n}",
                              [str(args.hta_python), "-c", HTA_CHILD, str(hta_dir(args.workdir, trace))]))
            else:
                log(f"no HTA python at {args.hta_python}; skipping HTA")
        if "floor" in tools:
            cases.append(("floor", f"floor: gzip + json.loads x{n}", [sys.executable, "-c", FLOOR_CHILD, str(trace)]))
        for tool, case, cmd in cases:
            log(f"{case} ...")
            r = run(cmd, args.timeout)
            status = "ok" if r["rc"] == 0 else f"FAILED rc={r['rc']}: {(r.get('error') or '')[-300:]}"
            log(f"{case}: {r['wall_s']:.2f} s wall, {r['rss_mb']:,.0f} MB peak RSS, {status}")
            rows.append({"tool": tool, "case": case, "copies": n, "info": info, "cmd": cmd, **r})

    env = versions(args.hta_python)
    text = markdown(rows, env)
    print(text)
    if args.output:
        args.output.write_text(text)
        args.output.with_suffix(".json").write_text(json.dumps({"env": env, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
