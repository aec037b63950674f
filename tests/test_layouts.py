"""Layouts (TP, TP+EP, DP-attention+EP, PP) and aggregated instances in the planners:

- CP-SAT agrees with the exhaustive oracle on sampled MoE scenarios over every layout
  family and both modes, and every plan it returns passes ``pdtp.check``;
- ``mode="auto"`` is the better of ``"agg"`` and ``"disagg"``, and says by how much;
- the default layouts never serve less than TP-only plans (they include them);
- ``pdtp.pareto``: every point is the plan ``solve`` returns at that TPOT target, passes
  ``check``, and the frontiers are the non-dominated points.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import pdtp

MOE = ["qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b", "deepseek-v3", "qwen3-235b-a22b"]


def key(plan):
    if plan is None:
        return None
    return (plan.serving, *((role, str(s.layout), s.instances, s.gpu) for role, s in plan.sides))


def solved(model, **kw):
    try:
        return pdtp.solve(model, **kw)
    except pdtp.InfeasibleError:
        return None


def assert_checks(plan) -> None:
    """The plan's instances pass vLLM's rules and fit memory (``pdtp.check`` with the GPU)."""
    common = {"connector": plan.connector, "gpu": plan.gpu, "workload": plan.workload}
    if plan.serving == "agg":
        r = pdtp.check(plan.model, aggregated=plan.aggregated.layout, **common)
    else:
        r = pdtp.check(
            plan.model, prefill_tp=plan.prefill.layout, decode_tp=plan.decode.layout, **common
        )
    assert r.ok, (plan.summary(), r.violations)


def scenarios(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        connector, family = rng.choice(
            [("moriio", ["mi300x", "mi325x", "mi355x"]), ("nixl", ["h100", "h200", "b200"])]
        )
        model = rng.choice(MOE)
        if rng.random() < 0.6:
            pool = {"gpus": rng.choice([4, 8, 12, 16, 24, 32]), "gpu": rng.choice(family)}
        else:
            pool = {"nodes": [rng.randint(2, 8) for _ in range(rng.randint(1, 3))]}
            pool["gpu"] = rng.choice(family)
        yield model, connector, pool


def test_oracle_agrees_over_layouts_and_modes_and_plans_pass_check():
    seen_layouts: set[str] = set()
    modes: set[str] = set()
    plans = 0
    for model, connector, pool in scenarios(16, seed=21):
        kw = {"connector": connector, "layouts": "all", **pool}
        cp = solved(model, **kw)
        ex = solved(model, method="enumerate", **kw)
        assert key(cp) == key(ex), (model, connector, pool, key(cp), key(ex))
        if cp is None:
            continue
        plans += 1
        assert cp.status == "OPTIMAL" and cp.requests_per_s == ex.requests_per_s
        assert_checks(cp)
        modes.add(cp.serving)
        seen_layouts.update(str(s.layout) for _, s in cp.sides)
    # The sample exercises what it claims to: both modes, and layouts beyond plain TP.
    assert plans >= 10 and modes == {"agg", "disagg"}, (plans, modes)
    assert any("dp" in x or "ep" in x or "pp" in x for x in seen_layouts), seen_layouts


@pytest.mark.parametrize(
    ("model", "pool"),
    [
        ("qwen3-30b-a3b", {"gpus": 16, "gpu": "h200", "connector": "nixl"}),
        ("deepseek-v3", {"gpus": 32, "gpu": "mi355x"}),
        ("llama-3.1-70b", {"gpus": 16, "gpu": "mi300x"}),
    ],
)
def test_auto_is_the_better_mode_and_says_by_how_much(model, pool):
    agg = pdtp.solve(model, mode="agg", **pool)
    dis = pdtp.solve(model, mode="disagg", **pool)
    auto = pdtp.solve(model, **pool)
    assert agg.serving == "agg" and agg.prefill is None and agg.aggregated is not None
    assert dis.serving == "disagg" and dis.aggregated is None
    best, other = (agg, dis) if agg.requests_per_s > dis.requests_per_s else (dis, agg)
    assert key(auto) == key(best) and auto.requests_per_s == best.requests_per_s
    alt = auto.alternative
    assert alt is not None and alt.serving == other.serving
    assert alt.requests_per_s == other.requests_per_s and alt.summary == other.summary()
    assert auto.serving_gain == pytest.approx(best.requests_per_s / other.requests_per_s - 1)
    for p in (agg, dis, auto):
        assert_checks(p)
        e = pdtp.evaluate(
            p.model,
            gpu=p.gpu,
            workload=p.workload,
            connector=p.connector,
            **(
                {"aggregated": p.aggregated.layout, "aggregated_instances": p.aggregated.instances}
                if p.serving == "agg"
                else {
                    "prefill_tp": p.prefill.layout,
                    "prefill_instances": p.prefill.instances,
                    "decode_tp": p.decode.layout,
                    "decode_instances": p.decode.instances,
                }
            ),
        )
        assert e.valid and e.requests_per_s == pytest.approx(p.requests_per_s, rel=1e-9)


def test_mode_is_checked():
    with pytest.raises(pdtp.InvalidArgumentError, match="mode must be one of auto"):
        pdtp.solve("llama-3.1-8b", gpus=8, mode="both")
    with pytest.raises(pdtp.InvalidArgumentError, match="mode must be one of auto"):
        pdtp.size_for("llama-3.1-8b", 5.0, max_gpus=8, mode="aggregate-ish")
    plan = pdtp.size_for("llama-3.1-8b", 5.0, max_gpus=8, gpu="h100", mode="agg")
    assert plan.serving == "agg" and plan.requests_per_s >= 5.0


@pytest.mark.parametrize(
    ("model", "pool"),
    [
        ("qwen3-30b-a3b", {"gpus": 32, "gpu": "h100", "connector": "nixl"}),
        ("deepseek-v3", {"gpus": 32, "gpu": "mi300x"}),
        ("gpt-oss-120b", {"gpus": 16, "gpu": "mi355x"}),
    ],
)
def test_layouts_never_serve_less_than_tp_only(model, pool):
    for mode in ("disagg", "agg"):
        tp = solved(model, mode=mode, layouts="tp", **pool)
        full = pdtp.solve(model, mode=mode, **pool)
        assert tp is None or full.requests_per_s >= tp.requests_per_s
        assert_checks(full)


def test_pipeline_parallel_serves_what_one_node_cannot_hold():
    # Llama-3.1-405B in bf16 fits no TP group of one H100 node; two-stage pipelines do.
    with pytest.raises(pdtp.InfeasibleError):
        pdtp.solve("llama-3.1-405b", gpus=32, gpu="h100", connector="nixl", layouts="tp")
    plan = pdtp.solve("llama-3.1-405b", gpus=32, gpu="h100", connector="nixl")
    assert all(s.pp > 1 for _, s in plan.sides)
    assert_checks(plan)


# ---- the Pareto frontier --------------------------------------------------------------------


@pytest.fixture(scope="module")
def frontier():
    return pdtp.pareto("qwen3-30b-a3b", gpus=16, gpu="mi300x", tpot_ms=[8, 12, 20, 30, 50, 100])


def test_pareto_points_are_solves_at_each_target(frontier):
    assert frontier.points and frontier.model == "qwen3-30b-a3b"
    base = pdtp.Workload()
    for p in frontier.points:
        assert p.valid and p.plan is not None and p.tpot_ms <= p.tpot_target_ms
        w = dataclasses.replace(base, tpot_ms=p.tpot_target_ms)
        again = pdtp.solve("qwen3-30b-a3b", gpus=16, gpu="mi300x", workload=w)
        assert key(again) == key(p.plan) and again.requests_per_s == p.requests_per_s
        assert p.tokens_per_s_per_user == pytest.approx(1e3 / p.plan.tpot_ms)
        assert p.tokens_per_s_per_gpu == pytest.approx(
            p.plan.output_tokens_per_s / p.plan.gpus_used
        )
        assert_checks(p.plan)


def dominated(a, b) -> bool:
    """``a`` is beaten by ``b`` on both axes (at least as good on each, better on one)."""
    ge = (
        b.tokens_per_s_per_user >= a.tokens_per_s_per_user
        and b.tokens_per_s_per_gpu >= a.tokens_per_s_per_gpu
    )
    return ge and (
        b.tokens_per_s_per_user > a.tokens_per_s_per_user
        or b.tokens_per_s_per_gpu > a.tokens_per_s_per_gpu
    )


def test_pareto_frontier_is_the_non_dominated_points(frontier):
    front = frontier.frontier
    assert front and set(map(id, front)) <= set(map(id, frontier.points))
    for p in front:
        assert not any(dominated(p, q) for q in frontier.points)
    for p in frontier.points:
        assert p in front or any(dominated(p, q) or p == q for q in front)
    users = [p.tokens_per_s_per_user for p in front]
    assert users == sorted(users)
    # More interactivity costs throughput per GPU along the frontier.
    per_gpu = [p.tokens_per_s_per_gpu for p in front]
    assert per_gpu == sorted(per_gpu, reverse=True)


def test_rule_blind_frontier_is_never_below_the_valid_one(frontier):
    assert frontier.rule_blind
    for p in frontier.frontier:
        assert any(not dominated(q, p) for q in frontier.rule_blind)
        same = [q for q in frontier.rule_blind if q.tpot_target_ms == p.tpot_target_ms]
        assert all(q.tokens_per_s_per_gpu >= p.tokens_per_s_per_gpu for q in same)
    d = frontier.to_dict()
    assert {"points", "frontier", "rule_blind"} <= set(d) and "plan" not in d["points"][0]


def test_pareto_arguments():
    with pytest.raises(pdtp.InvalidArgumentError, match="tpot_ms"):
        pdtp.pareto("llama-3.1-8b", gpus=8, tpot_ms=[])
    with pytest.raises(pdtp.InvalidArgumentError, match="tpot_ms"):
        pdtp.pareto("llama-3.1-8b", gpus=8, tpot_ms=[-1])
    with pytest.raises(pdtp.InfeasibleError, match="no TPOT target"):
        pdtp.pareto("llama-3.1-70b", gpus=8, gpu="h100", tpot_ms=[0.01])


def test_connector_layout_rules_per_release():
    """vLLM's own DP/PP connector facts (the layout golden data): MoRIIO binds
    dp_rank + tp_rank, so a P/D instance with DP > 1 and TP > 1 is refused (aggregated
    instances need no connector); NIXL before 0.26.0 knows no pipeline stages."""
    m = "deepseek-v3"
    r = pdtp.check(m, prefill_tp="tp2dp4ep", decode_tp="tp1dp8ep")
    assert [v.code for v in r.violations] == ["moriio_dp_ports_collide"]
    assert r.alternatives and all("tp1" in a for a, _ in r.alternatives)
    assert pdtp.check(m, prefill_tp="tp1dp8ep", decode_tp="tp1dp8ep").ok
    assert pdtp.check(m, prefill_tp="tp2dp4ep", decode_tp="tp1dp8ep", connector="nixl").ok
    assert pdtp.check(m, aggregated="tp2dp4ep").ok
    pp = {"prefill_tp": "tp8pp2", "decode_tp": "tp8", "connector": "nixl"}
    assert pdtp.check("llama-3.1-405b", **pp).ok
    old = pdtp.check("llama-3.1-405b", **pp, vllm_version="0.25.0")
    assert [v.code for v in old.violations] == ["connector_pipeline_unsupported"]
    # The planners never pick what check refuses: no MoRIIO P/D side with DP > 1 and TP > 1.
    plan = pdtp.solve(m, gpus=32, gpu="mi300x", mode="disagg", layouts="all")
    assert all(s.dp == 1 or s.tp == 1 for _, s in plan.sides)
    assert_checks(plan)
