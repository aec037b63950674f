"""Real Hugging Face configs (tests/data/hf-configs, sources in its SOURCES file): every one
parses to the right shape or is refused by name, and corrupted copies of them meet a
ConfigError naming the corrupted field, never another exception or a silently different model.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdtp
from pdtp import Model
from pdtp._model import MAX_CONFIG_BYTES, UNMODELLED_MODEL_TYPES
from pdtp.errors import ConfigError

HF = pathlib.Path(__file__).resolve().parent / "data" / "hf-configs"
FOLDERS = sorted(p for p in HF.iterdir() if p.is_dir())


def _model(name: str) -> Model:
    return Model.from_hf_config(HF / name)


# ------------------------------------------------------------------------------------------
# The vendored set and its sources
# ------------------------------------------------------------------------------------------


def test_every_vendored_file_has_a_source_and_every_source_a_file() -> None:
    listed = {
        line.split("\t")[0]
        for line in (HF / "SOURCES").read_text().splitlines()
        if line and not line.startswith("#")
    }
    present = {f"{p.parent.name}/{p.name}" for p in HF.glob("*/*.json")}
    assert listed == present
    assert len(FOLDERS) >= 90


# SGLang's own DeepSeek-V4 FP8 repacks (model_type deepseek_ref) are not a vLLM architecture.
REFUSED = {p.name for p in FOLDERS if p.name.startswith("sgl-project--DeepSeek-V4")}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_real_config_parses_or_is_refused_by_name(folder: pathlib.Path) -> None:
    if folder.name in REFUSED:
        with pytest.raises(ConfigError, match="compress_ratios.*outside model_type 'deepseek_v4'"):
            Model.from_hf_config(folder)
        return
    m = Model.from_hf_config(folder)
    assert m.kv_bytes_per_token > 0
    primary = [g for g in m.attention_groups if g.counts_layers]
    assert sum(g.num_layers for g in primary) == m.num_attention_layers
    assert 0 < m.active_params <= m.total_params


# Published totals (model cards / the names themselves), in billions.
PUBLISHED_TOTAL_B = {
    "XiaomiMiMo--MiMo-V2-Flash": 309,
    "zai-org--GLM-5": 744,
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": 550,
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": 120,
    "Qwen--Qwen3.5-397B-A17B": 397,
    "Qwen--Qwen3-Next-80B-A3B-Thinking": 80,
    "Qwen--Qwen3-235B-A22B": 235,
    "deepseek-ai--DeepSeek-V3": 671,
    "deepseek-ai--DeepSeek-V3.2": 671,
    "openai--gpt-oss-120b": 117,
    "openai--gpt-oss-20b": 21,
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": 109,
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": 400,
    "mistralai--Mixtral-8x7B-v0.1": 46.7,
    "mistralai--Mixtral-8x22B-v0.1": 141,
    "nvidia--Gemma-4-31B-IT-NVFP4": 31,
    "MiniMaxAI--MiniMax-M2.5": 229,
    "deepseek-ai--DeepSeek-V4-Flash": 284,
    "deepseek-ai--DeepSeek-V4-Pro": 1600,
}


@pytest.mark.parametrize(("name", "billions"), sorted(PUBLISHED_TOTAL_B.items()))
def test_total_params_match_published_figures(name: str, billions: float) -> None:
    assert _model(name).total_params / 1e9 == pytest.approx(billions, rel=0.02)


# ------------------------------------------------------------------------------------------
# The families issue 12 names: shapes read from vLLM's model code
# ------------------------------------------------------------------------------------------


def _groups(m: Model) -> list[tuple[str, int, int, int, int, int, int]]:
    return sorted(
        (g.kind, g.num_layers, g.num_kv_heads, g.head_dim, g.v_head_dim, g.window, g.index_bytes)
        for g in m.attention_groups
    )


def test_minimax_m3_moe_layer_freq_list_and_sparse_index() -> None:
    m = _model("MiniMaxAI--MiniMax-M3")
    # moe_layer_freq is a per-layer 0/1 list: 3 dense layers, 57 MoE layers.
    assert (m.num_layers, m.num_dense_layers, m.num_moe_layers) == (60, 3, 57)
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts) == (128, 4, 1)
    # sparse_attention_freq: the 57 sparse layers add a bf16 128-wide index key per token.
    assert _groups(m) == [("full", 3, 4, 128, 128, 0, 0), ("full", 57, 4, 128, 128, 0, 256)]


def test_mimo_v2_flash_sliding_layers_use_their_own_heads() -> None:
    m = _model("XiaomiMiMo--MiMo-V2-Flash")
    assert (m.num_dense_layers, m.num_experts, m.experts_per_token) == (1, 256, 8)
    # hybrid_layer_pattern: 1 = sliding window (swa_* heads), 0 = full attention.
    assert _groups(m) == [("full", 9, 4, 192, 128, 0, 0), ("sliding", 39, 8, 192, 128, 128, 0)]
    assert m.weight_dtype == "fp8"


def test_gemma4_moe_runs_mlp_and_experts_side_by_side() -> None:
    m = _model("google--gemma-4-26B-A4B")
    # top_k_experts is Gemma-4's experts-per-token; every layer has both blocks.
    assert (m.num_experts, m.experts_per_token, m.num_moe_layers) == (128, 8, 30)
    # Full-attention layers use global_head_dim and num_global_key_value_heads.
    assert _groups(m) == [("full", 5, 2, 512, 512, 0, 0), ("sliding", 25, 8, 256, 256, 1024, 0)]
    assert m.total_params / 1e9 == pytest.approx(25.2, abs=0.1)
    assert m.num_kv_heads == 8  # what vLLM's ModelConfig reports (num_key_value_heads)


def test_gemma4_dense_nvfp4_from_modelopt_config() -> None:
    m = _model("nvidia--Gemma-4-31B-IT-NVFP4")
    assert not m.is_moe
    assert (m.weight_dtype, m.kv_dtype) == ("fp4", "fp8")
    assert _groups(m) == [("full", 10, 4, 512, 512, 0, 0), ("sliding", 50, 16, 256, 256, 1024, 0)]


def test_glm5_dsa_layer_types_and_shared_indexers() -> None:
    glm5 = _model("zai-org--GLM-5")
    assert glm5.is_mla and glm5.attention_type == "MLA"
    # Every layer keeps its DSA indexer keys: 128 fp8 values + 4 scale bytes.
    assert _groups(glm5) == [("mla", 78, 1, 576, 0, 0, 132)]
    # GLM-5.2 (layer_types all 'deepseek_sparse_attention'): only every 4th layer after the
    # first 3 computes its own top-k (index_topk_freq / index_skip_topk_offset).
    glm52 = _model("zai-org--GLM-5.2")
    assert _groups(glm52) == [("mla", 21, 1, 576, 0, 0, 132), ("mla", 57, 1, 576, 0, 0, 0)]
    assert glm52.num_dense_layers == 3  # mlp_layer_types: 3 dense, 75 sparse


def test_kimi_k3_kda_hybrid() -> None:
    m = _model("moonshotai--Kimi-K3")
    # kda_layers (1-based) are Kimi Delta Attention; the other 24 layers are MLA.
    assert (m.num_layers, m.num_attention_layers) == (93, 24)
    assert _groups(m) == [("mla", 24, 1, 576, 0, 0, 0)]
    assert m.state_bytes_per_sequence > 0
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts) == (896, 16, 2)
    assert m.weight_dtype == "fp4"  # mxfp4 compressed-tensors


def test_deepseek_v32_indexer_cache() -> None:
    m = _model("deepseek-ai--DeepSeek-V3.2")
    assert _groups(m) == [("mla", 61, 1, 576, 0, 0, 132)]
    assert m.kv_bytes_per_token == 61 * (576 * 2 + 132)  # bf16 latent, fp8 index keys


def test_nemotron3_ultra_layer_count_from_layers_block_type() -> None:
    m = _model("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    assert (m.num_layers, m.num_attention_layers) == (108, 12)
    assert (m.num_experts, m.experts_per_token) == (512, 22)


def test_modelopt_mixed_precision_sizes_by_the_widest_format() -> None:
    m = _model("nvidia--Qwen3.6-27B-NVFP4")  # FP8 and NVFP4 layers: sized as FP8
    assert (m.weight_dtype, m.kv_dtype) == ("fp8", "fp8")


def test_hf_quant_config_sidecar_in_the_folder() -> None:
    assert _model("nvidia--DeepSeek-V3.1-NVFP4").weight_dtype == "fp4"
    assert _model("nvidia--Llama-3.1-70B-Instruct-FP8").weight_dtype == "fp8"


def test_windows_and_chunks() -> None:
    oss = _model("openai--gpt-oss-20b")
    assert _groups(oss) == [("full", 12, 8, 64, 64, 0, 0), ("sliding", 12, 8, 64, 64, 128, 0)]
    # A 100k-token sequence keeps 128 tokens in the sliding layers.
    assert oss.kv_bytes_per_sequence(100_000) == 100_000 * 12 * 8 * 128 * 2 + 128 * 12 * 8 * 128 * 2
    scout = _model("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    assert _groups(scout) == [
        ("chunked", 36, 8, 128, 128, 8192, 0),
        ("full", 12, 8, 128, 128, 0, 0),
    ]


def test_qwen3_next_state_and_kv() -> None:
    m = _model("Qwen--Qwen3-Next-80B-A3B-Thinking")
    assert _groups(m) == [("full", 12, 2, 256, 256, 0, 0)]
    # 36 Gated DeltaNet layers: conv state (kernel 4) + a 32×128×128 delta state each, both
    # in the model dtype (the config names no mamba_ssm_dtype; Qwen3.5's says float32).
    conv_dim = 2 * 16 * 128 + 32 * 128
    per_layer = conv_dim * 3 * 2 + 32 * 128 * 128 * 2
    assert m.state_bytes_per_sequence == 36 * per_layer
    assert m.kv_bytes_per_sequence(1000, tp=2) == 1000 * 12 * 1 * 512 * 2 + 36 * per_layer // 2


# ------------------------------------------------------------------------------------------
# Zeroed, non-finite, huge and mistyped values
# ------------------------------------------------------------------------------------------


def _cfg(name: str) -> dict[str, Any]:
    return json.loads((HF / name / "config.json").read_text())


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("Qwen--Qwen3-30B-A3B", "num_experts", 0),
        ("deepseek-ai--DeepSeek-V3", "n_routed_experts", 0),
        ("mistralai--Mixtral-8x7B-v0.1", "num_local_experts", 0),
        ("deepseek-ai--DeepSeek-V3", "qk_nope_head_dim", 0),
        ("deepseek-ai--DeepSeek-V3", "kv_lora_rank", 0),
        ("meta-llama--Meta-Llama-3.1-8B", "num_key_value_heads", 0),
    ],
)
def test_zeroed_counts_are_refused_naming_the_field(name: str, key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=key):
        Model.from_hf_config({**_cfg(name), key: value})


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400", "1e300"])
def test_non_finite_and_huge_floats_name_the_field(text: str) -> None:
    base = json.dumps({"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32})
    doc = base[:-1] + f', "vocab_size": 50432, "expansion_ratio": {text}}}'
    with pytest.raises(ConfigError, match="expansion_ratio"):
        Model.from_hf_config(doc)
    hybrid = _cfg("nvidia--Nemotron-H-56B-Base-8K")
    hybrid.pop("mamba_num_heads", None)
    with pytest.raises(ConfigError, match="expand"):
        Model.from_hf_config({**hybrid, "expand": float(text) if text != "1e300" else 1e300})


def test_deep_nesting_is_a_config_error_not_recursion() -> None:
    for doc in ("[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000):
        with pytest.raises(ConfigError, match="nested"):
            Model.from_hf_config(doc)
    nested: Any = 1
    for _ in range(1000):
        nested = [nested]
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        Model.from_hf_config(
            {**_cfg("meta-llama--Meta-Llama-3.1-8B"), "num_key_value_heads": nested}
        )


@pytest.mark.parametrize("value", [[], [1, 2], "fp8", 8])
def test_quantization_config_of_the_wrong_type(value: object) -> None:
    with pytest.raises(ConfigError, match="quantization_config"):
        Model.from_hf_config({**_cfg("Qwen--Qwen3-32B"), "quantization_config": value})


def test_oversized_config_file_is_refused_quickly(tmp_path: pathlib.Path) -> None:
    big = tmp_path / "config.json"
    with open(big, "wb") as fh:  # sparse: 200 MB on paper, nothing on disk
        fh.truncate(200 << 20)
    with pytest.raises(ConfigError, match=f"{MAX_CONFIG_BYTES >> 20} MiB"):
        Model.from_hf_config(big)
    with pytest.raises(ConfigError, match="MiB"):
        Model.from_hf_config("{" + " " * (MAX_CONFIG_BYTES + 1) + "}")


def test_unmodelled_architectures_are_named() -> None:
    assert "mamba" in UNMODELLED_MODEL_TYPES
    with pytest.raises(ConfigError, match="'mamba'.*attention-free"):
        Model.from_hf_config({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24})


# ------------------------------------------------------------------------------------------
# Property: corrupted real configs give the same Model, a legitimately different one, or one
# ConfigError naming the corrupted field
# ------------------------------------------------------------------------------------------

CORPUS = [
    "meta-llama--Meta-Llama-3.1-8B",
    "deepseek-ai--DeepSeek-V3",
    "deepseek-ai--DeepSeek-V3.2",
    "Qwen--Qwen3-Next-80B-A3B-Thinking",
    "Qwen--Qwen3-30B-A3B",
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "google--gemma-4-26B-A4B",
    "moonshotai--Kimi-K3",
    "openai--gpt-oss-20b",
    "XiaomiMiMo--MiMo-V2-Flash",
    "MiniMaxAI--MiniMax-M3",
    "zai-org--GLM-5.2",
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1",
    "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "nvidia--Qwen3.6-27B-NVFP4",
    "deepseek-ai--DeepSeek-V4-Flash",
]
CONFIGS = {name: _cfg(name) for name in CORPUS}
ORIGINAL = {name: Model.from_hf_config(CONFIGS[name]) for name in CORPUS}

Path = tuple[str | int, ...]


def _leaves(node: Any, prefix: Path = ()) -> list[Path]:
    out: list[Path] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out.extend(_leaves(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):  # a few entries of each list are enough
            out.append((*prefix, i))
            out.extend(_leaves(v, (*prefix, i)))
    return out


PATHS = {name: _leaves(cfg) for name, cfg in CONFIGS.items()}

# Values that may legitimately change the model when set to 0 / removed.
ZERO_OK = {
    "first_k_dense_replace",
    "n_shared_experts",
    "num_shared_experts",
    "q_lora_rank",
    "qk_rope_head_dim",
    "num_kv_shared_layers",
    "attn_layer_offset",
    "index_skip_topk_offset",
    "moe_layer_freq",
    "hybrid_layer_pattern",
    "sparse_attention_freq",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "shared_intermediate_size",
    "n_group",
    "compress_ratios",  # DeepSeek-V4: 0 is a sliding-window-only layer
    "num_hash_layers",
}
CORRUPTIONS = {
    "zero": 0,
    "negative": -3,
    "nan": math.nan,
    "inf": math.inf,
    "huge": 10**30,
    "float": 12.5,
    "string": "garbage",
    "list": [],
    "object": {},
    "null": None,
    "true": True,
}
MUST_FAIL_IF_READ = {"negative", "nan", "inf", "huge", "float", "list", "object"}


def _set(cfg: dict[str, Any], path: Path, value: object, delete: bool) -> None:
    node: Any = cfg
    for step in path[:-1]:
        node = node[step]
    if delete and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupted_real_configs(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(CORPUS))
    path = data.draw(st.sampled_from(PATHS[name]))
    action = data.draw(st.sampled_from([*CORRUPTIONS, "delete"]))
    cfg = copy.deepcopy(CONFIGS[name])
    original: Any = cfg
    for step in path:
        original = original[step]
    _set(cfg, path, CORRUPTIONS.get(action), action == "delete")
    key = next(str(p) for p in reversed(path) if isinstance(p, str))
    try:
        m = Model.from_hf_config(cfg)
    except ConfigError as exc:
        message = str(exc)
        if action in ("delete", "null"):
            # A removed field falls back to a default or is reported missing by name.
            assert re.search(r"field '[^']+'", message), message
        else:
            assert key in message, f"{action} at {path}: {message}"
        return
    if m == ORIGINAL[name]:
        return  # a field pdtp does not read
    # A value of the field's own type is a legitimate change (ffn_mult 12.5, kda_layers []).
    same_type = action in ("float", "list", "object") and isinstance(
        original, type(CORRUPTIONS[action])
    )
    assert action not in MUST_FAIL_IF_READ or same_type, f"{action} at {path} changed the model"
    if action == "zero":
        assert key in ZERO_OK, f"0 at {path} gave a different model"


# ------------------------------------------------------------------------------------------
# Every decoder architecture in vLLM's registry (tests/data/vllm-architectures.json) that
# transformers has a config class for: its defaults parse, or are refused by name
# ------------------------------------------------------------------------------------------

DATA = HF.parent
REGISTRY = json.loads((DATA / "vllm-architectures.json").read_text())["architectures"]
DEFAULTS = json.loads((DATA / "hf-class-defaults.json").read_text())["defaults"]


@pytest.mark.parametrize("arch", sorted(DEFAULTS))
def test_transformers_class_defaults_parse_or_are_refused_clearly(arch: str) -> None:
    assert arch in REGISTRY
    try:
        m = Model.from_hf_config(DEFAULTS[arch])
    except ConfigError as exc:
        message = str(exc)
        # One clear error naming the architecture (not modelled) or the field.
        assert "does not model" in message or "field '" in message or "attention layer" in message
        return
    assert m.kv_bytes_per_token > 0 and m.total_params > 0


def test_architecture_table_in_docs_is_current() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "architectures_doc", DATA.parent.parent / "tools" / "architectures_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (DATA.parent.parent / "docs" / "architectures.md").read_text()
    assert committed == module.render(), (
        "run: python tools/architectures_doc.py > docs/architectures.md"
    )


# ------------------------------------------------------------------------------------------
# The built-in catalog against the real configs
# ------------------------------------------------------------------------------------------

CATALOG = json.loads((pathlib.Path(pdtp.__file__).parent / "data" / "models.json").read_text())[
    "models"
]

# Catalog entries whose own config.json is not vendored (no public copy found): their shapes are
# checked against the sourced reference table in test_catalog.py instead, and the windows of
# gemma-3-27b against Google's code below. The set must shrink as real copies are vendored.
NOT_VENDORED = {
    "command-r-plus",
    "falcon-180b",
    "falcon-40b",
    "falcon-7b",
    "gemma-3-27b",
    "glm-4.5",
    "mistral-large-2407",
    "phi-3-medium",
    "phi-4",
    "qwen2.5-14b",
    "qwen3-14b",
    "yi-34b",
}


def _real_folder(entry: dict[str, Any]) -> pathlib.Path | None:
    for ident in (entry["hf_id"], *entry["aliases"]):
        folder = HF / ident.replace("/", "--")
        if folder.is_dir():
            return folder
    return None


def test_the_catalog_entries_without_a_real_config_are_exactly_the_listed_ones() -> None:
    assert {e["name"] for e in CATALOG if _real_folder(e) is None} == NOT_VENDORED


@pytest.mark.parametrize(
    "entry",
    [e for e in CATALOG if e["name"] not in NOT_VENDORED],
    ids=lambda e: e["name"],
)
def test_every_catalog_entry_loads_as_its_real_config(entry: dict[str, Any]) -> None:
    """The catalog's copy parses to the model its real config.json parses to: the same layers,
    attention groups (sliding and chunked windows included), parameters and bytes, so a plan
    for a catalog name is a plan for the checkpoint vLLM loads."""
    folder = _real_folder(entry)
    assert folder is not None
    real = Model.from_hf_config(folder, weight_dtype=entry.get("weight_dtype"))
    ours = pdtp.model(entry["name"])
    assert ours.attention_groups == real.attention_groups
    assert (ours.num_layers, ours.hidden_size, ours.vocab_size) == (
        real.num_layers,
        real.hidden_size,
        real.vocab_size,
    )
    assert (ours.num_attention_heads, ours.num_kv_heads) == (
        real.num_attention_heads,
        real.num_kv_heads,
    )
    assert (ours.total_params, ours.active_params) == (real.total_params, real.active_params)
    assert (ours.num_experts, ours.num_moe_layers) == (real.num_experts, real.num_moe_layers)
    assert ours.kv_bytes_per_token == real.kv_bytes_per_token
    # Same bytes per weight (fp16 and bf16 checkpoints size alike).
    assert ours.weight_bytes == real.weight_bytes
    assert ours.kv_dtype_bytes == real.kv_dtype_bytes


def test_gemma_3_27b_windows_as_google_defines_them() -> None:
    """google-deepmind/gemma gemma/gm/nn/_gemma.py Gemma3_27B: 62 layers, five sliding (window
    1024) for each global one, the last layers sliding; vLLM keeps only the window for those."""
    groups = {g.kind: g for g in pdtp.model("gemma-3-27b").attention_groups}
    assert set(groups) == {"sliding", "full"}
    assert (groups["sliding"].num_layers, groups["sliding"].window) == (52, 1024)
    assert groups["full"].num_layers == 10
    # a long prompt keeps a fraction of the full-attention bytes
    m = pdtp.model("gemma-3-27b")
    assert m.kv_bytes_per_sequence(32_768) < 0.25 * 32_768 * m.kv_bytes_per_token


@pytest.mark.parametrize("value", [0, [], {}, {"num_bits": "8", "type": "float"}])
def test_a_corrupt_modelopt_kv_cache_scheme_is_refused_not_read_as_no_scheme(value):
    # A falsy or formless kv_cache_scheme once fell through to "no FP8 cache" and sized a
    # different model (found by test_corrupted_real_configs on an unseeded run).
    cfg = copy.deepcopy(CONFIGS["nvidia--Qwen3.6-27B-NVFP4"])
    cfg["quantization_config"]["kv_cache_scheme"] = value
    with pytest.raises(ConfigError, match="kv_cache_scheme"):
        Model.from_hf_config(cfg)
