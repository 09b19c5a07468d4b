"""traceview: GPU profiler traces (Nsight Systems SQLite, PyTorch/Kineto JSON) in one DuckDB schema."""

from __future__ import annotations

import time

# when this process began importing traceview: `--profile` opens with the imports' share of a command
IMPORTED_AT = time.perf_counter()

__version__ = "0.1.0"

from traceview.errors import TraceviewError  # noqa: E402 - after __version__

__all__ = ["Trace", "TraceviewError", "load", "__version__"]


def __getattr__(name: str):
    """`traceview.load` and `traceview.Trace` import DuckDB and the readers on first use, so a
    process that needs none of them (the HTML renderer's) does not pay for them."""
    if name in ("Trace", "load"):
        from traceview import api

        return getattr(api, name)
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")
