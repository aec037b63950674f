"""``pdtp.size_for`` and ``pdtp.replan`` against brute force over every configuration, and
their argument checking. The brute force uses only ``pdtp.evaluate`` (validity and
per-instance capacity of each pair), not the candidate table the planners use."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from functools import cache

import pytest

import pdtp
from pdtp.planning.replan import Move, MoveCost, Replan


def size_for(*args, **kw):
    """``pdtp.size_for`` over TP-only P/D splits: what the brute force here enumerates
    (layouts and aggregated instances are held to the oracle in test_layouts.py)."""
    return pdtp.size_for(*args, **{"mode": "disagg", "layouts": "tp", **kw})


def replan(*args, **kw):
    """``pdtp.replan`` over TP-only P/D splits (see ``size_for``)."""
    return pdtp.replan(*args, **{"mode": "disagg", "layouts": "tp", **kw})


CASES = [
    ("llama-3.1-70b", "mi300x", "moriio"),
    ("llama-3.1-70b", "h100", "nixl"),
    ("llama-3.1-8b", "mi325x", "moriio"),
    ("qwen3-30b-a3b", "h100", "nixl"),
    ("deepseek-v3", "mi300x", "moriio"),
]


@cache
def pair_caps(model: str, gpu: str, connector: str) -> dict[tuple[int, int], tuple[float, float]]:
    """Valid (P, D) pairs (tp ≤ 8) → per-instance (prefill, decode) capacity, by evaluate."""
    out = {}
    for p, d in itertools.product(range(1, 9), repeat=2):
        e = pdtp.evaluate(
            model,
            gpu=gpu,
            connector=connector,
            prefill_tp=p,
            prefill_instances=1,
            decode_tp=d,
            decode_instances=1,
        )
        if e.valid:
            out[(p, d)] = (e.prefill_capacity_rps, e.decode_capacity_rps)
    return out


def configs(model: str, gpu: str, connector: str, max_gpus: int):
    """Every valid (p, np, d, nd, served) within max_gpus."""
    for (p, d), (a, b) in pair_caps(model, gpu, connector).items():
        for np_ in range(1, max_gpus // p + 1):
            for nd in range(1, (max_gpus - p * np_) // d + 1):
                yield p, np_, d, nd, min(np_ * a, nd * b)


def brute_size_for(model, gpu, connector, demand, max_gpus):
    best = None
    for p, np_, d, nd, served in configs(model, gpu, connector, max_gpus):
        if served < demand:
            continue
        key = (p * np_ + d * nd, -(served - demand), p + d, p, np_ + nd)
        if best is None or key < best[0]:
            best = (key, (p, np_, d, nd))
    return None if best is None else best[1]


def shape(plan: pdtp.Plan) -> tuple[int, int, int, int]:
    return plan.prefill.tp, plan.prefill.instances, plan.decode.tp, plan.decode.instances


def assert_matches_evaluate(plan: pdtp.Plan) -> None:
    e = pdtp.evaluate(
        plan.model,
        gpu=plan.gpu,
        workload=plan.workload,
        connector=plan.connector,
        prefill_tp=plan.prefill.tp,
        prefill_instances=plan.prefill.instances,
        decode_tp=plan.decode.tp,
        decode_instances=plan.decode.instances,
    )
    assert e.valid, e.violations
    assert plan.requests_per_s == e.requests_per_s
    assert plan.prefill_capacity_rps == e.prefill_capacity_rps
    assert plan.decode_capacity_rps == e.decode_capacity_rps


# ---- size_for -------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "gpu", "connector"), CASES)
def test_size_for_matches_brute_force(model, gpu, connector):
    max_gpus = 24
    caps = pair_caps(model, gpu, connector)
    most = max((s for *_, s in configs(model, gpu, connector, max_gpus)), default=0.0)
    # Demands at and around every reachable capacity level, where ties and ceilings bite.
    levels = sorted({round(k * c, 6) for a, b in caps.values() for c in (a, b) for k in (1, 2, 3)})
    demands = [0.0, 0.5, *levels[:12], most * 0.5, most * 0.99, most, most * 1.01 + 0.01]
    for demand in demands:
        expected = brute_size_for(model, gpu, connector, demand, max_gpus)
        if expected is None:
            with pytest.raises(pdtp.InfeasibleError) as info:
                size_for(model, demand, max_gpus=max_gpus, gpu=gpu, connector=connector)
            assert info.value.reasons
            continue
        plan = size_for(model, demand, max_gpus=max_gpus, gpu=gpu, connector=connector)
        assert shape(plan) == expected, (demand, shape(plan), expected)
        assert plan.requests_per_s >= demand
        assert plan.status == "OPTIMAL" and plan.gpus == max_gpus
        assert_matches_evaluate(plan)


def test_size_for_small_budgets_exhaustive():
    # Every budget from 1 to 16 and demands on a fine grid, one model per connector family.
    for model, gpu, connector in CASES[:3]:
        for max_gpus in range(1, 17):
            for demand in [0.0, 1.0, 2.5, 4.0, 7.5, 12.0, 20.0, 40.0]:
                expected = brute_size_for(model, gpu, connector, demand, max_gpus)
                try:
                    plan = size_for(model, demand, max_gpus=max_gpus, gpu=gpu, connector=connector)
                except pdtp.InfeasibleError:
                    assert expected is None, (model, max_gpus, demand)
                    continue
                assert shape(plan) == expected, (model, max_gpus, demand)


def test_size_for_examples_and_fields():
    plan = size_for("llama-3.1-70b", 10.0, max_gpus=64, gpu="mi300x")
    assert plan.requests_per_s >= 10.0
    assert (
        plan.gpus_used <= 64 and plan.proof in ("cpsat", "enumeration") and plan.objective == "gpus"
    )
    hosts = [f"10.0.0.{n + 1}" for n in range(1 + max(p.node for p in plan.assignment))]
    assert plan.vllm_commands(node_hosts=hosts)  # a usable Plan in every respect
    # Fewer GPUs than solve's throughput-optimal plan at the same budget.
    assert plan.gpus_used <= pdtp.solve("llama-3.1-70b", 64, gpu="mi300x").gpus_used
    # Zero demand: the smallest valid deployment.
    small = size_for("llama-3.1-8b", 0, max_gpus=8, gpu="h100")
    assert (small.prefill.instances, small.decode.instances) == (1, 1)
    # Workloads pass through.
    w = pdtp.Workload(isl=1024, osl=256, ttft_ms=1000, tpot_ms=30)
    p2 = size_for("llama-3.1-8b", 20, max_gpus=32, gpu="h100", workload=w)
    assert p2.workload == w and p2.tpot_ms <= 30
    assert_matches_evaluate(p2)


def test_size_for_infeasible_reasons():
    with pytest.raises(pdtp.InfeasibleError) as info:
        size_for("llama-3.1-70b", 1000.0, max_gpus=16, gpu="mi300x")
    msg = str(info.value)
    assert "demand_rps=1000 needs" in msg and "max_gpus=16" in msg
    assert len(info.value.reasons) > 1
    # A model that fits nowhere: the same reasons solve gives.
    with pytest.raises(pdtp.InfeasibleError) as info:
        size_for("llama-3.1-405b", 1.0, max_gpus=64, gpu="h100")
    assert "weights" in str(info.value)


def test_size_for_notes_rule_rejected_cheaper_split():
    plan = size_for("llama-3.1-70b", 30.0, max_gpus=64, gpu="mi300x")
    # MoRIIO needs P == D (or both >= 8 KV heads) for llama: the note says what that costs.
    assert plan.rejected and "moriio rejects" in plan.rejected[0]


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"demand_rps": -1.0}, pdtp.InvalidArgumentError, "demand_rps"),
        ({"demand_rps": float("nan")}, pdtp.InvalidArgumentError, "demand_rps"),
        ({"demand_rps": float("inf")}, pdtp.InvalidArgumentError, "demand_rps"),
        ({"demand_rps": True}, TypeError, "demand_rps"),
        ({"demand_rps": "3"}, TypeError, "demand_rps"),
        ({"max_gpus": 0}, pdtp.InvalidArgumentError, "max_gpus"),
        ({"max_gpus": 2.5}, TypeError, "max_gpus"),
        ({"gpu": "nope"}, pdtp.UnknownNameError, "GPU"),
        ({"connector": "nope"}, pdtp.UnknownNameError, "connector"),
        ({"workload": {"isl": 0}}, pdtp.InvalidArgumentError, "isl"),
    ],
)
def test_size_for_argument_errors(kwargs, exc, text):
    args = {"demand_rps": 5.0, "max_gpus": 16, **kwargs}
    demand = args.pop("demand_rps")
    with pytest.raises(exc, match=text):
        size_for("llama-3.1-8b", demand, **args)


# ---- replan ---------------------------------------------------------------------------------


def side_cost(w: MoveCost, old: tuple[int, int], tp: int, n: int) -> float:
    otp, on = old
    if otp == tp:
        return w.start * tp * max(0, n - on) + w.stop * tp * max(0, on - n)
    return (w.stop + w.restart) * otp * on + w.start * tp * n


def brute_replan(model, gpu, connector, current, demand, max_gpus, w: MoveCost):
    (ptp, pn), (dtp, dn) = current
    best = None
    for p, np_, d, nd, served in configs(model, gpu, connector, max_gpus):
        if served < demand:
            continue
        used = p * np_ + d * nd
        cost = side_cost(w, (ptp, pn), p, np_) + side_cost(w, (dtp, dn), d, nd)
        key = (round(cost + w.gpu * used, 9), used, -served, p + d, p, np_ + nd)
        if best is None or key < best[0]:
            best = (key, (p, np_, d, nd), cost)
    return best


REPLAN_COSTS = [
    MoveCost(),
    MoveCost(gpu=0.0),
    MoveCost(gpu=0.5),
    MoveCost(start=2.0, stop=0.5, restart=3.0, gpu=1.0),
    MoveCost(start=1.0, stop=1.0, restart=0.0, gpu=4.0),
]


@pytest.mark.parametrize(("model", "gpu", "connector"), CASES[:4])
@pytest.mark.parametrize("w", REPLAN_COSTS, ids=lambda w: f"{w.start}-{w.stop}-{w.restart}-{w.gpu}")
def test_replan_matches_brute_force(model, gpu, connector, w):
    max_gpus = 24
    pairs = sorted(pair_caps(model, gpu, connector))
    currents = [((p, n1), (d, n2)) for p, d in pairs[:3] for n1, n2 in [(1, 1), (3, 2), (0, 4)]]
    currents.append(((pairs[-1][0], 2), (pairs[0][1], 5)))
    for (ptp, pn), (dtp, dn) in currents:
        for demand in [0.0, 3.0, 11.0, 25.0]:
            cur = {
                "model": model,
                "gpu": gpu,
                "connector": connector,
                "prefill": {"tp": ptp, "instances": pn},
                "decode": {"tp": dtp, "instances": dn},
            }
            expected = brute_replan(
                model, gpu, connector, ((ptp, pn), (dtp, dn)), demand, max_gpus, w
            )
            if expected is None:
                with pytest.raises(pdtp.InfeasibleError):
                    replan(cur, demand, max_gpus=max_gpus, move_cost=w)
                continue
            r = replan(cur, demand, max_gpus=max_gpus, move_cost=w)
            assert shape(r.plan) == expected[1], (cur, demand, shape(r.plan), expected)
            assert r.cost == pytest.approx(expected[2])
            assert r.plan.requests_per_s >= demand
            assert_diff_applies(r)


def assert_diff_applies(r: Replan) -> None:
    """Applying stop then start to the current deployment gives the new plan."""
    fleet = {
        ("prefill", r.current_prefill.tp): r.current_prefill.instances,
        ("decode", r.current_decode.tp): r.current_decode.instances,
    }
    for m in r.stop:
        assert m.instances > 0
        fleet[(m.role, m.tp)] -= m.instances
        assert fleet[(m.role, m.tp)] >= 0
    for m in r.start:
        assert m.instances > 0
        fleet[(m.role, m.tp)] = fleet.get((m.role, m.tp), 0) + m.instances
    expected = {
        ("prefill", r.plan.prefill.tp): r.plan.prefill.instances,
        ("decode", r.plan.decode.tp): r.plan.decode.instances,
    }
    assert {k: v for k, v in fleet.items() if v} == expected
    assert r.gpus_delta == r.plan.gpus_used - r.current_gpus
    assert r.gpus_started - r.gpus_stopped == r.gpus_delta


def test_replan_scales_in_place_and_reports_the_diff():
    now = size_for("llama-3.1-70b", 10.0, max_gpus=64, gpu="h100")
    up = replan(now, 30.0, max_gpus=64)
    assert up.plan.prefill.tp == now.prefill.tp and up.plan.decode.tp == now.decode.tp
    assert up.stop == () and up.start and up.gpus_delta > 0
    assert all(isinstance(m, Move) and isinstance(m, tuple) for m in up.start)
    role, tp, n = up.start[0]
    assert role in ("prefill", "decode") and tp in (now.prefill.tp, now.decode.tp) and n > 0
    assert up.cost == up.gpus_started  # default weights: one per GPU started
    down = replan(up.plan, 10.0, max_gpus=64)
    assert shape(down.plan) == shape(now)  # back where it started
    assert down.start == () and down.gpus_delta == -up.gpus_delta
    same = replan(now, 10.0, max_gpus=64)
    assert not same.changed and same.cost == 0 and same.gpus_delta == 0
    assert "no change" in same.summary()
    d = up.to_dict()
    assert d["start"][0]["gpus"] == up.start[0].gpus and d["plan"]["gpus_used"] == up.plan.gpus_used
    assert d["current"]["gpus_used"] == now.gpus_used


def test_replan_forced_tp_change_restarts_the_side():
    # tp=1 decode on H100 cannot hold llama-70B's weights: everything restarts.
    cur = {
        "model": "llama-3.1-70b",
        "gpu": "h100",
        "connector": "nixl",
        "prefill_tp": 8,
        "prefill_instances": 1,
        "decode_tp": 8,
        "decode_instances": 1,
    }
    r = replan(cur, 5.0, max_gpus=32, move_cost={"gpu": 10.0})
    # A heavy GPU weight makes fewer GPUs worth a restart.
    assert r.plan.gpus_used < 16
    stopped = {(m.role, m.tp) for m in r.stop}
    assert ("prefill", 8) in stopped or ("decode", 8) in stopped
    assert_diff_applies(r)
    # Sticky weights keep the running instances instead.
    keep = replan(cur, 5.0, max_gpus=32, move_cost=MoveCost(gpu=0.0))
    assert shape(keep.plan) == (8, 1, 8, 1) and not keep.changed


def test_replan_gpu_or_connector_change_restarts_everything():
    # AMD GPUs: the default connector there is MoRIIO, so connector="nixl" is a change.
    now = size_for("llama-3.1-8b", 20.0, max_gpus=32, gpu="mi300x")
    r = replan(now, 20.0, max_gpus=32, gpu="mi325x")
    assert r.plan.gpu == "mi325x"
    assert {(m.role, m.tp, m.instances) for m in r.stop} == {
        ("prefill", now.prefill.tp, now.prefill.instances),
        ("decode", now.decode.tp, now.decode.instances),
    }
    r2 = replan(now, 20.0, max_gpus=32, connector="nixl")
    assert r2.gpus_stopped == now.gpus_used


def test_replan_inherits_from_current_and_accepts_to_dict():
    w = pdtp.Workload(isl=1024, osl=256)
    now = size_for("qwen3-30b-a3b", 15.0, max_gpus=32, gpu="h200", workload=w, connector="nixl")
    a = replan(now, 25.0, max_gpus=32)
    b = replan(now.to_dict(), 25.0, max_gpus=32)
    assert a.plan.gpu == "h200" and a.plan.connector == "nixl" and a.plan.workload == w
    assert dataclasses.replace(a.plan, solve_ms=0) == dataclasses.replace(b.plan, solve_ms=0)
    assert a.start == b.start and a.stop == b.stop and a.cost == b.cost
    # A fresh deployment (no instances yet) is sized like size_for.
    fresh = {
        "model": "qwen3-30b-a3b",
        "gpu": "h200",
        "connector": "nixl",
        "workload": w,
        "prefill": {"tp": 1, "instances": 0},
        "decode": {"tp": 1, "instances": 0},
    }
    r = replan(fresh, 25.0, max_gpus=32)
    assert shape(r.plan) == shape(
        size_for("qwen3-30b-a3b", 25.0, max_gpus=32, gpu="h200", workload=w, connector="nixl")
    )
    assert r.stop == ()


def test_replan_is_deterministic():
    cur = {
        "model": "llama-3.1-70b",
        "gpu": "mi300x",
        "prefill": {"tp": 2, "instances": 3},
        "decode": {"tp": 2, "instances": 2},
    }
    runs = [replan(cur, 17.5, max_gpus=48).to_dict() for _ in range(3)]
    for d in runs:
        d["plan"].pop("solve_ms")
    assert runs[0] == runs[1] == runs[2]


def test_replan_infeasible():
    cur = {
        "model": "llama-3.1-70b",
        "prefill": {"tp": 2, "instances": 1},
        "decode": {"tp": 2, "instances": 1},
    }
    with pytest.raises(pdtp.InfeasibleError, match="max_gpus=8"):
        replan(cur, 500.0, max_gpus=8)


@pytest.mark.parametrize(
    ("current", "exc", "text"),
    [
        ("llama", TypeError, "current must be a pdtp.Plan or a dict"),
        (
            {"prefill": {"tp": 1, "instances": 1}, "decode": {"tp": 1, "instances": 1}},
            pdtp.InvalidArgumentError,
            "'model'",
        ),
        (
            {"model": "llama-3.1-8b", "decode": {"tp": 1, "instances": 1}},
            pdtp.InvalidArgumentError,
            "'prefill'",
        ),
        (
            {"model": "llama-3.1-8b", "prefill": {"tp": 1}, "decode": {"tp": 1, "instances": 1}},
            pdtp.InvalidArgumentError,
            r"current\['prefill'\] is missing 'instances'",
        ),
        (
            {"model": "llama-3.1-8b", "prefill": 4, "decode": {"tp": 1, "instances": 1}},
            TypeError,
            r"current\['prefill'\]",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "prefill": {"tp": 0, "instances": 1},
                "decode": {"tp": 1, "instances": 1},
            },
            pdtp.InvalidArgumentError,
            r"current\['prefill'\]\['tp'\]",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "prefill": {"tp": 1, "instances": -1},
                "decode": {"tp": 1, "instances": 1},
            },
            pdtp.InvalidArgumentError,
            r"current\['prefill'\]\['instances'\]",
        ),
        (
            {"model": "llama-3.1-8b", "prefill_tp": 1, "prefill_instances": 1, "decode_tp": 1},
            pdtp.InvalidArgumentError,
            "'decode_instances'",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "prefill_tp": 1.5,
                "prefill_instances": 1,
                "decode_tp": 1,
                "decode_instances": 1,
            },
            TypeError,
            r"current\['prefill_tp'\]",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "gpu": 3,
                "prefill_tp": 1,
                "prefill_instances": 1,
                "decode_tp": 1,
                "decode_instances": 1,
            },
            TypeError,
            r"current\['gpu'\]",
        ),
        (
            {
                "model": "no-such-model-xyz",
                "prefill_tp": 1,
                "prefill_instances": 1,
                "decode_tp": 1,
                "decode_instances": 1,
            },
            pdtp.PdtpError,
            "no-such-model-xyz",
        ),
    ],
)
def test_replan_current_errors_name_the_field(current, exc, text):
    with pytest.raises(exc, match=text):
        replan(current, 5.0, max_gpus=16)


@pytest.mark.parametrize(
    ("move_cost", "exc", "text"),
    [
        ({"begin": 1.0}, pdtp.InvalidArgumentError, "unknown field"),
        ({"start": -1.0}, pdtp.InvalidArgumentError, "move_cost.start"),
        ({"stop": float("inf")}, pdtp.InvalidArgumentError, "move_cost.stop"),
        ({"gpu": "1"}, TypeError, "move_cost.gpu"),
        ({"restart": True}, TypeError, "move_cost.restart"),
        (3.0, TypeError, "move_cost must be"),
    ],
)
def test_move_cost_errors(move_cost, exc, text):
    cur = {
        "model": "llama-3.1-8b",
        "prefill_tp": 1,
        "prefill_instances": 1,
        "decode_tp": 1,
        "decode_instances": 1,
    }
    with pytest.raises(exc, match=text):
        replan(cur, 5.0, max_gpus=16, move_cost=move_cost)


def test_public_names_and_no_ortools():
    for name in ("size_for", "replan", "Replan", "MoveCost"):
        assert name in pdtp.__all__ and hasattr(pdtp, name)
    assert pdtp.MoveCost().to_dict() == {"start": 1.0, "stop": 1.0, "restart": 0.0, "gpu": 1.0}
    # The autoscaler planners' plans here are proven by the enumeration of the competitive
    # pairs' counts, which needs no OR-Tools (CP-SAT, where it proves, loads it on first use) ...
    code = (
        "import sys, pdtp; "
        "cur = {'model': 'llama-3.1-8b', 'prefill_tp': 1, 'prefill_instances': 1, "
        "'decode_tp': 1, 'decode_instances': 1}; "
        "pdtp.replan(cur, 5.0, max_gpus=16); pdtp.size_for('llama-3.1-8b', 5.0, max_gpus=16); "
        "print('ortools' in sys.modules, type(pdtp.solve).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # ... and loading them leaves pdtp.solve the function (not the pdtp.solve submodule).
    assert out.stdout.split() == ["False", "function"]


def test_huge_demand_ends_quickly_with_a_clear_answer():
    # Past float precision a "one more instance" loop never ended (issue 13).
    import pdtp

    with pytest.raises(pdtp.InfeasibleError):
        size_for("llama-3.1-70b", 1e30, max_gpus=64)
    with pytest.raises(pdtp.InfeasibleError):
        size_for("llama-3.1-70b", 1e23, max_gpus=64)
