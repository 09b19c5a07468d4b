"""Shared fixtures: the real traces in ../shared/traces (read in place, never copied) and cached loads."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceview

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
NSYS_TRACES = sorted((SHARED_TRACES / "nsys").glob("*.sqlite"))
KINETO_TRACES = sorted((SHARED_TRACES / "torch").glob("*.json*")) + sorted(
    (SHARED_TRACES / "torch" / "param__dlrm_v100_8rank").glob("*.json")
)
DLRM_DIR = SHARED_TRACES / "torch" / "param__dlrm_v100_8rank"
VLLM_H100 = SHARED_TRACES / "torch" / "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz"

requires_shared = pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")

_loaded: dict[Path, traceview.Trace] = {}


def load_cached(path: Path) -> traceview.Trace:
    """Ingest each real trace once per test session."""
    if path not in _loaded:
        _loaded[path] = traceview.load(path)
    return _loaded[path]


def union_ns(intervals) -> int:
    """Length of the union of [start, end) intervals, by a plain sweep: the tests' own arithmetic."""
    total, lo, hi = 0, None, None
    for start, end in sorted(intervals):
        if hi is None or start > hi:
            total += (hi - lo) if hi is not None else 0
            lo, hi = start, end
        else:
            hi = max(hi, end)
    return total + ((hi - lo) if hi is not None else 0)


def trace_id(path: Path) -> str:
    return path.name
