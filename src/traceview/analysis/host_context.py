"""Host context: what the host was doing under every GPU idle gap and every host-blocking call.

A gap is explained by the host, not by the kernel after it: the deepest host event that covers most of it
(a 60 ms cuLibraryLoadData, a cudaStreamSynchronize, the Python `forward` a compiled module is called from),
with its share, or, where nothing recorded covers it, how much of it the launching thread spent outside every
recorded event. Blocking calls are priced here once (the GPU idle each one exposes), so TV204 and TV206 give one
call one price. A trace dense with with_stack's Python events inflates the host time all of this reads, so that
density is measured per rank, in a stage of its own. The SQL is analysis/sql/host_context.sql and
analysis/sql/python_density.sql; this module holds their parameters.
"""

from __future__ import annotations

import duckdb

from traceview.analysis import sql_module

MODULE = sql_module.load("host_context")
DENSITY_MODULE = sql_module.load("python_density")

STAGE = MODULE.stage(run=lambda con, context: build_host_context(con))
DENSITY_STAGE = DENSITY_MODULE.stage(run=lambda con, context: measure_python_density(con))

# ATen ops that only move or convert data: a sync inside one is reported by the op that called it
GENERIC_COPY_OP = r"^aten::(copy_|_copy_from|_copy_from_and_resize|_local_scalar_dense|_to_copy|to|contiguous|clone)$"

# gaps shorter than this are launch latency: a trace of 2 M back-to-back kernels has 2 M of them
CONTEXT_MIN_GAP_NS = 10_000

# an event explains a gap when it covers at least this share of it; from half up, the events of one thread that
# do so nest, so the deepest of them is well defined
MIN_COVER_PCT = 50.0

# what one with_stack Python function event (its call and return hooks) costs the profiled host, and the share of
# host time at which that cost is reported. 1 us is the low end of the 1-2 us per event PyTorch's Python tracer
# costs; the densest real trace here (vLLM on MI300X, 647 events per ms) leaves 1.55 us of host time per event,
# so the cost cannot be far above it there. At 10% the gaps and op times the host rules read are off by a tenth:
# the vLLM H100 (37%), vLLM MI300X (65%) and SGLang MI300X (10.2%) traces are dense, HF Qwen on H100 (8.6%) is not
PYTHON_EVENT_NS = 1_000
DENSE_OVERHEAD_PCT = 10.0


def build_host_context(con: duckdb.DuckDBPyConnection) -> None:
    MODULE.run(con, min_gap_ns=CONTEXT_MIN_GAP_NS, generic_copy_op=GENERIC_COPY_OP, min_cover_pct=MIN_COVER_PCT)


def measure_python_density(con: duckdb.DuckDBPyConnection) -> None:
    DENSITY_MODULE.run(con, python_event_ns=PYTHON_EVENT_NS, dense_overhead_pct=DENSE_OVERHEAD_PCT)
