"""The candidate table as an object, for planners other than ``solve``: ``size_for``,
``replan`` and ``solve_fleet`` all start from the same data ``solve`` does (one
``_core.candidate_table`` call: per-TP-size side rows and the valid pairs that fit the
budget) and all return a :class:`pdtp.Plan` built exactly as ``solve`` builds one, so
``plan.requests_per_s`` equals ``pdtp.evaluate`` of the same configuration.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import Any

from . import _core
from ._validate import optional_positive_int, positive_int
from .check import MAX_TP, check
from .connectors import Connector, resolve_connector
from .errors import InfeasibleError, InvalidArgumentError
from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION, Context, SidePoint, resolve_context
from .planner import MAX_GPUS, Plan, Side
from .workload import Workload, resolve_workload

__all__ = [
    "CandidateTable",
    "candidate_table",
    "demand_value",
    "instances_for",
]


def demand_value(field: str, value: Any) -> float:
    """A demand in requests/s: a finite number ≥ 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{field} must be a number of requests/s, got {type(value).__name__} {value!r}"
        )
    v = float(value)
    if not (v >= 0 and math.isfinite(v)):
        raise InvalidArgumentError(f"{field} must be a finite number >= 0, got {value!r}")
    return v


def instances_for(demand: float, requests_per_s: float) -> int:
    """The fewest instances (at least one) whose ``n * requests_per_s`` — computed exactly as
    :class:`pdtp.Plan` computes a side's capacity — reaches ``demand``."""
    if requests_per_s <= 0:
        raise InvalidArgumentError(f"capacity must be positive, got {requests_per_s!r}")
    if demand <= 0:
        return 1
    n = max(1, math.ceil(demand / requests_per_s))
    # The quotient is within a step or two of the answer; past float precision (n > 2**53)
    # adding 1 no longer changes n * requests_per_s, so the corrections are bounded.
    for _ in range(4):
        if n * requests_per_s >= demand:
            break
        n += 1
    for _ in range(4):
        if n <= 1 or (n - 1) * requests_per_s < demand:
            break
        n -= 1
    return n


@dataclass(frozen=True)
class CandidateTable:
    """One model's options on one GPU type under one budget.

    ``prefill`` / ``decode`` map each TP size (1..min(max_tp, budget)) to its side point;
    ``pairs`` lists the valid (prefill TP, decode TP) pairs whose sides are both usable
    (weights, KV cache and SLO) and that fit the budget, in the table's order."""

    ctx: Context
    workload: Workload
    connector: Connector
    budget: int
    max_tp: int
    max_acks: int | None
    prefill: dict[int, SidePoint]
    decode: dict[int, SidePoint]
    pairs: tuple[tuple[int, int], ...]
    started: float
    # The core's rows for those pairs: (P, best prefill count, D, best decode count,
    # served units, GPUs used) at the budget, and the best pair the rules reject.
    rows: tuple[tuple[int, int, int, int, int, int], ...] = ()
    rejected_row: tuple[int, int, int, int, int, int] | None = None

    # ---- what the table says --------------------------------------------------------------

    def usable(self, side: str) -> list[int]:
        pts = self.prefill if side == "prefill" else self.decode
        return [
            t
            for t, p in pts.items()
            if p.loads and p.fits_weights and p.fits_kv and p.meets_slo and p.units > 0
        ]

    def fewest(self, p: int, d: int, demand: float) -> tuple[int, int]:
        """Fewest (prefill, decode) instances of pair (p, d) that serve ``demand``."""
        return (
            instances_for(demand, self.prefill[p].requests_per_s),
            instances_for(demand, self.decode[d].requests_per_s),
        )

    def served(self, p: int, np_: int, d: int, nd: int) -> float:
        """Requests/s of a configuration, as :class:`pdtp.Plan` reports it."""
        return min(np_ * self.prefill[p].requests_per_s, nd * self.decode[d].requests_per_s)

    # ---- results ----------------------------------------------------------------------------

    def plan(
        self,
        p: int,
        np_: int,
        d: int,
        nd: int,
        *,
        status: str = "OPTIMAL",
        method: str,
        rejected: tuple[str, ...] = (),
        gpus: int | None = None,
    ) -> Plan:
        """The :class:`pdtp.Plan` of one configuration, built field by field as ``solve``
        builds it (``gpus`` defaults to the table's budget)."""
        ctx, w, conn = self.ctx, self.workload, self.connector
        pp, dp = self.prefill[p], self.decode[d]
        rps = self.served(p, np_, d, nd)
        warnings = check(
            ctx.model, p, d, connector=conn.name, max_acks=self.max_acks, alternatives=0
        ).warnings
        return Plan(
            model=ctx.model.name,
            model_id=ctx.model.serve_ref or ctx.model.hf_id or ctx.model.name,
            gpu=ctx.gpu.name,
            connector=conn.name,
            workload=w,
            gpus=self.budget if gpus is None else gpus,
            prefill=Side(p, np_),
            decode=Side(d, nd),
            requests_per_s=rps,
            output_tokens_per_s=rps * w.osl,
            ttft_ms=pp.latency_ms,
            tpot_ms=dp.latency_ms,
            decode_batch=dp.batch,
            prefill_capacity_rps=np_ * pp.requests_per_s,
            decode_capacity_rps=nd * dp.requests_per_s,
            status=status,
            method=method,
            solve_ms=(time.perf_counter() - self.started) * 1e3,
            gpus_per_node=ctx.gpu.gpus_per_node,
            gpu_memory_utilization=ctx.gpu_memory_utilization,
            kv_dtype=ctx.model.kv_dtype,
            visible_devices_env=ctx.gpu.visible_devices_env,
            kv_connector=conn.kv_connector,
            prefill_role=conn.prefill_role,
            decode_role=conn.decode_role,
            rejected=rejected,
            warnings=warnings,
        )

    def infeasible(self) -> InfeasibleError:
        """Why no pair is usable within the budget (the same reasons ``solve`` gives)."""
        from .infeasible import explain

        binding, reasons = explain(
            self.ctx,
            self.workload,
            self.connector.name,
            self.budget,
            self.max_tp,
            self.max_acks,
            self.prefill,
            self.decode,
        )
        return InfeasibleError(binding, reasons)

    def demand_infeasible(self, demand: float, budget_field: str = "max_gpus") -> InfeasibleError:
        """``demand`` needs more GPUs than the budget: say how many, per pair, and what the
        budget serves at most."""
        rows = []
        for p, d in self.pairs:
            np_, nd = self.fewest(p, d, demand)
            rows.append((p * np_ + d * nd, p + d, p, np_, d, nd))
        rows.sort()
        most = max(
            (self._best_served(p, d) for p, d in self.pairs),
            default=0.0,
        )
        need, _, p, np_, d, nd = rows[0]
        binding = (
            f"demand_rps={demand:g} needs {need} GPUs ({np_}x prefill tp={p} + {nd}x decode "
            f"tp={d}); {budget_field}={self.budget} serves at most {most:.3g} req/s"
        )
        reasons = [binding] + [
            f"P{p}/D{d}: {np_}x prefill + {nd}x decode = {g} GPUs" for g, _, p, np_, d, nd in rows
        ]
        return InfeasibleError(binding, reasons)

    def _best_served(self, p: int, d: int) -> float:
        """Most requests/s pair (p, d) serves within the budget (scan of prefill counts)."""
        a, b = self.prefill[p].requests_per_s, self.decode[d].requests_per_s
        best = 0.0
        for np_ in range(1, (self.budget - d) // p + 1):
            nd = (self.budget - p * np_) // d
            best = max(best, min(np_ * a, nd * b))
            if np_ * a >= nd * b:
                break
        return best

    def rejected_note(self, p: int, np_: int, d: int, nd: int, demand: float) -> tuple[str, ...]:
        """When a pair the connector's rules forbid would serve ``demand`` with fewer GPUs
        than the chosen (p, d), say so (what the rules cost)."""
        chosen = p * np_ + d * nd
        allowed = set(self.pairs)
        best: tuple[int, int, int, int, int, int] | None = None
        for pt in self.usable("prefill"):
            for dt in self.usable("decode"):
                if (pt, dt) in allowed or pt + dt > self.budget:
                    continue
                a, b = self.fewest(pt, dt, demand)
                row = (pt * a + dt * b, pt + dt, pt, a, dt, b)
                if best is None or row < best:
                    best = row
        if best is None or best[0] >= chosen:
            return ()
        g, _, pt, a, dt, b = best
        r = check(
            self.ctx.model,
            pt,
            dt,
            connector=self.connector.name,
            max_acks=self.max_acks,
            alternatives=0,
        )
        why = r.violations[0].message if r.violations else "rejected by the connector's rules"
        return (
            f"{a}x prefill tp={pt} + {b}x decode tp={dt} would serve {demand:g} req/s with "
            f"{g} GPUs ({chosen - g} fewer), but {self.connector.name} rejects P{pt}/D{dt}: {why}",
        )


def candidate_table(
    model: Any,
    *,
    gpus: int,
    gpu: Any = DEFAULT_GPU,
    workload: Any = None,
    connector: Any = "moriio",
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
    budget_field: str = "gpus",
) -> CandidateTable:
    """Resolve and validate the inputs, then build the table with one Rust call."""
    started = time.perf_counter()
    ctx = resolve_context(model, gpu, constants, gpu_memory_utilization)
    w = resolve_workload(workload)
    budget = positive_int(budget_field, gpus, maximum=MAX_GPUS)
    tp_bound = optional_positive_int("max_tp", max_tp, maximum=MAX_TP) or ctx.gpu.gpus_per_node
    acks = optional_positive_int("max_acks", max_acks, maximum=MAX_TP)
    conn = resolve_connector(connector)
    m, g, c = ctx.inputs
    prefill_rows, decode_rows, cands, _, rejected_row = _core.candidate_table(
        m, g, c, w._core_dict(), conn.name, budget, tp_bound, acks, ctx.gpu_memory_utilization
    )
    return CandidateTable(
        ctx=ctx,
        workload=w,
        connector=conn,
        budget=budget,
        max_tp=tp_bound,
        max_acks=acks,
        prefill={r[0]: SidePoint.from_row(r) for r in prefill_rows},
        decode={r[0]: SidePoint.from_row(r) for r in decode_rows},
        pairs=tuple((r[0], r[2]) for r in cands),
        started=started,
        rows=tuple(cands),
        rejected_row=rejected_row,
    )
