"""Mutated traces either load (and analyse) or raise TraceviewError: never any other exception.

The mutators live in bench/fuzz.py, which runs them at scale (docs/reliability.md).
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow(seconds=45)  # 60 mutated traces, each loaded and analysed
_spec = importlib.util.spec_from_file_location("traceview_fuzz", REPO / "bench" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Generated traces plus the smallest real ones (under 100 kB), read in place."""
    found = fuzz.seeds(tmp_path_factory.mktemp("seeds"))
    return [p for p in found if p.stat().st_size <= 100_000 or p.parent.name.startswith("seeds")]


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(min_value=0), seed=st.integers(min_value=0, max_value=2**32))
def test_mutated_trace_loads_or_fails_cleanly(sources: list[Path], pick: int, seed: int) -> None:
    source = sources[pick % len(sources)]
    work = Path(tempfile.mkdtemp(prefix="traceview-fuzz-test-"))
    try:
        path, _ = fuzz.make_input(source, work, random.Random(seed))
        assert fuzz.check(path) in ("loaded", "error")
    finally:
        shutil.rmtree(work)
