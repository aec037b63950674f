"""From one deployed plan to another with the fewest instance moves: which instances to stop,
which to start (with their launch lines), which keep running.

An old instance keeps running when the new plan still needs an instance of its role and
layout and would launch it exactly as it runs (same host, devices, ports, model, engine release,
connector, mode, backend, proxy); otherwise it stops. An instance that spans nodes (DP or PP
over whole nodes) keeps or stops as a whole. New instances go where the planner placed them
when those GPUs are free, else on the GPUs left free (first fit; whole free nodes for one
that spans nodes), so nothing that keeps running moves — unlike deploying the new plan from
scratch, whose placement may shift instances. Another engine release, GPU type or model keeps
nothing. ``target`` is the resulting deployment (its scripts describe the steady state).

Every engine's plans move the same way: the placement is the plan's (engine-neutral), and
each side is built by the plan's engine (``pdtp.engine.ENGINES``: vLLM's ``vllm serve`` lines
and proxy, SGLang's ``sglang.launch_server`` lines and router), through the launch-line maker
``pdtp.deploy`` uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._validate import public_api
from ..engine import engine
from ..errors import InvalidArgumentError
from ..planning.plan import Plan
from .adapter import PlannedInstance, PlanView, view_of
from .build import DeployOptions
from .connectors import connector_of
from .hosts import HostsNeededError

# A deployment of any engine (vLLM's ``Deployment``, SGLang's ``SglangDeployment``) and one of
# its instances: what the diff reads of them is what both offer.
Deployment = Any
DeployedInstance = Any


@dataclass(frozen=True)
class DeployDiff:
    """``stop`` (from the old deployment), ``start`` and ``keep`` (in ``target``)."""

    old: Deployment
    target: Deployment
    stop: tuple[DeployedInstance, ...]
    start: tuple[DeployedInstance, ...]
    keep: tuple[DeployedInstance, ...]
    # False when no host addresses were given for a multi-node plan: instances are then named
    # by node number only, and no launch line is printed (it would need the addresses).
    hosts_known: bool = True
    #: Why every running instance restarts although the new plan has instances of its kind
    #: ('' when none does): another vLLM release, or a launch setting every instance shares
    #: changes (MoRIIO's backend from xgmi to rdma once instances span nodes).
    restart_all: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.stop or self.start)

    @property
    def restart_proxy(self) -> str:
        """Why what fronts the instances (vLLM's proxy, SGLang's router) must restart with the
        target's command ('' when it need not): NIXL's proxy and SGLang's router take a fixed
        instance list; MoRIIO's proxy never forgets a registration."""
        if not self.changed:
            return ""
        return str(self.target.restart_front(bool(self.stop), self.target.front_changes(self.old)))

    def _where(self, i: DeployedInstance) -> str:
        return f"node {i.node} ({i.host})" if self.hosts_known else f"node {i.node}"

    @property
    def instances_stopped(self) -> int:
        """Instances stopped (one that spans nodes counts once, whatever its parts)."""
        return len(_units_of(self.stop))

    @property
    def instances_started(self) -> int:
        return len(_units_of(self.start))

    @property
    def instances_kept(self) -> int:
        return len(_units_of(self.keep))

    def summary(self) -> str:
        def names(xs: tuple[DeployedInstance, ...]) -> str:
            return ", ".join(f"{i.name}@{self._where(i)}" for i in xs) or "none"

        return (
            f"stop {self.instances_stopped} ({names(self.stop)}); start "
            f"{self.instances_started} ({names(self.start)}); keep {self.instances_kept}"
        )

    def text(self, commands: bool = True) -> str:
        """Human-readable: the instances to stop, then those to start with their launch lines
        (unless ``commands`` is False)."""
        out = [f"deploy diff: {self.summary()}"]
        if self.restart_all:
            out.append(f"every running instance restarts: {self.restart_all}")
        out.append("\nstop:" if self.stop else "\nstop: nothing")
        for i in self.stop:
            out.append(
                f"  {i.name} on {self._where(i)}, GPUs {','.join(map(str, i.devices))}, "
                f"HTTP port {i.http_port}"
            )
        out.append("\nstart:" if self.start else "\nstart: nothing")
        for i in self.start:
            out.append(
                f"  # {i.name} ({_layout_name(i)}) on {self._where(i)}, GPUs "
                f"{','.join(map(str, i.devices))}"
            )
            if self.hosts_known and commands:
                out.append(f"  {i.command}")
        if self.start and commands and not self.hosts_known:
            out.append("  (give --node-hosts / node_hosts for the launch lines)")
        if self.restart_proxy:
            t = self.target
            out.append(
                f"\nthen restart the {t.front_name} on {t.front_host} "
                f"({self.restart_proxy}): bash {t.front_script} of the target deployment"
            )
        return "\n".join(out)

    def start_scripts(self) -> dict[str, str]:
        """``start-node-N.sh`` for each node with instances to start (like ``node-N.sh``)."""
        return dict(self.target.start_scripts({i.name for i in self.start}))

    def to_dict(self) -> dict[str, Any]:
        start = [i.to_dict() if self.hosts_known else _brief(i, False) for i in self.start]
        return {
            "changed": self.changed,
            "hosts_known": self.hosts_known,
            "stop": [_brief(i, self.hosts_known) for i in self.stop],
            "start": start,
            "keep": [_brief(i, self.hosts_known) for i in self.keep],
            "instances_stopped": self.instances_stopped,
            "instances_started": self.instances_started,
            "instances_kept": self.instances_kept,
            "restart_all": self.restart_all or None,
            "restart_proxy": self.restart_proxy or None,
            self.target.front_name: self.target.front_dict(),
        }


def _brief(i: DeployedInstance, hosts_known: bool) -> dict[str, Any]:
    return {
        "name": i.name,
        "role": i.role,
        "node": i.node,
        "host": i.host if hosts_known else None,
        "devices": list(i.devices),
        "tp": i.tp,
        "layout": str(i.planned.layout),
        "http_port": i.http_port,
    }


def _layout_name(i: DeployedInstance) -> str:
    """``tp=2`` for TP-only instances (today's wording), else the layout (``tp2dp4ep``)."""
    layout = i.planned.layout
    return f"tp={layout.tp}" if layout.is_tp_only else str(layout)


@public_api
def deploy_diff(
    old: Any,
    new: Any,
    *,
    node_hosts: Any = None,
    hosts_file: str | os.PathLike[str] | None = None,
    proxy_host: str | None = None,
    vllm_version: str | None = None,
    ports: Any = None,
    backend: str | None = None,
    need_hosts: bool = True,
    sglang_version: str | None = None,
) -> DeployDiff:
    """The moves from ``old`` (a plan as :func:`pdtp.deploy` deployed it) to ``new``; both
    are :class:`pdtp.Plan` objects or their JSON dicts, deployed with the same options.
    ``need_hosts=False`` accepts a multi-node plan without host addresses: the diff then
    names nodes by number and carries no launch lines (``hosts_known`` is False). Plans of
    every engine diff alike (``sglang_version`` as for :func:`pdtp.deploy`); a plan of another
    engine than the running one keeps nothing.

    >>> import pdtp
    >>> small = pdtp.solve("llama-3.1-70b", gpus=8, gpu="mi300x")
    >>> big = pdtp.replan(small, 2 * small.requests_per_s, max_gpus=16).plan
    >>> d = pdtp.deploy_diff(small, big, node_hosts=["10.0.0.1", "10.0.0.2"], backend="rdma")
    >>> len(d.stop), len(d.start) > 0, len(d.keep)
    (0, True, 4)
    """
    opts = DeployOptions(
        node_hosts=node_hosts,
        hosts_file=hosts_file,
        proxy_host=proxy_host,
        versions={"vllm_version": vllm_version, "sglang_version": sglang_version},
        ports=ports,
        backend=backend,
    )
    if isinstance(old, Mapping):
        old = Plan.from_dict(old)
    if isinstance(new, Mapping):
        new = Plan.from_dict(new)
    old_view, new_view = view_of(old), view_of(new)
    # Each role's GPU type: a two-type plan may move a role to the other type.
    types = (_types(old), _types(new))
    try:
        return _diff(old_view, new_view, opts, types, hosts_known=True)
    except HostsNeededError:
        if need_hosts or node_hosts is not None or hosts_file is not None:
            raise
    # Stand-in names, one per node any placement could use; never shown as hosts.
    most = max(old_view.nodes, new_view.nodes) + len(new_view.instances)
    opts = replace(opts, node_hosts=[f"node{n}" for n in range(most)])
    return _diff(old_view, new_view, opts, types, hosts_known=False)


def _types(plan: Any) -> dict[str, str | None]:
    """The GPU type of each role of a plan (None: not known apart from the plan's)."""
    sides = getattr(plan, "sides", ())
    return {role: side.gpu or getattr(plan, "gpu", None) for role, side in sides}


def _diff(
    old_view: PlanView,
    new_view: PlanView,
    opts: DeployOptions,
    types: tuple[dict[str, str | None], dict[str, str | None]],
    *,
    hosts_known: bool,
) -> DeployDiff:
    # Each side is built by its plan's engine, through the launch lines pdtp.deploy writes.
    old_engine, new_engine = engine(old_view.engine), engine(new_view.engine)
    sides = {old_view.engine, new_view.engine}
    before = old_engine.build(old_view, old_view.instances, _for(old_view, opts, sides),
                              require_both=False)  # fmt: skip
    placed = _sticky(old_view, new_view, before, types)
    target = new_engine.build(new_view, placed, _for(new_view, opts, sides))
    same = _launched_alike(before, target, placed)
    why = ""
    if same != _kept_units(placed, before):
        # A kept position launches differently (e.g. the backend changed): keep nothing.
        why = _why_all_restart(before, target)
        placed = _sticky(old_view, new_view, before, types, keep_none=True)
        target = new_engine.build(new_view, placed, _for(new_view, opts, sides))
        same = set()
    elif not same and before.instances and _same_kinds(before, target):
        why = _why_all_restart(before, target)
    return DeployDiff(
        restart_all=why,
        old=before,
        target=target,
        stop=tuple(i for i in before.instances if _unit(i) not in same),
        start=tuple(i for i in target.instances if _unit(i) not in same),
        keep=tuple(i for i in target.instances if _unit(i) in same),
        hosts_known=hosts_known,
    )


def _for(view: PlanView, opts: DeployOptions, engines: set[str]) -> DeployOptions:
    """The options as one side of the diff takes them: MoRIIO's ``backend`` is a P/D
    setting (aggregated instances move no KV), so a diff across modes drops it there; in a
    diff across ``engines`` a release keyword applies to the side of its engine (one of no
    side's engine stays, for that engine's deploy to refuse)."""
    from ..engine import ENGINES

    theirs = {e.version_option for e in ENGINES.values() if e.name in engines}
    own = engine(view.engine).version_option
    versions = {k: v for k, v in opts.versions.items() if k == own or k not in theirs}
    return replace(opts, backend=None if view.aggregated else opts.backend, versions=versions)


def _same_kinds(before: Deployment, target: Deployment) -> bool:
    """Whether the target runs some instance of a kind (role and layout) that runs now."""
    kinds = {(i.role, i.planned.layout) for i in before.instances}
    return any((i.role, i.planned.layout) in kinds for i in target.instances)


def _why_all_restart(before: Deployment, target: Deployment) -> str:
    if before.engine_label != target.engine_label:
        return f"{before.engine_label} {before.release} -> {target.engine_label} {target.release}"
    if before.release != target.release:
        return f"{before.engine_label} {before.release} -> {target.release}"
    if before.backend != target.backend:
        kv = connector_of(target.view.kv_connector)
        return kv.why_backend_restarts(before.backend, target.backend)
    a, b = before.view, target.view
    for key in ("model_ref", "served_model_name", "kv_connector", "read_mode", "gpu"):
        if getattr(a, key) != getattr(b, key):
            return f"the plan's {key} changes ({getattr(a, key)} -> {getattr(b, key)})"
    if a.gpu_memory_utilization != b.gpu_memory_utilization or a.kv_dtype != b.kv_dtype:
        return "the instances' memory settings (gpu_memory_utilization, kv_dtype) change"
    return "the instances would launch with other settings"


def _unit(i: Any) -> tuple[str, int]:
    """An instance as a whole: every part of one spanning nodes has its (role, index)."""
    return (i.role, i.index)


def _units_of(instances: Any) -> set[tuple[str, int]]:
    return {_unit(i) for i in instances}


def _kept_units(placed: tuple[PlannedInstance, ...], before: Deployment) -> set[tuple[str, int]]:
    """The instances ``_sticky`` kept: every part where it runs now (a new instance that
    only reuses an old one's name, e.g. in another layout, is not kept)."""
    olds = {i.planned for i in before.instances}
    parts: dict[tuple[str, int], list[bool]] = {}
    for p in placed:
        parts.setdefault(_unit(p), []).append(p in olds)
    counts: dict[tuple[str, int], int] = {}
    for o in before.instances:
        counts[_unit(o)] = counts.get(_unit(o), 0) + 1
    return {u for u, ok in parts.items() if all(ok) and counts.get(u) == len(ok)}


def _launched_alike(
    before: Deployment, target: Deployment, placed: tuple[PlannedInstance, ...]
) -> set[tuple[str, int]]:
    """The instances that run on as they are: same engine and release, and every part of the
    instance on the same host and devices with the same launch line."""
    if (before.engine_label, before.release) != (target.engine_label, target.release):
        return set()  # another release: every instance restarts on it
    old = {(i.role, i.index, i.planned.part): i for i in before.instances}
    parts: dict[tuple[str, int], list[bool]] = {}
    for i in target.instances:
        o = old.get((i.role, i.index, i.planned.part))
        alike = (
            o is not None
            and o.planned == i.planned
            and o.launch_key == i.launch_key
            and o.host == i.host
        )
        parts.setdefault(_unit(i), []).append(alike)
    olds: dict[tuple[str, int], int] = {}
    for o in before.instances:
        olds[_unit(o)] = olds.get(_unit(o), 0) + 1
    return {u for u, ok in parts.items() if all(ok) and olds.get(u) == len(ok)}


def replan_diff(r: Any, current: Any = None, **options: Any) -> DeployDiff:
    """The instance moves of a :class:`pdtp.Replan` ``r``: from the running deployment (its
    ``current`` plan, placed as it was when it carries a placement) to ``r.plan``: the
    instances replan keeps stay where they run. ``current`` defaults to ``r.current``;
    ``options`` as for :func:`pdtp.deploy_diff`."""
    old = current if current is not None and not isinstance(current, Mapping) else r.current
    if old is None:
        raise InvalidArgumentError("replan_diff needs the current plan (r.current is None)")
    return deploy_diff(old, r.plan, **options)


def _sticky(
    old: PlanView,
    new: PlanView,
    before: Deployment,
    types: tuple[dict[str, str | None], dict[str, str | None]] = ({}, {}),
    keep_none: bool = False,
) -> tuple[PlannedInstance, ...]:
    """The new plan's instances: old ones that still fit it stay put (same name, nodes and
    devices: whole instances, every part of one that spans nodes), the rest go where the
    planner placed them when that is free, else first fit into the GPUs left free."""
    if new.gpus_per_node != old.gpus_per_node or not _same_launch_settings(old, new):
        keep_none = True  # another GPU type, model or release: nothing carries over
    roles = list(dict.fromkeys(i.role for i in new.instances))
    old_units = _grouped(d.planned for d in before.instances)
    new_units = _grouped(new.instances)
    kept: list[list[PlannedInstance]] = []
    old_types, new_types = types
    if keep_none:
        return new.instances  # the planner's own placement of the new plan
    two_types = "+" in new.gpu
    if not keep_none:
        for role in roles:
            if old_types.get(role) != new_types.get(role):
                continue  # the role moves to another GPU type: its instances restart
            want = sum(1 for r, _ in new_units if r == role)
            layout = new.layout_of(role)
            olds = [u for (r, _), u in old_units.items() if r == role and u[0].layout == layout]
            kept += olds[:want]
    used: set[tuple[int, int]] = {(p.node, x) for u in kept for p in u for x in p.devices}
    out = [p for u in kept for p in u]
    for role in roles:
        layout = new.layout_of(role)
        assert layout is not None
        mine = [u for (r, _), u in new_units.items() if r == role]
        taken = {u[0].index for u in kept if u[0].role == role}
        index = 0
        for _ in range(len(mine) - len(taken)):
            while index in taken:
                index += 1
            spot = next((s for s in (_spot(u) for u in mine) if not used & _cells(s)), None)
            if spot is None and two_types:
                # Which nodes have which GPU type is the planner's: place as it did.
                return _sticky(old, new, before, types, keep_none=True)
            if spot is None:
                spot = _first_fit(used, layout.gpus, new.gpus_per_node)
            used |= _cells(spot)
            nodes = [n for n, _ in spot]
            for part, (node, devices) in enumerate(spot):
                out.append(
                    PlannedInstance(
                        role,
                        index,
                        node,
                        devices,
                        layout.tp,
                        layout.dp,
                        layout.pp,
                        layout.ep,
                        part,
                        len(spot),
                        nodes[0],
                    )
                )
            taken.add(index)
    if not out:
        raise InvalidArgumentError("the new plan has no instances")
    order = {r: k for k, r in enumerate(("prefill", "decode", "aggregated"))}
    return tuple(sorted(out, key=lambda i: (order.get(i.role, 3), i.index, i.part)))


# Where one instance runs: (node, devices) per part.
_Spot = tuple[tuple[int, tuple[int, ...]], ...]


def _grouped(instances: Any) -> dict[tuple[str, int], list[PlannedInstance]]:
    out: dict[tuple[str, int], list[PlannedInstance]] = {}
    for i in instances:
        out.setdefault(_unit(i), []).append(i)
    return {k: sorted(v, key=lambda p: p.part) for k, v in sorted(out.items())}


def _spot(parts: list[PlannedInstance]) -> _Spot:
    return tuple((p.node, tuple(p.devices)) for p in parts)


def _cells(spot: _Spot) -> set[tuple[int, int]]:
    return {(node, x) for node, devices in spot for x in devices}


def _same_launch_settings(old: PlanView, new: PlanView) -> bool:
    keys = (
        "model_ref",
        "served_model_name",
        "kv_connector",
        "prefill_role",
        "decode_role",
        "read_mode",
        "vllm_version",
        "engine",
        "engine_version",
        "vendor",
        "gpu_memory_utilization",
        "kv_dtype",
    )
    return all(getattr(old, k) == getattr(new, k) for k in keys)


def _first_fit(used: set[tuple[int, int]], gpus: int, per_node: int) -> _Spot:
    """The lowest free place for an instance of ``gpus`` GPUs: a block of one node, or
    whole free nodes for one that spans nodes (as vLLM's multi-node launch runs it)."""
    if gpus > per_node:
        if gpus % per_node:
            raise InvalidArgumentError(
                f"an instance of {gpus} GPUs spans whole nodes of {per_node} GPUs: {gpus} is "
                f"not a multiple of {per_node}"
            )
        busy = {n for n, _ in used}
        free: list[int] = []
        node = 0
        while len(free) < gpus // per_node:
            if node not in busy:
                free.append(node)
            node += 1
        return tuple((n, tuple(range(per_node))) for n in free)
    node = 0
    while True:
        for start in range(0, per_node - gpus + 1):
            block = tuple(range(start, start + gpus))
            if not any((node, x) in used for x in block):
                return ((node, block),)
        node += 1
