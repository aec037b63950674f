"""Goodput-aware planning: plans whose SLOs hold at a percentile, not on means.

The analytic model plans on means (TTFT = a queueing factor x the prefill time, TPOT at the
mean decode batch); SLOs are percentiles under Poisson arrivals. With ``slo_percentile=p``
the planners keep the analytic CP-SAT search and verify what it finds with the simulator:
each candidate's *goodput* is the highest request rate at which the p-quantiles of TTFT and
TPOT both meet the workload's SLOs (``pdtp.max_rate_within_slo``, bisection over simulated
rates, judged on the steady state), and the plan is picked or corrected on that number.

- ``solve`` (throughput): the analytic best plan of each of the best few (prefill, decode)
  pairs or aggregated layouts — CP-SAT again with those already seen left out — ranked by
  simulated goodput. The search space is the mean-based planner's (``mode``, ``layouts``
  and their defaults): the simulator models aggregated and P/D serving in every layout.
- ``size_for``, ``replan`` and ``solve(objective="cost")``: the analytic planner at a
  demand raised by how far the simulated goodput fell short, until the simulated goodput
  serves the demand.

The plan says which was used: ``slo_basis`` is ``"mean"`` (the analytic plan, the default)
or e.g. ``"p90 simulated"``, ``requests_per_s`` is then the simulated goodput and
``analytic_requests_per_s`` the mean-based capacity of the same split.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import InfeasibleError, InvalidArgumentError
from ..scenario import percentile_value as percentile_value  # the field's one check
from .plan import Plan

#: Candidate splits ``solve`` verifies by simulation (the analytic best pair first).
CANDIDATES = 4
#: Requests per simulated trial of the rate search (the same requests at every rate).
VERIFY_REQUESTS = 10_000
#: The rate search's relative tolerance.
VERIFY_TOLERANCE = 0.02
#: Re-plans at a raised demand before ``size_for`` / ``replan`` give up.
MAX_ROUNDS = 6
#: Each re-plan asks for this much more than the shortfall alone (bisection's tolerance).
RAISE_MARGIN = 1.03

T = TypeVar("T")


def basis(percentile: float) -> str:
    """``"p90 simulated"`` for 0.9 (``"p99.9 simulated"`` for 0.999)."""
    return f"p{100 * percentile:.10g} simulated"


def _needs_slo(plan: Plan) -> None:
    if plan.workload.ttft_ms is None and plan.workload.tpot_ms is None:
        raise InvalidArgumentError(
            "slo_percentile needs an SLO to meet: the workload has neither ttft_ms nor tpot_ms"
        )


def goodput(plan: Plan, percentile: float, constants: Any = None) -> float:
    """The plan's simulated goodput: the highest request rate (req/s) at which the
    ``percentile`` quantiles of TTFT and TPOT both meet its workload's SLOs (0 when not
    even a trickle does)."""
    from ..simulate import max_rate_within_slo

    _needs_slo(plan)
    hint = plan.requests_per_s if math.isfinite(plan.requests_per_s) else None
    s = max_rate_within_slo(
        plan,
        percentile=percentile,
        requests=VERIFY_REQUESTS,
        tolerance=VERIFY_TOLERANCE,
        hint_rps=hint if hint and hint > 0 else None,
        constants=constants,
    )
    return s.rate_rps if s.result is not None else 0.0


def verified(plan: Plan, percentile: float, rate: float) -> Plan:
    """``plan`` on the simulated basis: served rate = its goodput at ``percentile``."""
    return dataclasses.replace(
        plan,
        requests_per_s=rate,
        output_tokens_per_s=rate * plan.workload.osl,
        slo_basis=basis(percentile),
        slo_percentile=percentile,
        analytic_requests_per_s=plan.requests_per_s,
    )


def best_of(
    first: Plan,
    next_plan: Callable[[], Plan | None],
    percentile: float,
    constants: Any = None,
    candidates: int = CANDIDATES,
) -> Plan:
    """The candidate with the highest simulated goodput: ``first`` (the analytic best) and
    up to ``candidates - 1`` more from ``next_plan()`` (the analytic best of a split not yet
    seen, None when there is none). A later candidate wins only by more than the rate
    search's tolerance (simulation noise does not reorder near-ties). A candidate whose
    analytic capacity is below the best goodput found by more than that is not simulated:
    queues grow without bound past a split's capacity."""
    best, best_rate = first, goodput(first, percentile, constants)
    for _ in range(candidates - 1):
        nxt = next_plan()
        if nxt is None:
            break
        if nxt.requests_per_s * (1 + VERIFY_TOLERANCE) < best_rate:
            continue
        rate = goodput(nxt, percentile, constants)
        if rate > best_rate * (1 + VERIFY_TOLERANCE):
            best, best_rate = nxt, rate
    return verified(best, percentile, best_rate)


class ShortOfDemand(Exception):
    """No candidate's simulated goodput serves the demand: the best ``rate`` reached, by a
    plan of analytic capacity ``analytic`` (what to raise the planner's demand past)."""

    def __init__(self, rate: float, analytic: float):
        super().__init__(f"simulated goodput {rate:g} req/s")
        self.rate, self.analytic = rate, analytic


def first_serving(
    first: Plan,
    next_plan: Callable[[], Plan | None],
    demand: float,
    percentile: float,
    constants: Any = None,
    candidates: int = CANDIDATES,
) -> Plan:
    """In the planner's order (fewest GPUs / USD first), the first candidate whose simulated
    goodput serves ``demand``: ``first`` and up to ``candidates - 1`` more from
    ``next_plan()``. Raises :class:`ShortOfDemand` when none does."""
    rate = goodput(first, percentile, constants)
    if rate >= demand * (1 - 1e-9):
        return verified(first, percentile, rate)
    short = ShortOfDemand(rate, first.requests_per_s)
    for _ in range(candidates - 1):
        nxt = next_plan()
        if nxt is None:
            break
        rate = goodput(nxt, percentile, constants)
        if rate >= demand * (1 - 1e-9):
            return verified(nxt, percentile, rate)
        if rate > short.rate:
            short = ShortOfDemand(rate, nxt.requests_per_s)
    raise short


def meet_demand(
    plan_for: Callable[[float], T],
    demand: float,
    percentile: float,
    budget_field: str = "max_gpus",
) -> T:
    """``plan_for(target)``: the planner's answer for the analytic demand ``target``, on the
    simulated basis, or :class:`ShortOfDemand` when its simulated goodput does not serve
    ``demand``. Starts at ``target = demand`` and raises it by the shortfall (demand /
    goodput, times :data:`RAISE_MARGIN`; at least past the short plan's capacity) until an
    answer serves the demand."""
    target = demand
    last = 0.0
    for _ in range(MAX_ROUNDS):
        try:
            return plan_for(target)
        except ShortOfDemand as s:
            last = max(last, s.rate)
            short = demand / s.rate if s.rate > 0 else 2.0
            target = max(target * short, s.analytic) * RAISE_MARGIN
        except InfeasibleError as e:
            if target == demand:
                raise
            raise InfeasibleError(
                f"no plan on this pool serves {demand:g} req/s with the SLOs met at "
                f"p{100 * percentile:g} (simulated): the best tried reached {last:.3g} "
                f"req/s, and the analytic planner finds none for {target:.3g} req/s; raise "
                f"{budget_field} or relax the SLOs (slo_percentile=None plans on means)",
                reasons=e.reasons,
            ) from None
    raise InfeasibleError(
        f"no plan found serving {demand:g} req/s with the SLOs met at p{100 * percentile:g} "
        f"(simulated) in {MAX_ROUNDS} re-plans: the best reached {last:.3g} req/s; relax the "
        "SLOs or plan on means (slo_percentile=None)"
    )
