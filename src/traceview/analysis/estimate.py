"""The "on paper" step model: speed-of-light time of one decode or prefill step, no trace needed.

For one forward step of ``batch`` requests on one GPU (a tensor-parallel rank), following
MATH.md §6 ("Whole-step totals for a dense decoder"), §4 (attention) and §1 (roofline):

FLOPs (useful, per GPU)::

    linear    = 2 · T · L·(P_attn + P_mlp_active) / tp      T = tokens in the step
    lm_head   = 2 · T_logits · D · V / tp                   T_logits = batch (one row per request)
    attention = 2 · h_q·(d_qk + d_v) · Σ_layers Σ_i pairs_i / tp
                pairs_i = q_i·c_i − q_i·(q_i − 1)/2 (causal), c_i → min(c_i, W) on sliding layers

Bytes (ideal DRAM traffic, per GPU)::

    weights     = w · P_mat / tp          all layer weights (every expert, by default) + lm_head;
                                          the input embedding is gathered, not streamed
    kv_read     = Σ_i c_i · kv_bytes_per_token / n'      n' = min(tp, h_kv): K/V heads per GPU
                                                         are max(h_kv/tp, 1)
    kv_write    = T · kv_bytes_per_token / n'
    activations ≈ L · T · (10·D + 3·I_tok/tp) · a        (I_tok = I, or k·I_e for an MoE layer)

Time::

    t_step ≥ max(FLOPs / (P_peak(dtype)·u), Bytes / (BW·u))      u = utilization (1 = spec)

A generic model (``params=7e9`` only) streams ``w·params`` bytes and does ``2·params·T``
FLOPs; its KV and attention terms need ``layers``/``hidden`` (see
:func:`~traceview.analysis.models.generic_model`). Tensor-parallel communication, launch
gaps and kernel inefficiency are not modelled: this is a floor.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from traceview.analysis.hardware import HardwareSpec, get_spec
from traceview.analysis.models import ModelConfig, generic_model, load_model
from traceview.units import duration, size

__all__ = [
    "DTYPES",
    "KV_DTYPES",
    "Estimate",
    "estimate",
    "format_estimate_text",
]

# dtype name -> (bytes per weight incl. scales, peak_tflops key of the math, bytes per activation).
# Weight-only int4 (GPTQ/AWQ/Marlin W4A16) computes in fp16/bf16 (MATH.md §1 rule 1, §3.4).
DTYPES: dict[str, tuple[float, str, int]] = {
    "fp32": (4, "fp32", 4),
    "tf32": (4, "tf32", 4),
    "bf16": (2, "bf16", 2),
    "fp16": (2, "fp16", 2),
    "fp8": (1, "fp8", 2),
    "int8": (1, "int8", 2),
    "int4": (0.5 + 2 / 128, "fp16", 2),  # group-128 fp16 scales
    "fp4": (0.5 + 1 / 16, "fp4", 2),  # NVFP4: one fp8 scale per 16
}
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8-e4m3": "fp8", "e4m3": "fp8", "w8a8": "fp8",
    "w4a16": "int4", "awq": "int4", "gptq": "int4", "nvfp4": "fp4",
}
KV_DTYPES: dict[str, float] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8_e5m2": 1,
                               "int8": 1, "int4": 0.5, "fp4": 0.5}
PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class Estimate:
    """Roofline floor of one step on one GPU. Bytes are bytes, times seconds, FLOPs FLOP."""

    model: str
    gpu: str  # spec id
    gpu_name: str
    phase: str
    dtype: str
    kv_dtype: str
    batch: int
    context: int  # per request, including this step's new tokens (c_i, MATH.md §0)
    new_tokens: int  # per request (q_i): 1 for decode, the prompt (chunk) for prefill
    tokens: int  # in the step, T = batch · new_tokens
    tp: int
    utilization: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    activation_bytes: float
    memory_bytes: float
    linear_flops: float
    lm_head_flops: float
    attention_flops: float
    attention_flops_unmasked: float  # what vLLM perf.py / torch flop_counter count (not included)
    flops: float
    peak_flops: float  # FLOP/s used, after utilization
    bandwidth: float  # bytes/s used, after utilization
    memory_time_s: float
    compute_time_s: float
    step_time_floor_s: float
    ridge_flop_per_byte: float
    arithmetic_intensity: float
    bound: str  # "memory" | "compute"
    tokens_per_s: float
    experts_read: float | None  # per MoE layer; None for a dense model
    resident_bytes: float  # weights + this batch's KV cache held on the GPU
    fits_in_memory: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


def estimate(
    model: ModelConfig | str | os.PathLike | int | float | None = None,
    gpu: HardwareSpec | str | None = None,
    dtype: str = "fp16",
    batch: int = 1,
    context: int | None = None,
    phase: str = "decode",
    tp: int = 1,
    prompt_tokens: int | None = None,
    kv_dtype: str | None = None,
    utilization: float = 1.0,
    *,
    experts: str = "all",
    include_activations: bool = True,
    params: float | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
) -> Estimate:
    """Floor time of one step (see the module docstring for the formulas).

    model        a :class:`ModelConfig`, a preset name, a config.json path, or a parameter count
                 (``7e9``, same as ``params=7e9``: a generic dense model, weights only unless
                 ``layers``/``hidden`` [``heads``, ``kv_heads``, ``head_dim``] give the KV and
                 attention shape, see :func:`generic_model`)
    gpu          a :class:`HardwareSpec` or a spec id / device name for ``get_spec``
    dtype        weights and math: fp16, bf16, fp32, tf32, fp8, int8, int4 (W4A16), fp4; the
                 dense peak of that dtype is used (fp16 and bf16 share it)
    batch        requests in the step
    context      per request, tokens in the KV cache after this step (c_i, includes the new
                 tokens). Decode default 1 (weights-only floor); prefill default = prompt_tokens
    phase        "decode" (one new token per request) or "prefill"
    prompt_tokens  prefill: new tokens per request (default = context: a fresh prompt);
                 less than context = a chunk after a cached prefix of context − prompt_tokens
    kv_dtype     KV-cache dtype (fp16/bf16/fp8/int8/fp32); default fp32 for fp32/tf32 models,
                 else 2 bytes (bf16)
    utilization  fraction of spec peak FLOP/s and bandwidth assumed attainable (0 < u ≤ 1)
    experts      MoE weights read per layer: "all" (every expert, the conservative default) or
                 "expected" (E·(1 − (1 − k/E)^T) distinct experts under uniform routing, MATH.md §3.5)
    include_activations  add the activation-traffic term of MATH.md §6
    """
    cfg = _resolve_model(model, params, dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                                             head_dim=head_dim))
    if gpu is None:
        raise ValueError("gpu: give a HardwareSpec or a GPU id such as 'a100-sxm4-80gb'")
    spec = gpu if isinstance(gpu, HardwareSpec) else get_spec(gpu)
    dtype_name = _dtype(dtype)
    w_bytes, peak_key, a_bytes = DTYPES[dtype_name]
    kv_name = _kv_dtype(kv_dtype, dtype_name)
    b_kv = KV_DTYPES[kv_name]
    batch = _int_at_least(batch, 1, "batch")
    tp = _int_at_least(tp, 1, "tp")
    if phase not in PHASES:
        raise ValueError(f"phase: expected one of {', '.join(PHASES)}, got {phase!r}")
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
        raise ValueError(f"utilization: expected 0 < u <= 1, got {utilization!r}")
    if experts not in ("all", "expected"):
        raise ValueError(f"experts: expected 'all' or 'expected', got {experts!r}")

    q, c = _tokens(phase, context, prompt_tokens)
    T = batch * q
    peak = spec.peak_flops(peak_key)
    if peak is None:
        have = ", ".join(sorted(spec.peak_tflops))
        raise ValueError(f"{spec.id} has no {peak_key} peak (it has: {have})")
    bw = spec.hbm_bytes_per_s
    notes: list[str] = []

    # ---- bytes
    n_exp: float | None = None
    if cfg.is_moe:
        E, k = cfg.n_experts, cfg.experts_per_token
        n_exp = float(E) if experts == "all" else E * (1 - (1 - k / E) ** T)
    weight_bytes = w_bytes * cfg.streamed_params(n_exp) / tp

    kv_heads_per_gpu = max(cfg.n_kv_heads / tp, 1.0) if cfg.n_kv_heads else 0.0
    kv_per_token_layer = 2 * kv_heads_per_gpu * cfg.head_dim * b_kv  # one layer, one GPU
    full_layers = cfg.n_layers - cfg.n_sliding_layers
    W = cfg.sliding_window
    keys_read = full_layers * c + (cfg.n_sliding_layers * min(c, q + W - 1) if W else 0)
    kv_read_bytes = batch * keys_read * kv_per_token_layer
    kv_write_bytes = T * cfg.n_layers * kv_per_token_layer

    activation_bytes = 0.0
    if include_activations and cfg.has_architecture:
        mlp_cols = (cfg.n_dense_layers * 3 * cfg.intermediate
                    + cfg.n_moe_layers * 3 * cfg.experts_per_token * cfg.moe_intermediate)
        activation_bytes = T * a_bytes * (cfg.n_layers * 10 * cfg.hidden + mlp_cols / tp)
    memory_bytes = weight_bytes + kv_read_bytes + kv_write_bytes + activation_bytes

    # ---- FLOPs
    if cfg.has_architecture:
        linear_flops = 2 * T * cfg.layer_matmul_params() / tp
        lm_head_flops = 2 * batch * cfg.lm_head_params / tp
    else:
        linear_flops = 2 * T * cfg.n_active_params / tp
        lm_head_flops = 0.0
    pairs = full_layers * _pairs(c, q, None) + (cfg.n_sliding_layers * _pairs(c, q, W) if W else 0)
    unmasked = full_layers * q * c + (cfg.n_sliding_layers * q * min(c, W) if W else 0)
    per_pair = 4 * cfg.n_heads * cfg.head_dim / tp  # 2·h_q·(d_qk + d_v), d_qk = d_v = d
    attention_flops = per_pair * batch * pairs
    attention_unmasked = per_pair * batch * unmasked
    flops = linear_flops + lm_head_flops + attention_flops

    # ---- roofline
    eff_peak, eff_bw = peak * utilization, bw * utilization
    memory_time = memory_bytes / eff_bw
    compute_time = flops / eff_peak
    step = max(memory_time, compute_time)
    ridge = peak / bw
    ai = flops / memory_bytes if memory_bytes else float("inf")
    resident = w_bytes * cfg.n_params / tp + batch * c * cfg.n_layers * kv_per_token_layer
    fits = resident <= spec.memory_bytes

    if not cfg.has_architecture:
        if cfg.n_layers:
            notes.append("generic model: weights = all parameters; KV cache and attention from the given shape")
        else:
            notes.append("generic model: weights only (give layers/hidden for the KV-cache and attention terms)")
    if cfg.is_moe:
        notes.append(f"MoE: FLOPs use {cfg.experts_per_token} of {cfg.n_experts} experts per token; "
                     f"bytes read {n_exp:.2f} experts per layer ({experts})")
    if tp > 1:
        notes.append("tensor-parallel all-reduce time not included")
    if not fits:
        notes.append(f"does not fit: {resident / 1e9:.1f} GB of weights and KV cache per GPU "
                     f"> {spec.memory_bytes / 1e9:.1f} GB")

    return Estimate(
        model=cfg.name, gpu=spec.id, gpu_name=spec.name, phase=phase, dtype=dtype_name, kv_dtype=kv_name,
        batch=batch, context=c, new_tokens=q, tokens=T, tp=tp, utilization=float(utilization),
        weight_bytes=weight_bytes, kv_read_bytes=kv_read_bytes, kv_write_bytes=kv_write_bytes,
        activation_bytes=activation_bytes, memory_bytes=memory_bytes,
        linear_flops=linear_flops, lm_head_flops=lm_head_flops, attention_flops=attention_flops,
        attention_flops_unmasked=attention_unmasked, flops=flops,
        peak_flops=eff_peak, bandwidth=eff_bw, memory_time_s=memory_time, compute_time_s=compute_time,
        step_time_floor_s=step, ridge_flop_per_byte=ridge, arithmetic_intensity=ai,
        bound="memory" if ai < ridge else "compute", tokens_per_s=T / step if step else float("inf"),
        experts_read=n_exp, resident_bytes=resident, fits_in_memory=fits, notes=tuple(notes),
    )


def _resolve_model(model: Any, params: float | None, shape: dict[str, int | None]) -> ModelConfig:
    if params is not None:
        if model is not None:
            raise ValueError("give either model or params, not both")
        model = params
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        return generic_model(model, **shape)
    if any(v is not None for v in shape.values()):
        raise ValueError("layers/hidden/heads/kv_heads/head_dim describe a generic model (params=...) only")
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load_model(model)
    raise ValueError(f"model: expected a ModelConfig, preset name, config.json path or parameter count, got {model!r}")


def _dtype(name: str) -> str:
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"dtype: unknown {name!r} (known: {', '.join(DTYPES)})")
    return key


def _kv_dtype(name: str | None, dtype: str) -> str:
    if name is None or str(name).strip().lower() == "auto":
        if dtype in ("fp32", "tf32"):
            return "fp32"
        return "fp16" if dtype == "fp16" else "bf16"  # quantized weights keep a 16-bit cache
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in KV_DTYPES:
        raise ValueError(f"kv_dtype: unknown {name!r} (known: {', '.join(KV_DTYPES)})")
    return key


def _int_at_least(value: Any, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < low:
        raise ValueError(f"{what}: expected an integer >= {low}, got {value!r}")
    return int(value)


def _tokens(phase: str, context: int | None, prompt_tokens: int | None) -> tuple[int, int]:
    """(new tokens per request q, context per request c) with c including the new tokens."""
    if context is not None:
        context = _int_at_least(context, 1, "context")
    if phase == "decode":
        if prompt_tokens is not None:
            raise ValueError("prompt_tokens is for phase='prefill'")
        return 1, context or 1
    if prompt_tokens is None and context is None:
        raise ValueError("prefill needs prompt_tokens or context")
    q = _int_at_least(prompt_tokens, 1, "prompt_tokens") if prompt_tokens is not None else context
    c = context if context is not None else q
    if c < q:
        raise ValueError(f"context ({c}) must include the prompt_tokens ({q})")
    return q, c


def _pairs(c: int, q: int, window: int | None) -> float:
    """Causal (query, key) pairs for q new tokens at positions c−q+1..c, each seeing ≤ window keys."""

    def upto(n: int) -> float:  # Σ_{pos=1..n} min(pos, window)
        if window is None or n <= window:
            return n * (n + 1) / 2
        return window * (window + 1) / 2 + (n - window) * window

    return upto(c) - upto(c - q)


# ----------------------------------------------------------------------------- text


def format_estimate_text(est: Estimate) -> str:
    """A short human-readable block with units (for ``traceview estimate``)."""
    ctx = (f"context {est.context}" if est.phase == "decode" or est.new_tokens == est.context
           else f"{est.new_tokens} new tokens after {est.context - est.new_tokens} cached")
    tp = f", TP {est.tp} (per GPU)" if est.tp > 1 else ""
    util = f", {est.utilization:.0%} of peak" if est.utilization != 1 else ""
    lines = [
        f"{est.model} on {est.gpu_name}: {est.phase}, {est.dtype} (KV {est.kv_dtype}), "
        f"batch {est.batch}, {ctx}{tp}{util}",
        f"  weights        {size(est.weight_bytes)}",
        f"  KV cache       {size(est.kv_read_bytes)} read, {size(est.kv_write_bytes)} written",
    ]
    if est.activation_bytes:
        lines.append(f"  activations    {size(est.activation_bytes)}")
    attn = f" (attention {_flop(est.attention_flops)})" if est.attention_flops else ""
    lines += [
        f"  memory         {size(est.memory_bytes)} / {est.bandwidth / 1e12:.3g} TB/s = {duration(est.memory_time_s * 1e9)}",
        f"  compute        {_flop(est.flops)}{attn} / {est.peak_flops / 1e12:.4g} TFLOP/s"
        f" = {duration(est.compute_time_s * 1e9)}",
        f"  intensity      {est.arithmetic_intensity:.3g} FLOP/byte vs ridge {est.ridge_flop_per_byte:.3g}"
        f" -> {est.bound}-bound",
        f"  step floor     {duration(est.step_time_floor_s * 1e9)} -> {est.tokens_per_s:,.0f} tokens/s",
    ]
    if not est.fits_in_memory:
        lines.append(f"  memory needed  {size(est.resident_bytes)} per GPU: does not fit")
    lines += [f"  note: {n}" for n in est.notes if not n.startswith("does not fit")]
    return "\n".join(lines)


def _flop(n: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} FLOP"
