"""Roofline numbers recomputed by hand from the shapes in real traces."""

from __future__ import annotations

import pytest

import traceview
from conftest import SHARED_TRACES, VLLM_H100, analysed, requires_shared
from traceview.testing import GpuSpec, Kernel, Range, TraceSpec, write_kineto

pytestmark = requires_shared
HF_QWEN = SHARED_TRACES / "torch" / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz"
BOLONGCHENG_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def test_addmm_flops_and_bytes_from_input_dims() -> None:
    """aten::addmm(bias [1024], x [8944, 1024], w [1024, 1024]) in bf16: 2·M·N·K FLOPs, operands once."""
    trace = analysed(HF_QWEN)
    row = trace.sql(
        """SELECT o.flops, o.bytes FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::addmm' AND r.input_dims = '[[1024],[8944,1024],[1024,1024],[],[]]' LIMIT 1"""
    ).rows()[0]
    m, k, n = 8944, 1024, 1024
    assert row[0] == 2 * m * k * n
    assert row[1] == 2 * (n + m * k + k * n + m * n)


def test_flash_attention_flops_from_query_and_key_shapes() -> None:
    trace = analysed(HF_QWEN)
    dims, flops = trace.sql(
        """SELECT r.input_dims, o.flops FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::_scaled_dot_product_flash_attention' LIMIT 1"""
    ).rows()[0]
    assert dims.startswith("[[16,16,559,64],[16,16,559,64]")
    assert flops == 4 * 16 * 16 * 559 * 559 * 64 / 2  # is_causal: half the score pairs


def test_kernel_costs_share_their_op_by_time_and_phase_aggregates_are_sums() -> None:
    trace = analysed(HF_QWEN)
    op_total, kernel_total = trace.sql(
        """SELECT sum(o.flops), (SELECT sum(flops) FROM kernels WHERE op_range_id IS NOT NULL)
           FROM op_costs o WHERE o.range_id IN (SELECT op_range_id FROM kernels WHERE flops IS NOT NULL)"""
    ).rows()[0]
    assert kernel_total == pytest.approx(op_total, rel=1e-9)
    achieved = trace.scalar("SELECT achieved_tflops FROM roofline_by_category WHERE category = 'gemm'")
    by_hand = trace.scalar(
        "SELECT sum(flops) / sum(dur_ns) / 1e3 FROM kernels WHERE category = 'gemm' AND flops IS NOT NULL"
    )
    assert achieved == pytest.approx(by_hand, rel=1e-12)


def test_a100_fp32_simt_gemms_against_the_fp32_roof() -> None:
    trace = analysed(BOLONGCHENG_FWD)
    spec, bandwidth = trace.sql(
        "SELECT d.spec_id, s.hbm_bytes_per_s FROM devices d JOIN gpu_specs s USING (spec_id)"
    ).rows()[0]
    assert (spec, bandwidth) == ("a100-sxm4-40gb", 1.555e12)
    gemm_dtypes = trace.sql("SELECT DISTINCT dtype FROM kernels WHERE short_name GLOB '*sgemm*'")["dtype"].to_list()
    assert gemm_dtypes == ["fp32"]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE short_name GLOB '*sgemm*' AND category <> 'gemm'") == 0
    ridge = trace.scalar("SELECT ridge FROM roofline_by_category WHERE category = 'gemm'")
    assert ridge == pytest.approx(19.5e12 / 1.555e12)
    pct = trace.scalar("SELECT pct_of_roof FROM roofline_by_category WHERE category = 'gemm'")
    assert 50 < pct <= 100


def test_per_kernel_roofline_never_exceeds_the_roof() -> None:
    trace = analysed(HF_QWEN)
    assert trace.scalar("SELECT max(pct_of_roof) FROM roofline_kernels") <= 100
    assert trace.scalar(
        "SELECT count(*) FROM roofline_kernels WHERE bound = 'compute' AND arithmetic_intensity < ridge"
    ) == 0


def test_gathers_read_only_the_rows_they_pick() -> None:
    """aten::embedding(weight [151936, 1024], ids [16, 559]) in bf16 moves the picked rows, not the table."""
    trace = analysed(HF_QWEN)
    row = trace.sql(
        """SELECT o.bytes FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::embedding' AND r.input_dims LIKE '[[151936,1024],[16,559]%'"""
    ).rows()[0]
    picked = 16 * 559 * 1024
    assert row[0] == 2 * picked * 2 + 8 * 16 * 559
    assert trace.scalar("SELECT max(achieved_tbps) FROM roofline_kernels WHERE category IN ('embedding', 'memory')") < 4


VLLM_PIECEWISE = [SHARED_TRACES / "torch" / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz",
                  SHARED_TRACES / "torch" / "tracelens__vllm_prefilldecode_piecewise_graph_capture.pt.trace.json.gz"]
H100 = GpuSpec("NVIDIA H100 80GB HBM3", 132, 80 * 2**30, 9, 0)
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT"


def _op_trace(tmp_path) -> traceview.Trace:
    """Four ops on an H100 whose modelled costs are, in turn: above HBM with a working set larger than L2,
    above HBM but L2-sized, above the bf16 dense peak, and plausible."""
    big, small = [[4096, 4096], [4096, 4096]], [[1024, 1024], [1024, 1024]]
    ops = [("aten::add", big, ADD, 10_000), ("aten::add", small, ADD, 1_000),
           ("aten::mm", [[8192, 8192], [8192, 8192]], GEMM, 100_000), ("aten::add", big, ADD, 50_000)]
    kernels, ranges, t = [], [], 1_000_000
    for index, (op, dims, name, dur) in enumerate(ops, start=1):
        ranges.append(Range(op, t, t + 5_000, kind="cpu_op", external_id=index, input_dims=dims,
                            input_types=["c10::BFloat16", "c10::BFloat16"]))
        kernels.append(Kernel(name, t + 10_000, dur, external_id=index, launch_start_ns=t + 1_000, launch_dur_ns=2_000))
        t += 200_000
    path = tmp_path / "ops.json"
    write_kineto(TraceSpec(gpus=(H100,), kernels=tuple(kernels), ranges=tuple(ranges)), path)
    return traceview.load(path).analyze()


def test_costs_above_the_roof_are_rejected_with_a_diagnostic_not_clamped(tmp_path) -> None:
    trace = _op_trace(tmp_path)
    status = trace.sql("SELECT cost_status, bytes, flops FROM kernels ORDER BY start_ns").rows()
    big_bytes = 3 * 4096 * 4096 * 2
    assert status == [("rejected_memory", None, None), ("l2_resident", 3 * 1024 * 1024 * 2, None),
                      ("rejected_compute", None, None), ("accepted", big_bytes, None)]
    rejected = trace.sql("SELECT op, reason, implied_tbps, implied_tflops FROM rejected_costs ORDER BY kernel_id").rows()
    assert rejected[0][:2] == ("aten::add", "rejected_memory")
    assert rejected[0][2] == pytest.approx(big_bytes / 10_000 / 1e3)
    assert rejected[1][:2] == ("aten::mm", "rejected_compute")
    assert rejected[1][3] == pytest.approx(2 * 8192**3 / 100_000 / 1e3)
    messages = trace.sql("SELECT message FROM diagnostics WHERE code = 'cost_rejected' ORDER BY message").rows()
    assert [m[0].split(": modelled")[0] for m in messages] == ["1 kernels of aten::add", "1 kernels of aten::mm"]
    assert "10.07 TB/s against the roof of 3.35 TB/s HBM" in messages[0][0]
    assert "10995.1 TFLOP/s against the roof of 989.4 TFLOP/s dense" in messages[1][0]

    elementwise = trace.sql("""SELECT costed_time_ns, rejected_time_ns, l2_resident_time_ns, achieved_tbps, pct_of_roof,
                                      bound FROM roofline_by_category WHERE category = 'elementwise'""").rows()[0]
    assert elementwise[:3] == (50_000, 10_000, 1_000)
    assert elementwise[3] == pytest.approx(big_bytes / 50_000 / 1e3)
    assert elementwise[4] == pytest.approx(100 * big_bytes / 3.35e12 / 50e-6)
    assert elementwise[5] == "memory"
    gemm = trace.sql("SELECT costed_time_ns, achieved_tflops, pct_of_roof, bound, rejected_time_ns FROM roofline_by_category "
                     "WHERE category = 'gemm'").rows()
    assert gemm == [(None, None, None, None, 100_000)]
    l2 = trace.sql("SELECT l2_resident, pct_of_roof FROM roofline_kernels WHERE cost_status = 'l2_resident'").rows()
    assert l2 == [(True, None)]  # no published L2 bandwidth for the H100: no figure rather than one above HBM


def test_vllm_h100_without_shapes_has_no_roofline_figure_anywhere() -> None:
    trace = analysed(VLLM_H100)
    for view in ("roofline_by_category", "roofline_by_phase", "roofline_by_step"):
        figures = trace.sql(f"SELECT count(*) FILTER (WHERE pct_of_roof IS NOT NULL OR achieved_tbps IS NOT NULL "
                            f"OR achieved_tflops IS NOT NULL OR bound IS NOT NULL), count(*) FROM {view}").rows()[0]
        assert figures[0] == 0 and figures[1] > 0
    phases = trace.sql("SELECT phase, pct_of_roof, no_roof_reason FROM phase_summary ORDER BY phase").rows()
    assert phases == [("decode", None, "no_shapes"), ("prefill", None, "no_shapes")]


@pytest.mark.parametrize("path", VLLM_PIECEWISE, ids=lambda p: p.name)
def test_vllm_kv_cache_writes_run_under_the_hbm_roof(path) -> None:
    """reshape_and_cache_flash writes the batch's slots, not the cache pool it is handed."""
    trace = analysed(path)
    roof = trace.scalar("SELECT DISTINCT s.hbm_bytes_per_s FROM kernels k JOIN devices d USING (rank, device_id) "
                        "JOIN gpu_specs s USING (spec_id)")
    assert roof == 5.3e12
    tbps, by_hand = trace.sql(
        """SELECT r.achieved_tbps, (SELECT sum(bytes) / sum(dur_ns) / 1e3 FROM kernels
                                    WHERE category = 'kv_cache_write' AND cost_status = 'accepted')
           FROM roofline_by_category r WHERE category = 'kv_cache_write'""").rows()[0]
    assert tbps == pytest.approx(by_hand) and 0 < tbps * 1e12 < roof
    assert trace.scalar("SELECT count(*) FROM rejected_costs WHERE op GLOB '*reshape_and_cache*'") == 0
    phase_tbps = trace.sql("SELECT max(achieved_tbps) FROM roofline_by_phase").rows()[0][0]
    assert phase_tbps * 1e12 < roof


@pytest.mark.parametrize("name", ["tracelens__mi300_torch_compile_triton.json.gz",
                                  "tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz"])
def test_rocm_traces_keep_their_mi300x_roofline(name) -> None:
    """Kernels on physical device ids still find the listed MI300X, so the phase is judged against its roof."""
    trace = analysed(SHARED_TRACES / "torch" / name)
    assert trace.sql("SELECT DISTINCT d.spec_id FROM kernels k JOIN devices d USING (rank, device_id)").rows() == [("mi300x",)]
    categories = trace.sql("SELECT category, pct_of_roof, bound FROM roofline_by_category WHERE costed_time_ns > 0").rows()
    assert categories and all(pct is not None and 0 < pct <= 100 and bound for _, pct, bound in categories)
    phase = trace.sql("SELECT pct_of_roof, bound, bound_source, coverage_pct FROM phase_summary").rows()
    assert len(phase) == 1
    pct, bound, source, coverage = phase[0]
    assert (bound, source) == ("compute", "measured") and 30 < pct < 40 and coverage > 90
