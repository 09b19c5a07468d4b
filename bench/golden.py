"""Golden reports: the JSON report of every shared trace, written by one tree and compared with another's.

A restructuring must not change a figure. Write the reports with the old tree, then with the new one,
and compare: byte-identical files pass; for the rest the script names each differing JSON path with
both values, so every difference can be traced to its cause.

    PYTHONPATH=/old/checkout/src .venv/bin/python bench/golden.py write /tmp/golden-before
    .venv/bin/python bench/golden.py write /tmp/golden-after
    .venv/bin/python bench/golden.py compare /tmp/golden-before /tmp/golden-after

`write` runs `python -m traceview report TRACE --format json` in a fresh process per trace (the
interpreter running this script, so PYTHONPATH picks the tree), for every trace file and every rank
directory under ../shared/traces/{nsys,torch}. A trace the tree refuses is recorded as its error text.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz")
MAX_LISTED = 20  # differing paths printed per report


def corpus(root: Path) -> list[Path]:
    """What tests/test_corpus.py analyses: trace files and rank directories under nsys/ and torch/."""
    return [path for folder in ("nsys", "torch") if (root / folder).is_dir()
            for path in sorted((root / folder).iterdir())
            if path.is_dir() or path.name.endswith(TRACE_SUFFIXES)]


def write_one(trace: Path, out_dir: Path) -> str:
    target = out_dir / f"{trace.parent.name}__{trace.name}.json"
    proc = subprocess.run([sys.executable, "-m", "traceview", "report", str(trace), "--format", "json",
                           "-o", str(target)], capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        target.with_suffix(".error").write_text(f"exit {proc.returncode}: {proc.stderr.strip()}\n")
        return f"{trace.name}: exit {proc.returncode}"
    return f"{trace.name}: ok"


def write(out_dir: Path, jobs: int) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = corpus(SHARED_TRACES)
    with ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(lambda t: write_one(t, out_dir), traces):
            print(line)
    print(f"{len(traces)} traces -> {out_dir}")
    return 0


def differences(old, new, path: str = "$") -> list[str]:
    """JSON paths where two documents differ, with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in new or key not in old:
                found.append(f"{path}.{key}: {'removed' if key not in new else 'added'}")
            else:
                found += differences(old[key], new[key], f"{path}.{key}")
        return found
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new and type(old) is type(new) else [f"{path}: {old!r} -> {new!r}"]


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    identical = 0
    changed = []
    for name in names:
        old, new = before / name, after / name
        if old.exists() and new.exists() and old.read_bytes() == new.read_bytes():
            identical += 1
            continue
        changed.append(name)
        if not (old.exists() and new.exists()):
            print(f"{name}: only in {'after' if new.exists() else 'before'}")
        elif name.endswith(".json"):
            found = differences(json.loads(old.read_text()), json.loads(new.read_text()))
            print(f"{name}: {len(found)} differing values" + ("" if found else " (same JSON, other bytes)"))
            for line in found[:MAX_LISTED]:
                print(f"    {line}")
        else:
            print(f"{name}:\n    {old.read_text().strip()}\n -> {new.read_text().strip()}")
    print(f"{identical} of {len(names)} outputs byte-identical, {len(changed)} differ")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the JSON report of every shared trace into DIR")
    w.add_argument("out_dir", type=Path)
    w.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("compare", help="compare two directories written by `write`")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    return write(args.out_dir, args.jobs) if args.command == "write" else compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
