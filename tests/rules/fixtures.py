"""Generated traces for rule cases: each function returns a TraceSpec with a known problem (or none).

Cases name them as `fixture = "<function>"` in tests/rules/cases/*.toml.
"""

from __future__ import annotations

from dataclasses import replace

from traceview.testing import llm_serving_spec


def serving() -> object:
    """The sample serving run: eager prefill, CUDA-graph decode, vLLM step annotations."""
    return llm_serving_spec()


def serving_without_kernels() -> object:
    """A capture whose CUDA activity was lost: API calls and annotations but no kernels."""
    spec = llm_serving_spec()
    return replace(spec, kernels=(), memops=())
