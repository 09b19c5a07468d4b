"""traceview: GPU profiler traces (Nsight Systems SQLite, PyTorch/Kineto JSON) in one DuckDB schema."""

from __future__ import annotations

__version__ = "0.1.0"

from traceview.api import Trace, load  # noqa: E402 - after __version__, which api imports
from traceview.errors import TraceviewError  # noqa: E402
__all__ = ["Trace", "TraceviewError", "load", "__version__"]
