"""``pdtp.solve_fleet``: share one GPU pool among many models, every instance's TP group
inside one node, maximising the minimum served fraction of demand (or a weighted total).

The objective is lexicographic (the Rust order's stages): ``max_min`` first raises the
smallest served fraction ``t`` among models with weight > 0; then the weighted total
Σ weight·fraction (fractions capped at 1); then the fewest GPUs.

The closed forms come first (``fleet_relax.py``): every model's frontier (fewest GPUs per
served fraction over its pairs and counts), and on it the relaxation without node packing
solved level by level — the largest t whose fewest-GPU points fit the pool, then the best
weighted total above it (an exact DP over GPU counts, or its linear relaxation on large
pools), then the fewest GPUs for that total. Those optima are valid bounds on every plan;
the relaxed optimum, when it packs into the nodes, meets them all and is the answer
(``method="closed-form", proof="closed-form"``). Otherwise it is the starting plan of the
same one CP-SAT model as ``solve`` (``cpsat.py``: node fill patterns, one pair per model
at most), which gets the bounds; the gap reported is that of the first level not proven.
Measured (``benchmarks/fleet_scale.py``): 200 models on 512 GPUs and 1,000 models on
25,600 GPUs are proven by the closed forms or end within a gap of 1e-5.

Fractions are decided in steps of 1/10000 and weights in steps of 1/1000 of the largest (a
positive weight counts at least one step). A demand beyond 10000 times what the whole pool
serves its model counts as exactly that much (below one step at any allocation otherwise), so
such a model still gets the pool.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from .._validate import positive_int, positive_number, public_api
from ..errors import ArgumentTypeError, InfeasibleError, InvalidArgumentError
from ..perf import DEFAULT_UTILIZATION
from ..scenario import takes_scenario
from ..workload import Workload
from . import infeasible, plan, scenario
from .cpsat import MARGIN_S, Decision, OutOfTime
from .decide import candidates, decide
from .plan import Plan

if TYPE_CHECKING:
    from .. import _core
    from .fleet_relax import Relaxed

__all__ = ["OBJECTIVES", "FleetPlan", "solve_fleet"]

OBJECTIVES = ("max_min", "weighted")
# Served fractions are decided in steps of 1/SCALE (0.01 %), weights in 1/WEIGHT_SCALE.
SCALE = 10_000
WEIGHT_SCALE = 1_000
# Work budget of the exact DP over the frontiers (frontier points x GPUs); above it the
# weighted total is bounded by its linear relaxation instead (``fleet_relax``). It also
# bounds the DP's memory: one model's table is at most this many int64 (64 MB).
MAX_DP_CELLS = 8_000_000
# Above this many pairs CP-SAT is not run after the closed forms (see ``_decide``).
MAX_SEARCH_PAIRS = 20_000


@dataclass(frozen=True)
class FleetPlan:
    """A shared pool's plan. ``plans`` maps each model name that got instances to its
    :class:`pdtp.Plan` (``gpus`` on each is the pool size); ``served_fraction`` maps every
    model name to ``min(1, served / demand)`` (1.0 for a demand of 0); ``placement`` has
    one entry per node: the instances on it as ``(model name, role, GPUs)`` — role
    ``"prefill"``, ``"decode"`` or ``"aggregated"``, GPUs the instance uses on that node
    (its TP size for a TP-only layout).
    ``status`` is ``OPTIMAL`` when proven, else ``FEASIBLE`` with ``gap`` the relative gap
    of the first objective level not proven — the smallest fraction, then the weighted
    total, then the GPUs (0.0 when optimal; None when no bound is known); ``method`` says
    who decided: ``cpsat`` when CP-SAT's search changed the starting plan, else
    ``closed-form`` (the relaxed optimum, or the plan kept when no search ran: OR-Tools
    not loaded in time, a model too large to search); ``proof`` who proved it optimal:
    ``closed-form`` (it meets every level's bound), ``cpsat``, or None."""

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
    proof: str | None = None
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
            "proof": self.proof,
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
    ubp: int  # instance counts worth trying (up to serving the demand)
    ubd: int
    most_p: int  # instance counts the pool allows
    most_d: int


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


# ---- closed-form sizing (bounds and the starting plan) --------------------------------------


def _largest_t(ok: Any, lo: int, hi: int) -> int:
    """Largest t in [lo, hi] with ok(t), assuming ok(lo) and ok monotone (bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


# The lexicographic levels the closed forms bound, in this order (any prefix of it that
# starts at one of them); an order of other terms is left to CP-SAT alone.
BOUNDED = ("min_fraction", "weighted_fraction", "gpus")


def _levels_of(stages: Any) -> list[tuple[str, str]]:
    """The Rust order's terms (``src/plan/order.rs``, the one definition of "best"), best
    first, as (name, sense): stages in order, a merged stage's terms by weight, each term's
    sense its coefficient's sign against the stage's."""
    out: list[tuple[str, str]] = []
    for st in stages:
        for name, coef in sorted(st.terms, key=lambda t: -abs(t[1])):
            out.append((name, "max" if (coef < 0) == (st.sense == "min") else "min"))
    return out


class _Bounds:
    """Valid bounds on every objective level from the closed forms (``fleet_relax``: the
    relaxation without node packing, exact per model), the starting plan, and whether it
    is proven: a relaxed optimum that packs meets every bound.

    ``levels`` holds, per level of the objective, (name, sense, the starting plan's value,
    the bound); the first level whose value misses its bound is where the gap is."""

    def __init__(
        self,
        entries: list[_Entry],
        caps: list[tuple[int, int]],
        pool: int,
        stages: Any,
        deadline: float,
        counted: Sequence[bool],
    ) -> None:
        import numpy as np

        from .fleet_relax import Frontiers

        self.np, self.entries, self.caps, self.pool, self.stages = np, entries, caps, pool, stages
        self.deadline = deadline
        self._check_time()
        opts = [[o[1:] for o in e.options] for e in entries]  # the fields after ``pair``
        self.fr = fr = Frontiers(opts, [e.units for e in entries], pool, SCALE, self._check_time)
        self._check_time()
        self.counted = np.array(
            [k for k, e in enumerate(entries) if counted[k] and e.units], dtype=np.int64
        )
        self.counted_set = set(self.counted.tolist())
        self.weights = [e.w for e in entries]
        self.order = _levels_of(stages)
        names = [name for name, _ in self.order]
        self.max_min = "min_fraction" in names
        first = BOUNDED.index(names[0]) if names and names[0] in BOUNDED else -1
        expected = [(n, "min" if n == "gpus" else "max") for n in BOUNDED[first:]]
        self.known = first >= 0 and self.order == expected and (first == 0) == self.max_min
        self.dp_cells = MAX_DP_CELLS
        self._relaxed: dict[int, Relaxed] = {}

        def fits(t: int) -> bool:
            self._check_time()
            return fr.fits(t, self.counted)

        def packs(t: int) -> bool:
            return fits(t) and self._packs(self._at(t))

        if self.max_min and len(self.counted):
            self.t_ub = _largest_t(fits, 0, SCALE)
            self.t_hint = self.t_ub if packs(self.t_ub) else _largest_t(packs, 0, self.t_ub)
        else:
            self.t_ub = self.t_hint = SCALE if self.max_min else 0
        # The starting plan: the relaxed optimum above t_hint when it packs, else every
        # counted model at its fewest GPUs for t_hint (which packs).
        self.start = self._at(self.t_hint)
        self.hint = fr.configs(self.start)
        try:
            rel = self.relaxed(self.t_hint)
            if rel.feasible and self._packs(rel.best):
                self.start = rel.best
                self.hint = fr.configs(self.start)
            self.levels = self._levels(self.start)
        except OutOfTime:  # no time for the relaxation: t's bound is all that is known
            values = self.values(self.start)
            self.levels = [
                (name, sense, values.get(name, 0), self.t_ub if name == "min_fraction" else None)
                for name, sense in self.order
            ]

    def _check_time(self) -> None:
        if time.perf_counter() > self.deadline - MARGIN_S:
            raise OutOfTime

    def _at(self, t: int) -> Any:
        """One point per model: the counted models' fewest GPUs for fraction t, the others
        nothing (or, with no demand, all of it)."""
        np, fr = self.np, self.fr
        lower = np.zeros(fr.models, dtype=np.int64)
        lower[self.counted] = t
        return fr.first_at(lower, np.arange(fr.models))

    def _packs(self, idx: Any) -> bool:
        return _packs(self.fr.sizes(idx), self.caps)

    def relaxed(self, lower_t: int) -> Relaxed:
        """The relaxation with every counted model at fraction ≥ lower_t (cached)."""
        if lower_t not in self._relaxed:
            self._check_time()
            lower = [0] * self.fr.models
            for k in self.counted.tolist():
                lower[k] = lower_t
            self._relaxed[lower_t] = self.fr.relaxed(lower, self.weights, self.dp_cells)
        return self._relaxed[lower_t]

    def values(self, idx: Any) -> dict[str, int]:
        """The objective's terms of one point per model."""
        fr = self.fr
        f = fr.f[idx]
        t = int(f[self.counted].min()) if len(self.counted) else SCALE
        total = sum(w * int(x) for w, x in zip(self.weights, f.tolist()))
        return {"min_fraction": t, "weighted_fraction": total, "gpus": int(fr.g[idx].sum())}

    def _levels(self, idx: Any) -> list[tuple[str, str, int, int | None]]:
        """(name, sense, value, bound) per level; bounds after the first level that is
        not met are not needed (and not computed)."""
        values = self.values(idx)
        out: list[tuple[str, str, int, int | None]] = []
        met = self.known  # an order of other terms: no bounds here
        for name, sense in self.order:
            bound: int | None = None
            if met:
                bound = self._level_bound(name, values)
            out.append((name, sense, values.get(name, 0), bound))
            met = met and bound == values[name]
        return out

    def _level_bound(self, name: str, proven: Mapping[str, int]) -> int | None:
        """A level's bound given that the levels before it hold their values in
        ``proven``."""
        if name == "min_fraction":
            return self.t_ub
        rel = self.relaxed(proven["min_fraction"] if self.max_min else 0)
        if not rel.feasible:
            return None
        if name == "weighted_fraction":
            return int(rel.total_ub)
        return rel.gpus_lb(proven["weighted_fraction"])

    @property
    def proven(self) -> bool:
        return self.known and all(v == b for _, _, v, b in self.levels)

    def gap_of(self, values: Mapping[str, int]) -> float | None:
        """The relative gap of the first level whose value misses its bound (0.0 when
        every level meets it; None when that level has no bound)."""
        if not self.known:
            return None
        for name, _ in self.order:
            b = self._level_bound(name, values)
            if b is None:
                return None
            if b != values[name]:
                return abs(b - values[name]) / max(1, abs(b))
        return 0.0

    def __call__(self, stage: int, fixed: list[int]) -> int | None:
        """A valid bound on one CP-SAT stage (a merged mix of levels), ``fixed`` the
        values of the stages before it."""
        try:
            return self._bound(stage, fixed)
        except OutOfTime:  # no time left for the bound: CP-SAT goes on without it
            return None

    def _bound(self, stage: int, fixed: list[int]) -> int | None:
        terms = dict(self.stages[stage].terms)
        if terms == {"min_fraction": 1}:
            return self.t_ub
        if not self.known or not set(terms) <= {"min_fraction", "weighted_fraction", "gpus"}:
            return None
        # The relaxation's lexicographic optimum: t_ub, then its best total with every
        # counted model at t_ub or more, then the fewest GPUs for that total. A merged
        # stage's value there bounds every plan's.
        if "min_fraction" in terms:
            lower_t = self.t_ub
        else:
            lower_t = fixed[0] if self.max_min and fixed else 0
        rel = self.relaxed(lower_t)
        if not rel.feasible:
            return None
        if terms == {"gpus": 1}:
            return rel.gpus_lb(fixed[-1]) if fixed else None  # the total held at fixed[-1]
        top = int(rel.total_ub)
        # Fewest GPUs: exact at the relaxed optimum; else at least the fewest for lower_t.
        gpus = rel.gpus_lb(top) if rel.exact else int(self.fr.g[rel.lo].sum())
        value = {"min_fraction": lower_t, "weighted_fraction": top, "gpus": gpus}
        if gpus is None:
            return None
        return int(sum(coef * value[name] for name, coef in terms.items()))


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
    # Each row's (GPUs, capacity units, most instances) read once: the core's getters cost
    # about a microsecond each, and 1,000 models have 75,000 rows and 66,000 pairs.
    # Past the limit already (the fixed start-up: demands and candidate rows): the plan
    # that serves nothing stands, without reading the rows.
    late = time.perf_counter() > deadline - MARGIN_S
    info = [] if late else [(r.gpus, r.units, r.most) for r in rows]
    by_model: dict[int, list[tuple[Any, int, int]]] = {}
    for pair in () if late else cands.pairs:
        by_model.setdefault(pair.model, []).append((pair, pair.prefill, pair.decode))
    entries: list[_Entry] = []
    for k, (_, _, d, wt, label) in enumerate(parsed):
        options: list[_Option] = []
        if k % 32 == 0 and not late:
            late = time.perf_counter() > deadline - MARGIN_S
        if late:  # out of time before the search: the plan that serves nothing stands
            entries.append(_Entry(label, d, demand_units[k], wt, weights[k], options))
            continue
        units = demand_units[k]
        for pair, pr, dr in by_model.get(k, ()):
            (pg, pu, pm), (dg, du, dm) = info[pr], info[dr]
            options.append(
                _Option(
                    pair,
                    pg,
                    0 if pr == dr else dg,
                    pu,
                    du,
                    max(1, min(_ceil_div(units, pu) if units else 1, pm)),
                    max(1, min(_ceil_div(units, du) if units else 1, dm)),
                    pm,
                    dm,
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
    cands: _core.Candidates,
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
            bounds = _Bounds(
                entries, caps, sc.pool.gpus, cands.stages, deadline, cands.fleet_terms[1]
            )
        except OutOfTime:
            return _nothing(len(entries))
        hint = _to_solution(entries, bounds.hint)
        if bounds.proven:
            # The relaxed optimum packs: it meets every level's bound, so no search can
            # beat it (what proved it: the closed-form bounds, not CP-SAT).
            return Decision(hint, "OPTIMAL", 0.0, None, "closed-form", "closed-form")
    # Without OR-Tools in time, or with a model too large to build in the time left, the
    # closed-form plan stands with its gap.
    fallback = _closed_form(hint, bounds) or _nothing(len(entries))
    if time.perf_counter() > deadline - MARGIN_S:
        return fallback
    if bounds is not None and len(cands.pairs) > MAX_SEARCH_PAIRS:
        # Measured: at 66,050 pairs (1,000 models) CP-SAT spends 10 s building and
        # searching without improving the closed-form plan (gap 2e-6); it would only
        # use up the limit. The closed-form plan stands with its gap.
        return fallback
    found = decide(
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
    if bounds is None or not bounds.known or found.solution is None or found.status == "OPTIMAL":
        return found
    # CP-SAT's gap is of a merged stage (levels folded into one integer): report the
    # first level's instead, against the closed-form bounds, for the better of the two.
    values = _values_of(bounds, entries, found.solution)
    if values is None:
        return found
    start = bounds.values(bounds.start)
    key = [(v if sense == "max" else -v) for (n, sense, _, _), v in
           zip(bounds.levels, (values[n] for n, _, _, _ in bounds.levels))]  # fmt: skip
    start_key = [(start[n] if sense == "max" else -start[n]) for n, sense, _, _ in bounds.levels]
    if start_key > key:
        return fallback
    try:
        gap = bounds.gap_of(values)
    except OutOfTime:
        gap = None
    # Without a level's bound, CP-SAT's own gap (of its merged stage) is what is known.
    return dataclasses.replace(found, gap=found.gap if gap is None else gap)


def _values_of(
    bounds: _Bounds, entries: list[_Entry], solution: list[Any]
) -> dict[str, int] | None:
    """The objective's terms of a CP-SAT solution (its choices as frontier values)."""
    t, total, gpus = SCALE, 0, 0
    for k, (e, ch) in enumerate(zip(entries, solution)):
        if e.units == 0:
            f = SCALE
        elif ch is None:
            f = 0
        else:
            o = next(
                (
                    o
                    for o in e.options
                    if (o.pair.prefill, o.pair.decode) == (ch.prefill, ch.decode)
                ),
                None,
            )
            if o is None:
                return None
            served = min(ch.prefill_instances * o.a, ch.decode_instances * o.b)
            f = min(SCALE, SCALE * served // e.units)
            gpus += o.p * ch.prefill_instances + o.d * ch.decode_instances
        if k in bounds.counted_set:
            t = min(t, f)
        total += e.w * f
    return {"min_fraction": t, "weighted_fraction": total, "gpus": gpus}


def _nothing(models: int) -> Decision:
    """The plan that serves nothing: always feasible, what is left when time runs out
    before any better plan is known."""
    return Decision([None] * models, "FEASIBLE", None, None, "closed-form")


def _closed_form(hint: list[Any] | None, bounds: _Bounds | None) -> Decision | None:
    """The closed-form plan as a decision: OPTIMAL only when it meets every bound."""
    if hint is None or bounds is None:
        return None
    gap: float | None = 0.0
    for _, _, v, b in bounds.levels:
        if b is None or b != v:
            gap = None if b is None else abs(b - v) / max(1, abs(b))
            break
    status = "OPTIMAL" if gap == 0.0 and bounds.known else "FEASIBLE"
    if status != "OPTIMAL" and gap == 0.0:
        gap = None
    return Decision(
        hint, status, gap, None, "closed-form", "closed-form" if status == "OPTIMAL" else None
    )


def _usage_of(cands: _core.Candidates, solution: list[Any]) -> list[tuple[int, int]] | None:
    """Pattern usage for a closed-form plan (its first-fit packing)."""
    try:
        return list(cands.usage(solution))
    except Exception:  # pragma: no cover - the core places every packable plan
        return None


def _nth(placed: Callable[[], list[list[plan.Placement]]], k: int) -> list[plan.Placement]:
    return placed()[k]


class _Plans(Mapping[str, Plan]):
    """A fleet's plans by model name, each built on first access (read-only)."""

    def __init__(self, chosen: dict[str, int], build: Callable[[int], Plan]) -> None:
        self._chosen, self._build = chosen, build
        self._built: dict[str, Plan] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Plan:
        with self._lock:
            if name not in self._built:
                self._built[name] = self._build(self._chosen[name])
            return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._chosen)

    def __len__(self) -> int:
        return len(self._chosen)

    def __contains__(self, name: object) -> bool:
        return name in self._chosen

    def __repr__(self) -> str:
        return f"{{{', '.join(f'{k!r}: {self[k]!r}' for k in self)}}}"


def _result(
    sc: scenario.Scenario,
    cands: _core.Candidates,
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

    served: dict[str, float] = {}
    demand: dict[str, float] = {}
    chosen: dict[str, int] = {}
    used = 0
    rows = cands.rows
    for k, (e, ch) in enumerate(zip(entries, sol)):
        demand[e.name] = e.demand
        if ch is None:
            served[e.name] = 1.0 if e.demand == 0 else 0.0
            continue
        # What plan.build computes, from the two rows: the plans themselves are built on
        # first use (1,000 of them take about 0.1 s, past the call's time limit).
        p, d = rows[ch.prefill], rows[ch.decode]
        np_, nd = ch.prefill_instances, ch.decode_instances
        rps = min(np_ * p.requests_per_s, nd * d.requests_per_s)
        served[e.name] = 1.0 if e.demand == 0 else min(1.0, rps / e.demand)
        used += p.gpus * np_ + (0 if ch.prefill == ch.decode else d.gpus * nd)
        chosen[e.name] = k
    solve_ms = (time.perf_counter() - started) * 1e3

    def build(k: int) -> Plan:
        p = plan.build(
            sc, cands, full, k, started=started, placer=functools.partial(_nth, placed, k),
            status=status, rows=rows,
        )  # fmt: skip
        return dataclasses.replace(p, solve_ms=solve_ms)

    plans = _Plans(chosen, build)

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
        plans=plans,
        served_fraction=MappingProxyType(served),
        demand_rps=MappingProxyType(demand),
        gpus=sc.pool.gpus,
        gpus_per_node=sc.pool.node_size[0],
        gpus_used=used,
        objective=objective,
        status=status,
        gap=decision.gap,
        solve_ms=solve_ms,
        method=decision.method,
        pool=sc.pool.describe(),
        proof=decision.proof if status == "OPTIMAL" else None,
        placer=by_node,
    )
