"""Steps and phases on real traces (facts checked by hand) and generated ones (known truth)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import traceview
from conftest import SHARED_TRACES, VLLM_H100, analysed, requires_shared
from traceview.testing import Kernel, Range, TraceSpec, llm_serving_spec, serving_steps, write_kineto, write_nsys

TORCH = SHARED_TRACES / "torch"
NSYS = SHARED_TRACES / "nsys"


@requires_shared
def test_vllm_h100_steps_phases_and_gpu() -> None:
    trace = analysed(VLLM_H100)
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
    trace = analysed(VLLM_H100, model="llama-3-70b", tp=4, batch=32, context=1005)
    row = trace.sql("SELECT bound, bound_source, pct_of_roof FROM phase_summary WHERE phase = 'decode'").to_dicts()[0]
    assert (row["bound"], row["bound_source"]) == ("memory", "model")
    assert 40 < row["pct_of_roof"] < 100
    terms = trace.sql("SELECT DISTINCT dominant_term FROM step_accounting WHERE phase = 'decode'")["dominant_term"]
    assert terms.to_list() == ["memory"]


@requires_shared
def test_vllm_mixed_step_token_counts() -> None:
    trace = analysed(TORCH / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz")
    row = trace.sql("SELECT * FROM steps").to_dicts()
    assert len(row) == 1
    step = row[0]
    assert (step["phase"], step["prefill_tokens"], step["decode_tokens"]) == ("mixed", 8155, 37)
    assert (step["prefill_requests"], step["decode_requests"]) == (9, 37)
    assert (step["prefill_context_tokens"], step["decode_context_tokens"]) == (8430, 34489)
    assert step["phase_source"] == "annotation:vllm-step"


@requires_shared
def test_sglang_extend_step_is_prefill() -> None:
    trace = analysed(TORCH / "tracelens__sglang_qwen3-8b_prefilldecode_mi300x.json.gz")
    assert trace.sql("SELECT phase, prefill_tokens, kernels FROM steps").rows() == [("prefill", 15360, 527)]
    assert trace.scalar("SELECT DISTINCT spec_id FROM devices") == "mi300x"


@requires_shared
def test_hf_forward_with_shapes_is_prefill_from_input_shapes() -> None:
    trace = analysed(TORCH / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz")
    assert trace.sql("SELECT phase, phase_source FROM steps").rows() == [("prefill", "input_shapes")]


@requires_shared
def test_kernels_launched_before_the_capture_belong_to_the_step_holding_their_start() -> None:
    """HF Qwen on H100: 436 kernels have no launch call (launched before the profiler window opened). They go by
    where they ran: those starting inside step 0's window belong to it, the 6 that start before it to no step."""
    trace = analysed(TORCH / "tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz")
    window_start = trace.scalar("SELECT start_ns FROM step_windows WHERE step_id = 0")
    unlinked = trace.sql("SELECT start_ns, step_id FROM kernels WHERE launch_call_id IS NULL").rows()
    assert len(unlinked) == 436
    assert sorted({(start >= window_start, step) for start, step in unlinked}) == [(False, None), (True, 0)]
    assert sum(start < window_start for start, _ in unlinked) == 6


def test_kernels_of_launch_calls_with_no_pid_belong_to_the_step_holding_their_start(tmp_path: Path) -> None:
    """A launch call whose pid is not a number (a hand-made trace's "host") links its kernel by correlation id
    alone, so the kernel has no pid to find its call's step by: like a kernel launched before the capture, it
    goes by where it ran."""
    def event(cat: str, name: str, ts: int, args: dict, pid: object = "host") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": 50, "args": args}
    events = []
    for step in (0, 1):
        events += [{**event("user_annotation", f"ProfilerStep#{step}", 1000 * step, {}), "dur": 1000},
                   event("cuda_runtime", "cudaLaunchKernel", 1000 * step + 10, {"correlation": step}),
                   event("kernel", "k", 1000 * step + 100, {"correlation": step, "device": 0, "stream": 7}, pid=0)]
    path = tmp_path / "pidless.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = traceview.load(path).analyze()
    assert trace.sql("SELECT pid, launch_call_id, step_id FROM kernels ORDER BY kernel_id").rows() == [
        (None, 0, 0), (None, 1, 1)]


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
    trace = analysed(TORCH / "hta__ns_resolution_v100.pt.trace.json.gz")
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


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, merged here in Python to check the SQL."""
    total, cursor = 0, None
    for start, end in sorted(intervals):
        if cursor is None or start > cursor:
            total, cursor = total + end - start, end
        elif end > cursor:
            total, cursor = total + end - cursor, end
    return total


TRAINING_TRACES = [
    # trace, steps with GPU work expected train
    (TORCH / "hta__sampled_rank-0.json.gz", 2), (TORCH / "hta__sampled_rank-1.json.gz", 2),
    (TORCH / "hta__trace_diff_control_a100.json.gz", 6), (TORCH / "hta__trace_diff_test_v100.json.gz", 6),
    (TORCH / "hta__negative_queue_a100_ws16_rank0.json.gz", 5), (TORCH / "hta__ns_resolution_v100.pt.trace.json.gz", 5),
    (TORCH / "param__dlrm_v100_8rank", 8), (NSYS / "bolongcheng__assignment2-systems__profile_small_bwd_A100.sqlite", 1),
    (NSYS / "bolongcheng__assignment2-systems__profile_small_opt_A100.sqlite", 1),
]


@requires_shared
@pytest.mark.parametrize(("path", "train_steps"), TRAINING_TRACES, ids=[p.name for p, _ in TRAINING_TRACES])
def test_training_steps_are_train_not_prefill_or_decode(path: Path, train_steps: int) -> None:
    """Backward and optimizer work make a step `train` (these were prefill from shapes or decode from graphs)."""
    trace = analysed(path)
    phases = trace.sql("SELECT phase, count(*) FROM steps WHERE kernels > 0 GROUP BY ALL").rows()
    assert phases == [("train", train_steps)]
    labels = trace.sql("SELECT DISTINCT phase FROM kernels WHERE step_id IS NOT NULL").rows()
    assert labels == [("train",)]
    assert trace.scalar("SELECT count(*) FROM phase_summary WHERE phase IN ('prefill', 'decode', 'mixed')") == 0


@requires_shared
def test_resnet50_2021_training_bursts() -> None:
    """The 2021 trace has no ProfilerStep: 7 GPU bursts, 6 whole iterations and one 20-kernel burst
    cut off the front of an iteration by an idle gap, which carries no training evidence of its own."""
    trace = analysed(TORCH / "kineto-tbplugin__resnet50_2021_legacy.pt.trace.json.gz")
    rows = trace.sql("SELECT phase, phase_source, kernels FROM steps ORDER BY step_id").rows()
    assert [r[0] for r in rows] == ["train"] * 4 + ["unknown"] + ["train"] * 2
    assert rows[4] == ("unknown", "no_evidence", 20)


@requires_shared
def test_backward_time_is_the_autograd_threads_work() -> None:
    """ns_resolution: every launch of the autograd thread (tid 1262) runs inside an
    `autograd::engine::evaluate_function` range, so each step's backward time is the busy time of that
    thread's GPU work and of the main thread's launches inside its `## backward ##` annotation (loss.backward's
    seed gradient); optimizer time is the work launched inside `Optimizer.*#SGD.*` or `## optimizer ##` on the main
    thread."""
    trace = analysed(TORCH / "hta__ns_resolution_v100.pt.trace.json.gz")
    steps = trace.sql("SELECT step_id, phase_source, gpu_time_ns, train_forward_ns, train_backward_ns, "
                      "train_optimizer_ns FROM steps ORDER BY step_id").rows()
    work = trace.con.execute(
        """WITH launched AS (
               SELECT k.step_id, a.rank, a.tid, a.start_ns AS call_ns, k.start_ns, k.end_ns
               FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
               UNION ALL
               SELECT m.step_id, a.rank, a.tid, a.start_ns, m.start_ns, m.end_ns
               FROM memops m JOIN api_calls a ON a.rank = m.rank AND a.pid = m.pid AND a.correlation_id = m.correlation_id)
           SELECT step_id, tid, start_ns, end_ns,
                  EXISTS (SELECT 1 FROM ranges r WHERE r.rank = l.rank AND r.tid = l.tid
                          AND (r.name LIKE 'Optimizer.%' OR r.name = '## optimizer ##')
                          AND r.start_ns <= l.call_ns AND r.end_ns >= l.call_ns) AS in_optimizer,
                  EXISTS (SELECT 1 FROM ranges r WHERE r.rank = l.rank AND r.tid = l.tid AND r.name = '## backward ##'
                          AND r.start_ns <= l.call_ns AND r.end_ns >= l.call_ns) AS in_backward
           FROM launched l""").fetchall()
    assert len(work) == 4350 + 1745
    for step_id, source, gpu_ns, forward_ns, backward_ns, optimizer_ns in steps:
        mine = [w for w in work if w[0] == step_id]
        assert source == "training:backward+optimizer"
        main = [(s, e, opt, bwd) for _, tid, s, e, opt, bwd in mine if tid == 1102]
        assert backward_ns == _union_ns([(s, e) for _, tid, s, e, _, _ in mine if tid == 1262]
                                        + [(s, e) for s, e, opt, bwd in main if bwd and not opt])
        assert optimizer_ns == _union_ns([(s, e) for s, e, opt, _ in main if opt])
        assert forward_ns == _union_ns([(s, e) for s, e, opt, bwd in main if not opt and not bwd])
        assert 0 < optimizer_ns < forward_ns < backward_ns < gpu_ns <= forward_ns + backward_ns + optimizer_ns


@requires_shared
def test_nsys_emit_nvtx_training_and_forward_only_runs() -> None:
    """bolongcheng: emit_nvtx ranges. The backward run has no optimizer (its split says NULL, not 0);
    the AdamW run's optimizer work is the 1,776 launches inside `Optimizer.*#AdamW.*`; forward-only is not train.
    The user's `backward pass` NVTX range makes loss.backward's seed-gradient fill (1,696 ns, launched from the
    main thread outside every autograd node) backward work, not forward."""
    bwd = analysed(NSYS / "bolongcheng__assignment2-systems__profile_small_bwd_A100.sqlite")
    assert bwd.sql("SELECT phase_source, train_optimizer_ns FROM steps").rows() == [("training:backward", None)]
    opt = analysed(NSYS / "bolongcheng__assignment2-systems__profile_small_opt_A100.sqlite")
    inside = opt.scalar(
        """SELECT count(*) FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
           WHERE EXISTS (SELECT 1 FROM ranges r WHERE r.tid = a.tid AND regexp_matches(r.name, '^Optimizer[.].*#AdamW[.]')
                         AND r.start_ns <= a.start_ns AND r.end_ns >= a.start_ns)""")
    assert inside == 1776
    row = opt.sql("SELECT phase_source, gpu_time_ns, train_forward_ns, train_backward_ns, train_optimizer_ns FROM steps").rows()
    assert row == [("training:backward+optimizer", 148_432_641, 44_310_716, 92_293_197, 11_828_728)]
    fill = opt.sql(
        """SELECT k.dur_ns FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
           JOIN ranges r ON r.tid = a.tid AND r.name = 'backward pass' AND r.start_ns <= a.start_ns AND r.end_ns >= a.start_ns
           WHERE k.name LIKE '%FillFunctor%'""").rows()
    assert fill == [(1_696,)]
    fwd = analysed(NSYS / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite")
    assert fwd.sql("SELECT phase, train_forward_ns FROM steps").rows() == [("unknown", None)]


def _training_spec(with_training: bool, op_kind: str) -> tuple[TraceSpec, dict[str, int]]:
    """Two iterations: forward GEMMs on the main thread, backward from the autograd thread inside
    evaluate_function ranges, an AdamW multi_tensor_apply inside Optimizer.step; 3 ms idle between.
    `op_kind`: 'cpu_op' (Kineto) or 'nvtx' (nsys emit_nvtx) for the op ranges."""
    kernels, ranges, truth = [], [], {"forward": 0, "backward": 0, "optimizer": 0}
    gpu_ns = 1_000_000
    parts = [("forward", 1000, "aten::linear", op_kind, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn")] * 3
    if with_training:
        parts += [("backward", 1001, "autograd::engine::evaluate_function: AddmmBackward0", op_kind,
                   "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn")] * 4
        parts += [("optimizer", 1000, "Optimizer.step#AdamW.step", "user_annotation",
                   "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float>(int, int volatile*)")]
    for _ in range(2):
        for part, tid, op, kind, name in parts:
            dur = {"forward": 200_000, "backward": 300_000, "optimizer": 50_000}[part]
            launch = gpu_ns - 20_000
            ranges.append(Range(op, launch - 2_000, launch + 8_000, tid=tid, kind=kind))
            kernels.append(Kernel(name, gpu_ns, dur, tid=tid, launch_start_ns=launch, launch_dur_ns=5_000))
            truth[part] += dur
            gpu_ns += dur + 30_000
        gpu_ns += 3_000_000
    return TraceSpec(gpus=llm_serving_spec().gpus, kernels=tuple(kernels), ranges=tuple(ranges)), truth


@pytest.mark.parametrize(("writer", "op_kind"), [(write_nsys, "nvtx"), (write_kineto, "cpu_op")], ids=["nsys", "kineto"])
def test_generated_training_iterations_are_train_with_their_split(tmp_path: Path, writer, op_kind: str) -> None:
    spec, truth = _training_spec(with_training=True, op_kind=op_kind)
    trace = traceview.load(writer(spec, tmp_path / ("t.sqlite" if writer is write_nsys else "t.json.gz"))).analyze()
    rows = trace.sql("SELECT phase, phase_source, train_forward_ns, train_backward_ns, train_optimizer_ns "
                     "FROM steps ORDER BY step_id").rows()
    per_step = {part: ns // 2 for part, ns in truth.items()}
    assert rows == [("train", "training:backward+optimizer", per_step["forward"], per_step["backward"],
                     per_step["optimizer"])] * 2
    assert trace.sql("SELECT DISTINCT phase FROM kernels").rows() == [("train",)]
    forward_only, _ = _training_spec(with_training=False, op_kind=op_kind)
    trace = traceview.load(writer(forward_only, tmp_path / ("f.sqlite" if writer is write_nsys else "f.json.gz"))).analyze()
    assert trace.sql("SELECT DISTINCT phase, train_forward_ns FROM steps").rows() == [("unknown", None)]


LARGE_GEMM = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN"
SMALL_GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
UNTILED_GEMM = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>>>(Params)"
PREFIX_PREFILL = "_fwd_kernel"
PAGED_DECODE = "kernel_paged_attention_2d"


def _eager_steps(steps: list[list[tuple[str, int]]]) -> TraceSpec:
    """Eager steps (no annotation, graph or shapes) of (kernel, ns), 2 ms idle between steps."""
    kernels, gpu_ns = [], 1_000_000
    for step in steps:
        for name, dur in step:
            kernels.append(Kernel(name, gpu_ns, dur))
            gpu_ns += dur + 5_000
        gpu_ns += 2_000_000
    return TraceSpec(gpus=llm_serving_spec().gpus, kernels=tuple(kernels))


DECODE_STEP = [(SMALL_GEMM, 20_000)] * 4 + [(PAGED_DECODE, 40_000)]
# vLLM ROCm chunked_prefill_paged_decode: the paged decode kernel runs and exits at once with no decodes
PREFILL_STEP = [(LARGE_GEMM, 300_000)] * 4 + [(PREFIX_PREFILL, 200_000), (PAGED_DECODE, 2_000)]
MIXED_STEP = [(LARGE_GEMM, 300_000)] * 4 + [(PREFIX_PREFILL, 200_000), (PAGED_DECODE, 40_000)]


@pytest.mark.parametrize("writer", [write_nsys, write_kineto], ids=["nsys", "kineto"])
def test_both_attention_kernels_need_token_evidence_for_mixed(tmp_path: Path, writer) -> None:
    """A prefill step that also launches the paged decode kernel is prefill; a step whose decode kernel
    does a decode step's work next to many-token GEMMs is mixed."""
    spec = _eager_steps([DECODE_STEP] * 3 + [PREFILL_STEP] + [DECODE_STEP] * 2 + [MIXED_STEP] + [DECODE_STEP])
    trace = traceview.load(writer(spec, tmp_path / ("s.sqlite" if writer is write_nsys else "s.json.gz"))).analyze()
    rows = trace.sql("SELECT phase, phase_source, confidence FROM steps ORDER BY step_id").rows()
    assert [r[0] for r in rows] == ["decode"] * 3 + ["prefill"] + ["decode"] * 2 + ["mixed", "decode"]
    assert rows[3] == ("prefill", "attention_kernels+gemm_tiles", 0.6)
    assert rows[6] == ("mixed", "attention_kernels+decode_work", 0.6)
    assert rows[0] == ("decode", "attention_kernels", 0.8)


def test_both_attention_kernels_without_other_evidence_are_prefill_at_low_confidence(tmp_path: Path) -> None:
    """No decode steps to compare with: tiles decide; with untiled GEMM names only the prefill-only kernel speaks."""
    tiled = _eager_steps([PREFILL_STEP, MIXED_STEP])
    trace = traceview.load(write_kineto(tiled, tmp_path / "tiled.json.gz")).analyze()
    assert trace.sql("SELECT phase, phase_source FROM steps").rows() == [("prefill", "attention_kernels+gemm_tiles")] * 2
    untiled = _eager_steps([[(UNTILED_GEMM, 300_000), (PREFIX_PREFILL, 200_000), (PAGED_DECODE, 2_000)]])
    trace = traceview.load(write_kineto(untiled, tmp_path / "untiled.json.gz")).analyze()
    assert trace.sql("SELECT phase, phase_source, confidence FROM steps").rows() == [("prefill", "attention_kernels", 0.4)]
    small = _eager_steps([[(SMALL_GEMM, 20_000), (PREFIX_PREFILL, 30_000), (PAGED_DECODE, 40_000)]])
    trace = traceview.load(write_kineto(small, tmp_path / "small.json.gz")).analyze()
    assert trace.sql("SELECT phase, phase_source FROM steps").rows() == [("decode", "attention_kernels+gemm_tiles")]


def test_training_patterns_load_and_tiles_classify() -> None:
    """steps.toml's [training] and [gemm_tiles] tables load; tile sides as PHASES.md §6 reads them."""
    import duckdb

    from traceview.analysis.phases import STEP_ROLES, gemm_tile_parameters, load_training_patterns
    from traceview.analysis.categories import classify_kernels
    from traceview.model import db

    patterns = load_training_patterns()
    names = {
        "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT": "small",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x16x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "small",
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8": "small",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false>(float)": "small",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1": "large",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn": "large",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_kernel": None,
        UNTILED_GEMM: None,
    }
    con = duckdb.connect()
    db.create_schema(con)
    con.executemany("INSERT INTO kernels (rank, kernel_id, name) VALUES (0, ?, ?)",
                    list(enumerate([*names, "not_a_gemm_64x8"])))
    classify_kernels(con)  # then the categories the test needs, whatever the names' own labels are
    con.execute("UPDATE kernel_name_labels SET category = CASE WHEN name_key = 'not_a_gemm_64x8' "
                "THEN 'elementwise' ELSE 'gemm' END")
    assert dict(STEP_ROLES.query(con, "gemm_tiles", **gemm_tile_parameters(patterns))) == names
    assert con.execute("SELECT regexp_matches('Optimizer.zero_grad#AdamW.zero_grad', $p)", {"p": patterns.optimizer}).fetchone() == (True,)
    assert con.execute("SELECT regexp_matches('aten::linear', $p)", {"p": patterns.backward}).fetchone() == (False,)


def _bursts(patterns: list[list[str]]) -> TraceSpec:
    """One GPU burst per kernel-name list (50 us kernels 10 us apart), 2 ms idle between bursts; no step marker."""
    kernels, gpu_ns = [], 1_000_000
    for names in patterns:
        for name in names:
            kernels.append(Kernel(name, gpu_ns, 50_000))
            gpu_ns += 60_000
        gpu_ns += 2_000_000
    return TraceSpec(gpus=llm_serving_spec().gpus, kernels=tuple(kernels))


@pytest.mark.parametrize("writer", [write_nsys, write_kineto], ids=["nsys", "kineto"])
def test_gap_steps_split_only_where_bursts_repeat(tmp_path: Path, writer) -> None:
    """50 launches of one kernel stay 50 steps; 6 iterations of one 10-kernel sequence, each ending in a different
    kernel (past the 8 that make a burst's pattern), stay 6 steps; bursts that each run different kernels become
    one window with the reason."""
    suffix = "t.sqlite" if writer is write_nsys else "t.json.gz"
    solver = traceview.load(writer(_bursts([["solve_kernel"]] * 50), tmp_path / f"solver-{suffix}")).analyze()
    assert solver.sql("SELECT count(*), any_value(name) FROM steps").rows() == [(50, "gpu burst")]
    iteration = ["embed_kernel"] + ["gemm_kernel", "softmax_kernel", "gemm_kernel"] * 3
    engine = _bursts([iteration + [f"tail_{i}_kernel"] * (1 + i % 2) for i in range(6)])
    trace = traceview.load(writer(engine, tmp_path / f"engine-{suffix}")).analyze()
    assert trace.sql("SELECT kernels FROM steps ORDER BY step_id")["kernels"].to_list() == [11, 12] * 3
    tests = _bursts([[f"matmul_{i}_kernel", "compare_kernel"] for i in range(5)])
    trace = traceview.load(writer(tests, tmp_path / f"tests-{suffix}")).analyze()
    rows = trace.sql("SELECT name, step_source, kernels, end_ns - start_ns FROM steps").rows()
    # one window from the first kernel's start to the last one's end: 5 bursts of 110 us and 4 gaps of 2,010 us
    assert rows == [("gpu span", "gpu_gap", 10, 5 * 110_000 + 4 * 2_010_000)]
    assert trace.sql("SELECT severity, message FROM diagnostics WHERE code = 'gap_steps_not_repeating'").rows() == [(
        "info", "5 GPU bursts between idle gaps over 1.000 ms, with 5 distinct kernel patterns (0 bursts share theirs "
                "with another): fewer than half repeat, so they are one window, not 5 steps; a step marker "
                "(ProfilerStep, an NVTX range per iteration, --step-regex) would split it")]


@requires_shared
def test_shared_traces_gap_steps_that_do_not_repeat_are_one_window() -> None:
    """nvFuser's test binary: 10 bursts of 10 different kernel heads (one window); alexnet: 18 bursts (6 of them
    copies only, which repeat nothing), 4 in a recurring kernel pattern (one window); Mordred: 3 identical bursts
    of build_GPU2 x3 + probe (3 steps)."""
    fuser = analysed(NSYS / "NVIDIA__Fuser__report3.sqlite")
    assert fuser.sql("SELECT count(*), any_value(name), sum(kernels) FROM steps").rows() == [(1, "gpu span", 19)]
    assert "10 GPU bursts between idle gaps over 1.000 ms, with 10 distinct kernel patterns (0 bursts" in fuser.scalar(
        "SELECT message FROM diagnostics WHERE code = 'gap_steps_not_repeating'")
    alexnet = analysed(TORCH / "hta__critical_path_alexnet_a100.json.gz")
    assert alexnet.scalar("SELECT count(*) FROM steps") == 1
    assert "18 GPU bursts between idle gaps over 1.000 ms, with 10 distinct kernel patterns (4 bursts" in alexnet.scalar(
        "SELECT message FROM diagnostics WHERE code = 'gap_steps_not_repeating'")
    mordred = analysed(NSYS / "bwyogatama__Mordred-Deprecated__report1.sqlite")
    assert mordred.sql("SELECT kernels FROM steps ORDER BY step_id")["kernels"].to_list() == [4, 4, 4]


@requires_shared
def test_a_copy_only_burst_belongs_to_the_gap_window() -> None:
    """nsys-ai's mock capture, torch.zeros(16).sum() then .item(): two different kernels 18 ms apart, then the
    4-byte DtoH copy 4.2 ms later. The bursts do not repeat, so the rank is one window, and it holds the copy
    (a burst with no kernel has no kernel pattern, but it is still GPU work of the run)."""
    mock = analysed(NSYS / "GindaChen__nsys-ai__tests_fixtures_mock.sqlite")
    ((copy_end,),) = mock.sql("SELECT max(end_ns) FROM memops").rows()
    assert mock.sql("SELECT count(*), max(end_ns) FROM steps").rows() == [(1, copy_end)]
    assert mock.sql("SELECT DISTINCT step_id FROM memops").rows() == [(0,)]
    assert "3 GPU bursts between idle gaps" in mock.scalar(
        "SELECT message FROM diagnostics WHERE code = 'gap_steps_not_repeating'")


def test_a_window_nested_in_another_of_its_thread_is_dropped_as_a_pairwise_check_drops_it() -> None:
    """step_work.sql's nested-window pass, joined on the thread and a time bucket, against every pair checked in
    Python: windows on three threads, nested, identical (kept both unless a third holds them) and of one interval
    under two names (the later name is dropped)."""
    import random

    import duckdb

    from traceview.analysis import sql_module

    statements = [s.sql for s in sql_module.load("step_work").sections["work"] if "_nested_windows" in s.sql]
    rng = random.Random(5)
    rows = [(0, 1, i % 3, i * 1_000_000, i * 1_000_000 + 900_000, "execute_model") for i in range(500)]
    for _ in range(200):
        start = rng.randrange(0, 500_000_000)
        rows.append((0, 1, rng.randrange(3), start, start + rng.choice((0, 1_000, 900_000, 3_000_000)),
                     rng.choice(("a", "execute_model", "z"))))
    rows += [(0, 1, 0, 0, 900_000, "a"), (0, 1, 0, 0, 900_000, "a"), (0, 1, 1, 10, 20, "b"), (0, 1, 1, 10, 20, "b")]
    con = duckdb.connect()
    con.execute("CREATE TABLE _step_windows (rank INTEGER, pid BIGINT, tid BIGINT, start_ns BIGINT, end_ns BIGINT, "
                "name VARCHAR)")
    con.executemany("INSERT INTO _step_windows VALUES (?, ?, ?, ?, ?, ?)", rows)
    for statement in statements:
        con.execute(statement)

    def nested(w: tuple, o: tuple) -> bool:
        return (o[:3] == w[:3] and o[3] <= w[3] and o[4] >= w[4]
                and (o[3] < w[3] or o[4] > w[4] or o[5] < w[5]))

    kept = sorted(w for w in rows if not any(nested(w, o) for o in rows))
    assert sorted(con.execute("SELECT * FROM _step_windows").fetchall()) == kept
    assert len(statements) == 3 and 500 < len(kept) < len(rows)
    assert kept.count((0, 1, 1, 10, 20, "b")) == 2


def test_each_rank_gets_windows_from_its_own_engines_grammar(tmp_path: Path) -> None:
    """The grammars stop only once every annotated rank has windows: a job whose rank 1 runs the legacy vLLM
    annotation (`execute_new_N_cached_M`, the second grammar) keeps it after rank 0's first grammar matched."""
    import gzip
    import re

    write_kineto(llm_serving_spec(), tmp_path / "rank0.json.gz", rank=0)
    legacy = write_kineto(llm_serving_spec(seed=1), tmp_path / "rank1.json.gz", rank=1)
    with gzip.open(legacy, "rt") as original:
        legacy_text, renamed = re.subn(r"execute_context_(\d+)\(\d+\)_generation_(\d+)\(\d+\)",
                                       r"execute_new_\1_cached_\2", original.read())
    assert renamed > 0
    with gzip.open(legacy, "wt") as out:
        out.write(legacy_text)
    with traceview.load(tmp_path) as trace:
        trace.analyze()
        assert trace.con.execute(
            "SELECT rank, step_source, phase, count(*) FROM steps GROUP BY ALL ORDER BY ALL").fetchall() == [
            (0, "annotation:vllm-step", "decode", 24), (0, "annotation:vllm-step", "prefill", 2),
            (1, "annotation:vllm-step-legacy", "decode", 24), (1, "annotation:vllm-step-legacy", "prefill", 2)]
