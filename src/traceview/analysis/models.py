"""Transformer model configs for the "on paper" step model: shapes and parameter counts.

A :class:`ModelConfig` comes from a Hugging Face ``config.json`` (:meth:`ModelConfig.from_hf_config`),
from a preset (:func:`preset`, data in ``presets.toml``: the official config.json values with
their source), or, for a model known only by its size, from :func:`generic_model`.

Parameter counts are computed from the architecture (MATH.md §0 notation, §6 totals), for the
Llama-style decoders the supported configs describe (Llama 2/3, Mistral, Mixtral, Qwen2/2.5,
Qwen3, Qwen3-MoE):

* attention per layer: q ``D·h_q·d``, k and v ``D·h_kv·d`` each, o ``h_q·d·D``; plus q/k/v
  biases (Qwen2) and per-head q/k RMSNorm weights (Qwen3);
* gated MLP (SwiGLU: gate, up, down) ``3·D·I``, or for an MoE layer a router ``D·E`` plus
  ``E`` experts of ``3·D·I_e`` (``k`` of them active per token);
* two RMSNorm weight vectors per layer and a final norm;
* input embedding ``V·D`` and lm_head ``D·V`` (counted once when ``tie_word_embeddings``).

These equal Hugging Face's ``num_parameters()`` exactly (Llama-2-7B 6,738,415,616;
Llama-3-8B 8,030,261,248; Qwen2.5-7B 7,615,616,512). ``head_dim`` is read from the config
when present and only otherwise taken as ``hidden_size / num_attention_heads`` (Qwen3-32B:
64 heads × 128 ≠ 5120).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from traceview.compat import tomllib


__all__ = [
    "PRESETS_FILE",
    "ModelConfig",
    "generic_model",
    "load_model",
    "preset",
    "preset_names",
]

PRESETS_FILE = Path(__file__).with_name("presets.toml")

# config.json keys of architectures this module cannot count correctly (MLA, shared experts,
# DeepSeek-style dense-then-MoE stacks): refuse them instead of returning wrong numbers.
_UNSUPPORTED_KEYS = {
    "kv_lora_rank": "multi-head latent attention (MLA)",
    "q_lora_rank": "multi-head latent attention (MLA)",
    "n_shared_experts": "shared experts",
    "shared_expert_intermediate_size": "shared experts",
    "first_k_dense_replace": "dense-then-MoE layer stacks",
}
_QWEN_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a decoder-only transformer, and its parameter counts.

    Fields a generic model (:func:`generic_model`) does not know are 0. ``n_params`` is the
    total; ``n_active_params`` counts only ``experts_per_token`` experts per MoE layer (=
    ``n_params`` for a dense model). Both include the input embedding and the lm_head.
    """

    name: str
    n_params: int
    n_active_params: int
    n_layers: int = 0
    hidden: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    intermediate: int = 0  # dense MLP intermediate size (unused by MoE layers)
    vocab: int = 0
    n_experts: int = 0  # routed experts per MoE layer; 0 = dense
    experts_per_token: int = 0
    moe_intermediate: int = 0  # per-expert intermediate size
    n_moe_layers: int = 0  # layers whose MLP is an MoE block (the others are dense)
    tie_embeddings: bool = False
    attention_bias: bool = False  # q/k/v projections have biases (Qwen2)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    sliding_window: int | None = None
    n_sliding_layers: int = 0  # layers that use sliding_window (the others attend to the full context)
    model_type: str = ""
    source: str | None = None

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | os.PathLike, name: str | None = None,
                       source: str | None = None) -> "ModelConfig":
        """Build from a Hugging Face ``config.json`` (a dict, or the path of the file or its folder)."""
        path: Path | None = None
        if not isinstance(config, Mapping):
            path = Path(config)
            if path.is_dir():
                path = path / "config.json"
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ValueError(f"{path}: no such file") from None
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"{path}: cannot read a config.json: {exc}") from exc
            if not isinstance(config, Mapping):
                raise ValueError(f"{path}: config.json is not a JSON object")
        where = str(path) if path is not None else "config"
        cfg: Mapping[str, Any] = config
        if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), Mapping):
            cfg = cfg["text_config"]  # multimodal wrappers keep the language model here
        for key, what in _UNSUPPORTED_KEYS.items():
            if cfg.get(key):
                raise ValueError(f"{where}: {key}: {what} is not supported by the step model")

        def need(key: str) -> int:
            if key not in cfg or cfg[key] is None:
                raise ValueError(f"{where}: missing {key!r} (expected a Llama-style decoder config.json)")
            return _positive_int(cfg[key], f"{where}: {key}")

        def opt(key: str, default: int | None) -> int | None:
            value = cfg.get(key)
            return default if value is None else _positive_int(value, f"{where}: {key}")

        model_type = str(cfg.get("model_type") or "")
        n_layers = need("num_hidden_layers")
        hidden = need("hidden_size")
        n_heads = need("num_attention_heads")
        n_kv_heads = opt("num_key_value_heads", n_heads)
        head_dim = opt("head_dim", None)
        if head_dim is None:
            if hidden % n_heads:
                raise ValueError(f"{where}: no head_dim, and hidden_size {hidden} is not a multiple of "
                                 f"num_attention_heads {n_heads}")
            head_dim = hidden // n_heads
        vocab = need("vocab_size")
        n_experts = next((opt(key, None) for key in ("num_local_experts", "num_experts", "n_routed_experts")
                          if cfg.get(key)), 0)
        if n_experts:
            k = need("num_experts_per_tok")
            if k > n_experts:
                raise ValueError(f"{where}: num_experts_per_tok {k} > {n_experts} experts")
            # Mixtral's experts use intermediate_size; Qwen-MoE's use moe_intermediate_size.
            moe_intermediate = opt("moe_intermediate_size", None) or need("intermediate_size")
            n_moe_layers = _count_moe_layers(cfg, n_layers)
        else:
            k, moe_intermediate, n_moe_layers = 0, 0, 0
        intermediate = opt("intermediate_size", 0) or 0
        if n_moe_layers < n_layers and not intermediate:
            raise ValueError(f"{where}: missing 'intermediate_size'")
        window, n_sliding = _sliding_window(cfg, model_type, n_layers)

        shape = cls(
            name=name or str(cfg.get("_name_or_path") or (path.parent.name if path is not None else "")
                             or model_type or "model"),
            n_params=0,
            n_active_params=0,
            n_layers=n_layers,
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            intermediate=intermediate,
            vocab=vocab,
            n_experts=n_experts,
            experts_per_token=k,
            moe_intermediate=moe_intermediate,
            n_moe_layers=n_moe_layers,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))),
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
            sliding_window=window,
            n_sliding_layers=n_sliding,
            model_type=model_type,
            source=source if source is not None else (str(path) if path is not None else None),
        )
        return _with_counts(shape)

    # ---------------------------------------------------------------- shape helpers

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.n_moe_layers > 0

    @property
    def has_architecture(self) -> bool:
        """True when the per-layer shapes are known (presets, config.json); False for a generic model."""
        return bool(self.n_layers and self.hidden and self.n_heads and self.head_dim and self.vocab
                    and (self.intermediate or self.n_moe_layers == self.n_layers > 0))

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def attention_matmul_params(self) -> int:
        """q, k, v, o projection weights of one layer (``P_attn``, MATH.md §6)."""
        return self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden

    @property
    def expert_params(self) -> int:
        """One expert's gate, up and down weights."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def layer_matmul_params(self, experts: float | None = None) -> float:
        """Matmul weights of all layers (``L·(P_attn + P_mlp)``) with ``experts`` experts per MoE layer.

        ``experts=None`` counts ``experts_per_token`` (the weights one token multiplies by).
        """
        n_exp = self.experts_per_token if experts is None else experts
        moe = self.hidden * self.n_experts + n_exp * self.expert_params if self.n_moe_layers else 0
        return (self.n_layers * self.attention_matmul_params
                + self.n_dense_layers * 3 * self.hidden * self.intermediate
                + self.n_moe_layers * moe)

    def streamed_params(self, experts: float | None = None) -> float:
        """Weights one forward step reads from DRAM: every layer, the final norm and the lm_head.

        The input-embedding table is gathered (only the rows of the step's tokens), not streamed,
        so it counts only when tied to the lm_head (MATH.md §6 ``P_mat``). ``experts`` = experts
        read per MoE layer (default: all of them). A generic model streams all ``n_params``.
        """
        if not self.has_architecture:
            return float(self.n_params)
        n_exp = self.n_experts if experts is None else experts
        return (self.layer_matmul_params(n_exp) + self.n_layers * self._small_params_per_layer
                + self.hidden + self.lm_head_params)

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV-cache bytes per token over all layers: ``2·L·h_kv·d·b`` (MATH.md §4.4); 0 if unknown."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * dtype_bytes

    @property
    def _small_params_per_layer(self) -> int:
        bias = self.q_dim + 2 * self.kv_dim if self.attention_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return 2 * self.hidden + bias + qk_norm  # two RMSNorm weight vectors per layer

    def summary(self) -> str:
        """One line: name, parameter counts and the shapes that matter for the step model."""
        if not self.has_architecture:
            return f"{self.name}: {self.n_params / 1e9:.2f}B parameters (generic dense model)"
        moe = (f", MoE {self.n_experts} experts top-{self.experts_per_token} "
               f"({self.n_active_params / 1e9:.2f}B active)" if self.is_moe else "")
        return (f"{self.name}: {self.n_params / 1e9:.2f}B parameters{moe}, {self.n_layers} layers, "
                f"hidden {self.hidden}, {self.n_heads} heads / {self.n_kv_heads} KV heads × {self.head_dim}, "
                f"vocab {self.vocab}")


def _with_counts(shape: ModelConfig) -> ModelConfig:
    per_layer_small = shape.n_layers * shape._small_params_per_layer + shape.hidden  # + final norm
    embeddings = shape.lm_head_params * (1 if shape.tie_embeddings else 2)
    total = shape.layer_matmul_params(shape.n_experts) + per_layer_small + embeddings
    active = shape.layer_matmul_params(shape.experts_per_token) + per_layer_small + embeddings
    return replace(shape, n_params=int(total), n_active_params=int(active))


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value <= 0:
        raise ValueError(f"{what}: expected a positive integer, got {value!r}")
    return int(value)


def _count_moe_layers(cfg: Mapping[str, Any], n_layers: int) -> int:
    """Qwen-MoE: layer i is MoE unless listed in mlp_only_layers, and only every decoder_sparse_step-th."""
    step = int(cfg.get("decoder_sparse_step") or 1)
    dense_only = set(cfg.get("mlp_only_layers") or ())
    return sum(1 for i in range(n_layers) if i not in dense_only and (i + 1) % step == 0)


def _sliding_window(cfg: Mapping[str, Any], model_type: str, n_layers: int) -> tuple[int | None, int]:
    window = cfg.get("sliding_window")
    if not window:
        return None, 0
    # Qwen configs carry a sliding_window that is off unless use_sliding_window is true.
    if not cfg.get("use_sliding_window", model_type not in _QWEN_TYPES):
        return None, 0
    window = _positive_int(window, "sliding_window")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        n = sum(1 for t in layer_types if t == "sliding_attention")
    elif model_type in _QWEN_TYPES:  # transformers: sliding iff layer_idx >= max_window_layers
        n = max(0, n_layers - int(cfg.get("max_window_layers", n_layers)))
    else:
        n = n_layers
    return (window, n) if n else (None, 0)


# ----------------------------------------------------------------------------- generic


def generic_model(params: float, layers: int | None = None, hidden: int | None = None,
                  heads: int | None = None, kv_heads: int | None = None, head_dim: int | None = None,
                  name: str | None = None) -> ModelConfig:
    """A dense model known by its parameter count (``params=7e9``) and optionally its attention shape.

    With ``layers`` and ``hidden`` (and optionally ``heads``/``kv_heads``/``head_dim``; default
    MHA with ``head_dim`` 128, or ``hidden/heads``) the step model adds the KV-cache and
    attention terms; without them it models the weights only. Every parameter is treated as a
    matmul weight that is streamed once per step and used by every token (FLOPs = 2·params·T).
    """
    if not (isinstance(params, (int, float)) and not isinstance(params, bool) and params > 0):
        raise ValueError(f"params: expected a positive number, got {params!r}")
    n_layers = n_heads = n_kv = d = 0
    if layers or hidden:
        if not (layers and hidden):
            raise ValueError("generic model: give both layers and hidden (or neither)")
        n_layers = _positive_int(layers, "layers")
        hidden = _positive_int(hidden, "hidden")
        if head_dim:
            d = _positive_int(head_dim, "head_dim")
            n_heads = _positive_int(heads, "heads") if heads else max(1, hidden // d)
        elif heads:
            n_heads = _positive_int(heads, "heads")
            d = hidden // n_heads
        else:
            d = 128
            n_heads = max(1, hidden // d)
        n_kv = _positive_int(kv_heads, "kv_heads") if kv_heads else n_heads
    elif heads or kv_heads or head_dim:
        raise ValueError("generic model: heads/kv_heads/head_dim need layers and hidden")
    return ModelConfig(
        name=name or f"{_fmt_params(params)} dense",
        n_params=int(params),
        n_active_params=int(params),
        n_layers=n_layers,
        hidden=hidden or 0,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=d,
        model_type="generic",
    )


def _fmt_params(params: float) -> str:
    return f"{params / 1e9:g}B" if params >= 1e9 else f"{params / 1e6:g}M"


# ----------------------------------------------------------------------------- presets


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    data = tomllib.loads(PRESETS_FILE.read_text(encoding="utf-8"))
    for key, entry in data.items():
        for field in ("display_name", "source", "config"):
            if field not in entry:
                raise ValueError(f"{PRESETS_FILE.name}: [{key}]: missing {field}")
    return data


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for key, entry in _presets().items():
        for spelling in (key, entry["display_name"], *entry.get("aliases", ())):
            norm = _norm_name(spelling)
            if index.get(norm, key) != key:
                raise ValueError(f"{PRESETS_FILE.name}: {spelling!r} names both {index[norm]} and {key}")
            index[norm] = key
    return index


def _norm_name(name: str) -> str:
    """'meta-llama/Llama-2-7b-chat-hf' -> 'llama27b'; 'Qwen/Qwen2.5-7B-Instruct' -> 'qwen2.57b'."""
    s = name.strip().casefold().rstrip("/").rsplit("/", 1)[-1]
    s = re.sub(r"[\s_]+", "-", s)
    s = re.sub(r"^meta-(?=llama)", "", s)
    while True:
        stripped = re.sub(r"-(hf|instruct|chat|base|v\d+(?:\.\d+)*)$", "", s)
        if stripped == s:
            break
        s = stripped
    return s.replace("-", "")


def preset_names() -> list[str]:
    return sorted(_presets())


def preset(name: str) -> ModelConfig:
    """A preset by name, case-insensitive and tolerant of HF repo spellings ('meta-llama/Llama-2-7b-hf')."""
    key = _preset_index().get(_norm_name(name))
    if key is None:
        raise ValueError(f"unknown model {name!r}; presets: {', '.join(preset_names())} "
                         "(or give the path of a config.json)")
    return _preset(key)


@lru_cache(maxsize=None)
def _preset(key: str) -> ModelConfig:
    entry = _presets()[key]
    return ModelConfig.from_hf_config(entry["config"], name=entry["display_name"], source=entry["source"])


def load_model(name_or_path: str | os.PathLike | ModelConfig) -> ModelConfig:
    """A preset name, or the path of a ``config.json`` (or of the folder holding one)."""
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    path = Path(name_or_path)
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()):
        return ModelConfig.from_hf_config(path)
    text = os.fspath(name_or_path)
    if text.endswith(".json") or path.is_dir():
        raise ValueError(f"{text}: no config.json there")
    return preset(text)
