"""Synthetic profiler traces in the real nsys / Kineto file formats, with known ground truth.

Tests build a :class:`TraceSpec` (or use :func:`two_process_spec` /
:func:`llm_serving_spec`), write it with :func:`write_nsys` / :func:`write_kineto`,
and compare what an ingester reads back against :func:`summarize`.
"""

from __future__ import annotations

from traceview.testing.generator import (
    KINETO_FLAVOURS,
    NSYS_VERSIONS,
    ApiCall,
    GpuSpec,
    Kernel,
    Memop,
    Range,
    TraceSpec,
    global_pid,
    global_tid,
    short_kernel_name,
    summarize,
    two_process_spec,
    write_kineto,
    write_nsys,
)

_SAMPLE_NAMES = ("H100_SXM", "LlamaConfig", "llm_serving_spec", "llm_serving_truth", "serving_steps")


def __getattr__(name: str) -> object:
    # Imported lazily so ``python -m traceview.testing.samples`` does not import the module twice.
    if name in _SAMPLE_NAMES:
        from traceview.testing import samples

        return getattr(samples, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
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
    "serving_steps",
    "short_kernel_name",
    "summarize",
    "two_process_spec",
    "write_kineto",
    "write_nsys",
]
