"""``pdtp.solve_fleet``: optimality against brute force on small pools (every combination
of configurations, exact bin packing), CP-SAT with and without the closed-form bounds,
placement validity, and argument checking."""

from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess
import sys
from collections import Counter
from functools import cache

import pytest

import pdtp
import pdtp.planning.fleet as fleet_module
from pdtp import _core
from pdtp.planning import scenario
from pdtp.planning.fleet import SCALE, WEIGHT_SCALE

# The brute force here enumerates TP-only P/D splits: the fleets it checks are held to that
# space (layouts and aggregated instances meet the oracle in test_planning.py).
TP_PD = {"mode": "disagg", "layouts": "tp"}

# ---- an independent restatement of the objective -------------------------------------------


@cache
def options(model: str, gpu: str, connector: str, pool: int, gpn: int):
    """Valid (P, D) pairs that fit the pool and their capacity units (the core's rows)."""
    sc = scenario.build(
        [(model, None, 1.0, 1.0, None)],
        scenario.resolve_pool(pool, None, gpu, gpn, None),
        connector=connector,
        objective="max_min",
        **TP_PD,
    )
    c = _core.candidates(sc.core)
    rows = c.rows
    return [
        (rows[x.prefill].tp, rows[x.decode].tp, rows[x.prefill].units, rows[x.decode].units)
        for x in c.pairs
    ]


def units_of(demand: float) -> int:
    return math.ceil(demand * 1_000_000) if demand > 0 else 0


def fraction(units: int, a: int, b: int, np_: int, nd: int) -> int:
    return min(SCALE, SCALE * min(np_ * a, nd * b) // units) if units else SCALE


def packs(sizes: list[int], caps: list[int]) -> bool:
    """Exact bin packing by search (small inputs only)."""
    sizes = sorted(sizes, reverse=True)
    free = list(caps)

    def rec(i: int) -> bool:
        if i == len(sizes):
            return True
        tried = set()
        for n, room in enumerate(free):
            if room >= sizes[i] and room not in tried:
                tried.add(room)
                free[n] -= sizes[i]
                if rec(i + 1):
                    return True
                free[n] += sizes[i]
        return False

    return sum(sizes) <= sum(caps) and rec(0)


def as_entries(demands):
    """(model, demand, weight) → solve_fleet's (model, demand, workload, weight)."""
    return [(m, d, None, w) for m, d, w in demands]


def caps_of(pool: int, gpn: int) -> list[int]:
    return [gpn] * (pool // gpn) + ([pool % gpn] if pool % gpn else [])


def int_weights(weights: list[float]) -> list[int]:
    top = max(weights)
    return [round(WEIGHT_SCALE * w / top) for w in weights]


def score(objective, fracs, ws, weights, used):
    total = sum(w * f for w, f in zip(ws, fracs))
    if objective == "max_min":
        t = min((f for f, wt in zip(fracs, weights) if wt > 0), default=SCALE)
        return (t, total, -used)
    return (total, -used)


def brute_force(demands, pool, gpn, gpu, connector, objective):
    """Best (objective tuple) over every combination of per-model configurations."""
    caps = caps_of(pool, gpn)
    weights = [w for _, _, w in demands]
    ws = int_weights(weights)
    per_model = []
    for model, demand, _ in demands:
        units = units_of(demand)
        choices = [(0, (), SCALE if units == 0 else 0)]
        if units:
            for p, d, a, b in options(model, gpu, connector, pool, gpn):
                for np_ in range(1, pool // p + 1):
                    for nd in range(1, (pool - p * np_) // d + 1):
                        choices.append(
                            (
                                p * np_ + d * nd,
                                (p,) * np_ + (d,) * nd,
                                fraction(units, a, b, np_, nd),
                            )
                        )
        per_model.append(choices)
    best = None
    for combo in itertools.product(*per_model):
        used = sum(c[0] for c in combo)
        if used > pool:
            continue
        key = score(objective, [c[2] for c in combo], ws, weights, used)
        if best is not None and key <= best:
            continue
        if packs([s for c in combo for s in c[1]], caps):
            best = key
    return best


def result_score(fp, demands, pool, gpn, gpu, connector, objective):
    weights = [w for _, _, w in demands]
    ws = int_weights(weights)
    fracs = []
    for model, demand, _ in demands:
        units = units_of(demand)
        plan = fp.plans.get(model)
        if plan is None:
            fracs.append(SCALE if units == 0 else 0)
            continue
        a, b = next(
            (a, b)
            for p, d, a, b in options(model, gpu, connector, pool, gpn)
            if (p, d) == (plan.prefill.tp, plan.decode.tp)
        )
        fracs.append(fraction(units, a, b, plan.prefill.instances, plan.decode.instances))
    return score(objective, fracs, ws, weights, fp.gpus_used)


def evaluate(plan: pdtp.Plan):
    """``pdtp.evaluate`` of a plan's own configuration (P/D split or aggregated)."""
    if plan.serving == "agg":
        sides = {
            "aggregated": str(plan.aggregated.layout),
            "aggregated_instances": plan.aggregated.instances,
        }
    else:
        sides = {
            "prefill_tp": str(plan.prefill.layout),
            "prefill_instances": plan.prefill.instances,
            "decode_tp": str(plan.decode.layout),
            "decode_instances": plan.decode.instances,
        }
    return pdtp.evaluate(
        plan.model, gpu=plan.gpu, workload=plan.workload, connector=plan.connector, **sides
    )


def assert_valid(fp: pdtp.FleetPlan, demands, pool: int, gpn: int) -> None:
    caps = caps_of(pool, gpn)
    assert len(fp.placement) == len(caps)
    for node, cap in zip(fp.placement, caps):
        assert sum(tp for _, _, tp in node) <= cap
    placed = Counter()
    for node in fp.placement:
        for name, role, gpus in node:
            placed[(name, role)] += gpus
    expected = Counter()
    for name, plan in fp.plans.items():
        for role, side in plan.sides:  # an instance spanning nodes has a share on each
            expected[(name, role)] += side.gpus
        e = evaluate(plan)
        assert e.valid and e.requests_per_s == plan.requests_per_s
        assert plan.status == fp.status and plan.gpus_per_node == gpn
    assert placed == expected
    assert fp.gpus_used == sum(p.gpus_used for p in fp.plans.values()) <= pool
    names = [d[0] if isinstance(d, tuple) else d.get("name", d["model"]) for d in demands]
    assert set(fp.served_fraction) == set(names)
    for name in names:
        f = fp.served_fraction[name]
        assert 0.0 <= f <= 1.0
        if name in fp.plans:
            demand = fp.demand_rps[name]
            assert f == (1.0 if demand == 0 else min(1.0, fp.plans[name].requests_per_s / demand))
    assert fp.status in ("OPTIMAL", "FEASIBLE")
    assert (fp.gap == 0.0) if fp.status == "OPTIMAL" else (fp.gap is None or fp.gap >= 0)


# ---- optimality -------------------------------------------------------------------------


SMALL = [
    # (demands as (model, demand, weight), pool, gpus_per_node, gpu, connector)
    # MoRIIO runs only on AMD GPUs: NVIDIA pools use NIXL.
    ([("llama-3.1-8b", 30.0, 1.0), ("qwen3-8b", 25.0, 1.0)], 6, 8, "h100", "nixl"),
    ([("llama-3.1-8b", 60.0, 1.0), ("qwen3-8b", 80.0, 2.0)], 10, 4, "mi325x", "moriio"),
    ([("phi-4", 40.0, 1.0), ("gemma-2-9b", 20.0, 1.0)], 12, 8, "mi300x", "moriio"),
    ([("phi-4", 90.0, 2.0), ("llama-3.1-8b", 10.0, 1.0)], 10, 5, "mi300x", "nixl"),
    ([("llama-3.1-70b", 69.75, 1.0)], 8, 5, "mi300x", "moriio"),
    ([("llama-3.1-70b", 20.0, 1.0), ("llama-3.1-8b", 35.0, 0.5)], 10, 4, "mi300x", "moriio"),
    ([("qwen3-30b-a3b", 120.0, 1.0), ("llama-3.1-8b", 0.0, 1.0)], 9, 4, "h200", "nixl"),
    ([("qwen3-30b-a3b", 50.0, 1.0), ("mistral-7b-v0.3", 30.0, 0.0)], 7, 8, "mi355x", "moriio"),
]


@pytest.mark.parametrize("objective", ["max_min", "weighted"])
@pytest.mark.parametrize(("demands", "pool", "gpn", "gpu", "connector"), SMALL)
def test_matches_brute_force(demands, pool, gpn, gpu, connector, objective):
    fp = pdtp.solve_fleet(
        as_entries(demands),
        gpus=pool,
        gpus_per_node=gpn,
        gpu=gpu,
        connector=connector,
        objective=objective,
        **TP_PD,
    )
    assert fp.status == "OPTIMAL" and fp.gap == 0.0
    assert_valid(fp, demands, pool, gpn)
    expected = brute_force(demands, pool, gpn, gpu, connector, objective)
    assert result_score(fp, demands, pool, gpn, gpu, connector, objective) == expected


MEDIUM = [
    ([("llama-3.1-70b", 131.4, 1.0), ("gpt-oss-20b", 26.17, 2.0)], 32, 7, "mi300x", "moriio"),
    (
        [("phi-4", 300.0, 1.0), ("llama-2-13b", 80.0, 1.0), ("qwen3-8b", 150.0, 2.0)],
        40,
        8,
        "mi300x",
        "nixl",
    ),
    ([("mixtral-8x7b", 129.04, 1.0), ("llama-3.1-8b", 50.0, 1.0)], 18, 5, "mi300x", "moriio"),
    (
        [("llama-3.1-8b", 120.0, 1.0), ("qwen3-30b-a3b", 200.0, 1.0), ("deepseek-v3", 20.0, 3.0)],
        64,
        8,
        "mi300x",
        "moriio",
    ),
]


@pytest.mark.parametrize("objective", ["max_min", "weighted"])
@pytest.mark.parametrize(("demands", "pool", "gpn", "gpu", "connector"), MEDIUM)
def test_search_with_and_without_closed_form_help_agree(
    demands, pool, gpn, gpu, connector, objective, monkeypatch
):
    # The closed forms only start and bound CP-SAT: without them it proves the same value.
    kwargs = dict(
        gpus=pool, gpus_per_node=gpn, gpu=gpu, connector=connector, objective=objective, **TP_PD
    )
    helped = pdtp.solve_fleet(as_entries(demands), **kwargs)
    monkeypatch.setattr(fleet_module, "_Bounds", None)
    alone = pdtp.solve_fleet(as_entries(demands), **kwargs, time_limit_s=30)
    for fp in (helped, alone):
        assert fp.status == "OPTIMAL" and fp.method in ("cpsat", "closed-form")
        assert_valid(fp, demands, pool, gpn)
    a = result_score(helped, demands, pool, gpn, gpu, connector, objective)
    b = result_score(alone, demands, pool, gpn, gpu, connector, objective)
    assert a == b


@pytest.mark.parametrize(("demands", "pool", "gpn", "gpu", "connector"), MEDIUM[:3])
def test_without_the_dp_bounds(demands, pool, gpn, gpu, connector, monkeypatch):
    # Pools too large for the DP fall back to looser bounds and the CP-SAT search.
    kwargs = dict(gpus=pool, gpus_per_node=gpn, gpu=gpu, connector=connector, **TP_PD)
    fast = pdtp.solve_fleet(as_entries(demands), **kwargs)
    monkeypatch.setattr(fleet_module, "MAX_DP_CELLS", 0)
    slow = pdtp.solve_fleet(as_entries(demands), **kwargs, time_limit_s=20)
    assert slow.status == "OPTIMAL"
    assert_valid(slow, as_entries(demands), pool, gpn)
    assert result_score(slow, demands, pool, gpn, gpu, connector, "max_min") == result_score(
        fast, demands, pool, gpn, gpu, connector, "max_min"
    )


def test_placement_binding_needs_search():
    # Nodes of 5 GPUs: llama-70B's tp=4 instances cannot share one, so the GPU count alone
    # overstates what fits; the CP-SAT pattern model finds the best packable split.
    demands = [("llama-3.1-70b", 69.75, None, 1.0)]
    fp = pdtp.solve_fleet(demands, gpus=8, gpus_per_node=5, gpu="mi300x")
    assert fp.status == "OPTIMAL"
    assert all(sum(tp for *_, tp in node) <= cap for node, cap in zip(fp.placement, [5, 3]))


def test_twenty_models_share_512_gpus():
    models = [
        "llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "mistral-7b-v0.3",
        "qwen3-8b", "gemma-2-27b", "gemma-2-9b", "mixtral-8x7b", "qwen2.5-72b", "qwen2.5-14b",
        "qwen3-32b", "gpt-oss-120b", "gpt-oss-20b", "phi-4", "llama-4-scout", "yi-34b",
        "qwen3-14b", "falcon-40b", "command-r-plus",
    ]  # fmt: skip
    demands = [(m, 20.0 + 14 * i, None, 1.0 + i % 3) for i, m in enumerate(models)]
    # Every layout and aggregated instances (the default), and TP-only P/D splits: both
    # proven; the wider space serves the worst-served model at least as well.
    tp_only = pdtp.solve_fleet(demands, gpus=512, gpu="mi300x", time_limit_s=30, **TP_PD)
    assert tp_only.status == "OPTIMAL" and tp_only.gap == 0.0
    assert_valid(tp_only, demands, 512, 8)
    fp = pdtp.solve_fleet(demands, gpus=512, gpu="mi300x", time_limit_s=30)
    assert fp.status == "OPTIMAL" and fp.gap == 0.0
    assert fp.min_served_fraction >= tp_only.min_served_fraction
    assert any(s.dp > 1 or s.pp > 1 for p in fp.plans.values() for _, s in p.sides)
    assert_valid(fp, demands, 512, 8)
    assert 0 < fp.min_served_fraction < 1 and fp.gpus_used <= 512
    # Every model gets at least the minimum, and the pool is used.
    assert all(f >= fp.min_served_fraction for f in fp.served_fraction.values())
    assert fp.gpus_used > 500
    weighted = pdtp.solve_fleet(demands, gpus=512, gpu="mi300x", objective="weighted")
    assert weighted.status == "OPTIMAL"
    total = sum(w * weighted.served_fraction[m] for m, _, _, w in demands)
    assert total >= sum(w * fp.served_fraction[m] for m, _, _, w in demands) - 1e-9
    # Deterministic: the same input gives the same plan.
    again = pdtp.solve_fleet(demands, gpus=512, gpu="mi300x", time_limit_s=30)
    assert strip(again.to_dict()) == strip(fp.to_dict())


def strip(d: dict) -> dict:
    d = dict(d)
    d.pop("solve_ms")
    d["plans"] = {k: {**v, "solve_ms": 0} for k, v in d["plans"].items()}
    return d


def test_everyone_served_uses_fewest_gpus():
    demands = [("llama-3.1-8b", 40.0), ("llama-3.1-70b", 10.0)]
    fp = pdtp.solve_fleet(demands, gpus=64, gpu="h100")
    assert fp.status == "OPTIMAL" and fp.min_served_fraction == 1.0
    sized = sum(pdtp.size_for(m, d, max_gpus=64, gpu="h100").gpus_used for m, d in demands)
    assert fp.gpus_used == sized  # nothing to share: each model at its size_for
    assert fp.nodes_used == sum(1 for n in fp.placement if n)
    d = fp.to_dict()
    assert d["served_fraction"] == {"llama-3.1-8b": 1.0, "llama-3.1-70b": 1.0}
    assert len(d["placement"]) == 8 and d["plans"]["llama-3.1-8b"]["gpu"] == "h100"


def test_weights_decide_who_is_served():
    demands = [
        {"model": "llama-3.1-8b", "demand_rps": 200.0, "weight": 1.0},
        {"model": "llama-3.1-8b", "demand_rps": 200.0, "weight": 5.0, "name": "premium"},
    ]
    fp = pdtp.solve_fleet(demands, gpus=8, gpu="h100", objective="weighted")
    assert fp.served_fraction["premium"] > fp.served_fraction["llama-3.1-8b"]
    mm = pdtp.solve_fleet(demands, gpus=8, gpu="h100")
    assert abs(mm.served_fraction["premium"] - mm.served_fraction["llama-3.1-8b"]) < 0.2


def test_zero_demand_and_zero_weight():
    fp = pdtp.solve_fleet(
        [("llama-3.1-8b", 0.0), ("qwen3-8b", 30.0, None, 1.0), ("gemma-2-9b", 30.0, None, 0.0)],
        gpus=16,
        gpu="h100",
    )
    assert fp.served_fraction["llama-3.1-8b"] == 1.0 and "llama-3.1-8b" not in fp.plans
    assert fp.served_fraction["qwen3-8b"] == 1.0
    assert "gemma-2-9b" not in fp.plans  # weight 0: not worth a GPU


def test_pool_too_small_for_everyone():
    # Two 70B models, one GPU pair: max-min cannot give both a share, so t = 0.
    # (P/D only: one aggregated MI300X holds a 70B model, so each could get a GPU.)
    fp = pdtp.solve_fleet(
        [("llama-3.1-70b", 5.0), ("qwen2.5-72b", 5.0)], gpus=2, gpu="mi300x", mode="disagg"
    )
    assert fp.status == "OPTIMAL" and fp.min_served_fraction == 0.0
    assert len(fp.plans) == 1  # the pool still serves one of them


def test_short_time_limit_returns_a_valid_plan():
    demands = [("llama-3.1-70b", 131.4, None, 1.0), ("gpt-oss-20b", 26.17, None, 2.0)]
    fp = pdtp.solve_fleet(demands, gpus=32, gpus_per_node=7, gpu="mi300x", time_limit_s=1e-3)
    assert_valid(fp, demands, 32, 7)


def test_workloads_per_model():
    w = pdtp.Workload(isl=512, osl=128, ttft_ms=500, tpot_ms=30)
    fp = pdtp.solve_fleet(
        [("llama-3.1-8b", 30.0, w), {"model": "qwen3-8b", "demand_rps": 30.0}],
        gpus=16,
        gpu="h100",
        workload={"isl": 4096, "osl": 256},
    )
    assert fp.plans["llama-3.1-8b"].workload == w
    assert fp.plans["qwen3-8b"].workload == pdtp.Workload(isl=4096, osl=256)


def test_frozen_result():
    fp = pdtp.solve_fleet([("llama-3.1-8b", 10.0)], gpus=8, gpu="h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fp.gpus_used = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        fp.plans["x"] = fp.plans["llama-3.1-8b"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("demands", "kwargs", "exc", "text"),
    [
        (
            [("llama-3.1-8b", 1.0)],
            {"objective": "fair"},
            pdtp.InvalidArgumentError,
            "objective must be one of max_min, weighted",
        ),
        ([], {}, pdtp.InvalidArgumentError, "at least one model"),
        ("llama-3.1-8b", {}, TypeError, "demands must be a list"),
        ([("llama-3.1-8b",)], {}, pdtp.InvalidArgumentError, r"demands\[0\]"),
        ([42], {}, TypeError, r"demands\[0\]"),
        ([("llama-3.1-8b", -1.0)], {}, pdtp.InvalidArgumentError, r"demands\[0\].demand_rps"),
        ([("llama-3.1-8b", 1.0, None, -1)], {}, pdtp.InvalidArgumentError, r"demands\[0\].weight"),
        ([("llama-3.1-8b", 1.0, None, "heavy")], {}, TypeError, r"demands\[0\].weight"),
        ([("llama-3.1-8b", 1.0, None, 0.0)], {}, pdtp.InvalidArgumentError, "weight must be > 0"),
        ([{"model": "llama-3.1-8b"}], {}, pdtp.InvalidArgumentError, "missing 'demand_rps'"),
        (
            [{"model": "llama-3.1-8b", "demand_rps": 1, "rate": 2}],
            {},
            pdtp.InvalidArgumentError,
            "unknown field",
        ),
        (
            [("llama-3.1-8b", 1.0), ("llama-3.1-8b", 2.0)],
            {},
            pdtp.InvalidArgumentError,
            "listed twice",
        ),
        ([("llama-3.1-8b", 1.0)], {"gpus": 0}, pdtp.InvalidArgumentError, "gpus"),
        ([("llama-3.1-8b", 1.0)], {"gpus_per_node": 0}, pdtp.InvalidArgumentError, "gpus_per_node"),
        ([("llama-3.1-8b", 1.0)], {"time_limit_s": 0}, pdtp.InvalidArgumentError, "time_limit_s"),
        (
            [("llama-3.1-405b", 1.0)],
            {"gpu": "h100", "layouts": "tp"},  # pipeline layouts would serve it
            pdtp.InfeasibleError,
            "llama-3.1-405b: ",
        ),
    ],
)
def test_argument_errors(demands, kwargs, exc, text):
    args = {"gpus": 16, **kwargs}
    with pytest.raises(exc, match=text):
        pdtp.solve_fleet(demands, **args)


def test_infeasible_model_keeps_reasons():
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.solve_fleet(
            [("llama-3.1-8b", 1.0), ("llama-3.1-405b", 1.0)], gpus=64, gpu="h100", layouts="tp"
        )
    assert all(r.startswith("llama-3.1-405b: ") for r in info.value.reasons)


def test_cpsat_decides_and_public_names_stay_functions():
    code = (
        "import sys, pdtp; from ortools.sat.python import cp_model; "
        "fp = pdtp.solve_fleet([('llama-3.1-8b', 10.0)], gpus=8, gpu='h100'); "
        "print(fp.method, 'ortools' in sys.modules, type(pdtp.solve).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    method, *rest = out.stdout.split()
    assert method in ("cpsat", "closed-form") and rest == ["True", "function"]


# ---- the time limit, on the code's own clock ------------------------------------------------


class _Clock:
    """The fleet planner's clock, driven by the test: each reading moves it 10 µs, and a
    stage the test makes "slow" jumps it past the deadline. The planner must notice at
    its next check, keep what it has and end within 50 ms of its own clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        self.now += 1e-5
        return self.now


FLEET_20 = [
    {"model": m, "name": f"{m}-{i}", "demand_rps": 20.0 + 9 * i, "weight": 1.0 + i % 3}
    for i, m in enumerate(["llama-3.1-8b", "qwen3-8b", "llama-3.1-70b", "qwen2.5-72b"] * 5)
]


@pytest.mark.parametrize("stage", ["candidates", "frontiers", "dp", "linear"])
@pytest.mark.parametrize("objective", ["max_min", "weighted"])
def test_time_limit_holds_at_every_stage(stage, objective, monkeypatch):
    import pdtp.planning.fleet_relax as relax

    clock = _Clock()
    monkeypatch.setattr(fleet_module, "time", clock)
    limit = 0.5

    def slow(fn):
        def run(*args, **kwargs):
            clock.now += limit  # this stage took the whole limit
            return fn(*args, **kwargs)

        return run

    if stage == "candidates":
        monkeypatch.setattr(fleet_module, "candidates", slow(fleet_module.candidates))
    elif stage == "frontiers":
        monkeypatch.setattr(relax, "_levels", slow(relax._levels))
    elif stage == "dp":
        monkeypatch.setattr(relax.Relaxed, "_dp", slow(relax.Relaxed._dp))
    else:
        monkeypatch.setattr(fleet_module, "MAX_DP_CELLS", 0)
        monkeypatch.setattr(relax.Relaxed, "_linear", slow(relax.Relaxed._linear))
    fp = pdtp.solve_fleet(FLEET_20, gpus=64, gpu="h100", objective=objective, time_limit_s=limit)
    assert fp.solve_ms <= limit * 1e3 + 50
    assert fp.status == "FEASIBLE" and fp.proof is None
    assert_valid(fp, FLEET_20, 64, 8)
    if stage in ("dp", "linear") and objective == "max_min":
        # Cut in the relaxation: the closed-form t plan stands (it serves every model).
        assert fp.min_served_fraction > 0
    # Without the cut the same fleet is proven (what the cut took away).
    monkeypatch.undo()
    assert pdtp.solve_fleet(FLEET_20, gpus=64, gpu="h100", objective=objective).status == "OPTIMAL"
