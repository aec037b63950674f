"""``pdtp.solve_fleet``: share one GPU pool among many models, every instance's TP group
inside one node, maximising the minimum served fraction of demand (or a weighted total).

The objective is lexicographic, one level at a time:

1. ``max_min`` only: the smallest served fraction ``t`` among models with weight > 0;
2. the weighted total Σ weight·fraction (fractions capped at 1), with level 1 held;
3. the fewest GPUs, with levels 1 and 2 held.

The CP-SAT model (one model over all models, built only when a level needs a search):

- per model m and per usable valid pair i (from its candidate table): a Boolean ``x[m,i]``
  (at most one pair per model) and instance counts ``np[m,i]``, ``nd[m,i]`` that are 0
  unless ``x[m,i]`` and at least 1 when it is;
- the served fraction ``f[m]`` in 1/SCALE steps: ``f[m]·D_m ≤ SCALE·Σ A_i·np[m,i]`` and the
  same with decode capacities (capacities and demands in the core's integer units);
- placement as a cutting-stock model: the node *patterns* (maximal multisets of TP sizes
  that fit one node) are enumerated once, ``y[k]`` counts the nodes that use pattern k, and
  for every TP size s the pattern slots cover the instances of size s. This is exact (any
  node's contents fit inside some maximal pattern), has no symmetry between identical
  nodes, and grows with the number of patterns, not of nodes;
- valid cuts that keep the LP relaxation tight: per model, the fraction lies under the
  concave envelope of its "best fraction for g GPUs" frontier, and a fraction held by an
  earlier level needs at least the GPUs its closed-form sizing says.

Bounds and starting solutions come from closed forms, and prove most instances outright:

- level 1: the fewest GPUs each model needs for a fraction t (closed form per pair),
  summed, must fit the pool, which bounds t; the largest t whose sizing also packs into
  the nodes first-fit is the starting solution;
- levels 2 and 3 without placement are a multiple-choice knapsack over each model's
  frontier, solved exactly by a dynamic programme over GPU counts: its optimum bounds the
  weighted total and its fewest GPUs for a total bound level 3; its solution starts both.

A level whose starting solution meets its bound is proven without search (always when the
TP sizes divide each other and the node size, as 1, 2, 4, 8 on 8-GPU nodes do); otherwise
CP-SAT (one worker, fixed seed: deterministic) searches from it within the time left.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from ._validate import positive_int, positive_number
from .errors import InfeasibleError, InvalidArgumentError
from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION
from .planner import MAX_GPUS, Plan
from .sizing import CandidateTable, candidate_table, demand_value
from .workload import Workload

__all__ = ["FleetPlan", "OBJECTIVES", "solve_fleet"]

OBJECTIVES = ("max_min", "weighted")
# Served fractions are decided in steps of 1/SCALE (0.01 %).
SCALE = 10_000
# Weights are compared in steps of 1/WEIGHT_SCALE of the largest weight.
WEIGHT_SCALE = 1_000
# Capacity units of the core (micro-requests/s).
UNITS = 1_000_000
# Seconds kept back from the time limit for building results.
MARGIN_S = 0.02
# Work budgets of the frontiers (served levels) and of the DP over them (levels x GPUs).
MAX_LEVELS = 200_000
MAX_DP_CELLS = 30_000_000
# Seconds OR-Tools takes to import (about; a search is not started without them).
IMPORT_S = 0.6
# Tests set this to make every level search with CP-SAT even when closed-form bounds
# already prove the greedy / DP solution (a cross-check of the two routes).
_ALWAYS_SEARCH = False


# ---- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetPlan:
    """A shared pool's plan. ``plans`` maps each model name that got instances to its
    :class:`pdtp.Plan` (``gpus`` on each is the pool size); ``served_fraction`` maps every
    model name to ``min(1, served / demand)`` (1.0 for a demand of 0); ``placement`` has
    one entry per node: the instances on it as ``(model name, "prefill"|"decode", tp)``.
    ``status`` is ``OPTIMAL`` when proven, else ``FEASIBLE`` with ``gap`` the relative gap
    of the first objective level not proven (0.0 when optimal)."""

    plans: Mapping[str, Plan]
    served_fraction: Mapping[str, float]
    demand_rps: Mapping[str, float]
    placement: tuple[tuple[tuple[str, str, int], ...], ...]
    gpus: int
    gpus_per_node: int
    gpus_used: int
    objective: str
    status: str
    gap: float
    solve_ms: float

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


@dataclass(frozen=True)
class _Option:
    p: int
    d: int
    a: int  # prefill units per instance
    b: int  # decode units per instance
    ubp: int
    ubd: int


@dataclass
class _Entry:
    name: str
    table: CandidateTable
    demand: float
    units: int  # demand in core units (ceil)
    weight: float
    w: int  # integer weight
    options: list[_Option]
    front: list[tuple[int, int, _Config]] | None = None


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
    raise TypeError(
        f"{where} must be a tuple (model, demand_rps, workload, weight) or a dict, got "
        f"{type(entry).__name__}"
    )


def _weight(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where} must be a number >= 0, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise InvalidArgumentError(f"{where} must be a finite number >= 0, got {value!r}")
    return v


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---- node patterns and packing --------------------------------------------------------------


def _patterns(sizes: Sequence[int], cap: int) -> list[dict[int, int]]:
    """Every maximal multiset of ``sizes`` (each ≤ cap) whose sum is ≤ cap."""
    fit = sorted((s for s in set(sizes) if s <= cap), reverse=True)
    out: list[dict[int, int]] = []

    def rec(i: int, left: int, cur: dict[int, int]) -> None:
        if i == len(fit):
            if all(s > left for s in fit):  # maximal: nothing else fits
                out.append(dict(cur))
            return
        s = fit[i]
        for k in range(left // s, -1, -1):
            if k:
                cur[s] = k
            rec(i + 1, left - k * s, cur)
            cur.pop(s, None)

    rec(0, cap, {})
    return out


def _pack(counts: Mapping[int, int], caps: Sequence[int]) -> list[dict[int, int]] | None:
    """First-fit decreasing of ``counts[size]`` instances into nodes of ``caps``; the
    per-node size counts, or None when they do not fit."""
    free = list(caps)
    nodes: list[dict[int, int]] = [{} for _ in caps]
    for s in sorted(counts, reverse=True):
        left = counts[s]
        for n, room in enumerate(free):
            if not left:
                break
            k = min(left, room // s)
            if k:
                nodes[n][s] = nodes[n].get(s, 0) + k
                free[n] -= k * s
                left -= k
        if left:
            return None
    return nodes


# ---- closed-form sizing (bound and hint) ----------------------------------------------------

# A model's configuration: (option index, prefill instances, decode instances) or None.
_Config = tuple[int, int, int] | None


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


def _envelope(points: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Segments of the upper concave envelope of increasing (g, f) points."""
    hull: list[tuple[int, int]] = []
    for p in points:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # drop hull[-1] when it lies on or under the chord hull[-2] -> p
            if (y2 - y1) * (p[0] - x1) <= (p[1] - y1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append(p)
    return list(itertools.pairwise(hull))


# ---- the CP-SAT model ------------------------------------------------------------------------


@dataclass
class _Solution:
    configs: list[_Config]
    layout: list[dict[int, int]] | None
    status: str
    gap: float
    value: int


class _FleetModel:
    """The CP-SAT model of a fleet (built on first use: OR-Tools is imported lazily)."""

    def __init__(
        self,
        entries: Sequence[_Entry],
        caps: Sequence[int],
        pool: int,
        deadline: float,
        workers: int,
    ) -> None:
        self.entries = list(entries)
        self.caps = list(caps)
        self.pool = pool
        self.deadline = deadline
        self.workers = workers
        self.model: Any = None
        self.required: dict[int, int] = {}
        self.applied: dict[int, int] = {}
        # The frontiers (and the DP over them) cost time in proportion to the served levels
        # and the pool: used up to a budget that keeps them to tens of milliseconds.
        levels = sum(o.ubp + o.ubd for e in self.entries for o in e.options)
        self.frontiers = levels <= MAX_LEVELS and levels * pool <= MAX_DP_CELLS

    # -- building --

    def _build(self) -> None:
        from ortools.sat.python import cp_model  # lazy: OR-Tools costs ~0.5 s to import

        self.cp = cp_model
        m = cp_model.CpModel()
        self.vars: dict[int, list[tuple[Any, Any, Any]]] = {}
        self.f: dict[int, Any] = {}
        self.g: dict[int, Any] = {}
        size_terms: dict[int, list[tuple[Any, int]]] = {}
        for k, e in enumerate(self.entries):
            if e.units == 0:
                continue
            triples = []
            for i, o in enumerate(e.options):
                x = m.new_bool_var(f"x{k}_{i}")
                n_p = m.new_int_var(0, o.ubp, f"np{k}_{i}")
                n_d = m.new_int_var(0, o.ubd, f"nd{k}_{i}")
                m.add(n_p >= x)
                m.add(n_d >= x)
                m.add(n_p <= o.ubp * x)
                m.add(n_d <= o.ubd * x)
                triples.append((x, n_p, n_d))
                size_terms.setdefault(o.p, []).append((n_p, 1))
                size_terms.setdefault(o.d, []).append((n_d, 1))
            m.add_at_most_one(t[0] for t in triples)
            f = m.new_int_var(0, SCALE, f"f{k}")
            nps = [t[1] for t in triples]
            nds = [t[2] for t in triples]
            m.add(
                f * e.units
                <= cp_model.LinearExpr.weighted_sum(nps, [SCALE * o.a for o in e.options])
            )
            m.add(
                f * e.units
                <= cp_model.LinearExpr.weighted_sum(nds, [SCALE * o.b for o in e.options])
            )
            g = cp_model.LinearExpr.weighted_sum(
                nps + nds, [o.p for o in e.options] + [o.d for o in e.options]
            )
            # Valid cut: the fraction lies under the concave envelope of the model's
            # "best fraction for g GPUs" frontier (keeps the LP relaxation tight).
            points = [(pg, pf) for pg, pf, _ in _frontier(e, self.pool)] if self.frontiers else []
            for (g1, f1), (g2, f2) in _envelope(points):
                m.add((g2 - g1) * f - (f2 - f1) * g <= f1 * (g2 - g1) - (f2 - f1) * g1)
            self.vars[k] = triples
            self.f[k] = f
            self.g[k] = g
        self.sizes = sorted(size_terms)
        count = {s: cp_model.LinearExpr.sum([v for v, _ in size_terms[s]]) for s in self.sizes}
        self.used = cp_model.LinearExpr.sum(list(self.g.values()))
        m.add(self.used <= self.pool)
        # Placement: node patterns (maximal multisets of TP sizes per node) cover the
        # instances of every size.
        self.patterns: list[tuple[int, dict[int, int], Any]] = []
        cover: dict[int, list[tuple[Any, int]]] = {s: [] for s in self.sizes}
        for cap in sorted(set(self.caps), reverse=True):
            nodes = self.caps.count(cap)
            ys = []
            for j, pat in enumerate(_patterns(self.sizes, cap)):
                y = m.new_int_var(0, nodes, f"y{cap}_{j}")
                ys.append(y)
                self.patterns.append((cap, pat, y))
                for s, mult in pat.items():
                    cover[s].append((y, mult))
            if ys:
                m.add(cp_model.LinearExpr.sum(ys) <= nodes)
        for s in self.sizes:
            if not cover[s]:
                m.add(count[s] == 0)
                continue
            m.add(
                cp_model.LinearExpr.weighted_sum([y for y, _ in cover[s]], [c for _, c in cover[s]])
                >= count[s]
            )
        self.model = m

    # -- hints and solutions --

    def _hint(self, cfgs: Sequence[_Config], layout: list[dict[int, int]] | None) -> None:
        m = self.model
        m.clear_hints()
        for k, triples in self.vars.items():
            e, cfg = self.entries[k], cfgs[k]
            for i, (x, n_p, n_d) in enumerate(triples):
                on = cfg is not None and cfg[0] == i
                m.add_hint(x, on)
                m.add_hint(n_p, cfg[1] if on and cfg else 0)
                m.add_hint(n_d, cfg[2] if on and cfg else 0)
            m.add_hint(self.f[k], _fraction(e, cfg))
        nodes = _pack(_size_counts(self.entries, cfgs), self.caps) or layout or []
        use: dict[int, int] = {}
        for cap, node in zip(self.caps, nodes):
            if not node:
                continue
            j = next(
                j
                for j, (c, pat, _) in enumerate(self.patterns)
                if c == cap and all(pat.get(s, 0) >= n for s, n in node.items())
            )
            use[j] = use.get(j, 0) + 1
        for j, (_, _, y) in enumerate(self.patterns):
            m.add_hint(y, use.get(j, 0))

    def _extract(self, solver: Any) -> tuple[list[_Config], list[dict[int, int]]]:
        cfgs: list[_Config] = [None] * len(self.entries)
        for k, triples in self.vars.items():
            for i, (x, n_p, n_d) in enumerate(triples):
                if solver.boolean_value(x):
                    cfgs[k] = (i, solver.value(n_p), solver.value(n_d))
        # One entry per node, in the order of ``caps`` (full nodes, then a partial one).
        layout: list[dict[int, int]] = []
        for cap in dict.fromkeys(self.caps):
            nodes = [
                dict(pat) for c, pat, y in self.patterns if c == cap for _ in range(solver.value(y))
            ]
            layout.extend(nodes + [{}] * (self.caps.count(cap) - len(nodes)))
        return cfgs, layout

    def _run(self, time_left: float) -> tuple[Any, Any]:
        solver = self.cp.CpSolver()
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = 0
        solver.parameters.max_time_in_seconds = time_left
        return solver, solver.solve(self.model)

    def _time_left(self) -> float:
        return self.deadline - time.perf_counter() - MARGIN_S

    def _ready(self) -> bool:
        """Build the model unless the time limit is (nearly) spent, counting OR-Tools'
        import when it is not loaded yet."""
        first = "ortools.sat.python.cp_model" not in sys.modules
        if self._time_left() < 0.01 + (IMPORT_S if first else 0.0):
            return False
        if self.model is None:
            self._build()
        return self._time_left() >= 0.01

    # -- the objective levels, one CP-SAT solve each --

    def require(self, lower: Mapping[int, int]) -> None:
        """Lower bounds on served fractions (a previous level's optimum); applied, with the
        GPUs each such fraction needs at least (a valid cut), when the model is solved."""
        for k, lo in lower.items():
            if lo > self.required.get(k, 0):
                self.required[k] = lo

    def _apply_required(self) -> None:
        for k, lo in self.required.items():
            if k in self.f and lo > self.applied.get(k, 0):
                self.model.add(self.f[k] >= lo)
                self.model.add(self.g[k] >= _config_for(self.entries[k], lo)[1])
                self.applied[k] = lo

    def _level(
        self,
        expr: Any,
        maximize: bool,
        hint: list[_Config],
        known: int,
        bound: int,
        layout: list[dict[int, int]] | None,
    ) -> _Solution:
        """Optimise ``expr()`` (built on demand) from ``hint``, whose value is ``known``,
        given a valid ``bound`` on the optimum; proven without search when they meet."""
        gap = abs(bound - known) / max(1, abs(bound))
        fallback = _Solution(hint, layout, "OPTIMAL" if gap == 0 else "FEASIBLE", gap, known)
        if (gap == 0 and not _ALWAYS_SEARCH) or not self._ready():
            return fallback
        self._apply_required()
        m = self.model
        objective = expr()
        if maximize:
            m.add(objective <= bound)
            m.maximize(objective)
        else:
            m.add(objective >= bound)
            m.minimize(objective)
        self._hint(hint, layout)
        solver, st = self._run(self._time_left())
        if st not in (self.cp.OPTIMAL, self.cp.FEASIBLE):
            return fallback
        cfgs, layout = self._extract(solver)
        value = round(solver.objective_value)
        if st == self.cp.OPTIMAL:
            return _Solution(cfgs, layout, "OPTIMAL", 0.0, value)
        best = round(solver.best_objective_bound)
        best = max(value, min(best, bound)) if maximize else min(value, max(best, bound))
        return _Solution(cfgs, layout, "FEASIBLE", abs(best - value) / max(1, abs(best)), value)

    def _weighted_total(self) -> Any:
        ks = list(self.f)
        # Models with no demand are fully served by nothing: a constant.
        served = sum(e.w * SCALE for e in self.entries if e.units == 0)
        return (
            self.cp.LinearExpr.weighted_sum(
                [self.f[k] for k in ks], [self.entries[k].w for k in ks]
            )
            + served
        )

    def solve_t(
        self, hint: list[_Config], lo: int, hi: int, layout: list[dict[int, int]] | None = None
    ) -> _Solution:
        """The smallest served fraction t among models with weight > 0."""

        def expr() -> Any:
            t = self.model.new_int_var(0, SCALE, "t")
            for k, f in self.f.items():
                if self.entries[k].weight > 0:
                    self.model.add(t <= f)
            return t

        return self._level(expr, True, hint, lo, hi, layout)

    def solve_total(
        self, hint: list[_Config], bound: int, layout: list[dict[int, int]] | None
    ) -> _Solution:
        """Σ weight · fraction (each fraction capped at 1)."""
        known = sum(e.w * _fraction(e, c) for e, c in zip(self.entries, hint))
        return self._level(self._weighted_total, True, hint, known, bound, layout)

    def solve_gpus(
        self,
        hint: list[_Config],
        total: int,
        lower_bound: int,
        layout: list[dict[int, int]] | None,
    ) -> _Solution:
        """Fewest GPUs keeping Σ weight · fraction at least ``total``."""
        known = sum(_gpus_of(e, c) for e, c in zip(self.entries, hint))

        def expr() -> Any:
            self.model.add(self._weighted_total() >= total)
            return self.used

        return self._level(expr, False, hint, known, lower_bound, layout)


def _gpus_of(e: _Entry, cfg: _Config) -> int:
    if cfg is None:
        return 0
    i, np_, nd = cfg
    return e.options[i].p * np_ + e.options[i].d * nd


# ---- the solve ------------------------------------------------------------------------------


def solve_fleet(
    demands: Sequence[Any],
    *,
    gpus: int,
    gpu: Any = DEFAULT_GPU,
    gpus_per_node: int = 8,
    objective: str = "max_min",
    time_limit_s: float = 10.0,
    connector: str = "moriio",
    workload: Any = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
    num_workers: int = 1,
) -> FleetPlan:
    """Share ``gpus`` GPUs (nodes of ``gpus_per_node``) among several models.

    ``demands`` lists ``(model, demand_rps, workload, weight)`` tuples (workload and weight
    optional: ``workload`` is the default, weight 1) or dicts with those keys and an
    optional ``name`` (needed when one model appears twice). ``objective="max_min"``
    maximises the smallest served fraction among models with weight > 0, then the
    weighted total, then uses fewer GPUs; ``"weighted"`` maximises Σ weight·min(1,
    served/demand), then uses fewer GPUs. Every instance's TP group sits inside one node.
    Models that get no instances have no entry in ``plans`` (their served fraction is 0).
    Fractions are decided in steps of 1/10000 and weights in steps of 1/1000 of the
    largest. The search stops at ``time_limit_s`` (then ``status`` is ``FEASIBLE`` and
    ``gap`` > 0); building the tables and bounds before it takes milliseconds. One CP-SAT
    worker by default, so the answer is deterministic.

    >>> import pdtp
    >>> fp = pdtp.solve_fleet([("llama-3.1-8b", 20.0), ("llama-3.1-70b", 5.0)], gpus=16)
    >>> fp.status, fp.min_served_fraction
    ('OPTIMAL', 1.0)
    """
    started = time.perf_counter()
    limit = positive_number("time_limit_s", time_limit_s)
    deadline = started + limit
    pool = positive_int("gpus", gpus, maximum=MAX_GPUS)
    gpn = positive_int("gpus_per_node", gpus_per_node, maximum=1 << 10)
    workers = positive_int("num_workers", num_workers, maximum=64)
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    if isinstance(demands, (str, bytes, Mapping)) or not isinstance(demands, Sequence):
        raise TypeError(
            "demands must be a list of (model, demand_rps, workload, weight) tuples or dicts, "
            f"got {type(demands).__name__}"
        )
    if not demands:
        raise InvalidArgumentError("demands must list at least one model")

    entries: list[_Entry] = []
    seen: set[str] = set()
    for i, raw in enumerate(demands):
        model, demand, wl, weight, name = _parse_demand(i, raw)
        d = demand_value(f"demands[{i}].demand_rps", demand)
        wt = _weight(f"demands[{i}].weight", weight)
        if wl is not None and not isinstance(wl, (Workload, Mapping)):
            raise TypeError(
                f"demands[{i}].workload must be a pdtp.Workload, a dict or None, got "
                f"{type(wl).__name__} {wl!r}"
            )
        table = candidate_table(
            model,
            gpus=pool,
            gpu=gpu,
            workload=wl if wl is not None else workload,
            connector=connector,
            max_tp=gpn,
            max_acks=max_acks,
            gpu_memory_utilization=gpu_memory_utilization,
            constants=constants,
        )
        label = table.ctx.model.name if name is None else name
        if not isinstance(label, str) or not label:
            raise InvalidArgumentError(f"demands[{i}].name must be a non-empty string")
        if label in seen:
            raise InvalidArgumentError(
                f"demands[{i}]: model {label!r} is listed twice; give each entry a distinct 'name'"
            )
        seen.add(label)
        units = math.ceil(d * UNITS) if d > 0 else 0
        if units and not table.pairs:
            err = table.infeasible()
            raise InfeasibleError(f"{label}: {err}", [f"{label}: {r}" for r in err.reasons])
        options = []
        for p, dt in table.pairs:
            a, b = table.prefill[p].units, table.decode[dt].units
            options.append(
                _Option(
                    p,
                    dt,
                    a,
                    b,
                    max(1, min(_ceil_div(units, a), (pool - dt) // p)),
                    max(1, min(_ceil_div(units, b), (pool - p) // dt)),
                )
            )
        entries.append(_Entry(label, table, d, units, wt, 0, options))

    top = max(e.weight for e in entries)
    if top <= 0:
        raise InvalidArgumentError("at least one demands[].weight must be > 0")
    for e in entries:
        e.w = round(WEIGHT_SCALE * e.weight / top)

    caps = [gpn] * (pool // gpn) + ([pool % gpn] if pool % gpn else [])
    weighted = [e for e in entries if e.weight > 0]

    # Closed-form bound on t: the fewest GPUs for fraction t, summed, must fit the pool.
    def fits(t: int) -> bool:
        return sum(_config_for(e, t)[1] for e in weighted) <= pool

    def packs(t: int) -> bool:
        cfgs = [_config_for(e, t)[0] if e.weight > 0 else None for e in entries]
        return fits(t) and _pack(_size_counts(entries, cfgs), caps) is not None

    t_ub = _largest_t(fits, 0, SCALE)
    t_hint = t_ub if packs(t_ub) else _largest_t(packs, 0, t_ub)
    hint = [_config_for(e, t_hint)[0] if e.weight > 0 else None for e in entries]

    fm = _FleetModel(entries, caps, pool, deadline, workers)
    levels: list[_Solution] = []
    sol = _Solution(hint, None, "OPTIMAL", 0.0, t_hint)
    lower = {k: 0 for k in range(len(entries))}
    if objective == "max_min":
        # Level 1: the smallest served fraction.
        sol = fm.solve_t(hint, t_hint, t_ub)
        levels.append(sol)
        lower = {k: sol.value if e.weight > 0 else 0 for k, e in enumerate(entries)}
        fm.require(lower)
    # Levels 2 and 3 without placement are a multiple-choice knapsack over each model's
    # frontier, solved exactly by a DP over GPUs: its optimum bounds the weighted total,
    # and its fewest GPUs for that total bound level 3. When its solution also packs into
    # the nodes (always, for TP sizes that divide each other and the node), both levels
    # are proven; otherwise CP-SAT searches from the best packed solution.
    if fm.frontiers:
        best, steps = _best_totals(entries, lower, pool)
        top = int(best[pool])
        relaxed = _rebuild(steps, int((best >= top).argmax()))
        if not _ALWAYS_SEARCH and _pack(_size_counts(entries, relaxed), caps) is not None:
            sol = _Solution(relaxed, None, sol.status, sol.gap, sol.value)
    else:
        # Pools too large for the DP: looser closed-form bounds (every model at the most it
        # reaches alone), and CP-SAT does the rest within the time limit.
        top = sum(
            e.w * _largest_t(lambda t, e=e: _config_for(e, t)[1] <= pool, 0, SCALE)
            for e in entries
            if e.units
        ) + sum(e.w * SCALE for e in entries if not e.units)
    sol = fm.solve_total(sol.configs, top, sol.layout)
    levels.append(sol)
    # Level 3: the fewest GPUs that keep that total (the DP's fewest bound it; without the
    # DP, each model's fewest GPUs for the fraction level 1 holds).
    if fm.frontiers:
        floor_gpus = int((best >= sol.value).argmax())
    else:
        floor_gpus = sum(_config_for(e, lower[k])[1] for k, e in enumerate(entries))
    sol = fm.solve_gpus(sol.configs, sol.value, floor_gpus, sol.layout)
    levels.append(sol)
    status, gap = "OPTIMAL", 0.0
    for lv in levels:
        if lv.status != "OPTIMAL":
            status, gap = "FEASIBLE", lv.gap
            break
    return _result(
        entries, sol.configs, sol.layout, caps, pool, gpn, objective, status, gap, started
    )


def _result(
    entries: Sequence[_Entry],
    cfgs: Sequence[_Config],
    fallback: list[dict[int, int]] | None,
    caps: Sequence[int],
    pool: int,
    gpn: int,
    objective: str,
    status: str,
    gap: float,
    started: float,
) -> FleetPlan:
    plans: dict[str, Plan] = {}
    served: dict[str, float] = {}
    demand: dict[str, float] = {}
    by_size: dict[int, list[tuple[str, str, int]]] = {}
    used = 0
    for e, cfg in zip(entries, cfgs):
        demand[e.name] = e.demand
        if cfg is None:
            served[e.name] = 1.0 if e.demand == 0 else 0.0
            continue
        i, np_, nd = cfg
        o = e.options[i]
        plan = replace(
            e.table.plan(o.p, np_, o.d, nd, status=status, method="fleet"), gpus_per_node=gpn
        )
        plans[e.name] = plan
        served[e.name] = 1.0 if e.demand == 0 else min(1.0, plan.requests_per_s / e.demand)
        used += plan.gpus_used
        by_size.setdefault(o.p, []).extend([(e.name, "prefill", o.p)] * np_)
        by_size.setdefault(o.d, []).extend([(e.name, "decode", o.d)] * nd)
    counts = {s: len(v) for s, v in by_size.items()}
    layout = _pack(counts, caps) or fallback
    if layout is None:  # pragma: no cover - the model's pattern cover always exists
        raise InfeasibleError("the fleet's instances do not fit the nodes")
    placement: list[tuple[tuple[str, str, int], ...]] = []
    queues = {s: list(v) for s, v in by_size.items()}
    for node in layout:
        items: list[tuple[str, str, int]] = []
        for s in sorted(node, reverse=True):
            q = queues[s]
            items.extend(q[: node[s]])
            del q[: node[s]]
        placement.append(tuple(items))
    placement += [()] * (len(caps) - len(placement))
    return FleetPlan(
        plans=MappingProxyType(plans),
        served_fraction=MappingProxyType(served),
        demand_rps=MappingProxyType(demand),
        placement=tuple(placement),
        gpus=pool,
        gpus_per_node=gpn,
        gpus_used=used,
        objective=objective,
        status=status,
        gap=gap,
        solve_ms=(time.perf_counter() - started) * 1e3,
    )
