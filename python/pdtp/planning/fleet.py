"""``pdtp.solve_fleet``: share one GPU pool among many models, every instance's TP group
inside one node, maximising the minimum served fraction of demand (or a weighted total).

The objective is lexicographic (the Rust order's stages): ``max_min`` first raises the
smallest served fraction ``t`` among models with weight > 0; then the weighted total
Σ weight·fraction (fractions capped at 1); then the fewest GPUs. The same one CP-SAT model
as ``solve`` decides (``cpsat.py``: node fill patterns, one pair per model at most), from
a starting plan and with valid bounds computed here in closed form:

- the smallest fraction: the fewest GPUs each model needs for a fraction t (closed form
  per pair), summed, must fit the pool, which bounds t; the largest t whose sizing also
  packs into the nodes first-fit is the starting plan;
- the weighted total and the GPUs without placement are a multiple-choice knapsack over
  each model's frontier ("best fraction for g GPUs"), solved exactly by a dynamic
  programme over GPU counts: its optimum bounds the total, its fewest GPUs for that total
  bound the last stage.

Fractions are decided in steps of 1/10000 and weights in steps of 1/1000 of the largest (a
positive weight counts at least one step). A demand beyond 10000 times what the whole pool
serves its model counts as exactly that much (below one step at any allocation otherwise), so
such a model still gets the pool.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from .._validate import positive_int, positive_number, public_api
from ..errors import ArgumentTypeError, InfeasibleError, InvalidArgumentError
from ..perf import DEFAULT_UTILIZATION
from ..scenario import takes_scenario
from ..workload import Workload
from . import infeasible, plan, scenario
from .cpsat import MARGIN_S, Decision, OutOfTime
from .decide import candidates, decide
from .plan import Plan

__all__ = ["OBJECTIVES", "FleetPlan", "solve_fleet"]

OBJECTIVES = ("max_min", "weighted")
# Served fractions are decided in steps of 1/SCALE (0.01 %), weights in 1/WEIGHT_SCALE.
SCALE = 10_000
WEIGHT_SCALE = 1_000
# Work budgets of the frontiers (served levels) and of the DP over them (levels x GPUs).
MAX_LEVELS = 200_000
MAX_DP_CELLS = 30_000_000


@dataclass(frozen=True)
class FleetPlan:
    """A shared pool's plan. ``plans`` maps each model name that got instances to its
    :class:`pdtp.Plan` (``gpus`` on each is the pool size); ``served_fraction`` maps every
    model name to ``min(1, served / demand)`` (1.0 for a demand of 0); ``placement`` has
    one entry per node: the instances on it as ``(model name, role, GPUs)`` — role
    ``"prefill"``, ``"decode"`` or ``"aggregated"``, GPUs the instance uses on that node
    (its TP size for a TP-only layout).
    ``status`` is ``OPTIMAL`` when proven, else ``FEASIBLE`` with ``gap`` the relative gap
    of the first objective level not proven (0.0 when optimal; None when no bound is
    known); ``method`` says who decided: ``cpsat``, or ``closed-form`` when the closed-form
    plan was taken without a search (OR-Tools not loaded in time, or a model too large
    for the time left) — OPTIMAL then only when it meets every valid bound."""

    plans: Mapping[str, Plan]
    served_fraction: Mapping[str, float]
    demand_rps: Mapping[str, float]
    gpus: int
    gpus_per_node: int
    gpus_used: int
    objective: str
    status: str
    gap: float | None
    solve_ms: float
    method: str = "cpsat"
    pool: str = ""
    # The per-node placement, computed on first use (see ``placement``).
    placer: Callable[[], tuple[tuple[tuple[str, str, int], ...], ...]] | None = field(
        default=None, compare=False, repr=False
    )

    @functools.cached_property
    def placement(self) -> tuple[tuple[tuple[str, str, int], ...], ...]:
        """One entry per node of the pool: the instances on it as ``(model name, role,
        GPUs on that node)`` (GPUs = the TP size for TP-only layouts)."""
        return self.placer() if self.placer is not None else ()

    @property
    def min_served_fraction(self) -> float:
        return min(self.served_fraction.values(), default=1.0)

    @property
    def nodes_used(self) -> int:
        return sum(1 for node in self.placement if node)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "status": self.status,
            "gap": self.gap,
            "method": self.method,
            "pool": self.pool,
            "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "gpus_used": self.gpus_used,
            "nodes_used": self.nodes_used,
            "min_served_fraction": self.min_served_fraction,
            "served_fraction": dict(self.served_fraction),
            "demand_rps": dict(self.demand_rps),
            "plans": {name: plan.to_dict() for name, plan in self.plans.items()},
            "placement": [
                [{"model": m, "role": r, "tp": tp} for m, r, tp in node] for node in self.placement
            ],
            "solve_ms": self.solve_ms,
        }


# ---- inputs ---------------------------------------------------------------------------------


# A model's configuration: (option index, prefill instances, decode instances) or None.
_Config = tuple[int, int, int] | None


class _Option(NamedTuple):
    """One pair of a model in closed form. An aggregated row (paired with itself) is an
    option whose decode side takes no GPUs: ``d = 0``, ``b = a``, and both counts equal.
    A named tuple: 1,000 models have 60,000 of them, built before the search (a frozen
    dataclass took 0.4 s of a 0.05 s limit)."""

    pair: Any  # the core's Pair: model, prefill row, decode row
    p: int  # prefill instance size (GPUs)
    d: int
    a: int  # prefill capacity units per instance
    b: int  # decode capacity units per instance
    ubp: int
    ubd: int


@dataclass
class _Entry:
    name: str
    demand: float
    units: int  # demand in the model's capacity units (the core's)
    weight: float
    w: int  # integer weight (the core's)
    options: list[_Option]
    front: list[tuple[int, int, _Config]] | None = None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


_ENTRY_KEYS = ("model", "demand_rps", "workload", "weight", "name")


def _parse_demand(i: int, entry: Any) -> tuple[Any, Any, Any, Any, Any]:
    where = f"demands[{i}]"
    if isinstance(entry, Mapping):
        unknown = sorted(set(map(str, entry)) - set(_ENTRY_KEYS))
        if unknown:
            raise InvalidArgumentError(
                f"{where} has unknown field(s) {unknown}; allowed: {', '.join(_ENTRY_KEYS)}"
            )
        for k in ("model", "demand_rps"):
            if k not in entry:
                raise InvalidArgumentError(f"{where} is missing {k!r}")
        return (
            entry["model"],
            entry["demand_rps"],
            entry.get("workload"),
            entry.get("weight", 1.0),
            entry.get("name"),
        )
    if isinstance(entry, (tuple, list)):
        if not 2 <= len(entry) <= 4:
            raise InvalidArgumentError(
                f"{where} must be (model, demand_rps[, workload[, weight]]), got {len(entry)} items"
            )
        model, demand, *rest = entry
        workload = rest[0] if rest else None
        weight = rest[1] if len(rest) > 1 else 1.0
        return model, demand, workload, weight, None
    raise ArgumentTypeError(
        f"{where} must be a tuple (model, demand_rps, workload, weight) or a dict, got "
        f"{type(entry).__name__}"
    )


# ---- node patterns and packing --------------------------------------------------------------


def _packs(counts: Mapping[int, int], caps: Sequence[tuple[int, int]]) -> bool:
    """Whether ``counts[size]`` instances fit first fit, largest first, into the nodes
    ``caps`` (runs of ``(free GPUs, nodes)``). Worked on runs of identical nodes, so its
    cost does not grow with the pool; exact for sizes that divide each other (a hint only
    needs "fits", CP-SAT decides the rest)."""
    runs = [list(c) for c in caps]
    # An instance larger than any node spans whole nodes (data-parallel ranks or pipeline
    # stages across nodes): one node-sized piece per node it spans.
    top = max((free for free, n in caps if n), default=0)
    if top and any(s > top for s in counts):
        spread: dict[int, int] = {}
        for s, k in counts.items():
            if s > top and s % top == 0:
                spread[top] = spread.get(top, 0) + k * (s // top)
            else:
                spread[s] = spread.get(s, 0) + k
        counts = spread
    for s in sorted(counts, reverse=True):
        left = counts[s]
        nxt: list[list[int]] = []
        for free, n in runs:
            per = free // s
            if not left or not per:
                nxt.append([free, n])
                continue
            full = min(n, left // per)
            if full:
                nxt.append([free - per * s, full])
                left -= full * per
            rest = n - full
            if rest and left:
                nxt.append([free - left * s, 1])
                left = 0
                if rest > 1:
                    nxt.append([free, rest - 1])
            elif rest:
                nxt.append([free, rest])
        if left:
            return False
        runs = nxt
    return True


# ---- closed-form sizing (bound and hint) ----------------------------------------------------


def _config_for(e: _Entry, t: int) -> tuple[_Config, int]:
    """Fewest-GPU configuration serving fraction t/SCALE of e's demand, and its GPUs."""
    if t <= 0 or e.units == 0:
        return None, 0
    need = t * e.units
    best: tuple[Any, ...] | None = None
    for i, o in enumerate(e.options):
        np_, nd = _ceil_div(need, SCALE * o.a), _ceil_div(need, SCALE * o.b)
        g = o.p * np_ + o.d * nd
        key = (g, -min(np_ * o.a, nd * o.b), o.p + o.d, o.p, np_ + nd, i, np_, nd)
        if best is None or key < best:
            best = key
    assert best is not None
    return (best[5], best[6], best[7]), best[0]


def _fraction(e: _Entry, cfg: _Config) -> int:
    if e.units == 0:
        return SCALE
    if cfg is None:
        return 0
    i, np_, nd = cfg
    o = e.options[i]
    return min(SCALE, SCALE * min(np_ * o.a, nd * o.b) // e.units)


def _size_counts(entries: Sequence[_Entry], cfgs: Sequence[_Config]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for e, cfg in zip(entries, cfgs):
        if cfg is None:
            continue
        i, np_, nd = cfg
        o = e.options[i]
        counts[o.p] = counts.get(o.p, 0) + np_
        if o.d:  # an aggregated option's instances are counted once, above
            counts[o.d] = counts.get(o.d, 0) + nd
    return counts


def _largest_t(ok: Any, lo: int, hi: int) -> int:
    """Largest t in [lo, hi] with ok(t), assuming ok(lo) and ok monotone (bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _frontier(e: _Entry, gpus: int) -> list[tuple[int, int, _Config]]:
    """``(GPUs, fraction, configuration)`` breakpoints of model e: every served level of
    every pair, sized in closed form, kept when it beats every cheaper point (ties: smaller
    TP sizes, then fewer instances). Starts at (0, 0, None); cached on the entry."""
    if e.front is not None:
        return e.front
    if e.units == 0:
        e.front = [(0, SCALE, None)]
        return e.front
    pts: list[tuple[int, int, int, int, int, int, int, int]] = [(0, 0, 0, 0, 0, -1, 0, 0)]
    for i, o in enumerate(e.options):
        levels = {min(k * o.a, e.units) for k in range(1, o.ubp + 1)}
        levels |= {min(k * o.b, e.units) for k in range(1, o.ubd + 1)}
        for v in levels:
            np_, nd = _ceil_div(v, o.a), _ceil_div(v, o.b)
            g = o.p * np_ + o.d * nd
            if g <= gpus:
                f = min(SCALE, SCALE * min(np_ * o.a, nd * o.b) // e.units)
                pts.append((g, -f, o.p + o.d, o.p, np_ + nd, i, np_, nd))
    pts.sort()
    out: list[tuple[int, int, _Config]] = []
    for g, nf, _, _, _, i, np_, nd in pts:
        if not out or -nf > out[-1][1]:
            out.append((g, -nf, None if i < 0 else (i, np_, nd)))
    e.front = out
    return out


def _best_totals(
    entries: Sequence[_Entry], lower: Mapping[int, int], pool: int
) -> tuple[Any, list[tuple[list[tuple[int, int, _Config]], Any]]]:
    """Exact dynamic programme over GPUs for the placement-free relaxation: ``best[g]`` is
    the largest Σ weight·fraction with at most g GPUs (every model at fraction ≥ its
    ``lower``), with per-model choices to rebuild the configurations."""
    import numpy as np  # OR-Tools' own dependency; loaded only here

    neg = -(1 << 62)
    best = np.zeros(pool + 1, dtype=np.int64)
    steps = []
    for k, e in enumerate(entries):
        pts = [pt for pt in _frontier(e, pool) if pt[1] >= lower.get(k, 0)]
        new = np.full(pool + 1, neg, dtype=np.int64)
        arg = np.full(pool + 1, -1, dtype=np.int32)
        for j, (g, f, _) in enumerate(pts):
            cand = np.full(pool + 1, neg, dtype=np.int64)
            cand[g:] = best[: pool + 1 - g] + e.w * f
            better = cand > new
            new[better] = cand[better]
            arg[better] = j
        new[new < neg // 2] = neg
        best = new
        steps.append((pts, arg))
    return best, steps


def _rebuild(steps: list[tuple[list[tuple[int, int, _Config]], Any]], g: int) -> list[_Config]:
    cfgs: list[_Config] = []
    for pts, arg in reversed(steps):
        j = int(arg[g])
        pg, _, cfg = pts[j]
        cfgs.append(cfg)
        g -= pg
    cfgs.reverse()
    return cfgs


# ---- the solve ------------------------------------------------------------------------------


class _Bounds:
    """Valid bounds on the order's stages from the closed forms, and the starting plan."""

    def __init__(
        self,
        entries: list[_Entry],
        caps: list[tuple[int, int]],
        pool: int,
        stages: Any,
        deadline: float,
    ) -> None:
        self.entries, self.caps, self.pool, self.stages = entries, caps, pool, stages
        self.deadline = deadline
        weighted = [e for e in entries if e.weight > 0 and e.units]

        def fits(t: int) -> bool:
            if time.perf_counter() > deadline - MARGIN_S:
                raise OutOfTime
            return sum(_config_for(e, t)[1] for e in weighted) <= pool

        def packs(t: int) -> bool:
            cfgs = [_config_for(e, t)[0] if e.weight > 0 else None for e in entries]
            return fits(t) and _packs(_size_counts(entries, cfgs), caps)

        self.t_ub = _largest_t(fits, 0, SCALE)
        self.t_hint = self.t_ub if packs(self.t_ub) else _largest_t(packs, 0, self.t_ub)
        self.hint = [_config_for(e, self.t_hint)[0] if e.weight > 0 else None for e in entries]
        levels = sum(o.ubp + o.ubd for e in entries for o in e.options)
        self.dp = levels <= MAX_LEVELS and levels * pool <= MAX_DP_CELLS
        self._dp: tuple[int, Any, Any] | None = None

    def _totals(self, lower_t: int) -> tuple[Any, Any]:
        if time.perf_counter() > self.deadline - MARGIN_S:
            raise OutOfTime
        if self._dp is None or self._dp[0] != lower_t:
            lower = {k: lower_t if e.weight > 0 else 0 for k, e in enumerate(self.entries)}
            best, steps = _best_totals(self.entries, lower, self.pool)
            self._dp = (lower_t, best, steps)
        return self._dp[1], self._dp[2]

    def relaxed_best(self, lower_t: int) -> list[_Config] | None:
        """The DP's best configurations (weighted total, then fewest GPUs) when they pack."""
        if not self.dp:
            return None
        try:
            best, steps = self._totals(lower_t)
        except OutOfTime:
            return None
        top = int(best[self.pool])
        cfgs = _rebuild(steps, int((best >= top).argmax()))
        return cfgs if _packs(_size_counts(self.entries, cfgs), self.caps) else None

    def __call__(self, stage: int, fixed: list[int]) -> int | None:
        try:
            return self._bound(stage, fixed)
        except OutOfTime:  # no time left for the DP: CP-SAT goes on without this bound
            return None

    def _bound(self, stage: int, fixed: list[int]) -> int | None:
        terms = dict(self.stages[stage].terms)
        if terms == {"min_fraction": 1}:
            return self.t_ub
        if not self.dp or not set(terms) <= {"min_fraction", "weighted_fraction", "gpus"}:
            return None
        # The relaxation's lexicographic optimum: the largest t whose fewest GPUs fit, then
        # the DP's best total with every weighted model at t or more, then its fewest GPUs.
        # A merged stage's value there bounds every plan's.
        if "min_fraction" in terms:
            lower_t = self.t_ub
        else:
            lower_t = fixed[0] if "min_fraction" in dict(self.stages[0].terms) and fixed else 0
        best, _ = self._totals(lower_t)
        top = int(best[self.pool])  # the DP's totals include models with no demand
        if top < 0:
            return None
        if terms == {"gpus": 1}:
            # The total is held at fixed[-1]: the fewest GPUs reaching it.
            return int((best >= fixed[-1]).argmax()) if fixed and fixed[-1] <= top else None
        value = {
            "min_fraction": lower_t,
            "weighted_fraction": top,
            "gpus": int((best >= top).argmax()),
        }
        return sum(coef * value[name] for name, coef in terms.items())


@takes_scenario()
@public_api
def solve_fleet(
    demands: Sequence[Any],
    *,
    gpus: Any = None,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    objective: str = "max_min",
    time_limit_s: float = 10.0,
    connector: Any = None,
    vllm_version: str | None = None,
    workload: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
    num_workers: int = 1,
    mode: str = "auto",
    layouts: Any = None,
) -> FleetPlan:
    """Share a GPU pool (``gpus=N`` on nodes of ``gpus_per_node``, default the GPU type's,
    or ``nodes=[...]``, or several GPU types as in ``pdtp.solve``) among several models.

    ``demands`` lists ``(model, demand_rps, workload, weight)`` tuples (workload and weight
    optional: ``workload`` is the default, weight 1) or dicts with those keys and an
    optional ``name`` (needed when one model appears twice). ``objective="max_min"``
    maximises the smallest served fraction among models with weight > 0, then the
    weighted total, then uses fewer GPUs; ``"weighted"`` maximises Σ weight·min(1,
    served/demand), then uses fewer GPUs. Every instance's TP group sits inside one node.
    Models that get no instances have no entry in ``plans`` (their served fraction is 0).
    Fractions are decided in steps of 1/10000 and weights in steps of 1/1000 of the
    largest (a positive weight counts at least one). CP-SAT decides (one worker by default:
    deterministic); ``time_limit_s`` bounds the whole call (then ``status`` is ``FEASIBLE``
    with ``gap``). ``mode`` and ``layouts`` as in :func:`pdtp.solve`: each model gets a
    P/D split or aggregated instances, with the layouts of MoE models by default.

    >>> import pdtp
    >>> fp = pdtp.solve_fleet([("llama-3.1-8b", 20.0), ("llama-3.1-70b", 5.0)], gpus=16)
    >>> fp.status, fp.min_served_fraction
    ('OPTIMAL', 1.0)
    """
    started = time.perf_counter()
    limit = positive_number("time_limit_s", time_limit_s)
    deadline = started + limit
    workers = positive_int("num_workers", num_workers, maximum=64)
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    if isinstance(demands, (str, bytes, Mapping)) or not isinstance(demands, Sequence):
        raise ArgumentTypeError(
            "demands must be a list of (model, demand_rps, workload, weight) tuples or dicts, "
            f"got {type(demands).__name__}"
        )
    if not demands:
        raise InvalidArgumentError("demands must list at least one model")
    if len(demands) > 10_000:
        raise InvalidArgumentError(f"demands lists {len(demands)} models; at most 10000")
    pool = scenario.resolve_pool(gpus, nodes, gpu, gpus_per_node, None)
    from ..catalog import resolve_model

    parsed = []
    seen: set[str] = set()
    for i, raw in enumerate(demands):
        model, demand, wl, weight, name = _parse_demand(i, raw)
        d = scenario.demand_value(f"demands[{i}].demand_rps", demand)
        wt = scenario.weight_value(f"demands[{i}].weight", weight)
        if wl is not None and not isinstance(wl, (Workload, Mapping)):
            raise ArgumentTypeError(
                f"demands[{i}].workload must be a pdtp.Workload, a dict or None, got "
                f"{type(wl).__name__} {wl!r}"
            )
        m = resolve_model(model)
        label = m.name if name is None else name
        if not isinstance(label, str) or not label:
            raise InvalidArgumentError(f"demands[{i}].name must be a non-empty string")
        if label in seen:
            raise InvalidArgumentError(
                f"demands[{i}]: model {label!r} is listed twice; give each entry a distinct 'name'"
            )
        seen.add(label)
        parsed.append((m, wl if wl is not None else workload, d, wt, label))
    if max(p[3] for p in parsed) <= 0:
        raise InvalidArgumentError("at least one demands[].weight must be > 0")
    sc = scenario.build(
        parsed,
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
    cands = candidates(sc, started, limit)
    rows = cands.rows
    weights, _, demand_units, _ = cands.fleet_terms
    by_model: dict[int, list[Any]] = {}
    for pair in cands.pairs:
        by_model.setdefault(pair.model, []).append(pair)
    entries: list[_Entry] = []
    late = False
    for k, (_, _, d, wt, label) in enumerate(parsed):
        options: list[_Option] = []
        if k % 32 == 0 and not late:
            late = time.perf_counter() > deadline - MARGIN_S
        if late:  # out of time before the search: the plan that serves nothing stands
            entries.append(_Entry(label, d, demand_units[k], wt, weights[k], options))
            continue
        for pair in by_model.get(k, ()):
            a, b = rows[pair.prefill], rows[pair.decode]
            units = demand_units[k]
            options.append(
                _Option(
                    pair,
                    a.gpus,
                    0 if pair.prefill == pair.decode else b.gpus,
                    a.units,
                    b.units,
                    max(1, min(_ceil_div(units, a.units) if units else 1, a.most)),
                    max(1, min(_ceil_div(units, b.units) if units else 1, b.most)),
                )
            )
        if demand_units[k] and not options:
            err = infeasible.no_pair(sc, cands, model=k)
            raise InfeasibleError(f"{label}: {err}", [f"{label}: {r}" for r in err.reasons])
        entries.append(_Entry(label, d, demand_units[k], wt, weights[k], options))
    if late:
        return _result(sc, cands, entries, _nothing(len(entries)), objective, started)
    decision = _decide(sc, cands, entries, started, limit, deadline, workers)
    return _result(sc, cands, entries, decision, objective, started)


def _to_solution(entries: list[_Entry], cfgs: list[_Config]) -> list[Any]:
    from .. import _core

    sol: list[Any] = []
    for e, cfg in zip(entries, cfgs):
        if cfg is None:
            sol.append(None)
            continue
        i, np_, nd = cfg
        o = e.options[i]
        sol.append(_core.Choice(o.pair.prefill, o.pair.decode, np_, nd))
    return sol


def _decide(
    sc: scenario.Scenario,
    cands: Any,
    entries: list[_Entry],
    started: float,
    limit: float,
    deadline: float,
    workers: int,
) -> Decision:
    single = len(sc.pool.types) == 1 and _Bounds is not None
    bounds: _Bounds | None = None
    hint: list[Any] | None = None
    if single:
        caps = [(free, count) for _, free, count in sc.pool.runs()]
        try:
            bounds = _Bounds(entries, caps, sc.pool.gpus, cands.stages, deadline)
        except OutOfTime:
            return _nothing(len(entries))
        # The closed-form t, then the DP's best total above it (when it packs).
        max_min = "min_fraction" in dict(cands.stages[0].terms)
        start = bounds.relaxed_best(bounds.t_hint if max_min else 0) or bounds.hint
        hint = _to_solution(entries, start)
    # Without OR-Tools in time, or with a model too large to build in the time left, the
    # closed-form plan stands: OPTIMAL only when it meets every bound.
    fallback = _closed_form(cands, hint, bounds) or _nothing(len(entries))
    if time.perf_counter() > deadline - MARGIN_S:
        return fallback
    return decide(
        cands,
        started=started,
        limit=limit,
        method="cpsat",
        hint=hint,
        fallback=fallback,
        bound=bounds,
        presolve=False,
        workers=workers,
    )


def _nothing(models: int) -> Decision:
    """The plan that serves nothing: always feasible, what is left when time runs out
    before any better plan is known."""
    return Decision([None] * models, "FEASIBLE", None, None, "closed-form")


def _closed_form(cands: Any, hint: list[Any] | None, bounds: _Bounds | None) -> Decision | None:
    if hint is None or bounds is None:
        return None
    values = cands.values(hint)
    fixed: list[int] = []
    gap: float | None = 0.0
    for k in range(len(cands.stages)):
        b = bounds(k, fixed)
        v = values[k]
        if b is None or b != v:
            gap = None if b is None else abs(b - v) / max(1, abs(b))
            break
        fixed.append(v)
    status = "OPTIMAL" if gap == 0.0 else "FEASIBLE"
    return Decision(hint, status, gap, None, "closed-form")


def _usage_of(cands: Any, solution: list[Any]) -> list[tuple[int, int]] | None:
    """Pattern usage for a closed-form plan (its first-fit packing)."""
    try:
        return list(cands.usage(solution))
    except Exception:  # pragma: no cover - the core places every packable plan
        return None


def _nth(placed: Callable[[], list[list[plan.Placement]]], k: int) -> list[plan.Placement]:
    return placed()[k]


def _result(
    sc: scenario.Scenario,
    cands: Any,
    entries: list[_Entry],
    decision: Decision,
    objective: str,
    started: float,
) -> FleetPlan:
    sol = decision.solution or [None] * len(entries)
    status = decision.status if decision.status in ("OPTIMAL", "FEASIBLE") else "FEASIBLE"
    full = Decision(sol, status, decision.gap, decision.usage, decision.method)

    @functools.cache
    def placed() -> list[list[plan.Placement]]:
        usage = decision.usage if decision.usage is not None else _usage_of(cands, sol)
        return plan.placements(sc, cands, sol, usage)

    plans: dict[str, Plan] = {}
    served: dict[str, float] = {}
    demand: dict[str, float] = {}
    used = 0
    rows = cands.rows
    for k, (e, ch) in enumerate(zip(entries, sol)):
        demand[e.name] = e.demand
        if ch is None:
            served[e.name] = 1.0 if e.demand == 0 else 0.0
            continue
        p = plan.build(
            sc, cands, full, k, started=started, placer=functools.partial(_nth, placed, k),
            status=status, rows=rows,
        )  # fmt: skip
        plans[e.name] = p
        served[e.name] = 1.0 if e.demand == 0 else min(1.0, p.requests_per_s / e.demand)
        used += p.gpus_used

    def by_node() -> tuple[tuple[tuple[str, str, int], ...], ...]:
        nodes: dict[int, list[tuple[str, str, int]]] = {}
        for k, e in enumerate(entries):
            p = plans.get(e.name)
            if p is None:
                continue
            sides = dict(p.sides)
            for q in placed()[k]:
                # GPUs on each node it spans: its TP size for TP-only layouts (one node),
                # tp x dp for data-parallel ranks, one stage's share across PP nodes.
                share = sides[q.role].gpus_per_instance // max(1, len(q.nodes))
                for node in q.nodes:
                    nodes.setdefault(node, []).append((e.name, q.role, share))
        return tuple(tuple(nodes.get(n, ())) for n in range(sc.pool.node_count))

    return FleetPlan(
        plans=MappingProxyType(plans),
        served_fraction=MappingProxyType(served),
        demand_rps=MappingProxyType(demand),
        gpus=sc.pool.gpus,
        gpus_per_node=sc.pool.node_size[0],
        gpus_used=used,
        objective=objective,
        status=status,
        gap=decision.gap,
        solve_ms=(time.perf_counter() - started) * 1e3,
        method=decision.method,
        pool=sc.pool.describe(),
        placer=by_node,
    )
