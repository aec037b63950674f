"""``pdtp.replan``: a plan for a new demand that moves as few instances as possible, with
the diff to apply (stop, then start). The same one model as ``solve`` decides, with the
re-plan's move cost as its objective."""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

from .._validate import positive_int, positive_number
from ..check import MAX_TP
from ..errors import InfeasibleError, InvalidArgumentError
from ..perf import DEFAULT_GPU, DEFAULT_UTILIZATION
from . import goodput, infeasible, plan, scenario
from .decide import METHODS, decide
from .plan import Plan, Side

__all__ = ["Move", "MoveCost", "Replan", "replan"]

# Instance counts beyond this are not one deployment (same bound as pdtp.evaluate).
MAX_INSTANCES = 1 << 24


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
    Weights that are not binary fractions (0.5, 2, 3 are) are compared in steps of 1e-6 of
    the largest.
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
    vllm_version: str | None = None

    def gpu_of(self, side: Side) -> str | None:
        return side.gpu or self.gpu


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
        gpu = nested.get("gpu")
        if gpu is not None and not isinstance(gpu, str):
            raise TypeError(f"{where}['gpu'] must be a string, got {type(gpu).__name__}")
    else:
        gpu = None
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
        gpu,
    )


def _current(current: Any, model: Any) -> _Current:
    if isinstance(current, Plan):
        return _Current(
            model if model is not None else current.model,
            current.prefill.gpu or current.gpu,
            current.connector,
            current.workload,
            current.prefill,
            current.decode,
            current.vllm_version,
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
    version = current.get("vllm_version")
    for name, v in (("gpu", gpu), ("connector", connector), ("vllm_version", version)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"current[{name!r}] must be a string, got {type(v).__name__}")
    return _Current(
        model,
        gpu,
        connector,
        current.get("workload"),
        _side_of(current, "prefill"),
        _side_of(current, "decode"),
        version,
    )


def replan(
    current: Any,
    demand_rps: float,
    *,
    max_gpus: Any = None,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    connector: Any = None,
    vllm_version: str | None = None,
    move_cost: Any = None,
    model: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    time_limit_s: float = 10.0,
    constants: Any = None,
    method: str = "cpsat",
    slo_percentile: float | None = None,
) -> Replan:
    """A plan serving ``demand_rps`` on the pool (``max_gpus`` or ``nodes``, as in
    ``size_for``) that disturbs ``current`` least.

    ``current`` is a :class:`pdtp.Plan` or a dict with the same fields — ``model``, ``prefill:
    {"tp", "instances"}`` and ``decode: {...}`` (``Plan.to_dict()`` works), or flat
    ``prefill_tp`` / ``prefill_instances`` / ``decode_tp`` / ``decode_instances`` — and
    optionally ``gpu``, ``connector``, ``vllm_version`` and ``workload``, which ``gpu`` /
    ``connector`` / ``vllm_version`` / ``workload`` default to (then to ``solve``'s defaults).
    Instance counts may be 0 (a side not yet deployed). When the GPU type, connector or vLLM
    release changes, every current instance is stopped. ``model`` overrides the model
    ``current`` names (pass the ``pdtp.Model`` when the plan came from a custom config rather
    than the catalog).

    The cost is GPUs started and stopped, weighted by ``move_cost`` (a :class:`MoveCost`
    or a dict of its fields): keeping a side's TP size and adding or removing instances
    moves only the difference; changing it restarts the side. Among plans that serve the
    demand, the least ``cost + gpu · GPUs used`` wins; ties go to fewer GPUs, then
    ``solve``'s order. CP-SAT decides over the same model as ``solve``. Raises
    :class:`pdtp.InfeasibleError` when the pool cannot serve the demand.

    ``slo_percentile=0.9``: the new plan's simulated goodput at p90 must serve the demand
    (verified by simulation; re-planned for a demand raised by the shortfall until it does;
    unlike ``size_for`` only the least-disruptive split is verified each round).

    >>> import pdtp
    >>> now = {"model": "llama-3.1-70b", "gpu": "mi300x",
    ...        "prefill": {"tp": 2, "instances": 2}, "decode": {"tp": 2, "instances": 1}}
    >>> r = pdtp.replan(now, 12.0, max_gpus=64)
    >>> r.plan.requests_per_s >= 12.0, [m.role for m in r.stop]
    (True, [])
    """
    started = time.perf_counter()
    limit = positive_number("time_limit_s", time_limit_s)
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    percentile = goodput.percentile_value(slo_percentile)
    if percentile is not None:
        demand = scenario.demand_value("demand_rps", demand_rps)

        def replan_for(d: float) -> Replan:
            r = replan(
                current,
                d,
                max_gpus=max_gpus,
                nodes=nodes,
                gpu=gpu,
                gpus_per_node=gpus_per_node,
                workload=workload,
                connector=connector,
                vllm_version=vllm_version,
                move_cost=move_cost,
                model=model,
                max_tp=max_tp,
                max_acks=max_acks,
                gpu_memory_utilization=gpu_memory_utilization,
                time_limit_s=time_limit_s,
                constants=constants,
                method=method,
            )
            rate = goodput.goodput(r.plan, percentile, constants)
            if rate < demand * (1 - 1e-9):
                raise goodput.ShortOfDemand(rate, r.plan.requests_per_s)
            return dataclasses.replace(r, plan=goodput.verified(r.plan, percentile, rate))

        return goodput.meet_demand(replan_for, demand, percentile, "max_gpus")
    cur = _current(current, model)
    demand = scenario.demand_value("demand_rps", demand_rps)
    weights = _move_cost(move_cost)
    single = not isinstance(max_gpus, Mapping) and not isinstance(nodes, Mapping)
    target_gpu = (gpu if gpu is not None else (cur.gpu or DEFAULT_GPU)) if single else gpu
    target_conn = connector if connector is not None else (cur.connector or "moriio")
    pool = scenario.resolve_pool(
        max_gpus, nodes, target_gpu, gpus_per_node, None, budget_field="max_gpus"
    )
    if vllm_version is None and isinstance(target_conn, str) and "@" not in target_conn:
        vllm_version = cur.vllm_version  # the running release, unless told otherwise
    conn, _ = scenario.resolve_connector_key(target_conn, vllm_version)
    # Another connector or vLLM release restarts every instance.
    same_connector = cur.connector is None or (
        _same_connector(cur.connector, conn.name)
        and (cur.vllm_version is None or _release(cur.vllm_version) == _release(conn.vllm_version))
    )

    # A running side that names no GPU type runs on the one the pool is planned on.
    default_gpu = pool.names[0] if len(pool.types) == 1 else None

    def running(side: Side) -> tuple[int | None, int, int]:
        t = _type_index(pool, cur.gpu_of(side)) if same_connector else None
        return (t, side.tp, side.instances)

    sc = scenario.build(
        [(cur.model, workload if workload is not None else cur.workload, demand, 1.0, None)],
        pool,
        connector=target_conn,
        vllm_version=vllm_version,
        objective="moves",
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        move_cost=(weights.start, weights.stop, weights.restart, weights.gpu),
        running=(running(cur.prefill), running(cur.decode)),
    )
    from .. import _core

    cands = _core.candidates(sc.core)
    if not cands.pairs:
        raise infeasible.no_pair(sc, cands, budget_field="max_gpus")
    decision = decide(cands, started=started, limit=limit, method=method)
    if decision.solution is None or decision.solution[0] is None:
        if decision.status == "INFEASIBLE":
            raise infeasible.demand_too_high(sc, cands, demand)
        raise InfeasibleError(
            f"no plan found within time_limit_s={limit:g} (the search was cut short): raise "
            "time_limit_s"
        )
    new = plan.build(
        sc,
        cands,
        decision,
        0,
        started=started,
        rejected=plan.rule_note(sc, cands, decision.solution, demand),
    )
    start: list[Move] = []
    stop: list[Move] = []
    cost = 0.0
    for role, old, side in (
        ("prefill", cur.prefill, new.prefill),
        ("decode", cur.decode, new.decode),
    ):
        kept_type = running(old)[0]
        keep = kept_type is not None and pool.names[kept_type] == side.gpu and old.tp == side.tp
        tp, n = side.tp, side.instances
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
        plan=new,
        current_prefill=_named(cur.prefill, cur.gpu_of(cur.prefill) or default_gpu),
        current_decode=_named(cur.decode, cur.gpu_of(cur.decode) or default_gpu),
        start=tuple(start),
        stop=tuple(stop),
        cost=cost,
        gpus_delta=new.gpus_used - cur.prefill.gpus - cur.decode.gpus,
        move_cost=weights,
    )


def _named(side: Side, gpu: str | None) -> Side:
    if side.gpu is not None or gpu is None:
        return side
    from ..catalog import gpu as find_gpu

    try:
        return Side(side.tp, side.instances, find_gpu(gpu).name)
    except LookupError:
        return Side(side.tp, side.instances, gpu)


def _type_index(pool: scenario.Pool, name: str | None) -> int | None:
    """The pool's index of the running GPU type (None: not in the pool, nothing kept)."""
    if name is None:
        return 0 if len(pool.types) == 1 else None
    from ..catalog import gpu as find_gpu

    try:
        canonical = find_gpu(name).name
    except LookupError:
        return None
    return pool.names.index(canonical) if canonical in pool.names else None


def _same_connector(current: str, target: str) -> bool:
    from ..connectors import resolve_connector

    try:
        return resolve_connector(current).name == target
    except LookupError:
        return False


def _release(version: str) -> tuple[int, ...]:
    """``"0.33"`` and ``"0.33.0"`` name one release."""
    parts = [int(x) if x.isdigit() else -1 for x in version.strip().lstrip("v").split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _side_cost(w: MoveCost, old: Side, tp: int, n: int, keep: bool) -> float:
    """Disruption of one side: GPUs started and stopped (weighted)."""
    if keep:
        if n >= old.instances:
            return w.start * tp * (n - old.instances)
        return w.stop * tp * (old.instances - n)
    return (w.stop + w.restart) * old.gpus + w.start * tp * n
