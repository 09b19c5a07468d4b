"""A realistic LLM-serving capture with known ground truth (``llm_serving_spec``).

Why: phase detection, roofline and launch-overhead analyses need an end-to-end
fixture that looks like a real vLLM run on an H100 (eager prefill steps, decode
steps replayed from CUDA graphs, vLLM step annotations, cuBLAS/nvjet/flash
kernels, input/output copies, idle gaps) while every number is known exactly.
The host timeline is simulated: the CPU issues launches, the GPU runs them in
stream order, so launch delays and GPU-bound queueing are realistic.

``python -m traceview.testing.samples OUTDIR`` writes ``llm_serving.sqlite``
(nsys 2026.3) and ``llm_serving.pt.trace.json.gz`` (modern Kineto).
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from traceview.testing.kineto_writer import write_kineto
from traceview.testing.nsys_writer import write_nsys
from traceview.testing.plan import summarize
from traceview.testing.spec import ApiCall, GpuSpec, Kernel, Memop, Range, TraceSpec

__all__ = ["H100_SXM", "LlamaConfig", "llm_serving_spec", "serving_runs", "serving_steps", "llm_serving_truth", "main"]

H100_SXM = GpuSpec(
    "NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0,
    memory_bandwidth_bytes_per_s=3_352_000_000_000, clock_hz=1_980_000_000, l2_bytes=52_428_800,
)
_PEAK_BF16_FLOPS = 989e12
_PEAK_BW = 3.352e12
PID = 18_231
MAIN_TID = PID


@dataclass(frozen=True)
class LlamaConfig:
    """Llama-3-8B-shaped layers; fewer of them keeps the sample small."""

    num_layers: int = 8
    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 128_256


# ---- kernel names as they appear in real H100 vLLM traces ----------------------------
K_EMBED = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, "
           "-2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<"
           "c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
           "unsigned int, unsigned int, long)")
K_RMS = "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)"
K_ADD_RMS = ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, "
             "c10::BFloat16 const*, float, int, int)")
K_ROPE = ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
          "c10::BFloat16 const*, int, long, long, long, int, int, int)")
K_CACHE = ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
           "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, "
           "long, long, long, int, int, int, float const*, float const*)")
K_FLASH = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
           "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, "
           "false, false>(flash::Flash_fwd_params)")
K_SPLITKV = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, true, false, false, "
             "false, true, true, false, false>(flash::Flash_fwd_params)")
K_COMBINE = ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 3, true>("
             "flash::Flash_fwd_params)")
K_ACT = ("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>("
         "c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)")
K_GEMM_PREFILL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
K_GEMM_PREFILL_WIDE = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
K_GEMM_DECODE = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN"
K_GEMM_DECODE_SPLITK = "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
K_DIV = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
         "at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
         "float, float, float, at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul>)")
K_SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
             "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
K_EXPONENTIAL = ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
                 "void at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
                 "{lambda(curandStatePhilox4_32_10*)#1}, void at::native::(anonymous namespace)::distribution_nullary_"
                 "kernel<float, float, 4, at::CUDAGeneratorImpl*, void at::native::templates::cuda::exponential_kernel<"
                 "at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::"
                 "operator()() const::{lambda()#2}::operator()() const::{lambda(curandStatePhilox4_32_10*)#1}, "
                 "void at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
                 "{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, void at::native::templates::cuda::"
                 "exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::"
                 "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1} const&, "
                 "void at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
                 "{lambda(curandStatePhilox4_32_10*)#1})::{lambda(int, float)#1}>(long, at::PhiloxCudaState, "
                 "void at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
                 "{lambda(curandStatePhilox4_32_10*)#1}, void at::native::(anonymous namespace)::distribution_nullary_"
                 "kernel<float, float, 4, at::CUDAGeneratorImpl*>::{lambda(int, float)#1})")
K_ARGMAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
            "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
            "long, 4, 4>)")

_GEMM_LAUNCH = {K_GEMM_PREFILL: "cudaLaunchKernelExC", K_GEMM_PREFILL_WIDE: "cudaLaunchKernelExC",
                K_GEMM_DECODE: "cuLaunchKernelEx", K_GEMM_DECODE_SPLITK: "cuLaunchKernelEx"}


@dataclass
class _OpDesc:
    """One GPU op to issue: kernel parameters plus its host-side PyTorch op."""

    name: str
    dur: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int
    smem: int
    op: str
    dims: list = field(default_factory=list)
    types: list = field(default_factory=list)
    api: str = "cudaLaunchKernel"
    layer: int | None = None


@dataclass
class _Sim:
    """Host/GPU co-simulation: the CPU issues calls, the stream executes them in order."""

    rng: random.Random
    cpu: int = 0
    gpu: int = 0
    kernels: list = field(default_factory=list)
    memops: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    ranges: list = field(default_factory=list)
    corr: int = 0
    scale: float = 1.0  # every simulated duration of the current step is multiplied by it (run and step noise)

    def next_corr(self) -> int:
        """CUPTI correlation ids grow with every traced API call of the process."""
        self.corr += 1
        return self.corr

    def j(self, ns: float, spread: float = 0.08) -> int:
        return max(1, int(ns * self.scale * (1.0 + self.rng.uniform(-spread, spread))))

    def gpu_slot(self, launch_end: int, dur: int, latency: int) -> int:
        start = max(self.gpu + self.j(900, 0.5), launch_end + self.j(latency, 0.3))
        self.gpu = start + dur
        return start

    def eager(self, d: _OpDesc) -> None:
        op_start = self.cpu
        self.cpu += self.j(7_000, 0.4)  # dispatcher / Python overhead before the launch
        ldur = self.j({"cudaLaunchKernel": 4_300, "cudaLaunchKernelExC": 5_600}.get(d.api, 4_000), 0.25)
        lstart = self.cpu
        self.cpu += ldur
        start = self.gpu_slot(self.cpu, d.dur, 3_500)
        self.kernels.append(Kernel(d.name, start, d.dur, pid=PID, tid=MAIN_TID, correlation_id=self.next_corr(),
                                   launch_api=d.api, grid=d.grid, block=d.block, registers_per_thread=d.regs, shared_memory_bytes=d.smem,
                                   launch_start_ns=lstart, launch_dur_ns=ldur))
        self.cpu += self.j(1_500, 0.3)
        self.ranges.append(Range(d.op, op_start, self.cpu, pid=PID, tid=MAIN_TID, kind="cpu_op",
                                 input_dims=d.dims or None, input_types=d.types or None))
        self.cpu += self.j(9_000, 0.6)  # Python between ops

    def graph(self, descs: list[_OpDesc]) -> None:
        corr = self.next_corr()
        lstart = self.cpu + self.j(3_000)
        ldur = self.j(24_000, 0.2)
        self.cpu = lstart + ldur
        t = max(self.gpu + self.j(1_000, 0.5), self.cpu + self.j(7_000, 0.3))
        for i, d in enumerate(descs):
            self.kernels.append(Kernel(d.name, t, d.dur, pid=PID, tid=MAIN_TID, graph=True, correlation_id=corr,
                                       grid=d.grid, block=d.block, registers_per_thread=d.regs,
                                       shared_memory_bytes=d.smem, launch_start_ns=lstart if i == 0 else None,
                                       launch_dur_ns=ldur if i == 0 else None))
            t += d.dur + self.j(1_100, 0.4)
        self.gpu = t
        self.cpu += self.j(6_000, 0.3)

    def copy(self, kind: str, nbytes: int, copy_kind: str, src: str, dst: str, sync: bool) -> None:
        op_start = self.cpu
        self.cpu += self.j(9_000, 0.3)
        ldur = self.j(7_000 if kind == "memcpy" else 3_500, 0.25)
        lstart = self.cpu
        self.cpu += ldur
        bw = 22e9 if copy_kind in ("HtoD", "DtoH") else 1.2e12
        dur = self.j(1_300 + nbytes / bw * 1e9, 0.1)
        start = self.gpu_slot(self.cpu, dur, 2_500)
        self.memops.append(Memop(kind, start, dur, nbytes, copy_kind, src, dst, pid=PID, tid=MAIN_TID,
                                 correlation_id=self.next_corr(), launch_start_ns=lstart, launch_dur_ns=ldur))
        if sync:
            sstart = self.cpu + self.j(1_200)
            send = max(self.gpu, sstart) + self.j(3_500, 0.3)
            self.calls.append(ApiCall("cudaStreamSynchronize", sstart, send - sstart, pid=PID, tid=MAIN_TID,
                                      correlation_id=self.next_corr()))
            self.cpu = send
        self.cpu += self.j(1_000)
        name = "aten::copy_" if kind == "memcpy" else "aten::zero_"
        dims = [[nbytes // 8], [nbytes // 8]] if kind == "memcpy" else [[nbytes // 4]]
        types = ["long int", "long int"] if kind == "memcpy" else ["int"]
        self.ranges.append(Range(name, op_start, self.cpu, pid=PID, tid=MAIN_TID, kind="cpu_op",
                                 input_dims=dims, input_types=types))
        self.cpu += self.j(5_000, 0.5)


def _gemm(sim: _Sim, m: int, n: int, k: int, name: str, layer: int | None = None) -> _OpDesc:
    flops = 2.0 * m * n * k
    nbytes = 2.0 * (m * k + k * n + m * n)
    t = max(flops / (_PEAK_BF16_FLOPS * 0.70), nbytes / (_PEAK_BW * 0.82)) * 1e9 + 2_500
    tile_m, tile_n = (128, 256) if "128x256" in name else ((128, 128) if name.startswith("sm90") else (64, 128))
    grid = (math.ceil(n / tile_n), math.ceil(m / tile_m), 1)
    return _OpDesc(name, sim.j(t, 0.04), grid, (384, 1, 1), 168, 231_424 if name.startswith("sm90") else 197_632,
                   "aten::mm", [[m, k], [k, n]], ["c10::BFloat16", "c10::BFloat16"], _GEMM_LAUNCH[name], layer)


def _elementwise(sim: _Sim, name: str, nbytes: float, rows: int, block: int, regs: int, op: str, dims: list,
                 types: list, layer: int | None = None) -> _OpDesc:
    t = nbytes / (_PEAK_BW * 0.55) * 1e9 + 2_200
    return _OpDesc(name, sim.j(t, 0.06), (max(1, rows), 1, 1), (block, 1, 1), regs, 0, op, dims, types,
                   "cudaLaunchKernel", layer)


def _forward(sim: _Sim, cfg: LlamaConfig, tokens: int, seqs: list[int], decode: bool) -> list[_OpDesc]:
    """Kernels of one model forward (embedding .. final norm) for ``tokens`` new tokens."""
    h, bf = cfg.hidden, "c10::BFloat16"
    qkv_n = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    gemm = K_GEMM_DECODE if decode else K_GEMM_PREFILL
    wide = K_GEMM_DECODE_SPLITK if decode else K_GEMM_PREFILL_WIDE
    out = [_elementwise(sim, K_EMBED, tokens * h * 2 * 2, tokens, 128, 32, "aten::embedding",
                        [[cfg.vocab, h], [tokens]], [bf, "long int"])]
    for layer in range(cfg.num_layers):
        norm = K_RMS if layer == 0 else K_ADD_RMS
        out.append(_elementwise(sim, norm, tokens * h * 2 * 3, tokens, 1024, 32,
                                "_C::rms_norm" if layer == 0 else "_C::fused_add_rms_norm",
                                [[tokens, h], [tokens, h], [h], []], [bf, bf, bf, "Scalar"], layer))
        out.append(_gemm(sim, tokens, qkv_n, h, gemm, layer))
        out.append(_elementwise(sim, K_ROPE, tokens * qkv_n * 2 * 2, tokens, 512, 40, "_C::rotary_embedding",
                                [[tokens], [tokens, cfg.heads * cfg.head_dim], [tokens, cfg.kv_heads * cfg.head_dim]],
                                ["long int", bf, bf], layer))
        out.append(_elementwise(sim, K_CACHE, tokens * cfg.kv_heads * cfg.head_dim * 2 * 4, tokens, 512, 38,
                                "_C_cache_ops::reshape_and_cache_flash",
                                [[tokens, cfg.kv_heads, cfg.head_dim], [tokens, cfg.kv_heads, cfg.head_dim]],
                                [bf, bf], layer))
        kv_bytes = sum(seqs) * cfg.kv_heads * cfg.head_dim * 2 * 2
        if decode:
            splits = 4
            t = kv_bytes / (_PEAK_BW * 0.6) * 1e9 + 4_500
            out.append(_OpDesc(K_SPLITKV, sim.j(t, 0.06), (splits, len(seqs), cfg.heads), (128, 1, 1), 255, 49_152,
                               "_vllm_fa2_C::varlen_fwd", [], [], "cudaLaunchKernel", layer))
            out.append(_OpDesc(K_COMBINE, sim.j(3_100, 0.08), (math.ceil(len(seqs) * cfg.heads / 16), 1, 1),
                               (128, 1, 1), 64, 0, "_vllm_fa2_C::varlen_fwd", [], [], "cudaLaunchKernel", layer))
        else:
            flops = sum(4 * s * s / 2 for s in seqs) * cfg.heads * cfg.head_dim
            t = max(flops / (_PEAK_BF16_FLOPS * 0.45), (tokens * h * 2 * 4) / (_PEAK_BW * 0.7)) * 1e9 + 4_000
            out.append(_OpDesc(K_FLASH, sim.j(t, 0.05), (math.ceil(max(seqs) / 128), len(seqs), cfg.heads),
                               (128, 1, 1), 255, 49_152, "_vllm_fa2_C::varlen_fwd",
                               [[tokens, cfg.heads, cfg.head_dim], [tokens, cfg.kv_heads, cfg.head_dim],
                                [tokens, cfg.kv_heads, cfg.head_dim]], [bf, bf, bf], "cudaLaunchKernel", layer))
        out.append(_gemm(sim, tokens, h, cfg.heads * cfg.head_dim, gemm, layer))
        out.append(_elementwise(sim, K_ADD_RMS, tokens * h * 2 * 3, tokens, 1024, 32, "_C::fused_add_rms_norm",
                                [[tokens, h], [tokens, h], [h], []], [bf, bf, bf, "Scalar"], layer))
        out.append(_gemm(sim, tokens, 2 * cfg.intermediate, h, wide, layer))
        out.append(_elementwise(sim, K_ACT, tokens * cfg.intermediate * 2 * 3, tokens, 1024, 24, "_C::silu_and_mul",
                                [[tokens, cfg.intermediate], [tokens, 2 * cfg.intermediate]], [bf, bf], layer))
        out.append(_gemm(sim, tokens, h, cfg.intermediate, gemm, layer))
    out.append(_elementwise(sim, K_ADD_RMS, tokens * h * 2 * 3, tokens, 1024, 32, "_C::fused_add_rms_norm",
                            [[tokens, h], [tokens, h], [h], []], [bf, bf, bf, "Scalar"]))
    return out


def _sampling(sim: _Sim, cfg: LlamaConfig, batch: int) -> list[_OpDesc]:
    """lm_head on the last token of each sequence, then vLLM's sampler kernels."""
    v = cfg.vocab
    logits = batch * v * 4
    return [
        _gemm(sim, batch, v, cfg.hidden, K_GEMM_DECODE),
        _elementwise(sim, K_DIV, logits * 2, math.ceil(batch * v / 512), 128, 18, "aten::div",
                     [[batch, v], [batch, 1]], ["float", "float"]),
        _elementwise(sim, K_SOFTMAX, logits * 2, batch, 1024, 30, "aten::_softmax",
                     [[batch, v], [], []], ["float", "Scalar", "Scalar"]),
        _elementwise(sim, K_EXPONENTIAL, logits, math.ceil(batch * v / 512), 256, 40, "aten::exponential_",
                     [[batch, v], [], []], ["float", "Scalar", ""]),
        _elementwise(sim, K_DIV, logits * 3, math.ceil(batch * v / 512), 128, 18, "aten::div",
                     [[batch, v], [batch, v]], ["float", "float"]),
        _elementwise(sim, K_ARGMAX, logits, batch, 512, 32, "aten::argmax", [[batch, v], [], []],
                     ["float", "Scalar", "Scalar"]),
    ]


def serving_steps(prefill_batches: tuple[int, ...] = (4, 4), decode_steps: int = 12) -> list[tuple[str, int, int]]:
    """The schedule: (phase, new requests, running requests) per engine step.

    Each prefill admits ``prefill_batches[i]`` requests (a pure prefill step, as vLLM V0's scheduler runs them), then
    ``decode_steps`` decode steps run all admitted requests.
    """
    steps: list[tuple[str, int, int]] = []
    running = 0
    for n in prefill_batches:
        steps.append(("prefill", n, running))
        running += n
        steps += [("decode", 0, running)] * decode_steps
    return steps


def llm_serving_spec(seed: int = 0, cfg: LlamaConfig = LlamaConfig(), prefill_batches: tuple[int, ...] = (4, 4),
                     prompt_len: int = 256, decode_steps: int = 12,
                     step_scales: tuple[float, ...] | None = None) -> TraceSpec:
    """Small vLLM-on-H100 serving capture: eager prefill + CUDA-graph decode steps.

    Deterministic for a given ``seed``.  Steps carry vLLM-style annotations
    ``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)`` (user_annotation, so
    they are also NVTX ranges in nsys); prefill layers carry ``model.layers.<i>``
    NVTX ranges.  Decode forwards are one ``cudaGraphLaunch`` each (graph per
    batch size); lm_head and sampling run eagerly after it.  ``step_scales[i]`` multiplies every host and GPU
    duration of step ``i`` (1.0 when omitted), so a step's wall time scales with it: the noise and changes of
    :func:`serving_runs`.
    """
    rng = random.Random(seed)
    sim = _Sim(rng)
    sim.cpu = sim.gpu = 2_000_000
    ctx_len: list[int] = []
    schedule = serving_steps(prefill_batches, decode_steps)
    for step_no, (phase, new, running) in enumerate(schedule):
        sim.scale = step_scales[step_no] if step_scales else 1.0
        step_start = sim.cpu
        sim.cpu += sim.j(180_000 if phase == "prefill" else 95_000, 0.2)  # scheduler + input prep
        if phase == "prefill":
            seqs = [prompt_len] * new
            tokens = prompt_len * new
            name = f"execute_context_{new}({tokens})_generation_0(0)"
        else:
            seqs = [c + 1 for c in ctx_len]
            tokens = running
            name = f"execute_context_0(0)_generation_{running}({running})"
        py_start = sim.cpu - sim.j(40_000, 0.2)
        sim.copy("memcpy", tokens * 8, "HtoD", "Pinned", "Device", sync=False)  # input ids
        sim.copy("memcpy", tokens * 8, "HtoD", "Pinned", "Device", sync=False)  # positions
        if phase == "prefill":
            sim.copy("memset", 4 * 1024, "", "", "Device", sync=False)  # attention metadata scratch
            layer: int | None = None
            layer_start = 0
            for d in _forward(sim, cfg, tokens, seqs, decode=False):
                if d.layer != layer:  # NVTX range per decoder layer (eager steps only)
                    if layer is not None:
                        sim.ranges.append(Range(f"model.layers.{layer}", layer_start, sim.cpu - 1_000,
                                                pid=PID, tid=MAIN_TID, kind="nvtx"))
                    layer, layer_start = d.layer, sim.cpu
                sim.eager(d)
            ctx_len += seqs
            batch = new
        else:
            sim.graph(_forward(sim, cfg, tokens, seqs, decode=True))
            ctx_len = seqs
            batch = running
        for d in _sampling(sim, cfg, batch):
            sim.eager(d)
        sim.copy("memcpy", batch * 8, "DtoH", "Device", "Pinned", sync=True)  # sampled token ids
        sim.cpu += sim.j(25_000, 0.3)
        sim.ranges.append(Range("vllm/worker/model_runner.py(1652): execute_model", py_start, sim.cpu,
                                pid=PID, tid=MAIN_TID, kind="python_function"))
        sim.cpu += sim.j(30_000, 0.3)  # output processing
        sim.ranges.append(Range(name, step_start, sim.cpu, pid=PID, tid=MAIN_TID, kind="user_annotation"))
        gap = sim.j(350_000, 0.4)
        if step_no + 1 < len(schedule) and schedule[step_no + 1][0] == "prefill":
            gap = sim.j(18_000_000, 0.1)  # engine idle, waiting for new requests
        elif step_no == 5:
            gap = sim.j(6_500_000, 0.1)  # a host-side stall between decode steps
        sim.cpu = max(sim.cpu, sim.gpu) + gap
    sim.ranges.append(Range("vllm/engine/llm_engine.py(1385): step_loop", 1_900_000, sim.cpu + 10_000,
                            pid=PID, tid=MAIN_TID, kind="python_function"))
    return TraceSpec(gpus=(H100_SXM,), kernels=tuple(sim.kernels), memops=tuple(sim.memops),
                     api_calls=tuple(sim.calls), ranges=tuple(sim.ranges),
                     process_names={PID: "VLLM::Worker"}, thread_names={(PID, MAIN_TID): "VLLM::Worker"},
                     hostname="h100-node-03")


def serving_runs(runs: int, *, seed: int = 0, run_noise_pct: float = 1.5, step_noise_pct: float = 2.0,
                 change_pct: dict[str, float] | None = None, prefill_batches: tuple[int, ...] = (4, 4),
                 decode_steps: int = 12) -> list[TraceSpec]:
    """``runs`` repeated captures of one serving workload, as a benchmark run several times would give.

    Step ``i`` of run ``r`` has every duration scaled by ``(1 + run_noise·z_r)(1 + step_noise·z_ri)(1 + change)``
    with ``z`` standard normal: run-to-run noise shared by a run's steps, step-to-step noise, and
    ``change_pct[phase]`` (e.g. ``{"decode": 7.0}``) as the true change a diff should find. Seeds differ per run.
    """
    rng = random.Random(seed)
    phases = [phase for phase, _, _ in serving_steps(prefill_batches, decode_steps)]
    changes = change_pct or {}
    specs = []
    for run in range(runs):
        run_factor = 1.0 + run_noise_pct / 100.0 * rng.gauss(0.0, 1.0)
        scales = tuple(run_factor * (1.0 + step_noise_pct / 100.0 * rng.gauss(0.0, 1.0))
                       * (1.0 + changes.get(phase, 0.0) / 100.0) for phase in phases)
        specs.append(llm_serving_spec(seed=rng.randrange(2**31), prefill_batches=prefill_batches,
                                      decode_steps=decode_steps, step_scales=scales))
    return specs


def llm_serving_truth(spec: TraceSpec) -> dict:
    """Ground truth of a serving spec: kernel totals plus steps by phase."""
    truth = dict(summarize(spec))
    steps = [r for r in spec.ranges if r.kind == "user_annotation" and r.name.startswith("execute_")]
    phases = {"prefill": 0, "decode": 0, "mixed": 0}
    for r in steps:
        ctx = int(r.name.split("_context_")[1].split("(")[0])
        gen = int(r.name.split("_generation_")[1].split("(")[0])
        phases["mixed" if ctx and gen else ("prefill" if ctx else "decode")] += 1
    truth["steps"] = len(steps)
    truth["steps_by_phase"] = phases
    return truth


def main(argv: list[str] | None = None) -> int:
    """Write the two sample files into OUTDIR and print their ground truth."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m traceview.testing.samples OUTDIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    spec = llm_serving_spec()
    nsys = write_nsys(spec, out / "llm_serving.sqlite", version="2026.3")
    kin = write_kineto(spec, out / "llm_serving.pt.trace.json.gz", flavour="modern")
    truth = llm_serving_truth(spec)
    for p in (nsys, kin):
        print(f"{p}  {p.stat().st_size} bytes")
    print(truth)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
