"""``pdtp.size_for``: the fewest GPUs (or USD per hour) that serve a demand."""

from __future__ import annotations

import time
from typing import Any

from .._validate import public_api
from ..errors import InvalidArgumentError
from ..scenario import OBJECTIVES as _OBJECTIVES
from ..scenario import Scenario, SolverConfig, scenario_of, solver_of
from . import goodput, scenario
from .plan import Plan
from .solve import _plan

OBJECTIVES = _OBJECTIVES["size_for"]


@public_api
def size_for(
    model: Any,
    demand_rps: float | None = None,
    *,
    max_gpus: Any = None,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    connector: Any = None,
    vllm_version: str | None = None,
    objective: str | None = None,
    prices: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float | None = None,
    time_limit_s: float | None = None,
    constants: Any = None,
    method: str | None = None,
    slo_percentile: float | None = None,
    mode: str | None = None,
    layouts: Any = None,
    solver: SolverConfig | None = None,
) -> Plan:
    """The plan with the fewest GPUs (``objective="cost"``: the fewest USD per hour) that
    serves ``demand_rps`` requests/s within the SLOs on the pool ``max_gpus`` (a count or a
    dict per GPU type) or ``nodes`` describes.

    ``model`` may be a :class:`pdtp.Scenario` (its ``gpus`` is ``max_gpus``; the keywords
    given beside it replace its fields), ``solver`` a :class:`pdtp.SolverConfig`.

    Ties go to the most headroom (served − demand), then ``solve``'s order (smaller TP
    sizes: P + D, then P; then fewer instances). CP-SAT decides over the same model as
    ``solve``. Raises :class:`pdtp.InfeasibleError` (with ``.reasons``) when the pool cannot
    serve the demand. A demand of 0 gives the smallest valid deployment (one instance each).
    ``mode`` and ``layouts`` as in :func:`pdtp.solve` (aggregated instances and the layouts
    of MoE models are considered by default).

    ``slo_percentile=0.9``: the demand must be served with the SLOs met at p90 under
    Poisson arrivals (simulated, :func:`pdtp.max_rate_within_slo`), not on means. The
    analytic plans of the best few (prefill, decode) pairs are verified by simulation in
    the planner's order and the first whose simulated goodput serves the demand wins; when
    none does, they are re-planned for a demand raised by the shortfall. The plan's
    ``slo_basis`` says ``"p90 simulated"`` and its ``requests_per_s`` is that goodput.

    >>> import pdtp
    >>> plan = pdtp.size_for("llama-3.1-70b", 10.0, max_gpus=64, gpu="mi300x")
    >>> plan.requests_per_s >= 10.0, plan.status
    (True, 'OPTIMAL')
    """
    started = time.perf_counter()
    sc = scenario_of(
        model,
        budget_field="max_gpus",
        demand_rps=demand_rps,
        gpus=max_gpus,
        nodes=nodes,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        workload=workload,
        connector=connector,
        vllm_version=vllm_version,
        objective=objective,
        prices=prices,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        slo_percentile=slo_percentile,
        mode=mode,
        layouts=layouts,
    )
    cfg = solver_of(solver, time_limit_s=time_limit_s, method=method)
    return size_for_scenario(sc, cfg, started=started)


def size_for_scenario(sc: Scenario, cfg: SolverConfig, *, started: float | None = None) -> Plan:
    """:func:`size_for` of a validated :class:`pdtp.Scenario` (its ``gpus`` is the pool
    ``max_gpus`` describes; one CP-SAT worker: the answer is deterministic)."""
    started = time.perf_counter() if started is None else started
    if sc.demand_rps is None:
        raise InvalidArgumentError("size_for needs demand_rps= (requests/s to serve)")
    demand = sc.demand_rps
    percentile = sc.slo_percentile
    limit = cfg.time_limit_s
    objective = sc.objective_of("size_for", "gpus")
    pool = sc.pool(budget_field="max_gpus")
    if objective == "cost":
        scenario.needs_prices(pool, objective)

    def plan_for(d: float) -> Plan:
        core = scenario.build_for(sc, pool, objective=objective, demand=d)
        at = started if d == demand else time.perf_counter()
        goal = None if percentile is None else demand
        return _plan(
            core,
            at,
            limit,
            cfg.method,
            1,
            d,
            percentile,
            sc.constants,
            goal,
            budget_field="max_gpus",
        )

    if percentile is None:
        return plan_for(demand)
    return goodput.meet_demand(plan_for, demand, percentile, "max_gpus")
