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


def trace_id(path: Path) -> str:
    return path.name
