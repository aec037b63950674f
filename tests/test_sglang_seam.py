"""SGLang through the connector seam: ``pdtp.check``, ``transfer_map`` and ``solve`` with
``connector="sglang-…"`` and ``sglang_version=``.

The verdicts are SGLang's own (the rules proven by src/connector/sglang_golden.rs; check's
verdict against the golden data's implied verdict in src/connector/sglang_check.rs); here:
that the public calls give the same verdicts as the SGLang module's pair check, that solve
plans only pairs the release accepts, and the engine/version contract.
"""

from __future__ import annotations

import pytest

import pdtp
from pdtp import catalog
from pdtp.connectors import resolve_connector
from pdtp.deployment.connectors import sglang
from pdtp.errors import InvalidArgumentError, PdtpError

SIZES = (1, 2, 3, 4, 6, 8)
# Releases across the rules' history: before heterogeneous TP, the slicing fixes, the newest.
VERSIONS = {
    "sglang-mooncake": ("0.4.6", "0.4.8.post1", "0.5.2", "0.5.9", "0.5.10", "0.5.23"),
    "sglang-nixl": ("0.4.6.post3", "0.5.2", "0.5.10", "0.5.13", "0.5.23"),
    "sglang-mori": ("0.5.9", "0.5.11", "0.5.23"),
}


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_check_gives_the_sglang_verdict(name):
    kinds = set()
    for version in VERSIONS[name]:
        for kv, mla in ((8, False), (2, False), (1, True)):
            shape = pdtp.ModelShape(64, kv, is_mla=mla) if mla else pdtp.ModelShape(64, kv)
            for p in SIZES:
                for d in SIZES:
                    want = sglang.check_sglang_pair(name, kv, mla, p, d, sglang_version=version)
                    r = pdtp.check(
                        shape, p, d, connector=name, sglang_version=version, alternatives=0
                    )
                    pair = [v for v in r.violations if v.side == "pair"]
                    loads = not [v for v in r.violations if v.side != "pair"]
                    if not loads:
                        continue  # vLLM's QKV split refuses the size before any transfer
                    kinds.add(want["verdict"])
                    assert (not pair) == (want["verdict"] == "ok"), (version, kv, mla, p, d)
                    if want["verdict"] == "raises":
                        assert pair[0].vllm_error == want["error"], (version, p, d)
                    if want["verdict"] == "hangs":
                        assert pair[0].consequence == "hang"
                    if want["verdict"] == "corrupts":
                        assert pair[0].consequence == "wrong_bytes"
    assert "ok" in kinds and len(kinds) >= 3, kinds


def test_versions_are_sglang_releases_and_vllm_is_untouched():
    c = resolve_connector("sglang-nixl", "0.5.10.post1")
    assert (c.engine, c.vllm_version, c.key) == (
        "sglang",
        "0.5.10.post1",
        "sglang-nixl@0.5.10.post1",
    )
    assert c.label == "sglang-nixl, SGLang 0.5.10.post1"
    r = pdtp.check(
        pdtp.ModelShape(64, 8), 4, 2, connector="sglang-mooncake", sglang_version="0.5.9"
    )
    assert not r.ok and r.violations[0].code == "sglang_wrong_kv_heads"
    assert r.connector == "sglang-mooncake" and r.vllm_version == "0.5.9"
    # Fixed in 0.5.10 (the destination offset's modulo).
    assert pdtp.check(pdtp.ModelShape(64, 8), 4, 2, connector="sglang-mooncake@0.5.10").ok
    with pytest.raises(InvalidArgumentError, match="sglang_version=.*is for SGLang"):
        pdtp.check(pdtp.ModelShape(64, 8), 4, 2, connector="nixl", sglang_version="0.5.9")
    with pytest.raises(InvalidArgumentError, match="runs in SGLang: give sglang_version"):
        pdtp.check(pdtp.ModelShape(64, 8), 4, 2, connector="sglang-nixl", vllm_version="0.20.0")
    with pytest.raises(PdtpError, match=r"sglang_version=0\.5\.8.*0\.5\.9 to"):
        pdtp.check(pdtp.ModelShape(64, 8), 2, 2, connector="sglang-mori", sglang_version="0.5.8")
    with pytest.raises(InvalidArgumentError, match="takes TP sizes"):
        pdtp.check(pdtp.ModelShape(64, 8), "tp2dp2", 2, connector="sglang-nixl")
    # vLLM's defaults are unchanged.
    assert pdtp.check(pdtp.ModelShape(64, 8), 4, 8).connector == "moriio"


def test_transfer_map_follows_sglang_slicing():
    m = pdtp.transfer_map(4, 2, kv_heads=8, connector="sglang-nixl", sglang_version="0.5.23")
    assert [[(r.prefill_rank, r.heads) for r in d.reads] for d in m.decode] == [
        [(0, (0, 1)), (1, (2, 3))],
        [(2, (4, 5)), (3, (6, 7))],
    ]
    # NIXL still slices without the destination modulo in 0.5.10.post1: wrong heads, raised.
    with pytest.raises(PdtpError, match="out of range"):
        pdtp.transfer_map(4, 2, kv_heads=8, connector="sglang-nixl", sglang_version="0.5.10.post1")


def test_mori_is_refused_on_nvidia():
    r = pdtp.check("llama-3.1-8b", 2, 2, connector="sglang-mori", gpu="h100")
    assert [v.code for v in r.violations] == ["connector_needs_amd_gpu"]
    assert "sglang-mooncake" in r.violations[0].hint
    assert pdtp.check("llama-3.1-8b", 2, 2, connector="sglang-mori", gpu="mi300x").ok
    with pytest.raises(pdtp.InfeasibleError):
        pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", connector="sglang-mori", mode="disagg")


@pytest.mark.parametrize(
    ("name", "version"),
    [("sglang-mooncake", "0.4.6"), ("sglang-mooncake", "0.5.9"), ("sglang-nixl", "0.5.23")],
)
def test_solve_plans_only_pairs_the_release_accepts(name, version):
    model = "llama-3.1-70b"
    kv = catalog.model(model).num_kv_heads
    plan = pdtp.solve(
        model, gpus=12, gpu="h100", connector=name, sglang_version=version, mode="disagg"
    )
    assert plan.connector == name and plan.vllm_version == version
    assert plan.prefill is not None and plan.decode is not None
    assert (plan.prefill.dp, plan.decode.dp, plan.prefill.pp, plan.decode.pp) == (1, 1, 1, 1)
    p, d = plan.prefill.tp, plan.decode.tp
    assert (
        sglang.check_sglang_pair(name, kv, False, p, d, sglang_version=version)["verdict"] == "ok"
    )
    assert pdtp.check(model, p, d, connector=name, sglang_version=version).ok
    if version == "0.4.6":  # before heterogeneous TP: equal sizes only
        assert p == d


def test_results_name_the_engine_and_its_release():
    r = pdtp.check(
        pdtp.ModelShape(48, 6), 2, 3, connector="sglang-mooncake", sglang_version="0.5.9"
    )
    assert (r.engine, r.engine_version) == ("SGLang", "0.5.9")
    assert r.vllm_version == r.engine_version  # the deprecated alias
    assert str(r.verdict).startswith("invalid: SGLang raises KVTransferError at ")
    d = r.to_dict()
    assert (d["engine"], d["engine_version"], d["vllm_version"]) == ("SGLang", "0.5.9", "0.5.9")
    assert d["verdict"]["engine"] == "SGLang"
    # vLLM's results say vLLM.
    v = pdtp.check(pdtp.ModelShape(64, 8), 16, 8, connector="nixl")
    assert (v.engine, v.engine_version) == ("vLLM", resolve_connector("nixl").vllm_version)
    assert str(v.verdict).startswith("invalid: vLLM raises AssertionError")
    m = pdtp.transfer_map(4, 2, kv_heads=8, connector="sglang-nixl", sglang_version="0.5.23")
    assert (m.engine, m.engine_version, m.vllm_version) == ("SGLang", "0.5.23", "0.5.23")
    assert m.to_dict()["engine_version"] == "0.5.23"


def test_nixl_prepared_path_asserts_its_tiling():
    # 0.5.22 on: KV heads < P < D leave NIXL's prepared source list no head group, and
    # `_init_hetero_tp_prep_handle` asserts the tiling without a message.
    shape = pdtp.ModelShape(64, 2)
    r = pdtp.check(shape, 4, 8, connector="sglang-nixl", alternatives=0)
    v = r.violations[0]
    assert (v.vllm_error, v.message, v.when) == ("AssertionError", "", "first_transfer")
    assert v.code == "sglang_head_slice_raises"
    assert "prefill scheduler" in v.hint
    # Mooncake slices the same pair; NIXL 0.5.13-0.5.21 over-count groups: NIXL refuses them.
    assert pdtp.check(shape, 4, 8, connector="sglang-mooncake").ok
    old = pdtp.check(shape, 2, 8, connector="sglang-nixl", sglang_version="0.5.16")
    assert old.violations[0].vllm_error == "nixlNotFoundError"
    assert pdtp.check(shape, 2, 8, connector="sglang-nixl").ok


def test_check_rs_holds_no_engine_arm():
    """The seam: check.rs calls the connector's rules once, whatever the engine; an engine's
    rules, errors and refusals live under src/connector/ (comments may name engines)."""
    from pathlib import Path

    src = (Path(__file__).parent.parent / "src" / "check.rs").read_text()
    code = "\n".join(line.split("//")[0] for line in src.splitlines())
    for word in ("Sglang", "sglang", "Engine::"):
        assert word not in code, word


def test_page_size_and_kv_cache_dtype_must_match():
    shape = pdtp.ModelShape(64, 8)

    def first(version, **kw):
        r = pdtp.check(shape, 2, 2, connector="sglang-mooncake", sglang_version=version, **kw)
        return r.violations[0] if r.violations else None

    # 0.5.10 on: both checked before the rank mapping, RuntimeError in the decode scheduler.
    v = first("0.5.23", page_size=(16, 32))
    assert (v.code, v.vllm_error, v.when) == (
        "sglang_kv_settings_differ",
        "RuntimeError",
        "handshake",
    )
    assert v.message.startswith("Page size mismatch: prefill server has page_size=16, but decode")
    v = first("0.5.23", kv_cache_dtype=("fp8_e4m3", None))  # decode: SGLang's default, auto
    assert "kv_cache_dtype=fp8_e4m3, but decode server has kv_cache_dtype=auto" in v.message
    # 0.5.8-0.5.9 check the page size only; before, nothing: the KV is wrong.
    assert first("0.5.9", page_size=(16, 32)).vllm_error == "RuntimeError"
    v = first("0.5.9", kv_cache_dtype=("fp8_e4m3", "auto"))
    assert (v.vllm_error, v.consequence) == (None, "wrong_bytes")
    assert first("0.5.7", page_size=(32, 16)).consequence == "wrong_bytes"
    # Equal settings, or one value for both, pass; the page check comes before the pair's.
    assert first("0.5.23", page_size=64, kv_cache_dtype="fp8_e4m3") is None
    r = pdtp.check(pdtp.ModelShape(48, 6), 2, 3, connector="sglang-mooncake", page_size=(1, 16))
    assert [v.code for v in r.violations] == ["sglang_kv_settings_differ", "sglang_request_fails"]
    # vLLM's rules for unequal settings are not modeled: refused, never guessed.
    assert pdtp.check(shape, 2, 2, connector="nixl", page_size=16).ok
    with pytest.raises(InvalidArgumentError, match="does not model"):
        pdtp.check(shape, 2, 2, connector="nixl", page_size=(16, 32))
    for bad in ((0, 16), (1, 2, 3), "16"):
        with pytest.raises(PdtpError, match="page_size"):
            pdtp.check(shape, 2, 2, connector="sglang-nixl", page_size=bad)
    with pytest.raises(InvalidArgumentError, match="kv_cache_dtype"):
        pdtp.check(shape, 2, 2, connector="sglang-nixl", kv_cache_dtype="fp8; rm -rf /")
