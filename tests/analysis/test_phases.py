"""Steps and phases on real traces (facts checked by hand) and generated ones (known truth)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import traceview
from conftest import SHARED_TRACES, VLLM_H100, requires_shared
from traceview.testing import llm_serving_spec, serving_steps, write_kineto, write_nsys

TORCH = SHARED_TRACES / "torch"
_analyzed: dict[Path, traceview.Trace] = {}


def analyzed(path: Path, **options) -> traceview.Trace:
    key = (path, tuple(sorted(options.items())))
    if key not in _analyzed:
        _analyzed[key] = traceview.load(path).analyze(**options)
    return _analyzed[key]


@requires_shared
def test_vllm_h100_steps_phases_and_gpu() -> None:
    trace = analyzed(VLLM_H100)
    phases = trace.sql("SELECT phase FROM steps ORDER BY step_id")["phase"].to_list()
    assert phases == ["prefill"] + ["decode"] * 9 + ["empty"]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE step_id IS NULL OR phase IS NULL") == 0
    assert trace.scalar("SELECT DISTINCT spec_id FROM devices") == "h100-sxm"
    decode = trace.sql("SELECT bound, bound_source FROM phase_summary WHERE phase = 'decode'").rows()
    assert decode == [("memory", "phase_rule")]
    per_step = trace.sql("SELECT kernels, graph_kernels FROM steps WHERE phase = 'decode'").unique().rows()
    assert per_step == [(1375, 963)]


@requires_shared
def test_vllm_h100_with_a_model_decode_is_memory_bound_by_the_model() -> None:
    trace = analyzed(VLLM_H100, model="llama-3-70b", tp=4, batch=32, context=1005)
    row = trace.sql("SELECT bound, bound_source, pct_of_roof FROM phase_summary WHERE phase = 'decode'").to_dicts()[0]
    assert (row["bound"], row["bound_source"]) == ("memory", "model")
    assert 40 < row["pct_of_roof"] < 100
    terms = trace.sql("SELECT DISTINCT dominant_term FROM step_accounting WHERE phase = 'decode'")["dominant_term"]
    assert terms.to_list() == ["memory"]


@requires_shared
def test_vllm_mixed_step_token_counts() -> None:
    trace = analyzed(TORCH / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz")
    row = trace.sql("SELECT * FROM steps").to_dicts()
    assert len(row) == 1
    step = row[0]
    assert (step["phase"], step["prefill_tokens"], step["decode_tokens"]) == ("mixed", 8155, 37)
    assert (step["prefill_requests"], step["decode_requests"]) == (9, 37)
    assert (step["prefill_context_tokens"], step["decode_context_tokens"]) == (8430, 34489)
    assert step["phase_source"] == "annotation:vllm-step"


@requires_shared
def test_sglang_extend_step_is_prefill() -> None:
    trace = analyzed(TORCH / "tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz")
    assert trace.sql("SELECT phase, prefill_tokens, kernels FROM steps").rows() == [("prefill", 15360, 527)]
    assert trace.scalar("SELECT DISTINCT spec_id FROM devices") == "mi300x"


@requires_shared
def test_hf_forward_with_shapes_is_prefill_from_input_shapes() -> None:
    trace = analyzed(TORCH / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz")
    assert trace.sql("SELECT phase, phase_source FROM steps").rows() == [("prefill", "input_shapes")]


def test_generated_serving_run_phases_from_annotations(tmp_path: Path) -> None:
    spec = llm_serving_spec()
    truth = [phase for phase, _, _ in serving_steps()]
    for path in (write_nsys(spec, tmp_path / "s.sqlite"), write_kineto(spec, tmp_path / "s.json.gz")):
        trace = traceview.load(path).analyze()
        rows = trace.sql("SELECT phase, prefill_tokens, decode_tokens FROM steps ORDER BY step_id").rows()
        assert [r[0] for r in rows] == truth
        assert rows[0] == ("prefill", 1024, 0) and rows[1] == ("decode", 0, 4) and rows[14] == ("decode", 0, 8)
        assert trace.scalar("SELECT count(*) FROM kernels WHERE phase = 'other'") == 0


def test_generated_run_without_annotations_uses_graphs_then_gaps(tmp_path: Path) -> None:
    """No step annotation: the GPU bursts between idle gaps become steps, graph replays mark decode."""
    spec = llm_serving_spec()
    bare = replace(spec, ranges=())
    trace = traceview.load(write_kineto(bare, tmp_path / "bare.json.gz")).analyze(step_gap_ns=200_000)
    steps = trace.sql("SELECT phase, phase_source, step_source FROM steps ORDER BY step_id").rows()
    assert {s[2] for s in steps} == {"gpu_gap"}
    assert [s[0] for s in steps] == [phase for phase, _, _ in serving_steps()]
    assert {s[1] for s in steps} == {"cuda_graph", "eager_vs_graph"}


def test_user_step_regex_wins(tmp_path: Path) -> None:
    spec = llm_serving_spec()
    trace = traceview.load(write_kineto(spec, tmp_path / "s.json.gz")).analyze(step_regex="^execute_context_[1-9]")
    rows = trace.sql("SELECT step_source, phase FROM steps").rows()
    assert rows == [("user_regex", "prefill")] * 2


def test_bad_step_regex_is_a_usage_error(tmp_path: Path) -> None:
    trace = traceview.load(write_kineto(llm_serving_spec(), tmp_path / "s.json.gz"))
    with pytest.raises(traceview.TraceviewError, match="regex .execute_\\(."):
        trace.analyze(step_regex="execute_(")


def test_user_kernel_mapping_labels_steps(tmp_path: Path) -> None:
    """Without annotations or graphs, the user's kernel patterns decide: flash_fwd_splitkv only in decode here."""
    spec = llm_serving_spec()
    eager = replace(spec, ranges=(), kernels=tuple(
        replace(k, graph=False, correlation_id=None, launch_start_ns=None, launch_dur_ns=None) if k.graph else k
        for k in spec.kernels))
    trace = traceview.load(write_kineto(eager, tmp_path / "eager.json.gz")).analyze(
        step_gap_ns=200_000, phase_kernels=(("prefill", "flash_fwd_kernel"), ("decode", "flash_fwd_splitkv")))
    rows = trace.sql("SELECT phase, phase_source FROM steps ORDER BY step_id").rows()
    assert {source for _, source in rows} == {"user_mapping"}
    assert [phase for phase, _ in rows] == [phase for phase, _, _ in serving_steps()]


@requires_shared
def test_backward_kernels_launched_from_the_autograd_thread_belong_to_the_profiler_step() -> None:
    """PyTorch records ProfilerStep#N on the main thread (tid 1102 here) and launches backward kernels
    from its autograd thread (tid 1262): 2,780 of the 4,350 kernels, which must join the open step."""
    trace = traceview.load(TORCH / "hta__ns_resolution_v100.pt.trace.json.gz").analyze()
    by_thread = trace.con.execute(
        """SELECT a.tid, count(*), count(k.step_id) FROM kernels k
           JOIN api_calls a ON a.rank = k.rank AND a.pid = k.pid AND a.correlation_id = k.correlation_id
           GROUP BY a.tid ORDER BY a.tid""").fetchall()
    assert by_thread == [(1102, 1570, 1570), (1262, 2780, 2780)]
    inside = trace.scalar(
        """SELECT count(*) FROM kernels k JOIN api_calls a
             ON a.rank = k.rank AND a.pid = k.pid AND a.correlation_id = k.correlation_id
           JOIN ranges r ON r.rank = k.rank AND r.kind = 'profiler_step' AND a.start_ns >= r.start_ns AND a.start_ns < r.end_ns
           JOIN steps s ON s.rank = k.rank AND s.step_id = k.step_id AND s.start_ns = r.start_ns
           WHERE a.tid = 1262""")
    assert inside == 2780
