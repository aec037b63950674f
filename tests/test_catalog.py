"""The built-in catalog: coverage, lookups, resolve_model, and GPU data with sources."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import pdtp
from pdtp import GPU, Model, catalog
from pdtp.errors import ConfigError, InvalidArgumentError, UnknownNameError

REQUIRED_GPUS = ("mi300x", "mi325x", "mi355x", "a100", "h100", "h200", "b200")


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------


def test_catalog_size_and_attention_kinds() -> None:
    ms = catalog.models()
    assert len(ms) >= 30
    kinds = {m.attention_type for m in ms}
    assert {"GQA", "MHA", "MQA", "MLA"} <= kinds
    assert sum(m.is_moe for m in ms) >= 5
    assert [m.name for m in ms] == sorted(m.name for m in ms)
    assert all(m.name == m.name.lower() and " " not in m.name for m in ms)


def test_catalog_models_are_cached_objects() -> None:
    assert catalog.model("deepseek-v3") is catalog.model("DeepSeek-V3")
    assert catalog.models()[0] is catalog.models()[0]


def test_every_reference_model_is_in_the_catalog(reference_dir: pathlib.Path) -> None:
    rows = json.loads((reference_dir / "models.json").read_text())
    for row in rows:
        m = catalog.model(row["hf_id"])
        assert m.total_params == pytest.approx(row["total_params_b_computed"] * 1e9, rel=0.02)
        assert m.active_params == pytest.approx(row["active_params_b_computed"] * 1e9, rel=0.02)
        assert m.kv_bytes_per_token == row["kv_cache_bytes_per_token_bf16"]
        assert m.attention_type == row["attention_type"], row["name"]
        assert (m.num_attention_heads, m.num_kv_heads) == (
            row["num_attention_heads"],
            row["num_key_value_heads"],
        )


def test_catalog_entries_carry_sources() -> None:
    data = json.loads(_data_text("models.json"))
    assert "about" in data
    for entry in data["models"]:
        assert entry["source"].strip(), entry["name"]
        assert isinstance(entry["verified"], bool)
        assert isinstance(entry["config"], dict) and entry["config"].get("model_type")


def _data_text(name: str) -> str:
    from importlib import resources

    return resources.files("pdtp").joinpath("data", name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("llama-3.1-70b", "llama-3.1-70b"),
        ("LLAMA-3.1-70B", "llama-3.1-70b"),
        ("  llama-3.1-70b ", "llama-3.1-70b"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/meta-llama-3.1-70b", "llama-3.1-70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
        ("qwen3_30b_a3b", "qwen3-30b-a3b"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("Qwen/Qwen3-32B-FP8", "qwen3-32b-fp8"),
        ("google/gemma-3-27b-it", "gemma-3-27b"),
        ("Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ],
)
def test_model_lookup(query: str, name: str) -> None:
    assert catalog.model(query).name == name
    assert catalog.resolve_model(query).name == name


def test_model_passes_through_and_dtype_overrides() -> None:
    m = catalog.model("llama-3.1-8b")
    assert catalog.model(m) is m and catalog.resolve_model(m) is m
    fp8 = catalog.model("llama-3.1-8b", weight_dtype="fp8", kv_dtype="fp8")
    assert (fp8.weight_dtype, fp8.kv_dtype) == ("fp8", "fp8")
    assert fp8.weight_bytes < m.weight_bytes and fp8.kv_bytes_per_token * 2 == (
        m.kv_bytes_per_token
    )
    assert catalog.resolve_model("llama-3.1-8b", weight_dtype="fp8") == fp8.with_dtypes(
        kv_dtype="bf16"
    )


def test_native_weight_dtypes() -> None:
    for name in ("deepseek-v3", "deepseek-r1", "kimi-k2", "qwen3-32b-fp8"):
        assert catalog.model(name).weight_dtype == "fp8", name
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        m = catalog.model(name)
        assert (m.weight_dtype, m.quantized_scope) == ("fp4", "experts")
    assert catalog.model("gpt-oss-120b").weight_bytes == pytest.approx(61.6e9, rel=0.02)
    for name in ("llama-3.1-70b", "llama-4-maverick", "glm-4.5", "qwen3-235b-a22b"):
        assert catalog.model(name).weight_dtype == "bf16", name


def test_catalog_shapes_spot_checks() -> None:
    scout, maverick = catalog.model("llama-4-scout"), catalog.model("llama-4-maverick")
    assert scout.num_moe_layers == 48 and maverick.num_moe_layers == 24
    assert catalog.model("falcon-7b").num_kv_heads == 1
    assert catalog.model("falcon-40b").num_kv_heads == 8
    assert catalog.model("gemma-3-27b").tie_word_embeddings
    assert catalog.model("deepseek-v2-lite").kv_bytes_per_token == 31_104
    assert catalog.model("phi-4").num_kv_heads == 10
    vl = catalog.model("qwen3-vl-8b")
    assert (vl.num_layers, vl.hidden_size, vl.hf_id) == (36, 4096, "Qwen/Qwen3-VL-8B-Instruct")


def test_unknown_model_lists_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        catalog.model("llama-3.1-7b")
    message = str(info.value)
    assert "unknown model 'llama-3.1-7b'" in message
    assert "llama-3.1-70b" in message and "llama-3.1-8b" in message
    assert isinstance(info.value, LookupError)
    with pytest.raises(UnknownNameError, match="deepseek-v3"):
        catalog.model("deepsek-v3")
    with pytest.raises(UnknownNameError, match="qwen3-32b"):
        catalog.model("Qwen/Qwen3-32")


def test_unknown_model_rejects_non_strings() -> None:
    with pytest.raises(UnknownNameError):
        catalog.model(42)  # type: ignore[arg-type]


LLAMA_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}


def test_resolve_model_every_form(tmp_path: pathlib.Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    forms: list[Any] = [
        LLAMA_8B,
        json.dumps(LLAMA_8B),
        tmp_path,
        str(tmp_path),
        str(tmp_path / "config.json"),
        catalog.model("llama-3.1-8b"),
        "llama-3.1-8b",
        "meta-llama/Llama-3.1-8B-Instruct",
    ]
    totals = {catalog.resolve_model(f).total_params for f in forms}
    assert len(totals) == 1


def test_resolve_model_unknown() -> None:
    with pytest.raises(UnknownNameError) as info:
        catalog.resolve_model("acme/not-a-model-7b")
    assert "closest" in str(info.value) and "config.json" in str(info.value)
    with pytest.raises(ConfigError):
        catalog.resolve_model('{"hidden_size": 1')
    with pytest.raises(ConfigError):
        catalog.resolve_model(3.5)  # type: ignore[arg-type]


def test_public_names_resolve_through_pdtp() -> None:
    # A fresh interpreter: the documented `import pdtp; pdtp.model(...)` path.
    code = (
        "import pdtp; from pdtp import catalog; "
        "assert pdtp.model('kimi-k2') is catalog.model('kimi-k2'); "
        "assert pdtp.gpu('MI300X') is catalog.gpu('mi300x'); "
        "assert len(pdtp.models()) == len(catalog.models()) >= 30; "
        "assert len(pdtp.gpus()) == len(catalog.gpus()); "
        "from pdtp import Model; from pdtp import GPU; "
        "assert pdtp.Model is Model and pdtp.GPU is GPU; "
        "assert callable(pdtp.model); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_pdtp_model_stays_callable_after_catalog_import() -> None:
    # This module imported pdtp.catalog (and with it the pdtp.model submodule) at the top.
    assert callable(pdtp.model) and callable(pdtp.gpu)
    assert pdtp.model("llama-3.1-8b") is catalog.model("llama-3.1-8b")
    assert pdtp.gpu("h100") is catalog.gpu("h100")
    assert pdtp.Model is Model


def test_pdtp_model_stays_callable_after_submodule_import() -> None:
    # The Model and GPU records live in private modules, so no submodule shadows the
    # catalog functions `pdtp.model` / `pdtp.gpu`, whatever the import order.
    code = (
        "from pdtp._model import Model; from pdtp._gpu import GPU; import pdtp; "
        "import pdtp.catalog; print(callable(pdtp.model), callable(pdtp.gpu))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "True True", out.stderr


def test_importing_the_catalog_reads_no_data() -> None:
    code = (
        "import pdtp.catalog as c; "
        "print(c._model_entries.cache_info().currsize, c._gpus.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0"]


# ------------------------------------------------------------------------------------------
# GPUs
# ------------------------------------------------------------------------------------------


def test_required_gpus_present_with_sources() -> None:
    names = {g.name for g in catalog.gpus()}
    assert set(REQUIRED_GPUS) <= names
    for g in catalog.gpus():
        assert g.source.strip() and g.display_name
        assert g.memory_bytes > 16 * 2**30 and g.hbm_bandwidth > 1e11
        assert g.bf16_flops > 1e14 and g.link_bandwidth > 1e9 and g.gpus_per_node >= 1
    data = json.loads(_data_text("gpus.json"))
    assert "MiB" in data["about"] and all(e["source"] for e in data["gpus"])


def test_gpu_values_match_reference(reference_dir: pathlib.Path) -> None:
    ref = {g["name"]: g for g in json.loads((reference_dir / "gpus.json").read_text())}
    for g in catalog.gpus():
        r = ref[g.display_name]
        assert g.vendor == r["vendor"] and g.source == r["source"]
        assert g.hbm_bandwidth == pytest.approx(r["hbm_bw_tbs"] * 1e12)
        assert g.bf16_flops == pytest.approx(r["bf16_dense_tflops"] * 1e12)
        for mine, key in ((g.fp8_flops, "fp8_dense_tflops"), (g.fp4_flops, "fp4_dense_tflops")):
            assert (mine is None) == (r[key] is None)
            if mine is not None:
                assert mine == pytest.approx(r[key] * 1e12)
        assert g.link_bandwidth == pytest.approx(r["intra_node_bw_gbs_per_gpu_unidir"] * 1e9)
        assert g.gpus_per_node == r["gpus_per_node"]
        # capacities are GiB per the sources (GB200/L40S: the MiB nvidia-smi reports)
        assert g.memory_gib == pytest.approx(r["hbm_gb"], rel=0.07)


def test_gpu_memory_units() -> None:
    assert catalog.gpu("h100").memory_bytes == 80 * 2**30
    assert catalog.gpu("h200").memory_bytes == 141 * 2**30
    assert catalog.gpu("mi300x").memory_bytes == 192 * 2**30
    assert catalog.gpu("mi355x").memory_bytes == 288 * 2**30
    assert catalog.gpu("gb200").memory_bytes == 189_471 * 2**20
    assert catalog.gpu("a100").hbm_bandwidth == 2.039e12  # exact, no float drift


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("MI300X", "mi300x"),
        ("mi300x", "mi300x"),
        ("h100-sxm", "h100"),
        ("H100_SXM", "h100"),
        ("a100-80gb", "a100"),
        ("A100-SXM4-80GB", "a100"),
        ("H200-SXM-141GB", "h200"),
        ("b200-sxm", "b200"),
        ("AMD Instinct MI355X", "mi355x"),
        ("nvidia h100 sxm5 80gb", "h100"),
        ("mi325x", "mi325x"),
        ("gb200-nvl72", "gb200"),
        ("L40S", "l40s"),
    ],
)
def test_gpu_lookup(query: str, name: str) -> None:
    assert catalog.gpu(query).name == name


def test_gpu_passes_through_and_unknown_lists_closest() -> None:
    g = catalog.gpu("h200")
    assert catalog.gpu(g) is g
    with pytest.raises(UnknownNameError) as info:
        catalog.gpu("h300")
    assert "h200" in str(info.value) and "h100" in str(info.value)
    with pytest.raises(UnknownNameError, match="mi325x"):
        catalog.gpu("mi320x")


def test_peak_flops_fallbacks() -> None:
    a100, h100 = catalog.gpu("a100"), catalog.gpu("h100")
    mi300x, mi355x, b200 = catalog.gpu("mi300x"), catalog.gpu("mi355x"), catalog.gpu("b200")
    assert a100.peak_flops("fp8") == a100.bf16_flops  # no FP8 tensor cores
    assert a100.peak_flops("fp4") == a100.bf16_flops
    assert h100.peak_flops("fp8") == pytest.approx(1979e12)
    assert h100.peak_flops("fp4") == h100.fp8_flops  # no FP4: next wider
    assert h100.peak_flops("int4") == h100.fp8_flops
    assert mi300x.peak_flops("bf16") == pytest.approx(1307.4e12)
    assert mi355x.peak_flops("fp4") == pytest.approx(10066.3e12)
    assert b200.peak_flops("int4") == b200.fp4_flops
    assert b200.peak_flops("fp16") == b200.peak_flops("fp32") == b200.bf16_flops
    assert h100.peak_flops("int8") == pytest.approx(1979e12)
    assert mi355x.peak_flops("int8") == mi355x.bf16_flops  # int8 peak not given
    with pytest.raises(InvalidArgumentError, match="dtype"):
        h100.peak_flops("fp6")


def test_visible_devices_env() -> None:
    for g in catalog.gpus():
        expected = "HIP_VISIBLE_DEVICES" if g.vendor == "AMD" else "CUDA_VISIBLE_DEVICES"
        assert g.visible_devices_env == expected
    assert catalog.gpu("mi300x").visible_devices_env == "HIP_VISIBLE_DEVICES"
    assert catalog.gpu("h100").visible_devices_env == "CUDA_VISIBLE_DEVICES"


def test_gpu_record_round_trip_and_validation() -> None:
    g = catalog.gpu("mi300x")
    d = g.to_dict()
    assert d["visible_devices_env"] == "HIP_VISIBLE_DEVICES"
    assert json.loads(json.dumps(d)) == d and GPU.from_dict(d) == g
    custom = GPU.from_dict({**d, "name": "mi300x-oc", "hbm_bandwidth": 6e12, "aliases": []})
    assert custom.hbm_bandwidth == 6e12
    for key, value in [
        ("vendor", "Intel"),
        ("memory_bytes", 0),
        ("hbm_bandwidth", -1.0),
        ("fp8_flops", 0),
        ("gpus_per_node", True),
        ("bf16_flops", float("inf")),
    ]:
        with pytest.raises(InvalidArgumentError, match=key):
            GPU.from_dict({**d, key: value})
    with pytest.raises(InvalidArgumentError, match="unknown field"):
        GPU.from_dict({**d, "tdp": 750})


# ------------------------------------------------------------------------------------------
# Exact model reference (serve_ref) and the optional Hugging Face lookup (pdtp.hub)
# ------------------------------------------------------------------------------------------


def test_serve_ref_is_what_the_user_named(tmp_path: pathlib.Path) -> None:
    # An instruct id the catalog knows as an alias stays instruct.
    m = catalog.resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    assert m.serve_ref == "meta-llama/Llama-3.1-8B-Instruct" and m.name == "llama-3.1-8b"
    assert "llama-3.1-8b" in (m.serve_note or "")
    # A short catalog name serves the canonical id, and says so.
    m = catalog.resolve_model("llama-3.1-70b")
    assert m.serve_ref == "meta-llama/Meta-Llama-3.1-70B"
    assert m.serve_note and "llama-3.1-70b" in m.serve_note and m.serve_ref in m.serve_note
    assert catalog.model("llama-3.1-70b") is catalog.model("LLAMA-3.1-70B")
    # A local config serves its folder (absolute), whichever way it was given.
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    for form in (folder, str(folder), str(folder / "config.json")):
        assert catalog.resolve_model(form).serve_ref == str(folder.resolve())
    # A dict serves the id in _name_or_path only when it is an org/name id.
    named = {**LLAMA_8B, "_name_or_path": "acme/llama-8b-ft"}
    assert catalog.resolve_model(named).serve_ref == "acme/llama-8b-ft"
    hostile = {**LLAMA_8B, "_name_or_path": "org/x;touch${IFS}PWNED;#"}
    assert catalog.resolve_model(hostile).serve_ref is None
    # serve_ref does not make two equal shapes different models.
    assert catalog.resolve_model("llama-3.1-8b") == catalog.resolve_model(
        "meta-llama/Llama-3.1-8B-Instruct"
    )


@pytest.mark.parametrize("path", ["./x/config.json", "x/y/config.json", "missing.json", "~/m"])
def test_missing_config_path_is_a_missing_file_not_an_unknown_model(path: str) -> None:
    with pytest.raises(ConfigError, match="no such file or folder"):
        catalog.resolve_model(path)


class _FakeHub:
    """Stands in for huggingface_hub.hf_hub_download: serves files from a folder per repo,
    into a snapshot folder, and records every call."""

    def __init__(self, root: pathlib.Path, repos: dict[str, dict[str, Any]]) -> None:
        self.root, self.repos, self.calls = root, repos, []  # type: ignore[var-annotated]

    def __call__(self, repo_id: str, filename: str, **kwargs: Any) -> str:
        from huggingface_hub import errors

        self.calls.append((repo_id, filename, kwargs.get("local_files_only")))
        if repo_id not in self.repos:
            raise errors.RepositoryNotFoundError(f"{repo_id} not found", response=_Response())
        files = self.repos[repo_id]
        if filename not in files:
            raise errors.EntryNotFoundError(f"{filename} not in {repo_id}")
        snapshot = self.root / repo_id.replace("/", "--") / "snapshots" / "abc123"
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / filename).write_text(json.dumps(files[filename]))
        return str(snapshot / filename)


class _Response:
    status_code = 404
    headers: ClassVar[dict[str, str]] = {}
    url = "https://huggingface.co"
    request = None


@pytest.fixture
def fake_hub(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_FakeHub]:
    import huggingface_hub

    from pdtp import hub

    fp8 = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    fake = _FakeHub(
        tmp_path / "hub",
        {
            "acme/llama-8b-ft": {"config.json": LLAMA_8B},
            "acme/llama-8b-fp8": {"config.json": LLAMA_8B, "hf_quant_config.json": fp8},
            "acme/no-config": {"README.md": {}},
        },
    )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "_reachable", lambda endpoint, timeout_s=3.0: True)
    hub._fetch.cache_clear()
    yield fake
    hub._fetch.cache_clear()


def test_hub_lookup_fetches_config_and_sidecar(fake_hub: _FakeHub) -> None:
    m = pdtp.model("acme/llama-8b-ft")
    assert (m.name, m.hf_id, m.serve_ref) == ("acme/llama-8b-ft",) * 3
    assert m.total_params == catalog.model("llama-3.1-8b").total_params
    assert ("acme/llama-8b-ft", "config.json", False) in fake_hub.calls
    quantized = catalog.resolve_model("acme/llama-8b-fp8")
    assert (quantized.weight_dtype, quantized.kv_dtype) == ("fp8", "fp8")
    # Cached in-process: a second lookup does not ask again.
    before = len(fake_hub.calls)
    pdtp.model("acme/llama-8b-ft")
    assert len(fake_hub.calls) == before


def test_hub_lookup_failures_say_how_to_pass_the_file(fake_hub: _FakeHub) -> None:
    for name, why in (
        ("acme/nope", "nor a model repository"),
        ("acme/no-config", "no config.json"),
    ):
        with pytest.raises(UnknownNameError) as info:
            pdtp.model(name)
        assert why in str(info.value)
        assert "--config path/to/config.json" in str(info.value)
        assert "closest" in str(info.value)


def test_hub_offline_reads_the_cache_only(
    fake_hub: _FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import errors

    from pdtp import hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def offline(repo_id: str, filename: str, **kwargs: Any) -> str:
        assert kwargs["local_files_only"] is True
        raise errors.LocalEntryNotFoundError("not cached")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    hub._fetch.cache_clear()
    with pytest.raises(UnknownNameError, match="HF_HUB_OFFLINE is set.*--config path/to/config"):
        pdtp.model("acme/llama-8b-ft")


def test_hub_real_client_offline_with_empty_cache() -> None:
    # The real huggingface_hub, offline (conftest sets HF_HUB_OFFLINE and an empty HF_HOME):
    # a quick, clear refusal and no network.
    from pdtp import hub

    hub._fetch.cache_clear()
    with pytest.raises(UnknownNameError, match="Model.from_hf_config"):
        catalog.resolve_model("acme/never-cached-model")


def test_hub_without_huggingface_hub_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pdtp import hub

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    hub._fetch.cache_clear()
    with pytest.raises(UnknownNameError, match=r"pdtp\[hub\].*--config path/to/config.json"):
        pdtp.model("acme/llama-8b-ft")
    hub._fetch.cache_clear()
