"""From one deployed plan to another with the fewest instance moves: which instances to stop,
which to start (with their launch lines), which keep running.

An old instance keeps running when the new plan still needs an instance of its role and TP
size and would launch it exactly as it runs (same host, devices, ports, model, vLLM release,
connector, mode, backend, proxy); otherwise it stops. New instances go on the GPUs left free
(first fit, node by node), so nothing that keeps running moves — unlike deploying the new plan
from scratch, whose first-fit placement may shift instances. ``target`` is the resulting
deployment (its scripts describe the steady state).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._validate import public_api
from ..errors import InvalidArgumentError
from .adapter import PlannedInstance, PlanView, view_of
from .build import DeployedInstance, Deployment, HostsNeededError, K8sOptions, build
from .scripts import _comment


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

    @property
    def changed(self) -> bool:
        return bool(self.stop or self.start)

    @property
    def restart_proxy(self) -> str:
        """Why the proxy must restart with the target's command ('' when it need not):
        NIXL's proxy takes a fixed instance list; MoRIIO's never forgets a registration."""
        if not self.changed:
            return ""
        if self.target.view.kv_connector != "MoRIIOConnector":
            return "vLLM's NIXL proxy only knows the instances it was started with"
        if self.stop:
            return "vLLM's MoRIIO proxy keeps routing to instances that stopped"
        if self.old.proxy != self.target.proxy:
            return "the proxy's command changes"
        return ""

    def _where(self, i: DeployedInstance) -> str:
        return f"node {i.node} ({i.host})" if self.hosts_known else f"node {i.node}"

    def summary(self) -> str:
        def names(xs: tuple[DeployedInstance, ...]) -> str:
            return ", ".join(f"{i.name}@{self._where(i)}" for i in xs) or "none"

        return (
            f"stop {len(self.stop)} ({names(self.stop)}); start {len(self.start)} "
            f"({names(self.start)}); keep {len(self.keep)}"
        )

    def text(self, commands: bool = True) -> str:
        """Human-readable: the instances to stop, then those to start with their launch lines
        (unless ``commands`` is False)."""
        out = [f"deploy diff: {self.summary()}"]
        out.append("\nstop:" if self.stop else "\nstop: nothing")
        for i in self.stop:
            out.append(
                f"  {i.name} on {self._where(i)}, GPUs {','.join(map(str, i.devices))}, "
                f"HTTP port {i.ports.http}"
            )
        out.append("\nstart:" if self.start else "\nstart: nothing")
        for i in self.start:
            out.append(
                f"  # {i.name} ({_layout_name(i)}) on {self._where(i)}, GPUs "
                f"{','.join(map(str, i.devices))}"
            )
            if self.hosts_known and commands:
                out.append(f"  {i.launch.command}")
        if self.start and commands and not self.hosts_known:
            out.append("  (give --node-hosts / node_hosts for the launch lines)")
        if self.restart_proxy:
            out.append(
                f"\nthen restart the proxy on {self.target.proxy.host} "
                f"({self.restart_proxy}): bash proxy.sh of the target deployment"
            )
        return "\n".join(out)

    def start_scripts(self) -> dict[str, str]:
        """``start-node-N.sh`` for each node with instances to start (like ``node-N.sh``)."""
        from .scripts import node_script

        out = {}
        started = {i.name for i in self.start}
        for node in sorted({i.node for i in self.start}):
            only = replace(
                self.target,
                instances=tuple(i for i in self.target.instances if i.name in started),
            )
            text = node_script(only, node).replace(
                "#!/usr/bin/env bash\n",
                "#!/usr/bin/env bash\n"
                + _comment("Starts only the instances this change adds to the node.")
                + "\n",
                1,
            )
            out[f"start-node-{node}.sh"] = text
        return out

    def to_dict(self) -> dict[str, Any]:
        start = [i.to_dict() if self.hosts_known else _brief(i, False) for i in self.start]
        return {
            "changed": self.changed,
            "hosts_known": self.hosts_known,
            "stop": [_brief(i, self.hosts_known) for i in self.stop],
            "start": start,
            "keep": [_brief(i, self.hosts_known) for i in self.keep],
            "restart_proxy": self.restart_proxy or None,
            "proxy": self.target.proxy.to_dict(),
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
        "http_port": i.ports.http,
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
) -> DeployDiff:
    """The moves from ``old`` (a plan as :func:`pdtp.deploy` deployed it) to ``new``; both
    are :class:`pdtp.Plan` objects or their JSON dicts, deployed with the same options.
    ``need_hosts=False`` accepts a multi-node plan without host addresses: the diff then
    names nodes by number and carries no launch lines (``hosts_known`` is False).

    >>> import pdtp
    >>> small = pdtp.solve("llama-3.1-70b", gpus=8, gpu="mi300x")
    >>> big = pdtp.replan(small, 2 * small.requests_per_s, max_gpus=16).plan
    >>> d = pdtp.deploy_diff(small, big, node_hosts=["10.0.0.1", "10.0.0.2"], backend="rdma")
    >>> len(d.stop), len(d.start) > 0, len(d.keep)
    (0, True, 4)
    """
    opts: dict[str, Any] = dict(
        node_hosts=node_hosts,
        hosts_file=hosts_file,
        proxy_host=proxy_host,
        vllm_version=vllm_version,
        ports=ports,
        backend=backend,
        k8s=K8sOptions(),
    )
    old_view, new_view = view_of(old), view_of(new)
    try:
        return _diff(old_view, new_view, opts, hosts_known=True)
    except HostsNeededError:
        if need_hosts or node_hosts is not None or hosts_file is not None:
            raise
    # Stand-in names, one per node any placement could use; never shown as hosts.
    most = old_view.nodes + len(new_view.instances)
    opts["node_hosts"] = [f"node{n}" for n in range(most)]
    return _diff(old_view, new_view, opts, hosts_known=False)


def _diff(
    old_view: PlanView, new_view: PlanView, opts: dict[str, Any], *, hosts_known: bool
) -> DeployDiff:
    before = build(old_view, old_view.instances, require_both=False, **opts)
    placed = _sticky(old_view, new_view, before)
    target = build(new_view, placed, **opts)
    kept = {i.name for i in target.instances} & {i.name for i in before.instances}
    same = {
        n
        for n in kept
        if _instance(before, n).launch == _instance(target, n).launch
        and _instance(before, n).host == _instance(target, n).host
    }
    if same != kept:  # a kept position launches differently (e.g. the backend changed)
        placed = _sticky(old_view, new_view, before, keep_none=True)
        target = build(new_view, placed, **opts)
        same = set()
    return DeployDiff(
        old=before,
        target=target,
        stop=tuple(i for i in before.instances if i.name not in same),
        start=tuple(i for i in target.instances if i.name not in same),
        keep=tuple(i for i in target.instances if i.name in same),
        hosts_known=hosts_known,
    )


def replan_diff(r: Any, current: Any = None, **options: Any) -> DeployDiff:
    """The instance moves of a :class:`pdtp.Replan` ``r``: from the current deployment (as
    :func:`pdtp.deploy` placed ``r``'s current instance counts; ``current`` is what was passed
    to :func:`pdtp.replan`, for its GPU type, connector and launch settings) to ``r.plan``.
    ``options`` as for :func:`pdtp.deploy_diff`."""
    base = r.plan.to_dict()
    old = {
        **base,
        "prefill": r.current_prefill.to_dict(),
        "decode": r.current_decode.to_dict(),
    }
    old.pop("placement", None)  # the new plan's; the current counts are placed afresh
    if isinstance(current, Mapping):
        given = {k: current[k] for k in _LAUNCH_KEYS if current.get(k) is not None}
        if given.get("gpu", base["gpu"]) != base["gpu"]:
            old.pop("gpus_per_node", None)  # the old GPU type's own node size
        if given.get("connector", base["connector"]) != base["connector"]:
            for k in ("kv_connector", "prefill_role", "decode_role"):
                old.pop(k, None)
        old.update(given)
    elif current is not None and hasattr(current, "to_dict"):
        old = {**current.to_dict(), "prefill": old["prefill"], "decode": old["decode"]}
    return deploy_diff(old, r.plan, **options)


# The fields of a plan's JSON that shape its launch lines.
_LAUNCH_KEYS = (
    "model_id",
    "gpu",
    "connector",
    "gpus_per_node",
    "gpu_memory_utilization",
    "kv_dtype",
    "kv_connector",
    "prefill_role",
    "decode_role",
    "vllm_version",
    "served_model_name",
)


def _instance(dep: Deployment, name: str) -> DeployedInstance:
    return next(i for i in dep.instances if i.name == name)


def _sticky(
    old: PlanView, new: PlanView, before: Deployment, keep_none: bool = False
) -> tuple[PlannedInstance, ...]:
    """The new plan's instances: old ones that still fit it stay put (same name, node and
    devices), the rest first-fit into the GPUs left free."""
    if new.gpus_per_node != old.gpus_per_node:
        keep_none = True  # another GPU type: nothing carries over
    if any(i.parts > 1 for i in (*new.instances, *(d.planned for d in before.instances))):
        # Instances spanning whole nodes: the planner's own placement of the new plan.
        return new.instances
    kept: list[PlannedInstance] = []
    if not keep_none and _same_launch_settings(old, new):
        for role in ("prefill", "decode"):
            want = sum(i.role == role for i in new.instances)
            layout = new.layout_of(role)
            olds = [
                i.planned for i in before.instances if i.role == role and i.planned.layout == layout
            ]
            kept += olds[:want]
    used: dict[int, set[int]] = {}
    for k in kept:
        used.setdefault(k.node, set()).update(k.devices)
    out = list(kept)
    for role in ("prefill", "decode"):
        want = sum(i.role == role for i in new.instances)
        have = sum(k.role == role for k in kept)
        taken = {k.index for k in kept if k.role == role}
        layout = new.layout_of(role)
        index = 0
        for _ in range(want - have):
            while index in taken:
                index += 1
            assert layout is not None
            node, devices = _first_fit(used, layout.gpus, new.gpus_per_node)
            used.setdefault(node, set()).update(devices)
            out.append(
                PlannedInstance(
                    role, index, node, devices, layout.tp, layout.dp, layout.pp, layout.ep
                )
            )
            taken.add(index)
    if not out:
        raise InvalidArgumentError("the new plan has no instances")
    return tuple(sorted(out, key=lambda i: (i.role != "prefill", i.index)))


def _same_launch_settings(old: PlanView, new: PlanView) -> bool:
    keys = (
        "model_ref",
        "served_model_name",
        "kv_connector",
        "prefill_role",
        "decode_role",
        "moriio_read_mode",
        "vllm_version",
        "vendor",
        "gpu_memory_utilization",
        "kv_dtype",
    )
    return all(getattr(old, k) == getattr(new, k) for k in keys)


def _first_fit(used: dict[int, set[int]], tp: int, per_node: int) -> tuple[int, tuple[int, ...]]:
    """``tp``: the instance's GPUs (tp × pp × dp), all on one node here."""
    if tp > per_node:
        raise InvalidArgumentError(
            f"an instance of {tp} GPUs cannot fit one node of {per_node} GPUs"
        )
    node = 0
    while True:
        busy = used.get(node, set())
        for start in range(0, per_node - tp + 1):
            block = set(range(start, start + tp))
            if not block & busy:
                return node, tuple(range(start, start + tp))
        node += 1
