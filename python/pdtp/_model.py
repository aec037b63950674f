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
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from ._io import MAX_JSON_DEPTH, read_capped_text
from ._io import json_depth as _json_depth
from .errors import ConfigError, InvalidArgumentError

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlong = 40


def _shown(value: object) -> str:
    """A bounded repr for messages: config values can be nested 1,000 deep or megabytes long,
    and ``repr`` of those would recurse or flood the terminal."""
    return _REPR.repr(value)


__all__ = [
    "AttentionGroup",
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

# vLLM's DeepSeek-MLA family (vLLM 0.33 ModelArchConfigConvertor.is_deepseek_mla): MLA only
# when the config also sets kv_lora_rank (rules.md §4).
MLA_MODEL_TYPES: Final[frozenset[str]] = frozenset(
    {
        "axk1",
        "deepseek_v41",
        "dots3_note",
        "k3_dspark",
        "glm5_next",
        "glm5_next_text",
        "glm4_moe_lite_mtp",
        "bailing_hybrid",
        "bailing_hybrid_mtp",
        "bailing_hybrid_v3_mtp",
        "hy_v4",
        "hy_v4_mtp",
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


# A Hugging Face repository id, "org/name" (the Hub's rules: letters, digits, '-', '_', '.',
# at most 96 characters each part, no leading '-' or '.').
HF_ID_PATTERN: Final = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
)

# Sanity bounds on config integers: far above any real model (the largest have ~200 layers
# and dimensions below 2^20), low enough that a corrupt file fails with a clear error
# instead of exhausting memory on per-layer lists.
MAX_CONFIG_INT = 1 << 31
MAX_LAYERS = 100_000
# The largest config.json pdtp reads. Real ones are under 1 MiB (quantized checkpoints list
# ignored modules); anything bigger is refused before it is read into memory.
MAX_CONFIG_BYTES = 16 << 20
# Upper bound for every integer field of a Model (parameter counts included): far above any
# model (10^16 parameters), and exactly representable as a float for the Rust core.
MAX_MODEL_INT = 1 << 53


def normalize_weight_dtype(value: str, *, argument: str = "weight_dtype") -> str:
    """Map a weight dtype spelling (``"bfloat16"``, ``"mxfp4"``, ``"awq"`` ...) to one of
    :data:`WEIGHT_DTYPE_BYTES`'s keys."""
    if not isinstance(value, str) or value.strip().lower() not in _WEIGHT_DTYPE_ALIASES:
        raise InvalidArgumentError(
            f"{argument} must be one of {sorted(WEIGHT_DTYPE_BYTES)} (or a spelling such as "
            f"'bfloat16', 'mxfp4', 'nvfp4', 'awq', 'gptq'), got {_shown(value)}"
        )
    return _WEIGHT_DTYPE_ALIASES[value.strip().lower()]


def normalize_kv_dtype(value: str, *, argument: str = "kv_dtype") -> str:
    """Map a KV-cache dtype spelling (``"fp8_e4m3"``, ``"bfloat16"`` ...) to one of
    :data:`KV_DTYPE_BYTES`'s keys."""
    if not isinstance(value, str) or value.strip().lower() not in _KV_DTYPE_ALIASES:
        raise InvalidArgumentError(
            f"{argument} must be one of {sorted(KV_DTYPE_BYTES)} (or 'fp8_e4m3', 'bfloat16', "
            f"...), got {_shown(value)}"
        )
    return _KV_DTYPE_ALIASES[value.strip().lower()]


# --------------------------------------------------------------------------------------------
# Attention layer groups
# --------------------------------------------------------------------------------------------

ATTENTION_KINDS: Final[tuple[str, ...]] = ("full", "sliding", "chunked", "mla")
#: What a quantized weight dtype covers (see :attr:`Model.quantized_scope`).
QUANTIZED_SCOPES: Final[tuple[str, ...]] = ("linear", "experts", "experts+fp8")
#: Which cache of its layers an attention group is (see :class:`AttentionGroup`).
CACHE_ROLES: Final[tuple[str, ...]] = ("kv", "swa", "compressed", "index", "state")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionGroup:
    """Attention layers that share one KV-cache shape: what vLLM gives one KV-cache group.

    ``kind`` is ``"full"``, ``"sliding"`` (keeps the last ``window`` tokens), ``"chunked"``
    (Llama-4 local attention: the current ``window``-token chunk) or ``"mla"`` (one latent
    of ``head_dim`` = kv_lora_rank + qk_rope_head_dim per token, ``num_kv_heads`` = 1, no V,
    replicated on every TP rank). ``index_bytes`` is the per-token, per-layer key cache of a
    sparse-attention indexer (DeepSeek-V3.2 / GLM-5 DSA: 128 fp8 values + 4 scale bytes).

    ``cache`` says which of a layer's caches the group is. ``"kv"`` (every model but
    DeepSeek-V4) is the layer's K/V or latent, sized per token. DeepSeek-V4 layers keep
    several caches, each one vLLM 0.33 KV-cache spec sized by whole pages of ``block_size``
    tokens (``page_bytes``): ``"swa"`` its sliding-window latent (every layer),
    ``"compressed"`` one latent per ``tokens_per_state`` tokens, ``"index"`` the
    Lightning-Indexer keys of the C4 layers, and ``"state"`` the fp32 compressor states
    (windowed). Only ``"kv"`` and ``"swa"`` groups count layers (one each per attention layer);
    the others are further caches of the same layers.
    """

    kind: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    #: V head size; 0 for MLA (the latent holds both).
    v_head_dim: int
    #: Tokens kept per sequence for sliding/chunked layers; 0 for full and MLA layers.
    window: int = 0
    index_bytes: int = 0
    cache: str = "kv"
    #: Tokens one stored state covers (DeepSeek-V4 compression ratio); 1 otherwise.
    tokens_per_state: int = 1
    #: Tokens per vLLM page for page-sized caches (DeepSeek-V4); 0 = sized per token.
    block_size: int = 0
    #: Bytes of one page of one layer (vLLM's ``page_size_bytes``, alignment included).
    page_bytes: int = 0
    #: Compressed latents an ``"index"`` cache's indexer selects per query (index_topk).
    topk: int = 0
    #: Query heads of an ``"index"`` cache's indexer (index_n_heads; replicated on every TP
    #: rank): its FLOPs per key.
    index_heads: int = 0

    def __post_init__(self) -> None:
        who = f"AttentionGroup({_shown(self.kind)})"
        if self.kind not in ATTENTION_KINDS:
            raise ConfigError(f"{who}: field 'kind' must be one of {list(ATTENTION_KINDS)}")
        if self.cache not in CACHE_ROLES:
            raise ConfigError(
                f"{who}: field 'cache' must be one of {list(CACHE_ROLES)}, got {_shown(self.cache)}"
            )
        for fname in ("num_layers", "num_kv_heads", "head_dim", "tokens_per_state"):
            _check_int(who, fname, getattr(self, fname), 1)
        for fname in (
            "v_head_dim",
            "window",
            "index_bytes",
            "block_size",
            "page_bytes",
            "topk",
            "index_heads",
        ):
            _check_int(who, fname, getattr(self, fname), 0)
        paged = self.cache != "kv"
        if paged and (self.block_size < 1 or self.page_bytes < 1 or self.kind != "mla"):
            raise ConfigError(
                f"{who}: a {self.cache!r} cache is an MLA cache sized by pages: fields "
                f"'block_size' and 'page_bytes' must be positive"
            )
        if not paged and (self.block_size or self.page_bytes or self.tokens_per_state != 1):
            raise ConfigError(
                f"{who}: fields 'block_size', 'page_bytes' and 'tokens_per_state' are for "
                f"page-sized caches (cache != 'kv')"
            )
        if paged and self.block_size % self.tokens_per_state:
            raise ConfigError(
                f"{who}: field 'tokens_per_state' ({self.tokens_per_state}) must divide "
                f"block_size ({self.block_size})"
            )
        if (self.cache == "index") != (self.topk > 0):
            raise ConfigError(f"{who}: field 'topk' is positive exactly for an index cache")
        if self.index_heads and self.cache != "index":
            raise ConfigError(f"{who}: field 'index_heads' is for an index cache only")
        if self.cache in ("swa", "state") and self.window < 1:
            raise ConfigError(f"{who}: field 'window' must be positive for a {self.cache} cache")
        if self.cache in ("compressed", "index") and self.window:
            raise ConfigError(f"{who}: field 'window' must be 0 for a {self.cache} cache")
        if self.kind in ("sliding", "chunked") and self.window < 1:
            raise ConfigError(f"{who}: field 'window' must be positive for {self.kind} layers")
        if self.window and (self.kind == "full" or (self.kind == "mla" and not paged)):
            raise ConfigError(f"{who}: field 'window' must be 0 for {self.kind} layers")
        if self.kind == "mla" and (self.num_kv_heads != 1 or self.v_head_dim):
            raise ConfigError(f"{who}: an MLA group has num_kv_heads=1 and v_head_dim=0")

    @property
    def counts_layers(self) -> bool:
        """Whether this group is its layers' primary cache (one per attention layer)."""
        return self.cache in ("kv", "swa")

    def bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """KV bytes one token adds to this group on one of ``tp`` ranks (MLA latents and
        indexer keys are replicated; K/V heads are split, at least one per rank). A paged
        cache counts its page bytes per token, rounded up."""
        if self.block_size:
            return -(-self.num_layers * self.page_bytes // self.block_size)
        heads = self.num_kv_heads if self.kind == "mla" else -(-self.num_kv_heads // tp)
        per_layer = heads * (self.head_dim + self.v_head_dim) * dtype_bytes + self.index_bytes
        return self.num_layers * per_layer

    def sequence_bytes(self, context_tokens: int, dtype_bytes: int, tp: int = 1) -> int:
        """Bytes one sequence of ``context_tokens`` tokens holds in this group on one of
        ``tp`` ranks. Windowed groups keep at most their window; a paged cache holds whole
        pages, and a window of ``w`` tokens straddles at most ``ceil((w - 1) / B) + 1``
        pages of ``B`` tokens (vLLM's SlidingWindowSpec bound)."""
        if not self.block_size:
            tokens = min(context_tokens, self.window) if self.window else context_tokens
            return tokens * self.bytes_per_token(dtype_bytes, tp)
        pages = -(-context_tokens // self.block_size)
        if self.window:
            pages = min(pages, -(-(self.window - 1) // self.block_size) + 1)
        return pages * self.page_bytes * self.num_layers

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


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
    "mamba_groups",
    "output_groups",
    "index_topk",
    "index_heads",
    "index_head_dim",
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
    #: routed experts, everything else 16-bit (gpt-oss MXFP4); "experts+fp8" = routed experts,
    #: every other linear layer FP8 (DeepSeek-V4: MXFP4/NVFP4 experts, FP8 block-scaled
    #: attention and shared experts). Ignored for 16/32-bit weights.
    quantized_scope: str = "linear"
    hf_id: str | None = None
    aliases: tuple[str, ...] = field(default=())
    model_type: str = ""
    #: The KV-cache shape per group of attention layers (sliding windows, per-layer-type
    #: heads, MLA, sparse-attention indexers). Empty when constructed: one group built from
    #: num_attention_layers, num_kv_heads and head_dim (or the MLA latent).
    attention_groups: tuple[AttentionGroup, ...] = field(default=())
    #: Recurrent state one sequence keeps in Mamba / linear-attention layers (conv + SSM
    #: state, all such layers, unsharded): constant in the context length.
    state_bytes_per_sequence: int = 0
    #: What ``vllm serve`` should be given to load this model: the HF id the user named (an
    #: instruct id stays instruct), the catalog entry's canonical id, or the absolute path of
    #: the local config folder (see :func:`pdtp.catalog.resolve_model`). None when only a
    #: shape is known. Launch lines use ``serve_ref or hf_id or name``. Not part of equality:
    #: the same shape served under another name is the same model to the planner.
    serve_ref: str | None = field(default=None, compare=False)
    #: One line saying how the name the user gave became ``serve_ref`` (a catalog alias, a
    #: Hub lookup), for outputs to print; None when ``serve_ref`` is what the user wrote.
    serve_note: str | None = field(default=None, compare=False)
    #: vLLM's ``--quantization`` a launch needs to serve these weights from the checkpoint
    #: ``serve_ref`` names: ``"fp8"`` when :meth:`with_dtypes` made a 16-bit checkpoint FP8
    #: (vLLM's online quantization), None when the checkpoint loads as it is.
    online_quantization: str | None = field(default=None, compare=False)
    #: The config's ``architectures`` (vLLM picks its model class from the first it knows):
    #: what decides, e.g., whether the class supports pipeline parallel. Not part of
    #: equality (the shape is the model).
    architectures: tuple[str, ...] = field(default=(), compare=False)
    #: DeepSeek-V4's output-projection head groups (``o_groups``; 0 for every other model):
    #: vLLM 0.33 gives each TP rank ``o_groups // tp`` of them, so TP above it does not load
    #: (``pdtp.layout`` refuses it with vLLM's error).
    output_groups: int = 0
    #: DSA sparse attention (DeepSeek-V3.2, GLM-5; 0 for every other model): the latents each
    #: query attends, which its indexer picks (``index_topk``), and the indexer's query heads
    #: and key size (replicated on every TP rank). The indexer layers are the MLA groups with
    #: ``index_bytes``; what the performance model prices (``pdtp.perf.model_inputs``).
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    #: The B/C groups of a Mamba-2 model's layers (``n_groups``; 0: none, or Mamba-1 / linear
    #: attention). vLLM splits them over TP where TP divides them and otherwise (one group)
    #: replicates the group on every rank, which NIXL's conv-state reads do not expect
    #: (``pdtp.check``: ``mamba_groups_replicated``).
    mamba_groups: int = 0

    def __post_init__(self) -> None:
        who = f"Model {_shown(self.name)}" if isinstance(self.name, str) else "Model"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(
                f"{who}: field 'name' must be a non-empty string, got {_shown(self.name)}"
            )
        for fname in _POSITIVE_INT_FIELDS:
            _check_int(who, fname, getattr(self, fname), 1)
        for fname in _NON_NEGATIVE_INT_FIELDS:
            _check_int(who, fname, getattr(self, fname), 0)
        if self.moe_intermediate_size is not None:
            _check_int(who, "moe_intermediate_size", self.moe_intermediate_size, 1)
        for fname in ("is_mla", "tie_word_embeddings"):
            flag = getattr(self, fname)
            if not isinstance(flag, bool):
                raise ConfigError(f"{who}: field {fname!r} must be a bool, got {_shown(flag)}")
        if self.weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise ConfigError(
                f"{who}: field 'weight_dtype' must be one of {sorted(WEIGHT_DTYPE_BYTES)}, "
                f"got {_shown(self.weight_dtype)}"
            )
        if self.kv_dtype not in KV_DTYPE_BYTES:
            raise ConfigError(
                f"{who}: field 'kv_dtype' must be one of {sorted(KV_DTYPE_BYTES)}, "
                f"got {_shown(self.kv_dtype)}"
            )
        if self.quantized_scope not in QUANTIZED_SCOPES:
            raise ConfigError(
                f"{who}: field 'quantized_scope' must be one of {list(QUANTIZED_SCOPES)}, "
                f"got {_shown(self.quantized_scope)}"
            )
        if self.hf_id is not None and not isinstance(self.hf_id, str):
            raise ConfigError(
                f"{who}: field 'hf_id' must be a string or None, got {_shown(self.hf_id)}"
            )
        if not isinstance(self.model_type, str):
            raise ConfigError(f"{who}: field 'model_type' must be a string")
        if isinstance(self.aliases, str) or not all(isinstance(a, str) for a in self.aliases):
            raise ConfigError(f"{who}: field 'aliases' must be a sequence of strings")
        # Accept any sequence (lists come from JSON) but store a tuple so the record stays
        # hashable and immutable.
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if isinstance(self.architectures, str) or not all(
            isinstance(a, str) for a in self.architectures
        ):
            raise ConfigError(f"{who}: field 'architectures' must be a sequence of strings")
        object.__setattr__(self, "architectures", tuple(self.architectures))
        _check_int(who, "state_bytes_per_sequence", self.state_bytes_per_sequence, 0)
        for fname in ("serve_ref", "serve_note"):
            value = getattr(self, fname)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(
                    f"{who}: field {fname!r} must be a non-empty string or None, "
                    f"got {_shown(value)}"
                )
        self._check_relations(who)
        object.__setattr__(self, "attention_groups", self._groups(who))

    def _groups(self, who: str) -> tuple[AttentionGroup, ...]:
        groups = self.attention_groups
        if isinstance(groups, str | bytes | Mapping) or not isinstance(groups, Sequence):
            raise ConfigError(f"{who}: field 'attention_groups' must be a sequence of groups")
        if not groups:
            if self.is_mla:
                latent = self.kv_lora_rank + self.qk_rope_head_dim
                one = AttentionGroup(
                    kind="mla",
                    num_layers=self.num_attention_layers,
                    num_kv_heads=1,
                    head_dim=latent,
                    v_head_dim=0,
                )
            else:
                one = AttentionGroup(
                    kind="full",
                    num_layers=self.num_attention_layers,
                    num_kv_heads=self.num_kv_heads,
                    head_dim=self.head_dim,
                    v_head_dim=self.head_dim,
                )
            return (one,)
        out = []
        for i, g in enumerate(groups):
            if isinstance(g, Mapping):
                try:
                    g = AttentionGroup(**g)
                except TypeError as exc:
                    raise ConfigError(f"{who}: field 'attention_groups[{i}]': {exc}") from None
            if not isinstance(g, AttentionGroup):
                raise ConfigError(
                    f"{who}: field 'attention_groups[{i}]' must be an AttentionGroup or a "
                    f"mapping of its fields, got {type(g).__name__}"
                )
            if (g.kind == "mla") != self.is_mla:
                raise ConfigError(
                    f"{who}: field 'attention_groups[{i}]' is {_shown(g.kind)} but is_mla is "
                    f"{self.is_mla}"
                )
            out.append(g)
        total = sum(g.num_layers for g in out if g.counts_layers)
        if total != self.num_attention_layers:
            raise ConfigError(
                f"{who}: field 'attention_groups' covers {total} layers but "
                f"num_attention_layers is {self.num_attention_layers}"
            )
        return tuple(out)

    def _check_relations(self, who: str) -> None:
        if self.num_attention_layers > self.num_layers:
            raise ConfigError(
                f"{who}: field 'num_attention_layers' ({self.num_attention_layers}) exceeds "
                f"num_layers ({self.num_layers})"
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
        if self.quantized_scope == "experts+fp8" and self.num_experts:
            bpp = WEIGHT_DTYPE_BYTES["fp8"]
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
        """KV-cache bytes per token for the whole model, unsharded, counting every attention
        layer (sliding-window layers too: the bytes of a token while it is in the window)."""
        return sum(g.bytes_per_token(self.kv_dtype_bytes) for g in self.attention_groups)

    def kv_bytes_per_token_per_rank(self, tp: int) -> int:
        """KV-cache bytes per token held by one of ``tp`` ranks.

        GQA/MHA shard heads: ``ceil(H/tp)`` per rank, one replicated head when ``tp > H``.
        MLA keeps the whole latent on every rank.
        """
        _check_arg_int("tp", tp, 1)
        return sum(g.bytes_per_token(self.kv_dtype_bytes, tp) for g in self.attention_groups)

    def kv_bytes_per_sequence(self, context_tokens: int, tp: int = 1) -> int:
        """KV-cache bytes one sequence of ``context_tokens`` holds on one of ``tp`` ranks:
        sliding/chunked groups keep at most their window, full and MLA groups every token;
        plus the recurrent state of Mamba / linear-attention layers (split across ranks)."""
        _check_arg_int("context_tokens", context_tokens, 0)
        _check_arg_int("tp", tp, 1)
        if self.model_type == "deepseek_v4":
            # Its caches are replicated on every rank and packed into one pool, every group's
            # block costing the widest group's bytes (pdtp._model_dsv4.packing).
            from ._model_dsv4 import packing

            return packing(self.attention_groups).sequence_bytes(context_tokens)
        total = sum(
            g.sequence_bytes(context_tokens, self.kv_dtype_bytes, tp) for g in self.attention_groups
        )
        return total + -(-self.state_bytes_per_sequence // tp)

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
                # A 16-bit checkpoint served as FP8: vLLM quantizes it at load only when told.
                loads_as = self.weight_dtype if self.online_quantization is None else "fp8"
                changes["online_quantization"] = (
                    "fp8" if wd == "fp8" and loads_as in ("bf16", "fp16", "fp32") else None
                )
        if kv_dtype is not None:
            changes["kv_dtype"] = normalize_kv_dtype(kv_dtype)
            if self.model_type == "deepseek_v4" and changes["kv_dtype"] != self.kv_dtype:
                from ._model_dsv4 import regroup

                changes["attention_groups"] = tuple(
                    AttentionGroup(**g) for g in regroup(self.attention_groups, changes["kv_dtype"])
                )
        return replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Fields plus the main derived numbers, JSON-ready."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        out["architectures"] = list(self.architectures)
        out["attention_groups"] = [g.to_dict() for g in self.attention_groups]
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
        serve_ref: str | None = None,
    ) -> Model:
        """Read a Hugging Face config: a path to ``config.json``, a model folder, a dict, or JSON
        text. A folder's (or config file's) sibling ``hf_quant_config.json`` (NVIDIA ModelOpt)
        is read too. ``weight_dtype`` / ``kv_dtype`` override what the config implies.

        ``serve_ref`` (what ``vllm serve`` loads) defaults to the absolute path of the folder
        when ``source`` is a path, else to the HF id (``hf_id`` or the config's
        ``_name_or_path`` when that is an ``org/name`` id).

        Raises :class:`ConfigError` naming the file (or ``<dict>``), the field and what was
        expected whenever the config cannot be modelled.
        """
        wd = normalize_weight_dtype(weight_dtype) if weight_dtype is not None else None
        kd = normalize_kv_dtype(kv_dtype) if kv_dtype is not None else None
        data, label, sidecar, default_name = _load_source(source)
        model = _parse_config(
            data,
            label,
            sidecar,
            name=name if name is not None else default_name,
            weight_dtype=wd,
            kv_dtype=kd,
            hf_id=hf_id,
            aliases=tuple(aliases),
        )
        if serve_ref is None:
            if isinstance(source, str | os.PathLike) and label not in ("<json text>",):
                serve_ref = os.path.dirname(os.path.abspath(label))
            else:
                serve_ref = model.hf_id
        return replace(model, serve_ref=serve_ref) if serve_ref else model


def _check_int(who: str, fname: str, value: object, minimum: int) -> None:
    # bool is an int subclass; True silently meaning 1 layer would hide a broken config.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not minimum <= value <= MAX_MODEL_INT
    ):
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(
            f"{who}: field {_shown(fname)} must be {kind} up to 2**53, got {_shown(value)}"
        )


def _check_arg_int(argument: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(
            f"{argument} must be an integer >= {minimum}, got {_shown(value)}"
        )


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
        if len(source) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"<json text>: {len(source):,} characters is larger than pdtp's config size "
                f"limit ({MAX_CONFIG_BYTES >> 20} MiB); real configs are a few MiB at most"
            )
        return _parse_json(source, "<json text>"), "<json text>", None, None
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(
            f"<{type(source).__name__}>: expected a path to config.json, a model folder, a dict "
            f"or JSON text, got {type(source).__name__}"
        )
    path = os.fspath(source)
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{_shown(path)}: expected a path to config.json or a model folder")
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
    elif os.path.exists(path):  # a device, a FIFO, a socket: read as a file, capped
        folder, config_path, default_name = os.path.dirname(path) or ".", path, "model"
    else:
        raise ConfigError(f"{path}: no such file or folder (expected config.json or a folder)")
    data = _parse_json(_read_text(config_path), config_path)
    sidecar: _Sidecar | None = None
    quant_path = os.path.join(folder, "hf_quant_config.json")
    if os.path.isfile(quant_path):
        sidecar = (_parse_json(_read_text(quant_path), quant_path), quant_path)
    return data, config_path, sidecar, default_name


def _read_text(path: str) -> str:
    # Capped as read: a larger file (or an endless one such as /dev/zero) is refused after
    # MAX_CONFIG_BYTES, never read whole; real configs are a few MiB at most.
    return read_capped_text(path, limit=MAX_CONFIG_BYTES, what="config", error=ConfigError)


def _parse_json(text: str, label: str) -> Mapping[str, Any]:
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _json_depth(text) > MAX_JSON_DEPTH:
        raise ConfigError(
            f"{label}: JSON nested more than {MAX_JSON_DEPTH} levels deep; a config.json nests "
            f"a few levels (text_config, quantization_config)"
        )
    try:
        data = json.loads(text)
    except RecursionError:  # belt and braces: the depth check above should catch it
        raise ConfigError(f"{label}: JSON nested too deeply to be a config") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{label}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"expected a JSON object such as a Hugging Face config.json"
        ) from None
    except ValueError as exc:  # an integer with more digits than int() converts
        raise ConfigError(f"{label}: not usable JSON ({str(exc)[:120]})") from None
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


def _positive_number(cfg: _Cfg, value: object, path: str, what: str, maximum: float) -> float:
    """A finite positive float no larger than ``maximum`` (NaN, Infinity and 1e400 from JSON
    are refused here, naming the field, instead of failing later in arithmetic)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= maximum
    ):
        raise cfg.error(
            path,
            f"must be a finite positive number up to {maximum:g} ({what}), got {_shown(value)}",
        )
    return float(value)


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
        if mt is not None and not isinstance(mt, str):
            raise ConfigError(
                f"{label}: field '{prefix}model_type' must be a string such as 'llama', "
                f"got {_json_type(mt)}"
            )
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
        if isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
            if len(value) > MAX_LAYERS:
                raise self.error(path, f"has {len(value)} entries; expected at most {MAX_LAYERS}")
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
                path, f"must be an integer ({what}), got {_json_type(value)} {_shown(value)}"
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

    def number(self, key: str, what: str, *, maximum: float) -> float | None:
        hit = self.raw(key)
        if hit is None:
            return None
        return _positive_number(self, hit[0], hit[1], what, maximum)

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
    # "attention" | "mamba" | "linear_attention" (Gated DeltaNet) | "kda" (Kimi Delta
    # Attention) | "short_conv" (LFM2) | "linear" | "none"
    mixer: str
    # "mlp" (dense or MoE, decided by the MoE rules) | "dense" | "moe" | "dense+moe" (Gemma-4:
    # a dense MLP and an expert block side by side) | "linear" | "none"
    ffn: str
    kv_heads: int | None = None  # per-layer override (DeciLM block_configs, SWA/global heads)
    intermediate: int | None = None  # per-layer dense width override (DeciLM)
    also_mamba: bool = False  # Falcon-H1: attention and Mamba side by side in every layer
    window: str = ""  # "" (full) | "sliding" | "chunked"
    sparse: bool = False  # a sparse-attention indexer on this layer (DSA, MiniMax-M3)
    heads: int | None = None  # per-layer query heads (MiMo-V2 SWA layers)
    head_dim: int | None = None  # per-layer K head size (Gemma-4 global, MiMo-V2 SWA)
    v_head_dim: int | None = None  # per-layer V head size
    kv_shared: bool = False  # reads another layer's KV cache (Gemma-3n/4 KV sharing)
    k_eq_v: bool = False  # V projection shares K's weights (Gemma-4 attention_k_eq_v)


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
    _refuse_model_type(cfg, types, label)
    if model_type == "deepseek_v4":
        return _parse_deepseek_v4(
            cfg,
            data,
            label,
            sidecar,
            name=name,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            hf_id=hf_id,
            aliases=aliases,
        )

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

    if not any(layer.mixer == "attention" for layer in layers):
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
        shapes.kv_heads = kv_heads

    _refuse_unmodelled(cfg, types)
    _attention_layer_shapes(cfg, layers, shapes, types, is_mla)
    moe = _MoE.read(cfg, hidden, model_type, shapes.gated)
    _assign_moe_layers(cfg, layers, moe, types)
    counts = _count_params(cfg, layers, shapes, moe, hidden, vocab, model_type)
    groups = _attention_groups(cfg, layers, shapes, is_mla)
    num_attention_layers = sum(g.num_layers for g in groups)
    state_bytes = _state_bytes(cfg, layers, hidden, model_type)
    mamba_groups = _mamba_groups(cfg, layers, hidden, model_type)

    num_moe_layers = sum(1 for layer in layers if layer.ffn in ("moe", "dense+moe"))
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
    dsa = _dsa_fields(cfg, groups, is_mla)
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
            attention_groups=tuple(groups),
            state_bytes_per_sequence=state_bytes,
            architectures=_architectures(data),
            index_topk=dsa[0],
            index_heads=dsa[1],
            index_head_dim=dsa[2],
            mamba_groups=mamba_groups,
        )
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def _parse_deepseek_v4(
    cfg: _Cfg,
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
    """DeepSeek-V4 (compressed sparse attention): :mod:`pdtp._model_dsv4` sizes it as vLLM
    0.33 does."""
    from . import _model_dsv4 as dsv4

    hidden = cfg.req_int(("hidden_size",), "the hidden size")
    heads = cfg.req_int(("num_attention_heads",), "the number of attention heads")
    vocab = cfg.req_int(("vocab_size",), "the vocabulary size")
    num_layers = cfg.req_int(("num_hidden_layers",), "the number of decoder layers")
    if num_layers > MAX_LAYERS:
        raise cfg.error(cfg.where("num_hidden_layers"), f"must be at most {MAX_LAYERS}")
    dsv4.check_shape(cfg, data)
    head_dim = cfg.req_int(("head_dim",), "the attention head size (latent width)")
    rope = cfg.req_int(("qk_rope_head_dim",), "the RoPE part of the head")
    window = cfg.req_int(("sliding_window",), "the sliding window of every layer")
    index_dim = cfg.req_int(("index_head_dim",), "the indexer head size")
    topk = cfg.req_int(("index_topk",), "the compressed latents the indexer selects")
    ratios = dsv4.layer_ratios(cfg, num_layers)
    num_hash = dsv4.hash_layers(cfg, num_layers)
    tied = cfg.flag("tie_word_embeddings", False)
    counts = dsv4.params(
        cfg, hidden=hidden, heads=heads, vocab=vocab, ratios=ratios, num_hash=num_hash, tied=tied
    )
    try:
        wdt, scope, kv_from_quant = _quantization(cfg, sidecar)
    except ConfigError:
        if weight_dtype is None:
            raise
        wdt, scope, kv_from_quant = None, "linear", None
    if wdt == "fp8" and sidecar is None:
        # quant_method fp8 is vLLM's DeepseekV4FP8Config: FP8 linears, expert_dtype experts.
        wdt, scope = dsv4.weight_format(cfg)
    elif wdt == "fp4":
        # ModelOpt NVFP4 checkpoints quantize the experts; attention, shared experts and
        # the MTP layers stay FP8 (their "ignore" list, quant_method fp8 underneath).
        scope = "experts+fp8"
    final_wd = weight_dtype or wdt or _activation_dtype(cfg)
    if weight_dtype is not None and weight_dtype != wdt:
        scope = "linear"
    # The FlashMLA backend stores fp8_ds_mla whatever --kv-cache-dtype says.
    final_kv = kv_dtype or kv_from_quant or "fp8"
    groups = dsv4.kv_groups(
        ratios,
        head_dim=head_dim,
        index_head_dim=index_dim,
        index_heads=cfg.req_int(("index_n_heads",), "the indexer query heads"),
        index_topk=topk,
        window=window,
        kv_dtype=final_kv,
    )
    resolved_hf_id = hf_id if hf_id is not None else _hf_id_from(cfg)
    experts = cfg.req_int(("n_routed_experts",), "the routed experts")
    try:
        return Model(
            name=name or resolved_hf_id or "deepseek_v4",
            num_layers=num_layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=1,
            head_dim=head_dim,
            intermediate_size=cfg.req_int(("moe_intermediate_size",), "the expert MLP width"),
            moe_intermediate_size=cfg.req_int(("moe_intermediate_size",), "the expert MLP width"),
            vocab_size=vocab,
            num_experts=experts,
            experts_per_token=cfg.req_int(("num_experts_per_tok",), "the experts per token"),
            num_shared_experts=cfg.int_or(("n_shared_experts",), "the shared experts", 0),
            num_dense_layers=0,
            is_mla=True,
            # vLLM's latent is head_dim wide: the NoPE part plays kv_lora_rank's role.
            kv_lora_rank=head_dim - rope,
            qk_rope_head_dim=rope,
            num_attention_layers=num_layers,
            tie_word_embeddings=tied,
            weight_dtype=final_wd,
            kv_dtype=final_kv,
            total_params=counts["total"],
            active_params=counts["active"],
            expert_params=counts["experts"],
            embedding_params=counts["embedding"],
            quantized_scope=scope,
            hf_id=resolved_hf_id,
            aliases=aliases,
            model_type="deepseek_v4",
            attention_groups=tuple(AttentionGroup(**g) for g in groups),
            architectures=_architectures(data),
            output_groups=cfg.req_int(("o_groups",), "the output-projection head groups"),
        )
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def _architectures(data: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's ``architectures`` list (strings only; anything else is not a class name)."""
    arch = data.get("architectures")
    if not isinstance(arch, list):
        return ()
    return tuple(a for a in arch[:16] if isinstance(a, str) and 0 < len(a) <= 200)


# Config keys of attention schemes pdtp's KV model cannot describe; a config that sets one is
# refused rather than sized wrong. (key, what it is)
_UNMODELLED_KEYS: Final[tuple[tuple[str, str], ...]] = (
    (
        "compress_ratios",
        "DeepSeek-V4 compressed attention outside model_type 'deepseek_v4' (pdtp sizes it as "
        "vLLM's DeepseekV4ForCausalLM only)",
    ),
)


# Model types vLLM serves that pdtp refuses, with the reason (checked before any shape is
# read, so the message names the architecture rather than a field it happens to lack).
UNMODELLED_MODEL_TYPES: Final[Mapping[str, str]] = {
    "mamba": "attention-free (Mamba): no KV cache for prefill to hand to decode",
    "mamba2": "attention-free (Mamba-2): no KV cache for prefill to hand to decode",
    "falcon_mamba": "attention-free (Mamba): no KV cache for prefill to hand to decode",
    "rwkv": "attention-free (RWKV): no KV cache for prefill to hand to decode",
    "xlstm": "attention-free (xLSTM): no KV cache for prefill to hand to decode",
    "deepseek_v41": "compressed sparse attention (per-layer KV compression, hyper-connections)",
    "zamba2": "attention blocks shared across layers (num_mem_blocks)",
    "longcat_flash": "two attention blocks per layer and zero-computation experts",
    "longcat_flash_ngram": "two attention blocks per layer and zero-computation experts",
    "inkling_text": "short-convolution attention state (TML caches)",
    "inkling_mm_model": "short-convolution attention state (TML caches)",
    "whisper": "encoder-decoder speech model",
    "qwen4_exp": "indexed attention with a compressed indexer and n-gram embeddings",
    "qwen4_exp_text": "indexed attention with a compressed indexer and n-gram embeddings",
    "ernie4_5_vl_moe": "separate text and vision expert sets (moe_intermediate_size per modality)",
}


def _refuse_model_type(cfg: _Cfg, types: set[str], label: str) -> None:
    for mt in sorted(t for t in types if t in UNMODELLED_MODEL_TYPES):
        raise ConfigError(
            f"{label}: model_type {_shown(mt)} is an architecture vLLM serves that pdtp does not "
            f"model ({UNMODELLED_MODEL_TYPES[mt]}); pdtp sizes decoder models whose attention "
            f"keeps a KV cache it can compute"
        )


def _refuse_unmodelled(cfg: _Cfg, types: set[str]) -> None:
    for key, what in _UNMODELLED_KEYS:
        hit = cfg.raw(key)
        if hit is not None:
            raise cfg.error(
                hit[1],
                f"is set: {what} is not modelled by pdtp, whose KV-cache and weight figures "
                f"would be wrong for it; expected a config without {_shown(key)}",
            )


# Gemma-2/3 and Cohere-2 configs written before layer_types existed: the HF config class
# derives it (layer i slides unless (i + 1) % pattern == 0).
_DEFAULT_SLIDING_PATTERN: Final[Mapping[str, int]] = {
    "gemma2": 2,
    "gemma3": 6,
    "gemma3_text": 6,
    "cohere2": 4,
    "gpt_oss": 2,
}


def _attention_layer_shapes(
    cfg: _Cfg, layers: list[_Layer], shapes: _Shapes, types: set[str], is_mla: bool
) -> None:
    """Per-layer attention facts that differ by layer type: window kinds, SWA/global head
    shapes (MiMo-V2, Gemma-4), KV sharing (Gemma-3n/4), sparse-attention indexers."""
    n = len(layers)
    attention = [i for i, layer in enumerate(layers) if layer.mixer == "attention"]
    if cfg.seq("layer_types") is None and not any(layer.window for layer in layers):
        pattern = cfg.int_or(
            ("sliding_window_pattern",),
            "the sliding-window pattern",
            _DEFAULT_SLIDING_PATTERN.get(cfg.model_type, 0),
        )
        if pattern and cfg.raw("sliding_window") is not None:
            for i in attention:
                if (i + 1) % pattern:
                    layers[i].window = "sliding"
    if (
        types & {"llama4", "llama4_text"}
        and cfg.seq("layer_types") is None
        and cfg.raw("attention_chunk_size") is not None
    ):
        # Llama-4 (vLLM llama4.py): RoPE layers use chunked local attention, the NoPE layers
        # (every no_rope_layer_interval-th, 4 by default) attend globally.
        rope = _per_layer_flags(cfg, "no_rope_layers", n)
        if rope is None:
            every = cfg.int_or(("no_rope_layer_interval",), "the NoPE layer interval", 4, minimum=1)
            rope = [(i + 1) % every != 0 for i in range(n)]
        for i in attention:
            if rope[i]:
                layers[i].window = "chunked"
    gemma4 = bool(types & {"gemma4", "gemma4_text"})
    if gemma4:
        global_dim = cfg.opt_int(("global_head_dim",), "the full-attention head size", minimum=1)
        global_kv = cfg.opt_int(
            ("num_global_key_value_heads",), "the full-attention KV heads", minimum=1
        )
        k_eq_v = cfg.flag("attention_k_eq_v", False)
        for i in attention:
            if not layers[i].window:
                layers[i].head_dim = global_dim
                layers[i].kv_heads = global_kv
                layers[i].k_eq_v = k_eq_v
    swa_dim = cfg.opt_int(("swa_head_dim",), "the sliding-window head size", minimum=1)
    if swa_dim is not None or cfg.raw("swa_num_key_value_heads") is not None:  # MiMo-V2
        swa_heads = cfg.opt_int(
            ("swa_num_attention_heads",), "the sliding-window query heads", minimum=1
        )
        swa_kv = cfg.opt_int(("swa_num_key_value_heads",), "the sliding-window KV heads", minimum=1)
        swa_v = cfg.opt_int(("swa_v_head_dim",), "the sliding-window V head size", minimum=1)
        for i in attention:
            if layers[i].window == "sliding":
                layers[i].heads, layers[i].kv_heads = swa_heads, swa_kv
                layers[i].head_dim, layers[i].v_head_dim = swa_dim, swa_v
    for layer in layers:
        if layer.kv_heads is not None and (layer.heads or shapes.heads) % layer.kv_heads:
            raise cfg.error(
                cfg.where("num_key_value_heads"),
                f"gives {layer.kv_heads} KV heads to some layers, which does not divide their "
                f"{layer.heads or shapes.heads} query heads",
            )
    shared = cfg.int_or(("num_kv_shared_layers",), "the KV-shared layers", 0)
    if shared:
        if shared >= n:
            raise cfg.error(
                cfg.where("num_kv_shared_layers"),
                f"({shared}) must be below num_hidden_layers ({n}): some layer must own a cache",
            )
        for i in range(n - shared, n):
            layers[i].kv_shared = True
    # Sparse attention: DSA indexers (DeepSeek-V3.2, GLM-5) and MiniMax-M3's block index.
    sparse_cfg = cfg.obj("sparse_attention_config")
    use_sparse = True if sparse_cfg is None else sparse_cfg.get("use_sparse_attention", True)
    if not isinstance(use_sparse, bool):
        raise cfg.error(
            f"{cfg.where('sparse_attention_config')}.use_sparse_attention",
            f"must be true or false, got {_json_type(use_sparse)}",
        )
    if sparse_cfg is not None and use_sparse:
        flags = sparse_cfg.get("sparse_attention_freq")
        path = f"{cfg.where('sparse_attention_config')}.sparse_attention_freq"
        if not isinstance(flags, list) or len(flags) != n:
            raise cfg.error(path, f"must be a list of one 0/1 flag per layer ({n} layers)")
        for i, f in enumerate(flags):
            if isinstance(f, bool) or f not in (0, 1):
                raise cfg.error(f"{path}[{i}]", f"must be 0 or 1, got {_shown(f)}")
            if f:
                layers[i].sparse = True
    elif is_mla and cfg.seq("indexer_types") is not None:
        kinds = cfg.seq("indexer_types") or []
        if len(kinds) != n:
            raise cfg.error(
                cfg.where("indexer_types"),
                f"has {len(kinds)} entries; expected one per layer ({n})",
            )
        for i in attention:
            if kinds[i] not in ("full", "shared"):
                raise cfg.error(
                    cfg.where(f"indexer_types[{i}]"),
                    f"is {_shown(kinds[i])}; expected 'full' (own indexer) or 'shared'",
                )
            layers[i].sparse = kinds[i] == "full"
    elif is_mla and cfg.raw("index_topk") is not None:
        freq = cfg.int_or(("index_topk_freq",), "the indexer layer frequency", 1, minimum=1)
        offset = cfg.int_or(("index_skip_topk_offset",), "the indexer layer offset", 2)
        topk_pattern = cfg.text("index_topk_pattern")  # "F"/"S" per layer
        for i in attention:
            if topk_pattern is not None and i < len(topk_pattern):
                layers[i].sparse = topk_pattern[i] != "S"
            else:  # vLLM deepseek_v32: an indexer unless this layer reuses the last top-k
                layers[i].sparse = max(i - offset + 1, 0) % freq == 0


def _dsa_fields(cfg: _Cfg, groups: Sequence[AttentionGroup], is_mla: bool) -> tuple[int, int, int]:
    """(``index_topk``, ``index_heads``, ``index_head_dim``) of a DSA model (MLA layers with
    indexer keys, configured by ``index_topk``: vLLM's deepseek_v32 family); zeros otherwise
    (MiniMax-M3's block index is configured by ``sparse_attention_config``)."""
    if not is_mla or not any(g.kind == "mla" and g.index_bytes for g in groups):
        return (0, 0, 0)
    if cfg.obj("sparse_attention_config") is not None or cfg.raw("index_topk") is None:
        return (0, 0, 0)
    return (
        cfg.req_int(("index_topk",), "the latents the indexer selects"),
        cfg.req_int(("index_n_heads",), "the indexer query heads"),
        cfg.req_int(("index_head_dim",), "the indexer key size"),
    )


def _window(cfg: _Cfg, kind: str) -> int:
    """The window of sliding/chunked layers; 0 when the config gives none, where vLLM runs
    the layer as full attention (per_layer_sliding_window=None)."""
    keys = (
        ("sliding_window", "sliding_window_size")
        if kind == "sliding"
        else ("attention_chunk_size", "chunk_size")
    )
    return cfg.int_or(keys, f"the {kind}-attention window in tokens", 0, minimum=1)


def _index_bytes(cfg: _Cfg) -> int:
    """Per-token key-cache bytes of one layer's sparse-attention indexer."""
    sparse_cfg = cfg.obj("sparse_attention_config")
    if sparse_cfg is not None:
        dim = sparse_cfg.get("sparse_index_dim")
        path = f"{cfg.where('sparse_attention_config')}.sparse_index_dim"
        # MiniMax-M3 keeps the index keys in the model dtype (bf16).
        return 2 * cfg.to_int(dim, path, "the index key size", 1)
    dim = cfg.req_int(("index_head_dim",), "the indexer key size")
    # vLLM DeepseekV32IndexerCache: fp8 keys plus one fp32 scale per 128 values.
    return dim + dim // 128 * 4


def _attention_groups(
    cfg: _Cfg, layers: list[_Layer], shapes: _Shapes, is_mla: bool
) -> list[AttentionGroup]:
    counts: dict[tuple[str, int, int, int, int, int], int] = {}
    index_bytes: int | None = None
    for layer in layers:
        if layer.mixer != "attention" or layer.kv_shared:
            continue
        idx = 0
        if layer.sparse:
            if index_bytes is None:
                index_bytes = _index_bytes(cfg)
            idx = index_bytes
        if is_mla and shapes.mla is not None:
            key = ("mla", 1, shapes.mla.kv_lora_rank + shapes.mla.qk_rope_head_dim, 0, 0, idx)
        else:
            window = _window(cfg, layer.window) if layer.window else 0
            kind = layer.window if window else "full"
            d = layer.head_dim or shapes.head_dim
            v = layer.v_head_dim or (shapes.v_head_dim if layer.head_dim is None else d)
            key = (kind, layer.kv_heads or shapes.kv_heads, d, v, window, idx)
        counts[key] = counts.get(key, 0) + 1
    return [
        AttentionGroup(
            kind=k[0],
            num_layers=count,
            num_kv_heads=k[1],
            head_dim=k[2],
            v_head_dim=k[3],
            window=k[4],
            index_bytes=k[5],
        )
        for k, count in counts.items()
    ]


def _ssm_dtype_bytes(cfg: _Cfg) -> int:
    hit = cfg.first(("mamba_ssm_cache_dtype", "mamba_ssm_dtype"))
    if hit is None:
        return 2
    value, path = hit
    allowed = ("auto", "float32", "fp32", "bfloat16", "float16")
    if value not in allowed:
        raise cfg.error(path, f"must be one of {list(allowed)}, got {_shown(value)}")
    return 4 if value in ("float32", "fp32") else 2


def _state_bytes(cfg: _Cfg, layers: list[_Layer], hidden: int, model_type: str) -> int:
    """Recurrent state one sequence keeps (vLLM's Mamba/linear-attention state shapes):
    conv states in the model dtype (2 bytes), SSM / delta-rule states in the SSM cache
    dtype (KDA: fp32)."""
    total = 0
    per: dict[str, int] = {}
    for layer in layers:
        kinds = [layer.mixer] + (["mamba"] if layer.also_mamba else [])
        for kind in kinds:
            if kind not in ("mamba", "linear_attention", "kda", "short_conv"):
                continue
            if kind not in per:
                per[kind] = _one_state(cfg, kind, hidden, model_type)
            total += per[kind]
    return total


def _mamba_groups(cfg: _Cfg, layers: list[_Layer], hidden: int, model_type: str) -> int:
    """The B/C groups of the model's Mamba-2 layers (0 without any)."""
    if not any(layer.mixer == "mamba" or layer.also_mamba for layer in layers):
        return 0
    m = _mamba_dims(cfg, hidden, model_type)
    return 0 if m.v1 else m.groups


def _one_state(cfg: _Cfg, kind: str, hidden: int, model_type: str) -> int:
    ssm = _ssm_dtype_bytes(cfg)
    if kind == "short_conv":  # vLLM ShortConv: (L_cache - 1) past inputs of the hidden size
        kernel = cfg.int_or(("conv_L_cache",), "the short-conv kernel", 3, minimum=1)
        return hidden * (kernel - 1) * 2
    if kind == "kda":
        kda = _kda_dims(cfg)
        proj = kda.heads * kda.head_dim
        return 3 * proj * (kda.conv - 1) * 2 + kda.heads * kda.head_dim * kda.head_dim * 4
    if kind == "linear_attention":
        g = _gdn_dims(cfg)
        conv_dim = 2 * g.nk * g.dk + g.nv * g.dv
        return conv_dim * (g.conv - 1) * 2 + g.nv * g.dk * g.dv * ssm
    m = _mamba_dims(cfg, hidden, model_type)
    if m.v1:
        return m.inner * (m.conv - 1) * 2 + m.inner * m.state * ssm
    conv_dim = m.inner + 2 * m.groups * m.state
    return conv_dim * (m.conv - 1) * 2 + m.n_heads * (m.inner // m.n_heads) * m.state * ssm


def _text_config(data: Mapping[str, Any], label: str) -> _Cfg:
    thinker = data.get("thinker_config")  # Qwen2.5/3-Omni: the language model is the thinker's
    if thinker is not None:
        if not isinstance(thinker, Mapping):
            raise ConfigError(
                f"{label}: field 'thinker_config' must be an object, got {_json_type(thinker)}"
            )
        sub = thinker.get("text_config")
        if not isinstance(sub, Mapping):
            raise ConfigError(
                f"{label}: field 'thinker_config.text_config' must be an object, "
                f"got {_json_type(sub)}"
            )
        return _Cfg(sub, label, "thinker_config.text_config.", data)
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
    # Only an "org/name" id with the Hub's characters is worth keeping: local paths say
    # nothing about the model, and anything else may be a hostile string.
    if HF_ID_PATTERN.match(value) and ".." not in value:
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
        mla = bool(types & MLA_MODEL_TYPES) and cfg.raw("kv_lora_rank") is not None
        # MLA heads are qk_nope + qk_rope; a head_dim key there is informational (GLM-5 sets
        # it to qk_nope_head_dim, GLM-5-Next to 0) and vLLM does not read it.
        head_dim = (
            None
            if mla
            else cfg.opt_int(
                ("head_dim", "attention_head_dim", "kv_channels"), "head_dim", minimum=1
            )
        )
        if head_dim is None and cfg.raw("kv_lora_rank") is not None:
            # MLA: the query/key head is the no-rope part plus the rope part.
            head_dim = cfg.int_or(
                ("qk_nope_head_dim",), "the MLA no-rope head size", 128, minimum=1
            ) + cfg.req_int(("qk_rope_head_dim",), "the MLA rope head size", minimum=0)
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
                qk_nope_head_dim=cfg.int_or(
                    ("qk_nope_head_dim",), "the MLA no-rope head size", 128, minimum=1
                ),
                # 0 is NoPE MLA (GLM-5-Next).
                qk_rope_head_dim=cfg.req_int(
                    ("qk_rope_head_dim",), "the MLA rope head size", minimum=0
                ),
                v_head_dim=cfg.int_or(("v_head_dim",), "v_head_dim", 128, minimum=1),
            )
        # V heads narrower than K heads (MiMo-V2); MLA configs use v_head_dim for the latent.
        self.v_head_dim = (
            cfg.int_or(("v_head_dim",), "the V head size", head_dim, minimum=1)
            if self.mla is None
            else head_dim
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
            (
                "dense_intermediate_size",
                "intermediate_size",
                "ffn_hidden_size",
                "n_inner",
                "ffn_dim",
            ),
            "the MLP width",
            minimum=1,
        )
        if width is not None and cfg.flag("block_auto_adjust_ff_dim", False):
            # LFM2 (vLLM Lfm2MLP): 2/3 of the width, times the multiplier, rounded up.
            width = int(2 * width / 3)
            mult = cfg.number("block_ffn_dim_multiplier", "the FFN multiplier", maximum=1024.0)
            if mult is not None:
                width = int(mult * width)
            multiple = cfg.int_or(("block_multiple_of",), "the FFN rounding", 256, minimum=1)
            width = multiple * -(-width // multiple)
        if width is not None:
            return width
        ratio = cfg.number("expansion_ratio", "the MLP expansion ratio", maximum=1024.0)  # MPT
        if ratio is not None:
            return round(ratio * hidden)
        if types & _NON_GATED_MLP_TYPES:
            return 4 * hidden  # Falcon / GPT-2 default: 4h
        return None

    def attention_params(self, layer: _Layer) -> int:
        h = self.hidden
        a = layer.heads or self.heads
        kv_heads = layer.kv_heads or self.kv_heads
        d = layer.head_dim or self.head_dim
        v = layer.v_head_dim or (self.v_head_dim if layer.head_dim is None else d)
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
        if layer.kv_shared:  # reads another layer's cache: q_proj and o_proj only
            return q + a * v * h
        k_and_v = h * kv_heads * (d if layer.k_eq_v else d + v)
        n = q + k_and_v + a * v * h
        if self.qkv_bias:
            n += a * d + kv_heads * (d + v)
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


_EXPERT_KEYS: Final[tuple[str, ...]] = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
)
# "top_k_experts" is Gemma-4's name.
_TOPK_KEYS: Final[tuple[str, ...]] = (
    "num_experts_per_tok",
    "experts_per_token",
    "num_experts_per_token",
    "top_k_experts",
    "moe_k",
    "moe_topk",
    "top_k",
    "moe_top_k",
)


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
        experts_hit = cfg.first(_EXPERT_KEYS)
        experts = cfg.opt_int(_EXPERT_KEYS, "the number of routed experts")
        topk_hit = cfg.first(_TOPK_KEYS)
        if experts is not None and experts == 0 and experts_hit is not None:
            # A zero expert count beside a positive top-k or expert width is a broken MoE
            # config, not a dense one: serving it as dense would be a different model.
            signs = [
                key
                for key in (*_TOPK_KEYS, "moe_intermediate_size")
                if isinstance(cfg.data.get(key), int)
                and not isinstance(cfg.data.get(key), bool)
                and cfg.data.get(key, 0) > 0
            ]
            if signs:
                raise cfg.error(
                    experts_hit[1],
                    f"is 0 but the config describes routed experts ({signs[0]}="
                    f"{cfg.data[signs[0]]}); expected the number of routed experts (>= 1)",
                )
        if experts is None or experts <= 1:  # Jamba uses num_experts=1 for "no MoE"
            return cls(0, 0, 0, 0, 0, 0, 0, 0)
        top_k = cfg.opt_int(_TOPK_KEYS, "the experts per token", minimum=1)
        if top_k is None:
            raise cfg.missing(_TOPK_KEYS, "the routed experts per token for an MoE model")
        if top_k > experts:
            hit = topk_hit
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
        latent_size = cfg.opt_int(
            ("moe_latent_size", "routed_expert_hidden_size"), "the MoE latent size", minimum=1
        )
        inner = latent_size or hidden
        per_expert = (3 if gated else 2) * inner * width
        if model_type == "gpt_oss":
            per_expert += 2 * width + hidden  # gate_up and down biases
        latent = 2 * hidden * latent_size if latent_size else 0
        router = hidden * experts + (experts if model_type == "gpt_oss" else 0)
        mlp_factor = 3 if gated else 2
        shared_width = cfg.opt_int(
            (
                "shared_expert_intermediate_size",
                "moe_shared_expert_intermediate_size",
                "shared_intermediate_size",
                "share_expert_dim",
            ),
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


_LAYER_KEYS: Final[tuple[str, ...]] = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def _layer_plan(cfg: _Cfg, heads: int) -> list[_Layer]:
    """Per-layer mixer and FFN kinds from whichever hybrid description the config uses."""
    layer_keys = _LAYER_KEYS
    pattern_hit = cfg.raw("hybrid_override_pattern")
    if pattern_hit is not None:
        pattern, path = pattern_hit
        if not isinstance(pattern, str) or not pattern:
            raise cfg.error(path, "must be a non-empty string such as 'M-M*-'")
        if len(pattern) > MAX_LAYERS:
            raise cfg.error(path, f"must describe at most {MAX_LAYERS} layers")
        plan = []
        for i, ch in enumerate(pattern):
            if ch not in _PATTERN_BLOCKS:
                raise cfg.error(
                    path,
                    f"has unknown block {_shown(ch)} at layer {i}; expected one of "
                    f"'M' (Mamba), '*' (attention), '-' (MLP), 'E' (MoE)",
                )
            mixer, ffn = _PATTERN_BLOCKS[ch]
            plan.append(_Layer(mixer, ffn))
        _check_layer_count(cfg, layer_keys, len(plan), path)
        return plan

    block_configs = cfg.seq("block_configs")
    if block_configs is not None:
        if len(block_configs) > MAX_LAYERS:
            raise cfg.error(cfg.where("block_configs"), f"must hold at most {MAX_LAYERS} blocks")
        plan = [_deci_layer(cfg, i, b, heads) for i, b in enumerate(block_configs)]
        if not plan:
            raise cfg.error(cfg.where("block_configs"), "is empty; expected one entry per layer")
        _check_layer_count(cfg, layer_keys, len(plan), cfg.where("block_configs"))
        return plan

    # Hybrid descriptions that are one entry per layer also give the layer count when the
    # config leaves num_hidden_layers out (Nemotron-3 Ultra's layers_block_type).
    typed = None
    for key in ("layers_block_type", "layer_types"):
        kinds = cfg.seq(key)
        if kinds is not None:
            typed = (key, kinds)
            break
    if cfg.first(layer_keys) is None and typed is not None and typed[1]:
        num_layers = len(typed[1])
    else:
        num_layers = cfg.req_int(layer_keys, "the number of layers")
    if num_layers > MAX_LAYERS:
        hit = cfg.first(layer_keys)
        where = hit[1] if hit else cfg.where(layer_keys[0])
        raise cfg.error(where, f"must be at most {MAX_LAYERS} layers, got {num_layers}")

    linear_cfg = cfg.obj("linear_attn_config")
    if linear_cfg is not None:
        return _kimi_linear_layers(cfg, linear_cfg, num_layers)
    if cfg.model_type == "falcon_h1":
        return [_Layer("attention", "mlp", also_mamba=True) for _ in range(num_layers)]

    if typed is not None:
        key, kinds = typed
        if len(kinds) != num_layers:
            raise cfg.error(
                cfg.where(key),
                f"has {len(kinds)} entries; expected one per layer "
                f"(num_hidden_layers = {num_layers})",
            )
        single_block = any(k in ("mlp", "moe") for k in kinds)
        return [_typed_layer(cfg, key, i, k, single_block) for i, k in enumerate(kinds)]

    full_idx = cfg.seq("full_attn_idxs")
    if full_idx is not None:  # LFM2: attention at these layers, short convolutions elsewhere
        wanted = _layer_index_set(
            cfg, full_idx, cfg.where("full_attn_idxs"), 0, num_layers - 1, "a layer index"
        )
        return [
            _Layer("attention" if i in wanted else "short_conv", "mlp") for i in range(num_layers)
        ]

    swa_pattern = _per_layer_flags(cfg, "hybrid_layer_pattern", num_layers)
    if swa_pattern is not None:  # MiMo-V2: 1 = sliding-window layer, 0 = full attention
        return [_Layer("attention", "mlp", window="sliding" if f else "") for f in swa_pattern]

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


def _per_layer_flags(cfg: _Cfg, key: str, num_layers: int) -> list[bool] | None:
    """A per-layer list of 0/1 flags (MiMo-V2 hybrid_layer_pattern, MiniMax-M3 / MiMo-V2
    moe_layer_freq, sparse_attention_freq), checked for length and values."""
    hit = cfg.raw(key)
    if hit is None or (key == "moe_layer_freq" and not isinstance(hit[0], list)):
        return None  # moe_layer_freq may also be one integer frequency (DeepSeek, Kimi)
    values, path = hit
    if not isinstance(values, list):
        raise cfg.error(path, f"must be a list of one 0/1 flag per layer, got {_json_type(values)}")
    if len(values) != num_layers:
        raise cfg.error(
            path,
            f"has {len(values)} entries; expected one 0/1 flag per layer "
            f"(num_hidden_layers = {num_layers})",
        )
    flags = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or v not in (0, 1):
            raise cfg.error(f"{path}[{i}]", f"must be 0 or 1 (one flag per layer), got {_shown(v)}")
        flags.append(v == 1)
    return flags


def _layer_index_set(cfg: _Cfg, values: object, path: str, lo: int, hi: int, what: str) -> set[int]:
    if not isinstance(values, list):
        raise cfg.error(path, f"must be a list of layer numbers, got {_json_type(values)}")
    out = set()
    for j, v in enumerate(values):
        n = cfg.to_int(v, f"{path}[{j}]", what, lo)
        if n > hi:
            raise cfg.error(f"{path}[{j}]", f"is layer {n}; expected {lo}..{hi} ({what})")
        out.add(n)
    return out


def _kimi_linear_layers(cfg: _Cfg, linear: Mapping[str, Any], num_layers: int) -> list[_Layer]:
    """Kimi-Linear / Kimi-K3: KDA (Kimi Delta Attention) layers listed 1-based in
    linear_attn_config.kda_layers, MLA everywhere else (vLLM KimiLinearConfig.is_kda_layer)."""
    path = cfg.where("linear_attn_config")
    kda = _layer_index_set(
        cfg, linear.get("kda_layers"), f"{path}.kda_layers", 1, num_layers, "a 1-based layer"
    )
    full = linear.get("full_attn_layers")
    if full is not None:
        both = kda & _layer_index_set(
            cfg, full, f"{path}.full_attn_layers", 1, num_layers, "a 1-based layer"
        )
        if both:
            raise cfg.error(
                f"{path}.full_attn_layers",
                f"lists layer(s) {sorted(both)[:5]} that kda_layers lists too; a layer is "
                f"either KDA or full attention",
            )
    return [_Layer("kda" if i + 1 in kda else "attention", "mlp") for i in range(num_layers)]


def _check_layer_count(cfg: _Cfg, keys: Sequence[str], count: int, path: str) -> None:
    declared = cfg.opt_int(keys, "the number of layers", minimum=1)
    if declared is not None and declared != count:
        raise cfg.error(path, f"describes {count} layers but num_hidden_layers is {declared}")


# layer_types / layers_block_type values: (mixer, window, sparse). "mlp"/"moe" entries are
# FFN-only blocks (Nemotron-H style, one block per entry).
_TYPED_LAYERS: Final[Mapping[str, tuple[str, str, bool]]] = {
    "full_attention": ("attention", "", False),
    "attention": ("attention", "", False),
    "global": ("attention", "", False),
    "global_attention": ("attention", "", False),
    "hybrid": ("attention", "", False),
    "sliding_attention": ("attention", "sliding", False),
    "local": ("attention", "sliding", False),
    "local_attention": ("attention", "sliding", False),
    "chunked_attention": ("attention", "chunked", False),
    "deepseek_sparse_attention": ("attention", "", True),
    "indexed_attention": ("attention", "", True),
    "sparse_attention": ("attention", "", True),
    "linear_attention": ("linear_attention", "", False),
    "mamba": ("mamba", "", False),
    "conv": ("short_conv", "", False),
}
# What "linear_attention" layers are per model type (transformers 5 names every recurrent
# mixer so); Gated DeltaNet (Qwen3-Next / Qwen3.5 / OLMo-Hybrid) otherwise.
_LINEAR_MIXER: Final[Mapping[str, str]] = {
    "nemotron_h": "mamba",
    "nemotron_h_omni": "mamba",
    "granitemoehybrid": "mamba",
    "bamba": "mamba",
    "kimi_linear": "kda",
    "glm5_next": "kda",
    "glm5_next_text": "kda",
}


def _typed_layer(cfg: _Cfg, key: str, i: int, kind: object, single_block: bool) -> _Layer:
    path = cfg.where(f"{key}[{i}]")
    if not isinstance(kind, str):
        raise cfg.error(path, f"must be a string, got {_json_type(kind)}")
    if single_block and kind in ("mlp", "moe"):
        return _Layer("none", "dense" if kind == "mlp" else "moe")
    known = _TYPED_LAYERS.get(kind)
    if known is None:
        raise cfg.error(
            path,
            f"is {_shown(kind)}; expected one of {sorted(_TYPED_LAYERS)} or 'mlp'/'moe' "
            f"(one block per entry)",
        )
    mixer, window, sparse = known
    if mixer == "linear_attention":
        mixer = _LINEAR_MIXER.get(cfg.model_type, mixer)
    ffn = "none" if single_block and mixer not in ("none",) else "mlp"
    return _Layer(mixer, ffn, window=window, sparse=sparse)


def _block_flag(cfg: _Cfg, block: Mapping[str, Any], key: str, path: str) -> bool:
    value = block.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise cfg.error(f"{path}.{key}", f"must be true or false, got {_json_type(value)}")
    return value


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
    if _block_flag(cfg, attn, "no_op", f"{path}.attention"):
        layer.mixer = "none"
    elif _block_flag(cfg, attn, "replace_with_linear", f"{path}.attention"):
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
    if _block_flag(cfg, ffn, "no_op", f"{path}.ffn"):
        layer.ffn = "none"
    elif _block_flag(cfg, ffn, "replace_with_linear", f"{path}.ffn"):
        layer.ffn = "linear"
    elif ffn.get("intermediate_size") is not None:
        layer.intermediate = cfg.to_int(
            ffn["intermediate_size"], f"{path}.ffn.intermediate_size", "the MLP width", 1
        )
    else:
        mult = ffn.get("ffn_mult")
        if mult is None:
            raise cfg.error(f"{path}.ffn", "needs a positive 'ffn_mult' or 'intermediate_size'")
        mult = _positive_number(cfg, mult, f"{path}.ffn.ffn_mult", "the FFN multiplier", 1024.0)
        hidden = cfg.req_int(("hidden_size",), "the hidden size")
        # DeciLM's _ffn_mult_to_intermediate_size: 2/3 of mult·h, rounded up to 256.
        width = int(2 * mult * hidden / 3)
        layer.intermediate = -(-width // 256) * 256
    return layer


def _assign_moe_layers(cfg: _Cfg, layers: list[_Layer], moe: _MoE, types: set[str]) -> None:
    """Decide which generic "mlp" layers hold routed experts."""
    undecided = [i for i, layer in enumerate(layers) if layer.ffn == "mlp"]
    if moe.num_experts and types & {"gemma4", "gemma4_text"}:
        # Gemma-4: every layer runs its dense MLP and the expert block side by side.
        for i in undecided:
            layers[i].ffn = "dense+moe"
        return
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
    flags = _per_layer_flags(cfg, "moe_layer_freq", n)
    if flags is not None:  # MiniMax-M3 / MiMo-V2: one 0/1 flag per layer
        moe_at = [a and f for a, f in zip(moe_at, flags)]
    else:
        freq = cfg.opt_int(("moe_layer_freq",), "the MoE layer frequency", minimum=1)
        if freq is not None:
            moe_at = [a and i % freq == 0 for i, a in enumerate(moe_at)]
    mlp_types = cfg.seq("mlp_layer_types")
    if mlp_types is not None:  # GLM-5 / A.X K1: "dense" or "sparse" per layer
        if len(mlp_types) != n:
            raise cfg.error(
                cfg.where("mlp_layer_types"),
                f"has {len(mlp_types)} entries; expected one per layer ({n})",
            )
        for j, kind in enumerate(mlp_types):
            if kind not in ("dense", "sparse"):
                raise cfg.error(
                    cfg.where(f"mlp_layer_types[{j}]"),
                    f"is {_shown(kind)}; expected 'dense' or 'sparse'",
                )
        moe_at = [a and k == "sparse" for a, k in zip(moe_at, mlp_types)]
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
    start = cfg.opt_int(("moe_layer_start_index",), "the first MoE layer")
    if start is not None:  # ERNIE-4.5 (vLLM ernie45_moe)
        end = cfg.int_or(("moe_layer_end_index",), "the last MoE layer", n - 1)
        step = cfg.int_or(("moe_layer_interval",), "the MoE layer interval", 1, minimum=1)
        moe_at = [a and start <= i <= end and (i + 1) % step == 0 for i, a in enumerate(moe_at)]
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
    kda: int | None = None
    indexer: int | None = None
    for layer in layers:
        if layer.mixer == "attention":
            dense += shapes.attention_params(layer) + hidden
            if layer.sparse:
                if indexer is None:
                    indexer = _indexer_params(cfg, shapes, hidden)
                dense += indexer
        elif layer.mixer == "mamba":
            if mamba is None:
                mamba = _mamba_params(cfg, hidden, model_type)
            dense += mamba + hidden
        elif layer.mixer == "linear_attention":
            if linear_attn is None:
                linear_attn = _gated_delta_net_params(cfg, hidden)
            dense += linear_attn + hidden
        elif layer.mixer == "kda":
            if kda is None:
                kda = _kda_params(cfg, hidden)
            dense += kda + hidden
        elif layer.mixer == "short_conv":
            dense += _short_conv_params(cfg, hidden) + hidden
        elif layer.mixer == "linear":
            dense += hidden * hidden
        if layer.also_mamba:
            if mamba is None:
                mamba = _mamba_params(cfg, hidden, model_type)
            dense += mamba
        if layer.ffn in ("dense", "dense+moe"):
            width = layer.intermediate or shapes.dense_intermediate
            if width is None:
                raise cfg.missing(("intermediate_size",), "the dense MLP width")
            dense += shapes.mlp_params(width) + hidden
        if layer.ffn in ("moe", "dense+moe"):
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


def _indexer_params(cfg: _Cfg, shapes: _Shapes, hidden: int) -> int:
    """A sparse-attention indexer: query projection from the MLA query latent (or the hidden
    state), one key head, its norm and the per-head weights."""
    sparse_cfg = cfg.obj("sparse_attention_config")
    if sparse_cfg is not None:
        base = cfg.where("sparse_attention_config")
        dim = cfg.to_int(
            sparse_cfg.get("sparse_index_dim"), f"{base}.sparse_index_dim", "the index key size", 1
        )
        n = cfg.to_int(
            sparse_cfg.get("sparse_num_index_heads"),
            f"{base}.sparse_num_index_heads",
            "the index heads",
            1,
        )
    else:
        dim = cfg.req_int(("index_head_dim",), "the indexer key size")
        n = cfg.req_int(("index_n_heads",), "the indexer heads")
    q_in = shapes.mla.q_lora_rank if shapes.mla is not None and shapes.mla.q_lora_rank else hidden
    return q_in * n * dim + hidden * dim + 2 * dim + hidden * n


@dataclass(slots=True)
class _MambaDims:
    v1: bool
    state: int
    conv: int
    inner: int
    n_heads: int
    groups: int
    dt_rank: int


def _mamba_dims(cfg: _Cfg, hidden: int, model_type: str) -> _MambaDims:
    v1 = model_type in _MAMBA1_TYPES
    state = cfg.int_or(
        ("ssm_state_size", "mamba_d_state", "state_size", "d_state"),
        "the SSM state size",
        16 if v1 else 128,
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
        expand = cfg.number("mamba_expand", "the Mamba expansion", maximum=1024.0) or cfg.number(
            "expand", "the Mamba expansion", maximum=1024.0
        )
        inner = round((expand or 2.0) * hidden)
    dt_rank = 0
    if v1:
        rank_hit = cfg.raw("mamba_dt_rank") or cfg.raw("time_step_rank")
        if rank_hit is None or rank_hit[0] == "auto":
            dt_rank = math.ceil(hidden / 16)
        else:
            dt_rank = cfg.to_int(rank_hit[0], rank_hit[1], "the dt rank", 1)
    groups = cfg.int_or(("n_groups", "mamba_n_groups", "ngroups"), "the SSM groups", 1, minimum=1)
    if n_heads is None:
        n_heads = max(1, inner // (head or 64))
    return _MambaDims(v1, state, conv, max(inner, 1), n_heads, groups, dt_rank)


def _mamba_params(cfg: _Cfg, hidden: int, model_type: str) -> int:
    """Parameters of one Mamba mixer (approximate: exact for the projections, which are > 99%
    of it; conv, dt, A, D and norm vectors follow the reference implementations)."""
    m = _mamba_dims(cfg, hidden, model_type)
    inner, state, conv = m.inner, m.state, m.conv
    if m.v1:
        return (
            hidden * 2 * inner  # in_proj
            + inner * (conv + 1)  # depthwise conv + bias
            + inner * (m.dt_rank + 2 * state)  # x_proj
            + m.dt_rank * inner
            + inner  # dt_proj
            + inner * state
            + inner  # A_log, D
            + inner * hidden  # out_proj
        )
    conv_dim = inner + 2 * m.groups * state
    return (
        hidden * (2 * inner + 2 * m.groups * state + m.n_heads)  # in_proj: z, x, B, C, dt
        + conv_dim * (conv + 1)  # depthwise conv + bias
        + 3 * m.n_heads  # dt_bias, A_log, D
        + inner  # gated RMSNorm
        + inner * hidden  # out_proj
    )


@dataclass(slots=True)
class _GdnDims:
    nk: int
    nv: int
    dk: int
    dv: int
    conv: int


def _gdn_dims(cfg: _Cfg) -> _GdnDims:
    return _GdnDims(
        nk=cfg.req_int(("linear_num_key_heads",), "the linear-attention key heads"),
        nv=cfg.req_int(("linear_num_value_heads",), "the linear-attention value heads"),
        dk=cfg.req_int(("linear_key_head_dim",), "the linear-attention key head size"),
        dv=cfg.req_int(("linear_value_head_dim",), "the linear-attention value head size"),
        conv=cfg.int_or(
            ("linear_conv_kernel_dim",), "the linear-attention conv kernel", 4, minimum=1
        ),
    )


def _gated_delta_net_params(cfg: _Cfg, hidden: int) -> int:
    """One Qwen3-Next / Qwen3.5 Gated DeltaNet (linear attention) mixer."""
    g = _gdn_dims(cfg)
    nk, nv, dk, dv = g.nk, g.nv, g.dk, g.dv
    return (
        hidden * (2 * nk * dk + 2 * nv * dv)  # in_proj_qkvz
        + hidden * 2 * nv  # in_proj_ba
        + (2 * nk * dk + nv * dv) * g.conv  # conv1d
        + 2 * nv  # dt_bias, A_log
        + dv  # norm
        + nv * dv * hidden  # out_proj
    )


@dataclass(slots=True)
class _KdaDims:
    heads: int
    head_dim: int
    conv: int


def _kda_dims(cfg: _Cfg) -> _KdaDims:
    linear = cfg.obj("linear_attn_config")
    if linear is None:  # transformers 5 KimiLinearConfig: flat linear_* keys
        return _KdaDims(
            heads=cfg.req_int(("linear_num_heads",), "the KDA heads"),
            head_dim=cfg.req_int(("linear_head_dim",), "the KDA head size"),
            conv=cfg.int_or(("linear_conv_kernel_dim",), "the KDA conv kernel", 4, minimum=1),
        )
    path = cfg.where("linear_attn_config")

    def get(key: str, what: str, default: int | None = None) -> int:
        value = linear.get(key, default)
        if value is None:
            raise cfg.error(f"{path}.{key}", f"is missing; expected {what} as a positive integer")
        return cfg.to_int(value, f"{path}.{key}", what, 1)

    return _KdaDims(
        heads=get("num_heads", "the KDA heads"),
        head_dim=get("head_dim", "the KDA head size"),
        conv=get("short_conv_kernel_size", "the KDA conv kernel", 4),
    )


def _short_conv_params(cfg: _Cfg, hidden: int) -> int:
    """One LFM2 short-convolution mixer: in_proj (B, C, x gates), the depthwise conv and
    out_proj (vLLM ShortConv)."""
    kernel = cfg.int_or(("conv_L_cache",), "the short-conv kernel", 3, minimum=1)
    bias = cfg.flag("conv_bias", False)
    return hidden * 3 * hidden + hidden * kernel + hidden * hidden + (4 * hidden if bias else 0)


def _kda_params(cfg: _Cfg, hidden: int) -> int:
    """One Kimi Delta Attention mixer (vLLM kimi_k3 KimiDeltaAttention): q/k/v/g and the
    low-rank forget gate (f_a, f_b) and beta projections, the short convs, A_log, dt_bias,
    the output norm and o_proj."""
    k = _kda_dims(cfg)
    proj = k.heads * k.head_dim
    return (
        hidden * (4 * proj + k.head_dim + k.heads)  # in_proj q, k, v, g, f_a, b
        + k.head_dim * proj  # f_b
        + proj  # dt_bias
        + 3 * proj * k.conv  # q/k/v short convs
        + k.heads  # A_log
        + k.head_dim  # output norm
        + proj * hidden  # o_proj
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
        raise cfg.error(
            path, f"must be a dtype such as 'bfloat16' or 'float16', got {_shown(value)}"
        )
    dtype = _WEIGHT_DTYPE_ALIASES[value.lower()]
    if dtype == "fp32":
        return "bf16"
    if dtype not in ("bf16", "fp16"):
        raise cfg.error(path, f"must be a 16/32-bit float dtype, got {_shown(value)}")
    return dtype


def _quantization(cfg: _Cfg, sidecar: _Sidecar | None) -> tuple[str | None, str, str | None]:
    """(weight dtype or None, quantized scope, KV dtype or None) from the checkpoint's
    quantization_config / compression_config and a ModelOpt hf_quant_config.json."""
    if sidecar is not None:
        content, sidecar_path = sidecar
        q = content.get("quantization", content)
        if not isinstance(q, Mapping):
            raise ConfigError(f"{sidecar_path}: field 'quantization' must be an object")
        kv = _modelopt_kv(
            q.get("kv_cache_quant_algo"),
            f"{sidecar_path}: field 'quantization.kv_cache_quant_algo'",
        )
        algo = q.get("quant_algo")
        if algo is not None:
            where = f"{sidecar_path}: field 'quantization.quant_algo'"
            if isinstance(algo, str) and algo.upper() == "MIXED_PRECISION":
                return _modelopt_mixed(cfg, q, where), "linear", kv
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
        raise cfg.error(f"{path}.quant_method", f"must be a string, got {_shown(method)}")
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
        for bits_key, dtype in (("load_in_4bit", "int4"), ("load_in_8bit", "int8")):
            flag = qc.get(bits_key, False)
            if not isinstance(flag, bool):
                raise cfg.error(f"{path}.{bits_key}", f"must be true or false, got {_shown(flag)}")
            if flag:
                return dtype, "linear", None
        raise cfg.error(path, "(bitsandbytes) needs load_in_4bit or load_in_8bit")
    if m == "compressed-tensors":
        return _compressed_tensors(cfg, qc, path)
    if m == "modelopt" or m == "modelopt-fp4":
        nested = qc.get("quantization")
        if nested is not None and not isinstance(nested, Mapping):
            raise cfg.error(f"{path}.quantization", f"must be an object, got {_json_type(nested)}")
        inner = nested or {}
        algo = qc.get("quant_algo") or inner.get("quant_algo")
        kv_algo = qc.get("kv_cache_quant_algo") or inner.get("kv_cache_quant_algo")
        # vLLM (utils/torch_utils.py get_kv_cache_quant_algo_string) reads kv_cache_scheme
        # first, from the nested block or the top level, then kv_cache_quant_algo.
        scheme = inner.get("kv_cache_scheme")
        if scheme is None:
            scheme = qc.get("kv_cache_scheme")
        if scheme is not None:
            kv = _modelopt_kv_scheme(cfg, scheme, f"{path}.kv_cache_scheme")
        else:
            kv = _modelopt_kv(kv_algo, f"{cfg.label}: field '{path}.kv_cache_quant_algo'")
        where = f"{cfg.label}: field '{path}.quant_algo'"
        if isinstance(algo, str) and algo.upper() == "MIXED_PRECISION":
            return _modelopt_mixed(cfg, {**inner, **qc}, where), "linear", kv
        return _modelopt_algo(algo, where), "linear", kv
    if m == "quark":
        return _quark(cfg, qc, path)
    raise cfg.error(
        where,
        f"is {_shown(method)}, which pdtp cannot size; expected fp8, mxfp4, awq, gptq, "
        f"compressed-tensors, modelopt, quark or bitsandbytes (or pass weight_dtype=...)",
    )


def _int_bits(cfg: _Cfg, bits: object, path: str) -> str:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (2, 3, 4, 8):
        raise cfg.error(path, f"must be 2, 3, 4 or 8, got {_shown(bits)}")
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
        if kind not in ("int", "float"):
            raise cfg.error(
                f"{path}.config_groups.{gname}.weights.type",
                f"must be 'int' or 'float', got {_shown(kind)}",
            )
        gp = f"{path}.config_groups.{gname}.weights"
        if bits == 8:
            dtypes.add("fp8" if kind == "float" else "int8")
        elif bits == 4:
            dtypes.add("fp4" if kind == "float" else "int4")
        else:
            raise cfg.error(f"{gp}.num_bits", f"must be 4 or 8, got {_shown(bits)}")
    # Mixed groups: size by the widest, so the memory check stays conservative.
    order = ["fp4", "int4", "int8", "fp8"]
    wd = max(dtypes, key=order.index)
    kv = _kv_scheme(cfg, qc.get("kv_cache_scheme"), f"{path}.kv_cache_scheme")
    return wd, "linear", kv


def _modelopt_mixed(cfg: _Cfg, q: Mapping[str, Any], where: str) -> str:
    """ModelOpt MIXED_PRECISION: per-layer algorithms (``quantized_layers``) or
    compressed-tensors-style ``config_groups``. Sized by the widest, so memory checks stay
    conservative."""
    algos = []
    layers = q.get("quantized_layers")
    if isinstance(layers, Mapping):
        for name, spec in layers.items():
            algo = spec.get("quant_algo") if isinstance(spec, Mapping) else None
            algos.append(_modelopt_algo(algo, f"{where} (quantized_layers.{name}.quant_algo)"))
    if not algos and isinstance(q.get("config_groups"), Mapping):
        return _compressed_tensors(cfg, q, where.rsplit(".", 1)[0])[0]
    if not algos:
        raise ConfigError(
            f"{where} is 'MIXED_PRECISION' but neither quantized_layers nor config_groups says "
            f"how the layers are stored; expected one of them"
        )
    order = ["fp4", "int4", "int8", "fp8"]
    return max(algos, key=order.index)


def _modelopt_algo(algo: object, where: str) -> str:
    table = {
        "W4A16_NVFP4": "fp4",
        "MXFP8": "fp8",
        "NVFP4_AWQ": "fp4",
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
        raise ConfigError(f"{where} is {_shown(algo)}; expected one of {sorted(table)}")
    return table[algo.upper()]


def _modelopt_kv(algo: object, where: str = "kv_cache_quant_algo") -> str | None:
    """ModelOpt's KV-cache algorithm: FP8 caches (NVFP4 KV is sized as FP8, the nearest
    cache dtype pdtp models); none for null / "NONE"."""
    if algo is None or (isinstance(algo, str) and algo.upper() in ("", "NONE")):
        return None
    if isinstance(algo, str) and algo.upper() in ("FP8", "NVFP4", "NVFP4_KV", "FP8_KV"):
        return "fp8"
    raise ConfigError(
        f"{where} is {_shown(algo)}; expected 'FP8', 'NVFP4' or null (KV-cache quantization)"
    )


def _modelopt_kv_scheme(cfg: _Cfg, scheme: object, path: str) -> str | None:
    """A ModelOpt ``kv_cache_scheme`` as vLLM reads it (get_kv_cache_quant_algo_string): a
    string names the cache format ("FP8", "NVFP4", any case); an object says it in
    compressed-tensors terms (static 8-bit float = FP8, 4-bit float = NVFP4). vLLM keeps any
    other value at the model dtype (it logs a warning and uses "auto"), and so does pdtp.
    NVFP4 caches are sized as FP8, the nearest cache dtype pdtp models."""
    if isinstance(scheme, str):
        return "fp8" if scheme.lower() in ("fp8", "nvfp4") else None
    if not isinstance(scheme, Mapping):
        raise cfg.error(path, f"must be a string, an object or null, got {_json_type(scheme)}")
    bits, kind = scheme.get("num_bits"), scheme.get("type")
    # An object that names no format is a corrupt config, not a cache at the model dtype.
    if not isinstance(bits, int) or isinstance(bits, bool) or kind not in ("float", "int"):
        raise cfg.error(
            path,
            f"must name num_bits (an integer) and type ('float' or 'int'), got "
            f"num_bits={_shown(bits)}, type={_shown(kind)}",
        )
    if kind == "float" and (bits == 4 or (bits == 8 and scheme.get("dynamic") is False)):
        return "fp8"
    return None


def _kv_scheme(cfg: _Cfg, scheme: object, path: str) -> str | None:
    """compressed-tensors kv_cache_scheme: 8-bit caches are FP8."""
    if scheme is None:
        return None
    if not isinstance(scheme, Mapping):
        raise cfg.error(path, f"must be an object or null, got {_json_type(scheme)}")
    bits = scheme.get("num_bits")
    if isinstance(bits, bool) or bits not in (8, 16):
        raise cfg.error(f"{path}.num_bits", f"must be 8 or 16, got {_shown(bits)}")
    return "fp8" if bits == 8 else None


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
            f"is {_shown(dtype)}; expected fp8_e4m3, fp4, int8 or int4",
        )
    kv = None
    kv_cfg = qc.get("kv_cache_quant_config")
    if isinstance(kv_cfg, Mapping) and kv_cfg:
        kv = "fp8"
    return wd, "linear", kv
