"""DeepSeek-V4 (``model_type: deepseek_v4``) as vLLM 0.33 loads it and sizes its KV cache.

Every decoder layer has a sliding-window attention branch over the last ``sliding_window``
tokens and, by its layer type, a compressor: C4 layers ("compressed_sparse_attention") keep one
latent per 4 tokens plus Lightning-Indexer keys that choose ``index_topk`` of them, C128 layers
("heavily_compressed_attention") one latent per 128 tokens, "sliding_attention" layers none.
The sources (vLLM 0.33.0 wheel; transformers ``configuration_deepseek_v4.py``) are listed in
``docs/deepseek-v4.md`` with the arithmetic; the numbers here follow them:

- config: transformers ``DeepseekV4Config.__post_init__`` turns the checkpoint's per-layer
  ``compress_ratios`` (0/4/128, one more entry than layers: the MTP layer's) into
  ``layer_types`` truncated to ``num_hidden_layers``, and ``num_hash_layers`` into
  ``mlp_layer_types`` (hash-routed MoE first, all layers MoE);
- KV caches (``models/deepseek_v4/attention.py`` ``get_kv_cache_spec``, ``compressor.py``
  ``CompressorStateCache``, ``v1/attention/backends/mla/sparse_swa.py``
  ``DeepseekV4SWACache``, ``v1/kv_cache_interface.py`` page sizes): each cache is one
  vLLM KV-cache spec whose page holds ``block_size / tokens_per_state`` states, rounded up to
  the layout's alignment (576 B for the ``fp8_ds_mla`` layout, 512 B for plain rows);
- the default FlashMLA backend (Hopper, Blackwell SM100) stores ``fp8_ds_mla``: 584 B per
  latent (448 fp8 NoPE + 64 bf16 RoPE + 8 scale bytes), whatever ``--kv-cache-dtype`` says
  (``_resolve_dsv4_kv_cache_dtype`` forces fp8). pdtp's ``kv_dtype="bf16"`` is the plain bf16
  row layout of the FlashInfer DSv4 backend (``--attention-backend
  FLASHINFER_MLA_SPARSE_DSV4``): 1,024 B per latent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .errors import ConfigError

if TYPE_CHECKING:
    from ._model import AttentionGroup, Model, _Cfg

#: transformers ``_COMPRESS_RATIO_TO_LAYER_TYPE``: the ratios a DeepSeek-V4 layer can have.
LAYER_TYPES: Final[Mapping[int, str]] = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}
_RATIO_OF_TYPE: Final[Mapping[str, int]] = {v: k for k, v in LAYER_TYPES.items()}
MLP_LAYER_TYPES: Final[tuple[str, ...]] = ("hash_moe", "moe")
#: transformers' defaults when a config omits them (``default_compress_rates``,
#: ``default_num_hash_layers``).
DEFAULT_NUM_HASH_LAYERS: Final = 3

# vLLM 0.33 page geometry (tokens per page) of each cache.
SWA_BLOCK: Final = 64  # DeepseekV4SWACache(block_size=64)
COMPRESSED_BLOCK: Final = 256  # DeepseekV4SparseMLABackend.get_supported_kernel_block_sizes
STATE_BLOCK: Final[Mapping[int, int]] = {4: 4, 128: 8}  # CompressorStateCache.block_size
#: fp8_ds_mla: 448 B NoPE fp8 + 128 B RoPE bf16 + 8 B UE8M0 scales per latent.
FP8_DS_MLA_BYTES: Final = 584
FP8_DS_MLA_ALIGNMENT: Final = 576
PLAIN_ALIGNMENT: Final = 512
#: The indexer's key cache: fp8 values plus one fp32 scale per 128 (``quant_block_size``).
INDEX_QUANT_BLOCK: Final = 128


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def page_bytes(content_bytes: int, block_size: int, tokens_per_state: int, fp8: bool) -> int:
    """vLLM's ``page_size_bytes`` of one layer's page: ``block_size // tokens_per_state``
    states of ``content_bytes``, padded to the layout's alignment
    (``_apply_alignment_padding``)."""
    states = block_size // tokens_per_state
    return _round_up(states * content_bytes, FP8_DS_MLA_ALIGNMENT if fp8 else PLAIN_ALIGNMENT)


def layer_ratios(cfg: _Cfg, num_layers: int) -> list[int]:
    """Each decoder layer's compression ratio (0 = sliding window only), read as
    transformers' DeepseekV4Config does: ``layer_types`` when given, else the legacy
    ``compress_ratios`` list, truncated to ``num_hidden_layers``."""
    types = cfg.seq("layer_types")
    if types is not None:
        path = cfg.where("layer_types")
        if len(types) != num_layers:
            raise cfg.error(
                path, f"has {len(types)} entries; expected num_hidden_layers ({num_layers})"
            )
        rates = cfg.obj("compress_rates")
        out = []
        for i, t in enumerate(types):
            if not isinstance(t, str) or t not in _RATIO_OF_TYPE:
                raise cfg.error(
                    f"{path}[{i}]", f"is {t!r}; expected one of {sorted(_RATIO_OF_TYPE)}"
                )
            ratio = _RATIO_OF_TYPE[t]
            if rates is not None and t in rates and t != "sliding_attention":
                ratio = rates[t]
                if isinstance(ratio, bool) or ratio not in (4, 128):
                    raise cfg.error(
                        f"{cfg.where('compress_rates')}.{t}",
                        f"is {ratio!r}; vLLM 0.33's compressor supports 4 and 128",
                    )
            out.append(ratio)
        return out
    ratios = cfg.seq("compress_ratios")
    path = cfg.where("compress_ratios")
    if ratios is None:
        raise cfg.missing(
            ("compress_ratios", "layer_types"),
            "the per-layer compression ratios of DeepSeek-V4 (0, 4 or 128 per layer)",
        )
    if len(ratios) < num_layers:
        raise cfg.error(
            path, f"has {len(ratios)} entries; expected at least num_hidden_layers ({num_layers})"
        )
    out = []
    # Entries past num_hidden_layers describe the MTP layers (transformers truncates them).
    for i, r in enumerate(ratios):
        if isinstance(r, bool) or not isinstance(r, int) or r not in LAYER_TYPES:
            raise cfg.error(f"{path}[{i}]", f"is {r!r}; expected 0, 4 or 128")
        if i < num_layers:
            out.append(r)
    return out


def hash_layers(cfg: _Cfg, num_layers: int) -> int:
    """Layers whose MoE routes by a token-id hash table (``mlp_layer_types == 'hash_moe'``)."""
    types = cfg.seq("mlp_layer_types")
    if types is not None:
        path = cfg.where("mlp_layer_types")
        if len(types) != num_layers:
            raise cfg.error(
                path, f"has {len(types)} entries; expected num_hidden_layers ({num_layers})"
            )
        for i, t in enumerate(types):
            if not isinstance(t, str) or t not in MLP_LAYER_TYPES:
                raise cfg.error(
                    f"{path}[{i}]", f"is {t!r}; expected one of {list(MLP_LAYER_TYPES)}"
                )
        return sum(1 for t in types if t == "hash_moe")
    n = cfg.int_or(("num_hash_layers",), "the hash-routed MoE layers", DEFAULT_NUM_HASH_LAYERS)
    if n > num_layers:
        raise cfg.error(
            cfg.where("num_hash_layers"),
            f"is {n}; expected at most num_hidden_layers ({num_layers})",
        )
    return n


def kv_groups(
    ratios: list[int],
    *,
    head_dim: int,
    index_head_dim: int,
    index_topk: int,
    window: int,
    kv_dtype: str,
    index_heads: int = 0,
) -> list[dict[str, Any]]:
    """The KV-cache groups vLLM 0.33 allocates for these layers (one entry per cache kind),
    as :class:`~pdtp._model.AttentionGroup` fields (the Model record builds them: this module
    sits below it)."""
    fp8 = kv_dtype == "fp8"
    latent = FP8_DS_MLA_BYTES if fp8 else head_dim * 2
    n4 = sum(1 for r in ratios if r == 4)
    n128 = sum(1 for r in ratios if r == 128)

    def group(
        cache: str, layers: int, dim: int, content: int, block: int, tps: int, win: int
    ) -> dict[str, Any]:
        return {
            "kind": "mla",
            "cache": cache,
            "num_layers": layers,
            "num_kv_heads": 1,
            "head_dim": dim,
            "v_head_dim": 0,
            "window": win,
            "tokens_per_state": tps,
            "block_size": block,
            "page_bytes": page_bytes(content, block, tps, fp8),
            "topk": index_topk if cache == "index" else 0,
            "index_heads": index_heads if cache == "index" else 0,
        }

    groups = [group("swa", len(ratios), head_dim, latent, SWA_BLOCK, 1, window)]
    index_bytes = index_head_dim + index_head_dim // INDEX_QUANT_BLOCK * 4
    for ratio, count in ((4, n4), (128, n128)):
        if not count:
            continue
        groups.append(group("compressed", count, head_dim, latent, COMPRESSED_BLOCK, ratio, 0))
        if ratio == 4:
            groups.append(
                group("index", count, index_head_dim, index_bytes, COMPRESSED_BLOCK, 4, 0)
            )
        # Compressor states: kv + score, fp32, over coff·ratio tokens (coff 2 when the
        # windows overlap, ratio 4).
        coff = 2 if ratio == 4 else 1
        state_window = coff * ratio
        block = STATE_BLOCK[ratio]
        state_dim = 2 * coff * head_dim
        groups.append(group("state", count, state_dim, state_dim * 4, block, 1, state_window))
        if ratio == 4:
            idx_state = 2 * coff * index_head_dim
            groups.append(group("state", count, idx_state, idx_state * 4, block, 1, state_window))
    return groups


def regroup(groups: tuple[AttentionGroup, ...], kv_dtype: str) -> tuple[dict[str, Any], ...]:
    """The same layers' caches at another KV dtype (``Model.with_dtypes``)."""
    swa = next(g for g in groups if g.cache == "swa")
    compressed = {g.tokens_per_state: g.num_layers for g in groups if g.cache == "compressed"}
    index = next((g for g in groups if g.cache == "index"), None)
    ratios = (
        [0] * (swa.num_layers - sum(compressed.values()))
        + [4] * compressed.get(4, 0)
        + [128] * compressed.get(128, 0)
    )
    return tuple(
        kv_groups(
            ratios,
            head_dim=swa.head_dim,
            index_head_dim=index.head_dim if index else INDEX_QUANT_BLOCK,
            index_topk=index.topk if index else 1,
            window=swa.window,
            kv_dtype=kv_dtype,
            index_heads=index.index_heads if index else 0,
        )
    )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's ``_approximate_gcd`` (``v1/core/kv_cache_planning.py``): the chunk size in
    ``[lower_bound, max(values)]`` that pads ``values`` up to its multiples least, the larger
    on ties."""
    best, best_pad = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


class Packing(NamedTuple):
    """How vLLM 0.33's KV-cache planner packs DeepSeek-V4's mixed page sizes into one pool:
    every block id holds ``bytes_per_block`` (the widest group's pages of all its layers), and
    each bucket of caches of one kind (``(block_size, window)``, window 0 = grows with the
    context) is ``groups`` KV-cache groups, each drawing its own blocks from that pool."""

    bytes_per_block: int
    #: (block_size, window, groups) per bucket, in registration order.
    buckets: tuple[tuple[int, int, int], ...]

    def pages(self, block_size: int, window: int, tokens: int) -> int:
        """Blocks one group of a bucket holds for a request of ``tokens`` (one in flight):
        ``cdiv(tokens, B)`` when it grows with the context, else vLLM's sliding-window
        admission bound ``cdiv(min(w - 1 + 1, tokens), B) + 1``."""
        if not window:
            return -(-tokens // block_size)
        return -(-min(window, tokens) // block_size) + 1

    def sequence_bytes(self, tokens: int) -> int:
        """Bytes one request of ``tokens`` takes from the pool (vLLM's
        ``_max_memory_usage_bytes_from_groups``: blocks summed over the groups, times the
        bytes per block)."""
        blocks = sum(n * self.pages(b, w, tokens) for b, w, n in self.buckets)
        return self.bytes_per_block * blocks


def packing(groups: tuple[AttentionGroup, ...]) -> Packing:
    """vLLM 0.33's grouping of these caches (``get_kv_cache_groups`` ->
    ``_get_packed_kv_cache_groups``; DeepSeek-V4's indexer backend declares only
    block-outermost layouts, so mixed pages pack side by side in one block), restated for
    the cache kinds pdtp keeps: layers bucket by spec type (block size, window); a bucket whose
    page sizes have equal layer counts is "balanced" and splits into groups of
    ``repeats`` layers per page size, ``repeats`` the approximate gcd of the balanced buckets'
    layer counts (at least the largest mixed balanced bucket's); other buckets stay whole;
    a block holds the widest group. Checked against vLLM's own functions
    (tests/data/vllm_dsv4_pages.json ``packing``, tools/vllm_dsv4_pages.py). Every DeepSeek-V4
    spec's block-stride alignment is 1 (kernel block = block size), so no rounding follows."""
    buckets: dict[tuple[int, int], dict[int, int]] = {}
    for g in groups:
        pages = buckets.setdefault((g.block_size, g.window), {})
        pages[g.page_bytes] = pages.get(g.page_bytes, 0) + g.num_layers
    if len(buckets) == 1:
        # One spec type (sliding-only layers): one group of every layer
        # (``_get_kv_cache_groups_uniform_spec`` / ``_uniform_type``), nothing to pack.
        (((block, window), pages),) = buckets.items()
        return Packing(sum(page * n for page, n in pages.items()), ((block, window, 1),))
    stats = []
    for key, pages in buckets.items():
        counts = list(pages.values())
        stats.append((key, pages, len(set(counts)) == 1, max(counts)))
    floor = max((top for _, pages, bal, top in stats if bal and len(pages) > 1), default=0)
    repeats = _approximate_gcd([top for *_, bal, top in stats if bal], floor) if floor else None

    def split(balanced: bool, top: int) -> int:
        return -(-top // repeats) if balanced and repeats is not None else 1

    def widest(pages: dict[int, int], n: int) -> int:
        return sum(-(-count // n) * page for page, count in pages.items())

    def is_state(key: tuple[int, int]) -> bool:
        return repeats is None and key[1] > 0  # unsplit sliding-window buckets

    anchor = max(
        widest(pages, sum(pages.values()) if is_state(key) else split(bal, top))
        for key, pages, bal, top in stats
    )
    out = []
    for key, pages, bal, top in stats:
        n = split(bal, top)
        if is_state(key):
            first = next(iter(pages))
            n = max(n, -(-sum(pages.values()) // max(anchor // first, 1)))
        out.append((key[0], key[1], n))
    per_block = max(widest(pages, n) for (_, pages, _, _), (_, _, n) in zip(stats, out))
    return Packing(per_block, tuple(out))


def perf_kv(groups: tuple[AttentionGroup, ...], kv_dtype_bytes: int) -> tuple[float, float]:
    """(bytes per token of the caches that grow with the context, bytes per sequence of the
    windowed ones once their windows are full), as vLLM's pool spends them (:func:`packing`:
    every group's block costs the widest group's bytes): what the Rust core's memory model
    takes. ``kv_dtype_bytes`` is unused: the pages already say their bytes."""
    del kv_dtype_bytes
    pack = packing(groups)
    per_token = sum(n * pack.bytes_per_block / b for b, w, n in pack.buckets if not w)
    windowed = sum(n * pack.pages(b, w, 1 << 40) for b, w, n in pack.buckets if w)
    return float(per_token), float(windowed * pack.bytes_per_block)


def sparse_attention(model: Model) -> dict[str, float]:
    """The inputs of the core's ``compressed_attention_decode`` (``sparse_*`` keys of
    :func:`pdtp.perf.model_inputs`): layer counts, the window, top-k, the stored bytes of a
    latent and of an index key, the indexer's FLOPs per key, and the compressor states'
    bytes per decode token (each state row written once, a window of ``coff · ratio`` rows
    read once per ``ratio`` tokens: ``(1 + coff)`` rows a token)."""
    groups = model.attention_groups
    swa = next(g for g in groups if g.cache == "swa")
    compressed = {g.tokens_per_state: g for g in groups if g.cache == "compressed"}
    index = next((g for g in groups if g.cache == "index"), None)
    n4 = compressed[4].num_layers if 4 in compressed else 0
    n128 = compressed[128].num_layers if 128 in compressed else 0
    latent = FP8_DS_MLA_BYTES if model.kv_dtype == "fp8" else swa.head_dim * 2
    idx_dim = index.head_dim if index else 0
    state = 0.0
    for g in groups:
        if g.cache != "state":
            continue
        row = g.page_bytes / g.block_size  # one state (padding spread over the page)
        coff = 2 if g.window == 8 else 1  # C4 windows overlap (coff 2, window 8), C128 not
        state += g.num_layers * row * (1 + coff)
    return {
        "sparse_layers": float(swa.num_layers),
        "sparse_window": float(swa.window),
        "sparse_c4_layers": float(n4),
        "sparse_c128_layers": float(n128),
        "sparse_topk": float(index.topk if index else 0),
        "sparse_latent_bytes": float(latent),
        "sparse_index_key_bytes": float(idx_dim + idx_dim // INDEX_QUANT_BLOCK * 4),
        "sparse_index_flops_per_key": float(2 * (index.index_heads if index else 0) * idx_dim),
        "sparse_state_bytes_per_token": state,
    }


def attention_reads(model: Model) -> float:
    """Latents one decode step's attention reads per layer, averaged over the layers: the
    sliding window everywhere, plus the indexer's top-k on C4 layers (an approximation of
    the sparse kernels for the performance model; C128 layers' few compressed latents and the
    indexer's own key scan are left out)."""
    swa = next(g for g in model.attention_groups if g.cache == "swa")
    index = [g for g in model.attention_groups if g.cache == "index"]
    selected = sum(g.topk * g.num_layers for g in index)
    return swa.window + selected / max(model.num_attention_layers, 1)


def params(
    cfg: _Cfg,
    *,
    hidden: int,
    heads: int,
    vocab: int,
    ratios: list[int],
    num_hash: int,
    tied: bool,
) -> dict[str, int]:
    """Parameters vLLM's DeepseekV4ForCausalLM allocates (MTP layers excluded: they load only
    with speculative decoding), split as the Model record needs."""
    head_dim = cfg.req_int(("head_dim",), "the attention head size (latent width)")
    q_lora = cfg.req_int(("q_lora_rank",), "the query low-rank width")
    o_lora = cfg.req_int(("o_lora_rank",), "the output low-rank width per group")
    o_groups = cfg.req_int(("o_groups",), "the output-projection head groups")
    idx_heads = cfg.req_int(("index_n_heads",), "the indexer query heads")
    idx_dim = cfg.req_int(("index_head_dim",), "the indexer head size")
    experts = cfg.req_int(("n_routed_experts",), "the routed experts")
    shared = cfg.int_or(("n_shared_experts",), "the shared experts", 0)
    top_k = cfg.req_int(("num_experts_per_tok",), "the experts per token")
    inter = cfg.req_int(("moe_intermediate_size",), "the expert MLP width")
    hc = cfg.req_int(("hc_mult",), "the hyper-connection expansion")
    if heads % o_groups:
        raise cfg.error(
            cfg.where("o_groups"), f"({o_groups}) must divide num_attention_heads ({heads})"
        )
    if top_k > experts:
        raise cfg.error(
            cfg.where("num_experts_per_tok"),
            f"({top_k}) must not exceed n_routed_experts ({experts})",
        )
    noaux = cfg.text("topk_method") == "noaux_tc"

    def compressor(dim: int, ratio: int) -> int:
        coff = 2 if ratio == 4 else 1
        # ape + fused_wkv_wgate + norm
        return ratio * coff * dim + hidden * 2 * coff * dim + dim

    mix_hc = (2 + hc) * hc
    hc_dim = hc * hidden
    attention = per_layer_experts = per_layer_other = 0
    routed_one = 3 * hidden * inter
    for i, ratio in enumerate(ratios):
        a = (
            hidden * (q_lora + head_dim)  # fused_wqa_wkv
            + q_lora
            + head_dim  # q_norm, kv_norm
            + q_lora * heads * head_dim  # wq_b
            + (heads * head_dim // o_groups) * (o_groups * o_lora)  # wo_a
            + o_groups * o_lora * hidden  # wo_b
            + heads  # attn_sink
        )
        if ratio:
            a += compressor(head_dim, ratio)
        if ratio == 4:
            a += q_lora * idx_heads * idx_dim + hidden * idx_heads + compressor(idx_dim, 4)
        attention += a
        gate = hidden * experts
        gate += vocab * top_k if i < num_hash else (experts if noaux else 0)
        per_layer_other += (
            gate
            + 3 * hidden * inter * shared
            + 2 * hidden  # attn_norm, ffn_norm
            + 2 * mix_hc * hc_dim
            + 2 * mix_hc
            + 2 * 3  # hc fn, base, scale (attn and ffn)
        )
        per_layer_experts += experts * routed_one
    embedding = vocab * hidden * (1 if tied else 2)
    head = hidden + hc * hc_dim + hc + 1  # final norm, hc_head fn/base/scale
    total = attention + per_layer_other + per_layer_experts + embedding + head
    n = len(ratios)
    active_experts = n * top_k * routed_one
    return {
        "total": total,
        "experts": per_layer_experts,
        "active": total - per_layer_experts + active_experts,
        "embedding": embedding,
    }


def weight_format(cfg: _Cfg) -> tuple[str, str]:
    """(weight_dtype, quantized_scope) of the official checkpoints: ``quant_method: fp8``
    block-scaled linear layers with ``expert_dtype`` experts (vLLM DeepseekV4FP8Config:
    ``"fp4"`` = MXFP4, the default, or ``"fp8"``)."""
    expert = cfg.text("expert_dtype")
    if expert is None:
        expert = "fp4"
    if expert not in ("fp4", "fp8"):
        raise cfg.error(
            cfg.where("expert_dtype"), f"is {expert!r}; vLLM 0.33 supports 'fp4' and 'fp8'"
        )
    return expert, "experts+fp8" if expert == "fp4" else "linear"


def check_shape(cfg: _Cfg, data: Mapping[str, Any]) -> None:
    """Fields whose values vLLM 0.33's DeepSeek-V4 kernels fix."""
    head_dim = cfg.req_int(("head_dim",), "the attention head size (latent width)")
    rope = cfg.req_int(("qk_rope_head_dim",), "the RoPE part of the head")
    if rope >= head_dim:
        raise cfg.error(
            cfg.where("qk_rope_head_dim"), f"({rope}) must be below head_dim ({head_dim})"
        )
    kv_heads = cfg.int_or(("num_key_value_heads",), "the KV heads", 1, minimum=1)
    if kv_heads != 1:
        raise ConfigError(
            f"{cfg.label}: field '{cfg.where('num_key_value_heads')}' is {kv_heads}; DeepSeek-V4 "
            f"keeps one shared latent (1 KV head)"
        )


#: The vLLM release whose connectors pdtp derived DeepSeek-V4's P/D transfer from.
CONNECTORS_DERIVED: Final = "0.33.0"


def connector_gap(engine: str, connector: str, rules_version: str) -> str | None:
    """None where pdtp derived from vLLM's code how ``connector`` moves DeepSeek-V4's caches
    (vLLM 0.33.0's NIXL and MoRIIO; docs/deepseek-v4.md "P/D transfer"), else what is missing.

    vLLM 0.33.0, hybrid KV-cache manager on (both connectors implement ``SupportsHMA``, so
    ``config/vllm.py:2264`` keeps it; the packing is :func:`packing`'s):

    - every KV-cache group is a transfer group (``enable_kv_transfer`` defaults to True,
      ``v1/kv_cache_interface.py:1562``): all seven caches move, the windowed groups their
      window's blocks;
    - NIXL (``NixlConnector`` = ``NixlPullConnector``, ``nixl/connector.py:432``): the
      block-outermost layout (``nixl/base_worker.py:1023``) registers each shared packed row
      as one region, a block one descriptor (``:1693``; "restrict to MLA (DSv4) where kv is
      replicated", ``:1709``), so a block moves the whole row (the pool's bytes per block);
      the latents are replicated, so every TP pair maps as MLA, and the handshake's checks
      (``_validate_remote_agent_handshake``, ``:2691``) exempt MLA from head splitting and
      layout matching: valid;
    - MoRIIO READ: the scheduler takes full-attention and ``SlidingWindowSpec`` groups under
      the hybrid manager (``moriio/moriio_connector.py:612-635``; DeepSeek-V4's scheduler
      groups are ``MLAAttentionSpec`` and ``SlidingWindowMLASpec``), the worker registers
      every layer's ``[B, 1, N, C]`` page (``moriio_layout.py:300``) with per-layer block
      sizes allowed under the hybrid manager (``moriio_connector.py:2582``): valid;
    - MoRIIO WRITE: ``moriio_connector.py:640`` raises ``NotImplementedError`` ("MoRIIO WRITE
      mode does not support sliding-window cache groups ...") at engine start, as for every
      sliding-window model (pdtp refuses it through ``pdtp.layout.is_sliding``)."""
    if engine != "vllm":
        return (
            f"how {connector}'s {engine} release moves them is not derived (pdtp derived vLLM "
            f"{CONNECTORS_DERIVED}'s NIXL and MoRIIO)"
        )
    if rules_version != CONNECTORS_DERIVED:
        return (
            f"pdtp derived how vLLM {CONNECTORS_DERIVED}'s NIXL and MoRIIO move them, not "
            f"vLLM {rules_version}'s {connector}"
        )
    return None
