"""Model.from_hf_config: shapes, parameter counts, KV bytes, dtypes and clear errors.

Reference numbers come from ``tests/data/reference`` (models.json rows and verbatim HF configs);
nothing here touches the network.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import pytest

from pdtp import Model
from pdtp.errors import ConfigError, InvalidArgumentError

REFERENCE = pathlib.Path(__file__).resolve().parent / "data" / "reference"
ROWS: list[dict[str, Any]] = json.loads((REFERENCE / "models.json").read_text())


def _hf(reference_dir: pathlib.Path, stem: str) -> pathlib.Path:
    return reference_dir / "hf-configs" / f"{stem}_config.json"


# ------------------------------------------------------------------------------------------
# models.json rows: rebuild an HF-style config from each row's fields and count parameters
# ------------------------------------------------------------------------------------------

_ROW_KEYS = (
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "moe_intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "first_k_dense_replace",
    "n_shared_experts",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
)


def row_to_config(row: dict[str, Any]) -> dict[str, Any]:
    """The HF config.json keys a models.json row stands for."""
    cfg = {k: row[k] for k in _ROW_KEYS if row.get(k) is not None}
    if row["attention_type"] == "MLA":
        cfg.pop("head_dim")  # DeepSeek configs have no head_dim; 192 = nope + rope
    if row.get("num_experts"):
        cfg["num_experts"] = row["num_experts"]
        cfg["num_experts_per_tok"] = row["experts_per_token"]
    llama4 = row.get("llama4_moe")
    if llama4:
        cfg["interleave_moe_layer_step"] = llama4["interleave_moe_layer_step"]
        cfg["intermediate_size_mlp"] = llama4["intermediate_size_mlp"]
    return cfg


def test_reference_rows_present(reference_dir: pathlib.Path) -> None:
    rows = json.loads((reference_dir / "models.json").read_text())
    assert len(rows) >= 30


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_param_counts_match_reference_rows(row: dict[str, Any]) -> None:
    m = Model.from_hf_config(row_to_config(row), name=row["name"])
    total = row["total_params_b_computed"] * 1e9
    active = row["active_params_b_computed"] * 1e9
    assert m.total_params == pytest.approx(total, rel=0.02)
    assert m.active_params == pytest.approx(active, rel=0.02)
    assert m.kv_bytes_per_token == row["kv_cache_bytes_per_token_bf16"]
    assert m.attention_type == row["attention_type"]
    assert m.num_layers == row["num_hidden_layers"]
    assert m.is_moe == bool(row.get("num_experts"))


# ------------------------------------------------------------------------------------------
# The verbatim HF configs in shared/reference/hf-configs
# ------------------------------------------------------------------------------------------

# stem: (layers, heads, kv heads, head_dim, experts, top-k, MLA, weight dtype, total B, active B)
HF_EXPECTED: dict[str, tuple[int, int, int, int, int, int, bool, str, float, float]] = {
    "meta-llama--Meta-Llama-3.1-8B": (32, 32, 8, 128, 0, 0, False, "bf16", 8.03, 8.03),
    "meta-llama--Meta-Llama-3.1-70B": (80, 64, 8, 128, 0, 0, False, "bf16", 70.55, 70.55),
    "mistralai--Mixtral-8x7B-v0.1": (32, 32, 8, 128, 8, 2, False, "bf16", 46.70, 12.88),
    "Qwen--Qwen3-30B-A3B": (48, 32, 4, 128, 128, 8, False, "bf16", 30.53, 3.35),
    "Qwen--Qwen3-32B": (64, 64, 8, 128, 0, 0, False, "bf16", 32.76, 32.76),
    "Qwen--Qwen3-32B-FP8": (64, 64, 8, 128, 0, 0, False, "fp8", 32.76, 32.76),
    "Qwen--Qwen3-VL-8B-Instruct": (36, 32, 8, 128, 0, 0, False, "bf16", 8.19, 8.19),
    "deepseek-ai--DeepSeek-V3": (61, 128, 128, 192, 256, 8, True, "fp8", 671.03, 37.55),
    "moonshotai--Kimi-K2-Instruct": (61, 64, 64, 192, 384, 8, True, "fp8", 1026.41, 32.86),
    "openai--gpt-oss-20b": (24, 64, 8, 64, 32, 4, False, "fp4", 20.91, 4.19),
}


def test_every_reference_config_has_an_expectation(reference_dir: pathlib.Path) -> None:
    stems = {p.name.removesuffix("_config.json") for p in (reference_dir / "hf-configs").iterdir()}
    assert stems <= set(HF_EXPECTED), stems - set(HF_EXPECTED)


@pytest.mark.parametrize("stem", sorted(HF_EXPECTED))
def test_reference_hf_config_shape(reference_dir: pathlib.Path, stem: str) -> None:
    layers, heads, kv, head_dim, experts, top_k, mla, wd, total, active = HF_EXPECTED[stem]
    m = Model.from_hf_config(_hf(reference_dir, stem))
    assert (m.num_layers, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (
        layers,
        heads,
        kv,
        head_dim,
    )
    assert (m.num_experts, m.experts_per_token, m.is_mla, m.weight_dtype) == (
        experts,
        top_k,
        mla,
        wd,
    )
    assert m.total_params == pytest.approx(total * 1e9, rel=0.02)
    assert m.active_params == pytest.approx(active * 1e9, rel=0.02)
    assert m.num_attention_layers == layers  # no Mamba / linear attention in these
    assert m.kv_dtype == "bf16"
    assert m.name == stem


def test_llama_3_1_70b(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "meta-llama--Meta-Llama-3.1-70B"))
    assert m.total_params == pytest.approx(70.6e9, rel=0.005)
    assert m.weight_bytes == 2 * m.total_params
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert m.kv_bytes_per_token_per_rank(1) == m.kv_bytes_per_token
    assert m.kv_bytes_per_token_per_rank(8) == 2 * 80 * 1 * 128 * 2
    # tp > H: one replicated head per rank, not a fraction
    assert m.kv_bytes_per_token_per_rank(16) == 2 * 80 * 1 * 128 * 2
    assert m.kv_bytes_per_token_per_rank(3) == 2 * 80 * 3 * 128 * 2  # ceil(8/3)
    assert not m.tie_word_embeddings and m.num_dense_layers == 80


def test_deepseek_v3_mla(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "deepseek-ai--DeepSeek-V3"))
    assert m.is_mla and m.kv_lora_rank == 512 and m.qk_rope_head_dim == 64
    assert m.kv_bytes_per_token == 70_272
    # MLA: the whole latent on every rank, whatever the TP
    assert {m.kv_bytes_per_token_per_rank(tp) for tp in (1, 2, 8, 16, 32)} == {70_272}
    assert m.total_params == pytest.approx(671e9, rel=0.005)
    assert m.active_params == pytest.approx(37.5e9, rel=0.01)
    assert m.num_dense_layers == 3 and m.num_moe_layers == 58
    assert m.num_shared_experts == 1 and m.moe_intermediate_size == 2048
    assert m.weight_dtype == "fp8" and m.quantized_scope == "linear"
    # FP8 checkpoint: embeddings and lm_head stay bf16
    assert m.weight_bytes == m.embedding_params * 2 + (m.total_params - m.embedding_params)
    assert m.with_dtypes(kv_dtype="fp8").kv_bytes_per_token == 35_136


def test_kimi_k2(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "moonshotai--Kimi-K2-Instruct"))
    assert m.total_params == pytest.approx(1.03e12, rel=0.01)
    assert m.active_params == pytest.approx(32.5e9, rel=0.02)
    assert m.num_dense_layers == 1 and m.model_type == "kimi_k2" and m.is_mla


def test_mixtral(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "mistralai--Mixtral-8x7B-v0.1"))
    assert m.total_params == pytest.approx(46.7e9, rel=0.005)
    assert m.active_params == pytest.approx(12.9e9, rel=0.005)
    assert m.moe_intermediate_size == 14336 and m.num_dense_layers == 0
    assert m.dense_params + m.num_experts * m.params_per_expert == m.total_params
    assert m.dense_params + 2 * m.params_per_expert == m.active_params


def test_qwen3_30b_a3b(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "Qwen--Qwen3-30B-A3B"))
    assert m.total_params == pytest.approx(30.5e9, rel=0.005)
    assert m.active_params == pytest.approx(3.3e9, rel=0.02)
    assert m.kv_bytes_per_token_per_rank(8) == 2 * 48 * 1 * 128 * 2  # 4 KV heads, replicated


def test_gpt_oss_20b(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "openai--gpt-oss-20b"))
    assert m.total_params == pytest.approx(20.9e9, rel=0.005)
    # The reference counts the embedding and lm_head as active (published 3.6B leaves them out)
    assert m.active_params == pytest.approx(4.19e9, rel=0.01)
    assert m.active_params - m.embedding_params / 2 == pytest.approx(3.6e9, rel=0.02)
    assert m.weight_dtype == "fp4" and m.quantized_scope == "experts"
    # MXFP4 experts at 0.5 byte, attention / router / embeddings bf16
    assert m.weight_bytes == round(m.dense_params * 2 + m.expert_params * 0.5)
    assert m.weight_bytes == pytest.approx(13.15e9, rel=0.01)
    # sliding_attention layers keep a KV cache too
    assert m.num_attention_layers == 24


def test_qwen3_32b_fp8(reference_dir: pathlib.Path) -> None:
    fp8 = Model.from_hf_config(_hf(reference_dir, "Qwen--Qwen3-32B-FP8"))
    bf16 = Model.from_hf_config(_hf(reference_dir, "Qwen--Qwen3-32B"))
    assert fp8.total_params == bf16.total_params
    assert fp8.weight_dtype == "fp8" and bf16.weight_dtype == "bf16"
    assert fp8.weight_bytes == bf16.total_params + fp8.embedding_params  # embeddings 2 bytes
    assert bf16.with_dtypes(weight_dtype="fp8").weight_bytes == fp8.weight_bytes


def test_nested_text_config_qwen3_vl(reference_dir: pathlib.Path) -> None:
    m = Model.from_hf_config(_hf(reference_dir, "Qwen--Qwen3-VL-8B-Instruct"))
    assert m.model_type == "qwen3_vl_text"
    assert (m.hidden_size, m.num_layers, m.num_kv_heads) == (4096, 36, 8)
    assert not m.tie_word_embeddings  # read from the top level
    assert m.total_params == pytest.approx(8.19e9, rel=0.01)  # language model only


# ------------------------------------------------------------------------------------------
# Source forms
# ------------------------------------------------------------------------------------------

LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_sources_dict_text_bytes_path_folder(tmp_path: pathlib.Path) -> None:
    text = json.dumps(LLAMA_8B)
    folder = tmp_path / "Llama-8B-local"
    folder.mkdir()
    (folder / "config.json").write_text(text)
    models = [
        Model.from_hf_config(LLAMA_8B),
        Model.from_hf_config(text),
        Model.from_hf_config(text.encode()),
        Model.from_hf_config(folder),
        Model.from_hf_config(str(folder)),
        Model.from_hf_config(folder / "config.json"),
    ]
    assert len({m.total_params for m in models}) == 1
    assert models[0].total_params == pytest.approx(8.03e9, rel=0.005)
    assert models[3].name == "Llama-8B-local" and models[5].name == "Llama-8B-local"
    assert Model.from_hf_config(LLAMA_8B, name="mine").name == "mine"


def test_name_and_hf_id_from_name_or_path() -> None:
    m = Model.from_hf_config({**LLAMA_8B, "_name_or_path": "meta-llama/Llama-3.1-8B"})
    assert m.hf_id == "meta-llama/Llama-3.1-8B" and m.name == "meta-llama/Llama-3.1-8B"
    assert Model.from_hf_config({**LLAMA_8B, "_name_or_path": "/models/x"}).hf_id is None


# ------------------------------------------------------------------------------------------
# Errors: exactly one clear ConfigError naming the source and the field
# ------------------------------------------------------------------------------------------


def _config_error(source: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        Model.from_hf_config(source, **kwargs)
    err = info.value
    assert isinstance(err, ValueError)
    # one error, not a chain: no "during handling of the above exception" noise
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
    return str(err)


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in LLAMA_8B.items() if k != key}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (_without("num_attention_heads"), "num_attention_heads"),
        (_without("hidden_size"), "hidden_size"),
        (_without("vocab_size"), "vocab_size"),
        (_without("num_hidden_layers"), "num_hidden_layers"),
        (_without("intermediate_size"), "intermediate_size"),
        ({**LLAMA_8B, "num_hidden_layers": -2}, "num_hidden_layers"),
        ({**LLAMA_8B, "hidden_size": 0}, "hidden_size"),
        ({**LLAMA_8B, "intermediate_size": -1}, "intermediate_size"),
        ({**LLAMA_8B, "hidden_size": "4096"}, "hidden_size"),
        ({**LLAMA_8B, "num_attention_heads": 32.5}, "num_attention_heads"),
        ({**LLAMA_8B, "num_key_value_heads": True}, "num_key_value_heads"),
        ({**LLAMA_8B, "num_hidden_layers": True}, "num_hidden_layers"),
        ({**LLAMA_8B, "num_key_value_heads": 5}, "num_key_value_heads"),
        ({**LLAMA_8B, "num_key_value_heads": 0}, "num_key_value_heads"),
        ({**LLAMA_8B, "head_dim": -128}, "head_dim"),
        ({**LLAMA_8B, "num_attention_heads": 24}, "num_attention_heads"),  # 4096 % 24
        ({**LLAMA_8B, "tie_word_embeddings": "no"}, "tie_word_embeddings"),
        ({**LLAMA_8B, "torch_dtype": "float64"}, "torch_dtype"),
        ({**LLAMA_8B, "num_experts": 8}, "num_experts_per_tok"),
        ({**LLAMA_8B, "num_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({**LLAMA_8B, "num_experts": "8"}, "num_experts"),
        ({**LLAMA_8B, "layer_types": ["full_attention"] * 3}, "layer_types"),
        (
            {**LLAMA_8B, "layer_types": ["full_attention"] * 31 + ["bogus_attention"]},
            "layer_types[31]",
        ),
        ({**LLAMA_8B, "hybrid_override_pattern": "M-X*"}, "hybrid_override_pattern"),
        ({**LLAMA_8B, "hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern"),
        (
            {**LLAMA_8B, "quantization_config": {"quant_method": "gguf"}},
            "quantization_config.quant_method",
        ),
        ({**LLAMA_8B, "quantization_config": "fp8"}, "quantization_config"),
        (
            {**LLAMA_8B, "quantization_config": {"quant_method": "gptq", "bits": 5}},
            "quantization_config.bits",
        ),
        ({"model_type": "llava", "text_config": [1, 2]}, "text_config"),
        (
            {"model_type": "x", "text_config": _without("num_attention_heads")},
            "text_config.num_attention_heads",
        ),
        ({**LLAMA_8B, "model_type": "deepseek_v3", "kv_lora_rank": 512}, "qk_rope_head_dim"),
        ({**LLAMA_8B, "num_key_value_heads": [8, 8, 4]}, "num_key_value_heads"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_config_names_the_field(config: dict[str, Any], field: str) -> None:
    message = _config_error(config)
    assert message.startswith("<dict>: ")
    assert f"'{field}'" in message, message


def test_missing_heads_message_is_actionable() -> None:
    message = _config_error(_without("num_attention_heads"))
    assert "missing field 'num_attention_heads'" in message
    assert "n_head" in message and "positive integer" in message


def test_wrong_type_message_says_what_it_got() -> None:
    message = _config_error({**LLAMA_8B, "hidden_size": "4096"})
    assert "must be an integer" in message and "'4096'" in message
    assert "a boolean" in _config_error({**LLAMA_8B, "num_key_value_heads": True})


def test_truncated_json_text() -> None:
    message = _config_error(json.dumps(LLAMA_8B)[:-20])
    assert message.startswith("<json text>: invalid JSON") and "line 1" in message


def test_truncated_json_file_names_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_8B, indent=1)[:-30])
    message = _config_error(path)
    assert message.startswith(str(path)) and "invalid JSON" in message


def test_file_errors_name_the_file_and_field(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_8B, "num_hidden_layers": -1}))
    message = _config_error(path)
    assert message.startswith(f"{path}: field 'num_hidden_layers'")


@pytest.mark.parametrize("text", ["[1, 2]", "[]", '"config"', "42", "null", "true"])
def test_non_object_json(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert "expected a JSON object" in _config_error(path)
    if text.startswith("["):
        assert "expected a JSON object" in _config_error(text)


def test_nonexistent_path_and_empty_folder(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope" / "config.json"
    assert "no such file or folder" in _config_error(missing)
    assert "no such file or folder" in _config_error(str(missing))
    assert "has no config.json" in _config_error(tmp_path)


def test_not_a_config_source() -> None:
    assert "expected a path" in _config_error(42)


def test_no_attention_layer() -> None:
    mamba_only = {**LLAMA_8B, "hybrid_override_pattern": "M" * 32}
    assert "no attention layer" in _config_error(mamba_only)


def test_bad_dtype_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="weight_dtype"):
        Model.from_hf_config(LLAMA_8B, weight_dtype="fp6")
    with pytest.raises(InvalidArgumentError, match="kv_dtype"):
        Model.from_hf_config(LLAMA_8B, kv_dtype="int4")


# ------------------------------------------------------------------------------------------
# Nested text_config (multimodal wrappers)
# ------------------------------------------------------------------------------------------


def test_gemma3_text_config_uses_class_defaults() -> None:
    # HF omits text_config keys equal to Gemma3TextConfig's defaults (vocab 262208, tied).
    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "sliding_window": 1024,
        },
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
        "torch_dtype": "bfloat16",
    }
    m = Model.from_hf_config(cfg)
    assert m.vocab_size == 262208 and m.tie_word_embeddings
    assert m.total_params == pytest.approx(27.01e9, rel=0.01)
    assert m.kv_bytes_per_token == 507_904


def test_llama4_text_config_interleaved_moe() -> None:
    text = {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "vocab_size": 202048,
        "num_local_experts": 128,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
    }
    m = Model.from_hf_config(
        {"model_type": "llama4", "text_config": text, "tie_word_embeddings": False}
    )
    assert m.num_moe_layers == 24 and m.num_dense_layers == 24 and m.num_shared_experts == 1
    assert m.intermediate_size == 16384 and m.moe_intermediate_size == 8192
    assert m.total_params == pytest.approx(400.7e9, rel=0.005)
    assert m.active_params == pytest.approx(17.2e9, rel=0.01)


# ------------------------------------------------------------------------------------------
# Hybrid attention / Mamba / linear-attention models
# ------------------------------------------------------------------------------------------

# nvidia/Nemotron-H-8B-Base-8K (trimmed): 24 Mamba-2, 4 attention, 24 MLP blocks.
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "hidden_size": 4096,
    "num_hidden_layers": 52,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 21504,
    "ssm_state_size": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "n_groups": 8,
    "conv_kernel": 4,
    "vocab_size": 131072,
    "tie_word_embeddings": False,
}


def test_nemotron_h_pattern() -> None:
    m = Model.from_hf_config(NEMOTRON_H)
    assert (m.num_layers, m.num_attention_layers) == (52, 4)
    assert m.kv_bytes_per_token == 2 * 4 * 8 * 128 * 2
    assert not m.is_moe and m.num_dense_layers == 52
    # Mamba-2 mixers are counted: far more than the attention + MLP blocks alone
    no_mamba = 24 * 2 * 4096 * 21504 + 2 * 131072 * 4096
    assert m.total_params > no_mamba + 24 * 4096 * 8192 * 2


def test_nemotron_h_layers_block_type_equals_pattern() -> None:
    kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
    blocks = [kinds[c] for c in NEMOTRON_H["hybrid_override_pattern"]]
    alt = {k: v for k, v in NEMOTRON_H.items() if k != "hybrid_override_pattern"}
    m = Model.from_hf_config({**alt, "layers_block_type": blocks})
    assert m.total_params == Model.from_hf_config(NEMOTRON_H).total_params
    assert m.num_attention_layers == 4


def test_nemotron_3_super_latent_moe_matches_published_tensors() -> None:
    # NVIDIA-Nemotron-3-Super-120B-A12B: BF16 tensors 123,611,012,096 minus the MTP block
    # (2,942,324,736); active 12,770,216,960 (safetensors-header totals).
    cfg = {
        "model_type": "nemotron_h",
        "hidden_size": 4096,
        "num_hidden_layers": 88,
        "vocab_size": 131072,
        "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
        "EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "n_groups": 8,
        "ssm_state_size": 128,
        "conv_kernel": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "n_routed_experts": 512,
        "n_shared_experts": 1,
        "num_experts_per_tok": 22,
        "moe_latent_size": 1024,
        "moe_intermediate_size": 2688,
        "moe_shared_expert_intermediate_size": 5376,
        "mlp_hidden_act": "relu2",
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
    }
    m = Model.from_hf_config(cfg)
    assert m.total_params == pytest.approx(123_611_012_096 - 2_942_324_736, rel=1e-4)
    assert m.active_params == pytest.approx(12_770_216_960, rel=1e-4)
    assert (m.num_layers, m.num_attention_layers, m.num_moe_layers) == (88, 8, 40)


def test_jamba_period_offset() -> None:
    # ai21labs/Jamba-v0.1: published 52B total / 12B active; attention every 8th layer.
    cfg = {
        "model_type": "jamba",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "attn_layer_offset": 4,
        "attn_layer_period": 8,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_expand": 2,
        "mamba_dt_rank": "auto",
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "intermediate_size": 14336,
        "vocab_size": 65536,
        "tie_word_embeddings": False,
    }
    m = Model.from_hf_config(cfg)
    assert (m.num_attention_layers, m.num_moe_layers, m.num_dense_layers) == (4, 16, 16)
    assert m.kv_bytes_per_token == 2 * 4 * 8 * 128 * 2
    assert m.total_params == pytest.approx(52e9, rel=0.02)
    assert m.active_params == pytest.approx(12e9, rel=0.02)


QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "vocab_size": 151936,
    "head_dim": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "tie_word_embeddings": False,
}


def test_qwen3_next_matches_published_tensors() -> None:
    # Qwen3-Coder-Next: 79,674,391,296 parameters; 3,874,929,408 active (safetensors totals).
    m = Model.from_hf_config(QWEN3_NEXT)
    assert m.total_params == pytest.approx(79_674_391_296, rel=1e-4)
    assert m.active_params == pytest.approx(3_874_929_408, rel=1e-4)
    assert (m.num_layers, m.num_attention_layers) == (48, 12)
    assert m.kv_bytes_per_token == 2 * 12 * 2 * 256 * 2


def test_qwen3_next_layer_types_equal_interval() -> None:
    types = (["linear_attention"] * 3 + ["full_attention"]) * 12
    cfg = {k: v for k, v in QWEN3_NEXT.items() if k != "full_attention_interval"}
    m = Model.from_hf_config({**cfg, "layer_types": types})
    assert m.total_params == Model.from_hf_config(QWEN3_NEXT).total_params
    missing = {k: v for k, v in cfg.items() if k != "linear_num_value_heads"}
    assert "'linear_num_value_heads'" in _config_error({**missing, "layer_types": types})


def test_sliding_attention_layers_keep_kv() -> None:
    types = ["sliding_attention", "full_attention"] * 16
    m = Model.from_hf_config({**LLAMA_8B, "layer_types": types})
    assert m.num_attention_layers == 32


def test_granite_style_layers_block_type_keeps_mlps() -> None:
    blocks = (["mamba"] * 3 + ["attention"]) * 8
    m = Model.from_hf_config(
        {
            **LLAMA_8B,
            "layers_block_type": blocks,
            "mamba_n_heads": 128,
            "mamba_d_head": 64,
            "mamba_d_state": 128,
        }
    )
    assert m.num_attention_layers == 8 and m.num_layers == 32
    assert m.total_params > Model.from_hf_config(LLAMA_8B).total_params * 0.9


def test_decilm_block_configs() -> None:
    attn = {"n_heads_in_group": 8, "no_op": False, "replace_with_linear": False}
    blocks = [
        {"attention": attn, "ffn": {"ffn_mult": 5.25}},
        {"attention": {"no_op": True}, "ffn": {"ffn_mult": 2.625}},
        {"attention": {"replace_with_linear": True}, "ffn": {"no_op": True}},
        {"attention": attn, "ffn": {"ffn_mult": 5.25}},
    ]
    cfg = {
        **LLAMA_8B,
        "model_type": "nemotron-nas",
        "num_hidden_layers": 4,
        "block_configs": blocks,
    }
    cfg.pop("num_key_value_heads")
    m = Model.from_hf_config(cfg)
    assert (m.num_layers, m.num_attention_layers, m.num_kv_heads) == (4, 2, 4)
    assert m.intermediate_size == 14336  # 2/3 * 5.25 * 4096, rounded up to 256
    varied = [blocks[0], {**blocks[3], "attention": {**attn, "n_heads_in_group": 4}}]
    assert "'block_configs'" in _config_error(
        {**cfg, "num_hidden_layers": 2, "block_configs": varied}
    )
    bad = [{"attention": {"no_op": False}, "ffn": {"ffn_mult": 1.0}}]
    assert "n_heads_in_group" in _config_error(
        {**cfg, "num_hidden_layers": 1, "block_configs": bad}
    )


# ------------------------------------------------------------------------------------------
# KV heads, MoE layout and naming variants
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "n_head_kv",
        "num_kv_heads",
        "num_key_value_heads",
        "multi_query_group_num",
        "num_attention_groups",
    ],
)
def test_kv_head_field_variants(key: str) -> None:
    cfg = _without("num_key_value_heads")
    assert Model.from_hf_config({**cfg, key: 4}).num_kv_heads == 4
    assert Model.from_hf_config(cfg).num_kv_heads == 32  # default: every head has its KV


def test_kv_head_fallback_order_follows_vllm() -> None:
    cfg = {
        **_without("num_key_value_heads"),
        "num_kv_heads": 2,
        "num_key_value_heads": 8,
        "n_head_kv": 4,
    }
    assert Model.from_hf_config(cfg).num_kv_heads == 4  # n_head_kv first


def test_falcon_multi_query_and_rw_keys() -> None:
    falcon_7b = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_hidden_layers": 32,
        "num_attention_heads": 71,
        "multi_query": True,
        "vocab_size": 65024,
        "new_decoder_architecture": False,
    }
    m = Model.from_hf_config(falcon_7b)
    assert m.num_kv_heads == 1 and m.attention_type == "MQA" and m.tie_word_embeddings
    assert m.intermediate_size == 4 * 4544 and m.total_params == pytest.approx(6.92e9, rel=0.01)
    falcon_40b_rw = {
        "model_type": "RefinedWeb",
        "n_embd": 8192,
        "n_layer": 60,
        "n_head": 128,
        "n_head_kv": 8,
        "vocab_size": 65024,
        "new_decoder_architecture": True,
        "multi_query": True,
    }
    m = Model.from_hf_config(falcon_40b_rw)
    assert (m.num_layers, m.num_kv_heads) == (60, 8)  # new architecture ignores multi_query
    assert m.total_params == pytest.approx(41.3e9, rel=0.01)


@pytest.mark.parametrize(
    ("experts_key", "topk_key"),
    [
        ("num_local_experts", "num_experts_per_tok"),
        ("num_experts", "num_experts_per_tok"),
        ("n_routed_experts", "num_experts_per_tok"),
        ("moe_num_experts", "moe_topk"),
        ("num_experts", "top_k"),
        ("num_local_experts", "experts_per_token"),
    ],
)
def test_moe_naming_variants(experts_key: str, topk_key: str) -> None:
    m = Model.from_hf_config({**LLAMA_8B, experts_key: 8, topk_key: 2})
    assert (m.num_experts, m.experts_per_token) == (8, 2)
    assert m.expert_params == 32 * 8 * 3 * 4096 * 14336


def test_moe_topk_per_layer_list() -> None:
    m = Model.from_hf_config({**LLAMA_8B, "num_experts": 8, "moe_topk": [2] * 32})
    assert m.experts_per_token == 2
    assert "varies per layer" in _config_error(
        {**LLAMA_8B, "num_experts": 8, "moe_topk": [2, 1] * 16}
    )


def test_shared_experts_and_dense_layers() -> None:
    base = {**LLAMA_8B, "num_experts": 64, "num_experts_per_tok": 4, "moe_intermediate_size": 1024}
    plain = Model.from_hf_config(base)
    deepseek_style = Model.from_hf_config(
        {**base, "n_shared_experts": 2, "first_k_dense_replace": 2}
    )
    qwen2_style = Model.from_hf_config({**base, "shared_expert_intermediate_size": 2048})
    per_layer_shared = 3 * 4096 * 2048
    assert deepseek_style.num_shared_experts == 2 and deepseek_style.num_dense_layers == 2
    assert qwen2_style.num_shared_experts == 1
    assert qwen2_style.total_params - plain.total_params == 32 * per_layer_shared
    assert qwen2_style.active_params - plain.active_params == 32 * per_layer_shared
    sparse = Model.from_hf_config({**base, "decoder_sparse_step": 2})
    assert sparse.num_moe_layers == 16
    mlp_only = Model.from_hf_config({**base, "mlp_only_layers": [0, 5, 31]})
    assert mlp_only.num_dense_layers == 3
    # Llama-4's moe_layers / interleave and DeepSeek's moe_layer_freq
    assert Model.from_hf_config({**base, "moe_layer_freq": 4}).num_moe_layers == 8


def test_experts_touched() -> None:
    m = Model.from_hf_config({**LLAMA_8B, "num_experts": 8, "num_experts_per_tok": 2})
    assert m.expected_experts_touched(0) == 0
    assert m.expected_experts_touched(1) == pytest.approx(2)
    assert m.expected_experts_touched(1000) == pytest.approx(8)
    assert m.weight_bytes_touched(1) == pytest.approx(m.active_weight_bytes)
    assert m.weight_bytes_touched(10_000) == pytest.approx(m.weight_bytes)
    dense = Model.from_hf_config(LLAMA_8B)
    assert dense.weight_bytes_touched(64) == dense.weight_bytes
    assert dense.params_per_expert == 0 and dense.expected_experts_touched(5) == 0


# ------------------------------------------------------------------------------------------
# Quantization and dtypes
# ------------------------------------------------------------------------------------------


def _ct(num_bits: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        **extra,
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": {"num_bits": num_bits, "type": kind}}
        },
    }


@pytest.mark.parametrize(
    ("qc", "dtype"),
    [
        ({"quant_method": "fp8", "fmt": "e4m3"}, "fp8"),
        ({"quant_method": "fbgemm_fp8"}, "fp8"),
        (_ct(8, "float"), "fp8"),
        (_ct(8, "int"), "int8"),
        (_ct(4, "float", format="nvfp4-pack-quantized"), "fp4"),
        (_ct(4, "int", format="pack-quantized"), "int4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
        ({"quant_method": "gptq", "bits": 4}, "int4"),
        ({"quant_method": "gptq", "bits": 8}, "int8"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4"),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
        (
            {"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp8_e4m3"}}},
            "fp8",
        ),
        ({"quant_method": "mxfp4"}, "fp4"),
    ],
)
def test_quantization_variants(qc: dict[str, Any], dtype: str) -> None:
    m = Model.from_hf_config({**LLAMA_8B, "quantization_config": qc})
    assert m.weight_dtype == dtype
    assert m.quantized_scope == "linear"  # a dense model: MXFP4 covers its linear layers
    bpp = {"fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5}[dtype]
    assert m.weight_bytes == round(
        m.embedding_params * 2 + (m.total_params - m.embedding_params) * bpp
    )


def test_quantization_in_text_config_and_kv_scheme() -> None:
    qc = _ct(8, "float", kv_cache_scheme={"num_bits": 8, "type": "float"})
    m = Model.from_hf_config(
        {"model_type": "x", "text_config": LLAMA_8B, "quantization_config": qc}
    )
    assert (m.weight_dtype, m.kv_dtype) == ("fp8", "fp8")
    assert m.kv_bytes_per_token == 32 * 8 * 128 * 2


def test_torch_dtype_and_overrides() -> None:
    assert Model.from_hf_config({**LLAMA_8B, "torch_dtype": "float16"}).kv_dtype == "fp16"
    # vLLM serves float32 checkpoints in bfloat16
    fp32 = Model.from_hf_config({**LLAMA_8B, "torch_dtype": "float32"})
    assert (fp32.weight_dtype, fp32.kv_dtype) == ("bf16", "bf16")
    new_key = Model.from_hf_config({**_without("torch_dtype"), "dtype": "float16"})
    assert new_key.weight_dtype == "fp16"
    m = Model.from_hf_config(LLAMA_8B, weight_dtype="FP8", kv_dtype="fp8_e4m3")
    assert (m.weight_dtype, m.kv_dtype) == ("fp8", "fp8")
    assert Model.from_hf_config(LLAMA_8B, weight_dtype="awq").weight_dtype == "int4"
    assert Model.from_hf_config(LLAMA_8B, weight_dtype="fp32").weight_bytes == (4 * m.total_params)
    # an override skips a quantization_config pdtp cannot size
    odd = {**LLAMA_8B, "quantization_config": {"quant_method": "gguf"}}
    assert Model.from_hf_config(odd, weight_dtype="int4").weight_dtype == "int4"


def test_hf_quant_config_beside_config(tmp_path: pathlib.Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    quant = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
    }
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    for source in (tmp_path, tmp_path / "config.json"):
        m = Model.from_hf_config(source)
        assert (m.weight_dtype, m.kv_dtype) == ("fp8", "fp8")
    quant["quantization"] = {"quant_algo": "NVFP4", "kv_cache_quant_algo": None}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    m = Model.from_hf_config(tmp_path)
    assert (m.weight_dtype, m.kv_dtype) == ("fp4", "bf16")
    quant["quantization"] = {"quant_algo": "INT3"}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    message = _config_error(tmp_path)
    assert "hf_quant_config.json" in message and "quant_algo" in message
    (tmp_path / "hf_quant_config.json").write_text("{")
    assert "hf_quant_config.json: invalid JSON" in _config_error(tmp_path)


def test_mxfp4_experts_only_for_moe() -> None:
    moe = {
        **LLAMA_8B,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "quantization_config": {"quant_method": "mxfp4"},
    }
    m = Model.from_hf_config(moe)
    assert m.quantized_scope == "experts"
    assert m.weight_bytes == round(m.dense_params * 2 + m.expert_params * 0.5)
    assert m.active_weight_bytes == round(m.dense_params * 2 + 2 * m.params_per_expert * 0.5)
    # re-quantizing with another dtype covers every linear layer
    assert m.with_dtypes(weight_dtype="fp8").quantized_scope == "linear"


# ------------------------------------------------------------------------------------------
# The record itself
# ------------------------------------------------------------------------------------------


def test_to_dict_round_trip() -> None:
    m = Model.from_hf_config(QWEN3_NEXT, name="q3n", aliases=["Qwen/Qwen3-Next"])
    d = m.to_dict()
    assert d["kv_bytes_per_token"] == m.kv_bytes_per_token and d["attention_type"] == "GQA"
    assert json.loads(json.dumps(d)) == d
    assert Model.from_dict(d) == m and m.aliases == ("Qwen/Qwen3-Next",)
    with pytest.raises(ConfigError, match="unknown field"):
        Model.from_dict({**d, "bogus": 1})
    with pytest.raises(ConfigError):
        Model.from_dict({"name": "x"})
    assert hash(m) == hash(Model.from_dict(d))


def test_direct_construction_validates_fields() -> None:
    good = Model.from_hf_config(LLAMA_8B, name="ok").to_dict()
    for key, value in [
        ("num_layers", 0),
        ("hidden_size", True),
        ("head_dim", "128"),
        ("num_kv_heads", 3),
        ("weight_dtype", "fp6"),
        ("kv_dtype", "int8"),
        ("num_attention_layers", 33),
        ("active_params", 10**12),
        ("experts_per_token", 2),
        ("is_mla", 1),
        ("name", ""),
    ]:
        with pytest.raises(ConfigError, match=f"'{key}'"):
            Model.from_dict({**good, key: value})


def test_kv_per_rank_rejects_bad_tp() -> None:
    m = Model.from_hf_config(LLAMA_8B)
    for tp in (0, -1, True, 2.0):
        with pytest.raises(InvalidArgumentError, match="tp"):
            m.kv_bytes_per_token_per_rank(tp)  # type: ignore[arg-type]


def test_weight_bytes_scale_with_dtype() -> None:
    m = Model.from_hf_config(LLAMA_8B)
    assert m.weight_bytes_per_param == 2.0 and m.kv_dtype_bytes == 2
    fp4 = m.with_dtypes(weight_dtype="nvfp4")
    assert fp4.weight_bytes == round(
        fp4.embedding_params * 2 + (fp4.total_params - fp4.embedding_params) * 0.5
    )
    assert math.isclose(m.active_weight_bytes, m.weight_bytes)
    assert m.with_dtypes() is m


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_hidden_layers", 10**6), ("num_hidden_layers", 2**40), ("hidden_size", 2**33)],
)
def test_absurd_sizes_are_config_errors_not_memory_exhaustion(field: str, value: int) -> None:
    # Found by the hypothesis test: 2**31 layers used to build a 2**31-entry layer list.
    base = {
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    }
    with pytest.raises(ConfigError, match=field):
        Model.from_hf_config({**base, field: value})


def test_lfm2_short_convolutions() -> None:
    # LFM2-1.2B's config.json values: attention at full_attn_idxs, short convolutions
    # elsewhere, the MLP width adjusted as vLLM's Lfm2MLP does (2/3, rounded up to 256).
    cfg = {
        "model_type": "lfm2",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 65536,
        "intermediate_size": 12288,
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 256,
        "conv_L_cache": 3,
        "full_attn_idxs": [2, 5, 8, 10, 12, 14],
        "tie_word_embeddings": True,
    }
    m = Model.from_hf_config(cfg)
    assert (m.num_layers, m.num_attention_layers, m.intermediate_size) == (16, 6, 8192)
    assert m.total_params / 1e9 == pytest.approx(1.17, abs=0.01)  # published: 1.17B
    assert m.state_bytes_per_sequence == 10 * 2048 * 2 * 2  # (L_cache - 1) inputs, bf16
    layer_types = ["full_attention" if i in cfg["full_attn_idxs"] else "conv" for i in range(16)]
    typed = {k: v for k, v in cfg.items() if k != "full_attn_idxs"}
    assert Model.from_hf_config({**typed, "layer_types": layer_types}) == m


def test_modelopt_kv_cache_scheme_as_vllm_reads_it() -> None:
    """vLLM 0.33 (get_kv_cache_quant_algo_string) takes a ModelOpt kv_cache_scheme as a string
    or an object, ahead of kv_cache_quant_algo; a value it does not know leaves the cache at
    the model dtype."""

    def kv(scheme: object, **extra: object) -> str:
        qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": scheme}
        return Model.from_hf_config({**LLAMA_8B, "quantization_config": {**qc, **extra}}).kv_dtype

    assert kv("FP8") == "fp8"
    assert kv("fp8") == "fp8"
    assert kv("NVFP4") == "fp8"  # sized as FP8, the nearest cache dtype pdtp models
    assert kv("INT8") == "bf16"
    assert kv({"num_bits": 8, "type": "float", "dynamic": False}) == "fp8"
    assert kv({"num_bits": 4, "type": "float"}) == "fp8"
    assert kv({"num_bits": 8, "type": "int", "dynamic": False}) == "bf16"
    assert kv(None) == "bf16"
    # the scheme wins over kv_cache_quant_algo, as in vLLM
    assert kv("INT8", kv_cache_quant_algo="FP8") == "bf16"
    assert kv(None, kv_cache_quant_algo="FP8") == "fp8"
    message = _config_error(
        {
            **LLAMA_8B,
            "quantization_config": {
                "quant_method": "modelopt",
                "quant_algo": "FP8",
                "kv_cache_scheme": 8,
            },
        }
    )
    assert "kv_cache_scheme" in message and "string" in message
