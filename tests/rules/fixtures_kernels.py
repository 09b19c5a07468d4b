"""Generated traces for the kernel-efficiency (TV302-TV304), communication (TV401) and roofline (TV501, TV502)
rule cases.

Each public function returns a `traceview.testing.TraceSpec` whose numbers are known exactly; cases name them
as `fixture = "<function>"` in tests/rules/cases/TV3xx.toml, TV401.toml, TV5xx.toml. All times are ns from the
start of the capture. The ground truth each case asserts is worked out in the function's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from traceview.testing import H100_SXM, Kernel, Range, TraceSpec, llm_serving_spec

_PID = 4242
_BF16 = "c10::BFloat16"

# ---- kernel names as PyTorch / cuBLAS / NCCL / vLLM spell them on an H100 --------------------------------
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
BMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)"
FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
         "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
         "false, false, false, true, false>(pytorch_flash::Flash_fwd_params)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)")
DIV = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, "
       "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::DivFunctor<float> >, "
       "std::array<char*, 3ul>)")
ADD_BF16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >"
            "(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
TO_FP32 = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
           "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, "
           "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
           "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
           "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, "
           "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)")
POW = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>"
       "(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::"
       "pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul>)")
MEAN = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
        "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)")
ADD_EPS = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >"
           "(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)")
RSQRT = ("void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
         "operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
         "at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
         "const::{lambda(float)#1}, std::array<char*, 2ul>)")
MUL_FP32 = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, "
            "float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
            "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
            "MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, "
            "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})")
TO_BF16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
           "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
           "{lambda(float)#1}, std::array<char*, 2ul>)")
MUL_BF16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
            "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
            "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
            "std::array<char*, 3ul>)")
FUSED_RMS = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
CUSTOM_AR = ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
             "__nv_bfloat16*, int, int)")
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"

# Eager RMSNorm as Hugging Face writes it: residual add, to(float32), pow, mean, add eps, rsqrt, mul, to(bf16), mul weight
RMSNORM_CHAIN = (
    (ADD_BF16, "aten::add"), (TO_FP32, "aten::copy_"), (POW, "aten::pow"), (MEAN, "aten::mean"),
    (ADD_EPS, "aten::add"), (RSQRT, "aten::rsqrt"), (MUL_FP32, "aten::mul"), (TO_BF16, "aten::copy_"),
    (MUL_BF16, "aten::mul"),
)
RMSNORM_DECODE_NS = (2_100, 2_400, 2_300, 3_100, 1_900, 1_800, 2_600, 2_200, 2_500)  # sum 20,900, longest 3,100


@dataclass
class _Builder:
    """A host thread that launches kernels in order (one cpu_op range per launch) onto GPU streams.

    The CPU runs ahead of the GPU; each stream runs its kernels in launch order, 1 us apart. Steps are
    vLLM-style step annotations around the launches they contain.
    """

    cpu: int = 1_000_000
    streams: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    ranges: list = field(default_factory=list)

    def launch(self, name: str, dur: int, op: str, dims: list | None = None, types: list | None = None,
               stream: int = 7, at: int | None = None, values: list | None = None) -> int:
        """Launch one kernel; it starts at `at` when given, else when its stream is free. Returns its start."""
        op_start = self.cpu
        launch_start = self.cpu + 2_000
        launch_end = launch_start + 4_000
        start = at if at is not None else max(self.streams.get(stream, 0) + 1_000, launch_end + 3_000)
        self.streams[stream] = max(self.streams.get(stream, 0), start + dur)
        self.kernels.append(Kernel(name, start, dur, pid=_PID, tid=_PID, stream_id=stream,
                                   launch_start_ns=launch_start, launch_dur_ns=4_000))
        self.ranges.append(Range(op, op_start, launch_end + 1_000, pid=_PID, tid=_PID, kind="cpu_op",
                                 input_dims=dims, input_types=types, input_values=values))
        self.cpu = launch_end + 3_000
        return start

    def step(self, name: str, body) -> None:
        """Run `body(self)` inside a step annotation, then wait for the GPU (the sampled tokens' copy)."""
        start = self.cpu
        self.cpu += 20_000
        body(self)
        self.cpu += 10_000
        self.ranges.append(Range(name, start, self.cpu, pid=_PID, tid=_PID, kind="user_annotation"))
        self.cpu = max(self.cpu, *self.streams.values()) + 200_000

    def spec(self) -> TraceSpec:
        return TraceSpec(gpus=(H100_SXM,), kernels=tuple(self.kernels), ranges=tuple(self.ranges),
                         process_names={_PID: "python"}, thread_names={(_PID, _PID): "python"})


def _decode_name(batch: int) -> str:
    return f"execute_context_0(0)_generation_{batch}({batch})"


def _prefill_name(requests: int, tokens: int) -> str:
    return f"execute_context_{requests}({tokens})_generation_0(0)"


# ---- TV302 --------------------------------------------------------------------------------------------------

def kernels_bf16_model_fp32_lm_head() -> TraceSpec:
    """The sample serving run with its lm_head GEMM (one per step, eager, aten::mm) left in fp32 SIMT.

    Ground truth (computed from the spec by the case): 26 steps, so 26 fp32 GEMMs; every other GEMM is bf16.
    """
    spec = llm_serving_spec()
    ordered = sorted(spec.kernels, key=lambda k: k.start_ns)
    lm_heads = {id(k) for k, nxt in zip(ordered, ordered[1:])
                if k.name.startswith("nvjet_tst") and not k.graph and "DivFunctor" in nxt.name}
    return replace(spec, kernels=tuple(replace(k, name=SGEMM) if id(k) in lm_heads else k for k in spec.kernels))


# ---- TV303 --------------------------------------------------------------------------------------------------

def _eager_norm_model(fused: bool) -> TraceSpec:
    b = _Builder()

    def layers(b: _Builder, scale: int, gemm_ns: int) -> None:
        for _ in range(3):
            b.launch(GEMM, gemm_ns, "aten::mm")
            if fused:
                b.launch(FUSED_RMS, 9_000 * scale, "aten::rms_norm")  # what torch.compile makes of the chain
            else:
                for (name, op), dur in zip(RMSNORM_CHAIN, RMSNORM_DECODE_NS):
                    b.launch(name, dur * scale, op)
            b.launch(GEMM, gemm_ns, "aten::mm")
        b.launch(ADD_BF16, 2_000 * scale, "aten::add")  # a pair, not a chain
        b.launch(MUL_BF16, 2_000 * scale, "aten::mul")

    for _ in range(2):
        b.step(_prefill_name(2, 1024), lambda b: layers(b, 10, 300_000))
    for _ in range(4):
        b.step(_decode_name(8), lambda b: layers(b, 1, 30_000))
    return b.spec()


def kernels_eager_rmsnorm() -> TraceSpec:
    """2 prefill + 4 decode steps of 3 layers, each layer GEMM > eager RMSNorm (9 pointwise kernels) > GEMM.

    Ground truth: 18 chains of 9 kernels (162 kernels). Decode chain: 20,900 ns, longest 3,100 -> saving
    17,800 x 1.0; prefill chain (10x longer): 209,000 ns, longest 31,000 -> saving 178,000 x 0.3 = 53,400.
    Chain time 12 x 20,900 + 6 x 209,000 = 1,504,800 ns; saving 12 x 17,800 + 6 x 53,400 = 534,000 ns.
    The add > mul pair after each forward is not a chain (min_chain 3).
    """
    return _eager_norm_model(fused=False)


def kernels_fused_rmsnorm() -> TraceSpec:
    """The same model with each RMSNorm chain fused into one Triton kernel (torch.compile): no chain."""
    return _eager_norm_model(fused=True)


def kernels_pointwise_pairs() -> TraceSpec:
    """6 decode steps, each only add > mul on stream 7 and add > mul on stream 8: pairs, never a chain (min_chain
    3). Walked in one order by stream and step, stream 7's twelve kernels sit back to back and stream 8's follow:
    a chain must stop at every step and stream, or these would be two chains of twelve."""
    b = _Builder()

    def pairs(b: _Builder) -> None:
        for stream in (7, 8):
            b.launch(ADD_BF16, 2_000, "aten::add", stream=stream)
            b.launch(MUL_BF16, 2_000, "aten::mul", stream=stream)

    for _ in range(6):
        b.step(_decode_name(8), pairs)
    return b.spec()


# ---- TV304 --------------------------------------------------------------------------------------------------

# one attention head group: 32 heads x 1024 tokens x head dim 128
_BH, _S, _D = 32, 1024, 128
ATTN_BMM_FLOPS = 2 * _BH * _S * _S * _D  # 8,589,934,592 per bmm


def _attention_model(fused: bool) -> TraceSpec:
    b = _Builder()
    h = _BH * _D

    def layers(b: _Builder) -> None:
        for _ in range(4):
            b.launch(GEMM, 120_000, "aten::mm", [[_S, h], [h, 3 * h]], [_BF16, _BF16])
            if fused:
                b.launch(FLASH, 45_000, "aten::_flash_attention_forward",
                         [[1, _S, 32, _D], [1, _S, 32, _D], [1, _S, 32, _D]], [_BF16, _BF16, _BF16])
            else:
                b.launch(BMM, 40_000, "aten::bmm", [[_BH, _S, _D], [_BH, _D, _S]], [_BF16, _BF16])
                b.launch(DIV, 30_000, "aten::div", [[_BH, _S, _S], []], [_BF16, "Scalar"])
                b.launch(SOFTMAX, 45_000, "aten::_softmax", [[_BH, _S, _S], [], []], [_BF16, "Scalar", "Scalar"])
                b.launch(BMM, 40_000, "aten::bmm", [[_BH, _S, _S], [_BH, _S, _D]], [_BF16, _BF16])
            b.launch(GEMM, 40_000, "aten::mm", [[_S, h], [h, h]], [_BF16, _BF16])

    for _ in range(2):
        b.step(_prefill_name(1, _S), layers)
    return b.spec()


def kernels_eager_attention() -> TraceSpec:
    """2 prefill steps x 4 layers of eager attention: bmm (40 us) > div (30 us) > softmax (45 us) > bmm (40 us).

    Ground truth: 8 chains, 155,000 ns each (1,240,000 ns), 75,000 ns between the GEMMs (600,000 ns). Each bmm
    does 2*32*1024*1024*128 = 8,589,934,592 FLOPs; a flash kernel at 0.5 of the H100 bf16 dense peak (989.4
    TFLOP/s) needs 2 x 8,589,934,592 / 494.7e12 s = 34,727.85 ns for both, less than the GEMMs' 80,000 ns, so
    the saving is 155,000 - 34,727.85 = 120,272.15 ns per chain, 962,177 ns in all. Written as nsys (no op
    shapes, so no FLOPs) the saving is the in-between kernels only: 600,000 ns.
    """
    return _attention_model(fused=False)


def kernels_flash_attention() -> TraceSpec:
    """The same model with one FlashAttention kernel per layer: nothing to report."""
    return _attention_model(fused=True)


# ---- TV305 --------------------------------------------------------------------------------------------------

# one causal attention layer of a training step: batch 1, 4096 tokens, 16 heads of dim 128 ([B, L, H, E])
_FLASH_SHAPE = [1, 4096, 16, 128]
# aten::_flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
_FLASH_VALUES = ["", "", "", "", "", "4096", "4096", "0.", "True", "False"]
FLASH_CAUSAL_FLOPS = 2 * 1 * 16 * 4096 * 4096 * (128 + 128) // 2  # 68,719,476,736


def _training_flash(shapes: bool) -> TraceSpec:
    b = _Builder()

    def step(b: _Builder) -> None:
        b.launch(GEMM, 40_000, "aten::mm")
        if shapes:
            b.launch(FLASH, 175_000, "aten::_flash_attention_forward", [_FLASH_SHAPE] * 3 + [[]] * 7,
                     [_BF16] * 3 + ["Scalar"] * 7, values=_FLASH_VALUES)
        else:
            b.launch(FLASH, 175_000, "aten::_flash_attention_forward")
        b.launch(GEMM, 25_000, "aten::mm")
        for _ in range(2):  # the backward GEMMs, launched by the autograd engine: the steps are training steps
            b.launch(BMM, 55_000, "autograd::engine::evaluate_function: MmBackward0")

    for index in range(4):
        b.step(f"ProfilerStep#{index}", step)
    return b.spec()


def kernels_training_flash_uncosted() -> TraceSpec:
    """4 training steps (ProfilerStep#N, backward GEMMs under autograd), each GEMM 40 us > flash_fwd_kernel
    175 us > GEMM 25 us > two backward BMMs of 55 us; no op shapes, so nothing is costed.

    Ground truth: kernel time 4 x 350 us = 1,400,000 ns; flash_fwd_kernel 4 x 175,000 = 700,000 ns = 50.00 %
    (the GEMM family 260,000 ns, 18.57 %; the BMM family 440,000 ns, 31.43 %). Its name states bf16 and the
    traits <128, 128, 64, 4>: head dim 128, tile 128x64. No saving; at stake: its time in the priced steps.
    """
    return _training_flash(shapes=False)


def kernels_training_flash_costed() -> TraceSpec:
    """The same steps with the flash op's shapes recorded: q, k, v [1, 4096, 16, 128] bf16, is_causal True.

    Ground truth: FLOPs 2 * 1 * 16 * 4096 * 4096 * (128 + 128) / 2 = 68,719,476,736 per kernel, 69,455.71 ns at
    the H100 SXM's 989.4 TFLOP/s bf16 dense peak; bytes q, k, v, o 4 x 16,777,216 = 67,108,864, 20,032.50 ns
    at 3.35 TB/s: compute-bound, 69,455.71 / 175,000 = 39.69 % of roof. Saving per kernel 175,000 -
    69,455.71 = 105,544.29 ns, rounded per step 105,544 ns, 422,176 ns over the 4 steps (all priced).
    """
    return _training_flash(shapes=True)


# ---- TV401 --------------------------------------------------------------------------------------------------

def kernels_tp_communication() -> TraceSpec:
    """A tensor-parallel serving rank: 1 prefill + 3 decode steps (stream 7 compute, stream 20 all-gather).

    Prefill: 2 x (GEMM 80 us > NCCL all-reduce 30 us): 60,000 ns exposed; then an lm_head GEMM of 40 us with
    an all-gather of 25 us on stream 20 starting 10 us into it: fully hidden. Decode (each): 2 x (GEMM 20 us >
    custom all-reduce 8 us): 16,000 ns exposed; lm_head GEMM 10 us with a 12 us all-gather starting 5 us into
    it: 5,000 ns hidden, 7,000 exposed. Ground truth: 12 comm kernels (2 NCCL + 1 all-gather, then 3 x
    (2 custom + 1 all-gather)), comm 60,000 + 25,000 + 3 x 28,000 = 169,000 ns, exposed 60,000 + 3 x 23,000 =
    129,000 ns (76.33%, so 23.67% overlapped): NCCL all-reduce 60,000 ns in the prefill step, custom
    all-reduce 16,000 ns per decode step, all-gather 7,000 ns per decode step and 0 in prefill.
    """
    b = _Builder()

    def prefill(b: _Builder) -> None:
        for _ in range(2):
            b.launch(GEMM, 80_000, "aten::mm")
            b.launch(NCCL_AR, 30_000, "nccl:all_reduce")
        start = b.launch(GEMM, 40_000, "aten::mm")
        b.launch(ALL_GATHER, 25_000, "nccl:all_gather", stream=20, at=start + 10_000)

    def decode(b: _Builder) -> None:
        for _ in range(2):
            b.launch(GEMM, 20_000, "aten::mm")
            b.launch(CUSTOM_AR, 8_000, "vllm::all_reduce")
        start = b.launch(GEMM, 10_000, "aten::mm")
        b.launch(ALL_GATHER, 12_000, "nccl:all_gather", stream=20, at=start + 5_000)

    b.step(_prefill_name(4, 2048), prefill)
    for _ in range(3):
        b.step(_decode_name(4), decode)
    return b.spec()


def kernels_overlapped_communication() -> TraceSpec:
    """Data-parallel style: each of 3 steps runs 3 GEMMs of 100 us on stream 7 while a 50 us NCCL all-reduce
    on stream 20 starts 20 us into the second one. Ground truth: 3 comm kernels, all hidden: 0 ns exposed."""
    b = _Builder()

    def step(b: _Builder) -> None:
        b.launch(GEMM, 100_000, "aten::mm")
        start = b.launch(GEMM, 100_000, "aten::mm")
        b.launch(NCCL_AR, 50_000, "nccl:all_reduce", stream=20, at=start + 20_000)
        b.launch(GEMM, 100_000, "aten::mm")

    for _ in range(3):
        b.step(_prefill_name(4, 2048), step)
    return b.spec()


# ---- TV501 / TV502 ------------------------------------------------------------------------------------------

def kernels_decode_low_bandwidth() -> TraceSpec:
    """5 decode steps (batch 8), each 4 eager GEMMs [8, 4096] x [4096, 4096] bf16 of 25,000 ns.

    Ground truth: a GEMM moves 2 * (8*4096 + 4096*4096 + 8*4096) = 33,685,504 bytes, 10,055.37 ns at the
    H100 SXM's 3.35 TB/s (its 268 MFLOP take 271 ns at the bf16 peak: memory-bound), so decode reaches
    10,055.37 / 25,000 = 40.221% of its roofline floor, 1.3474 TB/s. GPU busy 20 x 25,000 = 500,000 ns;
    saving at the 80% target 500,000 * (1 - 40.2215/80) = 248,616 ns.
    """
    b = _Builder()

    def decode(b: _Builder) -> None:
        for _ in range(4):
            b.launch(GEMM, 25_000, "aten::mm", [[8, 4096], [4096, 4096]], [_BF16, _BF16])

    for _ in range(5):
        b.step(_decode_name(8), decode)
    return b.spec()


def kernels_prefill_slow_gemms() -> TraceSpec:
    """3 prefill steps, each 2 GEMMs [4096, 4096] x [4096, 4096] bf16 of 463,000 ns.

    Ground truth: 2 * 4096^3 = 137,438,953,472 FLOPs, 138,911.4 ns at the H100 bf16 dense peak (989.4
    TFLOP/s): 138,911.4 / 463,000 = 30.0025% of the peak, 296.8 TFLOP/s. FLOP-carrying time 6 x 463,000 = 2,778,000 ns; saving at the
    60% target 2,778,000 * (1 - 30.0025/60) = 1,388,886 ns.
    """
    b = _Builder()

    def prefill(b: _Builder) -> None:
        for _ in range(2):
            b.launch(GEMM, 463_000, "aten::mm", [[4096, 4096], [4096, 4096]], [_BF16, _BF16])

    for _ in range(3):
        b.step(_prefill_name(2, 4096), prefill)
    return b.spec()
