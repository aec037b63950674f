"""The MoRIIO flow driver's own decisions (tools/vllm_flow.py), on synthetic sources: where it
finds the engine core's hybrid refusal, the conv-state layout, the backend's readers and the
xgmi grid. The driver runs vLLM's wheels; these checks need none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture(scope="module")
def flow():
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location("vllm_flow_tool", TOOLS / "vllm_flow.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(TOOLS))


def test_unify_error_follows_the_function_that_raises(flow):
    # 0.14.0-0.26.0 raise in unify_hybrid_kv_cache_specs itself; 0.27.0 on in the
    # _promote_local_kv_cache_specs it calls (vllm/v1/core/kv_cache_utils.py:1529).
    own = 'def unify_hybrid_kv_cache_specs(s):\n    raise ValueError("own text")\n'
    assert flow.unify_error(own) == "own text"
    callee = (
        "def is_uniform(s):\n    return False\n"
        'def _promote(s):\n    if not is_uniform(s):\n        raise ValueError("promote text")\n'
        "def unify_hybrid_kv_cache_specs(s):\n    if is_uniform(s):\n        return\n"
        "    s.update(_promote(s))\n"
    )
    assert flow.unify_error(callee) == "promote text"
    assert flow.unify_error("def unify_hybrid_kv_cache_specs(s):\n    return\n") is None


def test_conv_layout_reads_the_release_default_and_the_environment(flow):
    src = (
        "import functools\nimport vllm.envs as envs\n"
        "@functools.lru_cache\ndef get_conv_state_layout():\n"
        "    layout = envs.VLLM_SSM_CONV_STATE_LAYOUT\n"
        "    if layout is not None:\n        return layout\n"
        '    return "SD"\n'
        'def is_conv_state_dim_first():\n    return get_conv_state_layout() == "DS"\n'
    )
    dim_first = flow.conv_layout_fn(src)
    saved = dict(flow.ENVS.values)
    try:
        flow.ENVS.values = {"VLLM_SSM_CONV_STATE_LAYOUT": None}
        assert dim_first() is False  # vLLM's default "SD": MoRIIO refuses the Mamba caches
        flow.ENVS.values = {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}
        assert dim_first() is True
    finally:
        flow.ENVS.values = saved
    assert flow.conv_layout_fn("def other():\n    pass\n") is None


def test_a_new_backend_reader_stops_the_driver(flow):
    path = flow.MORIIO + "moriio_connector.py"
    known = (
        "class MoRIIOConnectorWorker:\n"
        "    def __init__(self, c):\n        self.xgmi = c.backend == 'xgmi'\n"
        "    def _spreads_replicated_reads(self):\n        return self.c.backend != 'xgmi'\n"
        "    def _resolve_read_source(self):\n        return self._spreads_replicated_reads()\n"
    )
    flow.check_backend_readers("test", {path: known})
    # A WRITE path reading the backend: the xgmi grid would no longer cover it.
    new_reader = known + "    def _write_blocks(self):\n        return self.c.backend\n"
    with pytest.raises(flow.HarnessError, match="_write_blocks"):
        flow.check_backend_readers("test", {path: new_reader})
    # The READ source choice called from a WRITE function.
    new_caller = (
        known + "    def save_kv_layer(self):\n        return self._spreads_replicated_reads()\n"
    )
    with pytest.raises(flow.HarnessError, match="save_kv_layer"):
        flow.check_backend_readers("test", {path: new_caller})


def test_xgmi_grid(flow):
    grid = flow.grid()
    xgmi = [v for v in grid if v[7] == "xgmi"]
    write = [v for v in xgmi if v[0] == "write"]
    read = [v for v in xgmi if v[0] == "read"]
    # READ: the one-rank MLA decode (the round-robin the backend gates).
    assert read and all(v[4] and v[2] == 1 for v in read)
    # WRITE: MLA with D = 1, P > D with D <= 2, the DP layouts with 8 KV heads; each an rdma
    # vector's twin.
    assert {(v[4] and v[2] == 1) or v[1] > v[2] or v[5:7] != (1, 1) for v in write} == {True}
    assert any(v[5:7] != (1, 1) for v in write) and any(v[4] and v[2] == 1 for v in write)
    rdma = {tuple(v[:7]) for v in grid if v[7] == "rdma"}
    assert all(tuple(v[:7]) in rdma for v in xgmi)


def test_grid_reaches_every_tp_pair_to_64(flow):
    grid = flow.grid()
    tp_only = [v for v in grid if len(v) == 8 and v[5:7] == (1, 1) and v[7] == "rdma"]
    assert len(set(grid)) == len(grid)
    for mode in ("read", "write"):
        # Every P, D in 1..64 that loads the model for the odd and prime head counts ...
        for h in flow.FULL_HEADS:
            got = {(v[1], v[2]) for v in tp_only if v[0] == mode and v[3] == h and not v[4]}
            sizes = [t for t in range(1, 65) if flow.loads(h, t, False)]
            assert got == {(p, d) for p in sizes for d in sizes}, (mode, h)
        # ... and TP_SIZES for the others and MLA.
        for h, mla in [*((h, False) for h in flow.KV_HEADS), *((h, True) for h in flow.MLA_HEADS)]:
            got = {(v[1], v[2]) for v in tp_only if v[0] == mode and v[3] == h and v[4] == mla}
            sizes = [t for t in flow.TP_SIZES if flow.loads(h, t, mla)]
            assert got == {(p, d) for p in sizes for d in sizes}, (mode, h, mla)
    assert {3, 4, 5, 7, 8, 10, 12, 16, 64, 96, 128} <= set(flow.FULL_HEADS)
    assert max(flow.TP_SIZES) == 64
    # Pipeline layouts reach TP 64.
    assert max(v[2] for v in grid if len(v) > 8 and v[8:10] != (1, 1)) == 64


def test_stored_outcomes_by_vector(flow, tmp_path):
    import gzip
    import json

    data = {"vectors": [["read", 1, 1, 1, False, 1, 1, "rdma"]], "outcomes": [["x"]], "codes": [0]}
    with gzip.open(tmp_path / "f.json.gz", "wt") as f:
        f.write(json.dumps(data))
    assert flow.stored_outcomes(tmp_path, "f.json.gz") == {
        json.dumps(["read", 1, 1, 1, False, 1, 1, "rdma"]): ["x"]
    }
    assert flow.stored_outcomes(tmp_path, None) == {}
