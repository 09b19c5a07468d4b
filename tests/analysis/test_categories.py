"""Kernel categories and math dtype: the rules in categories.toml, checked on synthetic names and real traces."""

from __future__ import annotations

import duckdb
import pytest

from conftest import SHARED_TRACES, VLLM_H100, analysed, requires_shared
from traceview.analysis import categories
from traceview.analysis.categories import CATEGORIES, DTYPES, classify_kernels, load_patterns
from traceview.model import db

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TORCH = SHARED_TRACES / "torch"
NSYS = SHARED_TRACES / "nsys"
SGLANG_MI300X = TORCH / "tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz"
BOLONGCHENG_FWD = NSYS / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"
BOLONGCHENG_BWD = NSYS / "bolongcheng__assignment2-systems__profile_small_bwd_A100.sqlite"


def classify_names(names: list[str]) -> dict[str, tuple[str, str | None, str | None]]:
    """(category, dtype, phase hint) per name, through the real schema and classify_kernels."""
    con = duckdb.connect()
    db.create_schema(con)
    con.executemany("INSERT INTO kernels (rank, kernel_id, name, short_name, dur_ns) VALUES (0, ?, ?, ?, 1)",
                    [[i, n, db.short_kernel_name(n)] for i, n in enumerate(dict.fromkeys(names))])
    classify_kernels(con)
    rows = con.execute("SELECT name, category, dtype, attention_phase_hint FROM labelled_kernels").fetchall()
    return {name: (category, dtype, hint) for name, category, dtype, hint in rows}


# --- every rule's own examples -------------------------------------------------------------------

RULES = tomllib.loads(categories.PATTERNS_FILE.read_text())
CATEGORY_EXAMPLES = [(i, r["name"], r.get("phase_hint"), ex)
                     for i, r in enumerate(RULES["category"]) for ex in r.get("examples", [])]
DTYPE_EXAMPLES = [(i, r["name"], ex) for i, r in enumerate(RULES["dtype"]) for ex in r.get("examples", [])]


@pytest.fixture(scope="module")
def example_labels() -> dict[str, tuple[str, str | None, str | None]]:
    return classify_names([ex for *_, ex in CATEGORY_EXAMPLES] + [ex for *_, ex in DTYPE_EXAMPLES])


def test_every_rule_has_examples() -> None:
    for section in ("category", "dtype"):
        for i, rule in enumerate(RULES[section]):
            assert rule.get("examples"), f"[[{section}]] entry {i} ({rule['name']}) has no examples"
            assert rule.get("why"), f"[[{section}]] entry {i} ({rule['name']}) does not say why"


@pytest.mark.parametrize("index,category,hint,name", CATEGORY_EXAMPLES,
                         ids=[f"c{i}-{c}-{n[:50]}" for i, c, _, n in CATEGORY_EXAMPLES])
def test_category_rule_examples(example_labels, index, category, hint, name) -> None:
    got_category, _, got_hint = example_labels[name]
    assert (got_category, got_hint) == (category, hint), f"category rule {index}"


@pytest.mark.parametrize("index,dtype,name", DTYPE_EXAMPLES, ids=[f"d{i}-{d}-{n[:50]}" for i, d, n in DTYPE_EXAMPLES])
def test_dtype_rule_examples(example_labels, index, dtype, name) -> None:
    assert example_labels[name][1] == (None if dtype == "none" else dtype), f"dtype rule {index}"


# --- traps: names where the obvious substring gives the wrong answer -------------------------------

FA2 = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
       "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t>>, flash::gemm_rs<true>, false, true>(Flash_fwd_params)")
TRAPS = [
    # name, category, dtype, phase hint
    (FA2, "attention", "bf16", None),  # 'gemm' in template arguments
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8>"
     "(cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8::Params)", "gemm", "bf16", None),  # not tf32
    ("cutlass_80_tensorop_s16816gemm_bf16_128x64", "gemm", "bf16", None),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
     "(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)", "gemm", "tf32", None),
    ("cutlass_80_tensorop_s16816gemm_128x128_32x3_tn_align8", "gemm", None, None),  # 16-bit shape, type unsaid
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "gemm", "fp16", None),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm", "bf16", None),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "gemm", "fp8", None),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT192x16x128_MI16x16x1_SN_ISA942", "gemm", "bf16", None),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_ISA90a", "gemm", "fp16", None),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "gemm", "bf16", None),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication", None, None),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication", None, None),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", "communication", "fp16", None),
    ("void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, 128, 16, 128, "
     "(vllm::Fp8KVCacheDataType)0, false, 512>(float*, float*, unsigned short*, unsigned short const*, int)",
     "attention", "fp16", "decode"),  # vLLM's uint16_t is fp16; the float* params are not the math type
    ("fmha_v2_flash_attention_fp16_64_128_S_80_sm80_kernel", "attention", "fp16", "prefill"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t, "
     "Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t>>, true, false>(Flash_fwd_params)", "attention", "fp16", None),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
     "(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*)",
     "kv_cache_write", "bf16", None),  # 'flash' is not attention, Fp8KVCacheDataType is not fp8
    ("triton_poi_fused_add_all_reduce_bitwise_and_bitwise_or_embedding_ge_lt_masked_fill_mul_sub_0", "fused", None, None),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*)",
     "rotary", "bf16", None),  # not embedding
    ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*)",
     "memory", None, None),  # 'fbgemm' is not a GEMM
    ("volta_scudnn_128x64_relu_interior_nn_v1", "conv", "fp32", None),  # conv epilogue 'relu'
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "gemm", "bf16", None),
    ("void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctorOnSelf_add<int>, std::array<char*, 2ul>, 4>"
     "(int, at::native::CUDAFunctorOnSelf_add<int>, std::array<char*, 2ul>)", "elementwise", None, None),  # 'unrolled'
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::where_kernel_impl"
     "(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda(bool, float, float)#1}>(at::TensorIteratorBase&)"
     "::{lambda(int)#1}>(int, {lambda(int)#1})", "elementwise", "fp32", None),  # 'lambda' is not LAMB
    ("void at::native::(anonymous namespace)::upsample_nearest2d_out_frame<float, float>(float const*, float*)",
     "elementwise", "fp32", None),  # not sampling
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1", "gemm", "bf16", None),  # weight-only fp4: bf16 math
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul>)", "memory", "fp16", None),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, "
     "unsigned int>)", "sampling", "fp32", None),  # top-k, not a gather
    ("void cutlass::Kernel<cutlass_80_tensorop_d884gemm_64x32_16x4_nn_align1>"
     "(cutlass_80_tensorop_d884gemm_64x32_16x4_nn_align1::Params)", "gemm", "fp64", None),
    ("nvkernel_solve_F1L204_2", "other", None, None),
]


@pytest.mark.parametrize("name,category,dtype,hint", TRAPS, ids=[t[0][:60] for t in TRAPS])
def test_trap_names(name, category, dtype, hint) -> None:
    assert classify_names([name])[name] == (category, dtype, hint)


# MoE and expert-parallel names that say dispatch, combine, expert or all-to-all but move no data
# between GPUs (or do, and must not fall to moe_routing/other): (name, category).
EP_NAMES = [
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
     "communication"),  # part of DeepEP's dispatch: its own namespace decides
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", "communication"),
    ("void nccl_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int**, int)", "communication"),
    ("void mori::moe::deepep::internode_ll::dispatch<true, 7168>(void*, float*, int*)", "communication"),
    ("moeA2ACombineKernel", "communication"),
    ("kernel_combine_token_inter_node", "communication"),
    ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, int*)",
     "moe_routing"),
    ("void vllm::moe::topkGatingSoftmax<8, 128, 4, 16, int>(float const*, bool const*, float*, int, int*, int*, int, int, int)",
     "moe_routing"),
    ("_fwd_kernel_ep_scatter_1", "memory"),  # SGLang's local permutation after DeepEP, not a transfer
    ("_fwd_kernel_ep_gather", "memory"),
    ("fused_moe_kernel", "gemm"),  # the expert GEMM itself
    ("void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5, 256, 1, false, "
     "true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, "
     "cute::C<128> >, 5, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90>::Params)", "attention"),
    ("void deep_gemm::fp8_gemm_kernel<7168, 4096, 128, 128, 128, 1, 8, 8, 2, 128, 128, 1, 1, "
     "(deep_gemm::GemmType)1>(float*, int*, unsigned int, CUtensorMap, CUtensorMap)", "gemm"),  # grouped expert GEMM
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "gemm"),
    ("void at::native::(anonymous namespace)::sleep_dispatch_kernel(long)", "other"),
    ("void step::combine_kernel<float>(float*)", "other"),
]


@pytest.mark.parametrize("name,category", EP_NAMES, ids=[n[:60] for n, _ in EP_NAMES])
def test_expert_parallel_names(name, category) -> None:
    assert classify_names([name])[name][0] == category


# --- the patterns file and its validation ----------------------------------------------------------


def test_patterns_load_in_priority_order() -> None:
    cats, dtypes = load_patterns()
    assert [r.priority for r in cats] == list(range(len(cats)))
    assert {r.label for r in cats} == set(CATEGORIES) - {"other"}  # every category has a rule
    assert {r.label for r in dtypes} == set(DTYPES) | {"none"}
    assert {r.phase_hint for r in cats if r.phase_hint} == {"prefill", "decode"}


@pytest.mark.parametrize("entry,message", [
    ("name = 'gemm'\nfield = 'name'\npattern = '(?i)gemm('", "bad pattern"),
    ("name = 'gemm'\nfield = 'name'", "missing pattern"),
    ("name = 'gemm'\npattern = 'gemm'", "missing field"),
    ("name = 'matmul'\nfield = 'name'\npattern = 'gemm'", "'matmul' is not one of"),
    ("name = 'gemm'\nfield = 'demangled'\npattern = 'gemm'", "field 'demangled'"),
    ("name = 'gemm'\nfield = 'name'\npattern = 'gemm'\nfeild = 'x'", "unknown key(s) feild"),
    ("name = 'gemm'\nfield = 'name'\npattern = 'gemm'\nphase_hint = 'decode'", "phase_hint 'decode' needs"),
])
def test_bad_rule_names_file_and_entry(tmp_path, entry, message) -> None:
    path = tmp_path / "rules.toml"
    good = "[[category]]\nname = 'norm'\nfield = 'name'\npattern = 'norm'\n"
    path.write_text(f"{good}\n[[category]]\n{entry}\n\n[[dtype]]\nname = 'bf16'\nfield = 'name'\npattern = 'bf16'\n")
    with pytest.raises(ValueError) as err:
        load_patterns(path)
    assert str(path) in str(err.value) and "[[category]] entry 1" in str(err.value) and message in str(err.value)


def test_a_bad_pattern_is_named_on_the_traces_connection_too_and_every_time(tmp_path) -> None:
    """The stage compiles the patterns on a cursor of the trace's database (no scratch database to open); a
    file version that failed is not remembered as compiled."""
    path = tmp_path / "rules.toml"
    path.write_text("[[category]]\nname = 'gemm'\nfield = 'name'\npattern = '(?i)gemm('\n"
                    "[[dtype]]\nname = 'bf16'\nfield = 'name'\npattern = 'bf16'\n")
    con = duckdb.connect()
    for _ in range(2):
        with pytest.raises(ValueError, match=r"\[\[category\]\] entry 0: bad pattern"):
            load_patterns(path, con)
    assert con.execute("SELECT 1").fetchall() == [(1,)]  # the failed check left the connection usable


def test_custom_patterns_file_drives_the_labels(tmp_path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[[category]]\nname = 'gemm'\nfield = 'short_name'\npattern = '^my_mm$'\n"
                    "[[dtype]]\nname = 'fp8'\nfield = 'name'\npattern = 'e4m3'\n")
    con = duckdb.connect()
    db.create_schema(con)
    con.execute("INSERT INTO kernels (name, short_name) VALUES ('void ns::my_mm<e4m3>(int)', 'my_mm'), ('gemm', NULL)")
    classify_kernels(con, path)
    assert con.execute("SELECT name, category, dtype FROM labelled_kernels ORDER BY name").fetchall() == [
        ("gemm", "other", None), ("void ns::my_mm<e4m3>(int)", "gemm", "fp8")]
    assert con.execute("SELECT * FROM category_patterns").fetchall() == [(0, "gemm", "short_name", "^my_mm$", None)]


def test_classify_leaves_kernels_as_ingested_and_reruns() -> None:
    con = duckdb.connect()
    db.create_schema(con)
    before = [c[0] for c in con.execute("DESCRIBE kernels").fetchall()]
    con.execute("INSERT INTO kernels (name, short_name) VALUES ('ampere_sgemm_128x64_tn', 'ampere_sgemm_128x64_tn')")
    classify_kernels(con)
    classify_kernels(con)
    assert [c[0] for c in con.execute("DESCRIBE kernels").fetchall()] == before
    assert con.execute("SELECT category, dtype FROM kernel_name_labels").fetchall() == [("gemm", "fp32")]
    why = con.execute("""SELECT p.category FROM kernels k JOIN category_patterns p
                         ON regexp_matches(k.name, p.pattern) ORDER BY p.priority LIMIT 1""").fetchall()
    assert why == [("gemm",)]


# --- real traces ----------------------------------------------------------------------------------


def classified(path):
    return analysed(path)


def other_share(trace) -> float:
    return trace.scalar("SELECT coalesce(sum(dur_ns) FILTER (WHERE category = 'other'), 0) / sum(dur_ns) FROM kernels")


@requires_shared
def test_vllm_h100() -> None:
    trace = classified(VLLM_H100)
    rows = dict(((c, d), n) for c, d, n in trace.con.execute(
        "SELECT category, dtype, count(*) FROM kernels GROUP BY ALL").fetchall())
    assert rows[("gemm", "bf16")] == 3930 and ("gemm", None) not in rows  # every GEMM says bf16
    # FA3 forward (80 prefill + 720 decode launches) and its 720 split-KV combines; 10 scheduler-metadata kernels
    assert trace.scalar("SELECT count(*) FROM kernels WHERE name LIKE '%flash::FlashAttnFwd%'") == 1520
    assert trace.scalar("""SELECT count(*) FROM kernels WHERE name LIKE '%flash::FlashAttnFwd%'
                           AND category = 'attention' AND dtype = 'bf16' AND attention_phase_hint IS NULL""") == 1520
    assert rows[("attention", None)] == 10
    assert trace.scalar("SELECT count(*) FROM kernels WHERE short_name = 'cross_device_reduce_1stage' "
                        "AND category = 'communication' AND dtype = 'bf16'") == 1449
    assert trace.scalar("SELECT count(*) FROM kernels WHERE name LIKE 'sm90_xmma_gemm_bf16bf16%' "
                        "AND category = 'gemm' AND dtype = 'bf16'") == 1770
    assert trace.scalar("SELECT count(*) FROM kernels WHERE name LIKE '%cutlass_80_tensorop_%' "
                        "AND category = 'gemm' AND dtype = 'bf16'") == 1440
    assert rows[("kv_cache_write", "bf16")] == 800
    assert rows[("fused", None)] == 4020  # Inductor RMSNorm / SiLU / cat kernels
    assert rows.get(("other", None), 0) == 0
    assert other_share(trace) == 0


@requires_shared
def test_sglang_mi300x() -> None:
    trace = classified(SGLANG_MI300X)
    assert trace.con.execute("SELECT DISTINCT category, dtype FROM kernels WHERE name LIKE 'Cijk_%'").fetchall() == [
        ("gemm", "bf16")]
    assert trace.con.execute(
        "SELECT category, dtype, attention_phase_hint, count(*) FROM kernels WHERE name LIKE '%FmhaBatchPrefill%' "
        "GROUP BY ALL").fetchall() == [("attention", "bf16", "prefill", 36)]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE category = 'norm'") == 145  # AITER add_rmsnorm_quant
    # three one-off scheduler kernels (resolve_future_token_ids, compute_position, kv-indices) are all that is left
    assert trace.scalar("SELECT count(*) FROM kernels WHERE category = 'other'") == 3
    assert other_share(trace) < 0.0001


@requires_shared
def test_bolongcheng_fp32_simt_gemms() -> None:
    fwd = classified(BOLONGCHENG_FWD)
    assert fwd.con.execute("SELECT DISTINCT category, dtype FROM kernels WHERE name LIKE 'ampere_sgemm_%'").fetchall() == [
        ("gemm", "fp32")]
    assert fwd.scalar("SELECT count(*) FROM kernels WHERE category = 'gemm'") == 109
    assert other_share(fwd) == 0
    bwd = classified(BOLONGCHENG_BWD)
    assert bwd.con.execute(
        "SELECT DISTINCT category, dtype FROM kernels WHERE name LIKE '%cutlass_80_simt_sgemm_%'").fetchall() == [
        ("gemm", "fp32")]
    assert bwd.con.execute("SELECT DISTINCT dtype FROM kernels WHERE category = 'gemm'").fetchall() == [("fp32",)]
    assert other_share(bwd) == 0


@requires_shared
def test_nccl_kernels_are_communication() -> None:
    trace = classified(TORCH / "hta__nccl_data_a100_ws2.json.gz")
    assert trace.con.execute(
        "SELECT short_name, category, dtype, count(*) FROM kernels WHERE name LIKE 'nccl%' GROUP BY ALL ORDER BY 1"
    ).fetchall() == [("ncclKernel_AllReduce_RING_LL_Sum_float", "communication", "fp32", 15),
                     ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "communication", None, 6)]


@requires_shared
def test_inductor_triton_kernels_are_fused() -> None:
    trace = classified(TORCH / "tracelens__mi300_torch_compile_triton.json.gz")
    assert trace.con.execute(
        "SELECT DISTINCT category FROM kernels WHERE short_name LIKE 'triton_%'").fetchall() == [("fused",)]
    assert trace.scalar("SELECT count(*) FROM kernels WHERE short_name LIKE 'triton_poi_fused_%'") == 2


# Share of GPU time left in 'other', measured when the rules were written (0 to 0.02 %); the bound
# catches a rule that stops matching a whole kernel family.
ML_TRACES = [
    "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz",
    "tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz",
    "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz",
    "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz",
    "tracelens__mi210_gpu_only_trace.json.gz",
    "hta__nccl_data_a100_ws2.json.gz",
    "hta__sampled_rank-0.json.gz",
    "hta__negative_queue_a100_ws16_rank0.json.gz",
    "hta__trace_diff_control_a100.json.gz",
    "hta__ns_resolution_v100.pt.trace.json.gz",
    "kineto-tbplugin__resnet50_2021_legacy.pt.trace.json.gz",
]


@requires_shared
@pytest.mark.parametrize("name", ML_TRACES)
def test_little_gpu_time_is_other(name) -> None:
    assert other_share(classified(TORCH / name)) < 0.001


@requires_shared
def test_bolongcheng_other_share() -> None:
    assert other_share(classified(BOLONGCHENG_FWD)) < 0.001
