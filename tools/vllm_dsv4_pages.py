"""Regenerate tests/data/vllm_dsv4_pages.json: DeepSeek-V4's KV-cache page sizes as vLLM's
own spec classes compute them (``vllm/v1/kv_cache_interface.py``), with the spec arguments
``models/deepseek_v4/attention.py``, ``compressor.py`` and
``v1/attention/backends/mla/sparse_swa.py`` pass; and how vLLM's KV-cache planner packs those
mixed page sizes into one pool (``"packing"``): every layer's caches of the two vendored
configs (tests/data/hf-configs, in the order the model registers them) go through
``v1/core/kv_cache_planning.py``'s own ``get_kv_cache_groups`` (buckets of one spec type, split
by ``_get_packed_kv_cache_groups``: DeepSeek-V4's indexer backend declares only block-outermost
layouts, BLHNC first), ``_get_kv_cache_bytes_per_block`` (one block id holds a page of every
layer of the widest group) and ``_max_memory_usage_bytes_from_groups`` (a request's blocks,
summed over the groups, times the bytes per block).

torch is not needed: the spec classes only read a dtype's element size, so a stand-in module
gives them the four dtypes the DeepSeek-V4 caches use; the spec registry is filled by vLLM's
own ``register_all_kvcache_specs`` (taken from its source, the platform hook left out). Run on
an unpacked wheel::

    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-0.33.0
    unzip -q /tmp/vllm-0.33.0/vllm-0.33.0-*.whl 'vllm/*' -d /tmp/vllm-0.33.0/src
    python tools/vllm_dsv4_pages.py /tmp/vllm-0.33.0/src > tests/data/vllm_dsv4_pages.json
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib.util
import json
import logging
import pathlib
import random
import sys
import types
from typing import Any

_SIZES = {"uint8": 1, "bfloat16": 2, "float8_e4m3fn": 1, "float32": 4}


def _stub_torch() -> None:
    torch = types.ModuleType("torch")

    class dtype:  # torch's name
        def __init__(self, name: str) -> None:
            self.name = name

        def __repr__(self) -> str:
            return f"torch.{self.name}"

    torch.dtype = dtype  # type: ignore[attr-defined]
    for name in _SIZES:
        setattr(torch, name, dtype(name))
    sys.modules["torch"] = torch


def _module(name: str, **attrs: Any) -> None:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod


def _load(root: pathlib.Path, name: str) -> Any:
    path = root / (name.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_planner(root: pathlib.Path, kv: Any) -> Any:
    """``vllm.v1.core.kv_cache_planning`` with stand-ins for what it imports but the grouping
    and sizing functions do not use (configs, hisparse, device names)."""
    _module("vllm.config", SpeculativeConfig=object, VllmConfig=object)
    sys.modules["vllm.config"].get_current_vllm_config_or_none = lambda: None  # type: ignore[attr-defined]
    _module("vllm.utils.mem_utils", format_gib=lambda b: f"{b / 2**30:.2f}")
    _module("vllm.utils.import_utils", resolve_obj_by_qualname=None)
    _module("vllm.v1.core", __path__=[])
    _module("vllm.v1.core.kv_cache_utils", _kv_cache_device_name=lambda c: "cuda")
    _module("vllm.v1.hisparse", __path__=[])
    _module(
        "vllm.v1.hisparse.layout",
        get_hisparse_host_pool_bytes=None,
        get_hisparse_kv_cache_config=None,
        get_hisparse_kv_cache_groups=lambda config, specs: None,  # hisparse is off by default
    )
    # vLLM's own registration table (single_type_kv_cache_manager.py), managers stood in.
    src = (root / "vllm/v1/core/single_type_kv_cache_manager.py").read_text()
    fn = next(
        n
        for n in ast.parse(src).body
        if isinstance(n, ast.FunctionDef) and n.name == "register_all_kvcache_specs"
    )
    fn.body = [
        st
        for st in fn.body
        if not isinstance(st, ast.ImportFrom) and "current_platform" not in ast.unparse(st)
    ]
    ns: dict[str, Any] = {
        "KVCacheSpecRegistry": sys.modules["vllm.v1.kv_cache_spec_registry"].KVCacheSpecRegistry
    }
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id not in ns:
            ns[node.id] = getattr(kv, node.id, None) or type(node.id, (), {})
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "register_all_kvcache_specs", "exec"), ns)
    _module(
        "vllm.v1.core.single_type_kv_cache_manager",
        register_all_kvcache_specs=ns["register_all_kvcache_specs"],
    )
    _load(root, "vllm.v1.core.kv_cache_config_builder")
    return _load(root, "vllm.v1.core.kv_cache_planning")


class _Config(types.SimpleNamespace):
    """The VllmConfig fields the planner reads (defaults of ``vllm serve``; one token in
    flight per request: a decoding request)."""


def _config(max_model_len: int, layout: Any) -> _Config:
    ns = types.SimpleNamespace
    return _Config(
        scheduler_config=ns(disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=8192),
        cache_config=ns(
            get_resolved_kv_cache_layout=lambda: layout,
            num_gpu_blocks_override=None,
            prefix_cache_retention_interval=None,
            mamba_cache_mode="none",
        ),
        attention_config=ns(hisparse_config=None),
        model_config=ns(max_model_len=max_model_len, supports_kv_cache_grouping=False),
        parallel_config=ns(decode_context_parallel_size=1),
        max_in_flight_tokens=1,
    )


class _Specs:
    """DeepSeek-V4's five cache specs with the arguments its modules pass, built once for both
    records: ``stride`` is the ``MultipleOf(256)`` block-stride alignment
    ``v1/worker/utils.py`` ``customize_attention_spec`` gives the compressed and indexer specs
    of a backend with one fixed kernel block size (256) — the packing record carries it, the
    page record (the spec classes alone) does not."""

    def __init__(self, kv: Any, torch: Any, fp8: bool, stride: Any = None) -> None:
        self.kv, self.torch, self.fp8 = kv, torch, fp8
        self.align = 576 if fp8 else 512
        self.layout = "fp8_ds_mla" if fp8 else "bf16"
        self.latent = torch.uint8 if fp8 else torch.bfloat16
        self.stride = {} if stride is None else {"block_stride_alignment": stride}

    def swa(self) -> Any:
        """``DeepseekV4SWACache.get_kv_cache_spec`` (block_size=64)."""
        return self.kv.SlidingWindowMLASpec(
            block_size=64,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=512,
            dtype=self.latent,
            sliding_window=128,
            cache_dtype_str=self.layout,
            state_content_bytes=584 if self.fp8 else None,
            alignment=self.align,
            model_version="deepseek_v4",
        )

    def compressed(self, ratio: int) -> Any:
        """``DeepseekV4Attention.get_kv_cache_spec`` (block 256: sparse_mla.py)."""
        return self.kv.MLAAttentionSpec(
            block_size=256,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=512,
            dtype=self.latent,
            tokens_per_state=ratio,
            cache_dtype_str=self.layout,
            alignment=self.align,
            model_version="deepseek_v4",
            state_content_bytes=584 if self.fp8 else None,
            **self.stride,
        )

    def state(self, ratio: int) -> Any:
        """``CompressorStateCache.get_kv_cache_spec`` of the attention's compressor."""
        coff = 1 + (ratio == 4)
        return self.kv.SlidingWindowMLASpec(
            block_size=4 if ratio == 4 else 8,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=2 * coff * 512,
            dtype=self.torch.float32,
            sliding_window=coff * ratio,
            alignment=self.align,
        )

    def index(self) -> Any:
        """``DeepseekV4IndexerCache`` (fp8 keys: 128 + 4 scale bytes)."""
        return self.kv.MLAAttentionSpec(
            block_size=256,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=128 + 128 // 128 * 4,
            dtype=self.torch.uint8,
            tokens_per_state=4,
            alignment=self.align,
            **self.stride,
        )

    def index_state(self) -> Any:
        """The indexer's compressor state."""
        return self.kv.SlidingWindowMLASpec(
            block_size=4,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=2 * 2 * 128,
            dtype=self.torch.float32,
            sliding_window=8,
            alignment=self.align,
        )


def _layer_specs(kv: Any, torch: Any, multiple_of: Any, ratios: list[int], fp8: bool) -> dict:
    """Every layer's cache specs, in the order ``DeepseekV4Attention.__init__`` registers
    them (indexer keys and its compressor state, the SWA cache, the attention's compressed
    latents, its compressor state), with the packing's block-stride alignment."""
    specs = _Specs(kv, torch, fp8, stride=multiple_of(256))
    out: dict[str, Any] = {}
    for i, r in enumerate(ratios):
        p = f"model.layers.{i}.self_attn"
        if r == 4:
            out[f"{p}.indexer.k_cache"] = specs.index()
            out[f"{p}.indexer.compressor.state_cache"] = specs.index_state()
        out[f"{p}.swa_cache"] = specs.swa()
        if r:
            out[p] = specs.compressed(r)
            out[f"{p}.compressor.state_cache"] = specs.state(r)
    return out


#: Context lengths the packing is recorded at (tokens a request holds).
CONTEXTS = (1, 100, 257, 8192, 65536, 1 << 20)


def packing(root: pathlib.Path, kv: Any, torch: Any, configs: pathlib.Path) -> dict[str, Any]:
    planner = _load_planner(root, kv)
    multiple_of = sys.modules["vllm.v1.attention.backend"].MultipleOf
    layout = sys.modules["vllm.v1.kv_cache_layout"].KVCacheLayout.BLHNC
    builder = planner.DefaultKVCacheConfigBuilder()
    out: dict[str, Any] = {}
    for name in ("DeepSeek-V4-Flash", "DeepSeek-V4-Pro"):
        cfg = json.loads((configs / f"deepseek-ai--{name}" / "config.json").read_text())
        ratios = cfg["compress_ratios"][: cfg["num_hidden_layers"]]
        for kv_layout, fp8 in (("fp8_ds_mla", True), ("bf16", False)):
            specs = _layer_specs(kv, torch, multiple_of, ratios, fp8)
            groups = planner.get_kv_cache_groups(_config(8192, layout), specs)
            per_block = planner._get_kv_cache_bytes_per_block(groups, layout)
            rows = []
            for g in groups:
                layers = g.kv_cache_spec.kv_cache_specs.values()
                first = g.kv_cache_spec.first_spec
                rows.append(
                    {
                        "layers": len(g.layer_names),
                        "spec": type(first).__name__,
                        "block_size": g.kv_cache_spec.block_size,
                        "sliding_window": getattr(first, "sliding_window", None),
                        "page_bytes": sorted(spec.page_size_bytes for spec in layers),
                        "group_bytes": g.kv_cache_spec.page_size_bytes,
                    }
                )
            requests = {}
            for n in CONTEXTS:
                c = _config(n, layout)
                requests[str(n)] = {
                    "blocks": [g.kv_cache_spec.max_memory_usage_pages(c) for g in groups],
                    "bytes": planner._max_memory_usage_bytes_from_groups(builder, c, groups),
                }
            # One GiB of pool: the blocks vLLM carves out of it (get_kv_cache_config_from_groups).
            pool = planner.get_kv_cache_config_from_groups(_config(8192, layout), groups, 1 << 30)
            out[f"{name}/{kv_layout}"] = {
                "groups": rows,
                "bytes_per_block": per_block,
                "blocks_per_gib": pool.num_blocks,
                "requests": requests,
            }
    # Other layer mixes (the Flash config with these compress_ratios), so that a restatement
    # of the grouping is held to vLLM's beyond the two real patterns: balanced and
    # unbalanced buckets, no C4 layers (no mixed balanced bucket), no C128 layers.
    mixes = []
    rng = random.Random(20260)
    for i in range(16):
        n = rng.randint(2, 48)
        choices = [0, 128] if i % 4 == 1 else [4] if i % 8 == 2 else [0, 4, 128, 4, 128]
        ratios = [rng.choice(choices) for _ in range(n)]
        fp8 = i % 2 == 0
        specs = _layer_specs(kv, torch, multiple_of, ratios, fp8)
        groups = planner.get_kv_cache_groups(_config(8192, layout), specs)
        mixes.append(
            {
                "compress_ratios": ratios,
                "kv_cache_dtype": "fp8_ds_mla" if fp8 else "bf16",
                "bytes_per_block": planner._get_kv_cache_bytes_per_block(groups, layout),
                "request_bytes": {
                    str(n_tok): planner._max_memory_usage_bytes_from_groups(
                        builder, _config(n_tok, layout), groups
                    )
                    for n_tok in CONTEXTS
                },
            }
        )
    out["mixes"] = mixes
    return out


def main(root: pathlib.Path, configs: pathlib.Path | None = None) -> dict[str, Any]:
    _stub_torch()
    import torch  # the stand-in

    for pkg in ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends"):
        _module(pkg, __path__=[])
    _module("vllm.logger", init_logger=logging.getLogger)
    _module(
        "vllm.utils.torch_utils",
        get_dtype_size=lambda d: _SIZES[d.name],
    )

    class MambaAttentionBackendEnum(enum.Enum):
        MAMBA2 = "mamba2"

    _module(
        "vllm.v1.attention.backends.registry", MambaAttentionBackendEnum=MambaAttentionBackendEnum
    )

    @dataclasses.dataclass(frozen=True)
    class MultipleOf:  # vllm/v1/attention/backend.py's (that module needs a GPU stack)
        base: int

    _module("vllm.v1.attention.backend", MultipleOf=MultipleOf)
    _load(root, "vllm.utils.math_utils")
    _load(root, "vllm.v1.kv_cache_layout")
    _load(root, "vllm.v1.kv_cache_spec_registry")
    kv = _load(root, "vllm.v1.kv_cache_interface")

    out: dict[str, Any] = {}
    for layout, fp8 in (("fp8_ds_mla", True), ("bf16", False)):
        built = _Specs(kv, torch, fp8)
        specs = {"swa": built.swa()}
        for ratio in (4, 128):
            specs[f"compressed{ratio}"] = built.compressed(ratio)
            specs[f"state{ratio}"] = built.state(ratio)
        specs["index4"] = built.index()
        specs["index_state4"] = built.index_state()
        out[layout] = {
            name: {
                "block_size": s.block_size,
                "page_size_bytes": s.page_size_bytes,
                "sliding_window": getattr(s, "sliding_window", None),
                "tokens_per_state": int(s.tokens_per_state),
                # Pages a decoding request (one token in flight) holds past its window.
                "window_pages": (
                    s.max_admission_blocks_per_request(
                        max_in_flight_tokens=1, max_model_len=1 << 20
                    )
                    if hasattr(s, "sliding_window")
                    and hasattr(s, "max_admission_blocks_per_request")
                    else None
                ),
            }
            for name, s in specs.items()
        }
    configs = configs or pathlib.Path(__file__).parent.parent / "tests" / "data" / "hf-configs"
    return {
        "_about": "DeepSeek-V4 KV-cache pages from vLLM's spec classes; tools/vllm_dsv4_pages.py",
        "vllm": "0.33.0",
        "pages": out,
        "packing": packing(root, kv, torch, configs),
    }


if __name__ == "__main__":
    print(json.dumps(main(pathlib.Path(sys.argv[1])), indent=1))
