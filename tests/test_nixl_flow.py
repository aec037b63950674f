"""NIXL's whole request flow, per release range (the classes tools/vllm_flow_nixl.py found;
``cargo test nixl_flow`` compares every vector of its golden data)."""

from __future__ import annotations

import pathlib

import pytest

import pdtp

DATA = pathlib.Path(__file__).resolve().parent / "data"

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
    assert pdtp.check(hybrid, 4, 8, connector="nixl", vllm_version="0.20.0").ok
    # (0.17.1 refuses the hybrid model at engine start, before any handshake.)
    _, v = first(hybrid, 4, 8, "0.17.1")
    assert v.code == "hybrid_unsupported"


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
    assert r.ok and not [w for w in r.warnings if w.code == "mamba_conv_state_layout"]


HMA_TEXT = (
    "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
    "unified type."
)


@pytest.mark.parametrize("version", ["0.11.0", "0.11.1", "0.13.0", "0.14.0", "0.17.1"])
def test_nixl_hybrid_refused_at_engine_start_before_018(version):
    # vLLM turns the hybrid KV-cache manager off for any --kv-transfer-config (0.11.0
    # vllm/config/__init__.py:506, 0.17.1 vllm/config/vllm.py:1184; kept on with
    # --no-disable-hybrid-kv-cache-manager, 0.13.0 on, the factory refuses NixlConnector,
    # 0.17.1 kv_connector/factory.py:58). The engine core then unifies the KV-cache specs
    # when it sizes the cache, before any worker's register_kv_caches (0.17.1
    # vllm/v1/core/kv_cache_utils.py:1231 `get_kv_cache_groups`), and a Mamba spec does not
    # unify: ValueError at engine start (0.17.1 kv_cache_utils.py:1211), whatever the TP pair.
    hybrid = pdtp.ModelShape(32, 4, hybrid=True)
    for p, d in ((4, 4), (2, 4), (4, 2)):
        r = pdtp.check(hybrid, p, d, connector="nixl", vllm_version=version, alternatives=0)
        if version == "0.11.0" and d < p:
            continue  # (the handshake's ZeroDivisionError comes later; the start is first)
        v = r.violations[0]
        assert (v.code, v.vllm_error, v.message, v.when) == (
            "hybrid_unsupported",
            "ValueError",
            HMA_TEXT,
            "engine_start",
        )
        assert "0.22.0" in v.hint
    # A dense model, and sliding-window layers (unified to full attention), start.
    assert pdtp.check(LLAMA, 4, 4, connector="nixl", vllm_version=version).ok
    swa = pdtp.ModelShape(32, 4, sliding_window=True)
    assert pdtp.check(swa, 4, 4, connector="nixl", vllm_version=version).ok


@pytest.mark.parametrize("version", ["0.18.0", "0.19.1", "0.20.0", "0.21.0"])
def test_nixl_hybrid_kv_cache_manager_needs_the_flag_018_to_021(version):
    # 0.18.0 vllm/config/vllm.py:1163-1167 (0.21.0 :1341): the manager is turned off for any
    # --kv-transfer-config unless --no-disable-hybrid-kv-cache-manager is given, though
    # NixlConnector is SupportsHMA. pdtp runs such models with a warning naming the flag.
    for shape in (
        pdtp.ModelShape(32, 4, hybrid=True),
        pdtp.ModelShape(32, 4, sliding_window=True),
    ):
        r = pdtp.check(shape, 4, 4, connector="nixl", vllm_version=version, alternatives=0)
        assert r.ok and r.verdict.kind == "valid_with_consequence"
        (w,) = [w for w in r.warnings if w.code == "hybrid_kv_cache_manager_off"]
        assert w.consequence == "needs_setting"
        assert "--no-disable-hybrid-kv-cache-manager" in w.message
        assert (HMA_TEXT in w.message) == shape.hybrid
    plain = pdtp.check(LLAMA, 4, 4, connector="nixl", vllm_version=version)
    assert plain.ok and not plain.warnings


@pytest.mark.parametrize("version", ["0.17.1", "0.22.0", "0.33.0"])
def test_nixl_no_hybrid_kv_cache_manager_flag_outside_018_to_021(version):
    # 0.22.0 vllm/config/vllm.py:1440 keeps the manager on for a connector that supports it.
    swa = pdtp.ModelShape(32, 4, sliding_window=True)
    r = pdtp.check(swa, 4, 4, connector="nixl", vllm_version=version, alternatives=0)
    assert not [w for w in r.warnings if w.code == "hybrid_kv_cache_manager_off"]


def test_deploy_passes_the_hybrid_kv_cache_manager_flag_018_to_021():
    import dataclasses

    from pdtp.deployment.connectors.nixl import HMA_FLAG, NIXL_HMA_FLAG_RELEASES
    from pdtp.deployment.versions import parse_version

    plan = pdtp.solve(
        "llama-3.1-8b", gpus=8, gpu="h100", connector="nixl", vllm_version="0.33.0",
        mode="disaggregated",
    )  # fmt: skip
    spec = plan.model_spec
    hybrid = dataclasses.replace(
        spec, num_attention_layers=spec.num_layers - 8, attention_groups=()
    )
    since, until = NIXL_HMA_FLAG_RELEASES
    for version in ("0.17.1", str(since), "0.19.1", "0.21.0", str(until), "0.33.0"):
        flagged = since <= parse_version(version) < until
        for model in (hybrid, spec):
            dep = pdtp.deploy(dataclasses.replace(plan, model_spec=model, vllm_version=version))
            got = {HMA_FLAG in i.launch.argv for i in dep.instances}
            assert got == {flagged and model is hybrid}, (version, model is hybrid)
        # The releases deploy passes it on are those pdtp's check warns on, with its text.
        warned = pdtp.check(
            pdtp.ModelShape(32, 4, hybrid=True), 4, 4, connector="nixl", vllm_version=version
        ).warnings
        flag = [w for w in warned if w.code == "hybrid_kv_cache_manager_off"]
        assert bool(flag) == flagged and all(HMA_FLAG in w.message for w in flag)


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


# nvidia/Nemotron-H-8B-Base-8K (trimmed, as tests/test_model.py has it; n_groups 8), its
# B/C groups set per test.
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


def _nemotron_h(groups: int) -> pdtp.Model:
    return pdtp.Model.from_hf_config({**NEMOTRON_H, "n_groups": groups})


@pytest.mark.parametrize("version", ["0.20.0", "0.24.0", "0.33.0"])
def test_nixl_mamba2_one_group_unequal_tp_is_broken_from_020(version):
    # One B/C group, replicated on every rank (0.20.0 mamba_mixer2.py:299-306); NIXL reads B
    # and C at offsets for a group split over TP (0.20.0 kv_connector/v1/
    # ssm_conv_transfer_utils.py:60 `remote_conv_offsets`; P > D nixl/worker.py:975): the
    # decode rank's B/C state gets other bytes and vLLM raises nothing (tools/vllm_flow_nixl.py
    # decodes every byte of those reads; `cargo test nixl_flow`).
    one = _nemotron_h(1)
    assert one.mamba_groups == 1 and _nemotron_h(8).mamba_groups == 8
    for p, d in ((1, 2), (2, 4), (8, 2)):
        r = pdtp.check(one, p, d, connector="nixl", vllm_version=version, alternatives=0)
        assert r.verdict.kind == "broken" and not r.ok
        v = r.violations[0]
        assert (v.code, v.vllm_error, v.consequence) == (
            "mamba_groups_replicated",
            None,
            "wrong_bytes",
        )
    # Equal TP, or groups both TP sizes divide: each rank reads its own B/C.
    assert pdtp.check(one, 4, 4, connector="nixl", vllm_version=version).ok
    assert pdtp.check(_nemotron_h(8), 2, 8, connector="nixl", vllm_version=version).ok
    # A shape says so too; without the groups pdtp does not assume any.
    shape = pdtp.ModelShape(32, 8, hybrid=True, mamba_groups=1)
    assert not pdtp.check(shape, 2, 4, connector="nixl", vllm_version=version).ok
    unknown = pdtp.ModelShape(32, 8, hybrid=True)
    assert pdtp.check(unknown, 2, 4, connector="nixl", vllm_version=version).ok


def test_mamba_groups_is_validated():
    with pytest.raises(pdtp.PdtpError, match="mamba_groups"):
        pdtp.ModelShape(32, 8, hybrid=True, mamba_groups=0)


def test_mamba2_groups_tp_does_not_divide_fail_at_model_load() -> None:
    """vLLM's MambaMixer2 asserts `(n_groups % tp) == 0 or n_groups == 1` while building the
    model (0.11.0 `model_executor/layers/mamba/mamba_mixer2.py:259`, 0.33.0 `:320`): Nemotron-3
    Super's 8 groups load at TP 8, not at TP 16, and no alternative pdtp offers has TP 16."""
    m = pdtp.Model.from_hf_config(
        DATA / "hf-configs" / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8" / "config.json"
    )
    assert m.mamba_groups == 8
    for version in ("0.11.0", "0.20.0", "0.33.0"):
        r = pdtp.check(m, 16, 8, connector="nixl", vllm_version=version)
        codes = [v.code for v in r.violations]
        # First: the model fails to build before any engine-start rule (0.11.0's
        # hybrid_unsupported) is reached.
        assert codes[0] == "mamba_groups_not_divisible", (version, codes)
        v = r.violations[0]
        assert (v.side, v.vllm_error, v.when) == ("prefill", "AssertionError", "model_load")
        assert v.message.startswith("If tensor parallel world size does not divide num_groups")
        assert all(8 % p == 0 and 8 % d == 0 for p, d in r.alternatives), r.alternatives
    assert not any(v.code == "mamba_groups_not_divisible" for v in pdtp.check(m, 8, 4).violations)
