"""For autoscalers: ``size_for`` (the fewest GPUs that serve a demand) and ``replan`` (a plan
for the new demand that moves as few instances as possible, with the diff to apply).

Both are exact and closed-form: the candidate table (one Rust call) gives each usable TP
size's per-instance capacity, so for every valid (P, D) pair the fewest instances serving a
demand ``d`` are ``ceil(d / A_P)`` and ``ceil(d / B_D)``; the pairs are few (at most the
number of TP sizes squared), so enumerating them is both exact and fast (well under a
millisecond). No CP-SAT model is needed, and OR-Tools is never imported.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

from ._validate import positive_int
from .check import MAX_TP
from .errors import InvalidArgumentError
from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION
from .planner import Plan, Side
from .sizing import CandidateTable, candidate_table, demand_value

__all__ = ["Move", "MoveCost", "Replan", "replan", "size_for"]

# Instance counts beyond this are not one deployment (same bound as pdtp.evaluate).
MAX_INSTANCES = 1 << 24


# ---- size_for -------------------------------------------------------------------------------


def size_for(
    model: Any,
    demand_rps: float,
    *,
    max_gpus: int,
    gpu: Any = DEFAULT_GPU,
    workload: Any = None,
    connector: str = "moriio",
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
) -> Plan:
    """The plan with the fewest GPUs that serves ``demand_rps`` requests/s within the SLOs.

    Ties go to the most headroom (served − demand), then the documented ``solve`` order
    (smaller TP sizes: P + D, then P; then fewer instances). Exact: every valid pair is
    sized in closed form. Raises :class:`pdtp.InfeasibleError` (with ``.reasons``) when
    ``max_gpus`` cannot serve the demand. A demand of 0 gives the smallest valid deployment
    (one instance each).

    >>> import pdtp
    >>> plan = pdtp.size_for("llama-3.1-70b", 10.0, max_gpus=64, gpu="mi300x")
    >>> plan.requests_per_s >= 10.0, plan.status
    (True, 'OPTIMAL')
    """
    demand = demand_value("demand_rps", demand_rps)
    table = candidate_table(
        model,
        gpus=max_gpus,
        gpu=gpu,
        workload=workload,
        connector=connector,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        budget_field="max_gpus",
    )
    if not table.pairs:
        raise table.infeasible()
    best: tuple[Any, ...] | None = None
    for p, d in table.pairs:
        np_, nd = table.fewest(p, d, demand)
        used = p * np_ + d * nd
        if used > table.budget:
            continue
        headroom = table.served(p, np_, d, nd) - demand
        key = (used, -headroom, p + d, p, np_ + nd, np_, d, nd)
        if best is None or key < best:
            best = key
    if best is None:
        raise table.demand_infeasible(demand)
    p, np_, d, nd = best[3], best[5], best[6], best[7]
    return table.plan(
        p, np_, d, nd, method="size_for", rejected=table.rejected_note(p, np_, d, nd, demand)
    )


# ---- replan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoveCost:
    """Weights of a re-plan's cost, each per GPU.

    - ``start``: per GPU of each instance started;
    - ``stop``: per GPU of each instance stopped;
    - ``restart``: extra, per GPU of each instance stopped because its side changes TP size
      (a TP change stops every old instance of that side and starts new ones);
    - ``gpu``: per GPU the new plan holds. With ``gpu >= stop`` (the default, 1 = 1) spare
      instances are stopped as soon as the demand allows; ``gpu < stop`` keeps spare
      instances (less churn, more GPUs); ``gpu = 0`` minimises disruption alone.

    ``cost`` on a :class:`Replan` is the disruption only (start + stop + restart terms); the
    choice minimises ``cost + gpu · gpus used``, then fewer GPUs, then ``solve``'s order.
    """

    start: float = 1.0
    stop: float = 1.0
    restart: float = 0.0
    gpu: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(
                    f"move_cost.{f.name} must be a number, got {type(v).__name__} {v!r}"
                )
            if not (math.isfinite(v) and float(v) >= 0):
                raise InvalidArgumentError(
                    f"move_cost.{f.name} must be a finite number >= 0, got {v!r}"
                )

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _move_cost(value: Any) -> MoveCost:
    if value is None:
        return MoveCost()
    if isinstance(value, MoveCost):
        return value
    if isinstance(value, Mapping):
        allowed = [f.name for f in fields(MoveCost)]
        unknown = sorted(set(map(str, value)) - set(allowed))
        if unknown:
            raise InvalidArgumentError(
                f"move_cost has unknown field(s) {unknown}; allowed: {', '.join(allowed)}"
            )
        return MoveCost(**value)
    raise TypeError(f"move_cost must be a pdtp.MoveCost or a dict, got {type(value).__name__}")


class Move(NamedTuple):
    """``(role, tp, instances)``: that many instances of ``tp`` GPUs on one side
    (``"prefill"`` or ``"decode"``), started or stopped."""

    role: str
    tp: int
    instances: int

    @property
    def gpus(self) -> int:
        return self.tp * self.instances

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "tp": self.tp, "instances": self.instances, "gpus": self.gpus}


@dataclass(frozen=True)
class Replan:
    """A re-plan: the new ``plan`` and the diff from ``current`` to it.

    ``start`` / ``stop`` list the instances to start and stop as :class:`Move` rows
    ``(role, tp, instances)``; stop first, then start, and the deployment is ``plan``. ``cost``
    is the weighted disruption (see :class:`MoveCost`); ``gpus_delta`` the change in GPUs
    used."""

    plan: Plan
    current_prefill: Side
    current_decode: Side
    start: tuple[Move, ...]
    stop: tuple[Move, ...]
    cost: float
    gpus_delta: int
    move_cost: MoveCost

    @property
    def changed(self) -> bool:
        return bool(self.start or self.stop)

    @property
    def gpus_started(self) -> int:
        return sum(m.gpus for m in self.start)

    @property
    def gpus_stopped(self) -> int:
        return sum(m.gpus for m in self.stop)

    @property
    def instances_started(self) -> int:
        return sum(m.instances for m in self.start)

    @property
    def instances_stopped(self) -> int:
        return sum(m.instances for m in self.stop)

    @property
    def current_gpus(self) -> int:
        return self.current_prefill.gpus + self.current_decode.gpus

    def summary(self) -> str:
        """One line: ``stop ... ; start ... -> plan`` (``no change`` when nothing moves)."""

        def moves(ms: tuple[Move, ...]) -> str:
            return ", ".join(f"{m.instances}x {m.role} tp={m.tp}" for m in ms)

        p = self.plan
        parts = []
        if self.stop:
            parts.append(f"stop {moves(self.stop)}")
        if self.start:
            parts.append(f"start {moves(self.start)}")
        what = "; ".join(parts) if parts else "no change"
        return (
            f"{what} -> {p.prefill.instances}x P{p.prefill.tp} + {p.decode.instances}x "
            f"D{p.decode.tp} = {p.gpus_used} GPUs ({self.gpus_delta:+d}), "
            f"{p.requests_per_s:.2f} req/s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "current": {
                "prefill": self.current_prefill.to_dict(),
                "decode": self.current_decode.to_dict(),
                "gpus_used": self.current_gpus,
            },
            "start": [m.to_dict() for m in self.start],
            "stop": [m.to_dict() for m in self.stop],
            "changed": self.changed,
            "cost": self.cost,
            "gpus_delta": self.gpus_delta,
            "gpus_started": self.gpus_started,
            "gpus_stopped": self.gpus_stopped,
            "instances_started": self.instances_started,
            "instances_stopped": self.instances_stopped,
            "move_cost": self.move_cost.to_dict(),
        }


@dataclass(frozen=True)
class _Current:
    model: Any
    gpu: str | None
    connector: str | None
    workload: Any
    prefill: Side
    decode: Side


def _count(where: str, value: Any, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not minimum <= v <= maximum:
        raise InvalidArgumentError(f"{where} must be in [{minimum}, {maximum}], got {v}")
    return v


def _side_of(current: Mapping[str, Any], role: str) -> Side:
    nested = current.get(role)
    flat_keys = (f"{role}_tp", f"{role}_instances")
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise TypeError(
                f"current[{role!r}] must be a dict with 'tp' and 'instances', got "
                f"{type(nested).__name__}"
            )
        for k in ("tp", "instances"):
            if k not in nested:
                raise InvalidArgumentError(f"current[{role!r}] is missing {k!r}")
        tp, n = nested["tp"], nested["instances"]
        where = f"current[{role!r}]"
        tp_field, n_field = f"{where}['tp']", f"{where}['instances']"
    else:
        missing = [k for k in flat_keys if k not in current]
        if missing:
            raise InvalidArgumentError(
                f"current is missing {role!r} (a dict with 'tp' and 'instances') or "
                f"{' and '.join(repr(k) for k in missing)}"
            )
        tp, n = current[flat_keys[0]], current[flat_keys[1]]
        tp_field, n_field = f"current[{flat_keys[0]!r}]", f"current[{flat_keys[1]!r}]"
    return Side(
        positive_int(tp_field, tp, maximum=MAX_TP),
        _count(n_field, n, minimum=0, maximum=MAX_INSTANCES),
    )


def _current(current: Any, model: Any) -> _Current:
    if isinstance(current, Plan):
        return _Current(
            model if model is not None else current.model,
            current.gpu,
            current.connector,
            current.workload,
            current.prefill,
            current.decode,
        )
    if not isinstance(current, Mapping):
        raise TypeError(
            "current must be a pdtp.Plan or a dict ({'model', 'prefill': {'tp', 'instances'}, "
            f"'decode': {{...}}}} or flat prefill_tp/prefill_instances/...), got "
            f"{type(current).__name__}"
        )
    if model is None:
        model = current.get("model_id") or current.get("model")
        if model is None:
            raise InvalidArgumentError(
                "current is missing 'model' (a catalog name or HF id); or pass model="
            )
    gpu = current.get("gpu")
    connector = current.get("connector")
    for name, v in (("gpu", gpu), ("connector", connector)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"current[{name!r}] must be a string, got {type(v).__name__}")
    return _Current(
        model,
        gpu,
        connector,
        current.get("workload"),
        _side_of(current, "prefill"),
        _side_of(current, "decode"),
    )


def replan(
    current: Any,
    demand_rps: float,
    *,
    max_gpus: int,
    gpu: Any = None,
    workload: Any = None,
    connector: str | None = None,
    move_cost: Any = None,
    model: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
) -> Replan:
    """A plan serving ``demand_rps`` within ``max_gpus`` that disturbs ``current`` least.

    ``current`` is a :class:`pdtp.Plan` or a dict with the same fields — ``model``,
    ``prefill: {"tp", "instances"}`` and ``decode: {...}`` (``Plan.to_dict()`` works), or
    flat ``prefill_tp`` / ``prefill_instances`` / ``decode_tp`` / ``decode_instances`` —
    and optionally ``gpu``, ``connector`` and ``workload``, which ``gpu`` / ``connector`` /
    ``workload`` default to (then to ``solve``'s defaults). Instance counts may be 0 (a
    side not yet deployed). When the GPU type or connector changes, every current
    instance is stopped. ``model`` overrides the model ``current`` names (pass the
    ``pdtp.Model`` when the plan came from a custom config rather than the catalog).

    The cost is GPUs started and stopped, weighted by ``move_cost`` (a :class:`MoveCost`
    or a dict of its fields): keeping a side's TP size and adding or removing instances
    moves only the difference; changing it restarts the side. Among plans that serve the
    demand (every valid pair, closed-form counts), the least ``cost + gpu · GPUs used``
    wins; ties go to fewer GPUs, then ``solve``'s order. Raises
    :class:`pdtp.InfeasibleError` when ``max_gpus`` cannot serve the demand.

    >>> import pdtp
    >>> now = {"model": "llama-3.1-70b", "gpu": "mi300x",
    ...        "prefill": {"tp": 2, "instances": 2}, "decode": {"tp": 2, "instances": 1}}
    >>> r = pdtp.replan(now, 12.0, max_gpus=64)
    >>> r.plan.requests_per_s >= 12.0, [m.role for m in r.stop]
    (True, [])
    """
    cur = _current(current, model)
    demand = demand_value("demand_rps", demand_rps)
    weights = _move_cost(move_cost)
    target_gpu = gpu if gpu is not None else (cur.gpu or DEFAULT_GPU)
    target_conn = connector if connector is not None else (cur.connector or "moriio")
    table = candidate_table(
        cur.model,
        gpus=max_gpus,
        gpu=target_gpu,
        workload=workload if workload is not None else cur.workload,
        connector=target_conn,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        budget_field="max_gpus",
    )
    # A different GPU type or connector shares nothing with the running instances.
    same_fleet = _same_name(cur.gpu, table.ctx.gpu.name, "gpu") and _same_name(
        cur.connector, table.connector.name, "connector"
    )
    if not table.pairs:
        raise table.infeasible()
    best = _best_move(table, demand, cur, weights, same_fleet)
    if best is None:
        raise table.demand_infeasible(demand)
    p, np_, d, nd = best
    plan = table.plan(
        p, np_, d, nd, method="replan", rejected=table.rejected_note(p, np_, d, nd, demand)
    )
    start: list[Move] = []
    stop: list[Move] = []
    cost = 0.0
    for role, old, tp, n in (("prefill", cur.prefill, p, np_), ("decode", cur.decode, d, nd)):
        keep = same_fleet and old.tp == tp
        if keep:
            if n > old.instances:
                start.append(Move(role, tp, n - old.instances))
            elif n < old.instances:
                stop.append(Move(role, tp, old.instances - n))
        else:
            if old.instances:
                stop.append(Move(role, old.tp, old.instances))
            start.append(Move(role, tp, n))
        cost += _side_cost(weights, old, tp, n, keep)
    return Replan(
        plan=plan,
        current_prefill=cur.prefill,
        current_decode=cur.decode,
        start=tuple(start),
        stop=tuple(stop),
        cost=cost,
        gpus_delta=plan.gpus_used - cur.prefill.gpus - cur.decode.gpus,
        move_cost=weights,
    )


def _same_name(current: str | None, target: str, kind: str) -> bool:
    if current is None:
        return True
    if kind == "gpu":
        from .catalog import gpu as find_gpu

        try:
            return find_gpu(current).name == target
        except LookupError:
            return False
    from .connectors import resolve_connector

    try:
        return resolve_connector(current).name == target
    except LookupError:
        return False


def _side_cost(w: MoveCost, old: Side, tp: int, n: int, keep: bool) -> float:
    """Disruption of one side: GPUs started and stopped (weighted)."""
    if keep:
        if n >= old.instances:
            return w.start * tp * (n - old.instances)
        return w.stop * tp * (old.instances - n)
    return (w.stop + w.restart) * old.gpus + w.start * tp * n


def _best_move(
    table: CandidateTable, demand: float, cur: _Current, w: MoveCost, same_fleet: bool
) -> tuple[int, int, int, int] | None:
    budget = table.budget
    best: tuple[Any, ...] | None = None
    # Keeping spare instances only pays when holding a GPU costs less than stopping it.
    sticky = w.gpu < w.stop
    for p, d in table.pairs:
        np_min, nd_min = table.fewest(p, d, demand)
        if p * np_min + d * nd_min > budget:
            continue
        keep_p = same_fleet and cur.prefill.tp == p
        keep_d = same_fleet and cur.decode.tp == d
        np_hi = max(np_min, cur.prefill.instances) if keep_p and sticky else np_min
        nd_want = max(nd_min, cur.decode.instances) if keep_d and sticky else nd_min
        for np_ in range(np_min, np_hi + 1):
            room = (budget - p * np_) // d
            if room < nd_min:
                break
            # The decode side's cost is convex in its count: the best count is its
            # unconstrained optimum clamped to the room the budget leaves.
            nd = min(nd_want, room)
            used = p * np_ + d * nd
            cost = (
                _side_cost(w, cur.prefill, p, np_, keep_p)
                + _side_cost(w, cur.decode, d, nd, keep_d)
                + w.gpu * used
            )
            served = table.served(p, np_, d, nd)
            key = (round(cost, 9), used, -served, p + d, p, np_ + nd, np_, d, nd)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    p, np_, d, nd = best[4], best[6], best[7], best[8]
    return p, np_, d, nd
