"""Parity: what traceview ingests equals a direct computation on the raw file, for every real trace."""

from __future__ import annotations

import gzip
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import KINETO_TRACES, NSYS_TRACES, ingested, requires_shared, trace_id

pytestmark = requires_shared


def raw_nsys_kernels(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0, 0
        count, total = conn.execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        return count, total or 0
    finally:
        conn.close()


def raw_kineto_kernels(path: Path) -> tuple[int, int]:
    """Count and summed duration of kernel complete events, µs decimal strings converted to exact ns."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        data = json.load(f, parse_float=Decimal)
    events = data if isinstance(data, list) else data["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    return len(kernels), int(sum(Decimal(e["dur"]) * 1000 for e in kernels))


@pytest.mark.parametrize("path", NSYS_TRACES, ids=trace_id)
def test_nsys_kernel_count_and_time_match_raw_table(path: Path) -> None:
    trace = ingested(path)
    count, total = trace.con.execute("SELECT count(*), coalesce(sum(dur_ns), 0) FROM kernels").fetchall()[0]
    assert (count, int(total)) == raw_nsys_kernels(path)


@pytest.mark.parametrize("path", KINETO_TRACES, ids=trace_id)
def test_kineto_kernel_count_and_time_match_raw_events(path: Path) -> None:
    trace = ingested(path)
    count, total = trace.con.execute("SELECT count(*), coalesce(sum(dur_ns), 0) FROM kernels").fetchall()[0]
    assert (count, int(total)) == raw_kineto_kernels(path)


@pytest.mark.parametrize("path", NSYS_TRACES + KINETO_TRACES, ids=trace_id)
def test_every_trace_without_kernels_says_so_in_diagnostics(path: Path) -> None:
    trace = ingested(path)
    kernels = trace.scalar("SELECT count(*) FROM kernels")
    no_kernel_notes = trace.scalar("SELECT count(*) FROM diagnostics WHERE code = 'no_kernels'")
    assert (kernels == 0) == (no_kernel_notes == 1)
