"""Property tests of ``pdtp.transfer_map`` over every valid pair up to 64 and KV heads up to
128: each decode rank receives exactly the heads it holds, from ranks that hold them; READ acks
per prefill rank equal ``expected_ack_count``; the unread-rank warning appears exactly when a
prefill rank is neither read nor released. (What vLLM itself does, release by release, is
compared with golden data in ``src/connector/golden.rs``.)"""

from __future__ import annotations

import itertools

import pytest

import pdtp

import spec_rules as spec

TPS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
KV_HEADS = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128]


def held(h: int, tp: int, rank: int, mla: bool) -> set[int]:
    """rules.md §4, restated: the KV heads a rank holds."""
    if mla:
        return {0}
    if tp <= h:
        per = h // tp
        return set(range(rank * per, (rank + 1) * per))
    return {rank // (tp // h)}


@pytest.mark.parametrize("connector", ["moriio", "moriio-write", "nixl", "nixl-legacy"])
def test_map_properties_for_every_valid_pair(connector):
    checked = 0
    for p, d, h, mla in itertools.product(TPS, TPS, KV_HEADS, (False, True)):
        heads_attn = p * d  # divisible by both: only KV heads matter for the map
        if not spec.pair_valid(heads_attn, h, mla, p, d, connector):
            with pytest.raises(pdtp.PdtpError):
                pdtp.transfer_map(p, d, kv_heads=h, is_mla=mla, connector=connector)
            continue
        m = pdtp.transfer_map(p, d, kv_heads=h, is_mla=mla, connector=connector)
        assert m.mode == (
            "write" if connector == "moriio-write" else "read" if connector == "moriio" else None
        )
        checked += 1
        assert len(m.decode) == d and len(m.prefill) == p
        for dr in m.decode:
            mine = held(h, d, dr.rank, mla)
            assert set(dr.heads) == mine
            received: list[int] = []
            for read in dr.reads:
                assert set(read.heads) <= held(h, p, read.prefill_rank, mla)
                received.extend(read.heads)
            # exactly the heads it holds, each once
            assert sorted(received) == sorted(mine), (p, d, h, mla, dr)
            if connector == "moriio":
                assert dr.prefill_ranks == (pdtp.remote_tp_rank(dr.rank, d, p),)
        acks = pdtp.expected_ack_count(p, d) if connector != "moriio-write" else 1
        readers: dict[int, list[int]] = {r.rank: [] for r in m.prefill}
        released: dict[int, list[int]] = {r.rank: [] for r in m.prefill}
        for dr in m.decode:
            for read in dr.reads:
                readers[read.prefill_rank].append(dr.rank)
            for q in dr.releases:
                released[q].append(dr.rank)
        for pr in m.prefill:
            assert pr.expected_acks == acks
            assert set(pr.heads) == held(h, p, pr.rank, mla)
            assert list(pr.readers) == readers[pr.rank]
            assert list(pr.released_by) == released[pr.rank]
            if connector == "moriio" and d >= p:
                assert len(pr.readers) == acks == len(pr.released_by)
        # 0.33.0 MoRIIO READ releases every holder; NIXL notifies its whole group; WRITE
        # mode's decode scheduler releases every prefill rank.
        # A one-rank MLA decode under MoRIIO READ round-robins its source (0.27.0 on).
        rotates = connector == "moriio" and mla and d == 1 and p > 1
        assert [w.consequence for w in m.warnings] == (["round_robin_source"] if rotates else [])
        if connector == "moriio":
            assert all(pr.released_by for pr in m.prefill)
    assert checked > 300


def test_moriio_before_033_leaves_unread_ranks_holding_blocks():
    m = pdtp.transfer_map(8, 4, kv_heads=4, vllm_version="0.32.0")
    assert [pr.released_by for pr in m.prefill][:2] == [(0,), ()]
    assert m.warnings[0].code == "unread_prefill_ranks"
    assert m.vllm_version == "0.32.0" and m.mode == "read"


def test_documented_examples():
    m = pdtp.transfer_map(4, 8, kv_heads=4)
    assert [x.prefill_ranks[0] for x in m.decode] == [0, 0, 1, 1, 2, 2, 3, 3]
    m = pdtp.transfer_map(8, 4, kv_heads=4)
    assert [x.prefill_ranks[0] for x in m.decode] == [0, 2, 4, 6]
    m = pdtp.transfer_map(4, 8, kv_heads=8, connector="nixl")
    assert m.decode[3].reads[0].prefill_rank == 1 and m.decode[3].reads[0].heads == (3,)


def test_invalid_pair_raises_vllms_error():
    with pytest.raises(NotImplementedError, match="requires replicated KV heads"):
        pdtp.transfer_map(4, 8, kv_heads=8, vllm_version="0.25.0")
    with pytest.raises(pdtp.RuleConnectorError, match="1 KV heads per rank here and 2"):
        pdtp.transfer_map(4, 8, kv_heads=8)
    with pytest.raises(AssertionError) as e:  # a bare assert: the hint is the message
        pdtp.transfer_map(16, 8, kv_heads=8, connector="nixl")
    assert isinstance(e.value, pdtp.RuleAssertionError) and "prefill_tp=16" in str(e.value)
    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero"):
        pdtp.transfer_map(8, 4, kv_heads=8, connector="nixl", vllm_version="0.11.0")
    # vLLM raises nothing, but decode rank 4 would wait for a prefill rank that does not exist.
    with pytest.raises(pdtp.InvalidArgumentError, match="does not exist"):
        pdtp.transfer_map(4, 8, kv_heads=1, vllm_version="0.20.0")
    with pytest.raises(pdtp.RuleValueError, match="must be a multiple"):
        pdtp.transfer_map(4, 6, kv_heads=2)
    with pytest.raises(pdtp.RuleAssertionError, match="is not divisible by"):
        pdtp.transfer_map(4, 4, kv_heads=6)


def test_to_dict_round_trips_json():
    import json

    m = pdtp.transfer_map(8, 4, kv_heads=4, vllm_version="0.30.0")
    d = json.loads(json.dumps(m.to_dict()))
    assert d["prefill"][1]["readers"] == [] and d["warnings"][0]["code"] == "unread_prefill_ranks"
    assert d["vllm_version"] == "0.30.0" and d["mode"] == "read"
