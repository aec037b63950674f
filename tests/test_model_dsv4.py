"""DeepSeek-V4 sized as vLLM 0.33 allocates it (docs/deepseek-v4.md).

The expected numbers are worked out here from vLLM's own formulas (page = states per page ×
bytes per state, rounded up to the layout alignment; a windowed cache holds at most
ceil((w - 1) / B) + 1 pages), never read back from pdtp.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from typing import Any

import pytest

import pdtp
from pdtp import perf
from pdtp._model import Model
from pdtp.errors import ConfigError, PdtpError

HF = pathlib.Path(__file__).parent / "data" / "hf-configs"
FLASH = HF / "deepseek-ai--DeepSeek-V4-Flash"
PRO = HF / "deepseek-ai--DeepSeek-V4-Pro"


def _config(folder: pathlib.Path = FLASH) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "config.json").read_text())
    return data


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# vLLM 0.33 geometry (sparse_swa.py DeepseekV4SWACache, sparse_mla.py block 256,
# compressor.py CompressorStateCache, attention.py indexer k_cache_head_dim).
FP8_LATENT, BF16_LATENT = 584, 512 * 2
INDEX = 128 + 128 // 128 * 4  # fp8 keys + one fp32 scale per 128
C4_STATE = 2 * 2 * 512 * 4  # kv + score, coff 2, fp32
C4_INDEX_STATE = 2 * 2 * 128 * 4
C128_STATE = 2 * 1 * 512 * 4


def _pages(fp8: bool) -> dict[str, int]:
    align = 576 if fp8 else 512
    latent = FP8_LATENT if fp8 else BF16_LATENT
    return {
        "swa": _round_up(64 * latent, align),
        "c4": _round_up(256 // 4 * latent, align),
        "c128": _round_up(256 // 128 * latent, align),
        "index": _round_up(256 // 4 * INDEX, align),
        "c4_state": _round_up(4 * C4_STATE, align),
        "c4_index_state": _round_up(4 * C4_INDEX_STATE, align),
        "c128_state": _round_up(8 * C128_STATE, align),
    }


def _by_hand(tokens: int, n_swa: int, n4: int, n128: int, fp8: bool) -> int:
    """Bytes of cache content one sequence has on one rank, cache by cache (what its pages
    hold; vLLM's pool spends more: see the packing tests)."""
    p = _pages(fp8)
    full = _cdiv(tokens, 256)

    def windowed(window: int, block: int) -> int:
        return min(_cdiv(tokens, block), _cdiv(window - 1, block) + 1)

    return (
        n_swa * windowed(128, 64) * p["swa"]
        + n4 * full * (p["c4"] + p["index"])
        + n4 * windowed(8, 4) * (p["c4_state"] + p["c4_index_state"])
        + n128 * full * p["c128"]
        + n128 * windowed(128, 8) * p["c128_state"]
    )


# ------------------------------------------------------------------------------------------
# Layers and caches
# ------------------------------------------------------------------------------------------


def test_layer_types_follow_transformers_truncation_of_compress_ratios() -> None:
    ratios = _config()["compress_ratios"]
    # One entry per layer plus the MTP layer's, which transformers drops.
    assert len(ratios) == 44
    layers = ratios[:43]
    flash = Model.from_hf_config(FLASH)
    compressed = {
        g.tokens_per_state: g.num_layers for g in flash.attention_groups if g.cache == "compressed"
    }
    assert compressed == {4: layers.count(4), 128: layers.count(128)} == {4: 21, 128: 20}
    swa = [g for g in flash.attention_groups if g.cache == "swa"]
    assert [(g.num_layers, g.window) for g in swa] == [(43, 128)]
    pro = Model.from_hf_config(PRO)
    assert {
        g.tokens_per_state: g.num_layers for g in pro.attention_groups if g.cache == "compressed"
    } == {4: 30, 128: 31}


def test_pages_are_vllm_page_sizes_with_alignment() -> None:
    m = Model.from_hf_config(FLASH)
    p = _pages(fp8=True)
    got = {(g.cache, g.tokens_per_state, g.head_dim): g.page_bytes for g in m.attention_groups}
    assert got == {
        ("swa", 1, 512): p["swa"],
        ("compressed", 4, 512): p["c4"],
        ("compressed", 128, 512): p["c128"],
        ("index", 4, 128): p["index"],
        ("state", 1, 2048): p["c4_state"],
        ("state", 1, 512): p["c4_index_state"],
        ("state", 1, 1024): p["c128_state"],
    }
    # fp8_ds_mla pads 64 × 584 = 37,376 to 65 × 576.
    assert p["swa"] == 37_440 and p["c128"] == 1_728


VLLM_PAGES = json.loads((HF.parent / "vllm_dsv4_pages.json").read_text())["pages"]
_GOLDEN_NAME = {
    ("swa", 1, 512): "swa",
    ("compressed", 4, 512): "compressed4",
    ("compressed", 128, 512): "compressed128",
    ("index", 4, 128): "index4",
    ("state", 1, 2048): "state4",
    ("state", 1, 512): "index_state4",
    ("state", 1, 1024): "state128",
}


@pytest.mark.parametrize(("kv", "layout"), [("fp8", "fp8_ds_mla"), ("bf16", "bf16")])
def test_pages_match_vllm_spec_classes(kv: str, layout: str) -> None:
    """The page sizes and windowed page counts vLLM's own KVCacheSpec classes compute
    (tests/data/vllm_dsv4_pages.json, tools/vllm_dsv4_pages.py)."""
    m = Model.from_hf_config(FLASH, kv_dtype=kv)
    golden = VLLM_PAGES[layout]
    seen = set()
    for g in m.attention_groups:
        name = _GOLDEN_NAME[(g.cache, g.tokens_per_state, g.head_dim)]
        seen.add(name)
        spec = golden[name]
        assert (g.block_size, g.page_bytes) == (spec["block_size"], spec["page_size_bytes"])
        assert g.tokens_per_state == spec["tokens_per_state"]
        if spec["window_pages"] is not None:
            assert g.window == spec["sliding_window"]
            pages = g.sequence_bytes(1 << 20, m.kv_dtype_bytes) // (g.page_bytes * g.num_layers)
            assert pages == spec["window_pages"]
        else:
            assert g.window == 0
    assert seen == set(golden)


VLLM_PACKING = json.loads((HF.parent / "vllm_dsv4_pages.json").read_text())["packing"]
_PACKED = [
    (folder, kv, f"{folder.name.split('--')[1]}/{layout}")
    for folder in (FLASH, PRO)
    for kv, layout in (("fp8", "fp8_ds_mla"), ("bf16", "bf16"))
]


def _vllm_bytes(key: str, tokens: int) -> int:
    """Bytes a request of ``tokens`` takes from vLLM's pool, from the groups vLLM's planner
    made (tests/data/vllm_dsv4_pages.json ``packing``): every group's block costs the pool's
    bytes per block; a growing group holds cdiv(tokens, B) blocks, a windowed one its
    saturated window's."""
    pack = VLLM_PACKING[key]
    saturated = pack["requests"][str(1 << 20)]["blocks"]
    blocks = sum(
        _cdiv(tokens, g["block_size"]) if g["sliding_window"] is None else full
        for g, full in zip(pack["groups"], saturated)
    )
    return int(pack["bytes_per_block"]) * blocks


@pytest.mark.parametrize(("folder", "kv", "key"), _PACKED)
def test_sequence_bytes_are_what_vllms_planner_allocates(
    folder: pathlib.Path, kv: str, key: str
) -> None:
    """vLLM 0.33 packs the seven caches' four page sizes into one pool
    (``v1/core/kv_cache_planning.py`` ``_get_packed_kv_cache_groups``): one block id holds a
    page of every layer of the widest group, and every group's blocks come from that pool.
    pdtp's bytes per sequence are the bytes vLLM's own ``_max_memory_usage_bytes_from_groups``
    returns for the groups its ``get_kv_cache_groups`` made (tools/vllm_dsv4_pages.py), at
    every recorded context length; its groups and bytes per block are vLLM's."""
    from pdtp._model_dsv4 import packing

    m = Model.from_hf_config(folder, kv_dtype=kv)
    pack = VLLM_PACKING[key]
    for tokens, request in pack["requests"].items():
        assert m.kv_bytes_per_sequence(int(tokens)) == request["bytes"], tokens
        # Replicated on every TP rank (max_tp_shards=1).
        assert m.kv_bytes_per_sequence(int(tokens), tp=8) == request["bytes"]
    got = packing(m.attention_groups)
    assert got.bytes_per_block == pack["bytes_per_block"]
    driven = sorted(
        (g["block_size"], g["sliding_window"] or 0, sum(1 for h in pack["groups"] if h == g))
        for g in pack["groups"]
    )
    ours = sorted((b, w, 1) for b, w, n in got.buckets for _ in range(n))
    assert [(b, w) for b, w, _ in driven] == [(b, w) for b, w, _ in ours]
    # A GiB of pool is as many blocks as vLLM carves out of it.
    assert (1 << 30) // got.bytes_per_block == pack["blocks_per_gib"]


@pytest.mark.parametrize("mix", VLLM_PACKING["mixes"], ids=lambda m: str(len(m["compress_ratios"])))
def test_packing_of_other_layer_mixes_is_vllms(mix: dict[str, Any]) -> None:
    """Beyond the two real patterns: the Flash config with other compress_ratios (balanced
    and unbalanced buckets, no C4 or no C128 layers), against the bytes vLLM's own planner
    gives them (tools/vllm_dsv4_pages.py)."""
    from pdtp._model_dsv4 import packing

    c = _config()
    c["num_hidden_layers"] = len(mix["compress_ratios"])
    c["compress_ratios"] = [*mix["compress_ratios"], 0]
    c["num_hash_layers"] = min(c["num_hash_layers"], c["num_hidden_layers"])
    kv = "fp8" if mix["kv_cache_dtype"] == "fp8_ds_mla" else "bf16"
    m = Model.from_hf_config(c, kv_dtype=kv)
    assert packing(m.attention_groups).bytes_per_block == mix["bytes_per_block"]
    for tokens, expect in mix["request_bytes"].items():
        assert m.kv_bytes_per_sequence(int(tokens)) == expect, tokens


@pytest.mark.parametrize("tokens", [1, 7, 100, 128, 129, 8192, 131_072])
def test_packing_spends_at_least_the_content(tokens: int) -> None:
    for folder, n in ((FLASH, (43, 21, 20)), (PRO, (61, 30, 31))):
        m = Model.from_hf_config(folder)
        assert m.kv_dtype == "fp8"  # FlashMLA stores fp8_ds_mla whatever --kv-cache-dtype says
        key = f"{folder.name.split('--')[1]}/fp8_ds_mla"
        if tokens >= 128:  # every window full: vLLM's bound equals the pages' own
            assert m.kv_bytes_per_sequence(tokens) == _vllm_bytes(key, tokens)
        assert m.kv_bytes_per_sequence(tokens) >= _by_hand(tokens, *n, fp8=True)


def test_flash_at_8k_tokens_worked_out() -> None:
    # The content: swa 43·3·37,440 + C4 21·32·(37,440 + 8,640) + C4 states
    # 21·3·(32,832 + 8,640) + C128 20·32·1,728 + C128 state 20·17·32,832.
    assert _by_hand(8192, 43, 21, 20, fp8=True) == 50_677_056
    # vLLM's pool: the widest group (C4 latents + indexer keys + C128 latents, 62 layers) sets
    # a block at 21·37,440 + 21·8,640 + 20·1,728 = 1,002,240 B; the SWA layers are two groups
    # (22 + 21 layers) of 3 blocks, the C4 states one of 3, the C128 states one of 17, the
    # compressed group 32: 58 blocks, 14.7% above the content.
    assert 21 * 37_440 + 21 * 8_640 + 20 * 1_728 == 1_002_240
    assert Model.from_hf_config(FLASH).kv_bytes_per_sequence(8192) == 58 * 1_002_240


def test_bf16_rows_are_the_flashinfer_layout_and_round_trip() -> None:
    fp8 = Model.from_hf_config(FLASH)
    bf16 = fp8.with_dtypes(kv_dtype="bf16")
    assert bf16.kv_bytes_per_sequence(8192) == _vllm_bytes("DeepSeek-V4-Flash/bf16", 8192)
    assert bf16.kv_bytes_per_sequence(8192) > fp8.kv_bytes_per_sequence(8192)
    assert bf16.with_dtypes(kv_dtype="fp8") == fp8
    assert Model.from_hf_config(FLASH, kv_dtype="bf16") == bf16


def test_compression_makes_long_contexts_cheap() -> None:
    m = Model.from_hf_config(FLASH)
    # Past the windows, each further 256 tokens adds one page of the C4 latent, the C4 indexer
    # keys and the C128 latent per layer, nothing else.
    p = _pages(fp8=True)
    step = m.kv_bytes_per_sequence(8192 + 256) - m.kv_bytes_per_sequence(8192)
    assert step == 21 * (p["c4"] + p["index"]) + 20 * p["c128"]
    assert step / 256 < 4_000  # vs 70 KB/token for DeepSeek-V3's uncompressed MLA latent


# ------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------


def test_weights_mxfp4_experts_and_fp8_rest() -> None:
    m = Model.from_hf_config(FLASH)
    assert (m.weight_dtype, m.quantized_scope) == ("fp4", "experts+fp8")
    c = _config()
    experts = (
        c["num_hidden_layers"]
        * c["n_routed_experts"]
        * 3
        * c["hidden_size"]
        * c["moe_intermediate_size"]
    )
    assert m.expert_params == experts
    embedding = 2 * c["vocab_size"] * c["hidden_size"]  # untied embedding + lm_head
    assert m.embedding_params == embedding
    rest = m.total_params - experts - embedding
    assert m.weight_bytes == round(experts * 0.5 + rest * 1.0 + embedding * 2.0)
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts) == (256, 6, 1)
    assert m.num_moe_layers == 43  # hash-routed layers are MoE layers too
    assert perf.weight_formats(m) == (1, 2)  # FP8 dense GEMMs, FP4 experts


def test_expert_dtype_fp8_checkpoint_is_all_fp8() -> None:
    c = _config()
    c["expert_dtype"] = "fp8"
    m = Model.from_hf_config(c)
    assert (m.weight_dtype, m.quantized_scope) == ("fp8", "linear")


def test_nvfp4_checkpoints_size_like_the_official_ones() -> None:
    for ours, nvidia in (
        (FLASH, "nvidia--DeepSeek-V4-Flash-NVFP4"),
        (PRO, "nvidia--DeepSeek-V4-Pro-NVFP4"),
    ):
        a, b = Model.from_hf_config(ours), Model.from_hf_config(HF / nvidia)
        assert (a.weight_bytes, a.attention_groups) == (b.weight_bytes, b.attention_groups)


def test_active_params_near_published() -> None:
    # Published: Flash 13B active, Pro 49B (embedding and lm_head add ~1-2B here).
    assert Model.from_hf_config(FLASH).active_params / 1e9 == pytest.approx(13.8, abs=0.1)
    assert Model.from_hf_config(PRO).active_params / 1e9 == pytest.approx(49.8, abs=0.1)


# ------------------------------------------------------------------------------------------
# Refusals: each corrupt field named
# ------------------------------------------------------------------------------------------


def _set(path: str, value: Any) -> dict[str, Any]:
    c = copy.deepcopy(_config())
    if value is None:
        del c[path]
    else:
        c[path] = value
    return c


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("compress_ratios", [0, 0, 4, 8] + [4] * 40, r"compress_ratios\[3\]"),
        ("compress_ratios", [0, 4], "compress_ratios"),
        ("compress_ratios", "4", "compress_ratios"),
        ("compress_ratios", [True] * 44, r"compress_ratios\[0\]"),
        ("expert_dtype", "int4", "expert_dtype"),
        ("num_key_value_heads", 2, "num_key_value_heads"),
        ("o_groups", 7, "o_groups"),
        ("index_topk", None, "index_topk"),
        ("index_head_dim", 0, "index_head_dim"),
        ("sliding_window", -1, "sliding_window"),
        ("qk_rope_head_dim", 512, "qk_rope_head_dim"),
        ("num_hash_layers", 99, "num_hash_layers"),
        ("num_experts_per_tok", 300, "num_experts_per_tok"),
        ("hc_mult", None, "hc_mult"),
        ("layer_types", ["sliding_attention"] * 42 + ["dense"], r"layer_types\[42\]"),
        ("layer_types", ["sliding_attention"] * 5, "layer_types"),
        ("mlp_layer_types", ["moe"] * 42 + ["dense"], r"mlp_layer_types\[42\]"),
        ("compress_rates", {"compressed_sparse_attention": 8}, "compress_rates"),
    ],
)
def test_corrupt_fields_are_refused_by_name(key: str, value: Any, named: str) -> None:
    c = _set(key, value)
    if key == "compress_rates":
        c["layer_types"] = ["compressed_sparse_attention"] * 43
    with pytest.raises(ConfigError, match=named) as info:
        Model.from_hf_config(c)
    assert isinstance(info.value, PdtpError)


def test_v41_and_sglang_repacks_stay_refused() -> None:
    c = _config()
    c["model_type"] = "deepseek_v41"
    with pytest.raises(ConfigError, match="deepseek_v41"):
        Model.from_hf_config(c)


# ------------------------------------------------------------------------------------------
# Catalog, planning
# ------------------------------------------------------------------------------------------


def _shape(m: Model) -> Model:
    return dataclasses.replace(m, name="m", hf_id=None, aliases=())


def test_catalog_names_and_round_trip() -> None:
    pro = pdtp.model("deepseek-v4")
    assert pro == pdtp.model("deepseek-v4-pro")
    assert _shape(pro) == _shape(Model.from_hf_config(PRO))
    assert pro.hf_id == "deepseek-ai/DeepSeek-V4-Pro"
    flash = pdtp.model("deepseek-v4-flash")
    assert _shape(flash) == _shape(Model.from_hf_config(FLASH))
    for m in (pro, flash):
        assert Model.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_performance_inputs_carry_the_page_sizing() -> None:
    m = pdtp.model("deepseek-v4-flash")
    p = _pages(fp8=True)
    inputs = perf.model_inputs(m)
    assert inputs is perf.model_inputs(m)  # cached
    token, windowed = __import__("pdtp._model_dsv4", fromlist=["perf_kv"]).perf_kv(
        m.attention_groups, m.kv_dtype_bytes
    )
    assert token == (21 * (p["c4"] + p["index"]) + 20 * p["c128"]) / 256
    assert token * 8192 + windowed == pytest.approx(m.kv_bytes_per_sequence(8192), rel=1e-12)


def _interval(max_batch: int, per_seq: int) -> tuple[int, int]:
    """Budgets (bytes) for which ``max_batch`` is floor(budget / per_seq)."""
    return max_batch * per_seq, (max_batch + 1) * per_seq


def test_decode_capacity_follows_vllm_pages() -> None:
    """The core's max batch is the KV budget over the hand-computed bytes per sequence: one
    budget explains the fp8_ds_mla and the bf16 layouts alike (same weights, same GPU)."""
    isl, osl = 60_000, 4_000  # 250 pages of 256 tokens: no rounding between core and pages
    tokens = isl + osl
    m = pdtp.model("deepseek-v4-flash")
    got = {}
    for kv, fp8 in (("fp8", True), ("bf16", False)):
        d = pdtp.predict_decode(
            m.with_dtypes(kv_dtype=kv), gpu="h200", tp=8, isl=isl, osl=osl, batch=1
        )
        per_seq = _vllm_bytes(f"DeepSeek-V4-Flash/{'fp8_ds_mla' if fp8 else 'bf16'}", tokens)
        got[kv] = _interval(d.max_batch, per_seq)
        assert d.kv_capacity_tokens == d.max_batch * tokens
    lo = max(a for a, _ in got.values())
    hi = min(b for _, b in got.values())
    assert lo < hi, got
    assert got["fp8"][0] // _vllm_bytes("DeepSeek-V4-Flash/fp8_ds_mla", tokens) > 100


def test_solve_check_and_transfer_map() -> None:
    plan = pdtp.solve("deepseek-v4-flash", gpus=8, gpu="h200")
    assert plan.requests_per_s > 0 and plan.gpus_used <= 8
    assert plan.kv_dtype == "fp8"
    pro = pdtp.solve("deepseek-v4", gpus=16, gpu="b200")
    assert pro.requests_per_s > 0
    # One replicated latent per layer, as MLA: any TP pair maps, each decode rank reading one
    # prefill rank.
    res = pdtp.check("deepseek-v4-flash", 8, 4, connector="nixl", gpu="h200")
    assert res.ok, res
    # vLLM 0.33.0's NIXL moves all seven caches (derived: no warning); other releases say
    # what is not derived.
    assert not res.warnings
    assert not pdtp.check("deepseek-v3", 8, 4, connector="nixl").warnings
    tm = pdtp.transfer_map(8, 4, kv_heads=1, is_mla=True, connector="nixl")
    assert tm is not None


def test_the_plan_solve_picks_for_deepseek_v4_pro_simulates():
    # The simulator reserved every windowed cache for max_num_seqs running sequences, which
    # the planner's pool (sized for the batch it runs) cannot hold: `pdtp simulate` refused
    # the plan `pdtp solve` picked ("leaves no memory for the KV cache"). plan_coverage found
    # it on 5 of 728 default plans.
    plan = pdtp.solve("deepseek-v4-pro", gpus=16, gpu="h200")
    result = pdtp.simulate(plan, rate_rps=1, requests=40)
    assert result.goodput_rps > 0


# ------------------------------------------------------------------------------------------
# Layouts vLLM 0.33 cannot shard
# ------------------------------------------------------------------------------------------

_GROUPS = [("deepseek-v4-flash", FLASH, 8), ("deepseek-v4-pro", PRO, 16)]


@pytest.mark.parametrize(("name", "folder", "groups"), _GROUPS)
def test_tp_above_output_groups_is_refused_as_vllm_0_33_fails(
    name: str, folder: pathlib.Path, groups: int
) -> None:
    """vLLM 0.33.0 ``models/deepseek_v4/attention.py:226`` gives each TP rank
    ``o_groups // tp_size`` output groups, 0 above ``o_groups``; ``wo_a``'s DeepGEMM regrouping
    (``model_executor/layers/quantization/utils/fp8_utils.py:1222``, ``r = wq.size(0) // g``)
    then raises ``ZeroDivisionError: integer division or modulo by zero`` while the model
    loads. TP up to ``o_groups`` loads; DP and EP change nothing (each DP rank is its own TP
    group; the default fused MoE asserts nothing of EP)."""
    m = pdtp.model(name)
    assert m.output_groups == _config(folder)["o_groups"] == groups
    assert pdtp.check(name, groups, groups, connector="nixl").ok
    for p, d in ((2 * groups, groups), (groups, 2 * groups)):
        res = pdtp.check(name, p, d, connector="nixl")
        assert not res.ok
        (v,) = [v for v in res.violations if v.code == "tp_exceeds_output_groups"]
        assert v.side == ("prefill" if p > groups else "decode")
        assert (v.vllm_error, v.when) == ("ZeroDivisionError", "model_load")
        assert v.message == "integer division or modulo by zero"
        assert f"tp <= {groups}" in v.hint
        assert isinstance(v.exception(), ZeroDivisionError)
        assert res.alternatives and all(max(a) <= groups for a in res.alternatives)
    # DP attention and expert parallel: the TP group of each DP rank decides.
    bad = pdtp.check(name, f"tp{2 * groups}dp2ep", f"tp{groups}dp2ep", connector="nixl")
    assert "tp_exceeds_output_groups" in [v.code for v in bad.violations]
    assert pdtp.check(name, f"tp{groups}dp2ep", f"tp{groups}dp4ep", connector="nixl").ok
    agg = pdtp.check(name, aggregated=f"tp{2 * groups}", connector="nixl")
    assert [v.code for v in agg.violations] == ["tp_exceeds_output_groups"]
    assert pdtp.check(name, aggregated=f"tp{groups}dp2ep", connector="nixl").ok
    # Every TP size dividing the heads up to o_groups loads, none above.
    assert pdtp.layout.loadable_tp_sizes(m, 64) == [t for t in (1, 2, 4, 8, 16) if t <= groups]
    # A model without output groups keeps every TP size the heads allow.
    assert dataclasses.replace(m, output_groups=0) != m
    assert 2 * groups in pdtp.layout.loadable_tp_sizes(dataclasses.replace(m, output_groups=0), 64)


def test_planners_never_place_tp_above_output_groups() -> None:
    """The planners read the same rule: offered only tp16, solve finds nothing that loads
    DeepSeek-V4-Flash and says why; offered tp16 and tp8, it places tp8; evaluate of a tp16
    side is invalid with vLLM's error."""
    with pytest.raises(pdtp.InfeasibleError, match="8 output-projection groups"):
        pdtp.solve("deepseek-v4-flash", gpus=32, gpu="h200", layouts=["tp16"], connector="nixl")
    plan = pdtp.solve(
        "deepseek-v4-flash", gpus=32, gpu="h200", layouts=["tp16", "tp8"], connector="nixl"
    )
    assert plan.sides and all(s.tp <= 8 for _, s in plan.sides)
    est = pdtp.evaluate(
        "deepseek-v4-flash",
        gpu="h200",
        prefill_tp=16,
        prefill_instances=1,
        decode_tp=8,
        decode_instances=1,
        connector="nixl",
    )
    assert not est.valid
    assert [v.code for v in est.violations] == ["tp_exceeds_output_groups"]


# ------------------------------------------------------------------------------------------
# Decode attention: what the sparse kernels read
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("folder", "kv"), [(FLASH, "fp8"), (PRO, "fp8"), (FLASH, "bf16")])
def test_sparse_attention_inputs_come_from_the_config(folder: pathlib.Path, kv: str) -> None:
    """The core's compressed_attention_decode reads per layer kind what the config says:
    window, top-k, the stored latent (fp8_ds_mla 584 B / bf16 rows 1,024 B), the indexer's
    fp8 key (128 + 4 B) and heads (replicated: 2 · heads · dim FLOPs a key), and the
    compressor states' rows: (1 + coff) a token, C4 coff 2 (kv 8,192 B and index 2,048 B rows,
    page-padded), C128 coff 1 (4,096 B rows)."""
    from pdtp._model_dsv4 import sparse_attention

    c = _config(folder)
    ratios = c["compress_ratios"][: c["num_hidden_layers"]]
    m = Model.from_hf_config(folder, kv_dtype=kv)
    got = sparse_attention(m)
    p = _pages(kv == "fp8")
    n4, n128 = ratios.count(4), ratios.count(128)
    assert got == {
        "sparse_layers": c["num_hidden_layers"],
        "sparse_window": c["sliding_window"],
        "sparse_c4_layers": n4,
        "sparse_c128_layers": n128,
        "sparse_topk": c["index_topk"],
        "sparse_latent_bytes": FP8_LATENT if kv == "fp8" else BF16_LATENT,
        "sparse_index_key_bytes": INDEX,
        "sparse_index_flops_per_key": 2 * c["index_n_heads"] * c["index_head_dim"],
        "sparse_state_bytes_per_token": n4 * 3 * (p["c4_state"] + p["c4_index_state"]) / 4
        + n128 * 2 * p["c128_state"] / 8,
    }
    assert perf.model_inputs(m) is perf.model_inputs(m)


def test_decode_attention_grows_with_the_indexer_scan_not_the_dense_latent() -> None:
    """Past the window and 4 · top-k tokens, a DeepSeek-V4 decode step grows only by the
    indexer's key scan and the C128 latents: from 8k to 64k tokens its TPOT rises, by far
    less than DeepSeek-V3's (every latent read)."""
    v4 = pdtp.model("deepseek-v4-flash")
    v3 = pdtp.model("deepseek-v3")

    def tpot(m: Model, ctx: int) -> float:
        d = pdtp.predict_decode(m, gpu="h200", tp=8, isl=ctx, osl=2, batch=32)
        return float(d.tpot_ms)

    g4 = tpot(v4, 65_536) - tpot(v4, 8192)
    g3 = tpot(v3, 65_536) - tpot(v3, 8192)
    assert 0 < g4 < g3 / 5


# ------------------------------------------------------------------------------------------
# P/D connectors: what vLLM 0.33's NIXL and MoRIIO do with its caches
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("connector", ["nixl", "moriio"])
def test_connectors_of_vllm_0_33_move_its_caches(connector: str) -> None:
    """vLLM 0.33.0: every KV-cache group is a transfer group
    (``v1/kv_cache_interface.py:1562``); NIXL registers each packed block row as one region
    (``nixl/base_worker.py:1693``, "restrict to MLA (DSv4) where kv is replicated" ``:1709``);
    MoRIIO READ takes its full-attention and sliding-window groups under the hybrid manager
    (``moriio/moriio_connector.py:612-635``) and every layer's page (``moriio_layout.py:300``).
    The latents are replicated: every loadable TP pair is valid as MLA, with no warning."""
    for p, d in ((8, 4), (4, 8), (8, 8), (1, 8)):
        res = pdtp.check("deepseek-v4-flash", p, d, connector=connector, vllm_version="0.33.0")
        assert res.ok and res.verdict.kind == "valid", (p, d, res)
        assert not res.warnings


def test_moriio_write_refuses_it_as_vllm_0_33_does() -> None:
    """``moriio/moriio_connector.py:640``: its scheduler groups include
    ``SlidingWindowMLASpec`` (a ``SlidingWindowSpec``), so MoRIIO WRITE raises
    NotImplementedError at engine start; evaluate (and the planners) read the same rule."""
    res = pdtp.check("deepseek-v4-flash", 8, 4, connector="moriio-write", vllm_version="0.33.0")
    (v,) = res.violations
    assert (v.code, v.vllm_error, v.when) == (
        "sliding_window_unsupported",
        "NotImplementedError",
        "engine_start",
    )
    assert v.message.startswith("MoRIIO WRITE mode does not support sliding-window cache groups")
    assert pdtp.layout.is_sliding(pdtp.model("deepseek-v4-pro"))
    est = pdtp.evaluate(
        "deepseek-v4-flash",
        gpu="mi355x",
        prefill_tp=8,
        prefill_instances=1,
        decode_tp=8,
        decode_instances=1,
        connector="moriio-write",
    )
    assert not est.valid
    assert [v.code for v in est.violations] == ["sliding_window_unsupported"]


@pytest.mark.parametrize(
    ("connector", "version"), [("nixl", "0.32.0"), ("moriio", "0.30.0"), ("nixl", "0.20.0")]
)
def test_releases_not_derived_keep_the_warning_saying_what_is_missing(
    connector: str, version: str
) -> None:
    res = pdtp.check("deepseek-v4-flash", 4, 8, connector=connector, vllm_version=version)
    warnings = [w for w in res.warnings if w.code == "flow_not_derived"]
    assert len(warnings) == 1
    assert f"vLLM {version}'s {connector}" in warnings[0].message
    assert "0.33.0" in warnings[0].message
    # Another model is not concerned.
    other = pdtp.check("deepseek-v3", 4, 8, connector=connector, vllm_version=version)
    assert "flow_not_derived" not in [w.code for w in other.warnings]
