"""NIXL's whole request flow, per release range (the classes tools/vllm_flow_nixl.py found;
``cargo test nixl_flow`` compares every vector of its golden data)."""

from __future__ import annotations

import pytest

import pdtp

LLAMA = pdtp.ModelShape(64, 8)


def first(shape, p, d, version):
    r = pdtp.check(shape, p, d, connector="nixl", vllm_version=version, alternatives=0)
    return r, r.violations[0]


def test_nixl_0110_handshake_failure_reaches_the_read_as_keyerror():
    # 0.11.0 nixl_connector.py:729: `request_ready` queues the request as ready whatever the
    # handshake future holds (its ZeroDivisionError is only logged, :722); `_read_blocks`
    # then finds no handles for the engine (`self.dst_xfer_side_handles[dst_engine_id]`,
    # :1275) and the decode worker raises KeyError at the first transfer.
    r, v = first(LLAMA, 4, 2, "0.11.0")
    assert (v.vllm_error, v.message) == ("ZeroDivisionError", "integer division or modulo by zero")
    assert (v.user_error, v.user_message, v.when) == (
        "KeyError",
        "'{remote_engine_id}'",
        "first_transfer",
    )
    assert r.verdict.kind == "invalid" and r.verdict.error == "KeyError"
    assert "only logs it" in v.hint


@pytest.mark.parametrize("version", ["0.11.1", "0.12.0", "0.14.0", "0.16.0"])
def test_nixl_handshake_failure_recomputed_on_decode_0111_to_016(version):
    # 0.12.0 nixl_connector.py:1117-1129: `request_ready` puts a failed handshake's request in
    # `_failed_recv_reqs` with its blocks invalid; the scheduler recomputes invalid blocks
    # (0.12.0 `_handle_invalid_blocks`; kv_load_failure_policy = "recompute" by default,
    # 0.13.0-0.16.0 vllm/config/kv_transfer.py). H=8, P=16 > D=8: the replicated fan-in assert.
    r, v = first(LLAMA, 16, 8, version)
    assert (v.code, v.vllm_error, v.when) == (
        "replicated_kv_prefill_larger" if version >= "0.14.0" else "decode_smaller_than_prefill",
        "AssertionError",
        "first_transfer",
    )
    assert v.consequence == "recomputed_on_decode"
    assert r.verdict.consequences == ("recomputed_on_decode",)


@pytest.mark.parametrize("version", ["0.17.0", "0.20.0", "0.25.0", "0.33.0"])
def test_nixl_handshake_failure_fails_the_request_from_017(version):
    # kv_load_failure_policy defaults to "fail" from 0.17.0 (vllm/config/kv_transfer.py);
    # 0.33.0 nixl/base_worker.py:1466-1477 `request_ready` -> `_failed_recv_reqs`.
    r, v = first(pdtp.ModelShape(24, 2), 4, 6, version)
    assert (
        v.message
        == "Local tensor parallel size 6 is not divisible by remote tensor parallel size 4."
    )
    assert (v.vllm_error, v.when, v.consequence) == (
        "AssertionError",
        "first_transfer",
        "request_failed",
    )
    assert r.verdict.kind == "invalid" and r.verdict.consequences == ("request_failed",)


@pytest.mark.parametrize("version", ["0.18.0", "0.18.1", "0.19.0", "0.19.1"])
def test_nixl_mamba_needs_equal_tp_018_to_019(version):
    # 0.18.0 nixl_connector.py:2041-2042: `if self._has_mamba: assert tp_ratio == 1, "Mamba
    # does not support heterogeneous TP yet"` (after the replicated fan-in assert).
    hybrid = pdtp.ModelShape(64, 8, hybrid=True)
    _, v = first(hybrid, 4, 8, version)
    assert (v.code, v.vllm_error, v.message) == (
        "mamba_heterogeneous_tp",
        "AssertionError",
        "Mamba does not support heterogeneous TP yet",
    )
    assert pdtp.check(hybrid, 8, 8, connector="nixl", vllm_version=version).ok
    # The same pair of a model without Mamba layers, and the releases around: no such assert.
    assert pdtp.check(LLAMA, 4, 8, connector="nixl", vllm_version=version).ok
    for other in ("0.17.1", "0.20.0"):
        assert pdtp.check(hybrid, 4, 8, connector="nixl", vllm_version=other).ok


@pytest.mark.parametrize("version", ["0.20.0", "0.21.0", "0.23.0"])
def test_nixl_mamba_skips_the_block_length_assert_020_to_023(version):
    # 0.20.0 nixl/worker.py:1494 `if not self._has_mamba:` around the `remote_block_len ==
    # block_len * tp_ratio` assert (a hybrid model's block_len is padded to its Mamba page).
    # P < H < D: the decode ranks replicate heads while the prefill ranks split them.
    shape, hybrid = pdtp.ModelShape(32, 4), pdtp.ModelShape(32, 4, hybrid=True)
    assert first(shape, 2, 8, version)[1].code == "kv_block_len_mismatch"
    assert pdtp.check(hybrid, 2, 8, connector="nixl", vllm_version=version).ok
    # 0.19.1: the Mamba equal-TP assert comes first; 0.24.0 on compares heads per rank.
    assert first(hybrid, 2, 8, "0.19.1")[1].code == "mamba_heterogeneous_tp"
    assert pdtp.check(shape, 2, 8, connector="nixl", vllm_version="0.24.0").ok


@pytest.mark.parametrize("version", ["0.20.0", "0.23.0", "0.24.0", "0.33.0"])
def test_nixl_hybrid_reads_every_prefill_rank_from_020(version):
    # 0.20.0 kv_connector/utils.py:630: `target_remote_ranks` of a Mamba model returns
    # `remote_all_source_ranks` (attention + Mamba sources); 0.33.0 nixl/tp_mapping.py:135:
    # `ssm_ranks = list(range(tp_rank * abs_tp, (tp_rank + 1) * abs_tp))`. Each prefill rank
    # holds its own shard of the Mamba state, so a decode rank reads all P/D of them even
    # where their KV heads repeat (P = 8 > H = 1), and notifies each.
    m = pdtp.transfer_map(8, 2, kv_heads=1, hybrid=True, connector="nixl", vllm_version=version)
    d1 = m.decode[1]
    assert [(r.prefill_rank, r.heads) for r in d1.reads] == [(4, (0,)), (5, ()), (6, ()), (7, ())]
    assert d1.releases == (4, 5, 6, 7)
    assert all(p.readers == (p.rank // 4,) for p in m.prefill)
    # The same pair without Mamba layers is the replicated fan-in assert; P <= H reads each
    # prefill rank for its own heads, hybrid or not.
    with pytest.raises(pdtp.PdtpError):
        pdtp.transfer_map(8, 2, kv_heads=1, connector="nixl", vllm_version=version)
    g = pdtp.transfer_map(4, 2, kv_heads=8, hybrid=True, connector="nixl", vllm_version=version)
    assert [(r.prefill_rank, r.heads) for r in g.decode[0].reads] == [(0, (0, 1)), (1, (2, 3))]


@pytest.mark.parametrize("version", ["0.18.0", "0.19.1"])
def test_nixl_hybrid_before_020_needs_equal_tp(version):
    # 0.18.0 nixl_connector.py:2041-2042 (see test_nixl_mamba_needs_equal_tp_018_to_019):
    # no hybrid pair with P != D reaches the read.
    with pytest.raises(pdtp.PdtpError, match="Mamba does not support heterogeneous TP"):
        pdtp.transfer_map(8, 2, kv_heads=16, hybrid=True, connector="nixl", vllm_version=version)


@pytest.mark.parametrize("version", ["0.20.0", "0.24.0", "0.27.0", "0.33.0"])
def test_nixl_hybrid_needs_the_ds_conv_state_layout_from_020(version):
    # 0.20.0 nixl/worker.py:154 (0.33.0 nixl/base_worker.py:705): the worker of a model with
    # Mamba-type layers asserts `is_conv_state_dim_first()` at start, and vLLM's default
    # layout is SD (mamba_utils.py `get_conv_state_layout`): without
    # VLLM_SSM_CONV_STATE_LAYOUT=DS the engine does not start. pdtp runs it with a warning
    # naming the setting (tools/vllm_flow_nixl.py runs the assert: `mamba_conv_layout`).
    hybrid = pdtp.ModelShape(32, 4, hybrid=True)
    r = pdtp.check(hybrid, 4, 4, connector="nixl", vllm_version=version, alternatives=0)
    assert r.ok and r.verdict.kind == "valid_with_consequence"
    (w,) = [w for w in r.warnings if w.code == "mamba_conv_state_layout"]
    assert w.consequence == "needs_setting" and "VLLM_SSM_CONV_STATE_LAYOUT=DS" in w.message
    assert "3-read Mamba conv transfer requires DS conv state layout" in w.message
    plain = pdtp.check(pdtp.ModelShape(32, 4), 4, 4, connector="nixl", vllm_version=version)
    assert plain.ok and not plain.warnings


def test_nixl_hybrid_before_020_needs_no_layout():
    hybrid = pdtp.ModelShape(32, 4, hybrid=True)
    r = pdtp.check(hybrid, 4, 4, connector="nixl", vllm_version="0.19.1", alternatives=0)
    assert r.ok and not r.warnings


def test_deploy_sets_the_ds_conv_state_layout_for_hybrid_models_from_020():
    import dataclasses

    from pdtp.deployment.connectors.nixl import MAMBA_CONV_LAYOUT_ENV, NIXL_MAMBA_DS_SINCE

    plan = pdtp.solve(
        "llama-3.1-8b", gpus=8, gpu="h100", connector="nixl", vllm_version="0.33.0",
        mode="disaggregated",
    )  # fmt: skip
    spec = plan.model_spec
    # The same model with Mamba-type layers (fewer attention layers than layers).
    hybrid = dataclasses.replace(
        spec, num_attention_layers=spec.num_layers - 8, attention_groups=()
    )
    env, value = MAMBA_CONV_LAYOUT_ENV
    for version, sets in (("0.19.1", False), (str(NIXL_MAMBA_DS_SINCE), True), ("0.33.0", True)):
        dep = pdtp.deploy(dataclasses.replace(plan, model_spec=hybrid, vllm_version=version))
        got = {dict(i.launch.env).get(env) for i in dep.instances}
        assert got == ({value} if sets else {None}), version
        # The version deploy starts setting it is the one pdtp's check warns from.
        warned = pdtp.check(
            pdtp.ModelShape(32, 4, hybrid=True), 4, 4, connector="nixl", vllm_version=version
        ).warnings
        assert any(w.code == "mamba_conv_state_layout" for w in warned) == sets
    dep = pdtp.deploy(plan)
    assert all(env not in dict(i.launch.env) for i in dep.instances)
