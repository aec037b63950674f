"""SGLang's handling of a hybrid model's state at P ≠ D (sliding-window layers, Mamba state,
DSA sparse index), per release and backend, as pdtp's rules read it: each class of outcome is
named with the release range and the SGLang file:line it comes from (the line of the release
named first). The rules are proven on every release by ``cargo test sglang_golden`` against
``tests/data/sglang_golden_state.json.gz`` (``tools/sglang_state.py``); here they are seen
through the Python API and ``check``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import pdtp
from pdtp.deployment.connectors import sglang
from pdtp.errors import PdtpError

GOLDEN = Path(__file__).parent / "data" / "sglang_golden_state.json.gz"


def pair(key: str, p: int, d: int, *state: str, heads: int = 8, mla: bool = False) -> dict:
    return sglang.check_sglang_pair(key, heads, mla, p, d, state=list(state))


def test_golden_state_file_names_its_sources():
    doc = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    assert doc["command"] == "python tools/sglang_state.py"
    assert doc["releases"] == list(sglang.SGLANG_RELEASES)
    for v in doc["releases"]:
        assert len(doc["provenance"][v]["wheel_sha256"]) == 64


def test_mooncake_refuses_hybrid_models_in_the_transfer_thread_to_0_5_8():
    # 0.5.3.post3-0.5.8.post1: mooncake/conn.py:804 (0.5.4, transfer_worker, before
    # maybe_send_extra); its handler re-raises "Transfer thread failed ...".
    for v in ("0.5.3.post3", "0.5.8.post1"):
        for kind in ("swa", "mamba"):
            got = pair(f"sglang-mooncake@{v}", 2, 4, kind)
            assert got["verdict"] == "raises" and got["error"] == "RuntimeError"
            assert got["message"] == (
                "PD Disaggregation does NOT support PD different TP sizes for non-MLA hybrid "
                "models yet."
            )
            assert got["surfaces"] == "transfer_thread_death"
        assert pair(f"sglang-mooncake@{v}", 4, 4, "swa", "mamba")["verdict"] == "ok"


def test_swa_is_refused_then_head_sliced_from_0_5_22():
    # 0.5.9-0.5.21: mooncake/conn.py:644, nixl/conn.py:740 (0.5.9, maybe_send_extra).
    for key, where in (
        ("sglang-mooncake@0.5.21", "transfer_thread_death"),
        ("sglang-nixl@0.5.10", "prefill_scheduler_crash"),
        ("sglang-nixl@0.5.21", "request_failed"),
    ):
        got = pair(key, 2, 4, "swa")
        assert got["error"] == "RuntimeError", key
        assert "non-MLA SWA hybrid models yet" in got["message"]
        assert got["surfaces"] == where, key
    # 0.5.22 on: _send_swa_state_slice, the same compute_head_slice_params as the KV.
    for backend in ("sglang-mooncake", "sglang-nixl"):
        assert pair(f"{backend}@0.5.22", 4, 2, "swa")["verdict"] == "ok"
        # The SWA layers move as the full layers' KV does: one KV verdict for both.
        dense = pair(f"{backend}@0.5.22", 8, 16, heads=4)
        assert pair(f"{backend}@0.5.22", 8, 16, "swa", heads=4) == dense


def test_mori_never_sends_state_before_0_5_12_and_refuses_unequal_swa_after():
    # 0.5.9-0.5.11: mori/conn.py has no state sender, even at P = D.
    for v in ("0.5.9", "0.5.11"):
        for kind in sglang.STATE_KINDS:
            got = pair(f"sglang-mori@{v}", 2, 2, kind, mla=kind == "dsa")
            assert got["verdict"] == "corrupts" and "no state sender" in got["message"]
    # 0.5.12 on: mori/conn.py:1073 (0.5.12, _send_swa_nsa_state), the request fails.
    got = pair("sglang-mori@0.5.23", 4, 2, "swa")
    assert got["message"] == (
        "PD state transfer does not support TP-mismatched non-MLA SWA models "
        "(prefill_tp_size=4, decode_tp_size=2)"
    )
    assert got["surfaces"] == "request_failed"
    assert pair("sglang-mori@0.5.23", 4, 2, "mamba")["verdict"] == "ok"  # sliced


def test_mamba_state_refused_by_nixl_until_0_5_11():
    # 0.5.9-0.5.10.post1: nixl/conn.py:727 (0.5.9, maybe_send_extra, on the prefill
    # scheduler's thread via add_transfer_request).
    got = pair("sglang-nixl@0.5.10.post1", 1, 2, "mamba", heads=2)
    assert got["message"] == (
        "PD Disaggregation does NOT support PD different TP sizes for hybrid mamba models yet."
    )
    assert got["surfaces"] == "prefill_scheduler_crash"
    assert pair("sglang-nixl@0.5.11", 1, 2, "mamba", heads=2)["verdict"] == "ok"


def test_the_dsa_index_is_copied_whole_at_any_size():
    # An MLA model's index is one per token on every rank: the whole copy each release's
    # sender makes is right at P != D too (the mapping's one real prefill rank sends it).
    for key in ("sglang-mooncake@0.5.4", "sglang-nixl@0.5.9", "sglang-mori@0.5.12"):
        assert pair(key, 8, 2, "dsa", heads=1, mla=True)["verdict"] == "ok", key
    # No state sender before 0.5.3.post3: not sent at all.
    assert pair("sglang-mooncake@0.5.2", 2, 2, "dsa", heads=1, mla=True)["verdict"] == "corrupts"


def test_check_reads_mamba_state_from_the_model():
    hybrid = pdtp.ModelShape(16, 2, hybrid=True)
    r = pdtp.check(hybrid, 1, 2, connector="sglang-nixl@0.5.10")
    assert not r.ok
    (v,) = [v for v in r.violations if v.code == "sglang_state_refused"]
    assert v.user_error == "RuntimeError" and "hybrid mamba" in v.message
    assert v.when == "first_transfer" and "prefill scheduler" in v.hint
    assert pdtp.check(hybrid, 1, 2, connector="sglang-nixl@0.5.11").ok
    # The same pair of a dense model is unaffected.
    assert pdtp.check(pdtp.ModelShape(16, 2), 1, 2, connector="sglang-nixl@0.5.10").ok
    bad = pdtp.check(hybrid, 2, 2, connector="sglang-mori@0.5.9")
    assert [v.code for v in bad.violations] == ["sglang_state_not_carried"]


def test_state_kinds_of_models_and_bad_input():
    assert sglang.state_kinds(pdtp.ModelShape(16, 2, hybrid=True)) == ["mamba"]
    with pytest.raises(PdtpError, match="state must name kinds among"):
        pair("sglang-nixl", 2, 2, "sliding")
    with pytest.raises(PdtpError, match="state must be a list"):
        sglang.check_sglang_pair("sglang-nixl", 8, False, 2, 2, state="swa")


def test_mooncake_0_5_9_mamba_slice_overruns_the_slot_for_p_above_d():
    # mooncake/conn.py:744 (0.5.9, _send_mamba_state_slice): dst_dim_start =
    # local_tp_rank_in_group * src_dim, no modulo: with P = 4 and D = 2, prefill ranks 2 and 3
    # write decode rank 1's slot past its end. 0.5.10 takes it modulo the writers per decode
    # rank. (MLA: its KV moves whole, so the state alone decides.)
    def mamba(v: str, p: int, d: int) -> dict:
        return pair(f"sglang-mooncake@{v}", p, d, "mamba", heads=1, mla=True)

    got = mamba("0.5.9", 4, 2)
    assert got["verdict"] == "corrupts" and "modulo" in got["message"]
    assert mamba("0.5.9", 2, 1)["verdict"] == "ok"  # D = 1: one group, no overrun
    assert mamba("0.5.9", 2, 4)["verdict"] == "ok"
    assert mamba("0.5.10", 4, 2)["verdict"] == "ok"
