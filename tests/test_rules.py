"""The three vLLM functions: vLLM's own cases (rules.md §6) and exhaustive sweeps against
the plain-Python restatement of the spec in ``spec_rules``."""

from __future__ import annotations

import itertools

import pytest

import pdtp
from pdtp.connectors import DEFAULT_VLLM_VERSION

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


# --- connector profiles per vLLM release ------------------------------------------------


def test_resolve_connector_contract():
    from pdtp.connectors import DEFAULT_VLLM_VERSION, VLLM_RELEASES, resolve_connector

    assert VLLM_RELEASES[0] == "0.11.0" and VLLM_RELEASES[-1] == DEFAULT_VLLM_VERSION
    c = resolve_connector("moriio")
    assert (c.name, c.vllm_version, c.key, c.mode) == (
        "moriio",
        DEFAULT_VLLM_VERSION,
        f"moriio@{DEFAULT_VLLM_VERSION}",
        "read",
    )
    assert (c.kv_connector, c.prefill_role, c.decode_role) == (
        "MoRIIOConnector",
        "kv_producer",
        "kv_consumer",
    )
    assert resolve_connector("MoRIIO_Write", "0.20.0").key == "moriio-write@0.20.0"
    assert resolve_connector("moriio-write").mode == "write"
    assert resolve_connector("nixl").mode is None
    # A key and the same version agree; a key and another version is an error.
    assert resolve_connector("nixl@0.14.0", "0.14.0") == resolve_connector("nixl", "0.14.0")
    with pytest.raises(pdtp.InvalidArgumentError, match="give one"):
        resolve_connector("nixl@0.14.0", "0.20.0")
    # Newer than every release pdtp knows: the newest rules, and the label says so.
    c = resolve_connector("nixl", "0.99.0")
    assert c.rules_version == DEFAULT_VLLM_VERSION and "newest pdtp knows" in c.label
    # nixl-legacy is NIXL before prefill TP > decode TP was accepted.
    assert resolve_connector("nixl-legacy").vllm_version == "0.13.0"
    with pytest.raises(pdtp.InvalidArgumentError, match='use connector="nixl"'):
        resolve_connector("nixl-legacy", "0.20.0")


@pytest.mark.parametrize(
    ("name", "version", "exc", "match"),
    [
        ("moriio", "0.13.0", pdtp.InvalidArgumentError, "0.14.0 to 0.33.0"),
        ("nixl", "0.10.2", pdtp.InvalidArgumentError, "0.11.0 to 0.33.0"),
        ("nixl", "latest", pdtp.InvalidArgumentError, "vllm_version must be a release"),
        ("mooncake", None, pdtp.UnknownNameError, "connector must be one of"),
    ],
)
def test_unknown_versions_list_what_is_covered(name, version, exc, match):
    from pdtp.connectors import resolve_connector

    with pytest.raises(exc, match=match):
        resolve_connector(name, version)
    with pytest.raises(exc, match=match):
        pdtp.check(pdtp.ModelShape(64, 8), 4, 4, connector=name, vllm_version=version)


def test_rules_differ_by_release_as_vllm_does():
    llama70 = pdtp.ModelShape(64, 8)
    # NIXL: P16/D8 is an assertion in 0.33.0 (replicated prefill heads, P > D) ...
    r = pdtp.check(llama70, 16, 8, connector="nixl")
    assert r.violations[0].vllm_error == "AssertionError" and r.violations[0].message == ""
    # ... P > D crashes NIXL 0.11.0's handshake with ZeroDivisionError, and is an assertion
    # until 0.14.0. The handshake thread only logs it; the user meets KeyError at the read
    # (0.11.0 nixl_connector.py:729 queues the request as ready anyway).
    r = pdtp.check(llama70, 8, 4, connector="nixl", vllm_version="0.11.0")
    assert r.violations[0].vllm_error == "ZeroDivisionError"
    with pytest.raises(pdtp.errors.RuleKeyError, match="decode_tp // prefill_tp"):
        r.raise_for_violations()
    assert pdtp.check(llama70, 4, 2, connector="nixl", vllm_version="0.14.0").ok
    # P < H < D: NIXL before 0.24.0 checks block lengths by the TP ratio and rejects it.
    r = pdtp.check(pdtp.ModelShape(32, 4), 2, 8, connector="nixl", vllm_version="0.23.0")
    assert r.violations[0].code == "kv_block_len_mismatch"
    assert pdtp.check(pdtp.ModelShape(32, 4), 2, 8, connector="nixl").ok
    # MoRIIO before 0.25.0 pairs rank r with rank r: vLLM raises nothing, pdtp rejects.
    r = pdtp.check(pdtp.ModelShape(32, 4), 4, 8, vllm_version="0.24.0")
    assert r.violations[0].code == "unreachable_rank" and r.violations[0].vllm_error is None
    with pytest.raises(pdtp.UnworkablePairError):
        r.raise_for_violations()
    # WRITE mode re-slices heads from 0.33.0 only.
    assert pdtp.check(llama70, 4, 8, connector="moriio-write").ok
    assert not pdtp.check(llama70, 4, 8, connector="moriio-write", vllm_version="0.32.0").ok
    r = pdtp.check(llama70, 4, 6, connector="moriio-write")
    assert r.violations[-1].message == (
        "MoRIIO WRITE needs one TP size to be a multiple of the other, got producer "
        "tp_size=4, consumer tp_size=6"
    )
    assert r.mode == "write" and r.vllm_version == "0.33.0"


def test_launch_lines_state_moriio_mode():
    """The one launch-line maker states the mode where the release reads it."""
    for connector, flag in (("moriio", "true"), ("moriio-write", "false")):
        # (Not 0.18.0-0.22.1 for READ: pdtp refuses every READ pair there, see below.)
        for version, in_key in (("0.33.0", True), ("0.23.0", True), ("0.17.1", False)):
            plan = {
                "model": "deepseek-v2-lite",  # a plan file names a model pdtp can check
                "model_id": "org/Model-7B-Instruct",
                "gpu": "mi300x",
                "connector": connector,
                "vllm_version": version,
                "prefill": {"tp": 1, "instances": 1},
                "decode": {"tp": 1, "instances": 1},
            }
            for inst in pdtp.deploy(plan, proxy_host="10.0.0.1").instances:
                extra = inst.launch.kv_transfer_config["kv_connector_extra_config"]
                env = dict(inst.launch.env)
                # From 0.23.0 vLLM reads the key (and ignores the variable); before, the variable.
                assert extra.get("read_mode") == (flag if in_key else None)
                assert env.get("VLLM_MORIIO_CONNECTOR_READ_MODE") == (None if in_key else flag)


@pytest.mark.parametrize(
    ("connector", "version", "mode"),
    [("moriio", "0.17.1", "read"), ("moriio-write", None, "write"), ("nixl", "0.11.0", None)],
)
def test_plans_carry_version_and_mode(connector, version, mode):
    gpu = "h100" if connector == "nixl" else "mi300x"
    plan = pdtp.solve("llama-3.1-70b", gpus=16, gpu=gpu, connector=connector, vllm_version=version)
    want = version or DEFAULT_VLLM_VERSION
    assert (plan.vllm_version, plan.mode) == (want, mode)
    d = plan.to_dict()
    assert (d["vllm_version"], d["mode"]) == (want, mode)
    # The plan was checked under that release's rules.
    key = f"{connector}@{want}"
    assert pdtp.check("llama-3.1-70b", plan.prefill.tp, plan.decode.tp, connector=key).ok
    lines = plan.vllm_commands(node_hosts=[f"10.0.0.{i}" for i in range(1, 4)])
    dep = pdtp.deploy(plan, node_hosts=[f"10.0.0.{i}" for i in range(1, 4)])
    assert str(dep.vllm_version) == want
    if mode is None:
        assert all("read_mode" not in line for line in lines)
        return
    flag = "true" if mode == "read" else "false"
    if version == "0.17.1":  # before 0.23.0 the variable selects the mode
        assert all(f"VLLM_MORIIO_CONNECTOR_READ_MODE={flag}" in line for line in lines)
        assert all("read_mode" not in line for line in lines)
    else:
        assert all(f'"read_mode":"{flag}"' in line for line in lines)
    for inst in dep.instances:
        env = dict(inst.launch.env)
        extra = inst.launch.kv_transfer_config["kv_connector_extra_config"]
        assert env.get("VLLM_MORIIO_CONNECTOR_READ_MODE", extra.get("read_mode")) == flag


# ---- the planners under a vLLM release's rules -------------------------------------------------
# MoRIIO WRITE before 0.33.0 pairs rank r with rank r: only equal TP sizes work. From 0.33.0 it
# re-slices heads, and llama-3.1-70b on MI300X is then best served with unequal sizes. A planner
# that ignored vllm_version would plan unequal sizes for 0.32.0 too.
WRITE = {"gpu": "mi300x", "connector": "moriio-write"}


def _equal(plan) -> bool:
    return plan.prefill.tp == plan.decode.tp


def test_solve_and_size_for_follow_the_release():
    # (24 GPUs: a budget where the unequal split serves strictly more, as the model rates it)
    new = pdtp.solve("llama-3.1-70b", gpus=24, **WRITE)
    old = pdtp.solve("llama-3.1-70b", gpus=24, vllm_version="0.32.0", **WRITE)
    assert not _equal(new) and _equal(old)
    assert old.requests_per_s < new.requests_per_s
    # The rule note quotes the 0.32.0 rule that refused the better split.
    assert old.rejected and f"P{new.prefill.tp}/D{new.decode.tp}" in old.rejected[0]
    assert "before vLLM 0.33.0" in old.rejected[0]
    assert old.connector_label == "moriio-write (WRITE mode), vLLM 0.32.0"
    assert _equal(pdtp.size_for("llama-3.1-70b", 10, max_gpus=64, vllm_version="0.32.0", **WRITE))
    assert not _equal(pdtp.size_for("llama-3.1-70b", 10, max_gpus=64, **WRITE))
    # A key names the release too; a key and a different vllm_version conflict.
    keyed = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", connector="moriio-write@0.32.0")
    assert (keyed.prefill, keyed.decode, keyed.vllm_version) == (old.prefill, old.decode, "0.32.0")
    with pytest.raises(pdtp.InvalidArgumentError, match="give one"):
        pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x", connector="nixl@0.20.0",
                   vllm_version="0.21.0")  # fmt: skip


def test_fleet_evaluate_and_sweep_follow_the_release():
    demands = [("llama-3.1-70b", 10.0)]
    fleet_old = pdtp.solve_fleet(demands, gpus=16, vllm_version="0.32.0", **WRITE)
    fleet_new = pdtp.solve_fleet(demands, gpus=16, **WRITE)
    assert _equal(fleet_old.plans["llama-3.1-70b"]) and not _equal(fleet_new.plans["llama-3.1-70b"])
    assert fleet_old.plans["llama-3.1-70b"].vllm_version == "0.32.0"
    cfg = {"prefill_tp": 1, "prefill_instances": 8, "decode_tp": 4, "decode_instances": 2}
    assert pdtp.evaluate("llama-3.1-70b", gpu="mi300x", connector="moriio-write", **cfg).valid
    e = pdtp.evaluate(
        "llama-3.1-70b", gpu="mi300x", connector="moriio-write", vllm_version="0.32.0", **cfg
    )
    assert not e.valid and e.violations[0].code == "unreachable_rank"
    rows = pdtp.sweep(
        "llama-3.1-70b", gpus=[8, 16, 24], connector="moriio-write", vllm_version="0.32.0",
        workers=1, as_frame=False,
    )  # fmt: skip
    assert {r["connector"] for r in rows} == {"moriio-write@0.32.0"}
    assert all(r["prefill_tp"] == r["decode_tp"] for r in rows if r["status"] == "OPTIMAL")
    both = pdtp.sweep(
        "llama-3.1-70b", gpus=16, connector=["moriio-write", "moriio-write@0.32.0"],
        workers=1, as_frame=False,
    )  # fmt: skip
    by = {r["connector"]: r for r in both}
    assert by["moriio-write"]["prefill_tp"] != by["moriio-write"]["decode_tp"]
    assert by["moriio-write@0.32.0"]["prefill_tp"] == by["moriio-write@0.32.0"]["decode_tp"]
    assert by["moriio-write"]["requests_per_s"] == pytest.approx(
        pdtp.solve("llama-3.1-70b", gpus=16, **WRITE).requests_per_s
    )


def test_replan_keeps_the_running_release_unless_told():
    old = pdtp.solve("llama-3.1-70b", gpus=16, vllm_version="0.32.0", **WRITE)
    r = pdtp.replan(old.to_dict(), old.requests_per_s * 0.5, max_gpus=64)
    assert r.plan.vllm_version == "0.32.0" and _equal(r.plan) and not r.start
    # Another release restarts every instance, and plans with that release's rules.
    up = pdtp.replan(old.to_dict(), old.requests_per_s * 0.5, max_gpus=64, vllm_version="0.33.0")
    assert up.plan.vllm_version == "0.33.0"
    assert up.instances_stopped == old.prefill.instances + old.decode.instances


# --- what vLLM does with a pair, per release (issue 21) ---------------------------------
# Each test names the releases it covers and the vLLM code (wheel path:line) it follows.

HYBRID = "tests/data/hf-configs/Qwen--Qwen3-Next-80B-A3B-Thinking"


def test_moriio_only_on_amd_and_default_follows_vendor():
    # 0.14.0-0.33.0 moriio/moriio_connector.py (0.33.0:1739): MoRIIOConnectorWorker raises
    # RuntimeError when `mori` (ROCm only) does not import, as the engine starts its workers.
    r = pdtp.check("llama-3.1-70b", 4, 4, gpu="h100", connector="moriio")
    v = r.violations[0]
    assert (v.code, v.vllm_error, v.when) == (
        "connector_needs_amd_gpu",
        "RuntimeError",
        "engine_start",
    )
    assert v.message.startswith("MoRIIO is not available.") and 'connector="nixl"' in v.hint
    assert r.verdict.kind == "invalid" and r.verdict.error == "RuntimeError"
    with pytest.raises(RuntimeError):
        r.raise_for_violations()
    assert pdtp.check("llama-3.1-70b", 4, 4, gpu="mi300x", connector="moriio").ok
    assert pdtp.check("llama-3.1-70b", 4, 4, gpu="h100", connector="nixl").ok
    # No connector named: the GPU's vendor decides, and the result says so.
    nv = pdtp.check("llama-3.1-70b", 4, 4, gpu="h100")
    assert (nv.connector, nv.connector_default) == ("nixl", "the default on NVIDIA GPUs")
    assert nv.to_dict()["connector_default"] == "the default on NVIDIA GPUs"
    amd = pdtp.check("llama-3.1-70b", 4, 4, gpu="mi300x")
    assert (amd.connector, amd.connector_default) == ("moriio", "the default on AMD GPUs")
    plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100")
    assert plan.connector == "nixl" and plan.kv_connector == "NixlConnector"
    assert "the default on NVIDIA GPUs" in plan.connector_label
    with pytest.raises(pdtp.InfeasibleError, match="RuntimeError"):
        pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", connector="moriio", mode="disagg")


@pytest.mark.parametrize("version", ["0.14.0", "0.17.1", "0.25.0", "0.26.0"])
def test_moriio_read_prefill_dp_reads_dp_rank_zero_before_027(version):
    # 0.14.0-0.26.0: `_read_blocks` reads `get_engine_name_with_dp(dst_engine_id, 0)` whatever
    # DP rank prefilled the request (0.26.0 moriio/moriio_connector.py:1983); 0.27.0 reads the
    # request's `remote_dp_rank` (0.27.0 moriio_connector.py:2221).
    r = pdtp.check(
        "qwen3-235b-a22b", "tp1dp2ep", "tp1dp2ep", connector="moriio", vllm_version=version
    )
    assert r.violations[0].code == "moriio_reads_dp_rank_zero"
    assert (r.verdict.kind, r.verdict.consequences) == ("broken", ("wrong_bytes",))
    ok = pdtp.check(
        "qwen3-235b-a22b", "tp1dp2ep", "tp1dp2ep", connector="moriio", vllm_version="0.27.0"
    )
    assert ok.ok
    # A one-DP-rank prefill is unaffected.
    assert pdtp.check(
        "qwen3-235b-a22b", "tp1ep", "tp1dp4ep", connector="moriio", vllm_version=version
    ).ok


@pytest.mark.parametrize("version", ["0.14.0", "0.16.0", "0.17.1"])
def test_moriio_read_prefill_larger_leaks_before_deferred_send_timeout(version):
    # The producer scheduler's deferred-send reaping (defer_timeout, 60 s) exists from 0.23.0
    # (0.23.0 moriio/moriio_connector.py:640-670, moriio_common.py:274); before, a prefill rank
    # no decode rank releases never reports finished_sending and its blocks are never freed.
    r = pdtp.check(pdtp.ModelShape(8, 1), 2, 1, connector="moriio", vllm_version=version)
    assert [v.code for v in r.violations] == ["unreleased_prefill_blocks"]
    assert r.violations[0].consequence == "leak" and r.verdict.kind == "broken"
    later = pdtp.check(pdtp.ModelShape(8, 1), 2, 1, connector="moriio", vllm_version="0.23.0")
    assert later.ok and later.verdict.consequences == ("blocks_held_until_timeout",)
    assert "60 s" in later.warnings[0].message
    assert pdtp.check(pdtp.ModelShape(8, 1), 2, 2, connector="moriio", vllm_version=version).ok


@pytest.mark.parametrize("version", ["0.25.0", "0.27.0", "0.32.0"])
def test_moriio_write_one_decode_rank_replicated_kv_only_rank0_writes(version):
    # 0.25.0-0.32.0: every producer dials decode rank 0 (`get_moriio_remote_tp_rank`), the
    # decode side notifies only prefill rank 0, the others' write tasks expire after
    # defer_timeout and are marked done (0.25.0 moriio/moriio_engine.py:220-229).
    for shape in (pdtp.ModelShape(8, 1), pdtp.ModelShape(128, 128, True)):
        r = pdtp.check(shape, 4, 1, connector="moriio-write", vllm_version=version)
        assert r.ok and r.verdict.consequences == ("ranks_idle",), r.violations
        m = pdtp.transfer_map(
            4,
            1,
            kv_heads=shape.num_kv_heads,
            is_mla=shape.is_mla,
            connector="moriio-write",
            vllm_version=version,
        )
        assert m.decode[0].prefill_ranks == (0,)
    # More than one head: rank 0's block does not hold them all.
    assert not pdtp.check(
        pdtp.ModelShape(8, 8), 4, 1, connector="moriio-write", vllm_version=version
    ).ok
    # Before 0.25.0 producer q dials decode rank q: ranks 1.. dial a rank that does not exist.
    old = pdtp.check(pdtp.ModelShape(8, 1), 4, 1, connector="moriio-write", vllm_version="0.24.0")
    assert old.verdict.consequences == ("hang",)


@pytest.mark.parametrize("version", ["0.27.0", "0.32.0", "0.33.0"])
def test_moriio_read_one_rank_mla_decode_round_robins(version):
    # 0.27.0-0.33.0 `_resolve_read_source` (0.27.0 moriio/moriio_connector.py:1998-2022):
    # world_size 1, MLA, prefill DP 1 and TP > 1 read `_next_flex_tp_rank` per request.
    m = pdtp.transfer_map(4, 1, kv_heads=1, is_mla=True, connector="moriio", vllm_version=version)
    assert m.decode[0].round_robin == (0, 1, 2, 3)
    assert "round_robin_source" in [w.consequence for w in m.warnings]
    before = pdtp.transfer_map(
        4, 1, kv_heads=1, is_mla=True, connector="moriio", vllm_version="0.26.0"
    )
    assert before.decode[0].round_robin == () and before.decode[0].prefill_ranks == (0,)
    assert (
        pdtp.transfer_map(4, 1, kv_heads=1, is_mla=False, connector="moriio", vllm_version=version)
        .decode[0]
        .round_robin
        == ()
    )


@pytest.mark.parametrize(
    "version, error, when",
    [
        ("0.25.0", "KeyError", "first_transfer"),
        ("0.26.0", "KeyError", "first_transfer"),
        ("0.27.0", "HandshakeError", "handshake"),
        ("0.33.0", "HandshakeError", "handshake"),
    ],
)
def test_moriio_read_sizes_not_dividing_what_reaches_the_user(version, error, when):
    # `get_moriio_remote_tp_rank` raises ValueError inside the handshake future, which only
    # logs it: 0.25.0-0.26.0 the first read then looks up missing layer metadata (KeyError,
    # 0.25.0 moriio_connector.py:1089); 0.27.0 on the eager handshake's TP vote raises
    # HandshakeError (0.27.0 moriio_connector.py:1883).
    r = pdtp.check(pdtp.ModelShape(48, 48), 4, 6, connector="moriio", vllm_version=version)
    v = r.violations[0]
    assert v.vllm_error == "ValueError" and "must be a multiple" in v.message
    assert (v.user_error, v.when) == (error, when)
    assert (r.verdict.kind, r.verdict.error, r.verdict.when) == ("invalid", error, when)
    if error == "HandshakeError":
        assert r.verdict.message.startswith("Eager MoRIIO handshake failed for")


@pytest.mark.parametrize("version", ["0.18.0", "0.20.0", "0.22.1"])
def test_moriio_read_release_acks_rejected_018_to_0221(version):
    # 0.18.0-0.22.1: the prefill's notify listener takes only messages starting with
    # TRANSFER_PREFIX "tx" (0.18.0 moriio/moriio_engine.py:535, 0.22.1 :544), but a READ decode
    # rank releases with its request id (`_pop_done_transfers`, 0.18.0 moriio_connector.py:1252):
    # the listener raises MoRIIOError and exits (`_async_wait`), no request is ever reported
    # sent, and nothing reaps deferred sends before 0.23.0. Every READ pair leaks.
    for p, d in ((1, 1), (2, 2), (8, 8)):
        r = pdtp.check(pdtp.ModelShape(8, 8), p, d, connector="moriio", vllm_version=version)
        assert [v.code for v in r.violations] == ["release_acks_rejected"]
        assert (r.verdict.kind, r.verdict.consequences) == ("broken", ("leak",))
        assert "Unhandled message format" in r.violations[0].message
    # Ranks dialling a prefill rank that does not exist hang first.
    assert (
        pdtp.check(pdtp.ModelShape(8, 8), 1, 2, connector="moriio", vllm_version=version)
        .violations[0]
        .code
        == "unreachable_rank"
    )
    for fine in ("0.17.1", "0.23.0"):
        assert pdtp.check(pdtp.ModelShape(8, 8), 2, 2, connector="moriio", vllm_version=fine).ok
    # WRITE mode acks by transfer id: unaffected (0.20.0-0.22.1 WRITE hangs for another
    # reason: test_moriio_write_block_notices_to_itself_020_to_0221).
    write = pdtp.check(pdtp.ModelShape(8, 8), 2, 2, connector="moriio-write", vllm_version=version)
    assert write.ok if version == "0.18.0" else write.violations[0].code == "write_notices_to_self"


@pytest.mark.parametrize("version", ["0.20.0", "0.21.0", "0.22.1"])
def test_moriio_write_block_notices_to_itself_020_to_0221(version):
    # 0.20.0-0.22.1: the WRITE decode scheduler reads the *decode's* address from the router's
    # request id (`get_peer_zmq_from_request_id(request.request_id, is_producer=True)`, 0.20.0
    # moriio/moriio_connector.py:420) and sends its block notices to its own notify port,
    # whose listener dies of AssertionError "Only prefill can get block messages" (0.20.0
    # moriio_engine.py `_handle_remote_blocks_message`): no prefill rank writes, no deferred
    # write expires before 0.23.0, and every request waits for its KV forever.
    for p, d in ((1, 1), (2, 2), (8, 8)):
        r = pdtp.check(pdtp.ModelShape(8, 8), p, d, connector="moriio-write", vllm_version=version)
        assert [v.code for v in r.violations] == ["write_notices_to_self"]
        assert (r.verdict.kind, r.verdict.consequences) == ("broken", ("hang",))
    for fine in ("0.19.1", "0.23.0"):
        r = pdtp.check(pdtp.ModelShape(8, 8), 2, 2, connector="moriio-write", vllm_version=fine)
        assert r.ok
    # READ mode is another path (its 0.18.0-0.22.1 ack refusal is its own class).
    assert (
        pdtp.check(pdtp.ModelShape(8, 8), 2, 2, connector="moriio", vllm_version=version)
        .violations[0]
        .code
        == "release_acks_rejected"
    )


@pytest.mark.parametrize("version", ["0.25.0", "0.27.0", "0.32.0"])
def test_moriio_write_prefill_larger_writes_wrong_kv_025_to_032(version):
    # 0.25.0-0.32.0, P > D: the decode scheduler notifies prefill ranks 0..D-1 only
    # (`for tp_index in range(self.tp_size)`, 0.25.0 moriio/moriio_connector.py:598); each
    # writes its whole block to decode rank get_moriio_remote_tp_rank(q) and its write_done to
    # decode rank q (`get_port_offset(request_info.decode_dp_rank, self.worker.tp_rank)`,
    # 0.25.0 moriio_engine.py:458): every decode rank reports its KV received, some holding
    # other heads or nothing. vLLM raises nothing (was: a hang).
    for shape, p, d in (
        (pdtp.ModelShape(8, 8), 4, 2),
        (pdtp.ModelShape(8, 8), 2, 1),
        (pdtp.ModelShape(8, 1), 4, 2),
    ):
        r = pdtp.check(shape, p, d, connector="moriio-write", vllm_version=version)
        assert [v.code for v in r.violations] == ["write_heads_misplaced"], r.violations
        assert (r.verdict.kind, r.verdict.consequences) == ("broken", ("wrong_bytes",))
    # Before 0.25.0 prefill rank D dials decode rank D, which nobody bound: a hang; from
    # 0.33.0 the write mapping slices heads per target.
    old = pdtp.check(pdtp.ModelShape(8, 8), 4, 2, connector="moriio-write", vllm_version="0.24.0")
    assert old.verdict.consequences == ("hang",)
    assert pdtp.check(
        pdtp.ModelShape(8, 8), 4, 2, connector="moriio-write", vllm_version="0.33.0"
    ).ok


@pytest.mark.parametrize("version", ["0.14.0", "0.25.0", "0.33.0"])
@pytest.mark.parametrize("connector", ["moriio", "moriio-write"])
def test_moriio_pipeline_stages_hang_at_engine_start(version, connector):
    # No MoRIIO release reads the pipeline rank: each stage's worker binds handshake_port +
    # get_port_offset(dp_rank, tp_rank) (0.33.0 moriio/moriio_common.py:357), so two stages
    # bind one port and register_kv_caches waits for the listener that never binds.
    for pl, dl, side in (("tp4pp2", 4, "prefill"), (4, "tp4pp2", "decode")):
        r = pdtp.check("llama-3.1-70b", pl, dl, connector=connector, vllm_version=version)
        v = r.violations[0]
        assert (v.code, v.side, v.when, v.consequence, v.vllm_error) == (
            "connector_pipeline_unsupported",
            side,
            "engine_start",
            "hang",
            None,
        )


HYBRID_CORE = (
    "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
    "unified type."
)
HYBRID_PROMOTE = "Failed to promote local KV cache specs to one unified type."
HYBRID_WRITE = "MoRIIO hybrid (mamba/KDA) transfer is implemented"
HYBRID_VIEW_030 = "Unsupported MoRIIO K/V cache shape for layer {mamba_layer}"
CONV_LAYOUT = (
    "MoRIIO KDA conv transfer requires the DS (dim-first) state layout; "
    "set VLLM_SSM_CONV_STATE_LAYOUT=DS"
)


@pytest.mark.parametrize(
    "version, read, write",
    [
        # No SupportsHMA: vLLM turns the hybrid KV-cache manager off (0.25.0
        # vllm/config/vllm.py:1537) and unify_hybrid_kv_cache_specs refuses Mamba specs
        # (0.14.0 vllm/v1/core/kv_cache_utils.py:1202, 0.26.0 :1519).
        ("0.14.0", ("ValueError", HYBRID_CORE), ("ValueError", HYBRID_CORE)),
        ("0.26.0", ("ValueError", HYBRID_CORE), ("ValueError", HYBRID_CORE)),
        # 0.27.0-0.29.0: still no SupportsHMA; unify_hybrid_kv_cache_specs hands the specs
        # to _promote_local_kv_cache_specs, which promotes only sliding-window and
        # chunked-local specs and refuses attention beside Mamba (0.27.0
        # vllm/v1/core/kv_cache_utils.py:1529, 0.28.0 :1482, 0.29.0 :1570), in the engine
        # core before any worker registers a cache.
        ("0.27.0", ("ValueError", HYBRID_PROMOTE), ("ValueError", HYBRID_PROMOTE)),
        ("0.28.0", ("ValueError", HYBRID_PROMOTE), ("ValueError", HYBRID_PROMOTE)),
        ("0.29.0", ("ValueError", HYBRID_PROMOTE), ("ValueError", HYBRID_PROMOTE)),
        # 0.30.0: each worker's register_kv_caches meets the Mamba layer's [B, H, N, C] view
        # (moriio/moriio_layout.py:236, via moriio_connector.py:1922) before the engine core
        # builds the scheduler (vllm/v1/engine/core.py:145, then :162), whose
        # NotImplementedError (moriio_connector.py:419) no user sees.
        ("0.30.0", ("ValueError", HYBRID_VIEW_030), ("ValueError", HYBRID_VIEW_030)),
        # 0.31.0 READ's scheduler takes Mamba groups, WRITE's refuses (moriio_connector.py:497);
        # then the worker's register_kv_caches refuses vLLM's default conv-state layout
        # ("SD", vllm/model_executor/layers/mamba/mamba_utils.py:45): 0.31.0
        # moriio_connector.py:2312, 0.32.0 :2367, 0.33.0 :2511 (WRITE too in 0.33.0).
        ("0.31.0", ("MoRIIOError", CONV_LAYOUT), ("MoRIIOError", HYBRID_WRITE)),
        ("0.32.0", ("MoRIIOError", CONV_LAYOUT), ("MoRIIOError", HYBRID_WRITE)),
        ("0.33.0", ("MoRIIOError", CONV_LAYOUT), ("MoRIIOError", CONV_LAYOUT)),
    ],
)
def test_moriio_hybrid_models_at_engine_start(version, read, write):
    hybrid = pdtp.ModelShape(64, 8, hybrid=True)
    for connector, want in (("moriio", read), ("moriio-write", write)):
        r = pdtp.check(hybrid, 2, 2, connector=connector, vllm_version=version)
        if want is None:
            assert r.ok, (connector, r.violations)
            continue
        v = r.violations[0]
        assert (v.code, v.vllm_error, v.when) == ("hybrid_unsupported", want[0], "engine_start")
        assert v.message.startswith(want[1])
        assert (r.verdict.kind, r.verdict.error) == ("invalid", want[0])
    # The dense model of the same shape starts.
    assert pdtp.check(pdtp.ModelShape(64, 8), 2, 2, connector="moriio", vllm_version=version).ok


def test_moriio_read_round_robin_not_on_xgmi_from_033():
    # 0.33.0 `_spreads_replicated_reads` (moriio/moriio_connector.py:3384): the one-rank MLA
    # decode round-robins only on the rdma backend; 0.27.0-0.32.0 on every backend.
    new = pdtp.check(
        pdtp.ModelShape(128, 128, True), 4, 1, connector="moriio", vllm_version="0.33.0"
    )
    rr = [w for w in new.warnings if w.consequence == "round_robin_source"]
    assert rr and "on xgmi every request reads the first of them" in rr[0].message
    old = pdtp.check(
        pdtp.ModelShape(128, 128, True), 4, 1, connector="moriio", vllm_version="0.32.0"
    )
    rr = [w for w in old.warnings if w.consequence == "round_robin_source"]
    assert rr and "xgmi" not in rr[0].message


@pytest.mark.parametrize("version", ["0.15.1", "0.25.0", "0.33.0"])
def test_moriio_dp_ports_collide_hang_at_engine_start(version):
    # Every release binds handshake_port + dp_rank + tp_rank; a second rank on one port never
    # binds its listener and `register_kv_caches` waits for it (`ready_event.wait()`, 0.15.1
    # moriio/moriio_connector.py:1172): the engine never starts. Either side.
    for pl, dl, side in (("tp2dp2", 2, "prefill"), (2, "tp2dp2", "decode")):
        r = pdtp.check("llama-3.1-8b", pl, dl, connector="moriio", vllm_version=version)
        v = r.violations[0]
        assert (v.code, v.side, v.when, v.consequence) == (
            "moriio_dp_ports_collide",
            side,
            "engine_start",
            "hang",
        )


def test_moriio_connector_violations_in_the_order_they_surface():
    # 0.15.1, prefill tp1dp2, decode tp2: decode rank 1 dials prefill (dp0 + tp1) = DP rank 1's
    # port, and decode ranks past it dial ports nobody bound: the handshake hangs before any
    # request is decoded from DP rank 0's blocks.
    r = pdtp.check("llama-3.1-8b", "tp1dp2", 4, connector="moriio", vllm_version="0.15.1")
    codes = [v.code for v in r.violations]
    assert codes[0] == "unreachable_rank" and "moriio_reads_dp_rank_zero" in codes[1:]


@pytest.mark.parametrize("version", ["0.23.0", "0.24.0", "0.25.0"])
def test_nixl_pipeline_refused_at_engine_start_023_to_025(version):
    # v1/engine/core.py:186 hands (pp_rank, tp_rank)-keyed metadata to the base connector's
    # set_xfer_handshake_metadata_pp_aware (0.23.0 kv_connector/v1/base.py:655), which NIXL
    # overrides only from 0.26.0 (0.26.0 nixl/connector.py:210).
    r = pdtp.check("llama-3.1-70b", "tp4pp2", 4, connector="nixl", vllm_version=version)
    v = r.violations[0]
    assert (v.vllm_error, v.when) == ("ValueError", "engine_start")
    assert v.message == (
        "NixlConnector received pp_rank > 0 handshake metadata but does not support "
        "PP-disaggregated KV transfer."
    )
    before = pdtp.check("llama-3.1-70b", "tp4pp2", 4, connector="nixl", vllm_version="0.22.1")
    assert before.verdict.kind == "broken"
    assert pdtp.check("llama-3.1-70b", "tp4pp2", 4, connector="nixl", vllm_version="0.26.0").ok


def test_nixl_hybrid_models_skip_the_replicated_fan_in_assert():
    # 0.20.0 nixl/worker.py:1408 `if not self._has_mamba:`; 0.21.0-0.33.0 `if not
    # self.use_mla and not self._has_mamba:` (0.33.0 nixl/base_worker.py:2727).
    shape = pdtp.ModelShape(64, 8)
    hybrid = pdtp.ModelShape(64, 8, hybrid=True)
    for version in ("0.20.0", "0.24.0", "0.33.0"):
        assert (
            pdtp.check(shape, 16, 8, connector="nixl", vllm_version=version).violations[0].code
            == "replicated_kv_prefill_larger"
        )
        assert pdtp.check(hybrid, 16, 8, connector="nixl", vllm_version=version).ok
    assert not pdtp.check(hybrid, 16, 8, connector="nixl", vllm_version="0.19.1").ok
    # A real hybrid (Gated DeltaNet) model is read as one.
    from pdtp.check import model_shape

    m = model_shape(HYBRID)
    assert m.hybrid
    p, d = 4 * m.num_kv_heads, 2 * m.num_kv_heads
    assert pdtp.check(HYBRID, p, d, connector="nixl").ok


def test_max_acks_counts_per_mode():
    # WRITE: the decode scheduler releases every prefill rank, which waits for one ack; READ
    # (0.25.0 on) waits for get_moriio_expected_ack_count = D/P.
    shape = pdtp.ModelShape(64, 8)
    assert pdtp.check(shape, 1, 8, connector="moriio-write", max_acks=2).ok
    # The WRITE flow golden data shows every served WRITE prefill rank reporting sent on its
    # one ack (cargo test pdtp_agrees_with_vllm_moriio_flow); max_acks=1 keeps WRITE plans.
    for version in ("0.25.0", "0.33.0"):
        assert pdtp.check(
            shape, 8, 8, connector="moriio-write", vllm_version=version, max_acks=1
        ).ok
    r = pdtp.check(shape, 2, 8, connector="nixl", max_acks=2)
    assert [v.code for v in r.violations] == ["too_many_acks"] and r.verdict.kind == "over_limit"


def test_verdict_agrees_with_ok_over_a_grid():
    kinds = {"valid", "valid_with_consequence", "invalid", "broken", "over_limit"}
    stages = {"model_load", "engine_start", "handshake", "first_transfer", "serving", "planning"}
    for conn in ("moriio", "moriio-write", "nixl"):
        for version in ("0.14.0", "0.23.0", "0.27.0", "0.33.0"):
            for p, d in itertools.product([1, 2, 3, 4, 8], repeat=2):
                for shape in (pdtp.ModelShape(24, 8), pdtp.ModelShape(24, 1, True)):
                    r = pdtp.check(
                        shape, p, d, connector=conn, vllm_version=version, alternatives=0
                    )
                    v = r.verdict
                    assert v.kind in kinds and v.ok == r.ok
                    assert (v.kind == "valid") == (r.ok and not r.warnings)
                    if v.kind == "invalid":
                        assert v.error and v.when in stages - {"serving", "planning"}
                    if v.kind == "broken":
                        assert set(v.consequences) <= {"hang", "leak", "wrong_bytes"}
                    for w in r.warnings:
                        assert w.consequence in {
                            "blocks_held_until_timeout",
                            "round_robin_source",
                            "ranks_idle",
                            "needs_setting",
                        }


def test_sweep_default_connector_follows_each_gpus_vendor():
    rows = pdtp.sweep("llama-3.1-8b", gpus=[8], gpu=["h100", "mi300x"], workers=1, as_frame=False)
    assert {(r["gpu"], r["connector"]) for r in rows} == {("h100", "nixl"), ("mi300x", "moriio")}
    # Named explicitly, MoRIIO on NVIDIA pairs nothing: the sweep plans mode auto as solve
    # does, so where NIXL disaggregates it plans aggregated serving (no KV moves), equal to
    # solve's plan; solve's disaggregated mode says why (test_moriio_only_on_amd_...).
    rows = pdtp.sweep(
        "llama-3.1-70b",
        gpus=[8, 127],
        gpu="h100",
        connector=["moriio", "nixl"],
        workers=1,
        as_frame=False,
    )
    by = {(r["connector"], r["gpus"]): r for r in rows}
    for gpus in (8, 127):
        assert by["nixl", gpus]["mode"] == "disagg"
        row = by["moriio", gpus]
        assert row["status"] == "OPTIMAL" and row["mode"] == "agg"
        assert row["rule_blind_mode"] == "agg" and row["prefill_layout"] is None
        plan = pdtp.solve("llama-3.1-70b", gpus=gpus, gpu="h100", connector="moriio")
        assert plan.serving == "agg"
        assert (row["aggregated_layout"], row["aggregated_instances"]) == (
            str(plan.aggregated.layout),
            plan.aggregated.instances,
        )
        assert row["requests_per_s"] == plan.requests_per_s


def test_sliding_window_fact_of_a_model():
    # A model with sliding-window attention groups carries it to the rules (check, the layout
    # facts the planners read once, transfer_map); chunked local attention (Llama 4) does not:
    # vLLM turns the hybrid KV-cache manager off for it by default (0.30.0
    # vllm/config/vllm.py:1992), so the connector sees full attention.
    from pdtp.catalog import resolve_model
    from pdtp.check import model_shape
    from pdtp.layout import layout_model

    for name, sliding in (("gemma-3-27b", True), ("gpt-oss-120b", True), ("llama-4-scout", False)):
        m = resolve_model(name)
        assert model_shape(m).sliding_window is sliding, name
        assert model_shape(name).sliding_window is sliding, name
        assert layout_model(m)[7] is sliding, name
    assert layout_model(pdtp.ModelShape(64, 8, sliding_window=True))[7] is True
    assert layout_model(pdtp.ModelShape(64, 8))[7] is False
    with pytest.raises(pdtp.PdtpError, match="sliding_window"):
        pdtp.ModelShape(64, 8, sliding_window=1)  # type: ignore[arg-type]
    with pytest.raises(pdtp.PdtpError, match="sliding_window"):
        pdtp.transfer_map(2, 2, kv_heads=8, sliding_window="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "version, message",
    [
        # Before 0.30.0 MoRIIOConnector is no SupportsHMA: vLLM turns the hybrid KV-cache
        # manager off and unifies the window to full attention (0.29.0 vllm/config/vllm.py),
        # so WRITE runs the dense flow.
        ("0.29.0", None),
        # MoRIIOConnectorScheduler.__init__ (0.30.0 moriio/moriio_connector.py:427, 0.32.0
        # :572; 0.33.0 :639 only for a SlidingWindowSpec group).
        ("0.30.0", "MoRIIO WRITE mode does not support hybrid KV cache groups"),
        ("0.32.0", "MoRIIO WRITE mode does not support hybrid KV cache groups"),
        ("0.33.0", "MoRIIO WRITE mode does not support sliding-window cache groups"),
    ],
)
def test_moriio_write_refuses_sliding_window_models_from_030(version, message):
    sliding = pdtp.ModelShape(64, 8, sliding_window=True)
    w = pdtp.check(sliding, 2, 2, connector="moriio-write", vllm_version=version)
    # READ keeps the window's group and starts.
    assert pdtp.check(sliding, 2, 2, connector="moriio", vllm_version=version).ok
    if message is None:
        assert w.ok, w.violations
        return
    v = w.violations[0]
    assert (v.code, v.vllm_error, v.when) == (
        "sliding_window_unsupported",
        "NotImplementedError",
        "engine_start",
    )
    assert v.message.startswith(message)
    # A catalog model with sliding-window layers meets it; Llama 4's chunked layers do not.
    assert not pdtp.check("gemma-3-27b", 2, 2, connector="moriio-write", vllm_version=version).ok
    assert pdtp.check("llama-4-scout", 8, 8, connector="moriio-write", vllm_version=version).ok
    with pytest.raises(pdtp.PdtpError, match="MoRIIO WRITE mode does not support"):
        pdtp.transfer_map(
            2, 2, kv_heads=8, connector="moriio-write", vllm_version=version, sliding_window=True
        )


def test_moriio_write_planner_keeps_sliding_window_models_aggregated_from_030():
    # The planners read the same fact: every P/D pair of Gemma 3 under MoRIIO WRITE 0.31.0 is
    # refused at the engine start (moriio/moriio_connector.py:542), so no P/D plan is made.
    plan = pdtp.solve(
        "gemma-3-27b", gpus=8, gpu="mi355x", vllm_version="0.31.0", connector="moriio-write"
    )
    assert plan.prefill is None and plan.decode is None
    assert all("MoRIIO WRITE mode does not support" in r for r in plan.rejected)


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0", "0.33.0"])
def test_moriio_read_moves_a_sliding_window_group_as_the_full_one(version):
    # READ keeps the sliding-window group from 0.30.0 and reads every layer's blocks of its
    # own group from the one remote rank the request's session names (0.30.0
    # moriio/moriio_connector.py:2783-2791); before, the window is full attention. The map of
    # a sliding-window model is the dense model's (tools/vllm_flow.py drives both layers).
    for p, d, h, mla in ((2, 2, 8, False), (8, 2, 2, False), (4, 1, 1, True), (2, 8, 2, False)):
        dense = pdtp.transfer_map(p, d, kv_heads=h, is_mla=mla, vllm_version=version)
        sliding = pdtp.transfer_map(
            p, d, kv_heads=h, is_mla=mla, vllm_version=version, sliding_window=True
        )
        assert (sliding.decode, sliding.prefill) == (dense.decode, dense.prefill)
        assert sliding.warnings == dense.warnings


@pytest.mark.parametrize(
    "version, rule, moved",
    [
        # Before 0.30.0 vLLM unifies the window to full attention for MoRIIO: every block.
        ("0.14.0", "every", 300),
        ("0.29.0", "every", 300),
        # 0.30.0 on both schedulers clip the window's group to its last
        # cdiv(window, block_size) + 1 blocks (blocks_per_sw, 0.30.0
        # moriio/moriio_connector.py:441; get_exchange_clipped_blocks :525).
        ("0.30.0", "last_window", 257),
        ("0.33.0", "last_window", 257),
    ],
)
def test_moriio_read_sliding_window_blocks_per_release(version, rule, moved):
    m = pdtp.transfer_map(2, 2, kv_heads=8, vllm_version=version, sliding_window=True)
    assert m.sliding_window_blocks == rule
    assert m.to_dict()["sliding_window_blocks"] == rule
    assert m.window_blocks(4096, 16, 300) == moved
    # A request shorter than the window moves all its blocks either way.
    assert m.window_blocks(4096, 16, 100) == 100
    # A model without sliding-window layers has no window rule.
    dense = pdtp.transfer_map(2, 2, kv_heads=8, vllm_version=version)
    assert dense.sliding_window_blocks is None and dense.window_blocks(4096, 16, 300) is None
    with pytest.raises(pdtp.PdtpError, match="block_size"):
        m.window_blocks(4096, 0, 300)


@pytest.mark.parametrize(
    "version, rule, moved",
    [
        # NIXL before 0.18.0: no hybrid KV-cache manager, the window is full attention
        # (0.17.0 nixl_connector.py:1460): every block.
        ("0.17.1", "every", 300),
        # 0.18.0 on both schedulers clip the window's group (blocks_per_sw, 0.18.0
        # nixl_connector.py:606; 0.33.0 nixl/base_scheduler.py:151).
        ("0.18.0", "last_window", 257),
        ("0.33.0", "last_window", 257),
    ],
)
def test_nixl_sliding_window_blocks_per_release(version, rule, moved):
    m = pdtp.transfer_map(
        4, 2, kv_heads=8, connector="nixl", vllm_version=version, sliding_window=True
    )
    assert m.sliding_window_blocks == rule
    assert m.window_blocks(4096, 16, 300) == moved
    dense = pdtp.transfer_map(4, 2, kv_heads=8, connector="nixl", vllm_version=version)
    assert dense.sliding_window_blocks is None
