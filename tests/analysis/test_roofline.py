"""Roofline numbers recomputed by hand from the shapes in real traces."""

from __future__ import annotations

import pytest

from conftest import SHARED_TRACES, requires_shared
from test_phases import analyzed

pytestmark = requires_shared
HF_QWEN = SHARED_TRACES / "torch" / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz"
BOLONGCHENG_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def test_addmm_flops_and_bytes_from_input_dims() -> None:
    """aten::addmm(bias [1024], x [8944, 1024], w [1024, 1024]) in bf16: 2·M·N·K FLOPs, operands once."""
    trace = analyzed(HF_QWEN)
    row = trace.sql(
        """SELECT o.flops, o.bytes FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::addmm' AND r.input_dims = '[[1024],[8944,1024],[1024,1024],[],[]]' LIMIT 1"""
    ).rows()[0]
    m, k, n = 8944, 1024, 1024
    assert row[0] == 2 * m * k * n
    assert row[1] == 2 * (n + m * k + k * n + m * n)


def test_flash_attention_flops_from_query_and_key_shapes() -> None:
    trace = analyzed(HF_QWEN)
    dims, flops = trace.sql(
        """SELECT r.input_dims, o.flops FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::_scaled_dot_product_flash_attention' LIMIT 1"""
    ).rows()[0]
    assert dims.startswith("[[16,16,559,64],[16,16,559,64]")
    assert flops == 4 * 16 * 16 * 559 * 559 * 64 / 2  # is_causal: half the score pairs


def test_kernel_costs_share_their_op_by_time_and_phase_aggregates_are_sums() -> None:
    trace = analyzed(HF_QWEN)
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
    trace = analyzed(BOLONGCHENG_FWD)
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
    trace = analyzed(HF_QWEN)
    assert trace.scalar("SELECT max(pct_of_roof) FROM roofline_kernels") <= 100
    assert trace.scalar(
        "SELECT count(*) FROM roofline_kernels WHERE bound = 'compute' AND arithmetic_intensity < ridge"
    ) == 0


def test_gathers_read_only_the_rows_they_pick() -> None:
    """aten::embedding(weight [151936, 1024], ids [16, 559]) in bf16 moves the picked rows, not the table."""
    trace = analyzed(HF_QWEN)
    row = trace.sql(
        """SELECT o.bytes FROM op_costs o JOIN ranges r USING (rank, range_id)
           WHERE o.op = 'aten::embedding' AND r.input_dims LIKE '[[151936,1024],[16,559]%'"""
    ).rows()[0]
    picked = 16 * 559 * 1024
    assert row[0] == 2 * picked * 2 + 8 * 16 * 559
    assert trace.scalar("SELECT max(achieved_tbps) FROM roofline_kernels WHERE category IN ('embedding', 'memory')") < 4
