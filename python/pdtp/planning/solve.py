"""``pdtp.solve``: the best valid P/D split of a GPU pool for one model — most requests/s
(``objective="throughput"``), most output tokens per dollar (``"tokens_per_dollar"``) or
the cheapest plan serving ``demand_rps`` (``"cost"``)."""

from __future__ import annotations

import time
from typing import Any

from .._validate import positive_int, positive_number
from ..errors import InfeasibleError, InvalidArgumentError
from ..perf import DEFAULT_UTILIZATION
from . import infeasible, plan, scenario
from .decide import METHODS, decide
from .plan import Plan

OBJECTIVES = ("throughput", "tokens_per_dollar", "cost")


def solve(
    model: Any,
    gpus: Any = None,
    *,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    connector: Any = "moriio",
    vllm_version: str | None = None,
    objective: str = "throughput",
    demand_rps: float | None = None,
    prices: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    time_limit_s: float = 10.0,
    constants: Any = None,
    method: str = "cpsat",
    num_workers: int = 1,
    mode: str = "auto",
    layouts: Any = None,
) -> Plan:
    """The best valid plan of a GPU pool for ``model``: a P/D split or aggregated instances.

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
    only one kind. ``layouts`` restricts each instance's layout: families ``"tp"``, ``"ep"``
    (TP + expert parallel), ``"dp"`` (data-parallel attention + expert parallel), ``"pp"``,
    ``"all"``, and/or explicit layouts (``"tp2dp4ep"``, :class:`pdtp.Layout`), as a list or a
    comma-separated string. The default: TP sizes; TP+EP and DP+EP for MoE models; PP only
    where no layout inside one node holds the weights.

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> plan.status, plan.gpus_used <= 24
    ('OPTIMAL', True)
    """
    started = time.perf_counter()
    limit = positive_number("time_limit_s", time_limit_s)
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    workers = positive_int("num_workers", num_workers, maximum=64)
    demand = 0.0
    if objective == "cost":
        if demand_rps is None:
            raise InvalidArgumentError(
                "objective='cost' serves a demand at the fewest USD per hour: pass demand_rps= "
                "(requests/s), or use objective='tokens_per_dollar'"
            )
        demand = scenario.demand_value("demand_rps", demand_rps)
    elif demand_rps is not None:
        raise InvalidArgumentError(
            f"demand_rps= goes with objective='cost' (or pdtp.size_for), not {objective!r}"
        )
    pool = scenario.resolve_pool(gpus, nodes, gpu, gpus_per_node, prices)
    if objective != "throughput":
        scenario.needs_prices(pool, objective)
    sc = scenario.build(
        [(model, workload, demand, 1.0, None)],
        pool,
        connector=connector,
        vllm_version=vllm_version,
        objective=objective,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        mode=mode,
        layouts=layouts,
    )
    return _plan(sc, started, limit, method, workers, demand if objective == "cost" else None)


def _plan(
    sc: scenario.Scenario,
    started: float,
    limit: float,
    method: str,
    workers: int,
    demand: float | None,
    budget_field: str = "gpus",
) -> Plan:
    """Candidates → decision → plan, shared by ``solve`` and ``size_for``."""
    from .. import _core

    cands = _core.candidates(sc.core)
    if not cands.pairs:
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
    rejected = plan.rule_note(sc, cands, decision.solution, demand)
    alternative = plan.alternative(sc, cands, decision.solution[0])
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
