"""``pdtp.replan``: a plan for a new demand that moves as few instances as possible, with
the diff to apply (stop, then start). The same one model as ``solve`` decides, with the
re-plan's move cost as its objective."""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

from .._validate import MAX_TP, positive_int, public_api, short_repr
from .._version import parse_version
from ..connectors import NO_GPU_CONNECTOR
from ..errors import ArgumentTypeError, InfeasibleError, InvalidArgumentError
from ..layout import Layout
from ..perf import DEFAULT_GPU
from ..scenario import Scenario as PublicScenario
from ..scenario import SolverConfig, scenario_of, solver_of
from . import goodput, infeasible, plan, scenario
from .decide import candidates, decide
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
                raise ArgumentTypeError(
                    f"move_cost.{f.name} must be a number, got {type(v).__name__} {short_repr(v)}"
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
    raise ArgumentTypeError(
        f"move_cost must be a pdtp.MoveCost or a dict, got {type(value).__name__}"
    )


class _Move(NamedTuple):
    role: str
    tp: int
    instances: int


class Move(_Move):
    """``(role, tp, instances)``: that many instances of one kind (``"prefill"``,
    ``"decode"`` or ``"aggregated"``) with ``tp`` GPUs per TP group, started or stopped;
    ``layout`` is their whole layout (``pp``, ``dp``, ``ep`` as in :class:`pdtp.Layout`; TP
    only unless given). Unpacks as the 3-tuple."""

    _layout: Layout

    def __new__(cls, role: str, tp: int, instances: int, layout: Layout | None = None) -> Move:
        self = super().__new__(cls, role, tp, instances)
        self._layout = layout if layout is not None else Layout(tp)
        return self

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def gpus(self) -> int:
        return self.layout.gpus * self.instances

    @classmethod
    def of(cls, role: str, layout: Layout, instances: int) -> Move:
        return cls(role, layout.tp, instances, layout)

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "tp": self.tp,
            "instances": self.instances,
            "gpus": self.gpus,
            "layout": str(self.layout),
        }


@dataclass(frozen=True)
class Replan:
    """A re-plan: the new ``plan`` and the diff from ``current`` to it.

    ``start`` / ``stop`` list the instances to start and stop as :class:`Move` rows
    ``(role, tp, instances)``; stop first, then start, and the deployment is ``plan``. ``cost``
    is the weighted disruption (see :class:`MoveCost`); ``gpus_delta`` the change in GPUs
    used. ``current_prefill``/``current_decode`` are the running P/D sides (None when an
    aggregated deployment runs, ``current_aggregated``)."""

    plan: Plan
    current_prefill: Side | None
    current_decode: Side | None
    start: tuple[Move, ...]
    stop: tuple[Move, ...]
    cost: float
    gpus_delta: int
    move_cost: MoveCost
    current_aggregated: Side | None = None
    #: The running deployment as a :class:`pdtp.Plan` (read through ``Plan.from_dict``; its
    #: placement when it carried one): what :func:`pdtp.replan_diff` moves from.
    current: Plan | None = field(default=None, compare=False, repr=False)

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
    def current_sides(self) -> tuple[tuple[str, Side], ...]:
        sides = (
            ("prefill", self.current_prefill),
            ("decode", self.current_decode),
            ("aggregated", self.current_aggregated),
        )
        return tuple((role, s) for role, s in sides if s is not None)

    @property
    def current_gpus(self) -> int:
        return sum(s.gpus for _, s in self.current_sides)

    def summary(self) -> str:
        """One line: ``stop ... ; start ... -> plan`` (``no change`` when nothing moves)."""

        def name(m: Move) -> str:
            return f"tp={m.tp}" if m.layout.is_tp_only else str(m.layout)

        def moves(ms: tuple[Move, ...]) -> str:
            return ", ".join(f"{m.instances}x {m.role} {name(m)}" for m in ms)

        p = self.plan
        parts = []
        if self.stop:
            parts.append(f"stop {moves(self.stop)}")
        if self.start:
            parts.append(f"start {moves(self.start)}")
        what = "; ".join(parts) if parts else "no change"
        if p.prefill is not None and p.decode is not None:
            shape = (
                f"{p.prefill.instances}x P{p.prefill.layout} + "
                f"{p.decode.instances}x D{p.decode.layout}"
            )
            shape = (
                shape.replace("Ptp", "P").replace("Dtp", "D")
                if (p.prefill.layout.is_tp_only and p.decode.layout.is_tp_only)
                else shape
            )
        else:
            shape = p.summary()
        return (
            f"{what} -> {shape} = {p.gpus_used} GPUs ({self.gpus_delta:+d}), "
            f"{p.requests_per_s:.2f} req/s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "current": {
                **{role: s.to_dict() for role, s in self.current_sides},
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
    prefill: Side | None
    decode: Side | None
    aggregated: Side | None = None
    vllm_version: str | None = None

    def gpu_of(self, side: Side) -> str | None:
        return side.gpu or self.gpu

    @property
    def sides(self) -> tuple[tuple[str, Side], ...]:
        sides = (
            ("prefill", self.prefill),
            ("decode", self.decode),
            ("aggregated", self.aggregated),
        )
        return tuple((role, s) for role, s in sides if s is not None)


def _count(where: str, value: Any, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{where} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not minimum <= v <= maximum:
        raise InvalidArgumentError(f"{where} must be in [{minimum}, {maximum}], got {v}")
    return v


def _side_of(current: Mapping[str, Any], role: str) -> Side:
    nested = current.get(role)
    flat_keys = (f"{role}_tp", f"{role}_instances")
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise ArgumentTypeError(
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
            raise ArgumentTypeError(f"{where}['gpu'] must be a string, got {type(gpu).__name__}")
        if nested.get("layout") is not None:
            layout = Layout.of(nested["layout"], f"{where}['layout']")
            if layout.tp != tp:
                raise InvalidArgumentError(
                    f"{where}: layout {layout} has tp={layout.tp}, but 'tp' is {tp!r}"
                )
            return Side.of(layout, _count(n_field, n, minimum=0, maximum=MAX_INSTANCES), gpu)
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


# The flat form of a current deployment: ``prefill_tp``, ``prefill_instances``, ...
_FLAT = tuple(f"{r}_{k}" for r in ("prefill", "decode", "aggregated") for k in ("tp", "instances"))


def _current(current: Any, model: Any, gpu: Any, connector: Any) -> tuple[_Current, Plan]:
    """The running deployment: what replan weighs moves against, and the same as a
    :class:`Plan` (read by ``Plan.from_dict``, as every plan is) for the diff."""
    if isinstance(current, Plan):
        first = current.sides[0][1]
        cur = _Current(
            model if model is not None else current.resolved_model,
            first.gpu or current.gpu,
            current.connector,
            current.workload,
            current.prefill,
            current.decode,
            current.aggregated,
            current.vllm_version,
        )
        return cur, current
    if not isinstance(current, Mapping):
        raise ArgumentTypeError(
            "current must be a pdtp.Plan or a dict ({'model', 'prefill': {'tp', 'instances'}, "
            f"'decode': {{...}}}} or flat prefill_tp/prefill_instances/...), got "
            f"{type(current).__name__}"
        )
    named = model
    if named is None:
        named = current.get("model_id") or current.get("model")
        if named is None and current.get("model_spec") is None:
            raise InvalidArgumentError(
                "current is missing 'model' (a catalog name or HF id); or pass model="
            )
    cur_gpu = current.get("gpu")
    cur_conn = current.get("connector")
    version = current.get("vllm_version")
    for name, v in (("gpu", cur_gpu), ("connector", cur_conn), ("vllm_version", version)):
        if v is not None and not isinstance(v, str):
            raise ArgumentTypeError(f"current[{name!r}] must be a string, got {type(v).__name__}")
    if current.get("aggregated") is not None or current.get("serving") == "agg":
        if current.get("prefill") is not None or current.get("decode") is not None:
            raise InvalidArgumentError(
                "current runs aggregated instances or a P/D split, not both: give "
                "'aggregated' or 'prefill' and 'decode'"
            )
        sides = {"prefill": None, "decode": None, "aggregated": _side_of(current, "aggregated")}
    else:
        sides = {
            "prefill": _side_of(current, "prefill"),
            "decode": _side_of(current, "decode"),
            "aggregated": None,
        }
    # The same deployment as a plan: what it does not say is what replan assumes (the GPU
    # type and connector the new plan is made for).
    d = {k: v for k, v in current.items() if k not in _FLAT}
    d.update({r: s.to_dict() if s is not None else None for r, s in sides.items()})
    side_gpu = next((s.gpu for s in sides.values() if s is not None and s.gpu), None)
    d["gpu"] = cur_gpu or side_gpu or (gpu if isinstance(gpu, str) else DEFAULT_GPU)
    if cur_conn is None:
        d["connector"] = connector if isinstance(connector, str) else _default_connector(d["gpu"])
    # What runs is read as it is, even where the rules refuse it: replan moves away from it.
    read = Plan.from_dict(
        d, model=named if current.get("model_spec") is None else model, rules=False
    )
    cur = _Current(
        model if model is not None else read.resolved_model,
        cur_gpu,
        cur_conn,
        current.get("workload"),
        sides["prefill"],
        sides["decode"],
        sides["aggregated"],
        version,
    )
    return cur, read


def _default_connector(gpu: str) -> str:
    """The connector a deployment that names none runs: its GPUs' vendor's default."""
    from ..catalog import gpu as find_gpu
    from ..connectors import NO_GPU_VENDOR, default_connector
    from ..errors import UnknownNameError

    try:
        vendors = {find_gpu(g).vendor for g in gpu.split("+")}
    except UnknownNameError:
        vendors = {NO_GPU_VENDOR}  # Plan.from_dict names the unknown GPU
    return default_connector(vendors)[0]


@public_api
def replan(
    current: Any,
    demand_rps: Any = None,
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
    gpu_memory_utilization: float | None = None,
    time_limit_s: float | None = None,
    constants: Any = None,
    method: str | None = None,
    slo_percentile: float | None = None,
    mode: str | None = None,
    layouts: Any = None,
    solver: SolverConfig | None = None,
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

    ``demand_rps`` may be a :class:`pdtp.Scenario` (its ``gpus`` is ``max_gpus``; fields left
    None default to ``current``'s; the keywords given beside it replace its fields),
    ``solver`` a :class:`pdtp.SolverConfig`.

    ``gpu_memory_utilization`` defaults to the running instances' own (``current``'s; 0.9
    when it does not say), so a re-plan keeps what it can relaunch as it runs.

    ``slo_percentile=0.9``: the new plan's simulated goodput at p90 must serve the demand
    (verified by simulation; re-planned for a demand raised by the shortfall until it does;
    unlike ``size_for`` only the least-disruptive split is verified each round).
    ``current`` may run aggregated instances (``{"aggregated": {"tp", "instances"}}``) and
    any side may name its ``layout`` (``"tp2dp4ep"``); ``mode`` and ``layouts`` restrict the
    new plan as in :func:`pdtp.solve` (by default a P/D split may become aggregated
    instances or the other way, when that disturbs least).

    >>> import pdtp
    >>> now = {"model": "llama-3.1-70b", "gpu": "mi300x",
    ...        "prefill": {"tp": 2, "instances": 2}, "decode": {"tp": 2, "instances": 1}}
    >>> r = pdtp.replan(now, 12.0, max_gpus=64)
    >>> r.plan.requests_per_s >= 12.0, [m.role for m in r.stop]
    (True, [])
    """
    started = time.perf_counter()
    sc = scenario_of(
        demand_rps,
        first_field="demand_rps",
        budget_field="max_gpus",
        gpus=max_gpus,
        nodes=nodes,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        workload=workload,
        connector=connector,
        vllm_version=vllm_version,
        model=model,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
        slo_percentile=slo_percentile,
        mode=mode,
        layouts=layouts,
    )
    cfg = solver_of(solver, time_limit_s=time_limit_s, method=method)
    return replan_scenario(current, sc, cfg, move_cost=move_cost, started=started)


def replan_scenario(
    current: Any,
    sc: PublicScenario,
    cfg: SolverConfig,
    *,
    move_cost: Any = None,
    started: float | None = None,
) -> Replan:
    """:func:`replan` of a validated :class:`pdtp.Scenario` (its ``gpus`` is ``max_gpus``;
    fields left None default to ``current``'s)."""
    started = time.perf_counter() if started is None else started
    limit = cfg.time_limit_s
    method = cfg.method
    if sc.demand_rps is None:
        raise InvalidArgumentError("replan needs demand_rps= (requests/s to serve)")
    if sc.objective is not None:
        raise InvalidArgumentError(
            "replan's objective is the least disruption (move_cost): a scenario's objective "
            "does not apply (leave it None)"
        )
    demand = sc.demand_rps
    percentile = sc.slo_percentile
    if percentile is not None:
        on_means = sc.replace(slo_percentile=None)

        def replan_for(d: float) -> Replan:
            r = replan_scenario(
                current,
                on_means.replace(demand_rps=d),
                cfg,
                move_cost=move_cost,
                started=time.perf_counter(),
            )
            rate = goodput.goodput(r.plan, percentile, sc.constants)
            if rate < demand * (1 - 1e-9):
                raise goodput.ShortOfDemand(rate, r.plan.requests_per_s)
            return dataclasses.replace(r, plan=goodput.verified(r.plan, percentile, rate))

        return goodput.meet_demand(replan_for, demand, percentile, "max_gpus")
    gpu, connector, vllm_version = sc.gpu, sc.connector, sc.vllm_version
    model = sc._model
    cur, running_plan = _current(current, model, gpu, connector)
    # The running instances' own, unless told otherwise (None: they run at the engine's own
    # fraction per kind of instance, SGLang's, and so will the new ones).
    utilization: float | None = sc.utilization(running_plan.gpu_memory_utilization)
    if sc.gpu_memory_utilization is None and getattr(running_plan, "memory_fractions", None):
        utilization = None
    weights = _move_cost(move_cost)
    single = not isinstance(sc.gpus, Mapping) and not isinstance(sc.nodes, Mapping)
    target_gpu = (gpu if gpu is not None else (cur.gpu or DEFAULT_GPU)) if single else gpu
    target_conn = connector if connector is not None else (cur.connector or NO_GPU_CONNECTOR)
    pool = scenario.resolve_pool(
        sc.gpus, sc.nodes, target_gpu, sc.gpus_per_node, None, budget_field="max_gpus"
    )
    if vllm_version is None and isinstance(target_conn, str) and "@" not in target_conn:
        vllm_version = cur.vllm_version  # the running release, unless told otherwise
    conn, _ = scenario.resolve_connector_key(target_conn, vllm_version)
    # Another connector or vLLM release restarts every instance.
    same_connector = cur.connector is None or (
        _same_connector(cur.connector, conn.name)
        and (
            cur.vllm_version is None
            or parse_version(cur.vllm_version) == parse_version(conn.vllm_version)
        )
    )

    # A running side that names no GPU type runs on the one the pool is planned on.
    default_gpu = pool.names[0] if len(pool.types) == 1 else None

    def type_of(side: Side) -> int | None:
        return _type_index(pool, cur.gpu_of(side)) if same_connector else None

    def running(role: str, side: Side | None) -> tuple[int | None, str, Any, int]:
        if side is None:
            return (None, role, (1, 1, 1, False), 0)
        return (type_of(side), role, side.layout.core, side.instances)

    if cur.aggregated is not None:
        run = (running("aggregated", cur.aggregated), running("decode", None))
    else:
        run = (running("prefill", cur.prefill), running("decode", cur.decode))
    core = scenario.build_for(
        sc,
        pool,
        objective="moves",
        demand=demand,
        model=cur.model,
        workload=sc.workload if sc.workload is not None else cur.workload,
        connector=target_conn,
        vllm_version=vllm_version,
        gpu_memory_utilization=utilization,
        move_cost=(weights.start, weights.stop, weights.restart, weights.gpu),
        running=run,
    )
    cands = candidates(core, started, limit)
    if not cands.pair_count:
        raise infeasible.no_pair(core, cands, budget_field="max_gpus")
    decision = decide(cands, started=started, limit=limit, method=method)
    if decision.solution is None or decision.solution[0] is None:
        if decision.status == "INFEASIBLE":
            raise infeasible.demand_too_high(core, cands, demand)
        raise InfeasibleError(
            f"no plan found within time_limit_s={limit:g} (the search was cut short): raise "
            "time_limit_s"
        )
    new = plan.build(
        core,
        cands,
        decision,
        0,
        started=started,
        rejected=plan.rule_note(core, cands, decision.solution, demand),
    )
    # The diff, as the core's move cost counts it: a new kind of instance that a running
    # one has (same role, layout and GPU type) moves the difference; any other starts all
    # of its instances; a running kind not kept stops (and restarts) all of its own.
    start: list[Move] = []
    stop: list[Move] = []
    cost = 0.0
    kept: set[str] = set()
    for role, side in new.sides:
        old = next(
            (
                o
                for r, o in cur.sides
                if r == role
                and o.instances > 0
                and o.layout == side.layout
                and (t := type_of(o)) is not None
                and pool.names[t] == side.gpu
            ),
            None,
        )
        n = side.instances
        if old is not None:
            kept.add(role)
            if n > old.instances:
                start.append(Move.of(role, side.layout, n - old.instances))
                cost += weights.start * side.gpus_per_instance * (n - old.instances)
            elif n < old.instances:
                stop.append(Move.of(role, side.layout, old.instances - n))
                cost += weights.stop * side.gpus_per_instance * (old.instances - n)
        else:
            start.append(Move.of(role, side.layout, n))
            cost += weights.start * side.gpus
    for role, old in cur.sides:
        if role not in kept and old.instances:
            stop.append(Move.of(role, old.layout, old.instances))
            cost += (weights.stop + weights.restart) * old.gpus
    named = {role: _named(s, cur.gpu_of(s) or default_gpu) for role, s in cur.sides}
    return Replan(
        plan=new,
        current_prefill=named.get("prefill"),
        current_decode=named.get("decode"),
        current_aggregated=named.get("aggregated"),
        start=tuple(start),
        stop=tuple(stop),
        cost=cost,
        gpus_delta=new.gpus_used - sum(s.gpus for _, s in cur.sides),
        move_cost=weights,
        current=running_plan,
    )


def _named(side: Side, gpu: str | None) -> Side:
    if side.gpu is not None or gpu is None:
        return side
    from ..catalog import gpu as find_gpu

    try:
        return Side.of(side.layout, side.instances, find_gpu(gpu).name)
    except LookupError:
        return Side.of(side.layout, side.instances, gpu)


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
