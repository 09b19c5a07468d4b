"""Two traceview trees side by side in one run: the cases of the performance issues, case by case.

A script, not a test. Each case runs in a fresh process per tree, the trees alternating (before, after,
before, after, ...), so a machine that speeds up or slows down mid-run moves both columns alike. A tree is
a PYTHONPATH: the `src` of a checkout, plus a folder holding a `traceview_data` package whose hardware,
rules, templates and sample_traces link to that checkout's (an older tree reads its own data):

    git worktree add /tmp/before <commit>
    mkdir -p /tmp/before_data/traceview_data
    for d in hardware rules templates sample_traces; do ln -s /tmp/before/$d /tmp/before_data/traceview_data/$d; done
    .venv/bin/python bench/before_after.py --tree before=/tmp/before_data:/tmp/before/src --tree after=src \\
        --repeat 3 --output /tmp/before_after.md

Cases (inputs built and cached by bench/ingest.py in --workdir):
  nsys 2M: report            `traceview report EXPORT --format html,json` on the 2 M-kernel nsys export
  nsys 2M: after ingest      the same from the export's saved database (`traceview ingest` once, untimed)
  kineto 10x: report         `traceview report` (html, json) of the 10x vLLM H100 trace (434 MB of JSON)
  HTA 10x                    HTA's load and three breakdowns of the same file, once (bench/compare.py)
  sample: report             `traceview report sample_traces/llm_serving.pt.trace.json.gz` (html, md, json)
Wall time, CPU time (user + system of the child and its children) and peak RSS (ru_maxrss, os.wait4),
best of --repeat by wall time. PYTHONDONTWRITEBYTECODE is cleared, so modules load from their compiled
bytecode as an installed package's do. With --profile, the 2 M saved database and the 10x trace also run once per
tree with `--profile`, and the profiles are appended.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import compare  # noqa: E402 - HTA's child script and its trace directory
import ingest  # noqa: E402 - the inputs

REPO = BENCH.parent
SAMPLE = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"


def log(message: str) -> None:
    print(f"[before_after] {message}", file=sys.stderr, flush=True)


def run(argv: list[str], pythonpath: str | None, timeout: float = 900, preexec_fn=None) -> dict:
    """argv in a fresh process: wall, CPU (with children) and peak RSS; stderr kept for --profile. `preexec_fn`
    runs in the child before argv does (memory_bounded.py: join a memory cgroup)."""
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    env.pop("TRACEVIEW_MEMORY_LIMIT", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load compiled, not compiled on every start
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=env, preexec_fn=preexec_fn)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except KeyboardInterrupt:
            proc.kill()
            raise
        wall = time.perf_counter() - started
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "rc": rc,
            "stderr": stderr}


def traceview(*args: object) -> list[str]:
    """The CLI of whichever tree PYTHONPATH (set by `run`) puts first."""
    return [sys.executable, "-m", "traceview", *map(str, args)]


def add_trees(parser: argparse.ArgumentParser, help: str) -> None:
    """The repeatable `--tree NAME=PYTHONPATH` every two-tree script takes."""
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PYTHONPATH", help=help)


def trees_of(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [tuple(t.split("=", 1)) for t in args.tree]


def in_turns(trees: list[tuple[str, str]], attempt: int) -> list[tuple[str, str]]:
    """The trees in this attempt's order: reversed every other attempt (A B, B A, ...), so that no tree always runs
    in the same place. Two ratio runs of identical ingest code had the second tree's 10x ingest slower by 6-10%
    (5.47 against 5.82 s, 4.72 against 5.20 s), each time it ran right after the first tree's report."""
    return trees if attempt % 2 == 0 else trees[::-1]


def large_inputs(workdir: Path) -> dict[str, Path]:
    """The 10x vLLM trace and the 2 M-kernel nsys export, built in a child where missing: a child's peak RSS
    (ru_maxrss) starts at its parent's at fork, so a parent that grew to 6 GB writing the 2 M export gave every
    case after it a 6 GB peak. Here they are only found."""
    subprocess.run([sys.executable, str(BENCH / "ingest.py"), "--workdir", str(workdir), "--build-only"],
                   check=True, cwd=REPO)
    return {"kineto 10x": compare.build_inputs(workdir, [10])[10][0], "nsys 2M": ingest.build_nsys(workdir)[0]}


def emit(lines: list[str], output: Path | None) -> None:
    """The Markdown on stdout, and in `output` where given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if output:
        output.write_text(text)


def best(results: list[dict]) -> dict:
    ok = [r for r in results if r["rc"] == 0]
    return min(ok, key=lambda r: r["wall_s"]) if ok else results[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_trees(parser, "a tree to run (repeat; the first is the baseline)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", action="append", help="run only cases whose name starts with this (repeatable)")
    parser.add_argument("--hta-python", type=Path, default=compare.DEFAULT_HTA_PYTHON)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    trees = trees_of(args)
    out = Path(tempfile.mkdtemp(prefix="before-after-"))

    inputs = large_inputs(args.workdir)
    nsys, kineto_x10 = inputs["nsys 2M"], inputs["kineto 10x"]
    saved = args.workdir / "nsys_2M.duckdb"
    if not saved.exists():
        log(f"saving {saved} (untimed)")
        subprocess.run(traceview("ingest", nsys, "-o", saved), check=True, cwd=REPO)

    cases = {
        "nsys 2M: report": ("report", nsys, "--format", "html,json", "-o", out / "n.html"),
        "nsys 2M: after ingest": ("report", saved, "--format", "html,json", "-o", out / "s.html"),
        "kineto 10x: report": ("report", kineto_x10, "--format", "html,json", "-o", out / "k.html"),
        "sample: report": ("report", SAMPLE, "-o", out / "sample.html"),
    }
    selected = {name: c for name, c in cases.items() if not args.only or any(name.startswith(o) for o in args.only)}
    rows: dict[str, dict[str, dict]] = {}
    for name, case in selected.items():
        results: dict[str, list[dict]] = {tree: [] for tree, _ in trees}
        for attempt in range(args.repeat):
            for tree, pythonpath in in_turns(trees, attempt):
                log(f"{name}, {tree}, run {attempt + 1}")
                results[tree].append(run(traceview(*case), pythonpath))
        rows[name] = {tree: best(r) for tree, r in results.items()}
    hta = None
    if (not args.only or any("HTA 10x".startswith(o) for o in args.only)) and args.hta_python.exists():
        log("HTA 10x")
        hta = run([str(args.hta_python), "-c", compare.HTA_CHILD, str(compare.hta_dir(args.workdir, kineto_x10))],
                  None, timeout=1800)

    lines = [f"Trees: {', '.join(f'{t} = `{p}`' for t, p in trees)}; best of {args.repeat} by wall time.", "",
             "| case | " + " | ".join(f"{t}: wall s / CPU s / peak RSS MB" for t, _ in trees) + " |",
             "|---|" + "---:|" * len(trees)]
    for name, by_tree in rows.items():
        cells = [f"{r['wall_s']:.2f} / {r['cpu_s']:.2f} / {r['rss_mb']:,.0f}" if r["rc"] == 0 else f"failed ({r['rc']})"
                 for r in by_tree.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if hta is not None:
        lines.append("| HTA 10x (load + temporal, kernel, idle breakdowns) | "
                     + " | ".join([f"{hta['wall_s']:.2f} / {hta['cpu_s']:.2f} / {hta['rss_mb']:,.0f}"] * len(trees))
                     + " |")
    if args.profile:
        for name, target in (("nsys 2M: after ingest", saved), ("kineto 10x: report", kineto_x10)):
            for tree, pythonpath in trees:
                log(f"profile {name}, {tree}")
                result = run(traceview("report", target, "--format", "html,json", "-o", out / "p.html",
                                       "--profile"), pythonpath)
                table = "\n".join(line for line in result["stderr"].splitlines() if not line.startswith("wrote "))
                lines += ["", f"`--profile`, {name}, {tree}:", "", "```", table, "```"]
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
