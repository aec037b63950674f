"""Regenerate tests/data/vllm_dsv4_pages.json: DeepSeek-V4's KV-cache page sizes as vLLM's
own spec classes compute them (``vllm/v1/kv_cache_interface.py``), with the spec arguments
``models/deepseek_v4/attention.py``, ``compressor.py`` and
``v1/attention/backends/mla/sparse_swa.py`` pass.

torch is not needed: the spec classes only read a dtype's element size, so a stand-in module
gives them the four dtypes the DeepSeek-V4 caches use. Run on an unpacked wheel::

    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-0.33.0
    unzip -q /tmp/vllm-0.33.0/vllm-0.33.0-*.whl 'vllm/*' -d /tmp/vllm-0.33.0/src
    python tools/vllm_dsv4_pages.py /tmp/vllm-0.33.0/src > tests/data/vllm_dsv4_pages.json
"""

from __future__ import annotations

import enum
import importlib.util
import json
import logging
import pathlib
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


def main(root: pathlib.Path) -> dict[str, Any]:
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
    _load(root, "vllm.utils.math_utils")
    _load(root, "vllm.v1.kv_cache_layout")
    _load(root, "vllm.v1.kv_cache_spec_registry")
    kv = _load(root, "vllm.v1.kv_cache_interface")

    out: dict[str, Any] = {}
    for layout, fp8 in (("fp8_ds_mla", True), ("bf16", False)):
        align = 576 if fp8 else 512
        latent_dtype = torch.uint8 if fp8 else torch.bfloat16
        specs = {
            # DeepseekV4SWACache.get_kv_cache_spec (block_size=64)
            "swa": kv.SlidingWindowMLASpec(
                block_size=64,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=512,
                dtype=latent_dtype,
                sliding_window=128,
                cache_dtype_str=layout,
                state_content_bytes=584 if fp8 else None,
                alignment=align,
                model_version="deepseek_v4",
            ),
        }
        for ratio in (4, 128):
            # DeepseekV4Attention.get_kv_cache_spec (block 256: sparse_mla.py)
            specs[f"compressed{ratio}"] = kv.MLAAttentionSpec(
                block_size=256,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=512,
                dtype=latent_dtype,
                tokens_per_state=ratio,
                cache_dtype_str=layout,
                alignment=align,
                model_version="deepseek_v4",
                state_content_bytes=584 if fp8 else None,
            )
            coff = 1 + (ratio == 4)
            # CompressorStateCache.get_kv_cache_spec
            specs[f"state{ratio}"] = kv.SlidingWindowMLASpec(
                block_size=4 if ratio == 4 else 8,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=2 * coff * 512,
                dtype=torch.float32,
                sliding_window=coff * ratio,
                alignment=align,
            )
        # DeepseekV4IndexerCache (fp8 keys: 128 + 4 scale bytes) and its compressor state
        specs["index4"] = kv.MLAAttentionSpec(
            block_size=256,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=128 + 128 // 128 * 4,
            dtype=torch.uint8,
            tokens_per_state=4,
            alignment=align,
        )
        specs["index_state4"] = kv.SlidingWindowMLASpec(
            block_size=4,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=2 * 2 * 128,
            dtype=torch.float32,
            sliding_window=8,
            alignment=align,
        )
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
    return {
        "_about": "DeepSeek-V4 KV-cache pages from vLLM's spec classes; tools/vllm_dsv4_pages.py",
        "vllm": "0.33.0",
        "pages": out,
    }


if __name__ == "__main__":
    print(json.dumps(main(pathlib.Path(sys.argv[1])), indent=1))
