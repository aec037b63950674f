"""``pdtp.check`` against the spec: every pair up to 64 for a range of head layouts and all
connector profiles, the violation codes and messages, warnings and alternatives."""

from __future__ import annotations

import itertools

import pytest

import pdtp
from pdtp import ModelShape

import spec_rules as spec

SHAPES = [
    ModelShape(64, 8),  # Llama-3.1-70B
    ModelShape(32, 32),  # MHA
    ModelShape(40, 10),  # Phi-3-medium: odd head counts
    ModelShape(8, 1),  # MQA
    ModelShape(32, 4),  # Qwen3-30B-A3B
    ModelShape(128, 128, True),  # DeepSeek-V3 (MLA)
    ModelShape(28, 4),  # Qwen2.5-7B
]
CONNECTORS = ["moriio", "moriio-write", "nixl", "nixl-legacy"]


@pytest.mark.parametrize("connector", CONNECTORS)
@pytest.mark.parametrize(
    "shape",
    SHAPES,
    ids=lambda s: f"A{s.num_attention_heads}H{s.num_kv_heads}{'mla' if s.is_mla else ''}",
)
def test_ok_matches_spec_for_every_pair(shape, connector):
    for p, d in itertools.product(range(1, 65), repeat=2):
        for acks in (None, 2):
            r = pdtp.check(shape, p, d, connector=connector, max_acks=acks, alternatives=0)
            expected = spec.pair_valid(
                shape.num_attention_heads, shape.num_kv_heads, shape.is_mla, p, d, connector, acks
            )
            assert r.ok == expected, (shape, connector, p, d, acks, r.violations)


def test_seed_prose_error_is_corrected():
    # The seed calls P4/D8 with 8 KV heads "ok"; vLLM's MoRIIO READ mode rejects it: up to
    # 0.32.0 with the replicated-heads guard, from 0.33.0 earlier, comparing head layouts.
    r = pdtp.check(ModelShape(64, 8), prefill_tp=4, decode_tp=8, vllm_version="0.32.0")
    assert not r.ok
    (v,) = r.violations
    assert v.code == "kv_heads_not_replicated"
    assert v.vllm_error == "NotImplementedError"
    assert v.message == (
        "MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. "
        "Got total_num_kv_heads=8, local_tp_size=8, remote_tp_size=4."
    )
    assert "min(prefill_tp, decode_tp) >= 8" in v.hint
    (v,) = pdtp.check(ModelShape(64, 8), prefill_tp=4, decode_tp=8).violations
    assert (v.code, v.vllm_error) == ("kv_heads_not_replicated", "MoRIIOError")
    assert v.message == (
        "Layer model.layers.0.self_attn.attn holds 1 KV heads per rank here and 2 on the peer"
    )
    assert pdtp.check(ModelShape(64, 8), 4, 8, connector="nixl").ok
    assert pdtp.check(ModelShape(64, 8), 4, 8, connector="moriio-write").ok  # re-slices heads
    assert not pdtp.check(ModelShape(64, 8), 4, 8, connector="moriio-write", vllm_version="0.32.0")
    assert pdtp.check(ModelShape(64, 4), 4, 8).ok  # fine under MoRIIO when H <= 4


def test_violation_messages_are_vllms():
    r = pdtp.check(ModelShape(64, 8), 4, 6)
    codes = [v.code for v in r.violations]
    assert codes[0] == "attention_heads_not_divisible"
    assert r.violations[0].message == (
        "Total number of attention heads (64) must be divisible by tensor parallel size (6)."
    )
    assert r.violations[0].side == "decode"
    assert "kv_heads_not_divisible" in codes
    size = next(v for v in r.violations if v.code == "tp_not_divisible")
    assert size.message == (
        "local tp_size 6 must be a multiple of remote tp_size 4 for heterogeneous-TP P/D"
    )
    r = pdtp.check(ModelShape(24, 24), 6, 4, connector="nixl")
    size = next(v for v in r.violations if v.code == "tp_not_divisible")
    assert size.message == (
        "Remote tensor parallel size 6 is not divisible by local tensor parallel size 4."
    )
    r = pdtp.check(ModelShape(24, 24), 4, 2, connector="nixl-legacy")
    assert r.violations[0].code == "decode_smaller_than_prefill"
    assert r.violations[0].message == (
        "Local tensor parallel size 2 is not divisible by remote tensor parallel size 4."
    )
    assert r.violations[0].vllm_error == "AssertionError"


def test_first_violation_raises_vllms_exception():
    r = pdtp.check(ModelShape(64, 8), 4, 8, vllm_version="0.32.0")
    with pytest.raises(NotImplementedError):
        r.raise_for_violations()
    with pytest.raises(pdtp.RuleConnectorError, match="KV heads per rank"):
        pdtp.check(ModelShape(64, 8), 4, 8).raise_for_violations()
    # vLLM raises the ValueError in the handshake future and only logs it: what the user meets
    # is the eager handshake's HandshakeError (0.27.0 on) or a KeyError at the first read.
    with pytest.raises(pdtp.RuleConnectorError, match="Eager MoRIIO handshake failed"):
        pdtp.check(ModelShape(48, 48), 4, 6).raise_for_violations()
    with pytest.raises(KeyError, match="_dp0"):
        pdtp.check(ModelShape(48, 48), 4, 6, vllm_version="0.26.0").raise_for_violations()
    with pytest.raises(pdtp.RuleValueError, match="must be a multiple"):
        pdtp.check(ModelShape(48, 48), 4, 6, connector="moriio-write").raise_for_violations()
    pdtp.check(ModelShape(64, 8), 8, 8).raise_for_violations()


def test_max_acks():
    shape = ModelShape(64, 1)
    assert pdtp.check(shape, 2, 8).ok
    r = pdtp.check(shape, 2, 8, max_acks=2)
    assert [v.code for v in r.violations] == ["too_many_acks"]
    assert r.violations[0].vllm_error is None
    assert all(d // p <= 2 for p, d in r.alternatives if d > p)


def test_unread_rank_warning_exactly_when_moriio_prefill_larger():
    # MoRIIO READ 0.25.0-0.32.0 releases only the prefill rank it read; 0.33.0 releases every
    # holder, NIXL notifies the whole group and WRITE mode's scheduler releases every rank.
    for shape in (ModelShape(64, 4), ModelShape(128, 128, True)):
        for p, d in itertools.product([1, 2, 4, 8, 16, 32], repeat=2):
            for conn in CONNECTORS:
                for version in (None, "0.32.0"):
                    if conn == "nixl-legacy" and version:
                        continue
                    r = pdtp.check(
                        shape, p, d, connector=conn, alternatives=0, vllm_version=version
                    )
                    # 0.27.0 on a one-rank MLA decode round-robins its prefill source.
                    rotates = shape.is_mla and d == 1 and p > 1
                    # 0.25.0-0.32.0 WRITE, one decode rank: only prefill rank 0 writes.
                    idle = conn == "moriio-write" and version == "0.32.0" and d == 1 < p
                    expected = r.ok and (
                        (conn == "moriio" and ((version == "0.32.0" and p > d) or rotates))
                        or (idle and (shape.is_mla or shape.num_kv_heads == 1))
                    )
                    assert bool(r.warnings) == expected, (shape, p, d, conn, version)


def test_alternatives_valid_nearest_first_and_exclude_input():
    shape = ModelShape(64, 8)
    r = pdtp.check(shape, 4, 8)
    assert r.alternatives[:2] == ((4, 4), (8, 8))
    for p, d in r.alternatives:
        assert pdtp.check(shape, p, d).ok
        assert (p, d) != (4, 8)
    assert pdtp.check(shape, 8, 8).alternatives == ()
    assert all(max(p, d) <= 8 for p, d in pdtp.check(shape, 3, 8, max_tp=8).alternatives)


def test_result_is_frozen_and_serialisable():
    import dataclasses
    import json

    r = pdtp.check(ModelShape(64, 8, name="llama"), 4, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.prefill_tp = 2  # type: ignore[misc]
    d = json.loads(json.dumps(r.to_dict()))
    assert d["ok"] is False and d["model"] == "llama"
    assert d["violations"][0]["code"] == "kv_heads_not_replicated"


@pytest.mark.parametrize(
    ("kwargs", "exc", "field"),
    [
        ({"prefill_tp": 0}, pdtp.InvalidArgumentError, "prefill_tp"),
        ({"decode_tp": -3}, pdtp.InvalidArgumentError, "decode_tp"),
        ({"decode_tp": 2.0}, TypeError, "decode_tp"),
        ({"prefill_tp": True}, TypeError, "prefill_tp"),
        ({"connector": "mooncake"}, pdtp.UnknownNameError, "connector"),
        ({"max_acks": 0}, pdtp.InvalidArgumentError, "max_acks"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, exc, field):
    args = {"prefill_tp": 4, "decode_tp": 4, **kwargs}
    with pytest.raises(exc, match=field):
        pdtp.check(ModelShape(64, 8), **args)


def test_model_shape_validation():
    with pytest.raises(pdtp.InvalidArgumentError, match="num_kv_heads"):
        ModelShape(64, 0)
    with pytest.raises(TypeError, match="is_mla"):
        ModelShape(64, 8, 1)  # type: ignore[arg-type]
