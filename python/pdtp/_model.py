"""Model shapes: what pdtp needs to know about an LLM, read from a Hugging Face ``config.json``.

A :class:`Model` is a frozen record of the numbers the P/D rules and the performance model use:
layer and head counts (for vLLM's TP rules), KV-cache bytes per token (for memory and transfer),
and parameter counts split into routed-expert and everything-else (for "weights touched" in an
MoE decode step). :meth:`Model.from_hf_config` is the one parser for user configs *and* the
built-in catalog, so both follow the same rules.

Parameter counting (per layer; ``h`` hidden size, ``A``/``H`` query/KV heads, ``d`` head_dim):

- attention ``h·A·d + 2·h·H·d + A·d·h`` (+ qkv/o biases, q/k norms, gpt-oss sinks);
  MLA ``q`` (low-rank when ``q_lora_rank``), ``kv_a``, ``kv_b``, ``o`` projections;
- MLP ``3·h·I`` (gated SwiGLU/GeGLU) or ``2·h·I`` (Falcon, GPT-2, Nemotron relu², ...);
- MoE ``E`` routed experts + shared experts + router; active = top-k routed + shared + router;
- Mamba / linear-attention mixers: their projections (:func:`_mamba_params`,
  :func:`_gated_delta_net_params`);
- two norms per layer, the final norm, the input embedding and the lm_head unless tied.

Not counted (documented approximations): vision/audio towers of multimodal checkpoints and
multi-token-prediction (MTP) layers — vLLM loads neither for text-only serving without
speculative decoding; ``active_params`` includes the embedding and lm_head (published "active"
figures usually leave the input embedding out, e.g. gpt-oss-20b: 4.19B here vs 3.6B published).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from .errors import ConfigError, InvalidArgumentError

__all__ = [
    "KV_DTYPE_BYTES",
    "MLA_MODEL_TYPES",
    "WEIGHT_DTYPE_BYTES",
    "Model",
    "normalize_kv_dtype",
    "normalize_weight_dtype",
]

# Bytes per stored weight. 4-bit formats (mxfp4, nvfp4, awq, gptq) count as 0.5 byte: their
# block scales add 2-6% on top of the quantized tensors, which the runtime reserve absorbs.
WEIGHT_DTYPE_BYTES: Final[Mapping[str, float]] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "int4": 0.5,
}
KV_DTYPE_BYTES: Final[Mapping[str, int]] = {"bf16": 2, "fp16": 2, "fp8": 1}

# vLLM's DeepSeek-MLA family (ModelConfig.is_deepseek_mla): MLA only when the config also sets
# kv_lora_rank (rules.md §4).
MLA_MODEL_TYPES: Final[frozenset[str]] = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_mtp",
        "kimi_k2",
        "kimi_linear",
        "glm_moe_dsa",
        "glm4_moe_lite",
        "longcat_flash",
        "pangu_ultra_moe",
        "pangu_ultra_moe_mtp",
        "mistral_large_3",
    }
)

# Spellings accepted for a weight dtype (user arguments, torch_dtype, quantization methods).
_WEIGHT_DTYPE_ALIASES: Final[Mapping[str, str]] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "torch.float32": "fp32",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
    "w8a8_fp8": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "w8a16": "int8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "int4": "int4",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
    "nf4": "int4",
}
_KV_DTYPE_ALIASES: Final[Mapping[str, str]] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
}

# Model types whose MLP is two matrices (up, down) rather than gated (gate, up, down).
_NON_GATED_MLP_TYPES: Final[frozenset[str]] = frozenset(
    {
        "falcon",
        "RefinedWeb",
        "RefinedWebModel",
        "gpt2",
        "gpt_bigcode",
        "gpt_neox",
        "gptj",
        "opt",
        "bloom",
        "mpt",
        "phi",
        "starcoder2",
        "nemotron",
        "nemotron_h",
        "codegen",
    }
)
# HF config classes whose tie_word_embeddings defaults to True when config.json omits the key
# (transformers writes the key only when it differs from the default).
_TIED_BY_DEFAULT_TYPES: Final[frozenset[str]] = frozenset(
    {
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "cohere",
        "cohere2",
        "falcon",
        "RefinedWeb",
        "RefinedWebModel",
        "gpt2",
        "gpt_bigcode",
        "opt",
        "bloom",
    }
)
# Always have per-head q/k RMSNorm weights (tiny, but cheap to get right).
_QK_NORM_TYPES: Final[frozenset[str]] = frozenset(
    {
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl_text",
        "qwen3_vl_moe_text",
        "gemma3",
        "gemma3_text",
        "olmo2",
        "olmoe",
    }
)
# Always have q/k/v biases even without an ``attention_bias`` key.
_QKV_BIAS_TYPES: Final[frozenset[str]] = frozenset(
    {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"}
)
# Learned absolute position embeddings (vocab-like table of max_position_embeddings rows).
_LEARNED_POSITION_TYPES: Final[frozenset[str]] = frozenset({"gpt2", "gpt_bigcode", "opt"})
# Mamba-1 mixers (in_proj, conv, x_proj, dt_proj); every other SSM family is Mamba-2.
_MAMBA1_TYPES: Final[frozenset[str]] = frozenset({"jamba", "mamba", "falcon_mamba"})
# Sub-configs that hold the language model in multimodal / wrapper checkpoints.
_TEXT_CONFIG_KEYS: Final[tuple[str, ...]] = ("text_config", "llm_config", "language_config")
# Keys a multimodal wrapper keeps at the top level rather than inside text_config.
_TOP_LEVEL_FALLBACK_KEYS: Final[frozenset[str]] = frozenset(
    {
        "tie_word_embeddings",
        "torch_dtype",
        "dtype",
        "quantization_config",
        "compression_config",
        "_name_or_path",
    }
)
# Defaults of HF text-config classes for keys that config.json omits when they equal the
# default (transformers serialises only non-default values inside nested configs).
_TEXT_CLASS_DEFAULTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "gemma3_text": {"vocab_size": 262208, "head_dim": 256, "tie_word_embeddings": True},
}
# layer_types values that are attention with a KV cache (sliding and chunked windows included:
# vLLM allocates them KV blocks like any attention layer).
_ATTENTION_LAYER_TYPES: Final[frozenset[str]] = frozenset(
    {
        "full_attention",
        "sliding_attention",
        "chunked_attention",
        "attention",
        "global",
        "local",
        "global_attention",
        "local_attention",
    }
)
# Nemotron-H hybrid_override_pattern: one character per layer, each layer one block.
_PATTERN_BLOCKS: Final[Mapping[str, tuple[str, str]]] = {
    "M": ("mamba", "none"),
    "*": ("attention", "none"),
    "-": ("none", "dense"),
    "E": ("none", "moe"),
}


# Sanity bounds on config integers: far above any real model (the largest have ~200 layers
# and dimensions below 2^20), low enough that a corrupt file fails with a clear error
# instead of exhausting memory on per-layer lists.
MAX_CONFIG_INT = 1 << 31
MAX_LAYERS = 100_000


def normalize_weight_dtype(value: str, *, argument: str = "weight_dtype") -> str:
    """Map a weight dtype spelling (``"bfloat16"``, ``"mxfp4"``, ``"awq"`` ...) to one of
    :data:`WEIGHT_DTYPE_BYTES`'s keys."""
    if not isinstance(value, str) or value.strip().lower() not in _WEIGHT_DTYPE_ALIASES:
        raise InvalidArgumentError(
            f"{argument} must be one of {sorted(WEIGHT_DTYPE_BYTES)} (or a spelling such as "
            f"'bfloat16', 'mxfp4', 'nvfp4', 'awq', 'gptq'), got {value!r}"
        )
    return _WEIGHT_DTYPE_ALIASES[value.strip().lower()]


def normalize_kv_dtype(value: str, *, argument: str = "kv_dtype") -> str:
    """Map a KV-cache dtype spelling (``"fp8_e4m3"``, ``"bfloat16"`` ...) to one of
    :data:`KV_DTYPE_BYTES`'s keys."""
    if not isinstance(value, str) or value.strip().lower() not in _KV_DTYPE_ALIASES:
        raise InvalidArgumentError(
            f"{argument} must be one of {sorted(KV_DTYPE_BYTES)} (or 'fp8_e4m3', 'bfloat16', "
            f"...), got {value!r}"
        )
    return _KV_DTYPE_ALIASES[value.strip().lower()]


# --------------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------------

_POSITIVE_INT_FIELDS: Final[tuple[str, ...]] = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_attention_layers",
    "total_params",
    "active_params",
)
_NON_NEGATIVE_INT_FIELDS: Final[tuple[str, ...]] = (
    "num_experts",
    "experts_per_token",
    "num_shared_experts",
    "num_dense_layers",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "expert_params",
    "embedding_params",
    "num_sliding_layers",
    "sliding_window",
)
# Values to_dict() adds next to the fields; from_dict() accepts and ignores them.
_DERIVED_KEYS: Final[frozenset[str]] = frozenset(
    {
        "attention_type",
        "kv_bytes_per_token",
        "weight_bytes",
        "active_weight_bytes",
        "dense_params",
        "params_per_expert",
        "num_moe_layers",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """The shape of one LLM as vLLM serves it (language model only, unsharded).

    Build one with :meth:`from_hf_config` or take one from the catalog (``pdtp.model(name)``);
    constructing one directly validates every field and raises :class:`ConfigError` naming it.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    #: H of rules.md: total KV heads as vLLM reads them (for MLA the config's value, unused).
    num_kv_heads: int
    head_dim: int
    #: Dense-MLP width (for all-MoE models, the expert width the config calls intermediate).
    intermediate_size: int
    #: Routed-expert MLP width; None for dense models.
    moe_intermediate_size: int | None = None
    vocab_size: int
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    #: Layers without routed experts (DeepSeek's first_k_dense_replace, Llama-4 interleaving,
    #: hybrid blocks without an MoE); equals num_layers for dense models.
    num_dense_layers: int
    is_mla: bool = False
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    #: Layers that keep a KV cache: fewer than num_layers in Mamba / linear-attention hybrids.
    num_attention_layers: int
    #: Attention layers that see only the last ``sliding_window`` tokens (gpt-oss, Gemma 2/3,
    #: Mistral v0.1 sliding windows; Llama 4 chunked attention): 0 when every layer is global.
    num_sliding_layers: int = 0
    sliding_window: int = 0
    tie_word_embeddings: bool = False
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    total_params: int
    active_params: int
    #: Parameters of all routed experts, all layers (0 for dense models).
    expert_params: int = 0
    #: Input embedding plus lm_head (once when tied): kept 16-bit by quantized checkpoints.
    embedding_params: int = 0
    #: What a quantized weight_dtype covers: "linear" = every linear layer except embeddings and
    #: lm_head (FP8/INT8/AWQ/GPTQ/NVFP4 checkpoints, vLLM online quantization); "experts" = only
    #: routed experts, everything else 16-bit (gpt-oss MXFP4). Ignored for 16/32-bit weights.
    quantized_scope: str = "linear"
    hf_id: str | None = None
    aliases: tuple[str, ...] = field(default=())
    model_type: str = ""

    def __post_init__(self) -> None:
        who = f"Model {self.name!r}" if isinstance(self.name, str) else "Model"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"{who}: field 'name' must be a non-empty string, got {self.name!r}")
        for fname in _POSITIVE_INT_FIELDS:
            _check_int(who, fname, getattr(self, fname), 1)
        for fname in _NON_NEGATIVE_INT_FIELDS:
            _check_int(who, fname, getattr(self, fname), 0)
        if self.moe_intermediate_size is not None:
            _check_int(who, "moe_intermediate_size", self.moe_intermediate_size, 1)
        for fname in ("is_mla", "tie_word_embeddings"):
            if not isinstance(getattr(self, fname), bool):
                raise ConfigError(
                    f"{who}: field {fname!r} must be a bool, got {getattr(self, fname)!r}"
                )
        if self.weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise ConfigError(
                f"{who}: field 'weight_dtype' must be one of {sorted(WEIGHT_DTYPE_BYTES)}, "
                f"got {self.weight_dtype!r}"
            )
        if self.kv_dtype not in KV_DTYPE_BYTES:
            raise ConfigError(
                f"{who}: field 'kv_dtype' must be one of {sorted(KV_DTYPE_BYTES)}, "
                f"got {self.kv_dtype!r}"
            )
        if self.quantized_scope not in ("linear", "experts"):
            raise ConfigError(
                f"{who}: field 'quantized_scope' must be 'linear' or 'experts', "
                f"got {self.quantized_scope!r}"
            )
        if self.hf_id is not None and not isinstance(self.hf_id, str):
            raise ConfigError(f"{who}: field 'hf_id' must be a string or None, got {self.hf_id!r}")
        if not isinstance(self.model_type, str):
            raise ConfigError(f"{who}: field 'model_type' must be a string")
        if isinstance(self.aliases, str) or not all(isinstance(a, str) for a in self.aliases):
            raise ConfigError(f"{who}: field 'aliases' must be a sequence of strings")
        # Accept any sequence (lists come from JSON) but store a tuple so the record stays
        # hashable and immutable.
        object.__setattr__(self, "aliases", tuple(self.aliases))
        self._check_relations(who)

    def _check_relations(self, who: str) -> None:
        if self.num_attention_layers > self.num_layers:
            raise ConfigError(
                f"{who}: field 'num_attention_layers' ({self.num_attention_layers}) exceeds "
                f"num_layers ({self.num_layers})"
            )
        if self.num_sliding_layers > self.num_attention_layers:
            raise ConfigError(
                f"{who}: field 'num_sliding_layers' ({self.num_sliding_layers}) exceeds "
                f"num_attention_layers ({self.num_attention_layers})"
            )
        if bool(self.num_sliding_layers) != bool(self.sliding_window):
            raise ConfigError(
                f"{who}: fields 'num_sliding_layers' and 'sliding_window' must both be 0 or "
                f"both positive, got {self.num_sliding_layers} and {self.sliding_window}"
            )
        if self.num_dense_layers > self.num_layers:
            raise ConfigError(
                f"{who}: field 'num_dense_layers' ({self.num_dense_layers}) exceeds "
                f"num_layers ({self.num_layers})"
            )
        if not self.is_mla and self.num_attention_heads % self.num_kv_heads != 0:
            raise ConfigError(
                f"{who}: field 'num_kv_heads' ({self.num_kv_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.is_mla and self.kv_lora_rank <= 0:
            raise ConfigError(f"{who}: field 'kv_lora_rank' must be positive for an MLA model")
        if self.num_experts == 0:
            if self.experts_per_token != 0 or self.expert_params != 0:
                raise ConfigError(
                    f"{who}: field 'experts_per_token'/'expert_params' must be 0 for a dense "
                    f"model (num_experts=0)"
                )
            if self.num_dense_layers != self.num_layers:
                raise ConfigError(
                    f"{who}: field 'num_dense_layers' must equal num_layers ({self.num_layers}) "
                    f"for a dense model, got {self.num_dense_layers}"
                )
        else:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ConfigError(
                    f"{who}: field 'experts_per_token' must be in [1, num_experts="
                    f"{self.num_experts}], got {self.experts_per_token}"
                )
            if self.num_dense_layers >= self.num_layers:
                raise ConfigError(
                    f"{who}: field 'num_dense_layers' must be below num_layers for an MoE model"
                )
        if self.active_params > self.total_params:
            raise ConfigError(
                f"{who}: field 'active_params' ({self.active_params}) exceeds total_params "
                f"({self.total_params})"
            )
        if self.expert_params + self.embedding_params > self.total_params:
            raise ConfigError(
                f"{who}: fields 'expert_params' + 'embedding_params' exceed total_params"
            )

    # ---- derived numbers -------------------------------------------------------------------

    @property
    def attention_type(self) -> str:
        """``"MLA"``, ``"MHA"`` (H = A), ``"MQA"`` (H = 1) or ``"GQA"``."""
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_attention_heads:
            return "MHA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    @property
    def dense_params(self) -> int:
        """Everything that is not a routed expert: read in full by every forward pass."""
        return self.total_params - self.expert_params

    @property
    def params_per_expert(self) -> int:
        """One expert index across all MoE layers (0 for dense models)."""
        return self.expert_params // self.num_experts if self.num_experts else 0

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        return KV_DTYPE_BYTES[self.kv_dtype]

    @property
    def dense_weight_bytes(self) -> float:
        """Bytes of the non-expert weights.

        Quantized checkpoints keep some tensors 16-bit: embeddings and lm_head always (FP8,
        INT8, AWQ/GPTQ, NVFP4 leave them out), and with ``quantized_scope == "experts"``
        (gpt-oss MXFP4) every non-expert tensor. Norms, routers and biases are counted at the
        quantized width; they are < 0.1% of any model here.
        """
        bpp = self.weight_bytes_per_param
        if bpp >= 2.0:
            return self.dense_params * bpp
        if self.quantized_scope == "experts" and self.num_experts:
            return self.dense_params * 2.0
        return self.embedding_params * 2.0 + (self.dense_params - self.embedding_params) * bpp

    @property
    def bytes_per_expert(self) -> float:
        """Bytes of one expert index across all MoE layers."""
        return self.params_per_expert * self.weight_bytes_per_param

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights vLLM loads (unsharded)."""
        return round(self.dense_weight_bytes + self.expert_params * self.weight_bytes_per_param)

    @property
    def active_weight_bytes(self) -> int:
        """Bytes one token reads: dense weights plus its top-k experts."""
        return round(self.dense_weight_bytes + self.experts_per_token * self.bytes_per_expert)

    def expected_experts_touched(self, batch: int) -> float:
        """Distinct experts per MoE layer that a batch of ``batch`` tokens routes to, with
        uniform independent routing: ``E·(1 − (1 − k/E)^B)``."""
        if not self.num_experts:
            return 0.0
        _check_arg_int("batch", batch, 0)
        e, k = self.num_experts, self.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** batch)

    def weight_bytes_touched(self, batch: int) -> float:
        """Weight bytes a decode step over ``batch`` sequences reads (unsharded)."""
        return self.dense_weight_bytes + self.expected_experts_touched(batch) * (
            self.bytes_per_expert
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token for the whole model, unsharded."""
        if self.is_mla:
            return (
                self.num_attention_layers
                * (self.kv_lora_rank + self.qk_rope_head_dim)
                * self.kv_dtype_bytes
            )
        return (
            2
            * self.num_attention_layers
            * self.num_kv_heads
            * self.head_dim
            * (self.kv_dtype_bytes)
        )

    def kv_bytes_per_token_per_rank(self, tp: int) -> int:
        """KV-cache bytes per token held by one of ``tp`` ranks.

        GQA/MHA shard heads: ``ceil(H/tp)`` per rank, one replicated head when ``tp > H``.
        MLA keeps the whole latent on every rank.
        """
        _check_arg_int("tp", tp, 1)
        if self.is_mla:
            return self.kv_bytes_per_token
        heads = -(-self.num_kv_heads // tp)
        return 2 * self.num_attention_layers * heads * self.head_dim * self.kv_dtype_bytes

    # ---- conversions -----------------------------------------------------------------------

    def with_dtypes(self, *, weight_dtype: str | None = None, kv_dtype: str | None = None) -> Model:
        """The same model served with other weight / KV dtypes (e.g. vLLM ``--quantization fp8``
        or ``--kv-cache-dtype fp8``). A new weight dtype quantizes every linear layer."""
        changes: dict[str, Any] = {}
        if weight_dtype is not None:
            wd = normalize_weight_dtype(weight_dtype)
            if wd != self.weight_dtype:
                changes["weight_dtype"] = wd
                changes["quantized_scope"] = "linear"
        if kv_dtype is not None:
            changes["kv_dtype"] = normalize_kv_dtype(kv_dtype)
        return replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Fields plus the main derived numbers, JSON-ready."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        out["attention_type"] = self.attention_type
        out["kv_bytes_per_token"] = self.kv_bytes_per_token
        out["weight_bytes"] = self.weight_bytes
        out["active_weight_bytes"] = self.active_weight_bytes
        out["dense_params"] = self.dense_params
        out["params_per_expert"] = self.params_per_expert
        out["num_moe_layers"] = self.num_moe_layers
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Model:
        """Inverse of :meth:`to_dict` (derived keys are ignored, unknown keys rejected)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"Model.from_dict expects a mapping, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in data if k not in names and k not in _DERIVED_KEYS)
        if unknown:
            raise ConfigError(f"Model.from_dict: unknown field(s) {unknown}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:  # a required field is missing
            raise ConfigError(f"Model.from_dict: {exc}") from None

    @classmethod
    def from_hf_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any] | bytes,
        *,
        name: str | None = None,
        weight_dtype: str | None = None,
        kv_dtype: str | None = None,
        hf_id: str | None = None,
        aliases: Sequence[str] = (),
    ) -> Model:
        """Read a Hugging Face config: a path to ``config.json``, a model folder, a dict, or JSON
        text. A folder's (or config file's) sibling ``hf_quant_config.json`` (NVIDIA ModelOpt)
        is read too. ``weight_dtype`` / ``kv_dtype`` override what the config implies.

        Raises :class:`ConfigError` naming the file (or ``<dict>``), the field and what was
        expected whenever the config cannot be modelled.
        """
        wd = normalize_weight_dtype(weight_dtype) if weight_dtype is not None else None
        kd = normalize_kv_dtype(kv_dtype) if kv_dtype is not None else None
        data, label, sidecar, default_name = _load_source(source)
        return _parse_config(
            data,
            label,
            sidecar,
            name=name if name is not None else default_name,
            weight_dtype=wd,
            kv_dtype=kd,
            hf_id=hf_id,
            aliases=tuple(aliases),
        )


def _check_int(who: str, fname: str, value: object, minimum: int) -> None:
    # bool is an int subclass; True silently meaning 1 layer would hide a broken config.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{who}: field {fname!r} must be {kind}, got {value!r}")


def _check_arg_int(argument: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{argument} must be an integer >= {minimum}, got {value!r}")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


# A ModelOpt hf_quant_config.json found beside config.json: (contents, path).
_Sidecar = tuple[Mapping[str, Any], str]


def _load_source(
    source: object,
) -> tuple[Mapping[str, Any], str, _Sidecar | None, str | None]:
    """Returns (config object, label for messages, hf_quant_config or None, default name)."""
    if isinstance(source, Mapping):
        return source, "<dict>", None, None
    if isinstance(source, bytes | bytearray):
        try:
            source = bytes(source).decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("<json text>: not valid UTF-8") from None
    if isinstance(source, str) and source.lstrip().startswith(("{", "[")):
        return _parse_json(source, "<json text>"), "<json text>", None, None
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(
            f"<{type(source).__name__}>: expected a path to config.json, a model folder, a dict "
            f"or JSON text, got {type(source).__name__}"
        )
    path = os.fspath(source)
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{path!r}: expected a path to config.json or a model folder")
    if os.path.isdir(path):
        folder = path
        config_path = os.path.join(path, "config.json")
        if not os.path.isfile(config_path):
            raise ConfigError(f"{path}: folder has no config.json")
        default_name = os.path.basename(os.path.normpath(path))
    elif os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        config_path = path
        base = os.path.basename(path)
        if base == "config.json":
            default_name = os.path.basename(os.path.abspath(folder))
        else:
            stem = base.removesuffix(".json")
            default_name = stem.removesuffix("_config").removesuffix("-config") or stem
    else:
        raise ConfigError(f"{path}: no such file or folder (expected config.json or a folder)")
    data = _parse_json(_read_text(config_path), config_path)
    sidecar: _Sidecar | None = None
    quant_path = os.path.join(folder, "hf_quant_config.json")
    if os.path.isfile(quant_path):
        sidecar = (_parse_json(_read_text(quant_path), quant_path), quant_path)
    return data, config_path, sidecar, default_name


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _parse_json(text: str, label: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{label}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"expected a JSON object such as a Hugging Face config.json"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{label}: expected a JSON object at the top level, got {_json_type(data)}"
        )
    return data


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# --------------------------------------------------------------------------------------------
# Typed access with errors that name the file and the field
# --------------------------------------------------------------------------------------------

_MISSING: Final = object()


class _Cfg:
    """One config level (the text config of a multimodal checkpoint, or the whole config)."""

    def __init__(
        self,
        data: Mapping[str, Any],
        label: str,
        prefix: str,
        top: Mapping[str, Any] | None,
    ) -> None:
        self.data = data
        self.label = label
        self.prefix = prefix
        self.top = top  # wrapper level for _TOP_LEVEL_FALLBACK_KEYS, when nested
        self.model_type = ""
        defaults: Mapping[str, Any] = {}
        mt = data.get("model_type")
        if isinstance(mt, str):
            self.model_type = mt
            defaults = _TEXT_CLASS_DEFAULTS.get(mt, {})
        self.defaults = defaults

    def where(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def raw(self, key: str) -> tuple[Any, str] | None:
        """(value, field path) of the first non-null occurrence of ``key``."""
        value = self.data.get(key)
        if value is not None:
            return value, self.where(key)
        for nested in ("attn_config", "ffn_config"):  # DBRX / MPT keep some keys there
            sub = self.data.get(nested)
            if isinstance(sub, Mapping) and sub.get(key) is not None:
                return sub[key], f"{self.prefix}{nested}.{key}"
        if self.top is not None and key in _TOP_LEVEL_FALLBACK_KEYS:
            value = self.top.get(key)
            if value is not None:
                return value, key
        if key in self.defaults:
            return self.defaults[key], self.where(key)
        return None

    def first(self, keys: Sequence[str]) -> tuple[Any, str] | None:
        for key in keys:
            hit = self.raw(key)
            if hit is not None:
                return hit
        return None

    def error(self, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.label}: field '{path}' {message}")

    def missing(self, keys: Sequence[str], what: str) -> ConfigError:
        also = f" (also looked for {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
        return ConfigError(
            f"{self.label}: missing field '{self.where(keys[0])}'{also}; expected {what}"
        )

    def to_int(self, value: Any, path: str, what: str, minimum: int) -> int:
        # A per-layer list whose entries agree (Hunyuan's moe_topk, OpenELM-style head lists)
        # is the same number; differing entries cannot be represented by one field.
        if isinstance(value, list) and value:
            ints = [self.to_int(v, f"{path}[{i}]", what, minimum) for i, v in enumerate(value)]
            if len(set(ints)) != 1:
                raise self.error(
                    path,
                    f"varies per layer ({sorted(set(ints))}); pdtp models one {what} "
                    f"for all layers",
                )
            return ints[0]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(
                path, f"must be an integer ({what}), got {_json_type(value)} {value!r}"
            )
        if value < minimum:
            kind = "positive" if minimum == 1 else f">= {minimum}"
            raise self.error(path, f"must be {kind} ({what}), got {value}")
        if value > MAX_CONFIG_INT:
            # No real dimension comes near this; a corrupt value must not reach arithmetic
            # (or a per-layer list) as an int of any size.
            raise self.error(path, f"must be at most {MAX_CONFIG_INT} ({what}), got {value}")
        return value

    def req_int(self, keys: Sequence[str], what: str, *, minimum: int = 1) -> int:
        hit = self.first(keys)
        if hit is None:
            raise self.missing(keys, f"{what} as a positive integer")
        return self.to_int(hit[0], hit[1], what, minimum)

    def opt_int(self, keys: Sequence[str], what: str, *, minimum: int = 0) -> int | None:
        hit = self.first(keys)
        return None if hit is None else self.to_int(hit[0], hit[1], what, minimum)

    def int_or(self, keys: Sequence[str], what: str, default: int, *, minimum: int = 0) -> int:
        value = self.opt_int(keys, what, minimum=minimum)
        return default if value is None else value

    def flag(self, key: str, default: bool) -> bool:
        hit = self.raw(key)
        if hit is None:
            return default
        if not isinstance(hit[0], bool):
            raise self.error(hit[1], f"must be true or false, got {_json_type(hit[0])}")
        return hit[0]

    def number(self, key: str, what: str) -> float | None:
        hit = self.raw(key)
        if hit is None:
            return None
        if isinstance(hit[0], bool) or not isinstance(hit[0], int | float) or hit[0] <= 0:
            raise self.error(hit[1], f"must be a positive number ({what}), got {hit[0]!r}")
        return float(hit[0])

    def text(self, key: str) -> str | None:
        hit = self.raw(key)
        if hit is None:
            return None
        if not isinstance(hit[0], str):
            raise self.error(hit[1], f"must be a string, got {_json_type(hit[0])}")
        return hit[0]

    def seq(self, key: str) -> list[Any] | None:
        hit = self.raw(key)
        if hit is None:
            return None
        if not isinstance(hit[0], list):
            raise self.error(hit[1], f"must be a list, got {_json_type(hit[0])}")
        return hit[0]

    def obj(self, key: str) -> Mapping[str, Any] | None:
        hit = self.raw(key)
        if hit is None:
            return None
        if not isinstance(hit[0], Mapping):
            raise self.error(hit[1], f"must be an object, got {_json_type(hit[0])}")
        return hit[0]


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Layer:
    mixer: str  # "attention" | "mamba" | "linear_attention" | "linear" | "none"
    ffn: str  # "mlp" (dense or MoE, decided by the MoE rules) | "dense" | "moe" | "linear" | "none"
    kv_heads: int | None = None  # per-layer override (DeciLM block_configs)
    intermediate: int | None = None  # per-layer dense width override (DeciLM)
    also_mamba: bool = False  # Falcon-H1: attention and Mamba side by side in every layer


def _parse_config(
    data: Mapping[str, Any],
    label: str,
    sidecar: _Sidecar | None,
    *,
    name: str | None,
    weight_dtype: str | None,
    kv_dtype: str | None,
    hf_id: str | None,
    aliases: tuple[str, ...],
) -> Model:
    cfg = _text_config(data, label)
    top_type = data.get("model_type") if isinstance(data.get("model_type"), str) else ""
    model_type = cfg.model_type or str(top_type)
    types = {model_type, str(top_type)}

    hidden = cfg.req_int(("hidden_size", "d_model", "n_embd", "model_dim"), "the hidden size")
    heads = cfg.req_int(
        ("num_attention_heads", "n_head", "n_heads", "num_heads"), "the number of attention heads"
    )
    vocab = cfg.req_int(("vocab_size", "padded_vocab_size", "n_vocab"), "the vocabulary size")
    layers = _layer_plan(cfg, heads)
    num_layers = len(layers)

    is_mla = bool(types & MLA_MODEL_TYPES) and cfg.raw("kv_lora_rank") is not None
    kv_heads = _kv_heads(cfg, heads, types)
    if not is_mla and heads % kv_heads != 0:
        hit = cfg.first(_KV_HEAD_KEYS)
        raise cfg.error(
            hit[1] if hit else cfg.where("num_key_value_heads"),
            f"({kv_heads}) must divide num_attention_heads ({heads})",
        )
    for layer in layers:
        if layer.kv_heads is not None and heads % layer.kv_heads != 0:
            raise cfg.error(
                cfg.where("block_configs"),
                f"gives {layer.kv_heads} KV heads, which does not divide {heads} heads",
            )

    shapes = _Shapes(cfg, hidden, heads, kv_heads, model_type, types)
    head_dim = shapes.head_dim
    kv_lora_rank = qk_rope = 0
    if shapes.mla is not None:
        kv_lora_rank, qk_rope = shapes.mla.kv_lora_rank, shapes.mla.qk_rope_head_dim
        if is_mla:
            head_dim = shapes.mla.qk_nope_head_dim + qk_rope

    moe = _MoE.read(cfg, hidden, model_type, shapes.gated)
    _assign_moe_layers(cfg, layers, moe)
    counts = _count_params(cfg, layers, shapes, moe, hidden, vocab, model_type)

    num_attention_layers = sum(1 for layer in layers if layer.mixer == "attention")
    if num_attention_layers == 0:
        raise ConfigError(
            f"{label}: no attention layer (every layer is Mamba/linear/no-op); pdtp plans "
            f"KV-cache transfer between prefill and decode, which needs attention layers"
        )
    # A single H must describe every attention layer (DeciLM may vary it per layer).
    layer_heads = {layer.kv_heads for layer in layers if layer.mixer == "attention"}
    layer_heads.discard(None)
    if layer_heads:
        if len(layer_heads) > 1:
            raise cfg.error(
                cfg.where("block_configs"),
                f"varies the KV heads per attention layer ({sorted(h for h in layer_heads if h)}); "
                f"pdtp models one KV-head count for all layers",
            )
        kv_heads = next(h for h in layer_heads if h is not None)

    sliding_window, num_sliding = _sliding_layers(cfg, model_type, num_layers)
    num_sliding = min(num_sliding, num_attention_layers)
    if not num_sliding:
        sliding_window = 0

    num_moe_layers = sum(1 for layer in layers if layer.ffn == "moe")
    dense_width = shapes.dense_intermediate
    widths = [layer.intermediate for layer in layers if layer.intermediate]
    if widths:
        dense_width = max(widths)
    if dense_width is None:
        dense_width = moe.intermediate if moe.num_experts else None
    if dense_width is None:
        raise cfg.missing(("intermediate_size", "ffn_hidden_size", "n_inner"), "the MLP width")

    try:
        wdt, scope, kv_from_quant = _quantization(cfg, sidecar)
    except ConfigError:
        if weight_dtype is None:
            raise
        # The caller says how the weights are stored; an unsizeable scheme does not matter.
        wdt, scope, kv_from_quant = None, "linear", None
    act = _activation_dtype(cfg)
    final_wd = weight_dtype or wdt or act
    if weight_dtype is not None and weight_dtype != wdt:
        scope = "linear"
    if scope == "experts" and not num_moe_layers:
        scope = "linear"
    final_kv = kv_dtype or kv_from_quant or ("fp16" if act == "fp16" else "bf16")

    has_moe = num_moe_layers > 0
    resolved_hf_id = hf_id if hf_id is not None else _hf_id_from(cfg)
    try:
        return Model(
            name=name or resolved_hf_id or model_type or "model",
            num_layers=num_layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=dense_width,
            moe_intermediate_size=moe.intermediate if has_moe else None,
            vocab_size=vocab,
            num_experts=moe.num_experts if has_moe else 0,
            experts_per_token=moe.top_k if has_moe else 0,
            num_shared_experts=moe.num_shared if has_moe else 0,
            num_dense_layers=num_layers - num_moe_layers,
            is_mla=is_mla,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=qk_rope,
            num_attention_layers=num_attention_layers,
            num_sliding_layers=num_sliding,
            sliding_window=sliding_window,
            tie_word_embeddings=shapes.tied,
            weight_dtype=final_wd,
            kv_dtype=final_kv,
            total_params=counts.total,
            active_params=counts.active,
            expert_params=counts.experts,
            embedding_params=counts.embedding,
            quantized_scope=scope,
            hf_id=resolved_hf_id,
            aliases=aliases,
            model_type=model_type,
        )
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


# layer_types values of attention layers limited to a window (or chunk) of recent tokens.
_WINDOWED_LAYER_TYPES: Final[frozenset[str]] = frozenset(
    {"sliding_attention", "chunked_attention", "local", "local_attention"}
)
# Models that interleave sliding-window and global layers without a layer_types list:
# (first window layer's period rule, the config class's default window).
_INTERLEAVED_WINDOWS: Final[Mapping[str, tuple[str, int]]] = {
    "gemma2": ("alternate", 4096),
    "gemma3_text": ("pattern", 4096),
}


def _sliding_layers(cfg: _Cfg, model_type: str, num_layers: int) -> tuple[int, int]:
    """(window tokens, layers limited to it) as vLLM runs the model: a ``layer_types`` list
    names them; Gemma 2 alternates (even layers local), Gemma 3 makes every
    ``sliding_window_pattern``-th layer global; otherwise a ``sliding_window`` applies to all
    layers unless ``use_sliding_window`` is false (Qwen2/3 carry a window they do not use)."""
    window = cfg.opt_int(
        ("sliding_window", "attention_chunk_size"), "the sliding window", minimum=1
    )
    kinds = cfg.seq("layer_types")
    if kinds is not None and len(kinds) == num_layers:
        count = sum(1 for k in kinds if isinstance(k, str) and k in _WINDOWED_LAYER_TYPES)
        return (window or 0, count) if count and window else (0, 0)
    rule = _INTERLEAVED_WINDOWS.get(model_type)
    if rule is not None:
        kind, default = rule
        w = window or default
        if kind == "alternate":
            return w, (num_layers + 1) // 2
        pattern = cfg.int_or(
            ("sliding_window_pattern",), "the sliding window pattern", 6, minimum=1
        )
        return w, sum(1 for i in range(num_layers) if (i + 1) % pattern != 0)
    if window and cfg.flag("use_sliding_window", True):
        return window, num_layers
    return 0, 0


def _text_config(data: Mapping[str, Any], label: str) -> _Cfg:
    for key in _TEXT_CONFIG_KEYS:
        sub = data.get(key)
        if sub is None:
            continue
        if not isinstance(sub, Mapping):
            raise ConfigError(f"{label}: field '{key}' must be an object, got {_json_type(sub)}")
        return _Cfg(sub, label, f"{key}.", data)
    return _Cfg(data, label, "", None)


def _hf_id_from(cfg: _Cfg) -> str | None:
    hit = cfg.raw("_name_or_path")
    if hit is None or not isinstance(hit[0], str):
        return None
    value: str = hit[0]
    # Only an "org/name" id is worth keeping; local paths say nothing about the model.
    if value.count("/") == 1 and not value.startswith((".", "/", "~")):
        return value
    return None


_KV_HEAD_KEYS: Final[tuple[str, ...]] = (
    "n_head_kv",
    "num_kv_heads",
    "num_key_value_heads",
    "multi_query_group_num",
    "num_attention_groups",
)


def _kv_heads(cfg: _Cfg, heads: int, types: set[str]) -> int:
    """H per rules.md §4 (vLLM ModelConfig.get_total_num_kv_heads)."""
    falcon_new = bool(types & {"falcon", "RefinedWeb", "RefinedWebModel"}) and cfg.flag(
        "new_decoder_architecture", False
    )
    # Old-style Falcon and GPT-BigCode flag true MQA with multi_query; vLLM checks it first.
    if not falcon_new and cfg.flag("multi_query", False):
        return 1
    hit = cfg.first((*_KV_HEAD_KEYS, "kv_n_heads"))
    if hit is None:
        return heads
    return cfg.to_int(hit[0], hit[1], "the number of KV heads", 1)


@dataclass(slots=True)
class _MLA:
    kv_lora_rank: int
    q_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class _Shapes:
    """Attention / MLP shape facts shared by all layers."""

    def __init__(
        self, cfg: _Cfg, hidden: int, heads: int, kv_heads: int, model_type: str, types: set[str]
    ) -> None:
        self.hidden, self.heads, self.kv_heads = hidden, heads, kv_heads
        head_dim = cfg.opt_int(
            ("head_dim", "attention_head_dim", "kv_channels"), "head_dim", minimum=1
        )
        if head_dim is None:
            if hidden % heads:
                raise cfg.error(
                    cfg.where("num_attention_heads"),
                    f"({heads}) does not divide hidden_size ({hidden}) and there is no "
                    f"head_dim field; expected head_dim or heads dividing hidden_size",
                )
            head_dim = hidden // heads
        self.head_dim = head_dim
        self.mla: _MLA | None = None
        if cfg.raw("kv_lora_rank") is not None:
            self.mla = _MLA(
                kv_lora_rank=cfg.req_int(("kv_lora_rank",), "the MLA latent rank"),
                q_lora_rank=cfg.int_or(("q_lora_rank",), "the MLA query rank", 0),
                qk_nope_head_dim=cfg.int_or(("qk_nope_head_dim",), "qk_nope_head_dim", 128),
                qk_rope_head_dim=cfg.req_int(("qk_rope_head_dim",), "the MLA rope head size"),
                v_head_dim=cfg.int_or(("v_head_dim",), "v_head_dim", 128, minimum=1),
            )
        act = cfg.text("mlp_hidden_act")
        self.gated = not (types & _NON_GATED_MLP_TYPES) and act not in ("relu2", "relu")
        self.attention_bias = cfg.flag("attention_bias", False)
        self.qkv_bias = self.attention_bias or bool(types & _QKV_BIAS_TYPES)
        self.qk_norm = cfg.flag("use_qk_norm", False) or bool(types & _QK_NORM_TYPES)
        self.full_qk_norm = bool(types & {"olmo2", "olmoe"})
        self.output_gate = cfg.flag("attn_output_gate", model_type == "qwen3_next")
        self.sinks = model_type == "gpt_oss"
        self.tied = cfg.flag("tie_word_embeddings", bool(types & _TIED_BY_DEFAULT_TYPES))
        self.learned_positions = bool(types & _LEARNED_POSITION_TYPES)
        self.dense_intermediate = self._dense_intermediate(cfg, hidden, types)

    @staticmethod
    def _dense_intermediate(cfg: _Cfg, hidden: int, types: set[str]) -> int | None:
        if types & {"llama4", "llama4_text"}:
            # Llama-4: intermediate_size is the expert width; dense layers use the _mlp one.
            return cfg.opt_int(
                ("intermediate_size_mlp", "intermediate_size"), "the MLP width", minimum=1
            )
        width = cfg.opt_int(
            ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim"),
            "the MLP width",
            minimum=1,
        )
        if width is not None:
            return width
        ratio = cfg.number("expansion_ratio", "the MLP expansion ratio")  # MPT
        if ratio is not None:
            return round(ratio * hidden)
        if types & _NON_GATED_MLP_TYPES:
            return 4 * hidden  # Falcon / GPT-2 default: 4h
        return None

    def attention_params(self, kv_heads: int) -> int:
        h, a, d = self.hidden, self.heads, self.head_dim
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk
            else:
                q = h * a * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + a * m.v_head_dim * h
        q = h * a * d * (2 if self.output_gate else 1)
        n = q + 2 * h * kv_heads * d + a * d * h
        if self.qkv_bias:
            n += (a + 2 * kv_heads) * d
        if self.attention_bias:
            n += h  # o_proj bias
        if self.qk_norm:
            # OLMo-2 / OLMoE normalise the whole q and k projections; the others per head.
            n += (a + kv_heads) * d if self.full_qk_norm else 2 * d
        if self.sinks:
            n += a
        return n

    def mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width


@dataclass(slots=True)
class _MoE:
    num_experts: int
    top_k: int
    intermediate: int
    per_expert: int  # parameters of one routed expert in one layer
    shared: int  # parameters of the shared expert(s) in one MoE layer
    num_shared: int
    router: int
    latent: int  # Nemotron-3 latent projections per MoE layer (dense, always active)

    @classmethod
    def read(cls, cfg: _Cfg, hidden: int, model_type: str, gated: bool) -> _MoE:
        experts = cfg.opt_int(
            ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
            "the number of routed experts",
        )
        if experts is None or experts <= 1:  # Jamba uses num_experts=1 for "no MoE"
            return cls(0, 0, 0, 0, 0, 0, 0, 0)
        top_k = cfg.opt_int(
            (
                "num_experts_per_tok",
                "experts_per_token",
                "num_experts_per_token",
                "moe_topk",
                "top_k",
                "moe_top_k",
            ),
            "the experts per token",
            minimum=1,
        )
        if top_k is None:
            raise cfg.missing(
                ("num_experts_per_tok", "experts_per_token", "moe_topk"),
                "the routed experts per token for an MoE model",
            )
        if top_k > experts:
            hit = cfg.first(
                (
                    "num_experts_per_tok",
                    "experts_per_token",
                    "num_experts_per_token",
                    "moe_topk",
                    "top_k",
                    "moe_top_k",
                )
            )
            raise cfg.error(
                hit[1] if hit else "num_experts_per_tok",
                f"({top_k}) exceeds the number of experts ({experts})",
            )
        width = cfg.opt_int(
            ("moe_intermediate_size", "intermediate_size", "ffn_hidden_size"),
            "the expert MLP width",
            minimum=1,
        )
        if width is None:
            raise cfg.missing(
                ("moe_intermediate_size", "intermediate_size"), "the expert MLP width"
            )
        latent_size = cfg.opt_int(("moe_latent_size",), "the MoE latent size", minimum=1)
        inner = latent_size or hidden
        per_expert = (3 if gated else 2) * inner * width
        if model_type == "gpt_oss":
            per_expert += 2 * width + hidden  # gate_up and down biases
        latent = 2 * hidden * latent_size if latent_size else 0
        router = hidden * experts + (experts if model_type == "gpt_oss" else 0)
        mlp_factor = 3 if gated else 2
        shared_width = cfg.opt_int(
            ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"),
            "the shared expert width",
        )
        n_shared = cfg.opt_int(
            (
                "n_shared_experts",
                "num_shared_experts",
                "num_shared_expert",
                "moe_num_shared_experts",
            ),
            "the number of shared experts",
        )
        shared, num_shared = 0, 0
        if shared_width:
            num_shared = n_shared or 1
            shared = mlp_factor * hidden * shared_width
            if model_type in ("qwen2_moe", "qwen3_next"):
                shared += hidden  # shared_expert_gate
        elif n_shared:
            num_shared = n_shared
            shared = n_shared * mlp_factor * hidden * width
        elif model_type in ("llama4", "llama4_text"):
            num_shared = 1  # every Llama-4 MoE layer has one shared expert of expert width
            shared = mlp_factor * hidden * width
        return cls(experts, top_k, width, per_expert, shared, num_shared, router, latent)


def _layer_plan(cfg: _Cfg, heads: int) -> list[_Layer]:
    """Per-layer mixer and FFN kinds from whichever hybrid description the config uses."""
    layer_keys = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    pattern_hit = cfg.raw("hybrid_override_pattern")
    if pattern_hit is not None:
        pattern, path = pattern_hit
        if not isinstance(pattern, str) or not pattern:
            raise cfg.error(path, "must be a non-empty string such as 'M-M*-'")
        plan = []
        for i, ch in enumerate(pattern):
            if ch not in _PATTERN_BLOCKS:
                raise cfg.error(
                    path,
                    f"has unknown block {ch!r} at layer {i}; expected one of "
                    f"'M' (Mamba), '*' (attention), '-' (MLP), 'E' (MoE)",
                )
            mixer, ffn = _PATTERN_BLOCKS[ch]
            plan.append(_Layer(mixer, ffn))
        _check_layer_count(cfg, layer_keys, len(plan), path)
        return plan

    block_configs = cfg.seq("block_configs")
    if block_configs is not None:
        plan = [_deci_layer(cfg, i, b, heads) for i, b in enumerate(block_configs)]
        if not plan:
            raise cfg.error(cfg.where("block_configs"), "is empty; expected one entry per layer")
        _check_layer_count(cfg, layer_keys, len(plan), cfg.where("block_configs"))
        return plan

    if cfg.obj("linear_attn_config") is not None:
        raise cfg.error(
            cfg.where("linear_attn_config"), "(Kimi-Linear KDA hybrid) is not supported by pdtp yet"
        )

    num_layers = cfg.req_int(layer_keys, "the number of layers")
    if num_layers > MAX_LAYERS:
        hit = cfg.first(layer_keys)
        where = hit[1] if hit else cfg.where(layer_keys[0])
        raise cfg.error(where, f"must be at most {MAX_LAYERS} layers, got {num_layers}")
    if cfg.model_type == "falcon_h1":
        return [_Layer("attention", "mlp", also_mamba=True) for _ in range(num_layers)]

    for key in ("layers_block_type", "layer_types"):
        kinds = cfg.seq(key)
        if kinds is None:
            continue
        if len(kinds) != num_layers:
            raise cfg.error(
                cfg.where(key),
                f"has {len(kinds)} entries; expected one per layer "
                f"(num_hidden_layers = {num_layers})",
            )
        single_block = any(k in ("mlp", "moe") for k in kinds)
        return [_typed_layer(cfg, key, i, k, single_block) for i, k in enumerate(kinds)]

    interval = cfg.opt_int(("full_attention_interval",), "the full-attention interval", minimum=1)
    if interval is not None:
        return [
            _Layer("attention" if (i + 1) % interval == 0 else "linear_attention", "mlp")
            for i in range(num_layers)
        ]
    period = cfg.opt_int(("attn_layer_period",), "the attention layer period", minimum=1)
    if period is not None:
        offset = cfg.int_or(("attn_layer_offset",), "the attention layer offset", 0)
        return [
            _Layer("attention" if i % period == offset else "mamba", "mlp")
            for i in range(num_layers)
        ]
    indices = cfg.seq("attn_layer_indices")
    if indices is not None:
        wanted = {
            cfg.to_int(v, cfg.where(f"attn_layer_indices[{i}]"), "a layer index", 0)
            for i, v in enumerate(indices)
        }
        return [_Layer("attention" if i in wanted else "mamba", "mlp") for i in range(num_layers)]
    return [_Layer("attention", "mlp") for _ in range(num_layers)]


def _check_layer_count(cfg: _Cfg, keys: Sequence[str], count: int, path: str) -> None:
    declared = cfg.opt_int(keys, "the number of layers", minimum=1)
    if declared is not None and declared != count:
        raise cfg.error(path, f"describes {count} layers but num_hidden_layers is {declared}")


def _typed_layer(cfg: _Cfg, key: str, i: int, kind: object, single_block: bool) -> _Layer:
    path = cfg.where(f"{key}[{i}]")
    if not isinstance(kind, str):
        raise cfg.error(path, f"must be a string, got {_json_type(kind)}")
    if kind in _ATTENTION_LAYER_TYPES:
        return _Layer("attention", "none" if single_block else "mlp")
    if kind == "linear_attention":
        return _Layer("linear_attention", "mlp")
    if kind == "mamba":
        return _Layer("mamba", "none" if single_block else "mlp")
    if single_block and kind in ("mlp", "moe"):
        return _Layer("none", "dense" if kind == "mlp" else "moe")
    raise cfg.error(
        path,
        f"is {kind!r}; expected one of 'full_attention', "
        f"'sliding_attention', 'linear_attention', 'attention', 'mamba', "
        f"'mlp', 'moe'",
    )


def _deci_layer(cfg: _Cfg, i: int, block: object, heads: int) -> _Layer:
    """One DeciLM / Nemotron-NAS block: attention may be a no-op or a single linear layer, and
    the FFN width is set per block."""
    path = cfg.where(f"block_configs[{i}]")
    if not isinstance(block, Mapping):
        raise cfg.error(path, f"must be an object, got {_json_type(block)}")
    attn = block.get("attention", {})
    ffn = block.get("ffn", {})
    if not isinstance(attn, Mapping) or not isinstance(ffn, Mapping):
        raise cfg.error(path, "must hold 'attention' and 'ffn' objects")
    layer = _Layer("attention", "dense")
    if attn.get("no_op"):
        layer.mixer = "none"
    elif attn.get("replace_with_linear"):
        layer.mixer = "linear"
    else:
        group = attn.get("n_heads_in_group")
        if group is None:
            raise cfg.error(
                f"{path}.attention", "needs 'n_heads_in_group' (query heads per KV head)"
            )
        group = cfg.to_int(
            group, f"{path}.attention.n_heads_in_group", "query heads per KV head", 1
        )
        if heads % group:
            raise cfg.error(
                f"{path}.attention.n_heads_in_group",
                f"({group}) must divide num_attention_heads ({heads})",
            )
        layer.kv_heads = heads // group
    if ffn.get("no_op"):
        layer.ffn = "none"
    elif ffn.get("replace_with_linear"):
        layer.ffn = "linear"
    elif ffn.get("intermediate_size") is not None:
        layer.intermediate = cfg.to_int(
            ffn["intermediate_size"], f"{path}.ffn.intermediate_size", "the MLP width", 1
        )
    else:
        mult = ffn.get("ffn_mult")
        if isinstance(mult, bool) or not isinstance(mult, int | float) or mult <= 0:
            raise cfg.error(
                f"{path}.ffn", f"needs a positive 'ffn_mult' or 'intermediate_size', got {mult!r}"
            )
        hidden = cfg.req_int(("hidden_size",), "the hidden size")
        # DeciLM's _ffn_mult_to_intermediate_size: 2/3 of mult·h, rounded up to 256.
        width = int(2 * mult * hidden / 3)
        layer.intermediate = -(-width // 256) * 256
    return layer


def _assign_moe_layers(cfg: _Cfg, layers: list[_Layer], moe: _MoE) -> None:
    """Decide which generic "mlp" layers hold routed experts."""
    undecided = [i for i, layer in enumerate(layers) if layer.ffn == "mlp"]
    if not moe.num_experts:
        for i in undecided:
            layers[i].ffn = "dense"
        for layer in layers:
            if layer.ffn == "moe":
                raise cfg.error(
                    cfg.where("hybrid_override_pattern"),
                    "has MoE ('E') layers but the config gives no experts (n_routed_experts)",
                )
        return
    n = len(layers)
    moe_at = [True] * n
    explicit = cfg.seq("moe_layers")
    if explicit is not None:
        wanted = {
            cfg.to_int(v, cfg.where(f"moe_layers[{j}]"), "a layer index", 0)
            for j, v in enumerate(explicit)
        }
        moe_at = [i in wanted for i in range(n)]
    step = cfg.opt_int(("interleave_moe_layer_step",), "the MoE interleave step", minimum=1)
    if step is not None and explicit is None:
        moe_at = [a and (i % step == step - 1) for i, a in enumerate(moe_at)]
    first_dense = cfg.opt_int(("first_k_dense_replace",), "the leading dense layers")
    if first_dense is not None:
        moe_at = [a and i >= first_dense for i, a in enumerate(moe_at)]
    freq = cfg.opt_int(("moe_layer_freq",), "the MoE layer frequency", minimum=1)
    if freq is not None:
        moe_at = [a and i % freq == 0 for i, a in enumerate(moe_at)]
    sparse_step = cfg.opt_int(("decoder_sparse_step",), "the MoE layer step", minimum=1)
    if sparse_step is not None:
        moe_at = [a and (i + 1) % sparse_step == 0 for i, a in enumerate(moe_at)]
    mlp_only = cfg.seq("mlp_only_layers")
    if mlp_only:
        dense_idx = {
            cfg.to_int(v, cfg.where(f"mlp_only_layers[{j}]"), "a layer index", 0)
            for j, v in enumerate(mlp_only)
        }
        moe_at = [a and i not in dense_idx for i, a in enumerate(moe_at)]
    period = cfg.opt_int(("expert_layer_period",), "the MoE layer period", minimum=1)
    if period is not None:
        offset = cfg.int_or(("expert_layer_offset",), "the MoE layer offset", 0)
        moe_at = [a and i % period == offset for i, a in enumerate(moe_at)]
    for i in undecided:
        layers[i].ffn = "moe" if moe_at[i] else "dense"
    if not any(layer.ffn == "moe" for layer in layers):
        raise cfg.error(
            cfg.where("num_experts"),
            f"declares {moe.num_experts} experts but the layer rules leave no MoE layer",
        )


@dataclass(slots=True)
class _Counts:
    total: int
    active: int
    experts: int
    embedding: int


def _count_params(
    cfg: _Cfg,
    layers: list[_Layer],
    shapes: _Shapes,
    moe: _MoE,
    hidden: int,
    vocab: int,
    model_type: str,
) -> _Counts:
    dense = 0  # everything but routed experts and embeddings
    experts = 0
    active_experts = 0
    mamba: int | None = None
    linear_attn: int | None = None
    for layer in layers:
        if layer.mixer == "attention":
            dense += shapes.attention_params(layer.kv_heads or shapes.kv_heads) + hidden
        elif layer.mixer == "mamba":
            if mamba is None:
                mamba = _mamba_params(cfg, hidden, model_type)
            dense += mamba + hidden
        elif layer.mixer == "linear_attention":
            if linear_attn is None:
                linear_attn = _gated_delta_net_params(cfg, hidden)
            dense += linear_attn + hidden
        elif layer.mixer == "linear":
            dense += hidden * hidden
        if layer.also_mamba:
            if mamba is None:
                mamba = _mamba_params(cfg, hidden, model_type)
            dense += mamba
        if layer.ffn == "dense":
            width = layer.intermediate or shapes.dense_intermediate
            if width is None:
                raise cfg.missing(("intermediate_size",), "the dense MLP width")
            dense += shapes.mlp_params(width) + hidden
        elif layer.ffn == "moe":
            dense += moe.shared + moe.router + moe.latent + hidden
            experts += moe.num_experts * moe.per_expert
            active_experts += moe.top_k * moe.per_expert
        elif layer.ffn == "linear":
            dense += hidden * hidden + hidden
    dense += hidden  # final norm
    embedding = vocab * hidden * (1 if shapes.tied else 2)
    if shapes.learned_positions:
        positions = cfg.int_or(("max_position_embeddings", "n_positions"), "positions", 0)
        dense += positions * hidden
    total = embedding + dense + experts
    return _Counts(total, embedding + dense + active_experts, experts, embedding)


def _mamba_params(cfg: _Cfg, hidden: int, model_type: str) -> int:
    """Parameters of one Mamba mixer (approximate: exact for the projections, which are > 99%
    of it; conv, dt, A, D and norm vectors follow the reference implementations)."""
    state = cfg.int_or(
        ("ssm_state_size", "mamba_d_state", "state_size", "d_state"),
        "the SSM state size",
        128 if model_type not in _MAMBA1_TYPES else 16,
        minimum=1,
    )
    conv = cfg.int_or(
        ("conv_kernel", "mamba_d_conv", "d_conv", "mamba_conv_kernel"),
        "the SSM conv kernel",
        4,
        minimum=1,
    )
    n_heads = cfg.opt_int(("mamba_num_heads", "mamba_n_heads"), "the Mamba heads", minimum=1)
    head = cfg.opt_int(("mamba_head_dim", "mamba_d_head"), "the Mamba head size", minimum=1)
    inner = cfg.opt_int(
        ("mamba_d_ssm", "d_inner", "mamba_intermediate_size"), "the Mamba inner width", minimum=1
    )
    if inner is None and n_heads is not None and head is not None:
        inner = n_heads * head
    if inner is None:
        expand = (
            cfg.number("mamba_expand", "the Mamba expansion")
            or cfg.number("expand", "the Mamba expansion")
            or 2.0
        )
        inner = round(expand * hidden)
    if model_type in _MAMBA1_TYPES:
        rank_hit = cfg.raw("mamba_dt_rank") or cfg.raw("time_step_rank")
        if rank_hit is None or rank_hit[0] == "auto":
            dt_rank = math.ceil(hidden / 16)
        else:
            dt_rank = cfg.to_int(rank_hit[0], rank_hit[1], "the dt rank", 1)
        return (
            hidden * 2 * inner  # in_proj
            + inner * (conv + 1)  # depthwise conv + bias
            + inner * (dt_rank + 2 * state)  # x_proj
            + dt_rank * inner
            + inner  # dt_proj
            + inner * state
            + inner  # A_log, D
            + inner * hidden  # out_proj
        )
    groups = cfg.int_or(("n_groups", "mamba_n_groups", "ngroups"), "the SSM groups", 1, minimum=1)
    if n_heads is None:
        n_heads = max(1, inner // (head or 64))
    conv_dim = inner + 2 * groups * state
    return (
        hidden * (2 * inner + 2 * groups * state + n_heads)  # in_proj: z, x, B, C, dt
        + conv_dim * (conv + 1)  # depthwise conv + bias
        + 3 * n_heads  # dt_bias, A_log, D
        + inner  # gated RMSNorm
        + inner * hidden  # out_proj
    )


def _gated_delta_net_params(cfg: _Cfg, hidden: int) -> int:
    """One Qwen3-Next Gated DeltaNet (linear attention) mixer."""
    nk = cfg.req_int(("linear_num_key_heads",), "the linear-attention key heads")
    nv = cfg.req_int(("linear_num_value_heads",), "the linear-attention value heads")
    dk = cfg.req_int(("linear_key_head_dim",), "the linear-attention key head size")
    dv = cfg.req_int(("linear_value_head_dim",), "the linear-attention value head size")
    conv = cfg.int_or(("linear_conv_kernel_dim",), "the linear-attention conv kernel", 4, minimum=1)
    return (
        hidden * (2 * nk * dk + 2 * nv * dv)  # in_proj_qkvz
        + hidden * 2 * nv  # in_proj_ba
        + (2 * nk * dk + nv * dv) * conv  # conv1d
        + 2 * nv  # dt_bias, A_log
        + dv  # norm
        + nv * dv * hidden  # out_proj
    )


# --------------------------------------------------------------------------------------------
# Dtypes
# --------------------------------------------------------------------------------------------


def _activation_dtype(cfg: _Cfg) -> str:
    """The 16-bit dtype vLLM serves in (dtype="auto"): the config's torch_dtype, except that
    float32 checkpoints are served in bfloat16, as vLLM does by default."""
    hit = cfg.raw("torch_dtype") or cfg.raw("dtype")
    if hit is None:
        return "bf16"
    value, path = hit
    if not isinstance(value, str) or value.lower() not in _WEIGHT_DTYPE_ALIASES:
        raise cfg.error(path, f"must be a dtype such as 'bfloat16' or 'float16', got {value!r}")
    dtype = _WEIGHT_DTYPE_ALIASES[value.lower()]
    if dtype == "fp32":
        return "bf16"
    if dtype not in ("bf16", "fp16"):
        raise cfg.error(path, f"must be a 16/32-bit float dtype, got {value!r}")
    return dtype


def _quantization(cfg: _Cfg, sidecar: _Sidecar | None) -> tuple[str | None, str, str | None]:
    """(weight dtype or None, quantized scope, KV dtype or None) from the checkpoint's
    quantization_config / compression_config and a ModelOpt hf_quant_config.json."""
    if sidecar is not None:
        content, sidecar_path = sidecar
        q = content.get("quantization", content)
        if not isinstance(q, Mapping):
            raise ConfigError(f"{sidecar_path}: field 'quantization' must be an object")
        kv = _modelopt_kv(q.get("kv_cache_quant_algo"))
        algo = q.get("quant_algo")
        if algo is not None:
            where = f"{sidecar_path}: field 'quantization.quant_algo'"
            return _modelopt_algo(algo, where), "linear", kv
        if kv is not None:
            wd, scope, _ = _quantization(cfg, None)
            return wd, scope, kv
    hit = cfg.raw("quantization_config") or cfg.raw("compression_config")
    if hit is None:
        return None, "linear", None
    qc, path = hit
    if not isinstance(qc, Mapping):
        raise cfg.error(path, f"must be an object, got {_json_type(qc)}")
    method = qc.get("quant_method")
    if method is None and "config_groups" in qc:
        method = "compressed-tensors"
    if not isinstance(method, str):
        raise cfg.error(f"{path}.quant_method", f"must be a string, got {method!r}")
    m = method.lower().replace("_", "-")
    where = f"{path}.quant_method"
    if m in ("fp8", "fbgemm-fp8", "ptpc-fp8"):
        return "fp8", "linear", None
    if m == "mxfp4":
        # gpt-oss: only the routed experts are MXFP4 (modules_to_not_convert keeps attention,
        # router, embeddings and lm_head in bf16).
        return "fp4", "experts", None
    if m in (
        "awq",
        "gptq",
        "awq-marlin",
        "gptq-marlin",
        "auto-round",
        "autoround",
        "marlin",
        "hqq",
        "exl2",
        "aqlm",
        "gptq-bitblas",
        "bitblas",
    ):
        bits = qc.get("bits", qc.get("w_bit", 4))
        return _int_bits(cfg, bits, f"{path}.bits"), "linear", None
    if m == "bitsandbytes":
        if qc.get("load_in_4bit"):
            return "int4", "linear", None
        if qc.get("load_in_8bit"):
            return "int8", "linear", None
        raise cfg.error(path, "(bitsandbytes) needs load_in_4bit or load_in_8bit")
    if m == "compressed-tensors":
        return _compressed_tensors(cfg, qc, path)
    if m == "modelopt" or m == "modelopt-fp4":
        algo = qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo")
        kv_algo = qc.get("kv_cache_quant_algo") or (qc.get("quantization") or {}).get(
            "kv_cache_quant_algo"
        )
        where = f"{cfg.label}: field '{path}.quant_algo'"
        return _modelopt_algo(algo, where), "linear", _modelopt_kv(kv_algo)
    if m == "quark":
        return _quark(cfg, qc, path)
    raise cfg.error(
        where,
        f"is {method!r}, which pdtp cannot size; expected fp8, mxfp4, awq, gptq, "
        f"compressed-tensors, modelopt, quark or bitsandbytes (or pass weight_dtype=...)",
    )


def _int_bits(cfg: _Cfg, bits: object, path: str) -> str:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (2, 3, 4, 8):
        raise cfg.error(path, f"must be 2, 3, 4 or 8, got {bits!r}")
    # 2/3-bit checkpoints are rare in serving; sizing them as 4-bit errs on the safe side.
    return "int8" if bits == 8 else "int4"


def _compressed_tensors(cfg: _Cfg, qc: Mapping[str, Any], path: str) -> tuple[str, str, str | None]:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise cfg.error(
            f"{path}.config_groups", "must be a non-empty object for compressed-tensors"
        )
    dtypes = set()
    for gname, group in groups.items():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise cfg.error(f"{path}.config_groups.{gname}.weights", "must be an object")
        bits = weights.get("num_bits")
        kind = weights.get("type", "int")
        gp = f"{path}.config_groups.{gname}.weights"
        if bits == 8:
            dtypes.add("fp8" if kind == "float" else "int8")
        elif bits == 4:
            dtypes.add("fp4" if kind == "float" else "int4")
        else:
            raise cfg.error(f"{gp}.num_bits", f"must be 4 or 8, got {bits!r}")
    # Mixed groups: size by the widest, so the memory check stays conservative.
    order = ["fp4", "int4", "int8", "fp8"]
    wd = max(dtypes, key=order.index)
    kv = None
    scheme = qc.get("kv_cache_scheme")
    if isinstance(scheme, Mapping) and scheme.get("num_bits") == 8:
        kv = "fp8"
    return wd, "linear", kv


def _modelopt_algo(algo: object, where: str) -> str:
    table = {
        "FP8": "fp8",
        "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
        "FP8_PB_WO": "fp8",
        "FP8_BLOCKWISE": "fp8",
        "NVFP4": "fp4",
        "MXFP4": "fp4",
        "W4A8_AWQ": "int4",
        "W4A16_AWQ": "int4",
        "W4A8_MXFP4_FP8": "fp4",
        "INT8_SQ": "int8",
        "W8A16": "int8",
        "W8A8_SQ_PER_CHANNEL": "int8",
    }
    if not isinstance(algo, str) or algo.upper() not in table:
        raise ConfigError(f"{where} is {algo!r}; expected one of {sorted(table)}")
    return table[algo.upper()]


def _modelopt_kv(algo: object) -> str | None:
    if isinstance(algo, str) and algo.upper() in ("FP8", "NVFP4_KV", "FP8_KV"):
        return "fp8"
    return None


def _quark(cfg: _Cfg, qc: Mapping[str, Any], path: str) -> tuple[str, str, str | None]:
    """AMD Quark: global_quant_config.weight.dtype ('fp8_e4m3', 'fp4', 'int4', ...)."""
    glob = qc.get("global_quant_config")
    weight = glob.get("weight") if isinstance(glob, Mapping) else None
    if isinstance(weight, list) and weight:
        weight = weight[0]
    dtype = weight.get("dtype") if isinstance(weight, Mapping) else None
    if not isinstance(dtype, str):
        raise cfg.error(f"{path}.global_quant_config.weight.dtype", "must name the weight dtype")
    d = dtype.lower()
    if d.startswith("fp8"):
        wd = "fp8"
    elif d.startswith(("fp4", "mx_fp4", "mxfp4")):
        wd = "fp4"
    elif d in ("int8", "uint8"):
        wd = "int8"
    elif d in ("int4", "uint4"):
        wd = "int4"
    else:
        raise cfg.error(
            f"{path}.global_quant_config.weight.dtype",
            f"is {dtype!r}; expected fp8_e4m3, fp4, int8 or int4",
        )
    kv = None
    kv_cfg = qc.get("kv_cache_quant_config")
    if isinstance(kv_cfg, Mapping) and kv_cfg:
        kv = "fp8"
    return wd, "linear", kv
