"""The "on paper" step model (no trace): model configs, presets, and the standard worked examples."""

from __future__ import annotations

import json
import math

import pytest

from traceview.analysis.estimate import Estimate, estimate, format_estimate_text
from traceview.analysis.hardware import get_spec
from traceview.analysis.models import ModelConfig, generic_model, load_model, preset, preset_names

A100 = get_spec("a100-sxm4-80gb")
H100 = get_spec("h100-sxm")
H200 = get_spec("h200")
GIB = 2**30


def close(value: float, expected: float, tol: float) -> bool:
    return abs(value - expected) <= tol * abs(expected)


# Official config.json files, verbatim.
LLAMA_2_7B = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000,
}
LLAMA_3_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
    "use_cache": True, "vocab_size": 128256,
}
QWEN2_5_7B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False, "vocab_size": 152064,
}
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
}


# ------------------------------------------------------------------ acceptance: worked examples


def test_7b_fp16_decode_floor_on_a100_80gb():
    est = estimate(params=7e9, gpu=A100, dtype="fp16")
    assert est.weight_bytes == 14e9
    assert close(est.step_time_floor_s, 6.9e-3, 0.05)  # 14 GB / 2039 GB/s = 6.87 ms
    assert close(est.ridge_flop_per_byte, 153, 0.05)  # 312 TFLOP/s / 2.039 TB/s
    assert est.bound == "memory"
    assert est.step_time_floor_s == est.memory_time_s


def test_70b_fp16_decode_on_h100_sxm():
    assert close(estimate(70e9, H100).step_time_floor_s, 42e-3, 0.05)  # 140 GB / 3.35 TB/s
    # The real 70B models land in the same place (their lm_head + layers are ~69 B streamed params).
    for name in ("llama-2-70b", "llama-3-70b", "qwen2.5-72b"):
        assert close(estimate(name, H100).step_time_floor_s, 42e-3, 0.05), name


def test_8k_7b_prefill_compute_floor_on_a100():
    est = estimate(params=7e9, gpu=A100, phase="prefill", prompt_tokens=8192)
    assert est.flops == 2 * 7e9 * 8192
    assert close(est.compute_time_s, 0.37, 0.05)  # 2·7e9·8192 / 312e12 = 0.368 s
    assert est.bound == "compute" and est.step_time_floor_s == est.compute_time_s


def test_8k_prefill_with_the_attention_term_of_math_md():
    """With a real architecture MATH.md §6 adds the causal attention FLOPs: +15 % for Llama-2-7B at 8K."""
    est = estimate("llama-2-7b", A100, phase="prefill", context=8192)
    pairs = 8192 * 8193 / 2  # causal: s(s+1)/2 (query, key) pairs
    assert est.attention_flops == 4 * 32 * 128 * pairs * 32  # 2·h_q·(d_qk+d_v)·pairs per layer
    assert close(est.attention_flops_unmasked, 2 * est.attention_flops, 1e-3)
    m = preset("llama-2-7b")
    assert est.linear_flops == 2 * 8192 * m.layer_matmul_params()
    assert est.lm_head_flops == 2 * 1 * 32000 * 4096  # last prompt token only
    assert close(est.compute_time_s, 0.3965, 0.01)
    assert est.compute_time_s > 1.05 * 0.368  # the attention term moves it outside the 2·P·T estimate


def test_llama_2_7b_8k_context_batch_14_on_a100_80gb():
    model = preset("llama-2-7b")
    assert model.kv_bytes_per_token(2) * 8192 == 4 * GIB  # 2 × 32 layers × 32 heads × 128 × 2 B × 8192
    est = estimate(model, A100, dtype="fp16", batch=14, context=8192)
    assert close(est.weight_bytes, 13e9, 0.05)  # "13 GB": 6.61 B streamed params × 2 B
    assert est.kv_read_bytes == 14 * 4 * GIB
    assert est.kv_write_bytes == 14 * model.kv_bytes_per_token(2)
    assert close(est.step_time_floor_s, 34e-3, 0.10)
    assert close(est.tokens_per_s, 410, 0.10)
    assert est.tokens_per_s == 14 / est.step_time_floor_s
    assert est.bound == "memory" and est.fits_in_memory


def test_mixtral_flops_use_active_params_and_bytes_use_all_experts():
    m = preset("mixtral-8x7b")
    assert close(m.n_params, 46.7e9, 0.01) and close(m.n_active_params, 12.9e9, 0.01)
    est = estimate(m, A100, dtype="bf16", batch=1, context=1)
    active_matmul = m.layer_matmul_params() + m.lm_head_params  # 2 of 8 experts
    assert close(est.linear_flops + est.lm_head_flops, 2 * active_matmul, 1e-12)
    assert close(est.flops, 2 * m.n_active_params, 0.02)
    assert est.weight_bytes == 2 * m.streamed_params()  # every expert
    assert close(est.weight_bytes, 2 * m.n_params, 0.01)
    assert est.experts_read == 8
    # MATH.md §3.5: under uniform routing one token touches exactly k experts.
    lean = estimate(m, A100, dtype="bf16", experts="expected")
    assert lean.experts_read == pytest.approx(2)
    assert lean.weight_bytes == pytest.approx(2 * m.streamed_params(2))
    assert lean.flops == est.flops
    big = estimate(m, A100, batch=64, experts="expected")
    assert big.experts_read == pytest.approx(8 * (1 - 0.75**64))


@pytest.mark.parametrize(
    "config, expected, approx",
    [(LLAMA_2_7B, 6_738_415_616, 6.74e9), (LLAMA_3_8B, 8_030_261_248, 8.03e9), (QWEN2_5_7B, 7_615_616_512, 7.6e9)],
    ids=["llama-2-7b", "llama-3-8b", "qwen2.5-7b"],
)
def test_from_hf_config_parameter_counts(config, expected, approx):
    model = ModelConfig.from_hf_config(config)
    assert close(model.n_params, approx, 0.005)
    assert model.n_params == expected  # = transformers' num_parameters()
    assert model.n_active_params == model.n_params


# ------------------------------------------------------------------ MATH.md §6.1 worked examples


def test_math_md_llama_3_8b_table():
    m = preset("llama-3-8b")
    assert m.kv_bytes_per_token() == 131_072
    assert close(m.streamed_params(), 7.50e9, 0.005)
    b1 = estimate(m, H100, dtype="bf16")
    assert close(b1.memory_bytes, 15.0e9, 0.01)
    assert close(b1.step_time_floor_s, 4.48e-3, 0.01)
    assert close(estimate(m, A100, dtype="bf16").step_time_floor_s, 7.36e-3, 0.01)
    assert close(estimate(m, H200, dtype="bf16").step_time_floor_s, 3.13e-3, 0.01)

    b32 = estimate(m, H100, dtype="bf16", batch=32, context=8192)
    assert close(b32.kv_read_bytes, 34.4e9, 0.005)
    assert close(b32.memory_bytes, 49.4e9, 0.02)
    assert close(b32.flops, 0.62e12, 0.03)
    assert close(b32.step_time_floor_s, 14.7e-3, 0.02)
    assert close(b32.arithmetic_intensity, 12.5, 0.05) and b32.bound == "memory"

    b256 = estimate(m, H100, dtype="bf16", batch=256, context=1024)
    assert close(b256.flops, 3.98e12, 0.03)
    assert close(b256.memory_bytes, 49.4e9, 0.05)  # + 1.4 GB of activations (MATH.md §6 term)
    assert b256.bound == "memory"

    pre = estimate(m, H100, dtype="bf16", phase="prefill", prompt_tokens=2048)
    assert close(pre.flops, 29.7e12, 0.01)
    assert close(pre.compute_time_s, 30e-3, 0.01)
    assert pre.bound == "compute"


def test_math_md_llama_3_70b_tp4():
    m = preset("llama-3-70b")
    assert m.kv_bytes_per_token() == 327_680
    est = estimate(m, H100, dtype="bf16", tp=4)
    assert close(est.weight_bytes, 34.8e9, 0.01)
    assert close(est.step_time_floor_s, 10.4e-3, 0.01)
    # 8 KV heads over 4 GPUs: 2 per GPU
    assert est.kv_write_bytes == pytest.approx(327_680 / 4)


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    m = preset("llama-3-70b")  # 8 KV heads
    tp8 = estimate(m, H100, tp=8, context=4096)
    tp16 = estimate(m, H100, tp=16, context=4096)
    assert tp8.kv_read_bytes == pytest.approx(4096 * m.kv_bytes_per_token() / 8)
    assert tp16.kv_read_bytes == tp8.kv_read_bytes  # max(h_kv/tp, 1) heads per GPU
    assert tp16.weight_bytes == pytest.approx(tp8.weight_bytes / 2)


# ------------------------------------------------------------------ model configs and presets


def test_every_preset_loads_with_its_source():
    expected = {  # published sizes (B total, B active)
        "llama-2-7b": 6.74, "llama-2-13b": 13.0, "llama-2-70b": 69.0, "llama-3-8b": 8.03, "llama-3-70b": 70.6,
        "qwen2.5-7b": 7.62, "qwen2.5-14b": 14.7, "qwen2.5-32b": 32.8, "qwen2.5-72b": 72.7, "qwen3-8b": 8.19,
        "qwen3-32b": 32.8, "qwen3-30b-a3b": 30.5, "mixtral-8x7b": 46.7,
    }
    assert set(preset_names()) == set(expected)
    for name, billions in expected.items():
        m = preset(name)
        assert m.source and m.source.startswith("https://huggingface.co/") and m.source.endswith("config.json")
        assert close(m.n_params, billions * 1e9, 0.01), (name, m.n_params)
        assert m.has_architecture
    assert close(preset("qwen3-30b-a3b").n_active_params, 3.3e9, 0.02)
    assert preset("qwen2.5-32b").n_params == 32_763_876_352


def test_qwen3_head_dim_is_read_not_derived():
    m = preset("qwen3-32b")
    assert m.head_dim == 128 and m.n_heads * m.head_dim == 8192 != m.hidden
    assert m.qk_norm and not m.attention_bias
    assert m.kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2


@pytest.mark.parametrize(
    "spelling, name",
    [
        ("Llama-2-7B", "llama-2-7b"), ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"), ("LLAMA-2-70B", "llama-2-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"), ("llama-3.1-8b", "llama-3-8b"),
        ("meta-llama/Llama-3.1-8B", "llama-3-8b"), ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("qwen2.5_72b", "qwen2.5-72b"),
    ],
)
def test_preset_spellings(spelling, name):
    assert load_model(spelling) == preset(name)


def test_unknown_model_lists_presets():
    with pytest.raises(ValueError, match="llama-2-7b.*mixtral-8x7b"):
        load_model("gpt-5")
    with pytest.raises(ValueError, match="no config.json"):
        load_model("/nonexistent/config.json")


def test_load_model_from_a_config_json_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_3_8B))
    by_file = load_model(tmp_path / "config.json")
    by_dir = load_model(str(tmp_path))
    assert by_file.n_params == by_dir.n_params == 8_030_261_248
    assert estimate(tmp_path / "config.json", H100).weight_bytes == estimate("llama-3-8b", H100).weight_bytes


def test_from_hf_config_rejects_what_it_cannot_count():
    with pytest.raises(ValueError, match="missing 'num_hidden_layers'"):
        ModelConfig.from_hf_config({"hidden_size": 4096})
    with pytest.raises(ValueError, match="MLA"):
        ModelConfig.from_hf_config({**LLAMA_3_8B, "kv_lora_rank": 512})


def test_sliding_window_caps_the_kv_read():
    mistral = ModelConfig.from_hf_config(MISTRAL_7B_V01)
    assert mistral.sliding_window == 4096 and mistral.n_sliding_layers == 32
    long = estimate(mistral, H100, batch=1, context=32768)
    short = estimate(mistral, H100, batch=1, context=4096)
    assert long.kv_read_bytes == short.kv_read_bytes == 4096 * mistral.kv_bytes_per_token()
    assert long.attention_flops == short.attention_flops
    # Qwen2.5 configs carry sliding_window but use_sliding_window is false.
    assert ModelConfig.from_hf_config(QWEN2_5_7B).sliding_window is None
    # Prefill with a window: each query sees at most W keys.
    pre = estimate(mistral, H100, phase="prefill", context=8192)
    pairs = 4096 * 4097 / 2 + (8192 - 4096) * 4096
    assert pre.attention_flops == 4 * 32 * 128 * pairs * 32


def test_generic_model_with_a_shape_gets_the_kv_term():
    shaped = estimate(params=7e9, gpu=A100, batch=14, context=8192, layers=32, hidden=4096)
    assert shaped.kv_read_bytes == 14 * 4 * GIB
    assert shaped.weight_bytes == 14e9
    bare = estimate(7e9, A100, batch=14, context=8192)
    assert bare.kv_read_bytes == 0 and bare.attention_flops == 0
    gqa = generic_model(8e9, layers=32, hidden=4096, kv_heads=8)
    assert gqa.kv_bytes_per_token() == 131_072
    with pytest.raises(ValueError):
        estimate("llama-2-7b", A100, layers=32, hidden=4096)


# ------------------------------------------------------------------ the step model itself


def test_chunked_prefill_of_one_token_equals_decode():
    dec = estimate("llama-3-8b", H100, context=1000)
    chunk = estimate("llama-3-8b", H100, phase="prefill", prompt_tokens=1, context=1000)
    assert chunk.flops == dec.flops and chunk.memory_bytes == dec.memory_bytes


def test_prefill_after_a_cached_prefix():
    est = estimate("llama-3-8b", H100, phase="prefill", prompt_tokens=512, context=4096)
    pairs = 512 * 4096 - 512 * 511 / 2  # q·c − q(q−1)/2
    assert est.attention_flops == 4 * 32 * 128 * pairs * 32
    assert est.tokens == 512 and est.tokens_per_s == 512 / est.step_time_floor_s


def test_dtypes_and_utilization():
    fp16 = estimate("llama-3-8b", H100, dtype="fp16")
    bf16 = estimate("llama-3-8b", H100, dtype="bf16")
    assert fp16.step_time_floor_s == bf16.step_time_floor_s
    fp8 = estimate("llama-3-8b", H100, dtype="fp8")
    assert fp8.ridge_flop_per_byte == pytest.approx(2 * bf16.ridge_flop_per_byte, rel=1e-3)
    assert fp8.weight_bytes == pytest.approx(bf16.weight_bytes / 2)
    w4 = estimate("llama-3-8b", A100, dtype="int4")  # W4A16: bf16/fp16 math
    assert w4.ridge_flop_per_byte == pytest.approx(153, rel=0.01)
    kv8 = estimate("llama-3-8b", H100, batch=8, context=4096, kv_dtype="fp8")
    assert kv8.kv_read_bytes == pytest.approx(estimate("llama-3-8b", H100, batch=8, context=4096).kv_read_bytes / 2)
    half = estimate("llama-3-8b", H100, utilization=0.5)
    assert half.step_time_floor_s == pytest.approx(2 * bf16.step_time_floor_s)
    assert half.ridge_flop_per_byte == bf16.ridge_flop_per_byte
    with pytest.raises(ValueError, match="no fp8 peak"):
        estimate("llama-3-8b", A100, dtype="fp8")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"phase": "train"}, "phase"),
        ({"phase": "prefill"}, "prompt_tokens or context"),
        ({"phase": "prefill", "prompt_tokens": 10, "context": 5}, "must include"),
        ({"batch": 0}, "batch"),
        ({"tp": 1.5}, "tp"),
        ({"utilization": 0}, "utilization"),
        ({"dtype": "fp12"}, "dtype"),
        ({"experts": "some"}, "experts"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        estimate("llama-3-8b", H100, **kwargs)


def test_gpu_by_name_and_unknown_gpu():
    assert estimate(7e9, "NVIDIA A100-SXM4-80GB").gpu == "a100-sxm4-80gb"
    with pytest.raises(ValueError, match="unknown GPU"):
        estimate(7e9, "voodoo-5")


def test_memory_fit():
    assert not estimate("llama-2-70b", A100).fits_in_memory
    assert estimate("llama-2-70b", A100, tp=2).fits_in_memory


def test_to_dict_and_text():
    est = estimate("llama-2-7b", A100, batch=14, context=8192)
    d = est.to_dict()
    json.dumps(d)
    assert d["bound"] == "memory" and d["step_time_floor_s"] == est.step_time_floor_s
    assert set(d) == {f for f in Estimate.__dataclass_fields__}
    text = format_estimate_text(est)
    assert "Llama-2-7B" in text and "A100" in text
    assert "36 ms" in text and "389 tokens/s" in text and "memory-bound" in text and "ridge 153" in text
    assert "GB" in text and "TB/s" in text
    moe = format_estimate_text(estimate("mixtral-8x7b", H100, tp=2, phase="prefill", prompt_tokens=100, context=300))
    assert "100 new tokens after 200 cached" in moe and "TP 2" in moe and "experts" in moe
    assert not math.isnan(est.arithmetic_intensity)
