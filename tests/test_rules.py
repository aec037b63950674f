"""The three vLLM functions: vLLM's own cases (rules.md §6) and exhaustive sweeps against
the plain-Python restatement of the spec in ``spec_rules``."""

from __future__ import annotations

import itertools

import pytest

import pdtp

import spec_rules as spec

SIZES = range(-2, 65)


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (spec.SpecValueError, pdtp.RuleValueError) as e:
        assert isinstance(e, (ValueError, spec.SpecValueError))
        return ("ValueError", str(e))
    except (spec.SpecNotImplementedError, pdtp.RuleNotImplementedError) as e:
        return ("NotImplementedError", str(e))


# --- vLLM's own unit-test cases ---------------------------------------------------------


@pytest.mark.parametrize(
    ("local", "remote", "expected"),
    [(4, 4, [0, 1, 2, 3]), (8, 4, [0, 0, 1, 1, 2, 2, 3, 3]), (4, 8, [0, 2, 4, 6])],
)
def test_remote_tp_rank_peer_cases(local, remote, expected):
    assert [pdtp.remote_tp_rank(r, local, remote) for r in range(local)] == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (0, 6, 4),
            "local tp_size 6 must be a multiple of remote tp_size 4 for heterogeneous-TP P/D",
        ),
        (
            (0, 4, 6),
            "remote tp_size 6 must be a multiple of local tp_size 4 for heterogeneous-TP P/D",
        ),
        ((4, 4, 8), "local_tp_rank 4 must be in [0, 4)"),
        ((0, 0, 4), "TP sizes must be positive"),
    ],
)
def test_remote_tp_rank_errors(args, message):
    with pytest.raises(ValueError) as info:
        pdtp.remote_tp_rank(*args)
    assert str(info.value) == message
    assert isinstance(info.value, pdtp.PdtpError)
    assert isinstance(info.value, pdtp.RuleValueError)


@pytest.mark.parametrize(
    "args",
    [
        (4, 4, 8, False),
        (8, 4, 4, False),
        (4, 8, 4, False),
        (2, 4, 4, True),
        (16, 8, 8, False),
        (0, 0, 0, False),
    ],
)
def test_validate_kv_heads_accepts(args):
    assert pdtp.validate_kv_heads(*args) is None


@pytest.mark.parametrize("args", [(4, 2, 4, False), (2, 4, 4, False), (4, 8, 8, False)])
def test_validate_kv_heads_rejects(args):
    local, remote, heads, _ = args
    with pytest.raises(NotImplementedError) as info:
        pdtp.validate_kv_heads(*args)
    assert isinstance(info.value, pdtp.PdtpError)
    assert str(info.value) == (
        "MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. "
        f"Got total_num_kv_heads={heads}, local_tp_size={local}, remote_tp_size={remote}."
    )


def test_validate_kv_heads_positivity():
    with pytest.raises(ValueError, match="^TP sizes and total_num_kv_heads must be positive$"):
        pdtp.validate_kv_heads(4, 2, 0, False)


@pytest.mark.parametrize(("p", "c", "n"), [(4, 4, 1), (8, 4, 1), (6, 4, 1), (4, 8, 2), (4, 16, 4)])
def test_expected_ack_count_peer_cases(p, c, n):
    assert pdtp.expected_ack_count(p, c) == n


def test_expected_ack_count_errors():
    with pytest.raises(ValueError) as info:
        pdtp.expected_ack_count(4, 6)
    assert str(info.value) == (
        "consumer tp_size 6 must be a multiple of producer tp_size 4 for heterogeneous-TP P/D"
    )
    with pytest.raises(pdtp.RuleValueError, match="^TP sizes must be positive$"):
        pdtp.expected_ack_count(0, 4)


# --- exhaustive sweeps against the spec restatement -----------------------------------


def test_remote_tp_rank_sweep():
    n = 0
    for local, remote in itertools.product(SIZES, SIZES):
        for rank in range(-1, max(local, 0) + 1):
            assert outcome(pdtp.remote_tp_rank, rank, local, remote) == outcome(
                spec.remote_tp_rank, rank, local, remote
            ), (rank, local, remote)
            n += 1
    assert n > 100_000


def test_validate_kv_heads_sweep():
    for local, remote in itertools.product(SIZES, SIZES):
        for heads in (-1, 0, 1, 2, 3, 4, 8, 16, 32, 64, 128):
            for mla in (False, True):
                assert outcome(pdtp.validate_kv_heads, local, remote, heads, mla) == outcome(
                    spec.validate_kv_heads, local, remote, heads, mla
                ), (local, remote, heads, mla)


def test_expected_ack_count_sweep():
    for p, c in itertools.product(SIZES, SIZES):
        assert outcome(pdtp.expected_ack_count, p, c) == outcome(spec.expected_ack_count, p, c)


def test_error_classes_are_both_pdtp_and_vllm():
    assert issubclass(pdtp.RuleValueError, pdtp.PdtpError)
    assert issubclass(pdtp.RuleValueError, ValueError)
    assert issubclass(pdtp.RuleNotImplementedError, NotImplementedError)
    assert issubclass(pdtp.RuleNotImplementedError, pdtp.PdtpError)
    assert issubclass(pdtp.InfeasibleError, pdtp.PdtpError)
    assert issubclass(pdtp.ConfigError, pdtp.PdtpError)
