"""Synthetic profiler traces in the real nsys / Kineto file formats, with known ground truth.

Tests build a :class:`TraceSpec` (spec.py; or use :func:`two_process_spec` /
:func:`llm_serving_spec` from samples.py), write it with :func:`write_nsys` (nsys_writer.py) /
:func:`write_kineto` (kineto_writer.py), and compare what an ingester reads back against
:func:`summarize` (plan.py, which both writers share). A new format's writer is one more module.
"""

from __future__ import annotations

from traceview.testing.kineto_writer import KINETO_FLAVOURS, write_kineto
from traceview.testing.nsys_writer import NSYS_VERSIONS, write_nsys
from traceview.testing.plan import summarize
from traceview.testing.spec import (
    A100_80GB,
    ApiCall,
    GpuSpec,
    Kernel,
    Memop,
    Range,
    TraceSpec,
    global_pid,
    global_tid,
    two_process_spec,
)

_SAMPLE_NAMES = ("H100_SXM", "LlamaConfig", "llm_serving_spec", "llm_serving_truth", "serving_runs", "serving_steps")


def __getattr__(name: str) -> object:
    # Imported lazily so ``python -m traceview.testing.samples`` does not import the module twice.
    if name in _SAMPLE_NAMES:
        from traceview.testing import samples

        return getattr(samples, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "A100_80GB",
    "ApiCall",
    "GpuSpec",
    "H100_SXM",
    "KINETO_FLAVOURS",
    "Kernel",
    "LlamaConfig",
    "Memop",
    "NSYS_VERSIONS",
    "Range",
    "TraceSpec",
    "global_pid",
    "global_tid",
    "llm_serving_spec",
    "llm_serving_truth",
    "serving_runs",
    "serving_steps",
    "summarize",
    "two_process_spec",
    "write_kineto",
    "write_nsys",
]
