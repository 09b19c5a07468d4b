"""Workload kind from the strongest evidence: an engine's step annotation outranks op-name training heuristics,
multi-tensor optimizer ops count only beside backward or optimizer ranges, and a training loop's NVTX ranges
(forward, backward, optimizer, gradient all-reduce) make train steps with their split. Generated traces, so every
expected figure is the generated kernel time."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import traceview
from traceview.analysis.phases import (
    STEP_WORK,
    load_training_patterns,
    range_role_parameters,
)
from traceview.model import db
from traceview.testing import (
    Kernel,
    Range,
    TraceSpec,
    llm_serving_spec,
    write_kineto,
    write_nsys,
)

GPUS = llm_serving_spec().gpus
SMALL_GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
LARGE_GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
FOREACH_COPY = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
                "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, "
                "at::native::Copy<float, float>>(int, int volatile*)")
FOREACH_ADD = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
               "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
               "std::plus<float>, float>(int, int volatile*)")
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MAIN, AUTOGRAD = 1000, 1001


class Timeline:
    """Kernels launched one after another (each 20 us after its launch, 30 us apart on the GPU), each group under a
    host range of its own on the launching thread; steps are wrapped in a range afterwards."""

    def __init__(self) -> None:
        self.gpu_ns = 1_000_000
        self.kernels: list[Kernel] = []
        self.ranges: list[Range] = []

    def group(self, range_name: str | None, kind: str, tid: int, kernels: list[tuple[str, int]]) -> int:
        """Launch `kernels` (name, ns) from `tid` inside one range named `range_name` (None: no range); their ns."""
        first_launch = self.gpu_ns - 20_000
        for name, dur in kernels:
            launch = self.gpu_ns - 20_000
            self.kernels.append(Kernel(name, self.gpu_ns, dur, tid=tid, launch_start_ns=launch, launch_dur_ns=5_000))
            self.gpu_ns += dur + 30_000
        if range_name is not None:
            self.ranges.append(Range(range_name, first_launch - 2_000, launch + 7_000, tid=tid, kind=kind))
        return sum(dur for _, dur in kernels)

    def idle(self, ns: int) -> None:
        self.gpu_ns += ns

    def spec(self) -> TraceSpec:
        return TraceSpec(gpus=GPUS, kernels=tuple(self.kernels), ranges=tuple(self.ranges))


def _wrapped(timeline: Timeline, name: str, body) -> object:
    """Run `body()` and put a user annotation `name` on the main thread around what it launched."""
    start = timeline.gpu_ns - 30_000
    result = body()
    timeline.ranges.append(Range(name, start, timeline.gpu_ns - 30_000, tid=MAIN, kind="user_annotation"))
    return result


def _steps(path: Path, columns: str) -> list[tuple]:
    return traceview.load(path).analyze().sql(f"SELECT {columns} FROM steps ORDER BY step_id").rows()


def test_sglang_decode_step_copying_graph_inputs_with_foreach_copy_is_decode(tmp_path: Path) -> None:
    """SGLang copies a decode step's inputs into its CUDA-graph buffers with aten::_foreach_copy_: the engine's step
    annotation says decode, and it outranks the multi-tensor op (which alone made these steps `train`)."""
    timeline = Timeline()
    for _ in range(3):
        _wrapped(timeline, "step[DECODE bs=32 toks=32]", lambda: (
            timeline.group("aten::_foreach_copy_", "cpu_op", MAIN, [(FOREACH_COPY, 8_000)]),
            timeline.group("aten::mm", "cpu_op", MAIN, [(SMALL_GEMM, 20_000)] * 4)))
        timeline.idle(2_000_000)
    rows = _steps(write_kineto(timeline.spec(), tmp_path / "sglang.json.gz"),
                  "phase, phase_source, confidence, decode_tokens, decode_requests, kernels, train_optimizer_ns")
    assert rows == [("decode", "annotation:sglang-step", 1.0, 32, 32, 5, None)] * 3


def _profiler_steps(tmp_path: Path, iteration, count: int = 2) -> tuple[Path, list]:
    """`count` ProfilerStep#N windows, each running `iteration(timeline)`; the Kineto file and each step's truth."""
    timeline, truth = Timeline(), []
    for step in range(count):
        truth.append(_wrapped(timeline, f"ProfilerStep#{step}", lambda: iteration(timeline)))
        timeline.idle(3_000_000)
    return write_kineto(timeline.spec(), tmp_path / "steps.json.gz"), truth


def test_backward_and_foreach_optimizer_ops_are_a_train_step_with_their_split(tmp_path: Path) -> None:
    """Forward GEMMs on the main thread, backward from the autograd thread inside evaluate_function ranges, then
    the optimizer as bare aten::_foreach_add_ (no Optimizer.step range): beside backward, the foreach op is the
    optimizer."""
    def iteration(timeline: Timeline) -> tuple[int, int, int]:
        forward = timeline.group("aten::linear", "cpu_op", MAIN, [(LARGE_GEMM, 200_000)] * 3)
        backward = timeline.group("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", AUTOGRAD,
                                  [(LARGE_GEMM, 300_000)] * 2)
        optimizer = timeline.group("aten::_foreach_add_", "cpu_op", MAIN, [(FOREACH_ADD, 40_000)])
        return forward, backward, optimizer

    path, truth = _profiler_steps(tmp_path, iteration)
    rows = _steps(path, "phase, phase_source, train_forward_ns, train_backward_ns, train_optimizer_ns")
    assert truth == [(600_000, 600_000, 40_000)] * 2
    assert rows == [("train", "training:backward+optimizer", 600_000, 600_000, 40_000)] * 2


def test_foreach_copy_without_backward_or_optimizer_ranges_is_not_train(tmp_path: Path) -> None:
    """An inference step whose inputs are staged by aten::_foreach_copy_: no backward work, no optimizer range, so
    the multi-tensor op is ordinary work and says nothing about the workload kind."""
    def iteration(timeline: Timeline) -> None:
        timeline.group("aten::_foreach_copy_", "cpu_op", MAIN, [(FOREACH_COPY, 8_000)])
        timeline.group("aten::linear", "cpu_op", MAIN, [(LARGE_GEMM, 200_000)] * 3)

    path, _ = _profiler_steps(tmp_path, iteration)
    rows = _steps(path, "phase, phase_source, kernels, train_forward_ns, train_optimizer_ns")
    assert rows == [("unknown", "no_evidence", 4, None, None)] * 2


def test_a_strong_optimizer_range_that_launches_nothing_lets_foreach_ops_count(tmp_path: Path) -> None:
    """`Optimizer.zero_grad#SGD.zero_grad` with set_to_none launches nothing, but it is in the step: the foreach
    update beside it (on another thread) is optimizer work, and the step is train from the optimizer alone."""
    def iteration(timeline: Timeline) -> int:
        timeline.ranges.append(Range("Optimizer.zero_grad#SGD.zero_grad", timeline.gpu_ns - 25_000,
                                     timeline.gpu_ns - 24_000, tid=MAIN, kind="user_annotation"))
        timeline.group("aten::linear", "cpu_op", MAIN, [(LARGE_GEMM, 200_000)])
        return timeline.group("aten::_foreach_add_", "cpu_op", AUTOGRAD + 1, [(FOREACH_ADD, 40_000)] * 2)

    path, truth = _profiler_steps(tmp_path, iteration)
    rows = _steps(path, "phase, phase_source, confidence, train_forward_ns, train_optimizer_ns")
    assert truth == [80_000] * 2
    assert rows == [("train", "training:optimizer", 0.85, None, 80_000)] * 2


LOOP_NAMES = [
    ("forward", "loss", "backward", "all_reduce grad", "optimizer"),
    ("Forward pass", "compute_loss", "loss.backward", "allreduce_grads", "optimizer.step"),
    ("## forward ##", "## loss ##", "## backward ##", "grad sync", "## optimizer ##"),
]


@pytest.mark.parametrize("names", LOOP_NAMES, ids=["plain", "dotted", "hashes"])
def test_nsys_training_loop_nvtx_ranges_are_train_steps_with_their_split(tmp_path: Path, names) -> None:
    """A DDP-style loop in an nsys export, every phase an NVTX range on one thread and no step marker. A loss.item()
    sync leaves 2 ms idle between forward and backward, so idle-gap bursts would cut each iteration in two; the
    forward ranges open the steps instead, and each step's split is the kernel time under its ranges (the gradient
    all-reduce counts as backward)."""
    forward_name, loss_name, backward_name, sync_name, optimizer_name = names
    timeline, truth = Timeline(), []
    for _ in range(3):
        forward = timeline.group(forward_name, "nvtx", MAIN, [(LARGE_GEMM, 200_000)] * 3)
        forward += timeline.group(loss_name, "nvtx", MAIN, [("cross_entropy_loss_kernel", 50_000)])
        timeline.idle(2_000_000)
        backward = timeline.group(backward_name, "nvtx", MAIN, [(LARGE_GEMM, 300_000)] * 4)
        backward += timeline.group(sync_name, "nvtx", MAIN, [(ALL_REDUCE, 100_000)])
        optimizer = timeline.group(optimizer_name, "nvtx", MAIN, [(FOREACH_ADD, 40_000)] * 2)
        truth.append((forward, backward, optimizer))
        timeline.idle(500_000)
    rows = _steps(write_nsys(timeline.spec(), tmp_path / "ddp.sqlite"),
                  "phase, phase_source, step_source, name, kernels, train_forward_ns, train_backward_ns, "
                  "train_optimizer_ns")
    assert truth == [(650_000, 1_300_000, 80_000)] * 3
    assert rows == [("train", "training:backward+optimizer", "training_loop", forward_name, 11, 650_000, 1_300_000,
                     80_000)] * 3


def test_forward_ranges_alone_do_not_make_training_steps(tmp_path: Path) -> None:
    """An inference loop with NVTX "forward" ranges: no backward or optimizer range in the process, so its steps
    stay the idle-gap bursts and nothing is train."""
    timeline = Timeline()
    for _ in range(3):
        timeline.group("forward", "nvtx", MAIN, [(LARGE_GEMM, 200_000)] * 3)
        timeline.idle(2_000_000)
    rows = _steps(write_nsys(timeline.spec(), tmp_path / "infer.sqlite"), "phase, step_source, kernels")
    assert rows == [("unknown", "gpu_gap", 3)] * 3


ROLE_NAMES = {
    # (name, kind): (backward, optimizer, optimizer_weak, forward, iteration_start)
    ("forward", "nvtx"): (False, False, False, True, True),
    ("DistributedDataParallel.forward", "user_annotation"): (False, False, False, True, True),
    ("## alltoall_fwd_single ##", "user_annotation"): (False, False, False, True, True),
    ("compute_loss", "nvtx"): (False, False, False, True, False),
    ("loss.backward", "nvtx"): (True, False, False, False, False),
    ("Backward Pass", "user_annotation"): (True, False, False, False, False),
    ("gradient all-reduce", "nvtx"): (True, False, False, False, False),
    ("sync_grads", "nvtx"): (True, False, False, False, False),
    ("optimizer step", "nvtx"): (False, True, False, False, False),
    ("## zero_grad ##", "user_annotation"): (False, True, False, False, False),
    ("Optimizer.step#AdamW.step", "user_annotation"): (False, True, False, False, False),
    ("aten::_foreach_copy_", "cpu_op"): (False, False, True, False, False),
    ("aten::_fused_adamw_", "cpu_op"): (False, False, True, False, False),
    # a whole iteration names two roles, so none; a cpu_op or Python frame is no loop range
    ("forward-backward", "nvtx"): None,
    ("fwd_bwd_step", "nvtx"): None,
    ("nccl:all_reduce", "user_annotation"): None,
    ("torch/nn/modules/linear.py(124): forward", "python_function"): None,
    ("opt-125m", "nvtx"): None,
    ("backwards_compat", "nvtx"): None,
}


def test_range_roles_read_names_by_word_structure() -> None:
    """steps.toml's [training] and [training_loop] patterns, through the range_roles section: phase words between
    separators in any case, on annotations only; several roles in one name are none."""
    con = duckdb.connect()
    db.create_schema(con)
    con.executemany("INSERT INTO ranges (rank, range_id, pid, tid, name, kind, start_ns, end_ns) "
                    "VALUES (0, ?, 1, 1, ?, ?, 0, 1)", [(i, name, kind) for i, (name, kind) in enumerate(ROLE_NAMES)])
    STEP_WORK.run(con, "range_roles", **range_role_parameters(load_training_patterns()))
    got = {(name, kind): tuple(roles) for name, kind, *roles in con.execute(
        "SELECT name, kind, backward, optimizer, optimizer_weak, forward, iteration_start FROM range_roles").fetchall()}
    assert got == {key: tuple(roles) for key, roles in ROLE_NAMES.items() if roles is not None}
