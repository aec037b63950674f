"""The one CP-SAT model behind every planner (``solve``, ``size_for``, ``replan``,
``solve_fleet``), built from the Rust candidates and kept apart from them and from the API.

Formulation, over node fill patterns so its size does not grow with the pool:

- per valid (prefill row, decode row) pair ``i`` of model ``m`` a Boolean ``z[i]``: exactly
  one per model (at most one in a shared pool); an aggregated row is a pair of its own (the
  row with itself: an aggregated plan). A row is chosen (``x[r] = Σ z`` over its pairs) or
  not, and its instance count ``n[r]`` is 0 unless chosen and otherwise in ``[need or 1,
  most]`` — the full count domain the nodes allow;
- ``served[m] ≤ Σ capacity · n`` over the model's prefill rows and over its decode rows,
  aggregated rows counting on both sides (a plan uses one kind or the other, so this is
  min(prefill, decode) for a P/D split and the aggregated capacity otherwise);
- every node class (GPU type, free GPUs, count) fills its nodes with maximal *patterns*
  (multisets of instance sizes that fit one node): ``y[j]`` counts the class's nodes using
  pattern ``j`` (Σ ≤ the class's count), and for every type and size the patterns' slots
  cover the instances of that size. Exact (any node's contents fit inside some maximal
  pattern), without symmetry between identical nodes, and its size is the number of
  patterns, not of nodes or GPUs;
- valid cuts that keep the linear relaxation tight: for every size ``s``,
  ``Σ ⌊size/s⌋ · n ≤ Σ_nodes ⌊free/s⌋``.

The objective is the Rust order's stages (``Candidates.stages``), solved one after the
other, each proven value held as a constraint for the next; a ratio stage (tokens per
dollar) is maximised by Dinkelbach iterations. Rust's hint starts each solve and Rust's
relaxation bounds (valid: never tighter than the true optimum) let CP-SAT close the proof
early — a wrong hint costs time, never the answer. One worker and a fixed seed by default:
the same input gives the same plan.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .. import _core

Solution = list[Any]  # one _core.Choice or None per model

# Seconds kept back from the time limit for building the result.
MARGIN_S = 0.01


class OutOfTime(Exception):
    """The time limit passed while the model was being built (a very large model)."""


@dataclass(frozen=True)
class Decision:
    """What a planner decided: one ``_core.Choice`` (or None) per model, how sure it is
    (``OPTIMAL``: every stage proven; ``FEASIBLE``: the time limit cut a proof short, ``gap``
    the relative gap of the first unproven stage, None when no bound is known), the pattern
    usage that places it, who decided (``cpsat`` when CP-SAT's search changed the plan,
    ``closed-form`` when the plan is the Rust closed forms' starting plan, ``enumerate``)
    and who proved it optimal (``cpsat``, ``enumerate``; None when nothing did)."""

    solution: Solution | None
    status: str
    gap: float | None
    usage: list[tuple[int, int]] | None
    method: str
    proof: str | None = None


def _same(a: Solution | None, b: Solution | None) -> bool:
    """Whether two solutions choose the same pairs and counts."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _sides(role: str) -> tuple[str, ...]:
    """The capacity sides a row counts on: an aggregated row on both."""
    return ("prefill", "decode") if role == "aggregated" else (role,)


@functools.cache
def _lean_model_class(cp_model: Any) -> Any:
    """``CpModel`` without its camelCase aliases: OR-Tools adds ~60 of them to every new
    model (about 2 ms); pdtp only calls the snake_case methods."""

    # OR-Tools ships no types, so its class is Any to mypy: this is pdtp's one subclass of it.
    class _Lean(cp_model.CpModel):  # type: ignore[misc]
        def _add_pre_pep8_methods(self) -> None:
            pass

    return _Lean


class OneModel:
    """The CP-SAT model of one scenario's candidates: built once, solved stage by stage."""

    def __init__(
        self,
        cands: _core.Candidates,
        *,
        presolve: bool = False,
        workers: int = 1,
        seed: int = 0,
        deadline: float | None = None,
        excluded: Collection[tuple[int, int]] = (),
        keep: list[int] | None = None,
    ):
        from ortools.sat.python import cp_model  # lazy: OR-Tools costs ~0.5 s to import

        self.cp = cp_model
        lean = _lean_model_class(cp_model)
        self.cands = cands
        self.presolve = presolve
        self.workers = workers
        self.seed = seed
        self.rows = cands.rows
        all_pairs = cands.pairs
        self.nmodels = cands.models
        self.fleet = cands.is_fleet
        weights, counts_in_min, demand, _ = cands.fleet_terms
        self.weights, self.counts_in_min, self.demand = weights, counts_in_min, demand
        m = lean()
        self.model = m
        # A shared pool's model with no demand needs nothing, and a row that cannot serve
        # its model's demand (more instances than the pool holds) serves no plan: those
        # pairs are left out.
        rows = self.rows
        serves = cands.serves_demand

        # ``excluded``: (prefill row, decode row) pairs left out, so that a caller can ask
        # for the best plan of another pair (the goodput planner's next candidate).
        # ``keep``: the indices of the only pairs that can be part of an optimum (the rest
        # are bounded below the incumbent: ``decide.beaten``); None keeps every pair.
        def usable(p: Any) -> bool:
            if self.fleet and demand[p.model] == 0:
                return False
            if (p.prefill, p.decode) in excluded:
                return False
            return not serves or (
                rows[p.prefill].need is not None and rows[p.decode].need is not None
            )

        ids = range(len(all_pairs)) if keep is None else keep
        # Pairs by index: only those the model holds.
        self.pairs: dict[int, Any] = {i: all_pairs[i] for i in ids if usable(all_pairs[i])}
        self.pair_ids = list(self.pairs)
        self.deadline = deadline
        self.z: dict[int, Any] = {}
        for i in self.pair_ids:
            if len(self.z) % 256 == 0:  # thousands of pairs take tens of ms
                self._check_time()
            self.z[i] = m.new_bool_var(f"z{i}")
        self._check_time()
        by_model: dict[int, list[Any]] = {}
        on_row: dict[int, list[Any]] = {}
        for i in self.pair_ids:
            p = self.pairs[i]
            by_model.setdefault(p.model, []).append(self.z[i])
            on_row.setdefault(p.prefill, []).append(self.z[i])
            if p.decode != p.prefill:
                on_row.setdefault(p.decode, []).append(self.z[i])
        for k in range(self.nmodels):
            zs = by_model.get(k, [])
            if self.fleet:
                if len(zs) > 1:
                    m.add_at_most_one(zs)
            else:
                m.add_exactly_one(zs)
        demand_rows = cands.serves_demand
        self.n: dict[int, Any] = {}
        self.x: dict[int, Any] = {}
        for r, zs in on_row.items():
            if r % 512 == 0:
                self._check_time()
            row = self.rows[r]
            x = sum(zs) if len(zs) > 1 else zs[0]
            lo = row.need if demand_rows and row.need is not None else 1
            v = m.new_int_var(0, row.most, f"n{r}")
            m.add(v <= row.most * x)
            m.add(v >= lo * x)
            self.n[r], self.x[r] = v, x
        self.model_rows: dict[int, list[int]] = {}
        for r in self.n:
            self.model_rows.setdefault(self.rows[r].model, []).append(r)
        self._check_time()
        self._packing()
        self._check_time()
        self._terms_cache: dict[str, Any] = {}
        self.served: dict[int, Any] = {}
        self.fraction: dict[int, Any] = {}
        self.aux_hints: list[tuple[Any, Any]] = []

    # ---- structure ---------------------------------------------------------------------

    def _check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline - MARGIN_S:
            raise OutOfTime

    def _packing(self) -> None:
        m, cands = self.model, self.cands
        classes = cands.classes
        self.patterns = cands.patterns()
        self.y: list[Any] = []
        per_class: dict[int, list[Any]] = {}
        cover: dict[tuple[int, int], list[tuple[Any, int]]] = {}
        for j, p in enumerate(self.patterns):
            if j % 4096 == 4095:
                self._check_time()  # up to MAX_PATTERNS (50,000) variables: seconds
            t, _, count = classes[p.class_index]
            y = m.new_int_var(0, count, f"y{j}")
            self.y.append(y)
            per_class.setdefault(p.class_index, []).append(y)
            for size, mult in p.items:
                cover.setdefault((t, size), []).append((y, mult))
        for ci, ys in per_class.items():
            m.add(sum(ys) <= classes[ci][2])
        need: dict[tuple[int, int], list[tuple[Any, int]]] = {}
        for r, v in self.n.items():
            row = self.rows[r]
            need.setdefault((row.gpu_type, row.piece), []).append((v, row.pieces))
        for key, items in need.items():
            slots = cover.get(key, [])
            m.add(
                self.cp.LinearExpr.weighted_sum([y for y, _ in slots], [k for _, k in slots])
                >= self.cp.LinearExpr.weighted_sum([v for v, _ in items], [k for _, k in items])
            )
        # Valid cuts: for every size s, no node holds more than ⌊free/s⌋ items of size ≥ s.
        for t, sizes in enumerate(cands.sizes):
            rows_t = [(v, self.rows[r]) for r, v in self.n.items() if self.rows[r].gpu_type == t]
            for s in sizes:
                cap = sum(count * (free // s) for tt, free, count in classes if tt == t)
                terms = [(v, (row.piece // s) * row.pieces) for v, row in rows_t if row.piece >= s]
                if terms:
                    m.add(
                        self.cp.LinearExpr.weighted_sum(
                            [v for v, _ in terms], [k for _, k in terms]
                        )
                        <= cap
                    )

    def _served(self, k: int) -> Any:
        """served[k] ≤ each side's capacity (maximising pushes it to their minimum)."""
        if k not in self.served:
            m = self.model
            sides: dict[str, list[tuple[Any, int, int]]] = {"prefill": [], "decode": []}
            for r in self.model_rows.get(k, ()):
                row = self.rows[r]
                for side in _sides(row.role):
                    sides[side].append((self.n[r], row.units, row.most))
            top = min(sum(u * most for _, u, most in items) for items in sides.values())
            s = m.new_int_var(0, max(0, top), f"served{k}")
            for items in sides.values():
                m.add(
                    s
                    <= self.cp.LinearExpr.weighted_sum(
                        [v for v, _, _ in items], [u for _, u, _ in items]
                    )
                )
            self.served[k] = s
        return self.served[k]

    def _fraction(self, k: int) -> Any:
        """A model's served fraction in steps of 1/scale: f·demand ≤ scale·served."""
        scale = self.cands.fraction_scale
        if self.demand[k] == 0:
            return scale
        if k not in self.fraction:
            f = self.model.new_int_var(0, scale, f"f{k}")
            self.model.add(f * self.demand[k] <= scale * self._served(k))
            self.fraction[k] = f
        return self.fraction[k]

    def term(self, name: str) -> Any:
        """A term of the Rust order as a linear expression of this model."""
        if name in self._terms_cache:
            return self._terms_cache[name]
        cp, rows, n, x = self.cp, self.rows, self.n, self.x
        ntypes = len(self.cands.sizes)

        def wsum(items: list[tuple[Any, int]]) -> Any:
            return cp.LinearExpr.weighted_sum([v for v, _ in items], [k for _, k in items])

        if name == "served":
            e = sum(self._served(k) for k in range(self.nmodels))
        elif name == "gpus":
            e = wsum([(v, rows[r].gpus) for r, v in n.items()])
        elif name == "cost":
            cost = self.cands.row_cost
            e = wsum([(v, cost[r]) for r, v in n.items()])
        elif name == "tp_sum":
            e = sum(rows[r].gpus * x[r] for r in n)
        elif name == "prefill_tp":
            e = sum(rows[r].gpus * x[r] for r in n if rows[r].role == "prefill")
        elif name == "instances":
            e = sum(n.values())
        elif name == "prefill_instances":
            e = sum(v for r, v in n.items() if rows[r].role == "prefill")
        elif name == "type_rank":
            # prefill type × types + decode type; an aggregated row is both.
            weight = {"prefill": ntypes, "decode": 1, "aggregated": ntypes + 1}
            e = sum(rows[r].gpu_type * weight[rows[r].role] * x[r] for r in n)
        elif name == "moves":
            e = self._moves()
        elif name == "min_fraction":
            scale = self.cands.fraction_scale
            t = self.model.new_int_var(0, scale, "t")
            counted = [k for k in range(self.nmodels) if self.counts_in_min[k]]
            for k in counted:
                self.model.add(t <= self._fraction(k))
            fractions = [self._fraction(k) for k in counted]
            self.aux_hints.append(
                (t, lambda vals: min((vals.get(f, f) for f in fractions), default=scale))
            )
            e = t
        elif name == "weighted_fraction":
            e = sum(self.weights[k] * self._fraction(k) for k in range(self.nmodels))
        else:  # pragma: no cover - the core names every term
            raise ValueError(f"unknown term {name!r}")
        self._terms_cache[name] = e
        return e

    def _moves(self) -> Any:
        """A re-plan's disruption plus its GPU weight: keeping a running side's row moves
        only the difference (``up``/``down``), any other row starts every instance, and a
        running side whose row is not kept stops (and restarts) all of it."""
        mv = self.cands.moves
        if mv is None:  # pragma: no cover - the core asks for "moves" only with its costs
            raise ValueError("the moves term needs the scenario's move costs")
        m, rows, total = self.model, self.rows, 0
        running = {
            run_row: (run_n, run_gpus)
            for run_row, run_n, run_gpus in (mv.prefill, mv.decode)
            if run_row is not None
        }
        for r, v in self.n.items():
            g = rows[r].gpus
            total += (mv.gpu * g) * v
            if r in running:
                run_n, run_gpus = running[r]
                up = m.new_int_var(0, rows[r].most, f"up{r}")
                down = m.new_int_var(0, run_n, f"down{r}")
                m.add(v - run_n == up - down)
                total += (mv.start * g) * up + (mv.stop * g) * down
                total += (mv.restart * run_gpus * run_n) * (1 - self.x[r])
                self.aux_hints.append((up, lambda s, v=v, run_n=run_n: max(0, s[v] - run_n)))
                self.aux_hints.append((down, lambda s, v=v, run_n=run_n: max(0, run_n - s[v])))
            else:
                total += (mv.start * g) * v
        for run_row, run_n, run_gpus in (mv.prefill, mv.decode):
            if run_row is None or run_row not in self.n:
                total += (mv.stop + mv.restart) * run_gpus * run_n
        return total

    # ---- hints and solutions -----------------------------------------------------------

    def _hint(self, sol: Solution) -> None:
        """A complete hint: pairs, counts, derived values and the node patterns."""
        m = self.model
        m.clear_hints()
        values: dict[Any, int] = {}
        chosen = {(ch.prefill, ch.decode): ch for ch in sol if ch is not None}
        for i in self.pair_ids:
            p = self.pairs[i]
            on = (p.prefill, p.decode) in chosen
            m.add_hint(self.z[i], on)
        counts: dict[int, int] = {}  # row -> instances (one pass: fleets have many models)
        for ch in chosen.values():
            counts[ch.prefill] = ch.prefill_instances
            counts.setdefault(ch.decode, ch.decode_instances)
        for r, v in self.n.items():
            count = counts.get(r, 0)
            values[v] = count
            m.add_hint(v, count)
        for k, s in self.served.items():
            ch = sol[k]
            val = 0
            if ch is not None:
                val = min(
                    ch.prefill_instances * self.rows[ch.prefill].units,
                    ch.decode_instances * self.rows[ch.decode].units,
                )
            m.add_hint(s, val)
            values[s] = val
        scale = self.cands.fraction_scale
        for k, f in self.fraction.items():
            val = min(scale, scale * values.get(self.served[k], 0) // max(1, self.demand[k]))
            m.add_hint(f, val)
            values[f] = val
        for var, rule in self.aux_hints:
            m.add_hint(var, rule(values))
        use = dict(self.cands.usage(sol))
        for j, y in enumerate(self.y):
            m.add_hint(y, use.get(j, 0))

    def _extract(self, solver: Any) -> tuple[Solution, list[tuple[int, int]]]:
        sol: Solution = [None] * self.nmodels
        for i in self.pair_ids:
            if solver.boolean_value(self.z[i]):
                p = self.pairs[i]
                sol[p.model] = _core.Choice(
                    p.prefill,
                    p.decode,
                    solver.value(self.n[p.prefill]),
                    solver.value(self.n[p.decode]),
                )
        usage = [(j, solver.value(y)) for j, y in enumerate(self.y) if solver.value(y) > 0]
        return sol, usage

    def _run(self, seconds: float) -> tuple[Any, Any]:
        solver = self.cp.CpSolver()
        params = solver.parameters
        params.num_workers = self.workers
        params.random_seed = self.seed
        # CP-SAT notices its limit a little late on large models (measured: 5% over at 16,000
        # pairs): ask for 95% of what is left.
        params.max_time_in_seconds = max(1e-3, 0.95 * seconds)
        if not self.presolve:
            # A model this small is proven from the hint and the bound faster than presolve
            # runs (measured: 0.2 ms vs 2-7 ms per stage).
            params.cp_model_presolve = False
            params.symmetry_level = 0
        return solver, solver.solve(self.model)

    # ---- the stages --------------------------------------------------------------------

    def decide(self, hint: Solution | None, deadline: float, bound: Any = None) -> Decision:
        """Optimise every stage in order within ``deadline`` (a ``time.perf_counter``).
        ``bound(stage, fixed)`` gives valid bounds (default: the Rust relaxation's)."""
        bound_of = bound or self.cands.bound
        current, usage = hint, None
        fixed: list[int] = []
        decision = self._stages(current, usage, fixed, deadline, bound_of)
        # Who decided: the search, or the starting plan it kept (then CP-SAT only proved).
        kept = hint is not None and _same(decision.solution, hint)
        method = "closed-form" if kept and decision.method == "cpsat" else decision.method
        proof = "cpsat" if decision.status == "OPTIMAL" else None
        return dataclasses.replace(decision, method=method, proof=proof)

    def _stages(
        self, current: Solution | None, usage: Any, fixed: list[int], deadline: float, bound_of: Any
    ) -> Decision:
        cp, m, cands = self.cp, self.model, self.cands
        for k, stage in enumerate(cands.stages):
            if stage.terms == [("ratio", 1)]:
                result = self._ratio(current, deadline)
                if result is None:
                    break
                current, usage, status = result
                if status != "OPTIMAL":
                    return Decision(current, "FEASIBLE", None, usage, "cpsat")
                fixed.append(0)
                continue
            expr = sum(coef * self.term(name) for name, coef in stage.terms)
            bound = bound_of(k, fixed)
            if bound is not None:
                m.add(expr <= bound if stage.sense == "max" else expr >= bound)
            if stage.sense == "max":
                m.maximize(expr)
            else:
                m.minimize(expr)
            if current is not None and time.perf_counter() < deadline - MARGIN_S:
                self._hint(current)
            left = deadline - time.perf_counter() - MARGIN_S
            if left <= 0:
                # Building the stage used the time: a search now would only overrun the
                # limit (and reading a large solution back costs more). Keep what stands.
                method = "cpsat" if fixed else "closed-form"
                return Decision(current, "FEASIBLE", self._gap(k, current, bound), usage, method)
            solver, status = self._run(left)
            if status == cp.INFEASIBLE and k == 0:
                return Decision(None, "INFEASIBLE", None, None, "cpsat")
            if status not in (cp.OPTIMAL, cp.FEASIBLE):
                # Out of time before any solution of this stage: keep what is proven so far.
                gap = self._gap(k, current, bound)
                return Decision(current, "FEASIBLE", gap, usage, "cpsat")
            current, usage = self._extract(solver)
            value = round(solver.objective_value)
            if status != cp.OPTIMAL:
                best = round(solver.best_objective_bound)
                if bound is not None:
                    best = min(best, bound) if stage.sense == "max" else max(best, bound)
                gap = abs(best - value) / max(1, abs(best))
                return Decision(current, "FEASIBLE", gap, usage, "cpsat")
            fixed.append(value)
            m.add(expr >= value if stage.sense == "max" else expr <= value)
        status = "OPTIMAL" if len(fixed) == len(cands.stages) else "FEASIBLE"
        return Decision(current, status, 0.0 if status == "OPTIMAL" else None, usage, "cpsat")

    def _gap(self, stage: int, current: Solution | None, bound: int | None) -> float | None:
        if current is None or bound is None:
            return None
        value = self.cands.values(current)[stage]
        if not isinstance(value, int):
            return None
        return abs(bound - value) / max(1, abs(bound))

    def _ratio(self, current: Solution | None, deadline: float) -> Any:
        """Dinkelbach: with λ = S/C the best ratio so far, maximise C·served − S·cost; a
        positive optimum is a better ratio, zero proves λ optimal."""
        cp, m = self.cp, self.model
        served_coef, cost_coef = self.cands.ratio_coefficients
        sides: dict[str, list[tuple[Any, int]]] = {"prefill": [], "decode": []}
        for r, v in self.n.items():
            for side in _sides(self.rows[r].role):
                sides[side].append((v, served_coef[r]))
        top = sum(self.rows[r].most * served_coef[r] for r in self.n)
        served = m.new_int_var(0, max(0, top), "ratio_served")
        for items in sides.values():
            m.add(
                served <= cp.LinearExpr.weighted_sum([v for v, _ in items], [k for _, k in items])
            )
        cost = cp.LinearExpr.weighted_sum(list(self.n.values()), [cost_coef[r] for r in self.n])
        self.aux_hints.append(
            (
                served,
                lambda vals: min(
                    sum(vals.get(v, 0) * k for v, k in items) for items in sides.values()
                ),
            )
        )
        if current is None:
            return None
        usage = None
        while True:
            num, den = self.cands.values(current)[0]
            m.maximize(den * served - num * cost)
            self._hint(current)
            left = deadline - time.perf_counter() - MARGIN_S
            solver, status = self._run(left)
            if status not in (cp.OPTIMAL, cp.FEASIBLE):
                return current, usage, "FEASIBLE"
            found, found_usage = self._extract(solver)
            if round(solver.objective_value) <= 0:
                if status == cp.OPTIMAL:
                    m.add(den * served - num * cost >= 0)
                    return current, usage or found_usage, "OPTIMAL"
                return current, usage or found_usage, "FEASIBLE"
            current, usage = found, found_usage
