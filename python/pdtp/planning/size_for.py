"""``pdtp.size_for``: the fewest GPUs (or USD per hour) that serve a demand."""

from __future__ import annotations

import time
from typing import Any

from .._validate import positive_int, positive_number, public_api
from ..errors import InvalidArgumentError
from ..perf import DEFAULT_UTILIZATION
from . import goodput, scenario
from .decide import METHODS
from .plan import Plan
from .solve import _plan

OBJECTIVES = ("gpus", "cost")


@public_api
def size_for(
    model: Any,
    demand_rps: float,
    *,
    max_gpus: Any = None,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    connector: Any = None,
    vllm_version: str | None = None,
    objective: str = "gpus",
    prices: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    time_limit_s: float = 10.0,
    constants: Any = None,
    method: str = "cpsat",
    slo_percentile: float | None = None,
    mode: str = "auto",
    layouts: Any = None,
) -> Plan:
    """The plan with the fewest GPUs (``objective="cost"``: the fewest USD per hour) that
    serves ``demand_rps`` requests/s within the SLOs on the pool ``max_gpus`` (a count or a
    dict per GPU type) or ``nodes`` describes.

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
    demand = scenario.demand_value("demand_rps", demand_rps)
    percentile = goodput.percentile_value(slo_percentile)
    limit = positive_number("time_limit_s", time_limit_s)
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    pool = scenario.resolve_pool(
        max_gpus, nodes, gpu, gpus_per_node, prices, budget_field="max_gpus"
    )
    if objective == "cost":
        scenario.needs_prices(pool, objective)
    if percentile is not None:
        mode, layouts = goodput.simulated_space(mode, layouts)

    def plan_for(d: float) -> Plan:
        sc = scenario.build(
            [(model, workload, d, 1.0, None)],
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
        at = started if d == demand else time.perf_counter()
        workers = positive_int("num_workers", 1)
        goal = None if percentile is None else demand
        return _plan(
            sc, at, limit, method, workers, d, percentile, constants, goal, budget_field="max_gpus"
        )

    if percentile is None:
        return plan_for(demand)
    return goodput.meet_demand(plan_for, demand, percentile, "max_gpus")
