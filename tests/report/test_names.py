"""Kernel names shortened for table cells: the tile, dtype and variant stay, and no two kernels of a table read
the same (checked over every shared trace's kernel names)."""

from __future__ import annotations

import pytest

import traceview
from conftest import SHARED_TRACES, requires_shared
from traceview.report.names import WIDTH, short_kernel_name, short_kernel_names

# real names, as the shared traces hold them
SM90 = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off"
        "_kernel__5x_cublas")
CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8>"
           "(cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8::Params)")
FILL_INT = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)")
FILL_LONG = FILL_INT.replace("<int>", "<long>")
TENSILE = ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x16x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1"
           "_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB4_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0")


def test_generated_names_keep_family_tile_and_variant() -> None:
    short = short_kernel_name(SM90)
    assert short == "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_…_cublas"
    assert len(short) <= WIDTH
    tensile = short_kernel_name(TENSILE)
    assert tensile.startswith("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x16x64") and len(tensile) <= WIDTH
    assert short_kernel_name("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT") == "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"
    assert short_kernel_name("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == \
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"


def test_signatures_lose_namespaces_parameters_and_wrappers() -> None:
    assert short_kernel_name(CUTLASS) == "cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8"
    assert short_kernel_name(FILL_INT) == "vectorized_elementwise_kernel"
    flash = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
             "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, "
             "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>, flash::CollectiveEpilogueFwd<int> > > >"
             "(flash::FlashAttnFwdSm90<int>::Params)")
    assert short_kernel_name(flash) == "FlashAttnFwdSm90 ‹64x128x128 bf16 f32›"  # the tile and dtypes it runs
    mangled = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
    assert short_kernel_name(mangled) == "add_rmsnorm_quant_kernel ‹64x8 bf16›"


def test_a_table_brings_back_what_tells_two_names_apart() -> None:
    short = short_kernel_names([FILL_INT, FILL_LONG, CUTLASS])
    assert short[FILL_INT] == "vectorized_elementwise_kernel ‹…int…›"
    assert short[FILL_LONG] == "vectorized_elementwise_kernel ‹…long…›"
    assert short[CUTLASS] == short_kernel_name(CUTLASS)  # no collision, nothing added
    on = SM90.replace("_off_", "_on_")
    both = short_kernel_names([SM90, on])
    assert both[SM90] != both[on] and "off" in both[SM90] and "on" in both[on]


def _trace_names() -> list[tuple[str, list[str]]]:
    out = []
    for folder in ("nsys", "torch"):
        for path in sorted((SHARED_TRACES / folder).iterdir()) if (SHARED_TRACES / folder).is_dir() else []:
            if path.name.endswith((".sqlite", ".json.gz", ".json")) or path.is_dir():
                out.append((path.name, path))
    return out


@requires_shared
@pytest.mark.parametrize("name, path", _trace_names(), ids=[n for n, _ in _trace_names()])
def test_no_two_kernels_of_a_shared_trace_share_a_short_name(name: str, path) -> None:
    con = traceview.load(path).con
    names = [n for (n,) in con.execute("SELECT DISTINCT name FROM kernels WHERE name <> ''").fetchall()]
    short = short_kernel_names(names)
    assert set(short) == set(names)
    assert len(set(short.values())) == len(names), name
    assert all(text and "(" not in text.split("‹")[0] for text in short.values())  # no parameter list left
