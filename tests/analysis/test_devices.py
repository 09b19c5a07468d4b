"""Every kernel finds its GPU: device ids the device list lacks, GPUs without a name, kernel-name inference."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

import traceview
from conftest import SHARED_TRACES, analysed, requires_shared
from traceview.analysis.devices import load_architectures, match_devices
from traceview.analysis.hardware import load_specs
from traceview.model import db
from traceview.rules.config import RuleConfig
from traceview.rules.engine import check
from traceview.rules.loader import load_rules
from traceview.testing import A100_80GB, GpuSpec, Kernel, TraceSpec, write_kineto, write_nsys

H100 = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_045_231_616, 9, 0)
SM80_FP32_GEMM = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4"
                  "_execute_kernel__5x_cublas")


def kernels_on(devices: list[int], name: str = "vectorized_elementwise_kernel", dur_ns: int = 10_000) -> tuple:
    return tuple(Kernel(name, 1_000_000 + 50_000 * i, dur_ns, device_id=d) for i, d in enumerate(devices))


def analyzed(tmp_path: Path, spec: TraceSpec, fmt: str = "kineto", **options) -> traceview.Trace:
    path = write_kineto(spec, tmp_path / "t.json") if fmt == "kineto" else write_nsys(spec, tmp_path / "t.sqlite")
    return traceview.load(path).analyze(**options)


def joined(trace: traceview.Trace) -> list[tuple]:
    """(kernel device id, spec_id, spec_source, maps_to) of every kernel, through the plain join."""
    return trace.sql(
        "SELECT k.device_id, d.spec_id, d.spec_source, d.maps_to_device_id FROM kernels k "
        "JOIN devices d USING (rank, device_id) GROUP BY ALL ORDER BY k.device_id").rows()


def diagnostics(trace: traceview.Trace, code: str) -> list[tuple[str, str]]:
    return trace.sql("SELECT severity, message FROM diagnostics WHERE code = ?", [code]).rows()


# ------------------------------------------------------------------ device-id mapping


@requires_shared
@pytest.mark.parametrize("name, used", [
    ("tracelens__mi300_torch_compile_triton.json.gz", 12),
    ("tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz", 527),
])
def test_rocm_physical_device_ids_join_the_listed_mi300x(name: str, used: int) -> None:
    trace = analysed(SHARED_TRACES / "torch" / name)
    rows = trace.sql("SELECT count(*) AS n, count(d.spec_id) AS with_spec, list(DISTINCT d.spec_id) AS specs "
                     "FROM kernels k LEFT JOIN devices d USING (rank, device_id)").to_dicts()[0]
    assert (rows["n"], rows["with_spec"], rows["specs"]) == (used, used, ["mi300x"])
    ((severity, message),) = diagnostics(trace, "device_ids_mapped")
    device = trace.scalar("SELECT DISTINCT device_id FROM kernels")
    assert severity == "info" and f"{device} -> 0 (the only listed device)" in message


def test_one_used_id_and_one_listed_device(tmp_path: Path) -> None:
    trace = analyzed(tmp_path, TraceSpec(gpus=(A100_80GB,), kernels=kernels_on([5, 5])))
    assert joined(trace) == [(5, "a100-sxm4-80gb", "device_map", 0)]
    assert trace.scalar("SELECT spec_source FROM devices WHERE device_id = 0") == "name"


def test_several_ids_onto_listed_devices_of_one_model_by_order(tmp_path: Path) -> None:
    gpus = tuple(replace(A100_80GB, device_id=i) for i in range(4))
    trace = analyzed(tmp_path, TraceSpec(gpus=gpus, kernels=kernels_on([6, 7, 6])))
    assert joined(trace) == [(6, "a100-sxm4-80gb", "device_map", 0), (7, "a100-sxm4-80gb", "device_map", 1)]
    ((severity, message),) = diagnostics(trace, "device_ids_mapped")
    assert severity == "info" and "6 -> 0, 7 -> 1 (all listed devices are one model" in message


def test_more_ids_than_listed_devices_of_one_model_share_them(tmp_path: Path) -> None:
    gpus = tuple(replace(A100_80GB, device_id=i) for i in range(2))
    trace = analyzed(tmp_path, TraceSpec(gpus=gpus, kernels=kernels_on([4, 5, 6])))
    assert [row[0::3] for row in joined(trace)] == [(4, 0), (5, 1), (6, 0)]
    assert {row[1] for row in joined(trace)} == {"a100-sxm4-80gb"}


def test_different_models_map_by_order_with_a_warning(tmp_path: Path) -> None:
    gpus = (A100_80GB, replace(H100, device_id=1))
    trace = analyzed(tmp_path, TraceSpec(gpus=gpus, kernels=kernels_on([6, 7, 8])))
    assert joined(trace) == [(6, "a100-sxm4-80gb", "device_map", 0), (7, "h100-sxm", "device_map", 1)]
    ((severity, message),) = diagnostics(trace, "device_ids_mapped")
    assert severity == "warning" and "6 -> 0, 7 -> 1 (by order" in message and "ids 8 have no listed device" in message
    assert diagnostics(trace, "gpu_unknown") == [("warning", "GPU 8 has no device name in the trace: "
                                                             "pass --gpu NAME for roofline numbers")]


def test_listed_ids_are_not_remapped(tmp_path: Path) -> None:
    gpus = tuple(replace(A100_80GB, device_id=i) for i in range(2))
    trace = analyzed(tmp_path, TraceSpec(gpus=gpus, kernels=kernels_on([0, 1])))
    assert joined(trace) == [(0, "a100-sxm4-80gb", "name", None), (1, "a100-sxm4-80gb", "name", None)]
    assert diagnostics(trace, "device_ids_mapped") == []


def test_gpu_override_wins_over_everything(tmp_path: Path) -> None:
    trace = analyzed(tmp_path, TraceSpec(gpus=(), kernels=kernels_on([0], SM80_FP32_GEMM)), fmt="nsys", gpu="h100-sxm")
    assert joined(trace) == [(0, "h100-sxm", "override", None)]
    assert trace.scalar("SELECT architecture FROM devices") == "hopper"


# ------------------------------------------------------------------ no GPU name: inference from kernel names


def test_nsys_export_without_target_info_gpu_is_inferred_sm80_and_tv301_fires(tmp_path: Path) -> None:
    gemms = tuple(Kernel(SM80_FP32_GEMM, 1_000_000 + 900_000 * i, 860_000) for i in range(6))  # back to back
    others = tuple(Kernel("vectorized_elementwise_kernel", 9_000_000 + 200_000 * i, 140_000) for i in range(6))
    trace = analyzed(tmp_path, TraceSpec(gpus=(), kernels=gemms + others), fmt="nsys")
    device = trace.sql("SELECT device_id, name, spec_id, spec_source, architecture, tensor_cores FROM devices").rows()
    assert device == [(0, "", None, "kernel_names", "sm80+", True)]
    ((severity, message),) = diagnostics(trace, "gpu_inferred")
    assert severity == "info" and message.startswith("GPU 0 inferred as sm80+ (with tensor/matrix cores)")

    (finding,) = [f for f in check(trace.con, load_rules(), RuleConfig()).findings if f.rule == "TV301"]
    # the smallest speed-up among the hardware/ specs an sm80+ GPU can be: fp32 over TF32 where TF32 is
    # faster, else over the best of BF16/FP16
    covered = {"ampere", "ada", "hopper", "blackwell"}

    def kept_share(peaks: dict[str, float]) -> float | None:
        tensor = peaks["tf32"] if peaks.get("tf32", 0) > peaks["fp32"] else max(
            (peaks[d] for d in ("bf16", "fp16") if d in peaks), default=None)
        return None if tensor is None else peaks["fp32"] / tensor

    ratios = [r for s in load_specs() if s.architecture in covered and "fp32" in s.peak_tflops
              for r in [kept_share(s.peak_tflops)] if r is not None]
    assert finding.message.startswith("6 FP32 GEMM kernels (1 kernel name) took 5.16 ms, 86.0% of GPU kernel time")
    assert finding.estimated_saving_ns == round(6 * 860_000 * (1 - max(ratios)))
    assert 0 < finding.estimated_saving_ns < 6 * 860_000 * 0.51  # at least 2x from BF16 on any sm80+ GPU


def test_no_known_architecture_leaves_tv301_skipped(tmp_path: Path) -> None:
    trace = analyzed(tmp_path, TraceSpec(gpus=(), kernels=kernels_on([0, 0], "my_custom_sgemm_kernel")), fmt="nsys")
    assert trace.scalar("SELECT count(*) FROM devices") == 0
    skipped = {s.rule: s.reason for s in check(trace.con, load_rules(), RuleConfig()).skipped}
    assert "devices.tensor_cores" in skipped["TV301"]


@pytest.mark.parametrize("name, expected", [
    ("maxwell_sgemm_128x64_nn", "sm50+"),
    ("volta_h884gemm_64x64_ldg8_nn", "sm70+"),
    ("volta_sgemm_128x64_nn", "sm70+"),
    ("turing_s1688gemm_128x128_ldg8_tn", "sm75+"),
    ("void cutlass::Kernel<cutlass_75_tensorop_s1688gemm_f16_256x128_32x2_nt_align8>(T1::Params)", "sm75+"),
    ("ampere_sgemm_128x64_tn", "sm80+"),
    (SM80_FP32_GEMM, "sm80+"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)", "sm80+"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "sm80+"),
    ("sm86_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4", "sm86+"),
    ("sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32", "sm89+"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "sm90+"),
    ("sm90a_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", "sm90+"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "sm90+"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2>>>>", "sm90+"),
    ("cutlass3x_sm100_bstensorop_s256x128x64gemm_block_scaled_ue4m3xe2m1_ue4m3xe2m1_f32_bf16_bf16_256x128x256_0_tnn_align32", "sm100+"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext", "sm100+"),
    ("Cijk_Ailk_Bljk_HB_MT64x64x16_ISA906", "gfx906+"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8_SN", "cdna1+"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>", "cdna1+"),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8_ISA90a", "cdna2+"),
    ("Cijk_Ailk_Bljk_XSS_BH_MT128x128x16_ISA940", "cdna3+"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_ISA942_IU1_K1_WS64_WG32_8_1", "cdna3+"),
    ("Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x32_ISA950_WS64", "cdna4+"),
])
def test_architecture_from_kernel_names(name: str, expected: str) -> None:
    assert classed_by_names([(name, 10_000)]) == [(expected, classes_with_tensor_cores().get(expected))]


def test_the_most_advanced_architecture_wins() -> None:
    """Three long sm80 GEMMs and one short sm90 kernel: the newest name decides, not the most time."""
    kernels = [("ampere_sgemm_128x64_tn", 900_000)] * 3 + [("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 1_000)]
    assert classed_by_names(kernels) == [("sm90+", True)]


def classed_by_names(kernels: list[tuple[str, int]]) -> list[tuple[str, bool | None]]:
    """(architecture, tensor_cores) of one GPU with no name, classed by the devices stage from the kernels it ran:
    a schema of kernel rows, not a trace."""
    con = duckdb.connect()
    db.create_schema(con)
    con.executemany("INSERT INTO kernels (rank, kernel_id, device_id, name, short_name, start_ns, end_ns, dur_ns) "
                    "VALUES (0, ?, 0, ?, ?, ?, ? + ?, ?)",
                    [[i, name, db.short_kernel_name(name), 1_000_000 * i, 1_000_000 * i, dur, dur]
                     for i, (name, dur) in enumerate(kernels)])
    match_devices(con, None)
    return con.execute("SELECT architecture, tensor_cores FROM devices WHERE spec_source = 'kernel_names'").fetchall()


def classes_with_tensor_cores() -> dict[str, bool | None]:
    return {c.id: c.tensor_cores for c in load_architectures()[0]}


def test_names_without_tensor_cores_say_unknown_or_none() -> None:
    classes = {c.id: c for c in load_architectures()[0]}
    assert classes["sm50+"].tensor_cores is None and classes["gfx906+"].tensor_cores is None
    known = {s.architecture for s in load_specs()}
    for architecture_class in classes.values():
        assert set(architecture_class.covers) <= known, architecture_class.id
