"""Property tests of ``pdtp.transfer_map`` over every valid pair up to 64 and KV heads up to
128: each decode rank receives exactly the heads it holds, from ranks that hold them; acks per
prefill rank equal ``expected_ack_count``; the unread-rank warning appears exactly when it
applies."""

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


@pytest.mark.parametrize("connector", ["moriio", "nixl", "nixl-legacy"])
def test_map_properties_for_every_valid_pair(connector):
    checked = 0
    for p, d, h, mla in itertools.product(TPS, TPS, KV_HEADS, (False, True)):
        heads_attn = p * d  # divisible by both: only KV heads matter for the map
        if not spec.pair_valid(heads_attn, h, mla, p, d, connector):
            with pytest.raises(pdtp.PdtpError):
                pdtp.transfer_map(p, d, kv_heads=h, is_mla=mla, connector=connector)
            continue
        m = pdtp.transfer_map(p, d, kv_heads=h, is_mla=mla, connector=connector)
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
        acks = pdtp.expected_ack_count(p, d)
        readers: dict[int, list[int]] = {r.rank: [] for r in m.prefill}
        for dr in m.decode:
            for read in dr.reads:
                readers[read.prefill_rank].append(dr.rank)
        for pr in m.prefill:
            assert pr.expected_acks == acks
            assert set(pr.heads) == held(h, p, pr.rank, mla)
            assert list(pr.readers) == readers[pr.rank]
            if connector == "moriio" and d >= p:
                assert len(pr.readers) == acks
        unread = any(not pr.readers for pr in m.prefill)
        assert bool(m.warnings) == (connector == "moriio" and p > d)
        if connector == "moriio":
            assert unread == (p > d)
    assert checked > 300


def test_documented_examples():
    m = pdtp.transfer_map(4, 8, kv_heads=4)
    assert [x.prefill_ranks[0] for x in m.decode] == [0, 0, 1, 1, 2, 2, 3, 3]
    m = pdtp.transfer_map(8, 4, kv_heads=4)
    assert [x.prefill_ranks[0] for x in m.decode] == [0, 2, 4, 6]
    m = pdtp.transfer_map(4, 8, kv_heads=8, connector="nixl")
    assert m.decode[3].reads[0].prefill_rank == 1 and m.decode[3].reads[0].heads == (3,)


def test_invalid_pair_raises_vllms_error():
    with pytest.raises(NotImplementedError, match="requires replicated KV heads"):
        pdtp.transfer_map(4, 8, kv_heads=8)
    with pytest.raises(pdtp.RuleValueError, match="must be a multiple"):
        pdtp.transfer_map(4, 6, kv_heads=2)
    with pytest.raises(pdtp.RuleAssertionError, match="is not divisible by"):
        pdtp.transfer_map(4, 4, kv_heads=6)


def test_to_dict_round_trips_json():
    import json

    d = json.loads(json.dumps(pdtp.transfer_map(8, 4, kv_heads=4).to_dict()))
    assert d["prefill"][1]["readers"] == [] and d["warnings"][0]["code"] == "unread_prefill_ranks"
