"""Every port a deployment binds, derived the way vLLM derives it, proven disjoint per node.

An instance is given a few base ports in its launch; each of its ranks then binds ports vLLM
derives from them:

- the HTTP API server binds ``--port`` (once per instance);
- the KV connector's ranks bind the ports its module in ``deployment/connectors/`` derives
  (MoRIIO: handshake and notify per (DP rank, TP rank) at ``dp_rank + tp_rank``; NIXL: one
  side channel per engine, per TP rank in vLLM 0.11.0).

So each port family gets ``base + the instance's first device number on its node``: every
offset above is smaller than the instance's device count (``dp + tp − 1 ≤ dp · tp``), so an
instance's ports stay inside its own device span and instances sharing a node never meet —
whatever their TP sizes. :func:`check_disjoint` proves it for every deployment anyway, rank by
rank. Ports vLLM picks itself (``get_open_port()``: MoRIIO's ``local_kv_port`` and
``local_ping_port``, engine-internal sockets) come from the OS's ephemeral range (Linux:
32768-60999), so the fixed ports stay below it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields, replace
from typing import Any

from .._validate import short_repr
from ..errors import ArgumentTypeError, InvalidArgumentError
from .adapter import PlannedInstance
from .connectors import connector_of, port_offset
from .versions import Version

__all__ = [
    "BoundPort",
    "InstancePorts",
    "PortBases",
    "bound_ports",
    "check_disjoint",
    "instance_bound_ports",
    "instance_ports",
    "port_offset",
    "proxy_bound_ports",
]

EPHEMERAL_START = 32768
# vLLM's example bases leave 200 ports between families (MoRIIO handshake 6300, notify 6500).
SPREAD_ABOVE = 200


@dataclass(frozen=True)
class PortBases:
    """First port of each family; an instance adds its first device number on its node.
    ``proxy_http`` / ``proxy_discovery`` are the proxy's HTTP port and MoRIIO's registration
    (``proxy_ping_port``) port, vLLM's example defaults."""

    http: int = 8100
    moriio_handshake: int = 6300
    moriio_notify: int = 6500
    nixl_side_channel: int = 5600
    proxy_http: int = 10001
    proxy_discovery: int = 36367

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if (
                isinstance(v, bool)
                or not isinstance(v, numbers.Integral)
                or not 1024 <= int(v) <= 65535
            ):
                raise InvalidArgumentError(
                    f"ports.{f.name} must be an integer in [1024, 65535], got {short_repr(v)}"
                )
            object.__setattr__(self, f.name, int(v))  # a numpy int must still write as JSON

    @classmethod
    def for_node(cls, gpus_per_node: int) -> PortBases:
        """The default bases for nodes of ``gpus_per_node`` GPUs: vLLM's example ports up to
        200 GPUs a node (each family spans one port per GPU); on larger nodes the families
        are laid out one node-width apart from 1100, so none overlaps another (and all stay
        below the ephemeral range, up to the 1,024 GPUs a node pdtp accepts)."""
        if gpus_per_node <= SPREAD_ABOVE:
            return cls()
        s = gpus_per_node
        return cls(
            nixl_side_channel=1100,
            moriio_handshake=1100 + s,
            moriio_notify=1100 + 2 * s,
            http=1100 + 3 * s,
        )

    @classmethod
    def of(cls, value: Any, gpus_per_node: int = 8) -> PortBases:
        """``value`` (None, a :class:`PortBases` or a dict of some fields) as bases; fields
        not given take :meth:`for_node`'s defaults."""
        if value is None:
            return cls.for_node(gpus_per_node)
        if isinstance(value, PortBases):
            return value
        if isinstance(value, dict):
            allowed = [f.name for f in fields(cls)]
            unknown = sorted(set(map(str, value)) - set(allowed))
            if unknown:
                raise InvalidArgumentError(
                    f"ports has unknown field(s) {unknown}; allowed: {', '.join(allowed)}"
                )
            return replace(cls.for_node(gpus_per_node), **value)
        raise ArgumentTypeError(
            f"ports must be a pdtp.deployment.PortBases or a dict, got {type(value).__name__}"
        )


@dataclass(frozen=True)
class InstancePorts:
    """The ports written into one instance's launch; vLLM derives each rank's from them."""

    http: int
    handshake: int | None = None  # MoRIIO kv_connector_extra_config.handshake_port
    notify: int | None = None  # MoRIIO kv_connector_extra_config.notify_port
    side_channel: int | None = None  # NIXL VLLM_NIXL_SIDE_CHANNEL_PORT

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}


@dataclass(frozen=True)
class BoundPort:
    """One port one process binds: ``owner`` (an instance name or ``"proxy"``) and why."""

    port: int
    owner: str
    purpose: str

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "owner": self.owner, "purpose": self.purpose}


def instance_bound_ports(
    version: Version, kv_connector: str, inst: PlannedInstance, ports: InstancePorts
) -> list[BoundPort]:
    """:func:`bound_ports` of one planned instance (one node of it): an aggregated instance
    binds its HTTP port only; the first node of an instance spanning nodes also binds its
    DP coordinator (``--data-parallel-rpc-port``) or rendezvous (``--master-port``) port."""
    from .launch import DP_RPC_PORT_BASE, MASTER_PORT_BASE

    out = bound_ports(
        version,
        None if inst.aggregated else kv_connector,
        inst.name,
        ports,
        inst.tp,
        inst.dp,
        dp_ranks=inst.local_dp_ranks,
        api=inst.serves_api,
    )
    if inst.parts > 1 and inst.part == 0:
        slot = min(inst.devices)
        if inst.dp > 1:
            out.append(BoundPort(DP_RPC_PORT_BASE + slot, inst.name, "DP coordinator"))
        else:
            out.append(BoundPort(MASTER_PORT_BASE + slot, inst.name, "rendezvous"))
    return out


def instance_ports(kv_connector: str, inst: PlannedInstance, bases: PortBases) -> InstancePorts:
    """The base ports of ``inst``: each family's base plus the instance's first device number
    (unique on its node); an aggregated instance has its HTTP port only."""
    slot = min(inst.devices)
    if inst.aggregated:
        return InstancePorts(http=bases.http + slot)
    return InstancePorts(
        http=bases.http + slot, **connector_of(kv_connector).instance_ports(bases, slot)
    )


def bound_ports(
    version: Version,
    kv_connector: str | None,
    owner: str,
    ports: InstancePorts,
    tp: int,
    dp: int,
    *,
    dp_ranks: range | None = None,
    api: bool = True,
) -> list[BoundPort]:
    """Every port the instance's processes on one node bind, rank by rank, as ``version``
    derives them: its ``dp_ranks`` (default all ``dp``; a headless part of an instance
    spanning nodes binds only its own DP ranks' ports, and no HTTP API: ``api=False``).
    ``kv_connector`` None: no connector (an aggregated instance)."""
    out = [BoundPort(ports.http, owner, "HTTP API (--port)")] if api else []
    dps = range(dp) if dp_ranks is None else dp_ranks
    if kv_connector is not None:
        conn = connector_of(kv_connector)
        for port, purpose in conn.bound_ports(version, owner, ports, tp, dp, dps):
            out.append(BoundPort(port, owner, purpose))
    return out


def proxy_bound_ports(kv_connector: str | None, bases: PortBases) -> list[BoundPort]:
    out = [BoundPort(bases.proxy_http, "proxy", "proxy HTTP API")]
    if kv_connector is not None:
        for port, purpose in connector_of(kv_connector).proxy_ports(bases):
            out.append(BoundPort(port, "proxy", purpose))
    return out


def check_disjoint(where: str, bound: list[BoundPort]) -> None:
    """Raise when two binds on one host share a port (naming both), or when an instance port
    is outside [1024, 32767] (vLLM's own ports come from the ephemeral range above)."""
    seen: dict[int, BoundPort] = {}
    for b in bound:
        if b.owner != "proxy" and not 1024 <= b.port < EPHEMERAL_START:
            raise InvalidArgumentError(
                f"{where}: {b.owner}'s {b.purpose} would use port {b.port}, outside [1024, "
                f"{EPHEMERAL_START - 1}] (ports above are the OS's ephemeral range, where vLLM "
                "picks its own); lower the port bases (ports=...)"
            )
        other = seen.get(b.port)
        if other is not None:
            raise InvalidArgumentError(
                f"{where}: port {b.port} is bound twice: {other.owner}'s {other.purpose} and "
                f"{b.owner}'s {b.purpose}; spread the port bases (ports=...) further apart"
            )
        seen[b.port] = b
