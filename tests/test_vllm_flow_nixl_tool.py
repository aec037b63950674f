"""The NIXL flow driver's own decisions (tools/vllm_flow_nixl.py), on synthetic sources: the
engine start's hybrid KV-cache manager (the config statements it runs, the spec unification
with the manager off) and how it decodes a Mamba-2 page with few B/C groups. The driver runs
vLLM's wheels; these checks need none."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture(scope="module")
def flow():
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location(
            "vllm_flow_nixl_tool", TOOLS / "vllm_flow_nixl.py"
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(TOOLS))


CONFIG = """
class VllmConfig:
    def __post_init__(self):
        need_disable_hybrid_kv_cache_manager = False
        if self.scheduler_config.disable_hybrid_kv_cache_manager is None:
            if self.kv_transfer_config is not None:
                from x import KVConnectorFactory
                if {test}:
                    need_disable_hybrid_kv_cache_manager = True
            self.scheduler_config.disable_hybrid_kv_cache_manager = (
                need_disable_hybrid_kv_cache_manager
            )
        if self.scheduler_config.disable_hybrid_kv_cache_manager is None:
            self.scheduler_config.disable_hybrid_kv_cache_manager = False
"""
UTILS = """
def is_kv_cache_spec_uniform(kv_cache_spec):
    try:
        v = list(kv_cache_spec.values())
        v[0].merge(v)
    except AssertionError:
        return False
    return True


def unify_hybrid_kv_cache_specs(kv_cache_spec):
    if is_kv_cache_spec_uniform(kv_cache_spec):
        return
    for name, spec in kv_cache_spec.items():
        if isinstance(spec, SlidingWindowSpec):
            kv_cache_spec[name] = FullAttentionSpec(block_size=spec.block_size)
    if not is_kv_cache_spec_uniform(kv_cache_spec):
        raise ValueError("no unified type")
"""


def _release(tmp: Path, test: str) -> Path:
    for rel, text in (
        ("vllm/config/vllm.py", CONFIG.format(test=test)),
        ("vllm/config/scheduler.py", "disable_hybrid_kv_cache_manager: bool | None = None\n"),
        ("vllm/v1/core/kv_cache_utils.py", UTILS),
        ("vllm/v1/kv_cache_interface.py", ""),
        (
            "vllm/distributed/kv_transfer/kv_connector/factory.py",
            'def create(cls):\n    raise ValueError(f"{connector_cls.__name__} does not support HMA")\n',
        ),
    ):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(textwrap.dedent(text))
    return tmp


class _Rel:
    version = "synthetic"


@pytest.mark.parametrize(
    ("test", "supports", "on"),
    [
        ("True", True, False),  # 0.18.0-0.21.x: off for any connector, on with the flag
        ("not KVConnectorFactory.supports_hma_config(self.kv_transfer_config)", True, True),
        ("not KVConnectorFactory.supports_hma_config(self.kv_transfer_config)", False, False),
    ],
)
def test_hybrid_kv_cache_manager_runs_the_release_config(flow, tmp_path, test, supports, on):
    got = flow.hybrid_kv_cache_manager(_Rel(), _release(tmp_path, test), supports)
    assert got["default"] is on
    if on:
        assert got["mamba"] is None and got["sliding"] is None
    else:
        # The manager off: the release's unification refuses Mamba, merges sliding windows.
        assert got["mamba"] == ["ValueError", "no unified type"]
        assert got["sliding"] == "unified"
    if supports:
        assert got["with_flag"] is True  # --no-disable-hybrid-kv-cache-manager keeps it on
    else:
        # Kept on for a connector without SupportsHMA: the factory's refusal, evaluated.
        assert got["with_flag"] == ["ValueError", "NixlConnector does not support HMA"]


def test_mamba_page_decoding_with_few_groups(flow):
    s = flow.GROUP_STATE
    # One group at TP 4: replicated, every rank's B is the group's channels 0..S.
    assert flow.bc_units(1, 4) == s and [flow.bc_base(1, 4, r) for r in range(4)] == [0] * 4
    # Four groups at TP 2: two per rank.
    assert flow.bc_units(4, 2) == 2 * s and flow.bc_base(4, 2, 1) == 2 * s
    # The page of rank 1 of 4 with one group: x (48) | B (S) | C (S) | SSM heads (48).
    n = flow.MAMBA_UNITS // 4
    assert flow._mamba_unit(0, 1, 4, 1) == ("x", n)
    assert flow._mamba_unit(n, 1, 4, 1) == ("B", 0)
    assert flow._mamba_unit(n + s, 1, 4, 1) == ("C", 0)
    assert flow._mamba_unit(n + 2 * s, 1, 4, 1) == ("ssm", n)
    assert not flow.mamba_loads(2, 4) and flow.mamba_loads(1, 64) and flow.mamba_loads(4, 2)
