"""Generated two-process DDP runs in one nsys export, for the rank analysis and TV402 (rank skew); and
single-rank runs whose collectives imply tensor, data or pipeline parallelism (collectives.sql, TV401).

Two training processes, one GPU each, plus a launcher process that makes one CUDA call and no GPU
work. Every step: a 40 us NCCL broadcast both ranks reach together, four GEMMs, then an NCCL
all-reduce that ends at the same moment on both GPUs, 300 us after the later rank reached it; then
the GPUs idle until the next step. The process on GPU 1 has the smaller pid, so the ranks must come
from the GPU ordinal first (GPU 0 -> rank 0), not from the pid.

`ddp_straggler`: rank 1 (GPU 1) computes 1.5 ms per GEMM against rank 0's 0.5 ms, so rank 0 sits in each
all-reduce 4,300 us where rank 1 needs 300 us: 4 ms of waiting per step, 40 ms over the 10 steps.
`ddp_balanced`: both ranks compute 0.5 ms per GEMM; nobody waits.
All times are ns.
"""

from __future__ import annotations

from dataclasses import replace

from fixtures_kernels import GEMM as SM90_GEMM
from fixtures_kernels import _Builder, _decode_name, _prefill_name

from traceview.testing import H100_SXM, ApiCall, Kernel, TraceSpec

US = 1_000
MS = 1_000_000
STEPS = 10
PERIOD = 7_500 * US
START = 1 * MS
LAUNCHER_PID = 5000
# (pid, GPU): the rank-1 process has the lower pid
PROCESSES = ((5200, 0), (5100, 1))
GEMMS = 4
BROADCAST_NS = 40 * US
ALL_REDUCE_NS = 300 * US  # the transfer itself, once the last rank arrived
COMPUTE_STREAM, NCCL_STREAM = 7, 20
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x5_tn_align8>(Params)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _run(gemm_ns: dict[int, int]) -> TraceSpec:
    """One DDP run: `gemm_ns` maps each GPU to its GEMM duration."""
    kernels = []
    all_reduce_start = 50 * US + 10 * US + GEMMS * max(gemm_ns.values())  # when the later rank arrives
    for step in range(STEPS):
        t = START + step * PERIOD
        for pid, gpu in PROCESSES:
            def launch(name: str, start: int, dur: int, stream: int) -> Kernel:
                return Kernel(name, t + start, dur, pid=pid, tid=pid, device_id=gpu, stream_id=stream,
                              launch_start_ns=t + start - 8 * US, launch_dur_ns=5 * US)
            kernels.append(launch(BROADCAST, 0, BROADCAST_NS, NCCL_STREAM))
            for i in range(GEMMS):
                kernels.append(launch(GEMM, 50 * US + i * gemm_ns[gpu], gemm_ns[gpu], COMPUTE_STREAM))
            arrive = 50 * US + GEMMS * gemm_ns[gpu] + 10 * US
            kernels.append(launch(ALL_REDUCE, arrive, all_reduce_start + ALL_REDUCE_NS - arrive, NCCL_STREAM))
    gpus = (H100_SXM, replace(H100_SXM, device_id=1))
    launcher = ApiCall("cudaGetDeviceCount", START // 2, 5 * US, pid=LAUNCHER_PID, tid=LAUNCHER_PID)
    kernels.sort(key=lambda k: (k.start_ns, k.device_id))
    return TraceSpec(gpus=gpus, kernels=tuple(kernels), api_calls=(launcher,), world_size=2,
                     process_names={LAUNCHER_PID: "torchrun", 5100: "python", 5200: "python"})


def ddp_straggler() -> TraceSpec:
    return _run({0: 500 * US, 1: 1_500 * US})


def ddp_balanced() -> TraceSpec:
    return _run({0: 500 * US, 1: 500 * US})


# ---- collectives (analysis/sql/collectives.sql, TV401) ---------------------------------------------------------
# One process, one GPU: the builder of fixtures_kernels (one cpu_op range per launch, vLLM step annotations).

RCCL_GENERIC = "void rccl_ncclDevKernel_Generic_2(ncclDevComm*, unsigned long, ncclWork*)"
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
GRAD_ELEMENTS = 4_194_304  # one bf16 gradient bucket: 8,388,608 bytes
GRAD_ALL_REDUCE_NS = 150 * US


def rccl_generic_serving() -> TraceSpec:
    """A tensor-parallel serving rank whose all-reduces are RCCL `Generic` kernels (the name says no collective),
    each launched under a `vllm::all_reduce` op: 1 prefill step of 2 x (GEMM 80 us > all-reduce 30 us) and 3 decode
    steps of 2 x (GEMM 20 us > all-reduce 8 us), all on one stream. Ground truth: 8 all-reduces, 60,000 ns exposed
    in prefill and 16,000 ns per decode step, 108,000 ns in all, none of it hideable by overlap."""
    b = _Builder()

    def prefill(b: _Builder) -> None:
        for _ in range(2):
            b.launch(SM90_GEMM, 80 * US, "aten::mm")
            b.launch(RCCL_GENERIC, 30 * US, "vllm::all_reduce")

    def decode(b: _Builder) -> None:
        for _ in range(2):
            b.launch(SM90_GEMM, 20 * US, "aten::mm")
            b.launch(RCCL_GENERIC, 8 * US, "vllm::all_reduce")

    b.step(_prefill_name(4, 2048), prefill)
    for _ in range(3):
        b.step(_decode_name(4), decode)
    return replace(b.spec(), world_size=4)


def ddp_backward_all_reduce() -> TraceSpec:
    """Data-parallel training, world size 2: 4 `ProfilerStep#N` steps of 2 forward GEMMs (100 us), then backward
    (an `autograd::engine::evaluate_function: MmBackward0` node around 2 GEMMs of 100 us) and one gradient bucket's
    all-reduce (8,388,608 bf16 bytes, 150 us on stream 20) launched from the `AccumulateGrad` node under an
    `nccl:all_reduce` op, starting 50 us into the last backward GEMM: 50,000 ns hidden, 100,000 ns exposed per step.
    Bus bandwidth: 8,388,608 B / 150 us x 2(2-1)/2 = 55.92 GB/s."""
    b = _Builder()
    for step in range(4):
        start = b.cpu
        for _ in range(2):
            b.launch(SM90_GEMM, 100 * US, "aten::mm")
        backward_start = b.cpu
        b.launch(SM90_GEMM, 100 * US, "aten::mm")
        last = b.launch(SM90_GEMM, 100 * US, "aten::mm")
        b.ranges.append(replace(b.ranges[-1], name="autograd::engine::evaluate_function: MmBackward0",
                                start_ns=backward_start - 500, end_ns=b.cpu - 500, input_dims=None, input_types=None))
        node_start = b.cpu
        b.launch(ALL_REDUCE, GRAD_ALL_REDUCE_NS, "nccl:all_reduce", dims=[[GRAD_ELEMENTS]],
                 types=["c10::BFloat16"], stream=NCCL_STREAM, at=last + 50 * US)
        b.ranges.append(replace(b.ranges[-1], name="autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                start_ns=node_start - 500, end_ns=b.cpu - 500, input_dims=None, input_types=None))
        b.cpu = max(b.cpu, *b.streams.values()) + 200 * US
        b.ranges.append(replace(b.ranges[-1], name=f"ProfilerStep#{step}", kind="user_annotation",
                                start_ns=start - 1_000, end_ns=b.cpu - 100 * US))
    return replace(b.spec(), world_size=2)


def pipeline_send_recv() -> TraceSpec:
    """A pipeline stage: 3 serving-style steps, each a GEMM of 50 us then an NCCL SendRecv kernel of 20 us
    launched under `nccl:send`. Ground truth: 3 send/recv calls, kind from the op, parallelism pipeline."""
    b = _Builder()

    def step(b: _Builder) -> None:
        b.launch(SM90_GEMM, 50 * US, "aten::mm")
        b.launch(SEND_RECV, 20 * US, "nccl:send", stream=NCCL_STREAM)

    for _ in range(3):
        b.step(_prefill_name(4, 2048), step)
    return replace(b.spec(), world_size=2)
