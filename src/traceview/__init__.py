"""traceview: GPU profiler traces (Nsight Systems SQLite, PyTorch/Kineto JSON) in one DuckDB schema."""

from __future__ import annotations

from traceview.api import Trace, load
from traceview.errors import TraceviewError

__version__ = "0.1.0"
__all__ = ["Trace", "TraceviewError", "load", "__version__"]
