"""``pdtp.solve``: the best valid P/D split of a GPU pool for one model — most requests/s
(``objective="throughput"``), most output tokens per dollar (``"tokens_per_dollar"``) or
the cheapest plan serving ``demand_rps`` (``"cost"``)."""

from __future__ import annotations

import time
from typing import Any

from .._validate import public_api
from ..connectors import engine_connector
from ..errors import InfeasibleError, InvalidArgumentError
from ..scenario import OBJECTIVES as _OBJECTIVES
from ..scenario import Scenario, SolverConfig, scenario_of, solver_of
from . import goodput, infeasible, plan, scenario
from .decide import CUT_NOTE, candidates, decide
from .plan import Plan

OBJECTIVES = _OBJECTIVES["solve"]


@public_api
def solve(
    model: Any,
    gpus: Any = None,
    *,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    connector: Any = None,
    vllm_version: str | None = None,
    objective: str | None = None,
    demand_rps: float | None = None,
    prices: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float | None = None,
    time_limit_s: float | None = None,
    constants: Any = None,
    method: str | None = None,
    num_workers: int | None = None,
    slo_percentile: float | None = None,
    mode: str | None = None,
    layouts: Any = None,
    solver: SolverConfig | None = None,
    sglang_version: str | None = None,
) -> Plan:
    """The best valid plan of a GPU pool for ``model``: a P/D split or aggregated instances.

    ``model`` may be a whole question, a :class:`pdtp.Scenario` (the keywords given beside it
    replace its fields), and ``solver`` a :class:`pdtp.SolverConfig` (``time_limit_s``,
    ``method``, ``num_workers``). Keywords left None take the defaults below.

    The pool: ``gpus=24`` (full nodes of the GPU type's size, the last one partial),
    ``nodes=[8, 8, 5, 3]`` (free GPUs per node), or several GPU types,
    ``gpus={"mi355x": 16, "mi300x": 32}`` / ``nodes={"mi355x": [8, 8], ...}`` (prefill and
    decode may then use different types where the connector pairs them: MoRIIO between AMD
    GPUs, NIXL between NVIDIA GPUs). Every instance's TP group sits inside one node.

    ``objective="throughput"`` maximises served requests/s = min(prefill capacity, decode
    capacity) under the connector's rules, memory, the workload's SLOs and the pool; ties
    go to the cheaper plan (pools of several priced types), then fewer GPUs, then smaller
    TP sizes (P + D, then P), then the pool's type order. ``"tokens_per_dollar"`` maximises
    output tokens per USD (prices from the catalog or ``prices={"h100": 2.5}``), then
    throughput; ``"cost"`` serves ``demand_rps`` at the fewest USD per hour. CP-SAT decides
    (``method="enumerate"``: the exhaustive oracle); ``time_limit_s`` bounds the whole
    call. Raises :class:`pdtp.InfeasibleError` (with ``.reasons``) when nothing fits.

    ``mode``: ``"auto"`` (default) considers P/D splits and aggregated instances (one layout
    doing both phases, vLLM's chunked prefill, at the highest concurrency meeting both SLOs)
    and returns the better, with the other as ``plan.alternative``; ``"disagg"`` or ``"agg"``
    only one kind. ``layouts`` restricts each instance's layout: families ``"tp"``, ``"ep"`` (TP +
    expert parallel), ``"dp"`` (data-parallel attention, with or without expert parallel), ``"pp"``,
    ``"all"``, and/or explicit layouts (``"tp2dp4ep"``, :class:`pdtp.Layout`), as a list or a
    comma-separated string. The default: TP sizes; TP+EP and DP+EP for MoE models; PP only where no
    layout inside one node holds the weights.

    ``connector="sglang-mooncake"`` (``"sglang-nixl"``, ``"sglang-mori"``) plans SGLang's
    P/D at ``sglang_version`` (default: the newest SGLang release pdtp knows): only pairs that
    release accepts.

    ``slo_percentile=0.9`` plans on goodput: the SLOs must hold at p90 under Poisson
    arrivals, not on means. CP-SAT still searches on the analytic model; the best split of
    each of the best few (prefill, decode) pairs is then simulated
    (:func:`pdtp.max_rate_within_slo`) and the one with the highest simulated goodput wins
    (``objective="cost"``: the cheapest plan whose simulated goodput serves
    ``demand_rps``). The plan's ``slo_basis`` says ``"p90 simulated"`` and its
    ``requests_per_s`` is that goodput. ``time_limit_s`` then bounds each analytic search;
    the simulations (about 0.1 s per candidate) come on top. ``slo_percentile`` searches
    the same ``mode`` and ``layouts`` as the mean-based plan (the simulator models
    aggregated instances and every layout).

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> plan.status, plan.gpus_used <= 24
    ('OPTIMAL', True)
    """
    started = time.perf_counter()
    connector, vllm_version = engine_connector(
        connector, vllm_version=vllm_version, sglang_version=sglang_version
    )
    sc = scenario_of(
        model,
        gpus=gpus,
        nodes=nodes,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        workload=workload,
        connector=connector,
        vllm_version=vllm_version,
        objective=objective,
        demand_rps=demand_rps,
        prices=prices,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        slo_percentile=slo_percentile,
        mode=mode,
        layouts=layouts,
    )
    cfg = solver_of(solver, time_limit_s=time_limit_s, method=method, num_workers=num_workers)
    return solve_scenario(sc, cfg, started=started)


def solve_scenario(sc: Scenario, cfg: SolverConfig, *, started: float | None = None) -> Plan:
    """:func:`solve` of a validated :class:`pdtp.Scenario` (``started``: when the call began,
    which ``cfg.time_limit_s`` counts from)."""
    started = time.perf_counter() if started is None else started
    limit = cfg.time_limit_s
    objective = sc.objective_of("solve", "throughput")
    percentile = sc.slo_percentile
    demand = 0.0
    if objective == "cost":
        if sc.demand_rps is None:
            raise InvalidArgumentError(
                "objective='cost' serves a demand at the fewest USD per hour: pass demand_rps= "
                "(requests/s), or use objective='tokens_per_dollar'"
            )
        demand = sc.demand_rps
    elif sc.demand_rps is not None:
        raise InvalidArgumentError(
            f"demand_rps= goes with objective='cost' (or pdtp.size_for), not {objective!r}"
        )
    pool = sc.pool()
    if objective != "throughput":
        scenario.needs_prices(pool, objective)

    def plan_for(d: float) -> Plan:
        core = scenario.build_for(sc, pool, objective=objective, demand=d)
        at = started if d == demand else time.perf_counter()
        served = d if objective == "cost" else None
        goal = demand if objective == "cost" else None
        return _plan(
            core,
            at,
            limit,
            cfg.method,
            cfg.num_workers,
            served,
            percentile,
            sc.constants,
            goal,
        )

    if percentile is not None and objective == "cost":
        return goodput.meet_demand(plan_for, demand, percentile, "gpus")
    return plan_for(demand)


def _plan(
    sc: scenario.Scenario,
    started: float,
    limit: float,
    method: str,
    workers: int,
    demand: float | None,
    percentile: float | None = None,
    constants: Any = None,
    goal: float | None = None,
    budget_field: str = "gpus",
) -> Plan:
    """Candidates → decision → plan, shared by ``solve`` and ``size_for``. With a
    ``percentile`` the plan is verified by simulation (``goodput.py``), and so are the
    analytic best plans of the next few (prefill, decode) pairs: the highest goodput wins,
    or with a ``goal`` (req/s to serve at the percentile) the first that serves it
    (:class:`goodput.ShortOfDemand` when none does)."""
    cands = candidates(sc, started, limit)
    if not cands.pair_count:
        raise infeasible.no_pair(sc, cands, budget_field=budget_field)
    decision = decide(cands, started=started, limit=limit, method=method, workers=workers)
    if decision.solution is None or decision.solution[0] is None:
        if decision.status == "INFEASIBLE" and demand is not None:
            raise infeasible.demand_too_high(sc, cands, demand, budget_field)
        if decision.status == "INFEASIBLE":
            raise infeasible.no_pair(sc, cands, budget_field=budget_field)
        raise InfeasibleError(
            f"no plan found within time_limit_s={limit:g} (the search was cut short): raise "
            "time_limit_s"
        )
    notes: tuple[str, ...] = ()
    if decision.method == "enumerate" and method == "cpsat":
        notes = ("OR-Tools was still loading: the exhaustive oracle decided within the limit",)
    # Past the deadline the comparisons would only run over it: the note says they were cut.
    late = cands.out_of_time
    rejected = () if late else plan.rule_note(sc, cands, decision.solution, demand)
    if percentile is None:
        alternative = None if late else plan.alternative(sc, cands, decision.solution[0])
        if late or cands.out_of_time:
            notes = (*notes, CUT_NOTE)
        return plan.build(
            sc,
            cands,
            decision,
            0,
            started=started,
            rejected=rejected,
            notes=notes,
            alternative=alternative,
        )
    first = plan.build(sc, cands, decision, 0, started=started, rejected=rejected, notes=notes)
    ch = decision.solution[0]
    excluded = {(ch.prefill, ch.decode)}
    # Only CP-SAT can leave pairs out, and a ratio objective's search (tokens per dollar)
    # needs a starting plan of the pairs it keeps: those verify one candidate.
    alternatives = method == "cpsat" and sc.objective != "tokens_per_dollar"

    def next_plan() -> Plan | None:
        if not alternatives:
            return None
        again = decide(
            cands,
            started=time.perf_counter(),
            limit=limit,
            method=method,
            workers=workers,
            excluded=frozenset(excluded),
            # Without the pairs the Rust relaxation's bound comes from, only presolve
            # proves the best of the rest in time (measured: 0.6 s vs 10 s cut short).
            presolve=True,
        )
        if again.solution is None or again.solution[0] is None:
            return None
        c = again.solution[0]
        if (c.prefill, c.decode) in excluded:  # a time-limited search kept its hint
            return None
        excluded.add((c.prefill, c.decode))
        note = plan.rule_note(sc, cands, again.solution, demand)
        return plan.build(sc, cands, again, 0, started=started, rejected=note, notes=notes)

    if goal is None:
        return goodput.best_of(first, next_plan, percentile, constants)
    return goodput.first_serving(first, next_plan, goal, percentile, constants)
