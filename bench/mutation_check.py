"""Seed known bugs one at a time into a checkout and see which tests catch each (docs/testing.md, "Mutation check").

    python bench/mutation_check.py [--tree DIR] [--tests "PATH ..."] [ID ...]

For each mutation: replace one exact piece of text in one file of the tree (it must occur once), run the tests
named for it there (`python -m pytest -n 2 -x`, stopping at the first failure), put the file back, and print one
JSON line: the id, what the bug is, whether a test failed, the first failing tests, the wall time. A test subset
that fails proves the whole suite does; `--tests` runs other paths instead (the whole suite: "tests"). The tree
defaults to this checkout; pass an older commit's worktree (with its own .venv) to check an older suite.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple


class Mutation(NamedTuple):
    id: str
    bug: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation("M1", "every idle gap one nanosecond short", "src/traceview/analysis/sql/activity.sql",
             "start_ns - prev_end_ns AS dur_ns", "start_ns - prev_end_ns - 1 AS dur_ns",
             ("tests/analysis/test_activity.py", "tests/analysis/test_host_context.py", "tests/rules")),
    Mutation("M2", "H100 SXM bf16 peak set to the 2:4-sparse figure", "hardware/h100-sxm.toml",
             "bf16 = 989.4", "bf16 = 1978.9",
             ("tests/analysis/test_hardware.py", "tests/analysis/test_roofline.py", "tests/report/test_report_data.py")),
    Mutation("M3", "TV201's min_gap_ms threshold 1 ms -> 2 ms", "rules/TV201-gpu-idle-gaps.toml",
             "[params.min_gap_ms]\ndefault = 1.0", "[params.min_gap_ms]\ndefault = 2.0",
             ("tests/rules/test_cases.py", "tests/rules/test_step_savings.py", "tests/test_corpus.py")),
    Mutation("M4", "the Markdown renderer drops the top finding", "src/traceview/report/markdown.py",
             "for f in findings[:TOP_FINDINGS]:", "for f in findings[1:TOP_FINDINGS]:",
             ("tests/report/test_report_data.py", "tests/report/test_findings_windows.py", "tests/test_cli.py")),
    Mutation("M5", "annotated prefill steps labelled decode", "src/traceview/analysis/sql/steps.sql",
             "WHEN coalesce(pr, pt, 0) > 0 THEN 'prefill'", "WHEN coalesce(pr, pt, 0) > 0 THEN 'decode'",
             ("tests/analysis/test_phases.py", "tests/analysis/test_steady.py", "tests/test_corpus.py")),
    Mutation("M6", "aten::mm FLOPs counted as M*N*K, not 2*M*N*K", "src/traceview/analysis/op_costs.toml",
             'flops = "2.0 * d1[1] * d1[2] * d2[2]"', 'flops = "1.0 * d1[1] * d1[2] * d2[2]"',
             ("tests/analysis/test_op_costs.py", "tests/analysis/test_roofline.py")),
    Mutation("M7", "Kineto timestamps truncated to whole microseconds", "src/traceview/ingest/kineto.py",
             "CAST(ts * 1000 AS BIGINT) AS start_ns", "CAST(ts AS BIGINT) * 1000 AS start_ns",
             ("tests/ingest/test_kineto.py", "tests/ingest/test_parity.py", "tests/ingest/test_generated.py")),
    Mutation("M8", "JUnit: a finding at the --fail-on floor is not a failure", "src/traceview/report/junit.py",
             'SEVERITIES.index(f["severity"]) >= floor', 'SEVERITIES.index(f["severity"]) > floor',
             ("tests/test_audit.py",)),
    Mutation("M9", "the HTML findings table drops the top finding", "templates/_findings.html",
             "{% for f in data.findings %}", "{% for f in data.findings[1:] %}",
             ("tests/report/test_html.py", "tests/report/test_report_data.py")),
    Mutation("M10", "the diff calls a regression only at twice the threshold", "src/traceview/diff/stats.py",
             "if low > 0 and change >= threshold_pct:", "if low > 0 and change >= 2 * threshold_pct:",
             ("tests/test_diff.py",)),
    Mutation("M11", "nsys kernels end one nanosecond early", "src/traceview/ingest/nsys.py",
             'start AS start_ns, "end" AS end_ns, coalesce(d.value', 'start AS start_ns, "end" - 1 AS end_ns, coalesce(d.value',
             ("tests/ingest/test_nsys.py", "tests/ingest/test_parity.py", "tests/ingest/test_generated.py")),
    Mutation("M12", "findings ranked smallest saving first", "src/traceview/rules/engine.py",
             "kept.sort(key=lambda f: (-f.rank_ns,", "kept.sort(key=lambda f: (f.rank_ns,",
             ("tests/rules/test_engine.py", "tests/rules/test_step_savings.py", "tests/test_corpus.py")),
    Mutation("M13", "the report document drops the top finding", "src/traceview/report/data.py",
             '"findings": lambda cursor: finding_windows(cursor, [f.to_dict() for f in findings().findings]),',
             '"findings": lambda cursor: finding_windows(cursor, [f.to_dict() for f in findings().findings][1:]),',
             ("tests/report/test_findings_windows.py", "tests/report/test_report_data.py", "tests/test_corpus.py")),
)


def check(tree: Path, mutation: Mutation, tests: tuple[str, ...]) -> dict:
    path = tree / mutation.file
    original = path.read_text(encoding="utf-8")
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.id}: {mutation.file} holds the text to replace {original.count(mutation.old)} times, not once")
    started = time.perf_counter()
    path.write_text(original.replace(mutation.old, mutation.new), encoding="utf-8")
    try:
        run = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-m", "pytest", "-n", "2", "-x", "-q",
                              "-p", "no:cacheprovider", *tests], cwd=tree, capture_output=True, text=True)
    finally:
        path.write_text(original, encoding="utf-8")
    failed = [line.split(" - ")[0].removeprefix("FAILED ") for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    return {"id": mutation.id, "bug": mutation.bug, "caught": bool(failed), "failed": failed[:3],
            "summary": (run.stdout.strip().splitlines() or [""])[-1], "wall_s": round(time.perf_counter() - started)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--tests", help="test paths to run instead of each mutation's own")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the mutated file is put back on the way out
    for mutation in MUTATIONS:
        if not args.ids or mutation.id in args.ids:
            tests = tuple(args.tests.split()) if args.tests else mutation.tests
            print(json.dumps(check(args.tree, mutation, tests)), flush=True)


if __name__ == "__main__":
    main()
