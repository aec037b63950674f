"""SGLang's transfer backends: names, versions, vendor facts and pair verdicts.

The rules themselves are proven against SGLang's code of every release by the Rust golden test
(src/connector/sglang_golden.rs); here the Python side: that the binding carries SGLang's
recorded outcomes through unchanged, and the user-facing contract.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import pdtp
from pdtp import catalog
from pdtp.connectors import connector_names, resolve_connector
from pdtp.deployment.connectors import sglang
from pdtp.errors import PdtpError
from pdtp.layout import loadable_tp_sizes
from pdtp.violations import pair_rules

GOLDEN = Path(__file__).parent / "data" / "sglang_golden.json.gz"


def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


def test_names_are_the_ones_scripts_rely_on():
    assert sglang.SGLANG_CONNECTORS == ("sglang-mooncake", "sglang-nixl", "sglang-mori")
    for name in sglang.SGLANG_CONNECTORS:
        c = sglang.resolve_sglang_connector(name)
        assert c.sglang_version == sglang.DEFAULT_SGLANG_VERSION == sglang.SGLANG_RELEASES[-1]
        assert c.key == f"{name}@{c.sglang_version}"
        assert c.transfer_backend == name.removeprefix("sglang-")


def test_the_default_engine_stays_vllm():
    assert not any(n.startswith("sglang") for n in connector_names())
    assert resolve_connector("nixl").kv_connector == "NixlConnector"


def test_sglang_version_is_accepted_and_checked():
    c = sglang.resolve_sglang_connector("SGLang_NIXL", sglang_version="0.5.10.post1")
    assert (c.name, c.sglang_version, c.rules_since) == ("sglang-nixl", "0.5.10.post1", "0.5.10")
    assert sglang.resolve_sglang_connector("sglang-nixl@0.5.10.post1") == c
    newer = sglang.resolve_sglang_connector("sglang-nixl", sglang_version="0.9.0")
    assert newer.rules_version == sglang.DEFAULT_SGLANG_VERSION
    assert "newest pdtp knows" in newer.label
    with pytest.raises(PdtpError, match=r"sglang_version.*0\.5\.9 to"):
        sglang.resolve_sglang_connector("sglang-mori", sglang_version="0.5.8")
    with pytest.raises(PdtpError, match="sglang_version must be a release like"):
        sglang.resolve_sglang_connector("sglang-mori", sglang_version="latest")
    with pytest.raises(PdtpError, match="give one"):
        sglang.resolve_sglang_connector("sglang-mori@0.5.10", sglang_version="0.5.11")
    with pytest.raises(PdtpError, match="sglang-mooncake, sglang-nixl, sglang-mori"):
        sglang.resolve_sglang_connector("sglang-tcp")
    with pytest.raises(PdtpError, match="sglang_version must be a string"):
        sglang.resolve_sglang_connector("sglang-mori", sglang_version=5)  # type: ignore[arg-type]


def test_mori_runs_on_amd_only():
    assert sglang.gpu_refusal("sglang-mori", "NVIDIA") is not None
    assert sglang.gpu_refusal("sglang-mori", "AMD") is None
    assert sglang.gpu_refusal("sglang-nixl", "NVIDIA") is None


def _rank_expectation(ranks: list[dict]) -> tuple[str, str] | None:
    """SGLang's first failing decode rank: (class, text), or None when every rank fetches."""
    for r in ranks:
        if "error" in r:
            return r["error"][0], r["error"][1]
        if "failed" in r:
            return "KVTransferError", r["failed"]
    return None


def test_verdicts_carry_sglang_recorded_failures_for_every_release():
    doc = golden()
    checked = 0
    for backend, runs in doc["backends"].items():
        for run in runs:
            release = run["releases"][-1]
            key = f"sglang-{backend}@{release}"
            for case in run["data"]["cases"]:
                if case["dp"] != 1:
                    continue
                want = _rank_expectation(case["ranks"])
                ppp, dpp = case["pp"]
                got = pdtp._core.sglang_check_pair(
                    key, 8, case["mla"], case["p"], case["d"], ppp, dpp
                )
                if want is not None:
                    assert got["verdict"] == "raises", (key, case["p"], case["d"], got)
                    assert (got["error"], got["message"]) == want, (key, case["p"], case["d"])
                elif case["pp"] == [1, 1]:
                    assert got["verdict"] != "raises" or got["surfaces"] != (
                        "decode_scheduler_crash"
                    ), (key, case)
                checked += 1
    assert checked > 1000


def test_issue_examples():
    check = sglang.check_sglang_pair
    # D > P, D % P != 0: every request fails fetching a prefill rank that does not exist.
    v = check("sglang-mooncake", 8, False, 2, 3)
    assert (v["verdict"], v["error"], v["surfaces"]) == (
        "raises",
        "KVTransferError",
        "request_failed",
    )
    assert "Could not fetch bootstrap info" in v["message"]
    # P > D, P % D != 0: a prefill rank never hears from decode: hang until the timeout.
    v = check("sglang-mooncake", 1, True, 3, 2)
    assert v == {**v, "verdict": "hangs", "until_timeout": True, "idle_prefill": [2]}
    # Up to 0.5.9 the destination head offset for P > D has no modulo: silent corruption.
    for backend in sglang.SGLANG_CONNECTORS:
        assert check(backend, 8, False, 4, 2, sglang_version="0.5.9")["verdict"] == "corrupts"
    assert check("sglang-mooncake", 8, False, 4, 2, sglang_version="0.5.10")["verdict"] == "ok"
    # Replicated KV heads (H < D, D > P) before compute_head_slice_params: Mooncake divides
    # by zero in its transfer worker (which fails the request), MORI raises its own ValueError
    # in the prefill scheduler.
    v = check("sglang-mooncake", 1, False, 1, 2, sglang_version="0.5.9")
    assert (v["error"], v["surfaces"]) == ("ZeroDivisionError", "request_failed")
    v = check("sglang-mori", 1, False, 1, 2, sglang_version="0.5.9")
    assert (v["error"], v["surfaces"]) == ("ValueError", "prefill_scheduler_crash")
    # PP: decode PP must equal prefill PP or be 1 (0.5.6.post1 on).
    v = check("sglang-nixl", 8, False, 2, 2, prefill_pp=1, decode_pp=2)
    assert v["error"] == "AssertionError" and "Decode pp size (2)" in v["message"]
    assert check("sglang-nixl", 8, False, 2, 2, prefill_pp=2, decode_pp=1)["verdict"] == "ok"


def test_dp_attention_pairs_by_attention_tp():
    a = sglang.check_sglang_pair("sglang-mooncake", 1, True, 8, 6, prefill_dp=2, decode_dp=2)
    b = sglang.check_sglang_pair("sglang-mooncake", 1, True, 4, 3)
    assert {k: v for k, v in a.items()} == b
    with pytest.raises(PdtpError, match="decode_tp=6 must be a positive multiple of decode_dp=4"):
        sglang.check_sglang_pair("sglang-mooncake", 1, True, 8, 6, decode_dp=4)
    with pytest.raises(PdtpError, match="num_kv_heads must be between 1 and 4096"):
        sglang.check_sglang_pair("sglang-mooncake", 0, True, 8, 6)


def test_catalog_unequal_pairs_only_grow_with_the_fixes():
    models = catalog.models()
    for name in sglang.SGLANG_CONNECTORS:
        old, loadable = sglang.unequal_pairs_accepted(name, models, sglang_version="0.5.9")
        new, loadable2 = sglang.unequal_pairs_accepted(name, models)
        assert loadable == loadable2 > 0
        assert 0 < old < new <= loadable
    # Before heterogeneous TP nothing unequal works.
    none, _ = sglang.unequal_pairs_accepted("sglang-mooncake", models, sglang_version="0.4.6")
    assert none == 0


def test_readme_table_matches_live_counts():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## SGLang's P/D disaggregation", 1)[1].split("\n## ", 1)[0]
    models = catalog.models()
    rows = {}
    for line in section.splitlines():
        if line.startswith("| SGLang ") or line.startswith("| vLLM "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1]
    assert f"over the {len(models)} catalog models" in section
    for version in ("0.5.23", "0.5.9", "0.4.6"):
        for name in sglang.SGLANG_CONNECTORS:
            if version == "0.4.6" and name == "sglang-mori":
                continue
            got, loadable = sglang.unequal_pairs_accepted(name, models, sglang_version=version)
            assert f"accepted of {loadable}" in section
            label = f"SGLang {version} `{name}`"
            if label in rows:
                assert rows[label] == str(got), label
            else:
                (joint,) = [k for k in rows if k.startswith(f"SGLang {version} ")]
                names = joint.split(f"SGLang {version} ", 1)[1].replace("`", "").split(" / ")
                short = name.removeprefix("sglang-")
                idx = [n.removeprefix("-").removeprefix("sglang-") for n in names].index(short)
                assert rows[joint].split(" / ")[idx] == str(got), (joint, name)
    for conn, label in (
        ("nixl", "nixl`"),
        ("moriio", "moriio` (READ)"),
        ("moriio-write", "moriio-write`"),
    ):
        accepted = 0
        for m in models:
            ok = set(loadable_tp_sizes(m, 8))
            for p in (1, 2, 4, 8):
                for d in (1, 2, 4, 8):
                    if p != d and p in ok and d in ok:
                        violations, _ = pair_rules(m, p, d, conn, None)
                        accepted += not violations
        assert rows[f"vLLM `{label}"] == str(accepted), conn


LAUNCH = json.loads((Path(__file__).parent / "data" / "sglang_launch_flags.json").read_text())


@pytest.mark.parametrize("version", sglang.SGLANG_RELEASES)
def test_launch_lines_use_only_flags_the_release_defines(version):
    facts = LAUNCH["releases"][version]
    defined = {f for f, there in facts["flags"].items() if there}
    for name in sglang.SGLANG_CONNECTORS:
        try:
            conn = sglang.resolve_sglang_connector(name, sglang_version=version)
        except PdtpError:
            continue  # not in this release (MORI before 0.5.9)
        choices = facts["choices"]["--disaggregation-transfer-backend"]
        assert conn.transfer_backend in choices, (version, name)
        for side in ("prefill", "decode"):
            for dp, ep in ((1, 1), (8, 8)):
                argv = sglang.launch_command(
                    side, conn, "deepseek-ai/DeepSeek-R1", tp=8, dp=dp, ep=ep
                )
                used = {a for a in argv if a.startswith("--")}
                assert used <= defined, (version, sorted(used - defined))
                assert (
                    argv[argv.index("--disaggregation-mode") + 1]
                    in (facts["choices"]["--disaggregation-mode"])
                )
                assert argv[argv.index("--disaggregation-transfer-backend") + 1] in choices
    # The facts the builder keys on are the release's own.
    assert facts["flags"]["--attn-dp-size"] == sglang._since(version, sglang.ATTN_DP_SIZE_SINCE)
    assert facts["flags"]["--pp-size"] == sglang._since(version, sglang.PP_SIZE_SINCE)
    mori = "mori" in facts["choices"]["--disaggregation-transfer-backend"]
    assert mori == sglang._since(version, sglang.MORI_SINCE)


def test_launch_command_quotes_and_refuses_bad_input():
    import shlex

    argv = sglang.launch_command("prefill", "sglang-mooncake", "my model; rm -rf /", tp=2)
    line = shlex.join(argv)
    assert shlex.split(line) == argv and "'my model; rm -rf /'" in line
    with pytest.raises(PdtpError, match="side must be"):
        sglang.launch_command("both", "sglang-mooncake", "m", tp=2)
    with pytest.raises(PdtpError, match="multiple of dp"):
        sglang.launch_command("decode", "sglang-mooncake", "m", tp=6, dp=4)
